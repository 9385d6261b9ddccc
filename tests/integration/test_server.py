"""``primus server`` over a real gRPC channel: a real server process on the session etcd.

Applications are recorded in etcd directly, as an AM would have written them, so that each
RPC's answer can be checked against known keys (running AMs are the CLI tests' business).
"""

from __future__ import annotations

import asyncio
import getpass
import re
import socket
import subprocess
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from primus.api.client import ApiError, Client
from primus.api.servicer import MAX_REQUEST_BYTES
from primus.api.v1 import primus_pb2 as pb
from primus.client.api import AppNotFoundError
from primus.client.watch import EventAdded, ExecutorChanged, StatusChanged
from primus.config.etcd import EtcdConfig
from primus.state.keys import AppKeys, SchedulerKeys, am_keeper_key
from primus.state.records import (
    AppEvent,
    AppStatus,
    ExecutorPlan,
    ServiceLeader,
    decode,
    encode,
)
from primus.state.states import AppState, ExecutorState
from primus.store.api import Delete, Put
from primus.store.embedded import find_etcd_binary
from primus.store.etcd_store import EtcdCoordinator
from primus.store.pki import ensure_pki
from tests.support.primus import run_primus
from tests.support.records import HOST, record_app, write
from tests.support.server import one_account_site, start_server
from tests.support.service import with_store
from tests.support.waiting import wait_until


def served_log(env: dict[str, str], app_id: str, name: str) -> Path:
    """Where the server reads log ``name`` of ``app_id`` on this host: the application's
    directory under its ``PRIMUS_HOME`` (it never follows a path a plan names)."""
    directory = Path(env["PRIMUS_HOME"]) / "apps" / app_id
    directory.mkdir(parents=True, exist_ok=True)
    return directory / name


def plan(role: str, index: int, log_file: str = "", state=ExecutorState.RUNNING) -> ExecutorPlan:
    return ExecutorPlan(role=role, index=index, attempt=1, host=HOST, address="127.0.0.1",
                        state=state, log_file=log_file)


# ---- The process: health, reflection, TLS ---------------------------------------------------

def test_server_reports_serving_on_health_and_lists_its_services_by_reflection(server):
    with grpc.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "primus.v1.Primus"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
        names = {s.name for s in replies[0].list_services_response.service}
    assert {"primus.v1.Primus", "grpc.health.v1.Health"} <= names


def test_the_services_a_server_leads_are_recorded_as_json_naming_its_host_and_pid(
        server, primus_env):
    async def leaders(store, settings) -> dict[str, tuple[ServiceLeader, int] | None]:
        found = {}
        for key in (SchedulerKeys(settings.prefix).leader, am_keeper_key(settings.prefix)):
            kv = await store.get(key)
            found[key] = (decode(ServiceLeader, kv.value, key), kv.lease) if kv else None
        return found

    led = wait_until(lambda: (lambda found: found if all(found.values()) else None)(
        with_store(primus_env, leaders)), 30, "the server to lead admission and the AM keeper")
    for key, (leader, lease) in led.items():
        assert leader == ServiceLeader(host=socket.gethostname(), pid=server.process.pid), key
        assert lease, f"{key} goes with the server's lease"


def test_tls_server_requiring_client_certificates_refuses_a_client_without_one(
        primus_env, tmp_path, prefix, etcd):
    pki = ensure_pki(tmp_path / "pki")
    # Whoever the CA signs for is a user: a site without accounts: must trust them all.
    server = start_server(one_account_site(primus_env, tmp_path), tmp_path, "--tls-cert",
                          str(pki.server_cert), "--tls-key", str(pki.server_key),
                          "--client-ca", str(pki.ca_cert))
    try:
        record_app(etcd, prefix, "train-1", submitted=1000.0)
        with Client(server.address, ca_cert=pki.ca_cert, cert=pki.client_cert,
                    key=pki.client_key) as allowed:
            assert [a.status.app_id for a in allowed.list_apps()] == ["train-1"]
        with Client(server.address, ca_cert=pki.ca_cert, timeout=10) as stranger, \
                pytest.raises(ApiError) as refused:
            list(stranger.list_apps())
        assert refused.value.code is grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop()


def test_server_needs_tls_or_plaintext_said_explicitly_when_an_etcd_is_configured(primus_env):
    result = run_primus(primus_env, "server", "run", "--listen", "127.0.0.1:0")
    assert result.returncode == 2
    assert "--tls-cert" in result.stderr and "--plaintext" in result.stderr


@pytest.mark.parametrize(("embedded", "flags", "option"), [
    (True, ("--ui-listen", "0.0.0.0:0"), "--ui-listen 0.0.0.0:0"),
    (True, ("--metrics-listen", "[::]:0"), "--metrics-listen [::]:0"),
    (False, ("--plaintext", "--listen", "0.0.0.0:0"), "--listen 0.0.0.0:0"),
    (False, ("--plaintext", "--ui-listen", "primus.example:0"), "--ui-listen primus.example:0"),
])
def test_server_refuses_to_serve_without_tls_anywhere_but_loopback(primus_env, embedded, flags,
                                                                   option):
    env = {k: v for k, v in primus_env.items() if k != "PRIMUS_ETCD"} if embedded else primus_env
    result = run_primus(env, "server", "run", "--listen", "127.0.0.1:0", "--ui-listen",
                        "127.0.0.1:0", *flags, timeout=30)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {option}: "), result.stderr
    assert "loopback" in result.stderr and "--tls-cert and --tls-key" in result.stderr
    assert not (Path(env["PRIMUS_HOME"]) / "etcd").exists(), "refused before anything started"


def test_server_start_status_stop_on_the_embedded_default(primus_env, tmp_path):
    env = {k: v for k, v in primus_env.items() if k != "PRIMUS_ETCD"}
    home = Path(env["PRIMUS_HOME"])
    try:
        started = run_primus(env, "server", "start")
        assert started.returncode == 0, started.stderr
        address = started.stdout.strip()
        assert address.startswith("127.0.0.1:")
        status = run_primus(env, "server", "status")
        assert status.returncode == 0, status.stderr
        api_line, ui_line = status.stdout.splitlines()
        assert api_line == address
        assert re.fullmatch(r"UI http://127\.0\.0\.1:\d+/ \(.*primus ui.*\)", ui_line), ui_line
        assert oct((home / "server" / "server.json").stat().st_mode & 0o777) == "0o600"
        with Client.embedded(home) as api:  # reuses the running server, with the client cert
            assert api.address == address
            assert list(api.list_apps()) == []
        with Client(address, ca_cert=home / "etcd" / "pki" / "ca.crt", timeout=10) as stranger, \
                pytest.raises(ApiError):
            list(stranger.list_apps())
        stopped = run_primus(env, "server", "stop")
        assert stopped.returncode == 0 and "stopped" in stopped.stderr
        assert run_primus(env, "server", "status").returncode == 1
    finally:
        run_primus(env, "server", "stop")
        run_primus(env, "etcd", "stop")


# ---- Reading applications -------------------------------------------------------------------

def test_get_application_returns_status_roles_executors_and_events_at_one_revision(
        client, etcd, prefix):
    revision = record_app(etcd, prefix, "train-1", submitted=1000.0)
    keys = AppKeys(prefix, "train-1")
    write(etcd, [Put(keys.executor("worker", 1, "plan"), encode(plan("worker", 1)))])

    app = client.get_app("train-1")

    assert app.status.app_id == "train-1" and app.status.state is AppState.RUNNING
    assert app.leader is not None and app.leader.host == "elsewhere"
    assert app.desired == {"worker": 2}
    assert app.executors[("worker", 1)].plan == plan("worker", 1)
    assert app.executors[("worker", 0)].plan is None
    assert [e.kind for e in app.events] == ["submitted"]
    assert app.revision > revision


def test_unknown_application_is_not_found_and_a_bad_app_id_names_the_field(client, server):
    with pytest.raises(AppNotFoundError, match="no-such-app"):
        client.get_app("no-such-app")
    for bad in ("", "../etc"):
        with pytest.raises(ApiError, match="app_id") as refused:
            client.get_app(bad)
        assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(ApiError, match="events") as refused:
        client.get_app("x", events=5000)
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_list_applications_pages_newest_first_without_repeats_and_filters(client, etcd,
                                                                           prefix):
    for n in range(5):
        record_app(etcd, prefix, f"train-{n}", submitted=1000.0 + n,
                   state=AppState.SUCCEEDED if n == 2 else AppState.RUNNING,
                   user="bob" if n == 4 else "alice")

    listed = [a.status.app_id for a in client.list_apps(page_size=2)]

    assert listed == ["train-4", "train-3", "train-2", "train-1", "train-0"]
    assert [a.status.app_id for a in client.list_apps(states=["SUCCEEDED"])] == ["train-2"]
    assert [a.status.app_id for a in client.list_apps(user="bob")] == ["train-4"]
    assert [a.status.app_id for a in client.list_apps(name="other")] == []


def test_progress_is_the_share_of_executors_succeeded_in_get_and_list(client, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    record_app(etcd, prefix, "train-2", submitted=1001.0)
    keys = AppKeys(prefix, "train-1")
    write(etcd, [Put(keys.executor("worker", 0, "plan"),
                     encode(plan("worker", 0, state=ExecutorState.SUCCEEDED))),
                 Put(keys.executor("worker", 1, "plan"), encode(plan("worker", 1)))])

    assert client.get_app("train-1").progress == 0.5
    assert client.get_app("train-2").progress == 0.0
    listed = {s.status.app_id: s.progress for s in client.list_apps()}
    assert listed == {"train-1": 0.5, "train-2": 0.0}


def test_list_applications_refuses_a_bad_page_token_and_one_issued_for_other_filters(
        client, etcd, prefix):
    for n in range(3):
        record_app(etcd, prefix, f"train-{n}", submitted=1000.0 + n)
    stub = client._stub
    first = stub.ListApplications(_list_request(page_size=1))
    assert first.next_page_token
    for request, words in ((_list_request(page_token="not a token"), "page_token: malformed"),
                           (_list_request(page_token=first.next_page_token, user="bob"),
                            "page_token: was issued for other filters"),
                           (_list_request(states=[99]), "states[0]"),
                           (_list_request(page_size=-1), "page_size")):
        with pytest.raises(grpc.RpcError) as refused:
            stub.ListApplications(request)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert words in refused.value.details()


def _list_request(**fields):
    return pb.ListApplicationsRequest(**fields)


def test_oversized_request_is_refused_before_it_is_read(client, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    with pytest.raises(ApiError) as refused:  # past a submission's files and job together
        client.kill("train-1", reason="x" * (MAX_REQUEST_BYTES + 1))
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert client.get_app("train-1").kill is None


def test_submitted_job_text_runs_to_success_and_is_followed_by_watch(client, tmp_path):
    job = ("name: hello\nworkdir: work\n"
           "roles:\n  - name: worker\n    num: 1\n    command: 'true'\n")
    (tmp_path / "work").mkdir()

    app_id = client.submit(job, source="hello.yaml", overrides=["roles.worker.num=2"],
                           base_directory=str(tmp_path))

    assert app_id.startswith("hello-")
    updates = list(client.watch(app_id))  # ends once it has ended and its AM has exited
    final = client.get_app(app_id)
    assert final.status.state is AppState.SUCCEEDED, final.status.diagnosis
    assert final.desired == {"worker": 2}
    assert final.spec.workdir == str(tmp_path / "work")
    assert updates[0].snapshot is not None
    assert any(isinstance(c, StatusChanged) and c.status.state is AppState.SUCCEEDED
               for u in updates for c in u.changes)


def test_refused_job_names_each_field_and_nothing_is_recorded(client):
    job = "name: hello\nroles:\n  - name: worker\n    num: -1\n    command: 'true'\n"
    with pytest.raises(ApiError) as refused:
        client.submit(job, source="hello.yaml", overrides=["policy.nope=1"])
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    fields = [field for field, _ in refused.value.violations]
    assert "job.roles[0].num" in fields and any(f.startswith("overrides") for f in fields)
    assert "hello.yaml: roles[0].num: got -1" in str(refused.value)
    valid = "name: x\nroles: [{name: a, command: 'true'}]"
    for request, words in ((pb.SubmitApplicationRequest(job=valid, secret_env={"K": "v"}),
                            "request: secret_env: got 'K'; is not in the job's secret_env"),
                           (pb.SubmitApplicationRequest(job=valid + "\nsecret_env: [K]"),
                            "secret_env[0]: got 'K'; has no value in the request's"),
                           (pb.SubmitApplicationRequest(job=valid + "\nfiles: [/etc/passwd]"),
                            "files[0]: got '/etc/passwd'; its content is not in the request"),
                           (pb.SubmitApplicationRequest(job=valid, files=[pb.File(
                               path="../x", content=b"")]), "files[0].path"),
                           (pb.SubmitApplicationRequest(job=job, base_directory="rel"),
                            "base_directory"),
                           (pb.SubmitApplicationRequest(job="name: x\nworkdir: w\nroles: "
                                                        "[{name: a, command: 'true'}]"),
                            "workdir")):
        with pytest.raises(grpc.RpcError) as bad:
            client._stub.SubmitApplication(request)
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert words in bad.value.details()
    assert list(client.list_apps()) == []


# ---- Changing and following -----------------------------------------------------------------

def test_kill_records_who_asked_and_why_once_and_refuses_an_ended_application(
        client, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    record_app(etcd, prefix, "train-2", submitted=1001.0, state=AppState.SUCCEEDED,
               leader_host=None)

    revision = client.kill("train-1", reason="wrong data")
    again = client.kill("train-1", reason="asked twice")

    kill = client.get_app("train-1").kill
    assert kill is not None and kill.reason == "wrong data"
    assert kill.user == getpass.getuser()  # no client certificate: the server's account
    assert again == revision
    with pytest.raises(ApiError, match="has ended") as refused:
        client.kill("train-2")
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(AppNotFoundError):
        client.kill("train-9")


def test_succeed_records_the_outcome_and_refuses_what_is_not_running(client, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    record_app(etcd, prefix, "train-2", submitted=1001.0, state=AppState.SUCCEEDED,
               leader_host=None)
    record_app(etcd, prefix, "train-3", submitted=1002.0, state=AppState.QUEUED)
    record_app(etcd, prefix, "train-4", submitted=1003.0)

    revision = client.succeed("train-1", reason="eval passed")
    kill = client.get_app("train-1").kill
    assert kill is not None and (kill.outcome, kill.reason) == (AppState.SUCCEEDED, "eval passed")
    assert kill.user == getpass.getuser()
    # The first request decides: a kill after it changes nothing.
    assert client.kill("train-1", reason="changed my mind") == revision
    assert client.get_app("train-1").kill == kill
    for app_id, says in (("train-2", "has ended (SUCCEEDED)"),
                         ("train-3", "is QUEUED, not running")):
        with pytest.raises(ApiError, match=re.escape(says)) as refused:
            client.succeed(app_id)
        assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert client.get_app(app_id).kill is None
    client.kill("train-4")
    assert client.get_app("train-4").kill.outcome is AppState.KILLED


def test_suspend_records_who_asked_and_resume_refuses_what_is_not_suspended(
        client, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    record_app(etcd, prefix, "train-2", submitted=1001.0, state=AppState.SUCCEEDED,
               leader_host=None)

    client.suspend("train-1", reason="maintenance")
    with pytest.raises(ApiError, match="is RUNNING, not SUSPENDED") as refused:
        client.resume("train-1")  # asked, not yet carried out
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(ApiError, match="is SUCCEEDED; only a running") as refused:
        client.suspend("train-2")
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(ApiError, match="changed while it was being suspended"):
        client.suspend("train-1")  # asked already


def test_watch_resumed_after_a_server_restart_misses_and_repeats_nothing(
        primus_env, tmp_path, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    keys = AppKeys(prefix, "train-1")
    status = AppStatus(app_id="train-1", name="train", state=AppState.RUNNING, user="alice",
                       submit_host=HOST, submit_time=1000.0)

    def event(seq: int) -> Put:
        return Put(keys.event(seq), encode(AppEvent(seq=seq, time=1000.0 + seq, kind="note",
                                                    message=f"event {seq}")))

    first = start_server(primus_env, tmp_path)
    with Client(first.address, plaintext=True) as api:
        updates = api.watch("train-1")
        snapshot = next(updates)
        assert snapshot.snapshot is not None and snapshot.snapshot.status.app_id == "train-1"
        written = write(etcd, [event(1), Put(keys.executor("worker", 0, "plan"),
                                             encode(plan("worker", 0)))])
        update = next(updates)
        assert update.revision == written
        assert [type(c) for c in update.changes] == [EventAdded, ExecutorChanged]
        last = update.revision
    first.stop()

    missed = [write(etcd, [event(2)]), write(etcd, [event(3)])]
    second = start_server(primus_env, tmp_path)
    try:
        with Client(second.address, plaintext=True) as api:
            updates = api.watch("train-1", after_revision=last)
            resumed = [next(updates), next(updates)]
            assert [u.revision for u in resumed] == missed
            assert [u.snapshot for u in resumed] == [None, None]
            assert [[c.event.seq for c in u.changes] for u in resumed] == [[2], [3]]
            ended = write(etcd, [Put(keys.status, encode(status.model_copy(update={
                "state": AppState.KILLED, "finish_time": 2000.0})))])
            gone = _delete(etcd, keys.leader)
            rest = list(updates)  # the stream ends once it has ended and no AM leads
            assert [u.revision for u in rest] == [ended, gone]
            assert isinstance(rest[0].changes[0], StatusChanged)
            with pytest.raises(ApiError, match="after_revision") as ahead:
                next(api.watch("train-1", after_revision=gone + 1000))
            assert ahead.value.code is grpc.StatusCode.INVALID_ARGUMENT
    finally:
        second.stop()


def _delete(config: EtcdConfig, key: str) -> int:

    async def run() -> int:
        store = await EtcdCoordinator.connect(config)
        try:
            return (await store.txn([], [Delete(key)])).revision
        finally:
            await store.close()
    return asyncio.run(run())


# ---- Logs and hosts -------------------------------------------------------------------------

def test_get_logs_reads_an_executor_log_and_every_launched_one(client, etcd, prefix, primus_env):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    keys = AppKeys(prefix, "train-1")
    logs = {}
    for index in (0, 1):
        logs[index] = served_log(primus_env, "train-1", f"worker-{index}.log")
        logs[index].write_text("".join(f"worker {index} line {n}\n" for n in range(3)))
        write(etcd, [Put(keys.executor("worker", index, "plan"),
                         encode(plan("worker", index, str(logs[index]))))])

    one = [line.text for line in client.logs("train-1", executor=("worker", 1))]
    every = list(client.logs("train-1"))

    assert one == [f"worker 1 line {n}" for n in range(3)]
    assert sorted((line.source, line.text) for line in every) == sorted(
        (f"worker-{i}", f"worker {i} line {n}") for i in (0, 1) for n in range(3))
    with pytest.raises(ApiError, match="worker-7") as refused:
        list(client.logs("train-1", executor=("worker", 7)))
    assert refused.value.code is grpc.StatusCode.NOT_FOUND


def test_get_logs_from_the_offset_of_a_page_resumes_after_it_with_nothing_lost_or_repeated(
        client, etcd, prefix, primus_env):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    log = served_log(primus_env, "train-1", "worker-0.log")
    log.write_bytes("première ligne\nsecond\n".encode() + b"\xff third\nlast, no break")
    write(etcd, [Put(AppKeys(prefix, "train-1").executor("worker", 0, "plan"),
                     encode(plan("worker", 0, str(log))))])

    whole = list(client.log_pages("train-1", executor=("worker", 0)))
    assert [line for page in whole for line in page.lines] == [
        "première ligne", "second", "\ufffd third", "last, no break"]
    assert whole[-1].offset == log.stat().st_size and whole[-1].sources == 1

    after_first = len("première ligne\n".encode())
    resumed = list(client.log_pages("train-1", executor=("worker", 0), offset=after_first))
    assert [line for page in resumed for line in page.lines] == [
        "second", "\ufffd third", "last, no break"]
    assert resumed[-1].offset == log.stat().st_size
    assert list(client.log_pages("train-1", executor=("worker", 0),
                                 offset=log.stat().st_size)) == []
    with pytest.raises(ApiError, match="offset: resumes one log") as refused:
        list(client.log_pages("train-1", offset=5))
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_list_hosts_returns_the_servers_inventory(client):
    hosts = client.hosts()
    assert len(hosts) == 1 and hosts[0].launcher == "local"



def test_get_logs_follows_new_lines_until_the_application_ends(client, etcd, prefix, primus_env):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    keys = AppKeys(prefix, "train-1")
    log = served_log(primus_env, "train-1", "worker-0.log")
    log.write_text("before\n")
    write(etcd, [Put(keys.executor("worker", 0, "plan"), encode(plan("worker", 0, str(log))))])

    lines = client.logs("train-1", executor=("worker", 0), follow=True)
    assert next(lines).text == "before"
    with log.open("a") as out:
        out.write("after\n")
    assert next(lines).text == "after"
    status = AppStatus(app_id="train-1", name="train", state=AppState.SUCCEEDED, user="alice",
                       submit_host=HOST, submit_time=1000.0, finish_time=2000.0)
    write(etcd, [Put(keys.status, encode(status))])
    _delete(etcd, keys.leader)
    assert list(lines) == []  # the stream ends with the application


def test_two_servers_side_by_side_answer_alike_from_the_same_etcd(primus_env, tmp_path, etcd,
                                                                   prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    servers = [start_server(primus_env, tmp_path) for _ in range(2)]
    try:
        clients = [Client(s.address, plaintext=True) for s in servers]
        revision = clients[0].kill("train-1", reason="from the first")
        assert clients[1].kill("train-1", reason="from the second") == revision
        assert [c.get_app("train-1").kill.reason for c in clients] == ["from the first"] * 2
        for api in clients:
            api.close()
    finally:
        for running in servers:
            running.stop()


def test_watch_resumed_from_a_compacted_revision_starts_again_with_a_snapshot(
        client, etcd, etcd_server, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    keys = AppKeys(prefix, "train-1")
    old = write(etcd, [Put(keys.event(1), encode(AppEvent(seq=1, time=1001.0, kind="note",
                                                          message="one")))])
    latest = write(etcd, [Put(keys.event(2), encode(AppEvent(seq=2, time=1002.0, kind="note",
                                                             message="two")))])
    subprocess.run([str(find_etcd_binary("etcdctl")), "--endpoints", etcd_server.client_url,
                    "compact", str(latest)], check=True, capture_output=True, timeout=30)

    first = next(client.watch("train-1", after_revision=old))

    assert first.snapshot is not None and first.revision >= latest
    assert [e.seq for e in first.snapshot.events] == [0, 1, 2]


def test_idle_watch_reports_progress_with_the_revision_it_has_passed(client, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    keys = AppKeys(prefix, "train-1")
    updates = client.watch("train-1", progress_interval=1)
    snapshot = next(updates)
    changed = write(etcd, [Put(keys.desired("worker"), b"3")])
    change = next(updates)
    progress = next(updates)  # a second later, nothing having changed

    assert change.revision == changed
    assert [(c.role.name, c.desired) for c in change.changes] == [("worker", 3)]
    assert progress.snapshot is None and progress.changes == []
    assert snapshot.revision < progress.revision == changed


def test_watch_resumed_after_the_application_ended_replays_its_end_then_stops(
        client, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    keys = AppKeys(prefix, "train-1")
    last = client.get_app("train-1").revision
    # Finished now: within its retention, the server keeps its keys (and the replay ends).
    ended = write(etcd, [Put(keys.status, encode(AppStatus(
        app_id="train-1", name="train", state=AppState.FAILED, user="alice",
        submit_host=HOST, submit_time=1000.0, finish_time=time.time())))])
    gone = _delete(etcd, keys.leader)
    record_app(etcd, prefix, "other-1", submitted=1001.0)  # etcd's revision moves on

    replayed = list(client.watch("train-1", after_revision=last))

    assert [u.revision for u in replayed] == [ended, gone]
    assert replayed[0].changes[0].status.state is AppState.FAILED
    assert list(client.watch("train-1", after_revision=gone)) == []


def test_get_logs_sends_a_long_log_whole_and_in_order_many_lines_a_message(client, etcd,
                                                                            prefix, primus_env):
    record_app(etcd, prefix, "train-1", submitted=1000.0)
    keys = AppKeys(prefix, "train-1")
    log = served_log(primus_env, "train-1", "worker-0.log")
    log.write_text("".join(f"line {n}\n" for n in range(20_000)))
    write(etcd, [Put(keys.executor("worker", 0, "plan"), encode(plan("worker", 0, str(log))))])

    messages = list(client._stub.GetLogs(pb.GetLogsRequest(
        app_id="train-1", executor=pb.ExecutorRef(role="worker", index=0))))

    assert [line for m in messages for line in m.lines] == [f"line {n}" for n in range(20_000)]
    assert {m.source for m in messages} == {"worker-0"}
    assert len(messages) < 20_000 // 10
