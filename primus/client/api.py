"""The client layer's contract: the values its operations return and the errors they raise
(the operations the ``primus`` command calls are :class:`~primus.client.commands.CommandService`).

The ``primus`` command, the API server and the web UI call
:class:`~primus.client.service.ApplicationService`; through a server the command calls
:class:`~primus.cli.remote.RemoteService` instead, which offers the same operations.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from primus.config.inventory import Host
from primus.errors import PrimusError
from primus.processes import identity
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppStatus,
    HangReport,
    TrainerStacks,
)
from primus.state.states import AppState
from primus.state.view import AppView, ExecutorId


class AppNotFoundError(PrimusError):
    """No application with that id exists under the deployment prefix."""


class AppEndedError(PrimusError):
    """The application has ended and no AM runs: there is nothing left to act on."""


class AmGoneError(PrimusError):
    """The application has not ended but no AM leads it (it died, or never started)."""


class NotStoppedError(PrimusError):
    """The application did not stop within the time given to ``kill``."""


class HostNotFoundError(PrimusError):
    """A host named in a request is not one of the application's hosts, or not one the
    deployment knows."""


class HostCheckError(PrimusError):
    """Hosts that cannot run an application; one line per host, naming it and the cause."""


class LogNameError(PrimusError):
    """A log was named neither ``am`` nor ``ROLE-INDEX``."""


AM_LOG: Final = "am"
"""The name of the AM's log, beside the executors' ``ROLE-INDEX``."""


def parse_log_name(name: str) -> ExecutorId | Literal["am"]:
    """The log ``name`` names: the AM's (:data:`AM_LOG`), or an executor's ``(role, index)``
    (``worker-0``; ``worker-01`` is ``worker-1``). Whichever way a command reaches Primus,
    this decides what a name means and how a name that is neither is refused.

    Raises:
        LogNameError: ``name`` is neither.
    """
    if name == AM_LOG:
        return AM_LOG
    role, _, index = name.rpartition("-")
    if not role or not index.isascii() or not index.isdigit():
        raise LogNameError(f"executor {name!r}: must be ROLE-INDEX (worker-0) or {AM_LOG}")
    return role, int(index)


def leaderless(status: AppStatus, leader: AmLeader | None) -> bool:
    """Whether the application has not ended and no AM leads it to its end: there is no leader
    key, or it names an AM process of this host that no longer runs.

    The key outlives its AM by up to one lease TTL, and lives one TTL more when etcd restarts;
    an AM on another host is taken at its key's word.
    """
    if status.state.terminal or status.state is AppState.SUSPENDED or status.parked:
        return False  # no AM is wanted: none runs for a suspended or parked application
    if leader is None:
        return True
    if leader.host != socket.gethostname() or not leader.start_time:
        return False
    return not identity(leader.pid, leader.start_time)


@dataclass(frozen=True)
class AppSummary:
    """One application as ``primus list`` shows it: its status and the AM that leads it."""

    status: AppStatus
    leader: AmLeader | None
    waiting: str = ""
    """Why it waits for admission, when it is QUEUED and admission said why."""
    queue: str = ""
    """Its admission queue."""
    archived: bool = False
    """Read from the history (it has ended and is archived)."""
    progress: float | None = None
    """How far it got (:meth:`~primus.state.view.AppView.progress`; for an archived
    application, as the history kept it); ``None`` when not known."""
    leaderless_as_read: bool | None = None
    """:attr:`leaderless` as judged where it was read (an API server, whose host may run the
    AM); ``None``: judged here."""

    @property
    def leaderless(self) -> bool:
        """See :func:`leaderless`."""
        if self.leaderless_as_read is not None:
            return self.leaderless_as_read
        return leaderless(self.status, self.leader)


@dataclass(frozen=True)
class AppPage:
    """One page of :meth:`~primus.client.service.ApplicationService.find_apps`: its
    applications, newest submission first, and how many match the query in all."""

    items: list[AppSummary]
    total: int


@dataclass(frozen=True)
class AppReport:
    """Everything about one application, read at one revision."""

    view: AppView
    leader: AmLeader | None
    events: list[AppEvent]
    revision: int
    hosts: list[Host]
    am_log: str
    versions: tuple[tuple[str, int], ...] = ()
    """Each key it was built from, with the revision that key was last written at: two
    reports with the same versions show the same application."""
    archived: bool = False
    """Read from the history: its keys are gone from etcd (``revision`` is then the revision
    it was archived at)."""
    leaderless_as_read: bool | None = None
    """:attr:`leaderless` as judged where it was read (an API server, whose host may run the
    AM); ``None``: judged here."""

    def host(self, name: str) -> Host:
        """The inventory entry of a host the application uses."""
        return next(h for h in self.hosts if h.name == name)

    @property
    def leaderless(self) -> bool:
        """See :func:`leaderless`."""
        if self.leaderless_as_read is not None:
            return self.leaderless_as_read
        return leaderless(self.view.status, self.leader)


@dataclass(frozen=True)
class Revived:
    """An application :meth:`~primus.client.service.ApplicationService.revive` started an AM
    candidate for, or why it could not."""

    app_id: str
    problem: str = ""


@dataclass(frozen=True)
class HangStacks:
    """A hang of an application and the stacks of its role's trainers then, by role and
    index; ``hangs``: the hangs whose stacks are kept, oldest first."""

    hang: HangReport | None
    stacks: list[TrainerStacks]
    hangs: list[int]


@dataclass(frozen=True)
class LogSource:
    """A log of the application: ``name`` is ``am`` or ``<role>-<index>``, ``path`` the file on
    ``host``, read as ``account`` (the application's owner; empty: this process's)."""

    name: str
    host: Host
    path: str
    account: str = ""


@dataclass(frozen=True)
class LogLine:
    """One line of a log, without its line break; ``source`` is its :attr:`LogSource.name`."""

    source: str
    text: str
    end: int = 0
    """The byte of the log just after this line (and its line break): reading again from it
    resumes after this line."""


@dataclass(frozen=True)
class HostReport:
    """What probing one host found: reachable with its facts, or why not."""

    host: Host
    ok: bool
    error: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
