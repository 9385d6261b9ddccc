"""The ``primus`` command through an API server: what it needs of the application service,
over the gRPC API, for a person who holds only a token.

:class:`RemoteService` offers the operations of
:class:`~primus.client.service.ApplicationService` that the commands call, with the same
results, so that a command prints the same whichever it was given. Where the direct service
waits on etcd (``kill``, ``suspend``, ``submit --wait``), this one follows the application's
watch stream. The server decides who may do what; the caller's identity is its token.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from primus.api.client import ApiError, Client
from primus.api.client import Changed as ApiChanged
from primus.client.api import (
    AmGoneError,
    AppEndedError,
    AppReport,
    AppSummary,
    HangStacks,
    HostReport,
    LogLine,
    NotStoppedError,
    parse_log_name,
)
from primus.client.commands import CommandService
from primus.client.preflight import kafka_pins
from primus.client.queues import HostUsage, QueuedApp
from primus.client.server_info import NO_SERVER
from primus.client.topology import Changed
from primus.client.uploads import read_job_files
from primus.config.inventory import Host, read_inventory_text
from primus.config.loader import SpecError, load_job_spec, read_config_file
from primus.config.site import Settings
from primus.errors import PrimusError
from primus.state.records import HostCondition, Savepoint
from primus.state.states import AppState

T = TypeVar("T")

SERVER_ENV = "PRIMUS_SERVER"
CA_ENV = "PRIMUS_SERVER_CA"
TOKEN_ENV = "PRIMUS_TOKEN"
ALL_EVENTS = 1000
"""Events ``status`` asks for: the API's most."""
LEADERLESS_GRACE = 75.0
"""Seconds ``submit --wait`` waits for an AM while none leads a running application: the
server's AM keeper starts one within seconds of the dead AM's key expiring, and tries again
30 s later; past two tries, the command says no AM is coming."""
LOOK_EVERY = 5.0
"""Seconds between looks at an application nothing changes in (is an AM still missing?)."""


def default_token_file() -> Path:
    """Where a person keeps the token when neither ``--token-file`` nor ``$PRIMUS_TOKEN``
    gives one: ``~/.primus/token``, readable by its owner alone."""
    return Path.home() / ".primus" / "token"


@dataclass(frozen=True)
class ServerConfig:
    """The API server a command goes through, and how it proves who calls."""

    address: str
    ca_cert: str | None
    token_file: Path | None
    """``None``: the token is ``$PRIMUS_TOKEN``."""


def server_config(settings: Settings, server: str | None, token_file: str | None
                  ) -> ServerConfig | None:
    """The server of ``--server`` (or ``$PRIMUS_SERVER``), else of the site defaults'
    ``server.address``; ``None`` with neither, or with ``--server -``.

    Raises:
        PrimusError: No token is given anywhere, or the token file is open to others.
    """
    address = server if server is not None else settings.server_address
    if not address or address == NO_SERVER:
        return None
    ca_cert = os.environ.get(CA_ENV) or settings.server_ca_cert
    if token_file is not None:
        return ServerConfig(address, ca_cert, Path(token_file))
    if os.environ.get(TOKEN_ENV, "").strip():
        return ServerConfig(address, ca_cert, None)
    path = default_token_file()
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise PrimusError(f"server {address}: no token; give --token-file, set ${TOKEN_ENV}, "
                          f"or put your token in {path} (mode 0600)") from None
    if stat.S_IMODE(mode) & 0o077:
        raise PrimusError(f"token file {path}: mode {stat.S_IMODE(mode):04o} lets others read "
                          f"it; `chmod 600 {path}`")
    return ServerConfig(address, ca_cert, path)


def connect(config: ServerConfig) -> Client:
    """A client of the configured server (TLS, the token as the caller's identity)."""
    return Client(config.address, ca_cert=config.ca_cert, token_file=config.token_file)


def describe_error(config: ServerConfig, exc: ApiError) -> str:
    """One line for a refused call: the server's words, or what to fix when the server
    could not be reached or would not know the caller."""
    if exc.code is grpc.StatusCode.UNAUTHENTICATED:
        return (f"server {config.address} does not know this caller ({exc.details}); check "
                f"your token (--token-file, ${TOKEN_ENV}, {default_token_file()})")
    if exc.code is grpc.StatusCode.UNAVAILABLE and _transport(exc.details):
        return (f"cannot reach the Primus server at {config.address} ({exc.details}); check "
                f"--server/${SERVER_ENV}, and that ${CA_ENV} (or the site defaults' "
                f"server.ca_cert) is the CA that signed its certificate")
    return exc.details


def _transport(details: str) -> bool:
    """Whether an UNAVAILABLE status came from the connection rather than the server."""
    words = details.lower()
    return any(part in words for part in ("failed to connect", "connection refused",
                                          "handshake", "ssl", "certificate", "dns resolution",
                                          "name resolution", "unavailable: ipv"))


class RemoteService(CommandService):
    """The operations the ``primus`` commands call, through ``client``.

    The calls block; each runs in a thread, so that a command's coroutines (a live progress
    display) go on meanwhile.
    """

    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.settings = settings

    async def close(self) -> None:
        self.client.close()

    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(call, *args, **kwargs)

    # ---- Applications ---------------------------------------------------------------------

    async def submit_file(self, job_file: str, inventory: str | None,
                          overrides: tuple[str, ...]) -> tuple[str, list[str]]:
        """Submit the job file: its text, its ``files``' content and its ``secret_env``
        values from this environment go in the request; the server loads, checks and
        records it. Returns the job array's id (empty: no array) and the applications'
        ids.

        Raises:
            SpecError: A file of the job cannot be sent (missing, not regular, too large).
            ApiError: The server refused the job.
        """
        read_config_file(job_file)  # refused here as `primus submit` refuses it directly
        text = Path(job_file).read_bytes().decode("utf-8-sig")
        uploads, secrets = [], {}
        try:  # the job's files and secret names, as this host resolves them
            spec = load_job_spec(job_file, overrides=list(overrides))
        except SpecError:
            spec = None  # the server refuses it in the same words, with its site defaults
        if spec is not None:
            uploads = read_job_files(job_file, spec.files, self.settings.server_max_upload)
            secrets = {name: os.environ[name] for name in spec.secret_env
                       if name in os.environ}
            # Kafka offsets are pinned here, with this user's profiles, which the server
            # never reads: the request carries them as overrides of the sources.
            overrides = (*overrides, *kafka_pins(job_file, spec))
        inventory_text = read_inventory_text(inventory) if inventory else ""
        return await self._run(
            self.client.submit_all, text, source=job_file, overrides=overrides,
            base_directory=os.path.dirname(os.path.abspath(job_file)), files=uploads,
            secret_env=secrets, inventory=inventory_text, inventory_source=inventory or "")

    async def list_apps(self, include_history: bool = False, array: str = ""
                        ) -> list[AppSummary]:
        return await self._run(lambda: list(self.client.summaries(include_history, array)))

    async def get_app(self, app_id: str) -> AppReport:
        return await self._run(self.client.get_report, app_id, ALL_EVENTS)

    async def wait_for_end(self, app_id: str,
                           on_change: Callable[[AppReport], None] | None = None,
                           until_suspended: bool = True, timeout: float | None = None,
                           check_led: bool = True) -> AppReport:
        """Follow the application until it has ended (or, with ``until_suspended``, is
        suspended) and its AM has exited; return the final report. ``on_change`` is called
        with a fresh report after every change.

        Raises:
            AmGoneError: With ``check_led``: no AM has led the running application for
                :data:`LEADERLESS_GRACE` seconds (the server's AM keeper starts one when its
                AM dies; a kill or suspend starts one too, so those do not check).
            NotStoppedError: ``timeout`` seconds passed first.
        """
        leaderless_since: float | None = None
        def settled(report: AppReport) -> bool:
            state = report.view.status.state
            return (state.terminal or until_suspended and state is AppState.SUSPENDED) \
                and report.leader is None

        def look() -> AppReport:
            nonlocal leaderless_since
            report = self.client.get_report(app_id, ALL_EVENTS)
            if on_change is not None:
                on_change(report)
            if not (check_led and report.leaderless and not settled(report)) or \
                    report.view.status.state is AppState.SUBMITTED:
                leaderless_since = None
            elif leaderless_since is None:
                leaderless_since = time.monotonic()
            elif time.monotonic() - leaderless_since > LEADERLESS_GRACE:
                _check_led(report)
            return report

        def follow() -> AppReport:
            deadline = None if timeout is None else time.monotonic() + timeout
            report = look()
            while not settled(report):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise NotStoppedError(f"{app_id} did not settle within {timeout:g}s")
                for _ in self._changes(app_id, report.revision, left):
                    report = look()
                    if settled(report):
                        return report
                report = look()  # the stream ended, or its time ran out
            return report

        return await self._run(follow)

    def _changes(self, app_id: str, revision: int, timeout: float | None) -> Iterator[None]:
        """One item per batch of changes after ``revision``, and one every
        :data:`LOOK_EVERY` seconds without any, until the stream ends (the application ended
        and no AM leads it) or ``timeout`` (then it returns, and the caller reads the
        application again)."""
        try:
            for _ in self.client.watch(app_id, after_revision=revision, timeout=timeout,
                                       progress_interval=LOOK_EVERY):
                yield None  # changes, or a progress message: time to look again
        except ApiError as exc:
            if exc.code is not grpc.StatusCode.DEADLINE_EXCEEDED:
                raise

    async def kill(self, app_id: str, reason: str, timeout: float,
                   outcome: AppState = AppState.KILLED) -> AppReport:
        """Ask the application to stop (``outcome`` KILLED or SUCCEEDED) and wait until it
        has; an application that has ended is returned as it is."""
        report = await self.get_app(app_id)
        state = report.view.status.state
        if state.terminal and report.leader is None and outcome is AppState.KILLED:
            return report
        if outcome is AppState.SUCCEEDED:
            await self._run(self.client.succeed, app_id, reason)
        else:
            await self._run(self.client.kill, app_id, reason)
        return await self._settled(app_id, timeout, "stopped", until_suspended=False)

    async def suspend(self, app_id: str, reason: str, user: str, timeout: float) -> AppReport:
        await self._run(self.client.suspend, app_id, reason)
        return await self._settled(app_id, timeout, "suspended")

    async def _settled(self, app_id: str, timeout: float, what: str,
                       until_suspended: bool = True) -> AppReport:
        try:
            return await self.wait_for_end(app_id, until_suspended=until_suspended,
                                           timeout=timeout, check_led=False)
        except NotStoppedError:
            raise NotStoppedError(f"{app_id} was not {what} within {timeout:g}s; "
                                  f"`primus logs {app_id} am` shows its AM's log") from None

    async def resume(self, app_id: str) -> int:
        return await self._run(self.client.resume, app_id)

    async def recover(self, app_id: str, host_name: str | None = None) -> str:
        return await self._run(self.client.recover, app_id, host_name or "")

    # ---- Topology and data ----------------------------------------------------------------

    async def scale_role(self, app_id: str, role: str, executors: int, user: str) -> Changed:
        return _changed(await self._run(self.client.scale_role, app_id, role, executors))

    async def resize_role(self, app_id: str, role: str, cpu: Any, memory: Any, user: str
                          ) -> Changed:
        return _changed(await self._run(self.client.resize_role, app_id, role, cpu, memory))

    async def add_role(self, app_id: str, role: Any, user: str, source: str = "role"
                       ) -> Changed:
        return _changed(await self._run(self.client.add_role, app_id, role, source))

    async def remove_role(self, app_id: str, role: str, user: str) -> Changed:
        return _changed(await self._run(self.client.remove_role, app_id, role))

    async def add_data_source(self, app_id: str, stream: str, source: Any, user: str
                              ) -> Changed:
        return _changed(await self._run(self.client.add_data_source, app_id, stream, source))

    # ---- Logs, admission, hosts -----------------------------------------------------------

    async def logs(self, app_id: str, executor: str | None, executor_log: bool,
                   follow: bool) -> AsyncIterator[tuple[LogLine, bool]]:
        """Each line of the logs asked for, and whether several logs are printed (each line
        then prefixed with its source)."""
        which = None if executor is None else parse_log_name(executor)
        pages = self.client.log_pages(app_id, which, executor_log, follow)
        while (page := await self._run(next, pages, None)) is not None:
            for text in page.lines:
                yield LogLine(page.source, text), page.sources > 1

    async def create_savepoint(self, app_id: str, user: str, timeout: float = 0.0
                               ) -> Savepoint:
        return await self._run(self.client.create_savepoint, app_id, timeout)

    async def savepoints(self, app_id: str) -> list[Savepoint]:
        return await self._run(self.client.savepoints, app_id)

    async def stacks(self, app_id: str, hang: int = 0) -> HangStacks:
        return await self._run(self.client.stacks, app_id, hang)

    async def app_webhook_key(self, app_id: str) -> bytes:
        return (await self._run(self.client.webhook_key, app_id)).encode()

    async def waiting_apps(self, limit: int = 0) -> tuple[list[QueuedApp], int]:
        return await self._run(self.client.queue_page, limit)

    async def host_usage(self, inventory: str | None) -> list[HostUsage]:
        text = read_inventory_text(inventory) if inventory else ""
        return await self._run(self.client.host_usage, text, inventory or "")

    async def drain_host(self, host: str, reason: str) -> HostCondition:
        return await self._run(self.client.drain_host, host, reason)

    async def resume_host(self, host: str) -> HostCondition | None:
        return await self._run(self.client.resume_host, host)

    async def hosts(self, inventory: str | None) -> list[Host]:
        text = read_inventory_text(inventory) if inventory else ""
        return await self._run(self.client.hosts, text, inventory or "")

    async def probe_hosts(self, inventory: str | None) -> list[HostReport]:
        text = read_inventory_text(inventory) if inventory else ""
        return await self._run(self.client.probe_hosts, text, inventory or "")


def _check_led(report: AppReport) -> None:
    """Raise when no AM leads the running application (the server judged it)."""
    if report.leaderless and report.view.status.state is not AppState.SUBMITTED:
        app_id = report.view.status.app_id
        raise AmGoneError(f"{app_id} is {report.view.status.state.value} but its AM is gone; "
                          f"`primus recover {app_id}` starts one, `primus kill {app_id}` stops "
                          f"what is left")


def _changed(changed: ApiChanged) -> Changed:
    if changed.change is None:
        raise AppEndedError("the server did not say what it recorded; is it older than this "
                            "primus?")
    return Changed(changed.revision, changed.change, changed.role, changed.previous,
                   changed.files)
