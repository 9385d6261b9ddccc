"""The operations the ``primus`` command calls, whichever way it reaches Primus: on etcd
(:class:`~primus.client.service.ApplicationService`) or through an API server
(:class:`~primus.cli.remote.RemoteService`).

A module of its own, beside the values it returns (``api.py``, ``queues.py``, ``topology.py``),
which import nothing of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any

from primus.client.api import AppReport, AppSummary, HangStacks, LogLine
from primus.client.queues import HostUsage, QueuedApp
from primus.client.topology import Changed
from primus.state.records import HostCondition, Savepoint
from primus.state.states import AppState


class CommandService(ABC):
    """The operations the ``primus`` command calls, whichever way it reaches Primus: on etcd
    (:class:`~primus.client.service.ApplicationService`) or through an API server
    (:class:`~primus.cli.remote.RemoteService`). Each returns the same values and raises the
    same errors in the same words both ways, so that a command prints the same; what one side
    checks or words itself is decided by one function both call
    (:func:`primus.client.api.parse_log_name`, :func:`primus.client.topology.scale_plan`...)."""

    @abstractmethod
    async def close(self) -> None:
        """Let go of what the service holds (connections, watches)."""

    @abstractmethod
    async def list_apps(self, include_history: bool = False, array: str = ""
                        ) -> list[AppSummary]:
        """The applications, newest first; with ``include_history``, the archived ones too;
        with ``array``, the members of that job array only."""

    @abstractmethod
    async def get_app(self, app_id: str) -> AppReport:
        """Everything about one application.

        Raises:
            AppNotFoundError: There is no such application.
        """

    @abstractmethod
    async def wait_for_end(self, app_id: str,
                           on_change: Callable[[AppReport], None] | None = None
                           ) -> AppReport:
        """Follow the application until it has ended and its AM has exited; ``on_change`` is
        called with a fresh report after every change.

        Raises:
            AmGoneError: No AM leads the running application, and none is coming.
        """

    @abstractmethod
    async def kill(self, app_id: str, reason: str, timeout: float,
                   outcome: AppState = AppState.KILLED) -> AppReport:
        """Stop the application (``outcome`` KILLED, or SUCCEEDED: it must be running) and
        wait until it has; an application that has ended is returned as it is (KILLED).

        Raises:
            AppEndedError: SUCCEEDED was asked of an application that is not running.
            NotStoppedError: It did not stop within ``timeout`` seconds.
        """

    @abstractmethod
    async def suspend(self, app_id: str, reason: str, user: str, timeout: float) -> AppReport:
        """Suspend a running application and wait until it is."""

    @abstractmethod
    async def resume(self, app_id: str) -> int:
        """Resume a suspended application; the revision of the request."""

    @abstractmethod
    async def recover(self, app_id: str, host_name: str | None = None) -> str:
        """Start an AM candidate for the application; the host it was started on."""

    @abstractmethod
    async def scale_role(self, app_id: str, role: str, executors: int, user: str) -> Changed:
        """Give ``role`` ``executors`` executors while the application runs."""

    @abstractmethod
    async def resize_role(self, app_id: str, role: str, cpu: Any, memory: Any, user: str
                          ) -> Changed:
        """Make each executor of ``role`` reserve ``cpu`` cores and ``memory`` (``None``: as
        it is) while the application runs."""

    @abstractmethod
    async def add_role(self, app_id: str, role: Any, user: str, source: str = "role"
                       ) -> Changed:
        """Add ``role`` (one parsed entry of a job file's ``roles``; ``source`` names where
        it came from in errors)."""

    @abstractmethod
    async def remove_role(self, app_id: str, role: str, user: str) -> Changed:
        """Remove ``role``; its executors are stopped gracefully."""

    @abstractmethod
    async def add_data_source(self, app_id: str, stream: str, source: Any, user: str
                              ) -> Changed:
        """Add ``source`` (one parsed entry of a stream's ``sources``) to ``stream``."""

    @abstractmethod
    def logs(self, app_id: str, executor: str | None, executor_log: bool, follow: bool
             ) -> AsyncIterator[tuple[LogLine, bool]]:
        """Each line of the logs asked for (``executor``: a name
        :func:`primus.client.api.parse_log_name` reads; ``None``: every executor's), and whether
        several logs are read (each line then shown with its source).

        Raises:
            LogNameError: ``executor`` names no log.
            PrimusError: There is no such executor, or none was launched yet.
        """

    @abstractmethod
    async def create_savepoint(self, app_id: str, user: str, timeout: float) -> Savepoint:
        """Take a savepoint of the application's data streams, waiting ``timeout`` seconds
        for the AM to take it."""

    @abstractmethod
    async def savepoints(self, app_id: str) -> list[Savepoint]:
        """The application's savepoints, oldest first."""

    @abstractmethod
    async def stacks(self, app_id: str, hang: int = 0) -> HangStacks:
        """The trainers' stacks at hang ``hang`` (0: the last)."""

    @abstractmethod
    async def app_webhook_key(self, app_id: str) -> bytes:
        """The key the application's own webhooks are signed with (hex text).

        Raises:
            AppNotFoundError: There is no such application.
        """

    @abstractmethod
    async def waiting_apps(self, limit: int = 0) -> tuple[list[QueuedApp], int]:
        """The first ``limit`` applications waiting for admission (0: every one), in
        admission order, and how many wait in all."""

    @abstractmethod
    async def host_usage(self, inventory: str | None) -> list[HostUsage]:
        """What each host admission knows holds, and what is free; with ``inventory`` (a
        file), its hosts too."""

    @abstractmethod
    async def drain_host(self, host: str, reason: str) -> HostCondition:
        """Take ``host`` out of service."""

    @abstractmethod
    async def resume_host(self, host: str) -> HostCondition | None:
        """Put ``host`` back in service; its condition before (``None``: it was)."""
