"""The AM's decisions: pure functions from an observed view of the application to actions.

The AM (``master.py``) observes etcd and its launcher, folds what it sees into an
:class:`~primus.state.view.AppView`, asks :func:`decide` what to do, and applies the actions.
Nothing here does I/O, so every decision is unit-testable.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from primus.am.hangs import HandleHang, hang_action
from primus.config.inventory import Host
from primus.config.spec import HUNG, StreamSpec
from primus.executor.cluster import build_cluster
from primus.scheduler.admission import request_of
from primus.state.records import (
    PAST_ATTEMPTS,
    AdmissionRequest,
    ClusterSpec,
    ExecutorPlan,
    HostHealth,
    PastAttempt,
    ProcessRef,
    advance,
)
from primus.state.records import Blacklist as HostBlacklist
from primus.state.states import AppState, ExecutorState
from primus.state.topology import TopologyChange
from primus.state.view import AppView, ExecutorId, ExecutorView, StreamFacts

# --- Actions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetAppState:
    """Record a new application state (and, when it ends, its exit code and diagnosis)."""

    state: AppState
    diagnosis: str = ""
    exit_code: int | None = None


@dataclass(frozen=True)
class StartAttempt:
    """Start application attempt ``attempt``: status back to STARTING, cluster spec dropped."""

    attempt: int


@dataclass(frozen=True)
class Launch:
    """Plan attempt ``attempt`` of an executor on ``host`` and start it there.

    ``in_place``: the executor that ran the previous attempt waits on the same host and starts
    the new attempt's trainer itself; nothing is launched. ``gpus``: the GPU devices its
    reservation holds. ``again``: the attempt was planned by an earlier AM that may have ended
    before it launched it; it is launched (again) as the same attempt, and should two
    executors of it run, the one that does not get to register exits.
    """

    executor: ExecutorId
    host: Host
    attempt: int = 1
    failures: int = 0
    restarts: int = 0
    in_place: bool = False
    gpus: tuple[int, ...] = ()
    again: bool = False


@dataclass(frozen=True)
class UpdateExecutor:
    """Record how an executor attempt moved on, and, when it ended, what happens next.

    ``restart_at`` is when the next attempt is due (``None``: the index has ended for good);
    ``decision`` says why, for the event log; ``failures`` is the index's failure count after
    this attempt; ``blacklist``: the application's blacklist with this attempt counted against
    its host, to be written with it (``None``: unchanged), and ``blacklisted`` why the host is
    now avoided, if it is; ``retired``: the topology no longer has the index
    (``ExecutorPlan.retired``); ``release``: its host reservation is given up with it (it
    ended for good, or was retired).
    """

    executor: ExecutorId
    state: ExecutorState
    exit_code: int | None = None
    diagnosis: str = ""
    exit_class: str = ""
    failures: int | None = None
    restart_at: float | None = None
    decision: str = ""
    blacklist: HostBlacklist | None = None
    blacklisted: str = ""
    retired: bool = False
    release: bool = False


@dataclass(frozen=True)
class WriteCluster:
    """Publish the gang's cluster spec, releasing every executor to start its trainer."""

    cluster: ClusterSpec


@dataclass(frozen=True)
class StopExecutor:
    """Stop an executor's processes (SIGTERM, grace, SIGKILL) through the launcher.

    ``last``: the application is ending (or being suspended) and gives up the executor's host
    once its executors there are stopped: the stop lets the host's agent go too, in the same
    call, where it stops every executor left on that host."""

    executor: ExecutorId
    last: bool = False


@dataclass(frozen=True)
class RequestHosts:
    """Ask admission for hosts (``request``; ``None``: withdraw the request, granted or no
    longer needed), giving up the reservations of ``release`` first."""

    request: AdmissionRequest | None
    release: tuple[ExecutorId, ...] = ()


@dataclass(frozen=True)
class Requeue:
    """Every executor stopped after a preemption: give every reservation up and queue the
    application again, same attempt (``by``: the application it was stopped for)."""

    by: str


@dataclass(frozen=True)
class Suspend:
    """Every executor stopped on a suspend request: give every reservation up and the request
    for hosts, record SUSPENDED (same attempt, data progress kept); the AM then exits."""


@dataclass(frozen=True)
class RecordChanges:
    """Record topology changes (``changes/<seq>``) in the event log, with who asked."""

    changes: tuple[TopologyChange, ...]


@dataclass(frozen=True)
class NoteOutOfService:
    """Record in the event log that hosts the application holds went out of service (drained,
    quarantined), each with why, and whether its executors there move or run on."""

    hosts: tuple[tuple[str, str], ...]
    moved: bool


@dataclass(frozen=True)
class NoteLag:
    """Record in the event log that an unbounded stream's lag went past its ``max_lag`` (or,
    ``lag`` at most ``max_lag``, came back under it). Readers go on: no message is skipped."""

    stream: str
    lag: int
    max_lag: int


@dataclass(frozen=True)
class Finish:
    """Everything has ended: the AM may release leadership and exit."""


@dataclass(frozen=True)
class Park:
    """The QUEUED application waits for admission with nothing of it running and its request
    written: record it ``parked`` (if the request is still as read, not granted) and exit.
    The AM keeper starts an AM again once admission grants the request."""


Action = (SetAppState | StartAttempt | Launch | UpdateExecutor | WriteCluster | StopExecutor
          | RequestHosts | Requeue | Suspend | RecordChanges | NoteOutOfService | NoteLag
          | HandleHang | Finish | Park)

_WAITING = (ExecutorState.SUCCEEDED, ExecutorState.FAILED)  # live states awaiting a decision
_ACTIVE = (ExecutorState.REGISTERED, ExecutorState.RUNNING)


def _name(executor: ExecutorId) -> str:
    return f"{executor[0]}-{executor[1]}"


def required_successes(num: int, success_percent: float) -> int:
    """How many of ``num`` executors must succeed for the role to succeed."""
    return math.ceil(num * success_percent / 100.0 - 1e-9)


@dataclass
class _Pass:
    """State of one :func:`decide` pass: the view, the time, and failures counted so far."""

    view: AppView
    now: float
    winding_down: bool
    role_failures: dict[str, int]
    blacklist: HostBlacklist
    host_names: frozenset[str]
    preempting: bool = False

    @classmethod
    def of(cls, view: AppView, now: float, winding_down: bool,
           hosts: Sequence[Host]) -> _Pass:
        counts: dict[str, int] = {}
        for (role, _), ex in view.executors.items():
            if ex.plan is not None and ex.plan.app_attempt == view.status.attempt and \
                    not ex.plan.retired:
                counts[role] = counts.get(role, 0) + ex.plan.failures
        return cls(view, now, winding_down, counts, view.blacklist,
                   frozenset(h.name for h in hosts),
                   preempting=_preempting(view) or _suspending(view))

    def count_against(self, host: str) -> str:
        """Count a failed attempt against ``host``; why it is now blacklisted, if it is."""
        policy = self.view.spec.policy
        health = self.blacklist.hosts.get(host, HostHealth())
        failures = health.failures + 1
        why = ""
        if policy.blacklist_failures and failures >= policy.blacklist_failures:
            health = HostHealth(failures=0, blacklisted_until=self.now + policy.blacklist_cooldown)
            why = (f"host {host} blacklisted for {policy.blacklist_cooldown:g}s after {failures} "
                   f"failed executor attempts")
        else:
            health = health.model_copy(update={"failures": failures})
        self.blacklist = HostBlacklist(hosts={**self.blacklist.hosts, host: health})
        return why

    def ended(self, plan: ExecutorPlan, state: ExecutorState, exit_code: int | None,
              diagnosis: str, stop: bool = False, exit_class: str = "") -> UpdateExecutor:
        """An attempt ended in ``state``: apply the role's restart policy."""
        key = (plan.role, plan.index)
        if self.winding_down:
            if state is not ExecutorState.SUCCEEDED:
                state = ExecutorState.KILLED
            # A preempted index is no failure: it starts anew once the application is back.
            return UpdateExecutor(key, state, exit_code, diagnosis, exit_class,
                                  retired=self.preempting)
        role = self.view.spec.role(plan.role)
        failed = state in (ExecutorState.FAILED, ExecutorState.LOST)
        failures = plan.failures + (1 if failed else 0)
        role_failures = self.role_failures.get(role.name, 0) + (1 if failed else 0)
        self.role_failures[role.name] = role_failures
        code = None if state is ExecutorState.LOST else exit_code
        restart_at = None
        if state is ExecutorState.SUCCEEDED and role.restart_policy != "always":
            decision = ""
        elif not role.restartable(code, exit_class):
            decision = "not restarted: " + (
                f"exit code {code} is permanent" if code in role.permanent_exit_codes else
                f"{exit_class} is permanent" if exit_class in role.permanent_exit_codes else
                f"restart_policy {role.restart_policy}" + (
                    f" does not retry exit code {code}" if role.restart_policy == "exit_code"
                    else ""))
        elif failed and failures >= role.max_failures:
            decision = f"not restarted: failed {failures} times (max_failures {role.max_failures})"
        elif failed and role.max_role_failures is not None and \
                role_failures >= role.max_role_failures:
            decision = (f"not restarted: role {role.name} failed {role_failures} times "
                        f"(max_role_failures {role.max_role_failures})")
        else:
            delay = role.restart_delay(failures)
            restart_at = self.now + delay
            decision = (f"restarting {f'in {delay:g}s' if delay else 'now'}" + (
                f" (failure {failures} of max_failures {role.max_failures})" if failed else ""))
        blacklisted = self.count_against(plan.host) if failed else ""
        return UpdateExecutor(key, state, exit_code, diagnosis, exit_class, failures=failures,
                              restart_at=restart_at, decision=decision,
                              blacklist=self.blacklist if failed else None,
                              blacklisted=blacklisted, release=restart_at is None)

    def update(self, executor: ExecutorView) -> tuple[UpdateExecutor | None, bool]:
        """How an executor's recorded state must change given what was observed of it, and
        whether its processes must be stopped."""
        plan = executor.plan
        view = self.view
        if plan is None or plan.state.terminal or plan.app_attempt != view.status.attempt:
            return None, False
        key = (plan.role, plan.index)
        result = executor.result
        if result is not None and result.attempt == plan.attempt:
            state = ExecutorState.SUCCEEDED if result.exit_code == 0 else ExecutorState.FAILED
            return self.ended(plan, state, result.exit_code, result.diagnosis,
                              exit_class=result.exit_class), False
        if executor.stop_finished or (self.winding_down and plan.state is ExecutorState.PLANNED):
            return UpdateExecutor(key, ExecutorState.KILLED, diagnosis="stopped by the AM",
                                  retired=self.preempting), False
        live = executor.live
        if live is not None and live.attempt == plan.attempt:
            if live.state in _ACTIVE and live.state != plan.state and plan.state in (
                    ExecutorState.PLANNED, ExecutorState.LAUNCHED, ExecutorState.REGISTERED):
                return UpdateExecutor(key, live.state), False
            return None, False
        if plan.state in _ACTIVE:
            return self.ended(plan, ExecutorState.LOST, None, (
                "lease expired without a result: executor or host lost")), True
        if plan.state is ExecutorState.PLANNED and executor.launch_error:
            return self.ended(plan, ExecutorState.FAILED, None, executor.launch_error), False
        if plan.state is ExecutorState.PLANNED and executor.inherited_plan and \
                plan.host in self.host_names:
            return None, False  # launched again (_launches), its timeout counted from then
        if plan.state is ExecutorState.LAUNCHED and executor.process_exited:
            return self.ended(plan, ExecutorState.FAILED, None, (
                f"executor exited before registering; see {plan.executor_log}")), False
        timeout = view.spec.policy.register_timeout
        since = plan.launch_time or view.status.start_time
        if not self.winding_down and since is not None and self.now - since > timeout:
            return self.ended(plan, ExecutorState.FAILED, None, (
                f"did not register within {timeout:g}s; see {plan.executor_log}")), True
        return None, False


def past_attempts(previous: ExecutorPlan | None, attempt: int) -> list[PastAttempt]:
    """The ``past`` of an executor's plan for ``attempt``: the previous plan's, with the
    previous attempt added when it ended and ``attempt`` follows it (the last
    :data:`PAST_ATTEMPTS`). The same attempt planned again keeps its past as it is."""
    if previous is None:
        return []
    if previous.attempt >= attempt or not previous.state.terminal:
        return list(previous.past)
    ended = PastAttempt(attempt=previous.attempt, host=previous.host, state=previous.state,
                        launch_time=previous.launch_time, release_time=previous.release_time,
                        exit_code=previous.exit_code, exit_class=previous.exit_class)
    return [*previous.past, ended][-PAST_ATTEMPTS:]


def apply_update(plan: ExecutorPlan, update: UpdateExecutor, now: float,
                 trainer: ProcessRef | None = None) -> ExecutorPlan:
    """The plan once ``update`` is recorded at ``now`` (with the trainer the executor reported,
    if any): the one way an update becomes a plan, for :func:`decide`, the AM and the tests.

    Raises:
        IllegalTransitionError: The transition table does not allow the update.
    """
    if update.retired and plan.state.terminal:  # it ended before: only retired now
        return plan.model_copy(update={"retired": True, "restart_at": None})
    fields: dict[str, object] = {}
    if update.state.terminal:
        fields.update(release_time=now, exit_code=update.exit_code, diagnosis=update.diagnosis,
                      exit_class=update.exit_class, restart_at=update.restart_at,
                      retired=update.retired)
        if update.failures is not None:
            fields["failures"] = update.failures
    if trainer is not None:
        fields["trainer"] = trainer
    return advance(plan, update.state, **fields)


def decide(view: AppView, now: float, hosts: Sequence[Host]) -> list[Action]:
    """The actions that move the application towards its goal, given the view at ``now``.

    Idempotent: once the actions are applied and folded back into the view, calling it again
    returns no action until something new is observed (or a restart comes due).
    """
    status = view.status
    ending = status.state.terminal or view.kill is not None
    if status.state is AppState.SUSPENDED and not ending:
        # Nothing runs: an AM that finds the request still there has nothing to do; one that
        # finds it withdrawn (primus resume) queues the application again.
        return [Finish()] if view.suspend is not None else [SetAppState(AppState.QUEUED)]
    winding_down = ending or status.state is AppState.RESTARTING or _preempting(view) or \
        _suspending(view)
    this_pass = _Pass.of(view, now, winding_down, hosts)
    actions: list[Action] = []
    if view.changes and not status.state.terminal:
        actions.append(RecordChanges(tuple(view.changes[seq] for seq in sorted(view.changes))))
    plans: dict[ExecutorId, ExecutorPlan | None] = {}
    stopping: set[ExecutorId] = set()
    for key, ex in view.executors.items():
        if not winding_down and not view.is_current(key):
            actions += _retire(view, key, ex)
            plans[key] = None
            continue
        update, stop = this_pass.update(ex)
        if update is not None:
            actions.append(update)
        plan = ex.plan if ex.plan is None or update is None else \
            apply_update(ex.plan, update, now)
        # Plans of an earlier application attempt count as not planned in this one, nor do
        # those of an index retired and now back in the topology.
        plans[key] = plan if plan is not None and plan.app_attempt == status.attempt and \
            not plan.retired else None
        # A lost or unresponsive executor may have left its trainer (its own process group)
        # running: stop what remains of it, and replace it only once that is done.
        stop_now = (stop or (plan is not None and plan.state is ExecutorState.LOST)) and \
            not ex.stop_requested
        if stop_now:
            actions.append(StopExecutor(key))
        if ex.stop_requested and not ex.stop_finished or stop_now:
            stopping.add(key)

    if winding_down:
        return actions + _wind_down(view, plans, ending, stopping)
    waiting_for_hosts = any(
        view.is_current(key) and key not in view.reservations and
        (plan is None or not plan.final) and not _awaiting_hosts(view, plans, key)
        for key, plan in plans.items())
    if status.state is AppState.SUBMITTED:
        actions.append(SetAppState(AppState.QUEUED if waiting_for_hosts else AppState.STARTING))
    elif status.state is AppState.QUEUED and not waiting_for_hosts:
        actions.append(SetAppState(AppState.STARTING))

    deadline = view.spec.policy.deadline
    if deadline is not None and now >= status.submit_time + deadline:
        actions.append(SetAppState(AppState.FAILED, exit_code=124, diagnosis=(
            f"deadline of {deadline:g}s from submission passed")))
        return actions

    hang = hang_action(view, now)
    if hang is not None:
        actions.append(hang)
        if hang.fail:
            actions.append(SetAppState(AppState.FAILED, exit_code=1,
                                       diagnosis=f"{HUNG}: {hang.summary}"))
            return actions

    problem = next((found for stream in view.spec.data
                    if (found := stream_verdict(stream, view.stream_facts.get(stream.name)))),
                   None)
    if problem:
        actions.append(SetAppState(AppState.FAILED, exit_code=1, diagnosis=problem))
        return actions

    actions += lag_notes(view)

    verdict = _verdict(view, plans)
    if verdict is not None and verdict.state is AppState.SUCCEEDED:
        verdict = unread_verdict(view) or verdict
    if verdict is not None:
        if verdict.state is AppState.FAILED and \
                status.attempt < view.spec.policy.max_app_attempts:
            verdict = SetAppState(AppState.RESTARTING, diagnosis=(
                f"attempt {status.attempt} failed: {verdict.diagnosis}; starting attempt "
                f"{status.attempt + 1} of {view.spec.policy.max_app_attempts}"))
        actions.append(verdict)
        return actions

    launches = _launches(view, plans, now, hosts, stopping, this_pass.blacklist)
    if waiting_for_hosts and view.cluster is None:
        # A gang starts whole (the first time, and in each new application attempt): nothing
        # launches until every executor holds a reservation.
        launches = [a for a in launches if not isinstance(a, Launch)]
    eviction = view.eviction
    if eviction is not None:
        fresh = tuple(sorted(set(eviction.hosts.items()) - view.noted_out_of_service))
        if fresh:
            actions.append(NoteOutOfService(fresh, eviction.move))
    moved = _evicted(view, plans, now) + _moved_to_resize(view, plans, now) + \
        _stragglers(view, plans, now, hosts, this_pass)
    if moved:
        return actions + moved
    opened, timed_out = _start_gate(view, plans, now)
    if timed_out is not None:
        actions.append(timed_out)
        return actions
    # Under the ordered start policy, a role's first launch waits for the roles before it.
    launches = [a for a in launches if not isinstance(a, Launch) or a.executor[0] in opened
                or plans[a.executor] is not None]
    if launches:
        return actions + launches

    cluster = _desired_cluster(view, plans, partial=view.spec.start.policy != "gang")
    if cluster is not None and (view.cluster is None or
                                cluster.members != view.cluster.members or
                                cluster.master_addr != view.cluster.master_addr or
                                cluster.master_port != view.cluster.master_port):
        actions.append(WriteCluster(cluster))
        if status.state is AppState.STARTING:
            actions.append(SetAppState(AppState.RUNNING))
    if not actions and not stopping and _parks(view, plans):
        return [Park()]
    return actions


def _parks(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None]) -> bool:
    """Whether the application waits for admission with nothing left for an AM to do: QUEUED,
    allowed to wait with no AM (:attr:`AppView.may_park`), its request written and not
    granted, no reservation held, no executor of its attempt running, and no kill,
    suspension or preemption to carry out."""
    request = view.request
    return view.may_park and view.status.state is AppState.QUEUED and request is not None \
        and not request.granted and not view.reservations and view.kill is None and \
        view.suspend is None and view.preemption is None and \
        all(plan is None or plan.state.terminal for plan in plans.values())


def _retire(view: AppView, key: ExecutorId, ex: ExecutorView) -> list[Action]:
    """Stop an executor the topology no longer has (SIGTERM, grace, SIGKILL), then record it
    retired: neither a failure nor a part of its role's success."""
    plan = ex.plan
    if plan is None or plan.retired or plan.app_attempt != view.status.attempt:
        return []
    role = next((r for r in view.spec.roles if r.name == key[0]), None)
    why = (f"retired: role {key[0]} scaled down to {role.num} executor"
           f"{'' if role.num == 1 else 's'}" if role else f"retired: role {key[0]} removed")
    if plan.state.terminal:  # an executor waiting for a restart decision then exits
        return [UpdateExecutor(key, plan.state, plan.exit_code, plan.diagnosis or why,
                               retired=True, release=True)]
    result = ex.result
    if result is not None and result.attempt == plan.attempt:
        state = ExecutorState.SUCCEEDED if result.exit_code == 0 else ExecutorState.KILLED
        return [UpdateExecutor(key, state, result.exit_code, why, retired=True, release=True)]
    if plan.state is ExecutorState.PLANNED or ex.stop_finished:
        return [UpdateExecutor(key, ExecutorState.KILLED, diagnosis=why, retired=True,
                               release=True)]
    if not ex.stop_requested:
        return [StopExecutor(key)]
    return []


def _wind_down(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None],
               ending: bool, stopping: set[ExecutorId]) -> list[Action]:
    """Stop every executor; then record the end (or start the next attempt) and finish."""
    actions: list[Action] = []
    last = ending or _suspending(view)  # the hosts are given up once their executors stop
    status = view.status
    if ending and not status.state.terminal:
        if view.kill is not None and view.kill.outcome is AppState.SUCCEEDED:
            actions.append(SetAppState(AppState.SUCCEEDED, exit_code=0, diagnosis=(
                f"ended as succeeded by {view.kill.user or 'a user'}" +
                (f": {view.kill.reason}" if view.kill.reason else ""))))
        else:
            actions.append(SetAppState(AppState.KILLED,
                                       diagnosis=view.kill.reason if view.kill else ""))
    for key, ex in view.executors.items():
        plan = plans[key]
        if plan is None or ex.stop_requested or key in stopping:
            continue
        running = not plan.state.terminal and plan.state is not ExecutorState.PLANNED
        if running or ex.live is not None:  # live but ended: waits for a restart decision
            actions.append(StopExecutor(key, last=last))
    if stopping or any(isinstance(a, StopExecutor) for a in actions) or \
            not all(plan is None or plan.state.terminal for plan in plans.values()):
        return actions
    if ending:
        actions.append(Finish())
    elif _suspending(view):
        actions.append(Suspend())
    elif _preempting(view):
        assert view.preemption is not None  # _preempting says so
        actions.append(Requeue(view.preemption.by))
    else:
        actions.append(StartAttempt(status.attempt + 1))
    return actions


def stream_verdict(stream: StreamSpec, facts: StreamFacts | None) -> str | None:
    """Why a data stream fails the application, if it does: its task writer failed, the
    failed share of its tasks is over ``task_failed_percent``, or everything is resolved and
    the done share is under ``task_success_percent``."""
    if facts is None:
        return None
    if facts.error:
        return f"data stream {stream.name}: {facts.error}"
    stats = facts.stats
    if not stats.tasks:
        return None
    failed_pct = 100.0 * stats.failed / stats.tasks
    if failed_pct > stream.task_failed_percent + 1e-9:
        return (f"data stream {stream.name}: {stats.failed} of {stats.tasks} tasks failed "
                f"({failed_pct:.1f}%, task_failed_percent {stream.task_failed_percent:g}); "
                f"first: {facts.first_failure}")
    done_pct = 100.0 * stats.done / stats.tasks
    if facts.resolved and done_pct + 1e-9 < stream.task_success_percent:
        first = f"; first: {facts.first_failure}" if facts.first_failure else ""
        return (f"data stream {stream.name}: {stats.done} of {stats.tasks} tasks done "
                f"({done_pct:.1f}%, task_success_percent {stream.task_success_percent:g})"
                f"{first}")
    return None


def unread_verdict(view: AppView) -> SetAppState | None:
    """The end of an application whose roles succeeded while a bounded stream still had
    tasks nobody read: SUCCEEDED saying so, or FAILED where a stream's ``on_unread`` is
    ``fail``; ``None`` when every stream was read to its end (or is unbounded, which ends when
    told)."""
    unread: list[tuple[StreamSpec, str]] = []
    for stream in view.spec.data:
        facts = view.stream_facts.get(stream.name)
        if facts is None or facts.resolved or stream.unbounded:
            continue
        stats = facts.stats
        unread.append((stream, f"data stream {stream.name}: " + (
            f"{stats.done + stats.failed} of {stats.tasks} tasks read when its trainers "
            "ended" if stats.tasks else
            "its trainers ended before any of its tasks was listed")))
    if not unread:
        return None
    failing = [why for stream, why in unread if stream.on_unread == "fail"]
    if failing:
        return SetAppState(AppState.FAILED, exit_code=1,
                           diagnosis="; ".join(failing) + " (on_unread: fail)")
    return SetAppState(AppState.SUCCEEDED, exit_code=0,
                       diagnosis="; ".join(why for _, why in unread))


def lag_notes(view: AppView) -> list[NoteLag]:
    """The unbounded streams whose lag crossed their ``max_lag`` since the AM last said so,
    either way."""
    notes = []
    for stream in view.spec.data:
        facts = view.stream_facts.get(stream.name)
        limits = [source.kafka.max_lag for source in stream.sources
                  if source.kafka is not None and source.kafka.max_lag is not None]
        if facts is None or facts.stats.lag is None or not limits:
            continue
        over = facts.stats.lag > min(limits)
        if over != (stream.name in view.noted_lag):
            notes.append(NoteLag(stream.name, facts.stats.lag, min(limits)))
    return notes


def _suspending(view: AppView) -> bool:
    """Whether someone asked for the application to be suspended, and it has not been yet."""
    return view.suspend is not None and view.kill is None and view.status.state in (
        AppState.QUEUED, AppState.STARTING, AppState.RUNNING, AppState.RESTARTING)


def _preempting(view: AppView) -> bool:
    """Whether admission asked the application to stop and queue again, and it has not yet."""
    return view.preemption is not None and view.kill is None and \
        view.status.state in (AppState.QUEUED, AppState.STARTING, AppState.RUNNING)


def _launches(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None], now: float,
              hosts: Sequence[Host], stopping: set[ExecutorId], blacklist: HostBlacklist
              ) -> list[Action]:
    """Executors to start: not planned in this application attempt, or due for a restart.

    A restart happens in place when the executor waits on a host that is not blacklisted.
    Otherwise an executor starts where its reservation is (``scheduler/apps/<app>/
    reservations/``); one without a reservation, or whose reservation is on a blacklisted
    host or the host it was lost on, is asked of admission (:class:`RequestHosts`), which
    places it away from those hosts unless no other fits.
    """
    avoided = blacklist.avoided(now)
    by_name = {h.name: h for h in hosts}
    actions: list[Action] = []
    to_place: dict[ExecutorId, Launch] = {}
    shunned: set[str] = set()
    for key, ex in view.executors.items():
        plan = plans[key]
        if plan is None:
            if view.is_current(key) and key not in stopping:
                earlier = ex.plan
                to_place[key] = Launch(key, hosts[0],
                                       attempt=earlier.attempt + 1 if earlier else 1)
            continue
        if plan.state is ExecutorState.PLANNED and ex.inherited_plan and key not in stopping \
                and (host := by_name.get(plan.host)) is not None:
            actions.append(Launch(key, host, plan.attempt, plan.failures, plan.restarts,
                                  gpus=tuple(plan.gpus), again=True))
            continue
        if not plan.state.terminal or plan.restart_at is None or now < plan.restart_at or \
                key in stopping:
            continue
        launch = Launch(key, hosts[0], attempt=plan.attempt + 1, failures=plan.failures,
                        restarts=plan.restarts + 1)
        live = ex.live
        host = by_name.get(plan.host)
        if live is not None and live.attempt == plan.attempt and live.state in _WAITING and \
                host is not None and (host.name not in avoided or
                                      all(h.name in avoided for h in hosts)):
            actions.append(Launch(key, host, launch.attempt, launch.failures, launch.restarts,
                                  in_place=True, gpus=tuple(plan.gpus)))
            continue
        if plan.state is ExecutorState.LOST:
            shunned.add(plan.host)
        to_place[key] = launch
    unwanted = avoided | shunned
    needed: list[ExecutorId] = []
    released: list[ExecutorId] = []
    for key, launch in to_place.items():
        reserved = view.reservations.get(key)
        host = by_name.get(reserved.host) if reserved is not None else None
        earlier = view.executors[key].plan
        # A reservation on a host to avoid is given up only if it is the one the last attempt
        # held: one admission gave after being asked to avoid that host is its choice (no
        # other host fitted), and asking again would only bring the same answer.
        chosen = reserved is not None and (
            reserved.host not in unwanted or earlier is None or reserved.host != earlier.host
            or key in view.placed_elsewhere)
        if reserved is not None and host is not None and chosen:
            actions.append(Launch(key, host, launch.attempt, launch.failures, launch.restarts,
                                  gpus=tuple(reserved.gpus)))
            continue
        if reserved is not None:
            released.append(key)
        needed.append(key)
    # Reservations no executor will use: granted for an index the topology dropped since.
    released += [key for key in view.reservations if not view.is_current(key) and (
        (plan := view.executors[key].plan if key in view.executors else None) is None
        or plan.retired or plan.final) and key not in released]
    request = _request(view, hosts, needed, unwanted)
    if released or request != view.request and not (
            request is None and view.request is None):
        actions.append(RequestHosts(request, tuple(released)))
    return actions


def _request(view: AppView, hosts: Sequence[Host], needed: list[ExecutorId],
             unwanted: set[str]) -> AdmissionRequest | None:
    """The request for ``needed``: the one in etcd when it asks for just them (granted or
    not), else a new one; ``None`` when nothing is needed and none waits to be dropped."""
    current = view.request
    if not needed and (resized := _resized(view)):
        # Executors whose reservations are not their roles' sizes (primus resize): asked for
        # in place, once nothing else is needed.
        if current is not None and current.resize and current.executors == resized:
            return current
        return request_of(view.keys.app_id, view.status.user, view.spec,
                          view.status.submit_time, [h.name for h in hosts], resized
                          ).model_copy(update={"resize": True})
    if current is not None and not current.resize and \
            sorted(current.executors) == sorted(needed) and (not current.granted or not needed):
        return current if needed else None
    if not needed:
        return None
    return request_of(view.keys.app_id, view.status.user, view.spec, view.status.submit_time,
                      [h.name for h in hosts], needed, unwanted)


def _resized(view: AppView) -> list[ExecutorId]:
    """The executors of the topology, not ended for good, whose reservations are not the sizes
    their roles have now (a resize, ``primus resize``), in order."""
    roles = {role.name: role for role in view.spec.roles}
    return sorted(key for key, reservation in view.reservations.items()
                  if view.is_current(key) and (plan := view.executors[key].plan
                                               if key in view.executors else None) is not None
                  and not plan.final and (reservation.cpu, reservation.memory) !=
                  (roles[key[0]].cpu, roles[key[0]].memory))


def _stragglers(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None], now: float,
                hosts: Sequence[Host], this_pass: _Pass) -> list[Action]:
    """Running readers of a role with ``straggler`` set that read more than ``factor`` times
    slower than the role's median over ``window``: each is recorded LOST with the rates in
    its diagnosis, counted against its host's blacklist but not as a failure, and relaunched
    at once away from that host (its task resumes at its checkpoint). At most
    ``max_percent`` of the role is moved at once, and none while the role has no spare host
    (one of the inventory holding none of its executors)."""
    actions: list[Action] = []
    for role in view.spec.roles:
        rule = role.straggler
        if rule is None:
            continue
        keys = [(role.name, i) for i in range(role.num)]
        rates = {key: view.read_rates[key] for key in keys if key in view.read_rates and
                 (p := plans[key]) is not None and p.state is ExecutorState.RUNNING}
        if len(rates) < 2:
            continue
        median = statistics.median(rates.values())
        busy = {p.host for key in keys if (p := plans[key]) is not None and not p.final}
        spare = [h for h in hosts if h.name not in busy]
        moving = sum(1 for key in keys if (p := plans[key]) is not None and
                     p.state is ExecutorState.LOST and p.diagnosis.startswith("straggler"))
        allowed = max(1, math.floor(rule.max_percent * role.num / 100)) - moving
        for key, rate in sorted(rates.items(), key=lambda item: item[1]):
            if allowed <= 0 or not spare or rate * rule.factor >= median:
                break
            plan = plans[key]
            assert plan is not None  # rated executors are running
            blacklisted = this_pass.count_against(plan.host)
            actions.append(UpdateExecutor(
                key, ExecutorState.LOST, diagnosis=(
                    f"straggler: read {_rate(rate)} over {rule.window:g}s against its role's "
                    f"median {_rate(median)} (straggler.factor {rule.factor:g}); moved off "
                    f"{plan.host}"),
                failures=plan.failures, restart_at=now,
                decision="relaunching on another host", blacklist=this_pass.blacklist,
                blacklisted=blacklisted))
            allowed -= 1
            spare = spare[1:]
    return actions


def _moved_to_resize(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None], now: float
                     ) -> list[Action]:
    """Executors of a role with ``resize: move`` whose resize waits for room on their host
    (``view.waiting.hosts``): recorded LOST, so that they are stopped and placed at their
    new size on another host as a lost host's are, with no failure counted."""
    request, waiting = view.request, view.waiting
    if request is None or not request.resize or waiting is None or not waiting.hosts:
        return []
    moving = {role.name for role in view.spec.roles if role.resize == "move"}
    actions: list[Action] = []
    for key in request.executors:
        plan = plans.get(key)
        if key[0] not in moving or plan is None or plan.state.terminal or \
                plan.host not in waiting.hosts:
            continue
        actions.append(UpdateExecutor(
            key, ExecutorState.LOST, diagnosis=f"moved off {plan.host}: no room there "
            f"for its new size ({waiting.reason})", failures=plan.failures,
            restart_at=now, decision="relaunching on another host at its new size"))
    return actions


def _evicted(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None], now: float
             ) -> list[Action]:
    """Executors on a host out of service that they must leave (``view.eviction``): recorded
    LOST, so that they are stopped and placed on another host as a lost host's are, with no
    failure counted and nothing against the host in the blacklist."""
    evicted = view.eviction.hosts if view.eviction is not None and view.eviction.move else {}
    actions: list[Action] = []
    for key, plan in plans.items():
        if plan is None or plan.state.terminal or plan.host not in evicted:
            continue
        actions.append(UpdateExecutor(
            key, ExecutorState.LOST, diagnosis=f"moved off {plan.host}: {evicted[plan.host]}",
            failures=plan.failures, restart_at=now, decision="relaunching on another host"))
    return actions


def _rate(bytes_per_second: float) -> str:
    if bytes_per_second >= 1e6:
        return f"{bytes_per_second / 1e6:.1f} MB/s"
    return f"{bytes_per_second / 1e3:.1f} kB/s"


def _start_gate(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None], now: float
                ) -> tuple[set[str], SetAppState | None]:
    """The roles whose executors may be launched for the first time in this attempt, by the
    start policy; and the verdict when an ordered start timed out with ``on_timeout: fail``.

    gang and dynamic open every role. ordered opens the job's roles one after another: a role
    opens once the one before has ``schedule_percent`` of its executors with a trainer
    running (or succeeded) in this attempt, or when that role's ``timeout``, counted from its
    first launch (or the attempt's start, when every launch failed), passed and
    ``on_timeout`` is ``continue``.
    """
    start = view.spec.start
    roles = view.spec.roles
    if start.policy != "ordered":
        return {role.name for role in roles}, None
    opened = {roles[0].name}
    for previous, role in itertools.pairwise(roles):
        keys = [(previous.name, i) for i in range(previous.num)]
        started = sum(1 for key in keys if _trainer_started(view, key, plans[key]))
        needed = math.ceil(start.schedule_percent * previous.num / 100)
        if started < needed:
            # Counted from the role's first launch; from the attempt's start when none was
            # launched yet (every launch failed).
            launched = [p.launch_time for key in keys
                        if (p := plans[key]) is not None and p.launch_time is not None]
            since = min(launched) if launched else view.status.start_time
            if start.timeout is None or since is None or now < since + start.timeout or \
                    not any(plans[key] is not None for key in keys):
                break
            if start.on_timeout == "fail":
                return opened, SetAppState(AppState.FAILED, exit_code=1, diagnosis=(
                    f"ordered start: role {previous.name} has {started} of {previous.num} "
                    f"executors running {start.timeout:g}s after it was first launched, short of "
                    f"start.schedule_percent {start.schedule_percent}% ({needed}); role "
                    f"{role.name} not started"))
        opened.add(role.name)
    return opened, None


def _trainer_started(view: AppView, key: ExecutorId, plan: ExecutorPlan | None) -> bool:
    """Whether the executor's trainer runs, or ran and succeeded, in this attempt."""
    if plan is None:
        return False
    live = view.executors[key].live
    return plan.state is ExecutorState.SUCCEEDED or (
        live is not None and live.attempt == plan.attempt and
        live.state is ExecutorState.RUNNING)


def _desired_cluster(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None],
                     partial: bool = False) -> ClusterSpec | None:
    """The cluster spec once every executor of this attempt registered or ended for good (an
    elastic role's executors that wait for hosts beyond its minimum left out); with
    ``partial`` (the dynamic and ordered start policies), of those that did so far.

    Executors that ended keep their entry of the current spec; a restarted executor appears
    with its new attempt, address and ports. ``None`` while any executor is on its way (with
    ``partial``: while none has registered).
    """
    members: dict[ExecutorId, tuple[str, list[int], int]] = {}
    registered = False
    current = view.cluster
    for key, ex in view.executors.items():
        if not view.is_current(key):
            continue
        plan = plans[key]
        live = ex.live
        if plan is not None and live is not None and live.attempt == plan.attempt and \
                live.state in _ACTIVE:
            members[key] = (live.address, list(live.ports), live.attempt)
            registered = True
        elif plan is not None and plan.final:
            old = current.member(*key) if current else None
            members[key] = (old.address, old.ports, old.attempt) if old else (
                plan.address, [], plan.attempt)
        elif not partial and not _awaiting_hosts(view, plans, key):
            return None
    if not members or partial and not registered:
        return None
    return build_cluster(view.spec, view.status.attempt, members,
                         version=current.version + 1 if current else 1)


def _verdict(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None]) -> SetAppState | None:
    """SUCCEEDED once every role reached its success share; FAILED once one no longer can
    (``failure_action: fail_app``) or has ended short of it (``fail_executor``). A role with
    ``min_num`` needs at most that many successes, so it goes on while no more than ``num -
    min_num`` of its executors failed for good, and is done once all of them ended (those
    never given hosts beyond its minimum aside)."""
    all_done = True
    for role in view.spec.roles:
        keys = [(role.name, i) for i in range(role.num)]
        # An elastic role (min_num) needs no more successes than its minimum.
        needed = min(required_successes(role.num, role.success_percent),
                     role.min_num or role.num)
        ended = [p for k in keys if (p := plans[k]) is not None and p.final]
        succeeded = sum(p.state is ExecutorState.SUCCEEDED for p in ended)
        failed = [p for p in ended
                  if p.state in (ExecutorState.FAILED, ExecutorState.LOST)]
        lost_cause = role.num - len(failed) < needed if role.failure_action == "fail_app" \
            else len(ended) == role.num and succeeded < needed
        if lost_cause and failed:
            first = failed[0]
            return SetAppState(AppState.FAILED, exit_code=first.exit_code or 1,
                               diagnosis=f"{first.role}-{first.index} failed: {first.diagnosis}")
        # An elastic role is done once every executor ended (or never got hosts beyond its
        # minimum), not at its minimum.
        all_done = all_done and succeeded >= needed and (
            role.min_num is None or
            len(ended) + sum(_awaiting_hosts(view, plans, k) for k in keys) == role.num)
    return SetAppState(AppState.SUCCEEDED, exit_code=0) if all_done else None


def _awaiting_hosts(view: AppView, plans: dict[ExecutorId, ExecutorPlan | None],
                    key: ExecutorId) -> bool:
    """Whether ``key`` is an elastic role's executor that admission has not given hosts yet
    while the role has its minimum (planned or holding reservations): the application starts
    and runs without it, and takes it in when admission grows the role."""
    role = view.spec.role(key[0])
    if role.min_num is None or plans[key] is not None or key in view.reservations:
        return False
    given = [(role.name, i) for i in range(role.num)
             if plans.get((role.name, i)) is not None or (role.name, i) in view.reservations]
    return len(given) >= role.min_num
