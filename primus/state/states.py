"""Application and executor states, with the transitions each allows.

States are ``str`` enums so that they read as plain words in etcd and JSON.
"""

from __future__ import annotations

import enum

from primus.errors import PrimusError


class IllegalTransitionError(PrimusError):
    """A state change that the transition table forbids."""


class AppState(str, enum.Enum):
    """Lifecycle of an application.

    - ``SUBMITTED``: spec written to etcd by ``primus submit``; no AM has started yet.
    - ``QUEUED``: an AM leads and has asked admission for hosts for every executor at once;
      it waits until they can all be given (docs/scheduling.md). A preemptible application
      stopped to admit another comes back here, with its attempt and its data progress.
    - ``STARTING``: every executor holds a reservation; they are being launched and
      registered.
    - ``RUNNING``: every executor registered and the cluster spec is written; trainers run.
    - ``RESTARTING``: an attempt failed and ``max_app_attempts`` allows another; every executor
      is being stopped, then the next attempt starts (``STARTING``, ``attempt`` + 1).
    - ``SUCCEEDED``: every role reached its ``success_percent``.
    - ``FAILED``: an executor failed for good, the gang did not register in time or the
      deadline passed; the diagnosis says which.
    - ``KILLED``: stopped on request (``primus kill``).
    - ``SUSPENDED``: stopped on request (``primus suspend``) with nothing running and no host
      held, its data progress kept; ``primus resume`` queues it again (``QUEUED``). No AM
      runs for it meanwhile.
    """

    SUBMITTED = "SUBMITTED"
    QUEUED = "QUEUED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    SUCCEEDED = "SUCCEEDED"
    SUSPENDED = "SUSPENDED"
    FAILED = "FAILED"
    KILLED = "KILLED"

    @property
    def terminal(self) -> bool:
        """Whether the application has ended."""
        return self in _APP_TERMINAL


class ExecutorState(str, enum.Enum):
    """Lifecycle of one executor attempt, as the AM records it in the ``plan`` key.

    - ``PLANNED``: placed on a host; not launched yet.
    - ``LAUNCHED``: its process was started; it has not registered yet.
    - ``REGISTERED``: its leased ``live`` key exists; it waits for the gang.
    - ``RUNNING``: its trainer runs.
    - ``SUCCEEDED``: the trainer exited 0.
    - ``FAILED``: the trainer exited non-zero, or the executor died before registering.
    - ``LOST``: its lease expired without a result (executor or host gone).

    An ended attempt may be followed by another (the plan's ``attempt`` + 1, state ``PLANNED``
    or, for a restart in place by the same executor, ``LAUNCHED``): ``plan.restart_at`` says
    when. ``SUCCEEDED`` and ``FAILED`` are also what an executor shows in its ``live`` key while
    it waits for the AM's decision on a restart in place.
    - ``KILLED``: stopped by the AM (application ended or killed, or the index retired: a
      scale-down or a role removal left it out of the topology).
    """

    PLANNED = "PLANNED"
    LAUNCHED = "LAUNCHED"
    REGISTERED = "REGISTERED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LOST = "LOST"
    KILLED = "KILLED"

    @property
    def terminal(self) -> bool:
        """Whether this attempt has ended."""
        return self in _EXECUTOR_TERMINAL


_APP_TERMINAL = frozenset({AppState.SUCCEEDED, AppState.FAILED, AppState.KILLED})
_EXECUTOR_TERMINAL = frozenset({ExecutorState.SUCCEEDED, ExecutorState.FAILED,
                                ExecutorState.LOST, ExecutorState.KILLED})

APP_TRANSITIONS: dict[AppState, frozenset[AppState]] = {
    AppState.SUBMITTED: frozenset({AppState.QUEUED, AppState.STARTING, AppState.FAILED,
                                   AppState.KILLED}),
    # SUCCEEDED from QUEUED or RESTARTING only on request (``primus succeed``) of one that
    # had started: preempted and queued again, or between attempts.
    AppState.QUEUED: frozenset({AppState.STARTING, AppState.FAILED, AppState.KILLED,
                                AppState.SUCCEEDED, AppState.SUSPENDED}),
    AppState.STARTING: frozenset({AppState.RUNNING, AppState.RESTARTING, AppState.QUEUED,
                                  AppState.SUSPENDED}) | _APP_TERMINAL,
    AppState.RUNNING: frozenset({AppState.RESTARTING, AppState.QUEUED, AppState.SUSPENDED})
    | _APP_TERMINAL,
    AppState.RESTARTING: frozenset({AppState.STARTING, AppState.FAILED, AppState.KILLED,
                                    AppState.SUCCEEDED, AppState.SUSPENDED}),
    AppState.SUSPENDED: frozenset({AppState.QUEUED, AppState.KILLED}),
    AppState.SUCCEEDED: frozenset(),
    AppState.FAILED: frozenset(),
    AppState.KILLED: frozenset(),
}

_ENDED = _EXECUTOR_TERMINAL
_NEXT_ATTEMPT = frozenset({ExecutorState.PLANNED, ExecutorState.LAUNCHED})
EXECUTOR_TRANSITIONS: dict[ExecutorState, frozenset[ExecutorState]] = {
    # An AM that died between launching and recording LAUNCHED leaves a PLANNED executor
    # that may register, run and end all the same.
    ExecutorState.PLANNED: frozenset({ExecutorState.LAUNCHED, ExecutorState.REGISTERED,
                                      ExecutorState.RUNNING}) | _ENDED,
    ExecutorState.LAUNCHED: frozenset({ExecutorState.REGISTERED, ExecutorState.RUNNING}) | _ENDED,
    ExecutorState.REGISTERED: frozenset({ExecutorState.RUNNING}) | _ENDED,
    ExecutorState.RUNNING: _ENDED,
    # A new attempt of the same index starts again from PLANNED (or LAUNCHED when the same
    # executor restarts its trainer in place).
    ExecutorState.SUCCEEDED: _NEXT_ATTEMPT,
    ExecutorState.FAILED: _NEXT_ATTEMPT,
    ExecutorState.LOST: _NEXT_ATTEMPT,
    ExecutorState.KILLED: _NEXT_ATTEMPT,
}


def check_transition(current: AppState | ExecutorState,
                     target: AppState | ExecutorState) -> None:
    """Raise :class:`IllegalTransitionError` unless ``current → target`` is allowed.

    Staying in the same state is always allowed (writes are idempotent).
    """
    if current == target:
        return
    table: dict = APP_TRANSITIONS if isinstance(current, AppState) else EXECUTOR_TRANSITIONS
    if target not in table[current]:
        raise IllegalTransitionError(f"{type(current).__name__} cannot go from "
                                     f"{current.value} to {target.value}")
