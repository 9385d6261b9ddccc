"""The AM's decisions: pure functions from an observed view of the application to actions.

The AM (``master.py``) observes etcd and its launcher, folds what it sees into an
:class:`AppView`, asks :func:`decide` what to do, and applies the actions. Nothing here does I/O,
so every decision is unit-testable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from primus.am.placement import PlacementError, place
from primus.config.inventory import Host
from primus.config.spec import JobSpec
from primus.executor.cluster import build_cluster
from primus.state.keys import AppKeys
from primus.state.records import (
    AppEvent,
    AppStatus,
    ClusterSpec,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    KillRequest,
    decode,
)
from primus.state.states import AppState, ExecutorState
from primus.store.api import EventType, Snapshot, WatchEvent

ExecutorId = tuple[str, int]


@dataclass
class ExecutorView:
    """What the AM knows of one executor: its stored keys plus the AM's own observations."""

    plan: ExecutorPlan | None = None
    live: ExecutorLive | None = None
    result: ExecutorResult | None = None
    process_exited: bool = False
    stop_requested: bool = False
    stop_finished: bool = False


@dataclass
class AppView:
    """The AM's picture of an application, rebuilt from one snapshot and kept by watch events."""

    keys: AppKeys
    spec: JobSpec
    status: AppStatus
    executors: dict[ExecutorId, ExecutorView] = field(default_factory=dict)
    cluster: ClusterSpec | None = None
    kill: KillRequest | None = None
    next_event_seq: int = 0

    @classmethod
    def from_snapshot(cls, keys: AppKeys, snapshot: Snapshot) -> AppView:
        """Build the view from every key of the application read at one revision."""
        by_key = {kv.key: kv for kv in snapshot.kvs}
        view = cls(keys, JobSpec.model_validate_json(by_key[keys.spec].value),
                   decode(AppStatus, by_key[keys.status].value))
        for role in view.spec.roles:
            for index in range(role.num):
                view.executors[(role.name, index)] = ExecutorView()
        for kv in snapshot.kvs:
            view.observe_put(kv.key, kv.value)
        return view

    def observe(self, event: WatchEvent) -> None:
        """Fold one watch event into the view."""
        if event.type is EventType.PUT:
            self.observe_put(event.key, event.value)
            return
        parsed = self.keys.parse_executor(event.key)
        if parsed is not None and parsed.kind == "live" and \
                (parsed.role, parsed.index) in self.executors:
            self.executors[(parsed.role, parsed.index)].live = None
        elif event.key == self.keys.kill:
            self.kill = None

    def observe_put(self, key: str, value: bytes) -> None:
        """Fold the current value of one key into the view."""
        keys = self.keys
        if key == keys.status:
            self.status = decode(AppStatus, value)
        elif key == keys.cluster:
            self.cluster = decode(ClusterSpec, value)
        elif key == keys.kill:
            self.kill = decode(KillRequest, value)
        elif key.startswith(keys.events):
            self.next_event_seq = max(self.next_event_seq, decode(AppEvent, value).seq + 1)
        else:
            parsed = keys.parse_executor(key)
            executor = self.executors.get((parsed.role, parsed.index)) if parsed else None
            if parsed is None or executor is None:
                return
            if parsed.kind == "plan":
                executor.plan = decode(ExecutorPlan, value)
            elif parsed.kind == "live":
                executor.live = decode(ExecutorLive, value)
            elif parsed.kind == "result":
                executor.result = decode(ExecutorResult, value)


# --- Actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetAppState:
    """Record a new application state (and, when it ends, its exit code and diagnosis)."""

    state: AppState
    diagnosis: str = ""
    exit_code: int | None = None


@dataclass(frozen=True)
class Launch:
    """Plan the executor on ``host`` and start it there."""

    executor: ExecutorId
    host: Host


@dataclass(frozen=True)
class UpdateExecutor:
    """Record a new state of an executor attempt in its plan."""

    executor: ExecutorId
    state: ExecutorState
    exit_code: int | None = None
    diagnosis: str = ""


@dataclass(frozen=True)
class WriteCluster:
    """Publish the gang's cluster spec, releasing every executor to start its trainer."""

    cluster: ClusterSpec


@dataclass(frozen=True)
class StopExecutor:
    """Stop an executor's processes (SIGTERM, grace, SIGKILL) through the launcher."""

    executor: ExecutorId


@dataclass(frozen=True)
class Finish:
    """Everything has ended: the AM may release leadership and exit."""


Action = SetAppState | Launch | UpdateExecutor | WriteCluster | StopExecutor | Finish


def _name(executor: ExecutorId) -> str:
    return f"{executor[0]}-{executor[1]}"


def _executor_update(executor: ExecutorView, app_ending: bool) -> UpdateExecutor | None:
    """How an executor's recorded state must change given what was observed of it."""
    plan = executor.plan
    if plan is None or plan.state.terminal:
        return None
    key = (plan.role, plan.index)
    result = executor.result
    if result is not None and result.attempt == plan.attempt:
        if result.exit_code == 0:
            return UpdateExecutor(key, ExecutorState.SUCCEEDED, 0)
        state = ExecutorState.KILLED if app_ending else ExecutorState.FAILED
        return UpdateExecutor(key, state, result.exit_code, result.diagnosis)
    if executor.stop_finished or (app_ending and plan.state is ExecutorState.PLANNED):
        return UpdateExecutor(key, ExecutorState.KILLED, diagnosis="stopped by the AM")
    live = executor.live
    if live is not None and live.attempt == plan.attempt:
        if live.state != plan.state and plan.state in (
                ExecutorState.PLANNED, ExecutorState.LAUNCHED, ExecutorState.REGISTERED):
            return UpdateExecutor(key, live.state)
        return None
    if plan.state in (ExecutorState.REGISTERED, ExecutorState.RUNNING):
        if app_ending:
            return UpdateExecutor(key, ExecutorState.KILLED, diagnosis="stopped by the AM")
        return UpdateExecutor(key, ExecutorState.LOST,
                              diagnosis="lease expired without a result: executor or host lost")
    if plan.state is ExecutorState.LAUNCHED and executor.process_exited:
        return UpdateExecutor(key, ExecutorState.FAILED, diagnosis=(
            f"executor exited before registering; see {plan.executor_log}"))
    return None


def _state_after(executor: ExecutorView, update: UpdateExecutor | None) -> ExecutorState | None:
    if update is not None:
        return update.state
    return executor.plan.state if executor.plan else None


def required_successes(num: int, success_percent: float) -> int:
    """How many of ``num`` executors must succeed for the role to succeed."""
    return math.ceil(num * success_percent / 100.0 - 1e-9)


def decide(view: AppView, now: float, hosts: Sequence[Host]) -> list[Action]:
    """The actions that move the application towards its goal, given the view at ``now``.

    Idempotent: once the actions are applied and folded back into the view, calling it again
    returns no action until something new is observed.
    """
    app_state = view.status.state
    ending = app_state.terminal or view.kill is not None
    updates = {key: _executor_update(ex, ending) for key, ex in view.executors.items()}
    actions: list[Action] = [u for u in updates.values() if u is not None]
    states = {key: _state_after(ex, updates[key]) for key, ex in view.executors.items()}
    # A lost executor may have left its trainer (its own process group) running: stop what
    # remains of it, whatever else happens.
    actions += [StopExecutor(key) for key, ex in view.executors.items()
                if states[key] is ExecutorState.LOST and not ex.stop_requested]

    if ending:
        if not app_state.terminal:
            reason = view.kill.reason if view.kill else ""
            actions.append(SetAppState(AppState.KILLED, diagnosis=reason))
        for key, ex in view.executors.items():
            state = states[key]
            if state is not None and not state.terminal and state is not ExecutorState.PLANNED \
                    and not ex.stop_requested:
                actions.append(StopExecutor(key))
        stopping = any(ex.stop_requested and not ex.stop_finished
                       for ex in view.executors.values())
        if not stopping and all(state is None or state.terminal for state in states.values()):
            actions.append(Finish())
        return actions

    if app_state is AppState.SUBMITTED:
        actions.append(SetAppState(AppState.STARTING))

    verdict = _verdict(view, states)
    if verdict is not None:
        actions.append(verdict)
        return actions

    unplanned = [key for key, ex in view.executors.items() if ex.plan is None]
    if unplanned:
        existing = {key: ex.plan.host for key, ex in view.executors.items() if ex.plan}
        try:
            placement = place(view.spec, hosts, existing)
        except PlacementError as exc:
            actions.append(SetAppState(AppState.FAILED, diagnosis=str(exc), exit_code=1))
            return actions
        actions.extend(Launch(key, placement[key]) for key in unplanned)
        return actions

    registered = {key: ex.live for key, ex in view.executors.items()
                  if ex.live is not None and ex.plan is not None
                  and ex.live.attempt == ex.plan.attempt}
    if view.cluster is None:
        if len(registered) == len(view.executors):
            cluster = build_cluster(view.spec, view.status.attempt, {
                key: (live.address, live.ports) for key, live in registered.items()})
            actions.append(WriteCluster(cluster))
            actions.append(SetAppState(AppState.RUNNING))
        elif view.status.start_time is not None and \
                now - view.status.start_time > view.spec.policy.register_timeout:
            missing = sorted(_name(k) for k in view.executors if k not in registered)
            actions.append(SetAppState(AppState.FAILED, exit_code=1, diagnosis=(
                f"{', '.join(missing)} did not register within "
                f"{view.spec.policy.register_timeout:g}s")))
    return actions


def _verdict(view: AppView, states: dict[ExecutorId, ExecutorState | None]
             ) -> SetAppState | None:
    """SUCCEEDED once every role reached its success share; FAILED once one no longer can."""
    all_done = True
    for role in view.spec.roles:
        keys = [(role.name, i) for i in range(role.num)]
        needed = required_successes(role.num, role.success_percent)
        succeeded = sum(states[k] is ExecutorState.SUCCEEDED for k in keys)
        failed = [k for k in keys if states[k] in (ExecutorState.FAILED, ExecutorState.LOST)]
        if role.num - len(failed) < needed:
            first = failed[0]
            ex = view.executors[first]
            update = _executor_update(ex, False)
            diagnosis = update.diagnosis if update else (ex.plan.diagnosis if ex.plan else "")
            exit_code = update.exit_code if update else (ex.plan.exit_code if ex.plan else None)
            return SetAppState(AppState.FAILED, exit_code=exit_code if exit_code else 1,
                               diagnosis=f"{_name(first)} failed: {diagnosis}")
        all_done = all_done and succeeded >= needed
    return SetAppState(AppState.SUCCEEDED, exit_code=0) if all_done else None
