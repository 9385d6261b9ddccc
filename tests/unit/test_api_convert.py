"""Conversions between Primus's records and the API's messages (primus/api/convert.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from google.rpc import code_pb2, error_details_pb2
from grpc_status import rpc_status
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from primus.api import convert
from primus.api.v1 import primus_pb2 as pb
from primus.cli.output import status_json, status_renderable
from primus.client.api import AppReport, AppSummary, HostReport
from primus.config.inventory import Host, SshSettings
from primus.config.loader import SpecError, load_job_spec
from primus.config.spec import JobSpec
from primus.state.keys import AppKeys
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppStatus,
    ClusterMember,
    ClusterSpec,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    KillRequest,
    PastAttempt,
    Preemption,
    ProcessRef,
    Reservation,
    StreamStats,
    SuspendRequest,
    Waiting,
)
from primus.state.states import AppState, ExecutorState
from primus.state.topology import TopologyChange
from primus.state.view import AppView, ExecutorView

T0 = 1_795_314_462.54
PROCESS = ProcessRef(host="h1", pid=14062, start_time=T0 - 1.25)

# Each record type with every field set, and with only what it requires.
FULL = [
    AppStatus(app_id="hello-20261122-022742-61f6", name="hello", state=AppState.FAILED,
              attempt=2, user="ana", submit_host="vm", submit_time=T0, start_time=T0 + 0.3,
              finish_time=T0 + 9.125, exit_code=3, diagnosis="worker-1 failed: exit 3"),
    AmLeader(am_id="vm:14052", host="vm", pid=14052, since=T0 + 0.26, log_file="/h/am.log",
             start_time=T0 - 0.74),
    KillRequest(time=T0 + 7, user="ana", reason="wrong data"),
    PROCESS,
    ExecutorPlan(role="worker", index=1, attempt=3, host="h1", address="10.0.0.1",
                 state=ExecutorState.LOST, launch_time=T0 + 0.33, release_time=T0 + 5,
                 exit_code=137, diagnosis="lease expired", process=PROCESS,
                 trainer=ProcessRef(host="h1", pid=14092, start_time=T0 - 0.12),
                 log_file="/h/worker-1.log", executor_log="/h/worker-1.executor.log",
                 app_attempt=2, failures=2, restarts=2, restart_at=T0 + 6.5,
                 past=[PastAttempt(attempt=1, host="h2", state=ExecutorState.FAILED,
                                   launch_time=T0, release_time=T0 + 0.2, exit_code=137,
                                   exit_class="OOM_KILLED"),
                       PastAttempt(attempt=2, host="h1", state=ExecutorState.LOST)]),
    ExecutorLive(attempt=3, host="h1", address="10.0.0.1", pid=14062, ports=[39431, 39432],
                 state=ExecutorState.RUNNING, registered_time=T0 + 0.9, trainer=PROCESS,
                 trainer_start_time=T0 + 0.95),
    ExecutorResult(attempt=3, exit_code=0, finish_time=T0 + 9.0, diagnosis="done"),
    ClusterSpec(attempt=2, version=3, master_addr="10.0.0.1", master_port=35729, members=[
        ClusterMember(role="chief", index=0, rank=0, address="10.0.0.1", ports=[35729]),
        ClusterMember(role="worker", index=0, rank=1, address="10.0.0.2", ports=[], attempt=4)]),
    ClusterMember(role="ps", index=2, rank=5, address="10.0.0.3", ports=[1, 65535], attempt=2),
    StreamStats(tasks=36, done=21, failed=1, records=14_100, bytes=2**40, exhausted=True,
                lag=12, lags={"clicks[0]": 5, "clicks[1]": 7}, epoch=2,
                readers={"worker-0": 10_000, "worker-1": 4_100}, readers_partial=True),
    AppEvent(seq=20, time=T0 + 1, kind="executor-state", message="worker-0 SUCCEEDED",
             role="worker", index=0),
    TopologyChange(seq=3, time=T0 + 2, user="ana", kind="add-source",
                   message="data source /d/*.txt (2 files) added to stream train",
                   role=None, stream="train"),
    Waiting(reason="queue gpu: 4 GPUs of 8 in use, the job needs 6", since=T0 + 0.5),
    Reservation(app_id="a", user="ana", queue="gpu", role="worker", index=1, host="h1",
                cpu=2.5, memory=4 << 30, gpus=[0, 3], since=T0, preemptible=True),
    Preemption(by="urgent-1", time=T0 + 3, reason="queue prod outranks queue batch"),
    SuspendRequest(time=T0 + 4, user="ana", reason="host maintenance"),
]
MINIMAL = [
    AppStatus(app_id="a", name="a", state=AppState.SUBMITTED, submit_time=T0),
    AmLeader(am_id="vm:1", host="vm", pid=1, since=T0),
    KillRequest(time=T0),
    ExecutorPlan(role="ps", index=0, attempt=1, host="h", address="a",
                 state=ExecutorState.PLANNED),
    ExecutorLive(attempt=1, host="h", address="a", pid=9, state=ExecutorState.REGISTERED,
                 registered_time=T0),
    ExecutorResult(attempt=1, exit_code=0, finish_time=T0),
    ClusterSpec(attempt=1, members=[], master_addr="", master_port=0),
    StreamStats(),
    AppEvent(seq=0, time=T0, kind="submitted", message="submitted by ana"),
    TopologyChange(seq=1, time=T0, user="", kind="scale", message="worker: 1 → 2"),
    Reservation(app_id="a", user="", queue="", role="w", index=0, host="h", cpu=0, memory=0,
                since=T0),
    SuspendRequest(time=T0),
]


def _name(record) -> str:
    return type(record).__name__


# ---- States ---------------------------------------------------------------------------------

@pytest.mark.parametrize("state", list(AppState), ids=lambda s: s.value)
def test_every_app_state_has_its_proto_value_and_back(state):
    value = convert.app_state_to_proto(state)
    assert pb.ApplicationState.Name(value) == f"APPLICATION_STATE_{state.value}"
    assert convert.app_state_from_proto(value) is state


@pytest.mark.parametrize("state", list(ExecutorState), ids=lambda s: s.value)
def test_every_executor_state_has_its_proto_value_and_back(state):
    value = convert.executor_state_to_proto(state)
    assert pb.ExecutorState.Name(value) == f"EXECUTOR_STATE_{state.value}"
    assert convert.executor_state_from_proto(value) is state


def test_every_proto_state_but_unspecified_is_a_primus_state():
    assert {pb.ApplicationState.Name(v) for v in pb.ApplicationState.values()} == {
        "APPLICATION_STATE_UNSPECIFIED", *(f"APPLICATION_STATE_{s.value}" for s in AppState)}
    assert {pb.ExecutorState.Name(v) for v in pb.ExecutorState.values()} == {
        "EXECUTOR_STATE_UNSPECIFIED", *(f"EXECUTOR_STATE_{s.value}" for s in ExecutorState)}


def test_unspecified_state_is_refused_naming_the_field_and_the_states():
    with pytest.raises(convert.MessageError,
                       match=r"states\[0\]: 0 is not a state of ApplicationState; allowed: "
                             r"APPLICATION_STATE_SUBMITTED, "):
        convert.app_state_from_proto(pb.APPLICATION_STATE_UNSPECIFIED, "states[0]")


def test_a_record_whose_state_is_unset_is_refused_naming_message_and_field():
    message = pb.ExecutorPlan(role="w", index=0, attempt=1, host="h", address="a")
    with pytest.raises(convert.MessageError, match=r"^ExecutorPlan\.state: 0 is not a state"):
        convert.from_message(message, ExecutorPlan)


# ---- Records --------------------------------------------------------------------------------

@pytest.mark.parametrize("model", list(convert.MESSAGES), ids=lambda m: m.__name__)
def test_record_and_message_have_the_same_fields(model):
    message_fields = set(convert.MESSAGES[model].DESCRIPTOR.fields_by_name)
    assert message_fields == set(model.model_fields)


@pytest.mark.parametrize("record", FULL + MINIMAL, ids=_name)
def test_record_survives_a_round_trip_through_its_message(record):
    message = convert.to_message(record)
    assert isinstance(message, convert.MESSAGES[type(record)])
    assert convert.from_message(message, type(record)) == record


@pytest.mark.parametrize("record", FULL + MINIMAL, ids=_name)
def test_record_survives_the_wire(record):
    message_type = convert.MESSAGES[type(record)]
    wire = message_type.FromString(convert.to_message(record).SerializeToString())
    assert convert.from_message(wire, type(record)) == record


def test_times_not_yet_reached_are_unset_and_set_times_are_timestamps():
    status = convert.to_message(AppStatus(app_id="a", name="a", state=AppState.RUNNING,
                                          submit_time=T0, start_time=T0 + 1))
    assert not status.HasField("finish_time")
    assert status.start_time.seconds == int(T0 + 1)
    assert status.start_time.nanos == pytest.approx(0.54e9, abs=1_000)


def test_an_am_start_time_not_recorded_is_unset():
    leader = convert.to_message(AmLeader(am_id="vm:1", host="vm", pid=1, since=T0))
    assert not leader.HasField("start_time")


def test_exit_code_zero_is_told_apart_from_no_exit_code():
    ended = convert.to_message(AppStatus(app_id="a", name="a", state=AppState.SUCCEEDED,
                                         submit_time=T0, exit_code=0))
    running = convert.to_message(AppStatus(app_id="a", name="a", state=AppState.RUNNING,
                                           submit_time=T0))
    assert ended.HasField("exit_code") and ended.exit_code == 0
    assert not running.HasField("exit_code")


def test_event_of_the_whole_application_has_no_role_or_index():
    event = convert.to_message(AppEvent(seq=1, time=T0, kind="app-state", message="RUNNING"))
    assert not event.HasField("role") and not event.HasField("index")


def test_message_missing_a_required_time_is_refused_naming_message_and_field():
    message = pb.ApplicationStatus(app_id="a", name="a", state=pb.APPLICATION_STATE_RUNNING)
    with pytest.raises(convert.MessageError, match=r"^ApplicationStatus\.submit_time: "):
        convert.from_message(message, AppStatus)


def test_message_of_another_type_is_refused():
    with pytest.raises(TypeError, match="a Kill does not convert to AppStatus"):
        convert.from_message(pb.Kill(), AppStatus)


@given(st.floats(min_value=1e9, max_value=4e9))
def test_a_unix_time_survives_a_timestamp_exactly(seconds):
    stamp = convert.timestamp(seconds)
    assert 0 <= stamp.nanos < 1_000_000_000
    assert convert.seconds(stamp) == seconds


@given(st.floats(min_value=0, max_value=4e9))
def test_any_time_survives_a_timestamp_to_the_nanosecond(seconds):
    stamp = convert.timestamp(seconds)
    assert 0 <= stamp.nanos < 1_000_000_000
    assert convert.seconds(stamp) == pytest.approx(seconds, abs=1e-9, rel=1e-15)


def test_a_fraction_rounding_up_to_a_whole_second_carries_into_the_seconds():
    assert convert.timestamp(41.9999999999) == convert.timestamp(42.0)


# ---- What spans several keys ----------------------------------------------------------------

JOB = JobSpec.model_validate({
    "name": "train",
    "roles": [{"name": "ps", "num": 1, "command": "ps", "success_percent": 0},
              {"name": "worker", "num": 2, "command": ["python", "train.py"], "memory": "2Gi"}],
    "data": [{"name": "train", "roles": ["worker"], "sources": [{"path": "/data/*.txt"}]}],
})


@pytest.mark.parametrize("view", [
    ExecutorView(),
    ExecutorView(plan=FULL[4]),
    ExecutorView(plan=FULL[4], live=FULL[5], result=FULL[6]),
], ids=["nothing", "plan", "plan-live-result"])
def test_executor_survives_a_round_trip_with_its_parts_present_or_not(view):
    message = convert.executor_to_message(("worker", 1), view)
    assert (message.role, message.index) == ("worker", 1)
    assert convert.executor_from_message(message) == (("worker", 1), view)


@pytest.mark.parametrize("stats", [None, StreamStats(tasks=3, done=1)], ids=["none", "stats"])
def test_stream_survives_a_round_trip(stats):
    message = convert.stream_to_message("train", stats)
    assert message.HasField("stats") is (stats is not None)
    assert convert.stream_from_message(message) == ("train", stats)


def test_role_carries_its_spec_as_json_and_its_desired_count():
    message = convert.role_to_message(JOB.role("worker"), 4)
    assert message.desired_executors == 4 and not message.removed
    assert '"memory":2147483648' in message.spec_json
    assert convert.role_from_message(message) == (JOB.role("worker"), 4)


def test_role_whose_spec_json_is_not_a_role_is_refused_naming_the_role_and_field():
    message = pb.Role(name="worker", desired_executors=1, spec_json='{"name": "worker"}')
    with pytest.raises(convert.MessageError, match=r"of 'worker': command: Field required"):
        convert.role_from_message(message)


def test_application_lists_roles_executors_and_streams_in_job_order():
    view = AppView(AppKeys("/primus", "train-1"), JOB, FULL[0])
    for role in ("worker", "ps"):  # a view's executors are in no particular order
        for index in range(JOB.role(role).num):
            view.executors[(role, index)] = ExecutorView()
    view.executors[("worker", 1)].plan = FULL[4]
    view.streams["train"] = StreamStats(tasks=5)

    view.spec = JOB.model_copy(update={"roles": [  # worker scaled to 3 since submitted
        role.model_copy(update={"num": 3}) if role.name == "worker" else role
        for role in JOB.roles]})

    message = convert.application_to_message(view, None, [MINIMAL[8]], 812)

    assert [(r.name, r.desired_executors) for r in message.roles] == [("ps", 1), ("worker", 3)]
    assert [(e.role, e.index) for e in message.executors] == [
        ("ps", 0), ("worker", 0), ("worker", 1)]
    assert message.executors[2].plan == convert.to_message(FULL[4])
    assert [(s.name, s.stats.tasks) for s in message.streams] == [("train", 5)]
    assert JobSpec.model_validate_json(message.spec_json) == JOB
    assert message.revision == 812 and len(message.events) == 1
    assert not any(message.HasField(part) for part in ("am_leader", "cluster", "kill"))


def test_application_carries_its_leader_cluster_and_kill_when_there_are_some():
    view = AppView(AppKeys("/primus", "train-1"), JOB, FULL[0], cluster=FULL[7], kill=FULL[2])
    message = convert.application_to_message(view, FULL[1], [], 9)
    assert convert.from_message(message.am_leader, AmLeader) == FULL[1]
    assert convert.from_message(message.cluster, ClusterSpec) == FULL[7]
    assert convert.from_message(message.kill, KillRequest) == FULL[2]


def test_report_read_through_the_api_is_shown_as_the_report_read_from_etcd():
    view = AppView(AppKeys("/primus", "train-1"), JOB, FULL[0], cluster=FULL[7], kill=FULL[2],
                   suspend=FULL[-1], waiting=FULL[-4], preemption=FULL[-2])
    for role in JOB.roles:
        for index in range(role.num):
            view.executors[(role.name, index)] = ExecutorView()
    view.executors[("worker", 1)] = ExecutorView(plan=FULL[4], live=FULL[5], result=FULL[6])
    view.streams["train"] = FULL[9]
    view.changes = {3: FULL[-5]}
    view.reservations = {("worker", 1): FULL[-3]}
    report = AppReport(view, FULL[1], [MINIMAL[8], FULL[10]], 812, hosts=list(HOSTS),
                       am_log="/h/am.log")

    through = convert.report_from_message(pb.Application.FromString(
        convert.report_to_message(report, events=20).SerializeToString()))

    assert status_json(through) == status_json(report)
    assert console_text(status_renderable(through, events=5)) == \
        console_text(status_renderable(report, events=5))
    assert through.leaderless is report.leaderless


def console_text(renderable) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_summary_has_the_leader_only_when_one_leads():
    assert not convert.summary_to_message(AppSummary(FULL[0], None)).HasField("am_leader")
    assert convert.summary_to_message(AppSummary(FULL[0], FULL[1])).am_leader.pid == 14052


def test_summary_carries_the_queue_and_whether_it_is_archived():
    message = convert.summary_to_message(AppSummary(FULL[0], None, queue="gpu", archived=True))
    assert (message.queue, message.archived) == ("gpu", True)


# ---- Hosts ----------------------------------------------------------------------------------

HOSTS = [
    Host(name="h1", address="10.213.7.11", launcher="ssh",
         ssh=SshSettings(port=2222, user="root", key_file="/etc/primus/id_ed25519",
                         extra_args=("-o", "ConnectTimeout=5")),
         python="/opt/primus/bin/python", home="/root/.primus", slots=8, cpu=15.5,
         memory=64 << 30, gpus=4, groups=frozenset({"primus", "all", "gpu"}),
         labels=frozenset({"a100"})),
    Host(name="local", address="127.0.0.1"),
]


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: h.name)
def test_host_survives_a_round_trip(host):
    assert convert.host_from_message(convert.host_to_message(host)) == host


def test_host_groups_and_labels_are_sorted_and_unset_limits_stay_unset():
    full, bare = (convert.host_to_message(host) for host in HOSTS)
    assert list(full.groups) == ["all", "gpu", "primus"]
    assert not any(bare.HasField(name) for name in ("home", "slots", "cpu", "memory", "gpus"))
    assert not bare.ssh.HasField("port")


def test_probed_host_survives_a_round_trip_with_its_facts_in_the_probes_order():
    facts = {"cgroups": "no memory controller", "primus_version": "0.1.0",
             "account": {"name": "alice", "uid": 1001, "home": "/home/alice",
                         "groups": ["alice", "primus-users"]},
             "home": "/home/alice", "cpu": 16, "memory": 64 << 30, "gpus": 2, "load": 0.25,
             "gpu_topology": "0|1", "gpu_nvlink": "0-1",
             "gpu_devices": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:07:00.0",
                              "numa_node": 0, "cpu_affinity": "0-15"},
                             {"index": 1, "uuid": "GPU-b", "pci_bus_id": "00000000:08:00.0",
                              "numa_node": None, "cpu_affinity": None}]}
    report = HostReport(HOSTS[0], True, "", facts)
    back = convert.host_report_from_message(convert.host_report_to_message(report))
    assert back == report
    assert list(back.facts) == list(facts)  # `hosts check -o json` prints them in this order


def test_unreachable_host_has_its_error_and_no_facts():
    report = HostReport(HOSTS[0], False, "h1: ssh: connect to host 10.213.7.11: timed out")
    message = convert.host_report_to_message(report)
    assert not message.probe.ok and "timed out" in message.probe.error
    assert convert.host_report_from_message(message) == report


def test_probe_facts_of_the_wrong_type_are_left_unknown():
    facts = {"cpu": "sixteen", "memory": True, "gpus": 2, "load": 1, "unknown": 3,
             "account": {"name": "alice"}}
    probe = convert.host_report_to_message(HostReport(HOSTS[1], True, "", facts)).probe
    assert not probe.HasField("cpu") and not probe.HasField("memory")
    assert not probe.HasField("account")
    assert (probe.gpus, probe.load) == (2, 1.0)


# ---- Errors ---------------------------------------------------------------------------------

def test_refused_job_is_invalid_argument_with_a_field_violation_per_problem(tmp_path: Path):
    job = tmp_path / "train.yaml"
    job.write_text("name: train\nroles:\n  - {name: worker, num: -1, command: x, cpu: 0}\n")
    with pytest.raises(SpecError) as refused:
        load_job_spec(job, overrides=["policy.stop_grace=forever"])

    status = convert.spec_error_status(refused.value, {str(job): "job", "--set": "overrides"})

    assert status.code == code_pb2.INVALID_ARGUMENT
    assert status.message == str(refused.value)
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    assert [(v.field, v.description) for v in bad_request.field_violations] == [
        ("job.roles[0].num", "got -1; must be an integer >= 1 and <= 100000"),
        ("job.roles[0].cpu", "got 0; must be a number > 0 and <= 100000"),
        ("overrides.policy.stop_grace",
         "got 'forever'; must be a whole number of seconds, or a whole number with a unit s, m"
         " or h (10s, 2m, 1h)"),
    ]
    assert rpc_status.to_status(status).code.name == "INVALID_ARGUMENT"


def test_problem_of_a_source_the_request_did_not_carry_is_named_by_its_source(tmp_path: Path):
    job = tmp_path / "train.yaml"
    job.write_text("name: train\nroles:\n  - {name: worker, command: x}\n")
    with pytest.raises(SpecError) as refused:
        load_job_spec(job, site_defaults={"placement": "random"})
    status = convert.spec_error_status(refused.value, {str(job): "job"})
    bad_request = error_details_pb2.BadRequest()
    status.details[0].Unpack(bad_request)
    assert bad_request.field_violations[0].field == "site defaults.placement"
