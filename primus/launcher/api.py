"""The launcher contract: start detached processes on hosts, signal them, read their logs."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from primus.config.inventory import Host
from primus.config.site import Settings
from primus.errors import PrimusError
from primus.state.records import ProcessRef


class LaunchError(PrimusError):
    """Base of launcher errors."""


class HostUnreachableError(LaunchError):
    """The host could not be reached to launch, signal or read from."""


@dataclass(frozen=True)
class LaunchRequest:
    """A process to start detached on ``host``.

    ``argv`` is an argument list, never a shell string; ``env`` is added to the environment a
    process gets on that host (the launcher's own locally, a non-interactive SSH session's
    remotely); stdout and stderr go to ``log_file`` on the host. ``secrets`` (an etcd
    password, the job's ``secret_env``) reach the process on an inherited descriptor, never in
    its environment, where a process of the same account could read them
    (:mod:`primus.process_secrets`).
    """

    host: Host
    argv: Sequence[str]
    log_file: str
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class StopRequest:
    """Stop ``process``'s group: SIGTERM, up to ``grace`` seconds, SIGKILL; then SIGKILL the
    groups of ``then_kill`` (processes the first should have stopped itself)."""

    process: ProcessRef
    grace: float
    then_kill: Sequence[ProcessRef] = ()


class Launcher(abc.ABC):
    """Starts and controls processes on hosts.

    Launched processes run in their own session, so that the launching process (the AM, the
    CLI) can die without taking them along. Every operation on an application's executors
    takes all of one host's at once: one call per host, whatever their number.
    """

    @classmethod
    @abc.abstractmethod
    def from_settings(cls, settings: Settings) -> Launcher:
        """A launcher configured from the site settings."""

    def as_account(self, account: str) -> Launcher:
        """A launcher of this kind that does everything on its hosts as the Unix account
        ``account`` (an application's owner), through Primus's one privileged step (docs/
        operations.md, "Applications run as their owners")."""
        raise LaunchError(f"the {type(self).__name__} cannot act as another account "
                          f"({account!r})")

    @abc.abstractmethod
    async def launch(self, request: LaunchRequest) -> ProcessRef:
        """Start the process detached (a cold Python, as for the AM); return a reference."""

    @abc.abstractmethod
    async def launch_executors(self, host: Host, agent_dir: str,
                               requests: Sequence[LaunchRequest]
                               ) -> list[ProcessRef | LaunchError]:
        """Start a wave of executors on ``host``, one result per request, in order.

        They are forked by the application's host agent (kept in ``agent_dir`` on the host:
        :func:`primus.launcher.layout.agent_dir`), which is started on first use; where it
        cannot run, they start cold. A request the host could not start is a
        :class:`LaunchError` in its place, never a second process.

        Raises:
            HostUnreachableError: the host could not be reached; nothing was started.
        """

    @abc.abstractmethod
    async def signal(self, host: Host, process: ProcessRef, signum: int,
                     group: bool = True) -> bool:
        """Send ``signum`` to the process (its whole process group when ``group``).

        Returns ``False`` when the process no longer exists (or its pid was recycled).
        """

    @abc.abstractmethod
    async def alive(self, host: Host, processes: Sequence[ProcessRef]) -> list[bool]:
        """Whether each process still runs (a zombie counts as gone)."""

    @abc.abstractmethod
    async def copy_files(self, host: Host, files: Sequence[str], directory: str) -> None:
        """Copy local ``files`` (files or directories) into ``directory`` on the host."""

    @abc.abstractmethod
    async def check_data(self, host: Host, streams: Sequence[tuple[int, dict[str, Any]]]
                         ) -> list[dict[str, str]]:
        """Check on the host that the sources of ``streams`` (each ``data[index]`` of a job, as
        its JSON form) match files there (:func:`primus.data.sources.check_sources`); one
        ``{"field", "value", "why"}`` per source refused.

        Raises:
            LaunchError: The host cannot be reached, or cannot check.
        """

    @abc.abstractmethod
    async def probe(self, host: Host, cgroup_parent: str | None = None) -> dict[str, Any]:
        """Describe the host: Primus version, home, cpu, memory, gpus, load, and whether
        trainers' cgroups can be made there (under ``cgroup_parent``: the site's).

        Raises:
            HostUnreachableError: the host cannot be reached; the message says why.
        """

    @abc.abstractmethod
    async def check_health(self, host: Host, request: dict[str, Any]) -> str | None:
        """Why the host is not healthy, in one line (``None``: it is): the checks of
        :func:`primus.launcher.health.check_here`, run there.

        Raises:
            HostUnreachableError: the host cannot be reached; the message says why.
        """

    @abc.abstractmethod
    def read_log(self, host: Host, path: str, follow: Callable[[], bool] | None = None,
                 offset: int = 0) -> AsyncIterator[bytes]:
        """Yield the log file's content in chunks, from byte ``offset`` on.

        With ``follow``, keep yielding new content until ``follow()`` returns ``False`` and no
        more content arrives.
        """

    @abc.abstractmethod
    async def stop(self, host: Host, requests: Sequence[StopRequest],
                   release: str | None = None) -> None:
        """Stop every request's process group on ``host`` together (see :class:`StopRequest`);
        return once all have stopped. ``release``: then, in the same call, as :meth:`release`
        with that agent directory (the application is done with the host)."""

    @abc.abstractmethod
    async def release(self, host: Host, agent_dir: str) -> None:
        """The application is done with ``host``: its host agent (in ``agent_dir``) exits and
        the connection to the host, if one is kept, closes. Processes still running are not
        touched."""

    async def close(self) -> None:  # noqa: B027 - a launcher without connections keeps none
        """Close the connections to hosts this launcher keeps open, if any."""
