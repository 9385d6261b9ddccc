"""Observed views of an application, built in memory, for the AM's pure decisions
(``primus.am.reconcile.decide``), and :func:`fold` to record the actions decided in them."""

from __future__ import annotations

from primus.am.reconcile import (
    Action,
    Launch,
    NoteLag,
    NoteOutOfService,
    RequestHosts,
    SetAppState,
    StartAttempt,
    StopExecutor,
    UpdateExecutor,
    WriteCluster,
    apply_update,
)
from primus.config.inventory import Host
from primus.config.spec import JobSpec
from primus.executor.cluster import build_cluster
from primus.state.keys import AppKeys
from primus.state.records import (
    AppStatus,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    Record,
    Reservation,
    encode,
)
from primus.state.states import AppState, ExecutorState
from primus.state.view import AppView, ExecutorView
from primus.store.api import EventType, WatchEvent

KEYS = AppKeys("/p", "app")
"""The keys of the one application every view is of."""
HOSTS = [Host("h1", "10.0.0.1"), Host("h2", "10.0.0.2")]
"""The inventory: executor i runs on ``HOSTS[i % 2]``."""
NOW = 1000.0
"""The AM's clock."""
PORTS = {"chief": 7000, "ps": 8000, "worker": 9000}
"""Trainer ports by role: executor i reserves ``base + 10 * i`` and the port after it."""

PLANNED, LAUNCHED, REGISTERED, RUNNING = (ExecutorState.PLANNED, ExecutorState.LAUNCHED,
                                          ExecutorState.REGISTERED, ExecutorState.RUNNING)


def job(roles: list[dict], **policy: object) -> JobSpec:
    """A job of ``roles`` (name plus any role field), every role running ``train``."""
    return JobSpec.model_validate({"name": "job", "policy": policy,
                                   "roles": [{"command": "train", **role} for role in roles]})


def app(spec: JobSpec, state: AppState = AppState.RUNNING, start_time: float = NOW,
        reserved: bool = True) -> AppView:
    """A view of ``spec`` in ``state`` with no executor planned yet, each holding a
    reservation on its host (:func:`host_of`) unless not ``reserved``."""
    status = AppStatus(app_id=KEYS.app_id, name=spec.name, state=state, submit_time=NOW - 10,
                       start_time=start_time)
    view = AppView(keys=KEYS, submitted=spec, status=status,
                   executors={(role.name, i): ExecutorView()
                              for role in spec.roles for i in range(role.num)})
    if reserved:
        for key in view.executors:
            reserve(view, key)
    return view


def reserve(view: AppView, key: tuple[str, int], host: Host | None = None,
            gpus: tuple[int, ...] = ()) -> None:
    """Give executor ``key`` a reservation, as admission would (its role's size)."""
    role = next((r for r in view.spec.roles if r.name == key[0]), None)
    view.reservations[key] = Reservation(
        app_id=KEYS.app_id, user="alice", queue="default", role=key[0], index=key[1],
        host=(host or host_of(key)).name, cpu=role.cpu if role else 1.0,
        memory=role.memory if role else 1, gpus=list(gpus), since=NOW)


def host_of(key: tuple[str, int]) -> Host:
    """The host executor ``key`` runs on."""
    return HOSTS[key[1] % len(HOSTS)]


def set_executor(view: AppView, key: tuple[str, int], plan: ExecutorState,
                 live: ExecutorState | None = None, exit_code: int | None = None) -> ExecutorView:
    """Give executor ``key`` a plan in state ``plan``, a live key in state ``live`` if any, and a
    result with ``exit_code`` if any; all of attempt 1."""
    host = host_of(key)
    executor = view.executors[key]
    executor.plan = ExecutorPlan(role=key[0], index=key[1], attempt=1, host=host.name,
                                 address=host.address, state=plan,
                                 executor_log=f"/logs/{key[0]}-{key[1]}.executor.log")
    port = PORTS[key[0]] + 10 * key[1]
    executor.live = None if live is None else ExecutorLive(
        attempt=1, host=host.name, address=host.address, pid=100, ports=[port, port + 1],
        state=live, registered_time=NOW)
    executor.result = None if exit_code is None else ExecutorResult(
        attempt=1, exit_code=exit_code, finish_time=NOW,
        diagnosis=f"trainer exited with code {exit_code}" if exit_code else "")
    return executor


def set_all(view: AppView, plan: ExecutorState, live: ExecutorState | None = None) -> AppView:
    """:func:`set_executor` for every executor of ``view``; return ``view``."""
    for key in view.executors:
        set_executor(view, key, plan, live)
    return view


def of_type(actions: list[Action], kind: type) -> list:
    """The actions of type ``kind``, in order."""
    return [action for action in actions if isinstance(action, kind)]


def put(key: str, record: Record) -> WatchEvent:
    """A watch event writing ``record`` to ``key``."""
    return WatchEvent(EventType.PUT, key, encode(record), revision=1)


def delete(key: str) -> WatchEvent:
    """A watch event deleting ``key``."""
    return WatchEvent(EventType.DELETE, key, b"", revision=2)


def fold(view: AppView, actions: list[Action]) -> None:
    """Record ``actions`` in the view as the AM does once it carried them out."""
    for action in actions:
        if isinstance(action, SetAppState):
            start_time = NOW if action.state is AppState.STARTING else view.status.start_time
            view.observe(put(KEYS.status, view.status.model_copy(
                update={"state": action.state, "start_time": start_time})))
        elif isinstance(action, StartAttempt):
            view.observe(put(KEYS.status, view.status.model_copy(update={
                "state": AppState.STARTING, "attempt": action.attempt, "start_time": NOW})))
            view.cluster = None
        elif isinstance(action, Launch):
            executor = view.executors[action.executor]
            executor.process_exited = executor.stop_requested = executor.stop_finished = False
            view.observe(put(KEYS.executor(*action.executor, "plan"), ExecutorPlan(
                role=action.executor[0], index=action.executor[1], attempt=action.attempt,
                host=action.host.name, address=action.host.address,
                state=LAUNCHED if action.in_place else PLANNED, launch_time=NOW,
                app_attempt=view.status.attempt, failures=action.failures,
                restarts=action.restarts)))
        elif isinstance(action, RequestHosts):
            for executor in action.release:
                view.reservations.pop(executor, None)
                if action.request is not None and executor in action.request.executors:
                    view.placed_elsewhere.add(executor)
            view.request = action.request
        elif isinstance(action, UpdateExecutor):
            plan = view.executors[action.executor].plan
            assert plan is not None, f"{action.executor} was updated before it was planned"
            if action.release:
                view.reservations.pop(action.executor, None)
            view.observe(put(KEYS.executor(*action.executor, "plan"),
                             apply_update(plan, action, NOW)))
        elif isinstance(action, WriteCluster):
            view.observe(put(KEYS.cluster, action.cluster))
        elif isinstance(action, StopExecutor):
            view.executors[action.executor].stop_requested = True
        elif isinstance(action, NoteOutOfService):
            view.noted_out_of_service |= set(action.hosts)
        elif isinstance(action, NoteLag):
            (view.noted_lag.add if action.lag > action.max_lag else
             view.noted_lag.discard)(action.stream)


def running(spec: JobSpec, state: AppState = AppState.RUNNING) -> AppView:
    """An application of ``spec`` past registration: cluster written, every trainer running."""
    view = set_all(app(spec, state), RUNNING, live=RUNNING)
    view.cluster = build_cluster(spec, 1, {
        key: (ex.live.address, ex.live.ports, ex.live.attempt)
        for key, ex in view.executors.items() if ex.live is not None})
    return view
