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
    - ``STARTING``: an AM leads; executors are being placed, launched and registered.
    - ``RUNNING``: every executor registered and the cluster spec is written; trainers run.
    - ``SUCCEEDED``: every role reached its ``success_percent``.
    - ``FAILED``: an executor failed, the gang did not register in time, or placement failed;
      the diagnosis says which.
    - ``KILLED``: stopped on request (``primus kill``).
    """

    SUBMITTED = "SUBMITTED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
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
    - ``KILLED``: stopped by the AM (application ended or killed).
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
    AppState.SUBMITTED: frozenset({AppState.STARTING, AppState.FAILED, AppState.KILLED}),
    AppState.STARTING: frozenset({AppState.RUNNING, AppState.SUCCEEDED, AppState.FAILED,
                                  AppState.KILLED}),
    AppState.RUNNING: _APP_TERMINAL,
    AppState.SUCCEEDED: frozenset(),
    AppState.FAILED: frozenset(),
    AppState.KILLED: frozenset(),
}

_ENDED = _EXECUTOR_TERMINAL
EXECUTOR_TRANSITIONS: dict[ExecutorState, frozenset[ExecutorState]] = {
    # An AM that died between launching and recording LAUNCHED leaves a PLANNED executor
    # that may register, run and end all the same.
    ExecutorState.PLANNED: frozenset({ExecutorState.LAUNCHED, ExecutorState.REGISTERED,
                                      ExecutorState.RUNNING}) | _ENDED,
    ExecutorState.LAUNCHED: frozenset({ExecutorState.REGISTERED, ExecutorState.RUNNING}) | _ENDED,
    ExecutorState.REGISTERED: frozenset({ExecutorState.RUNNING}) | _ENDED,
    ExecutorState.RUNNING: _ENDED,
    ExecutorState.SUCCEEDED: frozenset(),
    ExecutorState.FAILED: frozenset(),
    ExecutorState.LOST: frozenset(),
    ExecutorState.KILLED: frozenset(),
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
