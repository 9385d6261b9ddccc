"""The AM's decisions: from an observed view of an application to the actions that move it on."""

from __future__ import annotations

import pytest

from primus.am.reconcile import (
    Action,
    Finish,
    Launch,
    Park,
    RecordChanges,
    RequestHosts,
    Requeue,
    SetAppState,
    StopExecutor,
    Suspend,
    UpdateExecutor,
    WriteCluster,
    decide,
    required_successes,
)
from primus.config.inventory import Host
from primus.config.spec import JobSpec
from primus.data.tasks import ReadRates
from primus.state.records import (
    AdmissionRequest,
    AppEvent,
    ClusterMember,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    KillRequest,
    Preemption,
    SuspendRequest,
    TaskOwner,
    encode,
)
from primus.state.states import AppState, ExecutorState, check_transition
from primus.state.topology import RoleAdded, RoleRemoved, TopologyChange, effective_spec
from primus.state.view import AppView
from primus.store.api import KeyValue, Snapshot
from tests.support.views import (
    HOSTS,
    KEYS,
    LAUNCHED,
    NOW,
    PLANNED,
    REGISTERED,
    RUNNING,
    app,
    delete,
    fold,
    job,
    of_type,
    put,
    reserve,
    running,
    set_all,
    set_executor,
)

CHIEF_AND_WORKERS = [{"name": "chief"}, {"name": "worker", "num": 2}]


def request_kill(view: AppView) -> AppView:
    view.kill = KillRequest(time=NOW, reason="killed by alice")
    return view


def submitted() -> AppView:
    return app(job(CHIEF_AND_WORKERS), AppState.SUBMITTED, None)


def gang_registered() -> AppView:
    """Every executor launched and its live key written; the AM has not noticed yet."""
    return set_all(app(job(CHIEF_AND_WORKERS), AppState.STARTING), LAUNCHED, live=REGISTERED)


def running_workers(num: int = 2, **role: object) -> AppView:
    return running(job([{"name": "worker", "num": num, **role}]))


def kill_requested() -> AppView:
    return request_kill(running_workers())


def killed() -> AppView:
    """An application killed while its two workers were running; they are not stopped yet."""
    return request_kill(running(job([{"name": "worker", "num": 2}]), AppState.KILLED))


# --- Starting ---------------------------------------------------------------------------------


def test_submitted_app_is_set_starting():
    actions = decide(submitted(), NOW, HOSTS)

    assert of_type(actions, SetAppState) == [SetAppState(AppState.STARTING)]


def test_submitted_app_launches_each_executor_once():
    actions = decide(submitted(), NOW, HOSTS)

    launched = [launch.executor for launch in of_type(actions, Launch)]
    assert sorted(launched) == [("chief", 0), ("worker", 0), ("worker", 1)]


def test_an_app_without_hosts_is_queued_asking_for_every_executor_at_once():
    view = app(job(CHIEF_AND_WORKERS), AppState.SUBMITTED, None, reserved=False)

    actions = decide(view, NOW, HOSTS)

    assert of_type(actions, SetAppState) == [SetAppState(AppState.QUEUED)]
    assert not of_type(actions, Launch)
    [asked] = of_type(actions, RequestHosts)
    assert asked.request is not None and asked.release == ()
    assert asked.request.executors == [("chief", 0), ("worker", 0), ("worker", 1)]
    assert asked.request.hosts == ["h1", "h2"] and not asked.request.granted


def queued_with_its_request() -> AppView:
    """QUEUED, its request for every executor written and not granted, where an AM keeper
    runs."""
    view = app(job(CHIEF_AND_WORKERS), AppState.QUEUED, None, reserved=False)
    [asked] = of_type(decide(view, NOW, HOSTS), RequestHosts)
    view.request, view.may_park = asked.request, True
    return view


def test_a_queued_app_whose_request_waits_parks_its_am_where_a_keeper_runs():
    view = queued_with_its_request()

    assert decide(view, NOW, HOSTS) == [Park()]
    view.may_park = False
    assert decide(view, NOW, HOSTS) == [], "no keeper: the AM waits with its application"


@pytest.mark.parametrize("change", ["granted", "reserved", "kill", "suspend", "preempt",
                                    "other executors"])
def test_an_am_with_something_to_do_or_hosts_granted_does_not_park(change):
    view = queued_with_its_request()
    assert view.request is not None
    if change == "granted":
        view.request = view.request.model_copy(update={"granted": True})
    elif change == "reserved":
        reserve(view, ("chief", 0), HOSTS[1])
    elif change == "kill":
        view.kill = KillRequest(time=NOW)
    elif change == "suspend":
        view.suspend = SuspendRequest(time=NOW, user="alice")
    elif change == "preempt":
        view.preemption = Preemption(by="urgent-1", time=NOW, reason="for urgent-1")
    else:
        view.request = view.request.model_copy(update={"executors": [("chief", 0)]})

    assert Park() not in decide(view, NOW, HOSTS)


def test_a_queued_app_starts_on_its_reservations_once_it_holds_them_all():
    view = app(job(CHIEF_AND_WORKERS), AppState.QUEUED, None, reserved=False)
    reserve(view, ("chief", 0), HOSTS[1])
    assert not of_type(decide(view, NOW, HOSTS), Launch), "no partial start"
    for key in (("worker", 0), ("worker", 1)):
        reserve(view, key, HOSTS[0], gpus=(key[1],))

    actions = decide(view, NOW, [Host("h1", "10.0.0.1", gpus=2), HOSTS[1]])

    assert of_type(actions, SetAppState) == [SetAppState(AppState.STARTING)]
    assert {(a.executor, a.host.name, a.gpus) for a in of_type(actions, Launch)} == {
        (("chief", 0), "h2", ()), (("worker", 0), "h1", (0,)), (("worker", 1), "h1", (1,))}


def test_an_elastic_role_starts_at_its_minimum_and_runs_without_those_waiting_for_hosts():
    view = app(job([{"name": "worker", "num": 3, "min_num": 2}]), AppState.QUEUED, None,
               reserved=False)
    for index in (0, 1):
        reserve(view, ("worker", index))

    actions = decide(view, NOW, HOSTS)

    assert of_type(actions, SetAppState) == [SetAppState(AppState.STARTING)]
    assert sorted(a.executor for a in of_type(actions, Launch)) == [("worker", 0), ("worker", 1)]
    assert [a.request.executors for a in of_type(actions, RequestHosts)] == [[("worker", 2)]]
    fold(view, actions)
    for index in (0, 1):
        set_executor(view, ("worker", index), LAUNCHED, live=REGISTERED)
    [written] = of_type(decide(view, NOW, HOSTS), WriteCluster)
    assert [(m.role, m.index) for m in written.cluster.members] == [("worker", 0), ("worker", 1)]


def test_an_elastic_role_is_done_once_what_started_succeeded_without_those_never_given_hosts():
    view = app(job([{"name": "worker", "num": 3, "min_num": 2}]), reserved=False)
    for index in (0, 1):
        reserve(view, ("worker", index))
        set_executor(view, ("worker", index), RUNNING, exit_code=0)

    assert of_type(decide(view, NOW, HOSTS), SetAppState) == [
        SetAppState(AppState.SUCCEEDED, exit_code=0)]


def test_an_index_that_ended_for_good_gives_its_reservation_up_and_a_restart_keeps_it():
    view = set_all(app(job([{"name": "worker", "num": 2, "restart_policy": "on_failure",
                              "max_failures": 1}])), RUNNING, RUNNING)
    set_executor(view, ("worker", 0), RUNNING, exit_code=0)
    set_executor(view, ("worker", 1), RUNNING, exit_code=3)

    updates = {u.executor: u for u in of_type(decide(view, NOW, HOSTS), UpdateExecutor)}

    assert updates[("worker", 0)].release and updates[("worker", 1)].release


def test_a_lost_executor_gives_up_its_reservation_and_asks_for_a_host_elsewhere():
    view = set_all(app(job([{"name": "worker", "num": 2, "restart_policy": "on_failure"}])),
                   RUNNING, RUNNING)
    plan = view.executors[("worker", 1)].plan
    assert plan is not None
    view.executors[("worker", 1)].plan = plan.model_copy(update={
        "state": ExecutorState.LOST, "restart_at": NOW, "failures": 1})
    view.executors[("worker", 1)].live = None
    view.executors[("worker", 1)].stop_requested = True  # what it left behind was stopped
    view.executors[("worker", 1)].stop_finished = True

    [asked] = of_type(decide(view, NOW, HOSTS), RequestHosts)

    assert asked.release == (("worker", 1),)
    assert asked.request is not None and asked.request.executors == [("worker", 1)]
    assert asked.request.avoid == ["h2"]


def test_a_granted_request_is_withdrawn_once_its_reservations_are_seen():
    view = set_all(app(job(CHIEF_AND_WORKERS)), RUNNING, RUNNING)
    view.request = AdmissionRequest(app_id=KEYS.app_id, user="alice", queue="", submit_time=NOW,
                                    roles=[], executors=[("worker", 0)], granted=True)

    assert of_type(decide(view, NOW, HOSTS), RequestHosts) == [RequestHosts(None)]


def test_executors_whose_reservations_are_not_their_roles_size_are_asked_for_in_place():
    view = set_all(app(job(CHIEF_AND_WORKERS)), RUNNING, RUNNING)
    for key in view.executors:
        reserve(view, key)
    assert of_type(decide(view, NOW, HOSTS), RequestHosts) == []  # every one at its size
    view.submitted = view.submitted.model_copy(update={"roles": [
        r.model_copy(update={"cpu": 2.0}) if r.name == "worker" else r
        for r in view.submitted.roles]})
    view.spec = view.submitted  # as a resize's roles/worker/resources makes it
    (asked,) = of_type(decide(view, NOW, HOSTS), RequestHosts)
    assert asked.request is not None and asked.request.resize
    assert asked.request.executors == [("worker", 0), ("worker", 1)]
    assert [role.cpu for role in asked.request.roles] == [2.0]
    view.request = asked.request  # waiting: asked once
    assert of_type(decide(view, NOW, HOSTS), RequestHosts) == []
    for index in (0, 1):  # granted: the reservations at the new size
        reserve(view, ("worker", index))
    view.request = asked.request.model_copy(update={"granted": True})
    assert of_type(decide(view, NOW, HOSTS), RequestHosts) == [RequestHosts(None)]


def test_launched_executor_with_a_live_key_is_recorded_registered():
    view = app(job([{"name": "worker"}]), AppState.STARTING)
    set_executor(view, ("worker", 0), LAUNCHED, live=REGISTERED)

    assert of_type(decide(view, NOW, HOSTS), UpdateExecutor) == [
        UpdateExecutor(("worker", 0), REGISTERED)]


def test_cluster_is_written_and_app_runs_once_every_executor_registered():
    view = gang_registered()

    actions = decide(view, NOW, HOSTS)

    assert len(of_type(actions, WriteCluster)) == 1
    assert of_type(actions, SetAppState) == [SetAppState(AppState.RUNNING)]


def test_cluster_is_not_written_while_an_executor_has_not_registered():
    view = gang_registered()
    view.executors[("worker", 1)].live = None

    assert of_type(decide(view, NOW, HOSTS), WriteCluster) == []


def test_cluster_ranks_executors_in_role_order_with_rank_0_as_master():
    view = set_all(app(job(CHIEF_AND_WORKERS), AppState.STARTING), REGISTERED, live=REGISTERED)

    [write] = of_type(decide(view, NOW, HOSTS), WriteCluster)

    assert write.cluster.members == [
        ClusterMember(role="chief", index=0, rank=0, address="10.0.0.1", ports=[7000, 7001]),
        ClusterMember(role="worker", index=0, rank=1, address="10.0.0.1", ports=[9000, 9001]),
        ClusterMember(role="worker", index=1, rank=2, address="10.0.0.2", ports=[9010, 9011]),
    ]
    assert (write.cluster.master_addr, write.cluster.master_port) == ("10.0.0.1", 7000)


# --- Executor outcomes ------------------------------------------------------------------------


def test_exit_0_marks_the_executor_succeeded():
    view = running_workers()
    set_executor(view, ("worker", 1), RUNNING, exit_code=0)

    [update] = of_type(decide(view, NOW, HOSTS), UpdateExecutor)
    assert (update.executor, update.state, update.exit_code, update.restart_at) == (
        ("worker", 1), ExecutorState.SUCCEEDED, 0, None)


def test_non_zero_exit_marks_the_executor_failed_with_its_code():
    view = running_workers()
    set_executor(view, ("worker", 1), RUNNING, exit_code=3)

    [update] = of_type(decide(view, NOW, HOSTS), UpdateExecutor)
    assert (update.executor, update.state, update.exit_code, update.diagnosis) == (
        ("worker", 1), ExecutorState.FAILED, 3, "trainer exited with code 3")
    assert update.restart_at is None
    assert update.decision == "not restarted: restart_policy never"


def test_non_zero_exit_fails_the_app_naming_the_executor_and_exit_code():
    view = running_workers()
    set_executor(view, ("worker", 1), RUNNING, exit_code=3)

    assert of_type(decide(view, NOW, HOSTS), SetAppState) == [SetAppState(
        AppState.FAILED, exit_code=3, diagnosis="worker-1 failed: trainer exited with code 3")]


def test_live_key_gone_without_a_result_marks_the_executor_lost():
    view = running_workers()
    set_executor(view, ("worker", 0), RUNNING)

    [update] = of_type(decide(view, NOW, HOSTS), UpdateExecutor)

    assert (update.executor, update.state) == (("worker", 0), ExecutorState.LOST)


def test_executor_that_exited_before_registering_is_failed_pointing_at_its_log():
    view = app(job([{"name": "worker"}]), AppState.STARTING)
    set_executor(view, ("worker", 0), LAUNCHED).process_exited = True

    [update] = of_type(decide(view, NOW, HOSTS), UpdateExecutor)

    assert update.state is ExecutorState.FAILED
    assert "/logs/worker-0.executor.log" in update.diagnosis


def test_all_executors_succeeding_succeeds_the_app():
    view = running_workers()
    for key in view.executors:
        set_executor(view, key, RUNNING, exit_code=0)

    assert of_type(decide(view, NOW, HOSTS), SetAppState) == [
        SetAppState(AppState.SUCCEEDED, exit_code=0)]


# --- success_percent --------------------------------------------------------------------------


@pytest.mark.parametrize(("num", "percent", "needed"), [
    (2, 100, 2), (2, 50, 1), (3, 50, 2), (10, 70, 7), (4, 0, 0),
])
def test_required_successes_is_the_share_rounded_up(num, percent, needed):
    assert required_successes(num, percent) == needed


def test_half_success_role_survives_one_failure():
    view = running_workers(success_percent=50)
    set_executor(view, ("worker", 0), RUNNING, exit_code=1)

    assert of_type(decide(view, NOW, HOSTS), SetAppState) == []


def test_half_success_role_succeeds_with_one_success():
    view = running_workers(success_percent=50)
    set_executor(view, ("worker", 0), RUNNING, exit_code=0)

    assert of_type(decide(view, NOW, HOSTS), SetAppState) == [
        SetAppState(AppState.SUCCEEDED, exit_code=0)]


def ps_and_succeeded_workers(app_state: AppState = AppState.RUNNING) -> AppView:
    """Two workers that succeeded beside a ps (needing no success) whose trainer still runs."""
    spec = job([{"name": "ps"}, {"name": "worker", "num": 2}])
    # The spec model requires success_percent > 0; the reconciler's handling of 0 is what is tested.
    ps = spec.roles[0].model_copy(update={"success_percent": 0.0})
    view = running(spec.model_copy(update={"roles": [ps, spec.roles[1]]}), app_state)
    set_executor(view, ("worker", 0), ExecutorState.SUCCEEDED)
    set_executor(view, ("worker", 1), ExecutorState.SUCCEEDED)
    return view


def test_role_with_zero_success_percent_does_not_hold_success_back():
    assert decide(ps_and_succeeded_workers(), NOW, HOSTS) == [
        SetAppState(AppState.SUCCEEDED, exit_code=0)]


def test_running_ps_is_stopped_once_the_app_succeeded():
    assert decide(ps_and_succeeded_workers(AppState.SUCCEEDED), NOW, HOSTS) == [
        StopExecutor(("ps", 0), last=True)]


# --- Killing ----------------------------------------------------------------------------------


def test_kill_request_marks_the_app_killed_with_its_reason():
    view = kill_requested()

    assert of_type(decide(view, NOW, HOSTS), SetAppState) == [
        SetAppState(AppState.KILLED, diagnosis="killed by alice")]


def test_kill_request_stops_every_running_executor():
    view = kill_requested()

    assert of_type(decide(view, NOW, HOSTS), StopExecutor) == [
        StopExecutor(("worker", 0), last=True), StopExecutor(("worker", 1), last=True)]


def test_kill_request_marks_planned_executors_killed_without_stopping_them():
    view = request_kill(set_all(app(job(CHIEF_AND_WORKERS), AppState.STARTING), PLANNED))

    actions = decide(view, NOW, HOSTS)

    assert [(u.executor, u.state) for u in of_type(actions, UpdateExecutor)] == [
        (key, ExecutorState.KILLED) for key in view.executors]
    assert of_type(actions, StopExecutor) == []


def test_stopped_executor_is_marked_killed():
    view = kill_requested()
    view.executors[("worker", 0)].stop_finished = True

    [update] = of_type(decide(view, NOW, HOSTS), UpdateExecutor)

    assert (update.executor, update.state) == (("worker", 0), ExecutorState.KILLED)


def test_killed_app_does_not_finish_while_an_executor_still_runs():
    view = killed()
    set_executor(view, ("worker", 0), ExecutorState.KILLED)

    assert of_type(decide(view, NOW, HOSTS), Finish) == []


def test_succeed_request_stops_every_running_executor_and_records_succeeded_with_who_asked():
    view = running_workers()
    view.kill = KillRequest(time=NOW, user="alice", reason="eval passed",
                            outcome=AppState.SUCCEEDED)

    actions = decide(view, NOW, HOSTS)

    assert of_type(actions, SetAppState) == [SetAppState(
        AppState.SUCCEEDED, exit_code=0, diagnosis="ended as succeeded by alice: eval passed")]
    assert of_type(actions, StopExecutor) == [
        StopExecutor(("worker", 0), last=True), StopExecutor(("worker", 1), last=True)]


def test_a_kill_request_ends_nothing_but_killed_or_succeeded():
    with pytest.raises(ValueError, match="must be KILLED or SUCCEEDED"):
        KillRequest(time=NOW, outcome=AppState.FAILED)


def test_killed_app_finishes_once_every_executor_is_terminal():
    view = killed()
    set_executor(view, ("worker", 0), ExecutorState.KILLED)
    set_executor(view, ("worker", 1), ExecutorState.SUCCEEDED)

    assert decide(view, NOW, HOSTS) == [Finish()]


# --- Register timeout -------------------------------------------------------------------------


def partly_registered(now: float) -> list[Action]:
    """What is decided at ``now`` when only chief-0 registered of a job with a 60 s timeout."""
    view = app(job(CHIEF_AND_WORKERS, register_timeout=60), AppState.STARTING, start_time=NOW)
    set_all(view, LAUNCHED)
    set_executor(view, ("chief", 0), REGISTERED, live=REGISTERED)
    return decide(view, now, HOSTS)


def test_register_timeout_fails_the_missing_executors_stops_them_and_fails_the_app():
    actions = partly_registered(NOW + 61)

    assert [(u.executor, u.state) for u in of_type(actions, UpdateExecutor)] == [
        (("worker", 0), ExecutorState.FAILED), (("worker", 1), ExecutorState.FAILED)]
    assert of_type(actions, StopExecutor) == [StopExecutor(("worker", 0)),
                                               StopExecutor(("worker", 1))]
    assert of_type(actions, SetAppState) == [SetAppState(
        AppState.FAILED, exit_code=1, diagnosis=(
            "worker-0 failed: did not register within 60s; see /logs/worker-0.executor.log"))]


def test_app_waits_for_registration_until_the_timeout():
    assert partly_registered(NOW + 59) == []


# --- Plans an earlier AM left -----------------------------------------------------------------


def left_planned(inherited: bool = True) -> AppView:
    """What an AM finds on taking over an application that started an hour ago (register
    timeout 60 s): worker-0 registered, and worker-1's attempt 3 (on h2, GPU 1) planned but not
    recorded launched. ``inherited``: that plan was there when this AM began to lead, so the AM
    that wrote it may have ended before launching it; otherwise this AM wrote it and is
    launching it."""
    view = app(job([{"name": "worker", "num": 2}], register_timeout=60), AppState.STARTING,
               start_time=NOW - 3600)
    set_executor(view, ("worker", 0), REGISTERED, live=REGISTERED)
    worker = set_executor(view, ("worker", 1), PLANNED)
    assert worker.plan is not None
    worker.plan = worker.plan.model_copy(update={"attempt": 3, "failures": 2, "restarts": 2,
                                                 "gpus": [1]})
    worker.inherited_plan = inherited
    return view


def test_a_plan_left_by_an_earlier_am_is_launched_again_as_the_same_attempt():
    actions = decide(left_planned(), NOW, HOSTS)

    assert [(a.executor, a.host.name, a.attempt, a.failures, a.restarts, a.gpus, a.again)
            for a in of_type(actions, Launch)] == [(("worker", 1), "h2", 3, 2, 2, (1,), True)]


def test_a_plan_left_by_an_earlier_am_does_not_fail_its_register_timeout_counted_from_before():
    actions = decide(left_planned(), NOW, HOSTS)

    assert of_type(actions, UpdateExecutor) == [], \
        "its register timeout counts from its launch again, not from the application's start"
    assert of_type(actions, StopExecutor) == [] and of_type(actions, SetAppState) == []


def test_a_plan_this_am_wrote_is_not_launched_a_second_time():
    view = left_planned(inherited=False)
    view.status = view.status.model_copy(update={"start_time": NOW})

    assert [a.executor for a in of_type(decide(view, NOW, HOSTS), Launch)] == []


def test_a_plan_this_am_wrote_still_fails_its_register_timeout():
    actions = decide(left_planned(inherited=False), NOW, HOSTS)

    assert [(u.executor, u.state, u.diagnosis) for u in of_type(actions, UpdateExecutor)] == [
        (("worker", 1), ExecutorState.FAILED,
         "did not register within 60s; see /logs/worker-1.executor.log")]
    assert [a.executor for a in of_type(actions, Launch)] == []


def test_a_plan_left_by_an_earlier_am_whose_executor_registered_is_not_launched_again():
    # The earlier AM launched it and died before recording LAUNCHED; the executor registered.
    view = left_planned()
    view.executors[("worker", 1)].live = ExecutorLive(
        attempt=3, host="h2", address="10.0.0.2", pid=100, ports=[9010, 9011], state=REGISTERED,
        registered_time=NOW)

    actions = decide(view, NOW, HOSTS)

    assert of_type(actions, UpdateExecutor) == [UpdateExecutor(("worker", 1), REGISTERED)]
    assert [a.executor for a in of_type(actions, Launch)] == []


def test_a_plan_left_by_an_earlier_am_on_a_host_gone_from_the_inventory_fails_its_timeout():
    # Nowhere to launch it again: it must not wait for ever.
    hosts = [h for h in HOSTS if h.name != "h2"]

    actions = decide(left_planned(), NOW, hosts)

    assert [a.executor for a in of_type(actions, Launch)] == []
    updates = of_type(actions, UpdateExecutor)
    assert [(u.executor, u.state) for u in updates] == [(("worker", 1), ExecutorState.FAILED)], \
        f"worker-1 planned on a host no longer listed fails its register timeout; got {updates}"
    assert "did not register within 60s" in updates[0].diagnosis


# --- Idempotency ------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", [submitted, gang_registered, kill_requested])
def test_decide_returns_nothing_new_once_its_actions_are_recorded(scenario):
    view = scenario()
    actions = decide(view, NOW, HOSTS)
    assert actions

    fold(view, actions)

    assert decide(view, NOW, HOSTS) == []


# --- Observing --------------------------------------------------------------------------------


def worker_plan() -> ExecutorPlan:
    return ExecutorPlan(role="worker", index=1, attempt=1, host="h2", address="10.0.0.2",
                        state=LAUNCHED)


def worker_live() -> ExecutorLive:
    return ExecutorLive(attempt=1, host="h2", address="10.0.0.2", pid=42, ports=[9010],
                        state=REGISTERED, registered_time=NOW)


def test_observe_folds_a_put_of_an_executor_plan():
    view = app(job(CHIEF_AND_WORKERS))

    view.observe(put(KEYS.executor("worker", 1, "plan"), worker_plan()))

    assert view.executors[("worker", 1)].plan == worker_plan()


def test_observe_folds_a_put_of_an_executor_live_key():
    view = app(job(CHIEF_AND_WORKERS))

    view.observe(put(KEYS.executor("worker", 1, "live"), worker_live()))

    assert view.executors[("worker", 1)].live == worker_live()


def test_observe_folds_a_put_of_an_executor_result():
    view = app(job(CHIEF_AND_WORKERS))
    result = ExecutorResult(attempt=1, exit_code=3, finish_time=NOW)

    view.observe(put(KEYS.executor("worker", 1, "result"), result))

    assert view.executors[("worker", 1)].result == result


def test_observe_folds_a_put_of_the_app_status():
    view = app(job(CHIEF_AND_WORKERS))
    status = view.status.model_copy(update={"state": AppState.FAILED, "diagnosis": "boom"})

    view.observe(put(KEYS.status, status))

    assert view.status == status


def test_observe_folds_a_put_of_a_kill_request():
    view = app(job(CHIEF_AND_WORKERS))

    view.observe(put(KEYS.kill, KillRequest(time=NOW)))

    assert view.kill == KillRequest(time=NOW)


def test_observe_clears_a_deleted_live_key():
    view = app(job(CHIEF_AND_WORKERS))
    view.executors[("worker", 1)].live = worker_live()

    view.observe(delete(KEYS.executor("worker", 1, "live")))

    assert view.executors[("worker", 1)].live is None


def test_observe_clears_a_deleted_kill_request():
    view = request_kill(app(job(CHIEF_AND_WORKERS)))

    view.observe(delete(KEYS.kill))

    assert view.kill is None


def test_observe_keeps_an_executor_outside_the_topology_for_the_am_to_retire():
    view = app(job(CHIEF_AND_WORKERS))

    view.observe(put(KEYS.executor("worker", 7, "plan"), worker_plan()))

    assert view.executors[("worker", 7)].plan is not None
    assert not view.is_current(("worker", 7))


def test_observe_of_an_event_moves_the_next_event_seq_past_it():
    view = app(job(CHIEF_AND_WORKERS))

    view.observe(put(KEYS.event(41), AppEvent(seq=41, time=NOW, kind="placed", message="x")))

    assert view.next_event_seq == 42


def test_view_from_snapshot_has_every_executor_of_the_spec_and_the_stored_keys():
    spec = job(CHIEF_AND_WORKERS)
    stored = {KEYS.spec: spec.model_dump_json().encode(), KEYS.status: encode(app(spec).status),
              KEYS.executor("worker", 1, "plan"): encode(worker_plan())}
    snapshot = Snapshot(revision=9, kvs=tuple(
        KeyValue(key, value, create_revision=1, mod_revision=1, version=1)
        for key, value in stored.items()))

    view = AppView.from_snapshot(KEYS, snapshot)

    assert list(view.executors) == [("chief", 0), ("worker", 0), ("worker", 1)]
    assert view.executors[("worker", 1)].plan == worker_plan()


def test_planned_executor_that_ran_and_exited_0_succeeds_with_an_allowed_transition():
    # The AM died between launching and recording LAUNCHED; the executor ran all the same.
    view = running_workers()
    set_executor(view, ("worker", 0), ExecutorState.PLANNED, exit_code=0)
    [update] = of_type(decide(view, NOW, HOSTS), UpdateExecutor)
    assert update.state is ExecutorState.SUCCEEDED
    check_transition(ExecutorState.PLANNED, update.state)


def test_planned_executor_that_registered_follows_its_live_state():
    view = running_workers()
    set_executor(view, ("worker", 0), ExecutorState.PLANNED, live=ExecutorState.RUNNING)
    [update] = of_type(decide(view, NOW, HOSTS), UpdateExecutor)
    assert update.state is ExecutorState.RUNNING


def test_lost_executor_gets_its_remains_stopped():
    view = running_workers()
    set_executor(view, ("worker", 0), ExecutorState.LOST)
    stops = of_type(decide(view, NOW, HOSTS), StopExecutor)
    assert ("worker", 0) in [stop.executor for stop in stops]


# --- Topology changed at run time ---------------------------------------------------------


def scaled(view: AppView, role: str, num: int) -> AppView:
    """``view`` after ``roles/<role>/desired`` was set to ``num`` (as the client layer does)."""
    view.observe_put(KEYS.desired(role), str(num).encode())
    return view


def test_scale_up_asks_hosts_for_the_new_indices_then_launches_only_them():
    view = scaled(set_all(app(job(CHIEF_AND_WORKERS)), RUNNING, RUNNING), "worker", 4)
    [asked] = of_type(decide(view, NOW, HOSTS), RequestHosts)
    assert asked.request is not None
    assert asked.request.executors == [("worker", 2), ("worker", 3)]
    for index in (2, 3):
        reserve(view, ("worker", index))
    launches = of_type(decide(view, NOW, HOSTS), Launch)
    assert sorted(launch.executor for launch in launches) == [("worker", 2), ("worker", 3)]
    assert all(launch.attempt == 1 for launch in launches)


def test_scale_down_stops_the_highest_indices_then_records_them_retired_not_failed():
    view = set_all(app(job([{"name": "worker", "num": 3}])), RUNNING, RUNNING)
    scaled(view, "worker", 1)
    actions = decide(view, NOW, HOSTS)
    assert sorted(a.executor for a in of_type(actions, StopExecutor)) == [
        ("worker", 1), ("worker", 2)]
    assert not of_type(actions, UpdateExecutor) and not of_type(actions, SetAppState)
    for index in (1, 2):
        view.executors[("worker", index)].stop_requested = True
        view.executors[("worker", index)].stop_finished = True
    updates = of_type(decide(view, NOW, HOSTS), UpdateExecutor)
    assert {(u.executor, u.state, u.retired) for u in updates} == {
        (("worker", 1), ExecutorState.KILLED, True), (("worker", 2), ExecutorState.KILLED, True)}
    assert all(u.restart_at is None and u.failures is None for u in updates)
    assert updates[0].diagnosis == "retired: role worker scaled down to 1 executor"


def test_retired_executors_count_neither_as_failures_nor_against_success():
    view = set_all(app(job([{"name": "worker", "num": 3}])), RUNNING, RUNNING)
    scaled(view, "worker", 1)
    for index in (1, 2):
        executor = view.executors[("worker", index)]
        assert executor.plan is not None
        executor.plan = executor.plan.model_copy(update={
            "state": ExecutorState.KILLED, "retired": True})
        executor.live = None
    set_executor(view, ("worker", 0), RUNNING, exit_code=0)
    actions = decide(view, NOW, HOSTS)
    assert actions[-1] == SetAppState(AppState.SUCCEEDED, exit_code=0)
    assert [a.executor for a in of_type(actions, UpdateExecutor)] == [("worker", 0)]


def test_an_index_scaled_back_in_starts_a_new_attempt():
    view = set_all(app(job([{"name": "worker", "num": 2}])), RUNNING, RUNNING)
    retired = view.executors[("worker", 1)]
    assert retired.plan is not None
    retired.plan = retired.plan.model_copy(update={"state": ExecutorState.KILLED,
                                                   "retired": True})
    retired.live = None
    launches = of_type(decide(view, NOW, HOSTS), Launch)
    assert [(launch.executor, launch.attempt) for launch in launches] == [(("worker", 1), 2)]


def test_the_cluster_spec_holds_only_the_indices_the_topology_has():
    view = set_all(app(job([{"name": "worker", "num": 3}])), RUNNING, RUNNING)
    view.cluster = next(a for a in decide(view, NOW, HOSTS) if isinstance(a, WriteCluster)).cluster
    scaled(view, "worker", 2)
    for key in (("worker", 2),):
        view.executors[key].plan = view.executors[key].plan.model_copy(update={
            "state": ExecutorState.KILLED, "retired": True})
        view.executors[key].live = None
        del view.reservations[key]  # given up with its retirement
    written = of_type(decide(view, NOW, HOSTS), WriteCluster)
    assert [(m.index, m.rank) for m in written[0].cluster.members] == [(0, 0), (1, 1)]
    assert written[0].cluster.version == 2


def test_a_removed_role_is_retired_and_an_added_role_launched():
    view = set_all(app(job(CHIEF_AND_WORKERS)), RUNNING, RUNNING)
    added = job([{"name": "ps", "num": 2}]).roles[0]
    view.observe_put(KEYS.role_spec("ps"), encode(RoleAdded(change=1, role=added)))
    view.observe_put(KEYS.role_removed("worker"), encode(RoleRemoved(change=2)))
    assert [role.name for role in view.spec.roles] == ["chief", "ps"]
    actions = decide(view, NOW, HOSTS)
    [asked] = of_type(actions, RequestHosts)
    assert asked.request is not None and asked.request.executors == [("ps", 0), ("ps", 1)]
    assert sorted(a.executor for a in of_type(actions, StopExecutor)) == [
        ("worker", 0), ("worker", 1)]


def test_each_topology_change_is_recorded_once_with_who_asked():
    view = set_all(app(job(CHIEF_AND_WORKERS)), RUNNING, RUNNING)
    change = TopologyChange(seq=1, time=NOW, user="alice", kind="scale",
                            message="role worker scaled from 2 to 3 executors", role="worker")
    view.observe_put(KEYS.change(1), encode(change))
    assert of_type(decide(view, NOW, HOSTS), RecordChanges) == [RecordChanges((change,))]
    view.observe_put(KEYS.status, encode(view.status.model_copy(
        update={"changes_recorded": 1})))
    assert not of_type(decide(view, NOW, HOSTS), RecordChanges)


def test_effective_spec_applies_desired_counts_added_roles_and_sources_in_order():
    spec = JobSpec.model_validate({
        "name": "job", "roles": [{"name": "chief", "command": "c"},
                                 {"name": "worker", "num": 2, "command": "w"}],
        "data": [{"name": "train", "roles": ["worker"], "sources": [{"path": "/d/a*"}]}]})
    ps, evaluator = (job([{"name": name}]).roles[0] for name in ("ps", "evaluator"))
    values = {KEYS.desired("worker"): b"5", KEYS.role_spec("evaluator"): encode(
        RoleAdded(change=4, role=evaluator)), KEYS.role_spec("ps"): encode(
        RoleAdded(change=2, role=ps)), KEYS.role_removed("chief"): encode(RoleRemoved(change=6)),
        KEYS.added_source("train", 7): b'{"path": "/d/c*"}',
        KEYS.added_source("train", 3): b'{"path": "/d/b*"}'}
    effective = effective_spec(spec, KEYS, values)
    assert [(r.name, r.num) for r in effective.roles] == [("worker", 5), ("ps", 1),
                                                          ("evaluator", 1)]
    assert [s.path for s in effective.data[0].sources] == ["/d/a*", "/d/b*", "/d/c*"]
    assert effective_spec(spec, KEYS, {}) is spec


def test_a_launch_that_failed_is_an_attempt_failed_under_the_restart_policy():
    view = set_all(app(job([{"name": "worker", "restart_policy": "on_failure"}])), PLANNED)
    view.executors[("worker", 0)].launch_error = "launch failed: ssh: connect refused"
    updates = of_type(decide(view, NOW, HOSTS), UpdateExecutor)
    assert [(u.state, u.diagnosis, u.failures) for u in updates] == [
        (ExecutorState.FAILED, "launch failed: ssh: connect refused", 1)]
    assert updates[0].restart_at == NOW, "the first restart is immediate"
    assert updates[0].blacklist is not None and \
        updates[0].blacklist.hosts["h1"].failures == 1


def test_failures_on_one_host_in_one_pass_add_up_to_its_blacklisting():
    view = set_all(app(job([{"name": "worker", "num": 4, "restart_policy": "on_failure"}],
                           blacklist_failures=2, blacklist_cooldown=60)), RUNNING, RUNNING)
    for index in (0, 2):  # both on h1
        set_executor(view, ("worker", index), RUNNING, exit_code=1)
    actions = decide(view, NOW, HOSTS)
    updates = of_type(actions, UpdateExecutor)
    assert updates[-1].blacklisted == "host h1 blacklisted for 60s after 2 failed executor " \
        "attempts"
    assert updates[-1].blacklist is not None
    assert updates[-1].blacklist.avoided(NOW) == {"h1"}
    assert all(launch.host.name == "h2" for launch in of_type(actions, Launch))


def test_a_preempted_app_stops_every_executor_then_queues_again_with_its_attempt():
    view = set_all(app(job(CHIEF_AND_WORKERS)), RUNNING, RUNNING)
    view.preemption = Preemption(by="urgent-1", time=NOW, reason="preempted to admit urgent-1")

    stopping = decide(view, NOW, HOSTS)
    assert sorted(a.executor for a in of_type(stopping, StopExecutor)) == sorted(view.executors)
    assert not any(a.last for a in of_type(stopping, StopExecutor)), \
        "the application goes on (queued again): its stops do not give the hosts up"
    fold(view, stopping)
    for executor in view.executors.values():
        executor.stop_finished = True
    stopped = decide(view, NOW, HOSTS)
    assert {(u.state, u.retired) for u in of_type(stopped, UpdateExecutor)} == {
        (ExecutorState.KILLED, True)}, "no failure: they start anew once the app is back"
    assert stopped[-1] == Requeue("urgent-1")


def test_a_requeued_app_asks_again_for_every_executor_and_counts_no_failure():
    view = set_all(app(job(CHIEF_AND_WORKERS), AppState.QUEUED, reserved=False), RUNNING)
    for executor in view.executors.values():
        assert executor.plan is not None
        executor.plan = executor.plan.model_copy(update={
            "state": ExecutorState.KILLED, "retired": True})

    actions = decide(view, NOW, HOSTS)

    [asked] = of_type(actions, RequestHosts)
    assert asked.request is not None and len(asked.request.executors) == 3
    assert not of_type(actions, SetAppState) and not of_type(actions, Launch)


def test_a_reservation_granted_for_an_index_scaled_away_meanwhile_is_given_up():
    view = set_all(app(job([{"name": "worker", "num": 2}])), RUNNING, RUNNING)
    reserve(view, ("worker", 2))  # granted for a scale-up the user took back

    [released] = of_type(decide(view, NOW, HOSTS), RequestHosts)

    assert released == RequestHosts(None, (("worker", 2),))


# --- Start policies ---------------------------------------------------------------------------


def started(policy: str, **start: object) -> AppView:
    """A STARTING application of ps ×2 then worker ×2 under a start ``policy``, nothing
    planned yet."""
    spec = JobSpec.model_validate({"name": "job", "start": {"policy": policy, **start},
                                   "roles": [{"name": "ps", "num": 2, "command": "ps"},
                                             {"name": "worker", "num": 2, "command": "w"}]})
    return app(spec, AppState.STARTING)


def launched_roles(actions: list[Action]) -> list[str]:
    return sorted({a.executor[0] for a in of_type(actions, Launch)})


def test_gang_and_dynamic_launch_every_role_at_once():
    assert launched_roles(decide(started("gang"), NOW, HOSTS)) == ["ps", "worker"]
    assert launched_roles(decide(started("dynamic"), NOW, HOSTS)) == ["ps", "worker"]


def test_ordered_launches_the_first_role_alone():
    assert launched_roles(decide(started("ordered"), NOW, HOSTS)) == ["ps"]


def test_ordered_launches_the_next_role_once_the_share_of_the_first_runs():
    view = started("ordered", schedule_percent=50)
    set_executor(view, ("ps", 0), RUNNING, live=RUNNING)
    set_executor(view, ("ps", 1), LAUNCHED)
    assert launched_roles(decide(view, NOW, HOSTS)) == ["worker"]
    view = started("ordered")  # 100 %: one of two is not enough
    set_executor(view, ("ps", 0), RUNNING, live=RUNNING)
    set_executor(view, ("ps", 1), REGISTERED, live=REGISTERED)
    assert launched_roles(decide(view, NOW, HOSTS)) == []


def ordered_ps_short_of_share(on_timeout: str) -> AppView:
    """ps-0 runs, ps-1 does not; both were launched 61 s ago, and the timeout is 60 s."""
    view = started("ordered", timeout=60, on_timeout=on_timeout)
    for index, state in ((0, RUNNING), (1, LAUNCHED)):
        executor = set_executor(view, ("ps", index), state,
                                live=RUNNING if state is RUNNING else None)
        assert executor.plan is not None
        executor.plan = executor.plan.model_copy(update={"launch_time": NOW - 61})
    return view


def test_ordered_start_fails_when_the_timeout_passes_short_of_the_share():
    actions = decide(ordered_ps_short_of_share("fail"), NOW, HOSTS)
    assert of_type(actions, SetAppState) == [SetAppState(
        AppState.FAILED, exit_code=1, diagnosis=(
            "ordered start: role ps has 1 of 2 executors running 60s after it was first "
            "launched, short of start.schedule_percent 100% (2); role worker not started"))]
    assert of_type(actions, Launch) == []


def test_ordered_start_goes_on_with_what_runs_when_told_to():
    view = ordered_ps_short_of_share("continue")
    assert launched_roles(decide(view, NOW, HOSTS)) == ["worker"]
    assert launched_roles(decide(view, NOW - 2, HOSTS)) == [], "not before the timeout"



def test_dynamic_writes_a_cluster_of_the_executors_registered_so_far():
    view = started("dynamic")
    set_executor(view, ("ps", 0), REGISTERED, live=REGISTERED)
    for key in (("ps", 1), ("worker", 0), ("worker", 1)):
        set_executor(view, key, LAUNCHED)
    [write] = of_type(decide(view, NOW, HOSTS), WriteCluster)
    assert [(m.role, m.index) for m in write.cluster.members] == [("ps", 0)]
    assert of_type(decide(view, NOW, HOSTS), SetAppState) == [SetAppState(AppState.RUNNING)]


def test_gang_writes_no_cluster_before_every_executor_registered():
    view = started("gang")
    set_executor(view, ("ps", 0), REGISTERED, live=REGISTERED)
    for key in (("ps", 1), ("worker", 0), ("worker", 1)):
        set_executor(view, key, LAUNCHED)
    assert of_type(decide(view, NOW, HOSTS), WriteCluster) == []


# --- Elastic minimum (min_num) ----------------------------------------------------------------


def elastic(failed: int, succeeded: int = 0) -> AppView:
    """Four running workers with min_num 2: ``failed`` of them failed for good (no restart),
    the next ``succeeded`` succeeded."""
    view = running_workers(4, min_num=2)
    for index in range(failed):
        set_executor(view, ("worker", index), ExecutorState.FAILED, exit_code=1)
    for index in range(failed, failed + succeeded):
        set_executor(view, ("worker", index), ExecutorState.SUCCEEDED, exit_code=0)
    return view


def test_an_elastic_role_goes_on_while_its_minimum_runs():
    assert of_type(decide(elastic(failed=2), NOW, HOSTS), SetAppState) == []


def test_an_elastic_role_fails_the_application_below_its_minimum():
    [verdict] = of_type(decide(elastic(failed=3), NOW, HOSTS), SetAppState)
    assert verdict.state is AppState.FAILED


def test_an_elastic_role_succeeds_once_every_executor_ended_with_its_minimum_succeeded():
    assert of_type(decide(elastic(failed=1, succeeded=2), NOW, HOSTS), SetAppState) == []
    assert of_type(decide(elastic(failed=2, succeeded=2), NOW, HOSTS), SetAppState) == [
        SetAppState(AppState.SUCCEEDED, exit_code=0)]


# --- Suspend and resume -----------------------------------------------------------------------


def suspend_requested(view: AppView) -> AppView:
    view.suspend = SuspendRequest(time=NOW, user="alice", reason="maintenance")
    return view


def test_a_suspend_request_stops_every_executor_without_counting_a_failure():
    view = suspend_requested(running_workers())

    actions = decide(view, NOW, HOSTS)

    assert of_type(actions, StopExecutor) == [StopExecutor(("worker", 0), last=True),
                                              StopExecutor(("worker", 1), last=True)]
    assert of_type(actions, SetAppState) == []
    view.executors[("worker", 0)].stop_requested = True
    view.executors[("worker", 0)].stop_finished = True
    [update] = [u for u in of_type(decide(view, NOW, HOSTS), UpdateExecutor)
                if u.executor == ("worker", 0)]
    assert (update.state, update.retired) == (ExecutorState.KILLED, True)


def test_once_every_executor_stopped_the_application_is_suspended():
    view = suspend_requested(running_workers())
    for key in view.executors:
        set_executor(view, key, ExecutorState.KILLED)
        view.executors[key].plan = view.executors[key].plan.model_copy(  # type: ignore
            update={"retired": True})
    assert decide(view, NOW, HOSTS) == [Suspend()]


def test_a_suspended_application_waits_for_nothing_and_is_queued_once_resumed():
    view = suspend_requested(running_workers())
    view.status = view.status.model_copy(update={"state": AppState.SUSPENDED})
    assert decide(view, NOW, HOSTS) == [Finish()]
    view.suspend = None
    assert decide(view, NOW, HOSTS) == [SetAppState(AppState.QUEUED)]


def test_a_suspended_application_can_be_killed():
    view = request_kill(suspend_requested(app(job([{"name": "worker"}]), AppState.SUSPENDED)))
    assert decide(view, NOW, HOSTS) == [SetAppState(AppState.KILLED,
                                                    diagnosis="killed by alice"), Finish()]


# --- Straggler rescheduling -------------------------------------------------------------------


def readers(rates: dict[int, float], num: int = 3, hosts: list[Host] | None = None,
            **straggler: object) -> tuple[AppView, list[Host]]:
    """``num`` running workers with straggler rescheduling, having read at ``rates`` (bytes
    per second, by index); one spare host beyond those they run on unless ``hosts``."""
    view = running_workers(num, straggler={"factor": 4, "window": 60, **straggler})
    view.read_rates = {("worker", i): rate for i, rate in rates.items()}
    used = {view.executors[("worker", i)].plan.host for i in range(num)}  # type: ignore
    return view, hosts or [*(h for h in HOSTS if h.name in used), Host("h9", "10.0.0.9")]


def test_a_reader_far_below_the_median_is_moved_off_its_host_without_a_failure():
    view, hosts = readers({0: 100e3, 1: 1e6, 2: 1.2e6})

    [moved] = of_type(decide(view, NOW, hosts), UpdateExecutor)

    assert (moved.executor, moved.state, moved.failures, moved.restart_at) == (
        ("worker", 0), ExecutorState.LOST, 0, NOW)
    assert moved.diagnosis == ("straggler: read 100.0 kB/s over 60s against its role's median "
                               "1.0 MB/s (straggler.factor 4); moved off h1")
    assert moved.blacklist is not None and moved.blacklist.hosts["h1"].failures == 1


def test_readers_within_the_factor_are_left_alone():
    view, hosts = readers({0: 300e3, 1: 1e6, 2: 1.2e6})
    assert of_type(decide(view, NOW, hosts), UpdateExecutor) == []


def test_no_reader_is_moved_when_the_role_has_no_spare_host():
    view, _ = readers({0: 100e3, 1: 1e6, 2: 1.2e6})
    assert of_type(decide(view, NOW, HOSTS), UpdateExecutor) == []


def test_at_most_max_percent_of_the_role_is_moved_at_once():
    view, hosts = readers({0: 10e3, 1: 20e3, 2: 1e6, 3: 1e6, 4: 1.2e6, 5: 1e6}, num=6,
                          max_percent=20)
    hosts = [*hosts, Host("h8", "10.0.0.8")]
    moved = of_type(decide(view, NOW, hosts), UpdateExecutor)
    assert [m.executor for m in moved] == [("worker", 0)]


def test_read_rates_count_the_bytes_of_each_checkpoint_over_the_window():
    rates = ReadRates()
    rates.owned("t1", TaskOwner(role="worker", index=0, attempt=1, since=0), now=0)
    for second, nbytes in ((10, 1000), (20, 3000), (30, 6000)):
        rates.progressed("t1", nbytes, now=second)
    assert rates.rate(("worker", 0, 1), now=30, window=10) == 300.0
    assert rates.rate(("worker", 0, 1), now=30, window=40) is None, "not read that long yet"
    rates.owned("t1", TaskOwner(role="worker", index=1, attempt=1, since=31), now=31)
    rates.progressed("t1", 6500, now=40)  # resumed by another reader: only what it read
    assert rates.rate(("worker", 1, 1), now=40, window=10) is None
    assert rates.rate(("worker", 1, 1), now=41, window=10) == 50.0
    rates.released("t1")  # done: with nothing left to read, the reader is idle, not slow
    assert rates.rate(("worker", 1, 1), now=41, window=10) is None
