"""The metrics' fold of a deployment's keys (``primus/server/metrics.py``): what it counts, in
whatever order the first read and the watch hand it keys, and what a scrape renders."""

from __future__ import annotations

from primus.config.inventory import Host
from primus.config.spec import JobSpec
from primus.server.metrics import DATA_KEPT, Fold, FoldCollector
from primus.state.records import (
    AdmissionRequest,
    AmLeader,
    AppStatus,
    ExecutorPlan,
    HostCondition,
    Record,
    Reservation,
    StreamStats,
    encode,
)
from primus.state.states import AppState, ExecutorState
from primus.store.api import KeyValue
from tests.support.metrics import Samples, samples

P = "/primus"
NOW = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def kv(key: str, record: Record | bytes, revision: int) -> KeyValue:
    value = record if isinstance(record, bytes) else encode(record)
    return KeyValue(P + key, value, create_revision=1, mod_revision=revision, version=1)


def status(app: str, state: AppState, finish: float | None = None) -> AppStatus:
    return AppStatus(app_id=app, name=app, state=state, submit_time=NOW - 100,
                     finish_time=finish)


def plan(role: str, index: int, state: ExecutorState, attempt: int = 1,
         exit_class: str = "") -> ExecutorPlan:
    return ExecutorPlan(role=role, index=index, attempt=attempt, host="h1", address="h1",
                        state=state, exit_class=exit_class)


def scrape(fold: Fold, hosts: tuple[Host, ...] = ()) -> Samples:
    """Every sample a scrape renders, by name and sorted labels."""
    return samples(FoldCollector(fold, hosts))


def test_applications_are_counted_by_state_and_the_queue_their_spec_names():
    fold = Fold(P, "default")
    fold.put(kv("/apps/a/status", status("a", AppState.RUNNING), 5))
    fold.put(kv("/apps/a/spec", b'{"queue": "research"}', 2))
    fold.put(kv("/apps/b/status", status("b", AppState.SUCCEEDED, NOW), 6))
    samples = scrape(fold)
    assert samples[("primus_applications", (("queue", "research"), ("state", "RUNNING")))] == 1
    assert samples[("primus_applications", (("queue", "default"), ("state", "SUCCEEDED")))] == 1


def test_an_end_is_counted_once_when_seen_and_never_for_an_application_first_seen_ended():
    fold = Fold(P, "default")
    fold.put(kv("/apps/old/status", status("old", AppState.FAILED, NOW), 3))
    fold.put(kv("/apps/a/status", status("a", AppState.RUNNING), 4))
    fold.put(kv("/apps/a/status", status("a", AppState.FAILED, NOW), 9))
    fold.put(kv("/apps/a/status", status("a", AppState.FAILED, NOW), 9))  # read and watch
    fold.put(kv("/apps/a/status", status("a", AppState.RUNNING), 4))  # older: ignored
    assert dict(fold.ends) == {("FAILED", "default"): 1}
    assert fold.apps["a"].state is AppState.FAILED


def spec(*roles: str) -> bytes:
    return JobSpec.model_validate({"name": "a", "roles": [
        {"name": role, "command": "true"} for role in roles]}).model_dump_json().encode()


def test_executor_transitions_count_restarts_failures_by_exit_class_and_leases_lost():
    fold = Fold(P, "default")
    fold.put(kv("/apps/a/spec", spec("worker"), 1))
    fold.put(kv("/apps/a/status", status("a", AppState.RUNNING), 1))
    key = "/apps/a/executors/worker/0/plan"
    fold.put(kv(key, plan("worker", 0, ExecutorState.RUNNING), 2))
    fold.put(kv(key, plan("worker", 0, ExecutorState.FAILED, exit_class="OOM_KILLED"), 3))
    fold.put(kv(key, plan("worker", 0, ExecutorState.PLANNED, attempt=2), 4))
    fold.put(kv(key, plan("worker", 0, ExecutorState.LOST, attempt=2), 5))
    fold.put(kv(key, plan("worker", 0, ExecutorState.RUNNING, attempt=3), 6))
    fold.put(kv(key, plan("worker", 0, ExecutorState.FAILED, attempt=3), 7))
    assert dict(fold.failures) == {("worker", "OOM_KILLED"): 1, ("worker", "EXIT_CODE"): 1}
    assert dict(fold.leases_lost) == {"worker": 1}
    assert dict(fold.restarts) == {"worker": 2}
    samples = scrape(fold)
    assert samples[("primus_executors", (("role", "worker"), ("state", "FAILED")))] == 1
    assert samples[("primus_executor_failures_total",
                    (("exit_class", "OOM_KILLED"), ("role", "worker")))] == 1


def test_a_new_am_leader_is_a_take_over_and_the_first_is_not():
    fold = Fold(P, "default")
    leader = AmLeader(am_id="am-1", host="h1", pid=1, since=NOW)
    fold.put(kv("/apps/a/am/leader", leader, 2))
    fold.put(kv("/apps/a/am/leader", leader.model_copy(update={"am_id": "am-2"}), 8))
    assert fold.takeovers == 1


def test_admission_waits_are_measured_from_first_seen_to_granted_and_the_spec_queue_counted():
    clock = Clock()
    fold = Fold(P, "default", clock=clock)
    waits: list[tuple[str, float]] = []
    fold.waited = lambda queue, seconds: waits.append((queue, seconds))
    for app in ("a", "b"):  # the queue is the spec's (the server's record), not the request's
        fold.put(kv(f"/apps/{app}/spec", b'{"queue": "gpu"}', 2))
    request = AdmissionRequest(app_id="a", user="alice", queue="forged", submit_time=NOW,
                               roles=[], executors=[("worker", 0)])
    fold.put(kv("/scheduler/apps/a/request", request, 3))
    fold.put(kv("/scheduler/apps/b/request", request.model_copy(update={"app_id": "b"}), 4))
    clock.now += 30
    samples = scrape(fold)
    assert samples[("primus_admission_queue_length", (("queue", "gpu"),))] == 2
    assert samples[("primus_admission_longest_wait_seconds", (("queue", "gpu"),))] == 30
    fold.put(kv("/scheduler/apps/a/request", request.model_copy(update={"granted": True}), 5))
    fold.delete(P + "/scheduler/apps/a/request", 6)
    assert waits == [("gpu", 30.0)], "granted, then deleted: one wait"
    assert scrape(fold)[("primus_admission_queue_length", (("queue", "gpu"),))] == 1


def test_hosts_show_what_is_reserved_free_and_out_of_service():
    fold = Fold(P, "default")
    reservation = Reservation(app_id="a", user="alice", queue="", role="worker", index=0,
                              host="h1", cpu=2, memory=1 << 30, gpus=[0, 1], since=NOW)
    fold.put(kv("/scheduler/apps/a/reservations/worker/0", reservation, 3))
    fold.put(kv("/scheduler/conditions/h2", HostCondition(state="drained", reason="disks",
                                                          since=NOW, by="root"), 4))
    hosts = (Host("h1", "h1", cpu=8, memory=4 << 30, gpus=4), Host("h2", "h2"))
    samples = scrape(fold, hosts)
    assert samples[("primus_host_reserved_cpus", (("host", "h1"),))] == 2
    assert samples[("primus_host_free_cpus", (("host", "h1"),))] == 6
    assert samples[("primus_host_free_memory_bytes", (("host", "h1"),))] == 3 << 30
    assert samples[("primus_host_free_gpus", (("host", "h1"),))] == 2
    assert ("primus_host_free_cpus", (("host", "h2"),)) not in samples, "declares no CPUs"
    assert samples[("primus_host_out_of_service", (("host", "h2"), ("state", "drained")))] == 1
    fold.delete(P + "/scheduler/apps/a/reservations/worker/0", 5)
    assert scrape(fold, hosts)[("primus_host_reserved_cpus", (("host", "h1"),))] == 0


def test_a_streams_series_last_while_its_application_runs_and_a_while_after_it_ended():
    clock = Clock()
    fold = Fold(P, "default", clock=clock)
    fold.put(kv("/apps/a/status", status("a", AppState.RUNNING), 1))
    fold.put(kv("/apps/a/data/train/stats",
                StreamStats(tasks=10, done=4, failed=1, records=400, bytes=4096,
                            failed_records=37), 2))
    fold.put(kv("/apps/a/data/train/tasks/0001-00000001", b"{}", 3))  # not a key it reads
    records = ("primus_data_records_total", (("app", "a"), ("stream", "train")))
    assert scrape(fold)[records] == 400
    assert scrape(fold)[("primus_data_failed_records_total",
                         (("app", "a"), ("stream", "train")))] == 37
    fold.put(kv("/apps/a/status", status("a", AppState.SUCCEEDED, clock.now), 4))
    clock.now += DATA_KEPT - 1
    assert scrape(fold)[records] == 400
    clock.now += 2
    assert records not in scrape(fold)
    assert set(fold.revisions) == {P + "/apps/a/status", P + "/apps/a/data/train/stats"}


def test_an_unbounded_streams_lag_is_a_gauge_and_other_streams_have_none():
    fold = Fold(P, "default")
    fold.put(kv("/apps/a/status", status("a", AppState.RUNNING), 1))
    fold.put(kv("/apps/a/data/clicks/stats", StreamStats(tasks=7, done=5, lag=1234), 2))
    fold.put(kv("/apps/a/data/train/stats", StreamStats(tasks=10, done=4), 3))

    scraped = scrape(fold)

    assert scraped["primus_data_lag", (("app", "a"), ("stream", "clicks"))] == 1234
    assert ("primus_data_lag", (("app", "a"), ("stream", "train"))) not in scraped


def test_a_deleted_application_leaves_nothing_and_a_resync_deletes_what_it_lacks():
    fold = Fold(P, "default")
    fold.put(kv("/apps/a/status", status("a", AppState.RUNNING), 1))
    fold.put(kv("/apps/a/executors/worker/0/plan", plan("worker", 0, ExecutorState.RUNNING), 2))
    fold.put(kv("/apps/b/status", status("b", AppState.RUNNING), 3))
    fold.delete(P + "/apps/a/status", 4)
    assert "a" not in fold.apps and not fold.plans
    fold.resync([kv("/apps/c/status", status("c", AppState.QUEUED), 10)], 10)
    assert set(fold.apps) == {"c"}


def test_plans_an_application_forged_count_under_bounded_labels_only():
    """An application's plans are its own processes' writes: a role its spec lacks counts
    as ``(other)``, an exit class Primus does not give as ``EXIT_CODE``, and a key whose
    index is not a number is not read; a role a person added counts under its name."""
    fold = Fold(P, "default")
    fold.put(kv("/apps/a/spec", spec("worker"), 1))
    fold.put(kv("/apps/a/roles/eval/spec", b"{}", 2))
    for n, role in enumerate(["worker", "eval", *(f"forged-{i}" for i in range(50))]):
        key = f"/apps/a/executors/{role}/0/plan"
        fold.put(kv(key, plan(role, 0, ExecutorState.RUNNING), 10 + 2 * n))
        fold.put(kv(key, plan(role, 0, ExecutorState.FAILED, exit_class=f"x{n}"), 11 + 2 * n))
    assert dict(fold.failures) == {("worker", "EXIT_CODE"): 1, ("eval", "EXIT_CODE"): 1,
                                   ("(other)", "EXIT_CODE"): 50}
    assert not fold.wanted(P + "/apps/a/executors/worker/x/plan")
