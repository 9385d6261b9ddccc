"""Restart policies, application attempts, deadline and blacklist: the AM's pure decisions."""

from __future__ import annotations

import pydantic
import pytest

from primus.am.reconcile import (
    Finish,
    Launch,
    NoteLag,
    NoteOutOfService,
    RequestHosts,
    SetAppState,
    StartAttempt,
    StopExecutor,
    UpdateExecutor,
    WriteCluster,
    decide,
)
from primus.config.spec import JobSpec, RoleSpec
from primus.state.records import Blacklist, Eviction, ExecutorLive, HostHealth, StreamStats
from primus.state.states import AppState, ExecutorState
from primus.state.view import AppView, StreamFacts
from tests.support.views import (
    HOSTS,
    NOW,
    RUNNING,
    app,
    fold,
    job,
    of_type,
    reserve,
    running,
    set_executor,
)

FAILED, LOST = ExecutorState.FAILED, ExecutorState.LOST


def role(**fields: object) -> RoleSpec:
    return RoleSpec.model_validate({"name": "worker", "command": "train", **fields})


# --- Which exits a policy restarts ------------------------------------------------------------


@pytest.mark.parametrize(("policy", "restarted"), [
    # exit codes:  0      1      3      137    lost
    ("never", [False, False, False, False, False]),
    ("on_failure", [False, True, True, True, True]),
    ("always", [True, True, True, True, True]),
    ("exit_code", [False, False, False, True, True]),
])
def test_policy_decides_which_exits_are_restarted(policy, restarted):
    spec = role(restart_policy=policy, **({"success_percent": 0} if policy == "always" else {}))
    assert [spec.restartable(code) for code in (0, 1, 3, 137, None)] == restarted


def test_retryable_codes_extend_exit_code_policy_and_permanent_codes_win_everywhere():
    spec = role(restart_policy="exit_code", retryable_exit_codes=[3, 143],
                permanent_exit_codes=[143])
    assert (spec.restartable(3), spec.restartable(143), spec.restartable(4)) == (True, False,
                                                                                 False)
    assert not role(restart_policy="on_failure", permanent_exit_codes=[2]).restartable(2)


def test_first_restart_is_immediate_then_backoff_doubles_up_to_its_cap():
    spec = role(restart_backoff=2, restart_backoff_max=10)
    assert [spec.restart_delay(n) for n in (1, 2, 3, 4, 5)] == [0, 2, 4, 8, 10]


def test_always_with_a_success_share_is_rejected_with_the_way_out():
    with pytest.raises(pydantic.ValidationError, match="set success_percent: 0"):
        role(restart_policy="always")


def test_an_oom_kill_is_a_class_of_its_own_that_the_lists_name():
    oom = ("OOM_KILLED",)
    assert role(restart_policy="on_failure").restartable(137, *oom), "a kill, as any other"
    assert not role(restart_policy="on_failure",
                    permanent_exit_codes=["OOM_KILLED"]).restartable(137, *oom)
    assert role(restart_policy="on_failure", permanent_exit_codes=["OOM_KILLED"]).restartable(
        137), "another SIGKILL is no OOM kill"
    assert role(restart_policy="exit_code", retryable_exit_codes=["OOM_KILLED"]).restartable(
        137, *oom)


@pytest.mark.parametrize("code", [0, 256, -1, "OOM", "KILLED"])
def test_exit_code_lists_take_1_to_255(code):
    with pytest.raises(pydantic.ValidationError):
        role(retryable_exit_codes=[code])


# --- Restarting an executor -------------------------------------------------------------------


def workers(num: int = 2, **fields: object) -> AppView:
    return running(job([{"name": "worker", "num": num, **fields}]))


def failed(view: AppView, index: int, code: int, waiting: bool = True) -> None:
    """worker-``index`` reported exit ``code``; when ``waiting`` its executor stays to be
    restarted in place (live key kept, in state FAILED)."""
    executor = set_executor(view, ("worker", index), RUNNING, live=FAILED if waiting else None,
                            exit_code=code)
    if executor.live is not None:
        executor.live = executor.live.model_copy(update={"state": FAILED})


def test_failure_under_on_failure_is_recorded_with_an_immediate_restart():
    view = workers(restart_policy="on_failure")
    failed(view, 1, 3)

    actions = decide(view, NOW, HOSTS)

    [update] = of_type(actions, UpdateExecutor)
    assert (update.state, update.failures, update.restart_at) == (FAILED, 1, NOW)
    assert update.decision == "restarting now (failure 1 of max_failures 3)"
    assert of_type(actions, SetAppState) == []


def test_waiting_executor_restarts_in_place_as_the_next_attempt_at_once():
    view = workers(restart_policy="on_failure")
    failed(view, 1, 3)

    launches = of_type(decide(view, NOW, HOSTS), Launch)

    assert launches == [Launch(("worker", 1), HOSTS[1], attempt=2, failures=1, restarts=1,
                               in_place=True)]


def test_executor_that_left_is_placed_again_as_a_new_process():
    view = workers(restart_policy="on_failure")
    failed(view, 1, 3, waiting=False)

    [launch] = of_type(decide(view, NOW, HOSTS), Launch)

    assert (launch.executor, launch.attempt, launch.in_place) == (("worker", 1), 2, False)


def test_lost_executor_is_stopped_first_then_placed_away_from_its_host():
    view = workers(num=1, restart_policy="on_failure")
    set_executor(view, ("worker", 0), RUNNING)  # on h1; its live key is gone, no result

    first = decide(view, NOW, HOSTS)
    assert [(u.state, u.decision) for u in of_type(first, UpdateExecutor)] == [
        (LOST, "restarting now (failure 1 of max_failures 3)")]
    assert of_type(first, StopExecutor) == [StopExecutor(("worker", 0))]
    assert of_type(first, Launch) == []
    fold(view, first)
    assert of_type(decide(view, NOW, HOSTS), Launch) == [], "no launch while the stop runs"

    view.executors[("worker", 0)].stop_finished = True
    [asked] = of_type(decide(view, NOW, HOSTS), RequestHosts)
    assert asked.release == (("worker", 0),), "its reservation on h1 is given up"
    assert asked.request is not None
    assert (asked.request.executors, asked.request.avoid) == ([("worker", 0)], ["h1"])
    reserve(view, ("worker", 0), HOSTS[1])  # admission places it away from h1
    view.request = None
    [launch] = of_type(decide(view, NOW, HOSTS), Launch)
    assert (launch.host.name, launch.attempt, launch.in_place) == ("h2", 2, False)


def test_max_failures_ends_the_restarts_and_fails_the_app():
    view = workers(restart_policy="on_failure", max_failures=2)
    failed(view, 1, 3)
    view.executors[("worker", 1)].plan = view.executors[("worker", 1)].plan.model_copy(
        update={"failures": 1})

    actions = decide(view, NOW, HOSTS)

    [update] = of_type(actions, UpdateExecutor)
    assert (update.restart_at, update.decision) == (
        None, "not restarted: failed 2 times (max_failures 2)")
    assert of_type(actions, SetAppState) == [SetAppState(
        AppState.FAILED, exit_code=3, diagnosis="worker-1 failed: trainer exited with code 3")]


def test_max_role_failures_counts_failures_over_the_whole_role():
    view = workers(num=3, restart_policy="on_failure", max_role_failures=2)
    failed(view, 0, 3)
    failed(view, 2, 3)

    decisions = [u.decision for u in of_type(decide(view, NOW, HOSTS), UpdateExecutor)]

    assert decisions == ["restarting now (failure 1 of max_failures 3)",
                         "not restarted: role worker failed 2 times (max_role_failures 2)"]


def test_permanent_exit_code_fails_the_app_at_once():
    view = workers(restart_policy="on_failure", permanent_exit_codes=[42])
    failed(view, 0, 42)

    actions = decide(view, NOW, HOSTS)

    assert [u.decision for u in of_type(actions, UpdateExecutor)] == [
        "not restarted: exit code 42 is permanent"]
    assert of_type(actions, SetAppState)[0].state is AppState.FAILED


def test_exit_code_policy_restarts_a_signal_kill_but_not_an_ordinary_error():
    view = workers(restart_policy="exit_code")
    failed(view, 0, 137)
    failed(view, 1, 1)

    decisions = [u.decision for u in of_type(decide(view, NOW, HOSTS), UpdateExecutor)]

    assert decisions == ["restarting now (failure 1 of max_failures 3)",
                         "not restarted: restart_policy exit_code does not retry exit code 1"]


def test_later_restarts_wait_for_their_backoff():
    view = workers(restart_policy="on_failure", restart_backoff=5)
    failed(view, 1, 3)
    view.executors[("worker", 1)].plan = view.executors[("worker", 1)].plan.model_copy(
        update={"failures": 1})
    fold(view, decide(view, NOW, HOSTS))
    assert view.executors[("worker", 1)].plan.restart_at == NOW + 5

    assert of_type(decide(view, NOW + 4.9, HOSTS), Launch) == []
    [launch] = of_type(decide(view, NOW + 5, HOSTS), Launch)
    assert (launch.attempt, launch.failures, launch.restarts) == (2, 2, 1)


def test_always_restarts_an_executor_that_succeeded():
    view = workers(restart_policy="always", success_percent=0)
    failed(view, 0, 0)

    [update] = of_type(decide(view, NOW, HOSTS), UpdateExecutor)

    assert (update.state, update.failures, update.restart_at) == (
        ExecutorState.SUCCEEDED, 0, NOW)


def test_restart_avoids_a_blacklisted_host_instead_of_restarting_in_place():
    view = workers(restart_policy="on_failure")
    failed(view, 1, 3)  # worker-1 runs on h2
    view.blacklist = Blacklist(hosts={"h2": HostHealth(blacklisted_until=NOW + 60)})

    actions = decide(view, NOW, HOSTS)

    assert not of_type(actions, Launch), "not in place on a blacklisted host"
    [asked] = of_type(actions, RequestHosts)
    assert asked.request is not None and asked.request.avoid == ["h2"]
    # Admission uses an avoided host when no other fits: tests/unit/test_admission.py.


def test_expired_blacklisting_no_longer_counts():
    assert Blacklist(hosts={"h2": HostHealth(blacklisted_until=NOW)}).avoided(NOW) == set()


def test_restarted_executor_gets_a_new_cluster_version_with_its_new_ports():
    view = workers(restart_policy="on_failure")
    failed(view, 1, 3)
    fold(view, decide(view, NOW, HOSTS))  # failure recorded, attempt 2 launched in place
    executor = view.executors[("worker", 1)]
    assert executor.live is not None
    executor.live = ExecutorLive(attempt=2, host="h2", address="10.0.0.2", pid=100,
                                 ports=[9500], state=ExecutorState.REGISTERED,
                                 registered_time=NOW)
    before = view.cluster

    writes = of_type(decide(view, NOW, HOSTS), WriteCluster)

    assert before is not None and len(writes) == 1
    cluster = writes[0].cluster
    assert cluster.version == before.version + 1
    assert cluster.member("worker", 1).model_dump() == {
        "role": "worker", "index": 1, "rank": 1, "address": "10.0.0.2", "ports": [9500],
        "attempt": 2}
    assert cluster.member("worker", 0) == before.member("worker", 0)


# --- What a role's failure does ---------------------------------------------------------------


def test_fail_executor_lets_the_others_run_then_the_share_decides():
    view = workers(num=2, failure_action="fail_executor", success_percent=50)
    failed(view, 0, 3, waiting=False)
    first = decide(view, NOW, HOSTS)
    assert of_type(first, SetAppState) == [], "worker-1 still runs"
    fold(view, first)

    set_executor(view, ("worker", 1), RUNNING, exit_code=0)
    assert of_type(decide(view, NOW, HOSTS), SetAppState) == [
        SetAppState(AppState.SUCCEEDED, exit_code=0)]


def test_fail_executor_fails_the_app_once_all_ended_short_of_the_share():
    view = workers(num=2, failure_action="fail_executor")
    failed(view, 0, 3, waiting=False)
    fold(view, decide(view, NOW, HOSTS))
    set_executor(view, ("worker", 1), RUNNING, exit_code=0)

    [verdict] = of_type(decide(view, NOW, HOSTS), SetAppState)

    assert (verdict.state, verdict.diagnosis) == (
        AppState.FAILED, "worker-0 failed: trainer exited with code 3")


# --- Application attempts and deadline --------------------------------------------------------


def test_failed_attempt_restarts_the_whole_app_when_attempts_remain():
    view = running(job([{"name": "worker", "num": 2}], max_app_attempts=2))
    failed(view, 0, 3, waiting=False)

    first = decide(view, NOW, HOSTS)
    [restarting] = of_type(first, SetAppState)
    assert restarting.state is AppState.RESTARTING
    assert restarting.diagnosis == ("attempt 1 failed: worker-0 failed: trainer exited with code"
                                    " 3; starting attempt 2 of 2")
    fold(view, first)

    stopping = decide(view, NOW, HOSTS)
    assert of_type(stopping, StopExecutor) == [StopExecutor(("worker", 1))]
    assert of_type(stopping, StartAttempt) == []
    fold(view, stopping)
    view.executors[("worker", 1)].stop_finished = True
    stopped = decide(view, NOW, HOSTS)
    assert [(u.executor, u.state) for u in of_type(stopped, UpdateExecutor)] == [
        (("worker", 1), ExecutorState.KILLED)]
    assert of_type(stopped, StartAttempt) == [StartAttempt(2)]
    fold(view, stopped)
    waiting = decide(view, NOW, HOSTS)
    assert not of_type(waiting, Launch), "worker-0 gave its host up when it failed for good"
    [asked] = of_type(waiting, RequestHosts)
    assert asked.request is not None and asked.request.executors == [("worker", 0)]
    reserve(view, ("worker", 0))
    launches = of_type(decide(view, NOW, HOSTS), Launch)
    assert [(launch.executor, launch.attempt, launch.failures) for launch in launches] == [
        (("worker", 0), 2, 0), (("worker", 1), 2, 0)]


def test_last_attempt_failing_fails_the_app():
    view = running(job([{"name": "worker", "num": 1}], max_app_attempts=2))
    view.status = view.status.model_copy(update={"attempt": 2})
    for ex in view.executors.values():
        ex.plan = ex.plan.model_copy(update={"app_attempt": 2})
    failed(view, 0, 3, waiting=False)
    view.executors[("worker", 0)].plan = view.executors[("worker", 0)].plan.model_copy(
        update={"app_attempt": 2})

    assert of_type(decide(view, NOW, HOSTS), SetAppState)[0].state is AppState.FAILED


def test_deadline_fails_the_app_with_exit_code_124():
    view = running(job([{"name": "worker"}], deadline=60))
    assert view.status.submit_time == NOW - 10

    assert of_type(decide(view, NOW + 49, HOSTS), SetAppState) == []
    assert of_type(decide(view, NOW + 50, HOSTS), SetAppState) == [SetAppState(
        AppState.FAILED, exit_code=124, diagnosis="deadline of 60s from submission passed")]


def test_app_ending_stops_an_executor_waiting_for_its_restart():
    view = workers(restart_policy="on_failure", restart_backoff=30)
    failed(view, 1, 3)
    view.executors[("worker", 1)].plan = view.executors[("worker", 1)].plan.model_copy(
        update={"failures": 1})
    fold(view, decide(view, NOW, HOSTS))
    view.status = view.status.model_copy(update={"state": AppState.KILLED})

    actions = decide(view, NOW, HOSTS)

    assert StopExecutor(("worker", 1), last=True) in actions
    assert Finish() not in actions


def test_app_view_starts_without_blacklisted_hosts():
    assert app(job([{"name": "worker"}])).blacklist.avoided(NOW) == set()


def test_a_lost_executor_takes_the_same_host_back_when_admission_finds_no_other():
    view = workers(num=1, restart_policy="on_failure")
    set_executor(view, ("worker", 0), RUNNING)  # on h1; lost
    fold(view, decide(view, NOW, HOSTS))
    view.executors[("worker", 0)].stop_finished = True
    [asked] = of_type(decide(view, NOW, HOSTS), RequestHosts)
    fold(view, [asked])  # as the AM does: h1's reservation given up, asked away from h1
    view.request = None  # granted and withdrawn
    reserve(view, ("worker", 0), HOSTS[0])  # h1 again: no other host fits

    actions = decide(view, NOW, HOSTS)

    [launch] = of_type(actions, Launch)
    assert (launch.host.name, launch.attempt) == ("h1", 2), "not given up and asked again"


def test_executors_on_a_host_to_leave_are_moved_as_a_lost_hosts_without_a_failure():
    view = workers(2, restart_policy="never")
    view.eviction = Eviction(hosts={"h1": "drained by alice: new disks"}, move=True)

    actions = decide(view, NOW, HOSTS)
    assert of_type(actions, NoteOutOfService) == [NoteOutOfService(
        (("h1", "drained by alice: new disks"),), moved=True)]

    [moved] = of_type(actions, UpdateExecutor)
    assert (moved.executor, moved.state, moved.failures) == (("worker", 0), LOST, 0)
    assert moved.diagnosis == "moved off h1: drained by alice: new disks"
    assert moved.restart_at == NOW and moved.blacklist is None
    fold(view, actions)
    stopping = decide(view, NOW, HOSTS)
    assert of_type(stopping, StopExecutor) == [StopExecutor(("worker", 0))]
    fold(view, stopping)
    view.executors[("worker", 0)].stop_finished = True
    again = decide(view, NOW, HOSTS)
    [asked] = of_type(again, RequestHosts)
    assert (asked.request.executors, asked.request.avoid) == ([("worker", 0)], ["h1"])
    assert not of_type(again, SetAppState), "a move is no failure: the application runs on"


def test_a_host_out_of_service_is_noted_once_and_what_runs_there_runs_on_unless_moved():
    view = workers(2, restart_policy="never")
    view.eviction = Eviction(hosts={"h1": "quarantined by the health check: exit 1"})

    actions = decide(view, NOW, HOSTS)

    assert of_type(actions, NoteOutOfService) == [NoteOutOfService(
        (("h1", "quarantined by the health check: exit 1"),), moved=False)]
    assert not of_type(actions, UpdateExecutor), "finish: it runs on"
    fold(view, actions)
    assert not of_type(decide(view, NOW, HOSTS), NoteOutOfService), "noted once"


def test_an_unbounded_streams_lag_past_max_lag_is_noted_once_each_way_and_nothing_stops():
    spec = JobSpec.model_validate({
        "name": "job", "roles": [{"name": "worker", "command": "train"}],
        "data": [{"name": "clicks", "roles": ["worker"], "sources": [{"kafka": {
            "client": "c", "topics": ["t"], "end": "none", "max_lag": 100}}]}]})
    view = running(spec)

    def lag(messages: int) -> list:
        view.stream_facts["clicks"] = StreamFacts(StreamStats(tasks=3, lag=messages))
        actions = decide(view, NOW, HOSTS)
        assert not of_type(actions, SetAppState) and not of_type(actions, StopExecutor)
        fold(view, actions)
        return of_type(actions, NoteLag)

    assert lag(100) == []
    assert lag(101) == [NoteLag("clicks", 101, 100)]
    assert lag(5000) == [], "noted once while it stays past"
    assert lag(40) == [NoteLag("clicks", 40, 100)], "back under: noted too"
    assert lag(60) == []
