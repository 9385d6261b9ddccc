"""Launch and control processes on inventory hosts with the OpenSSH client.

Every remote operation is ``ssh HOST -- <python> -m primus.launcher.remote COMMAND ARGS``: an
argument list, quoted once with :func:`shlex.join`. Anything that may hold a secret (the
environment of a process) travels as JSON on ssh's stdin, never on a command line. The launched
process is detached on the host (its own session, output in a log file), so the SSH command
ends as soon as it has started; liveness comes from etcd, not from SSH.

Calls to one host share one SSH connection (OpenSSH ``ControlMaster``), its socket in a
directory private to this account, unless the user's own ssh configuration already sets
multiplexing up for the host (then theirs is used) or the host refuses a second session on a
connection (ssh then connects on its own, and so does every later call to that host). A stale
socket left by a master that died is replaced by ssh itself. :meth:`SshLauncher.release` and
:meth:`SshLauncher.close` let the connection go.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import os
import shlex
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from primus import __version__
from primus.config.inventory import Host
from primus.config.site import Settings
from primus.config.ssh import SshOptions
from primus.launcher.api import (
    HostUnreachableError,
    Launcher,
    LaunchError,
    LaunchRequest,
    StopRequest,
)
from primus.launcher.remote_calls import spawn_payload, wave_results
from primus.private_files import private_dir
from primus.state.records import ProcessRef

logger = logging.getLogger(__name__)


class TransientSshError(HostUnreachableError):
    """A failure worth retrying: the connection was refused or reset (sshd's MaxStartups)."""


# What ssh prints on stderr, and what it means to a user. Checked in order.
_CAUSES: tuple[tuple[str, str], ...] = (
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", "host key mismatch (the host key changed)"),
    ("Host key verification failed", "host key not trusted (unknown or changed host key)"),
    ("Permission denied", "authentication refused"),
    ("Connection timed out", "timeout"),
    ("Operation timed out", "timeout"),
    ("No route to host", "no route to host"),
    ("Could not resolve hostname", "unknown host name"),
    ("Name or service not known", "unknown host name"),
    ("Connection refused", "connection refused"),
)
_TRANSIENT = ("Connection reset", "kex_exchange_identification", "Connection closed by remote",
              "Connection refused")
# What ssh prints when the host refuses another session on the shared connection (sshd's
# MaxSessions); it then runs the command on a connection of its own.
_MULTIPLEX_REFUSED = ("mux_client_request_session: session request failed",
                      "Session open refused")
_SOCKET_PATH_MAX = 107 - len(".0123456789abcdef") - 41  # sun_path, ssh's temporary suffix, %C


@dataclass(frozen=True)
class SshResult:
    """What one ssh invocation returned."""

    returncode: int
    stdout: bytes
    stderr: str


Runner = Callable[[list[str], bytes | None, float], Awaitable[SshResult]]
"""Runs one ssh command line with the given stdin and time limit (seconds)."""


async def run_process(argv: list[str], stdin: bytes | None, limit: float) -> SshResult:
    """The runner Primus uses: the command as a subprocess, killed after ``limit`` seconds."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None
        else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(limit):
            out, err = await process.communicate(stdin)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return SshResult(process.returncode or 0, out, err.decode(errors="replace"))


def control_directory(home: str) -> str:
    """Where the shared connections' sockets go: ``$PRIMUS_HOME/ssh``, or, when that path is
    too long for a socket address, ``/tmp/primus-ssh-UID-HASH`` (made 0700 and checked to be
    this account's own directory, never a link someone else planted)."""
    preferred = os.path.join(home, "ssh")
    if len(preferred) <= _SOCKET_PATH_MAX:
        private_dir(preferred)
        return preferred
    short = f"/tmp/primus-ssh-{os.getuid()}-{hashlib.sha1(home.encode()).hexdigest()[:8]}"
    try:
        os.mkdir(short, 0o700)
    except FileExistsError:
        pass
    status = os.lstat(short)
    if not os.path.isdir(short) or os.path.islink(short) or status.st_uid != os.getuid() or \
            status.st_mode & 0o077:
        raise LaunchError(f"{short} is not a private directory of this account; remove it or "
                          "set ssh.multiplex: false")
    return short


def _failure(host: Host, stderr: str) -> HostUnreachableError:
    """Turn ssh's own failure (exit 255) into an error naming the host and the cause."""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else "ssh failed"
    cause = next((text for marker, text in _CAUSES if marker in stderr), last)
    error = TransientSshError if any(m in stderr for m in _TRANSIENT) else HostUnreachableError
    return error(f"{host.name} ({host.address}): {cause}" +
                 (f" — {last}" if cause != last else ""))


def owner_argv(account: str, python: str, args: Sequence[str]) -> list[str]:
    """``primus.launcher.remote`` with ``args``, run as ``account`` through the one privileged
    step Primus takes: ``sudo -n -u ACCOUNT -- PYTHON -I -m primus.launcher.remote ...``, which
    the playbook's sudo rule allows Primus's account for the members of one group, and nothing
    else. ``-n``: fail rather than ask for a password; ``-I``: the interpreter reads no
    environment variable and imports nothing from the working directory."""
    return ["sudo", "-n", "-u", account, "--", python, "-I", "-m", "primus.launcher.remote",
            *args]


class SshLauncher(Launcher):
    """Runs processes on inventory hosts over SSH, with bounded parallelism and retries.

    ``runner`` runs each ssh command line (:func:`run_process` unless a test passes another);
    ``control_dir`` is where shared connections' sockets go (none: each call connects).
    """

    def __init__(self, options: SshOptions | None = None, runner: Runner = run_process,
                 control_dir: str | None = None, account: str | None = None) -> None:
        self.options = options or SshOptions()
        self.account = account
        self._runner = runner
        self._control_dir = control_dir if self.options.multiplex else None
        self._slots = asyncio.Semaphore(self.options.max_parallel)
        self._control: dict[str, str | None] = {}  # host name → the control path it uses
        self._hosts: dict[str, Host] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> SshLauncher:
        return cls(settings.ssh, control_dir=control_directory(str(settings.home))
                   if settings.ssh.multiplex else None)

    def as_account(self, account: str) -> SshLauncher:
        """This launcher acting as ``account`` on the hosts (through :func:`owner_argv`)."""
        return type(self)(self.options, self._runner, self._control_dir, account)

    def _remote_argv(self, host: Host, args: Sequence[str]) -> list[str]:
        """``primus.launcher.remote`` with ``args`` as the host runs it: as this launcher's
        account when it has one."""
        if self.account is None:
            return [host.python, "-m", "primus.launcher.remote", *args]
        return owner_argv(self.account, host.python, args)

    async def _command(self, host: Host, remote_argv: Sequence[str]) -> list[str]:
        """The local command line that runs ``remote_argv`` on ``host``."""
        return self.options.argv(host, shlex.join(remote_argv), await self._control_path(host))

    async def _control_path(self, host: Host) -> str | None:
        """The shared connection's socket for ``host``, or ``None`` for a connection per call:
        multiplexing is off, the host refused it, or the user's ssh configuration already sets
        it up for this host (``ssh -G`` shows a ControlMaster or ControlPath of theirs)."""
        if self._control_dir is None:
            return None
        if host.name not in self._control:
            result = await self._runner(["ssh", "-G", *self.options.argv(host, None)[1:]],
                                        None, 10.0)
            settings = dict(line.partition(" ")[::2] for line in result.stdout.decode(
                errors="replace").splitlines())
            theirs = settings.get("controlmaster", "false") not in ("false", "no") or \
                settings.get("controlpath", "none") != "none"
            self._control[host.name] = None if theirs else os.path.join(self._control_dir, "%C")
            self._hosts[host.name] = host
        return self._control[host.name]

    async def _close_connection(self, host: Host) -> None:
        """Let the shared connection to ``host`` go: it takes no new session and ends once
        those it carries (another process's, perhaps) have ended."""
        control = self._control.pop(host.name, None)
        if control is not None:
            argv = self.options.argv(host, None, control)
            await self._runner([argv[0], "-O", "stop", *argv[1:]], None, 10.0)

    async def run(self, host: Host, remote_argv: Sequence[str], stdin: bytes | None = None,
                  timeout: float | None = None) -> SshResult:
        """Run ``remote_argv`` on ``host``; retry transient connection failures with backoff.

        Raises:
            HostUnreachableError: ssh itself failed (exit 255); names the host and the cause.
        """
        limit = timeout or self.options.connect_timeout + 30
        async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(TransientSshError),
                stop=stop_after_attempt(self.options.retries),
                wait=wait_exponential_jitter(multiplier=0.2, max=3.0), reraise=True):
            with attempt:
                control = await self._control_path(host)
                argv = await self._command(host, remote_argv)
                async with self._slots:
                    result = await self._exec(host, argv, stdin, limit)
                if control is not None and self._control.get(host.name) and \
                        any(marker in result.stderr for marker in _MULTIPLEX_REFUSED):
                    # ssh ran the command on a connection of its own (ControlMaster=auto does);
                    # asking the shared one first is then only a wasted round trip.
                    logger.warning("%s refuses a second session on a connection (sshd's "
                                   "MaxSessions); connecting per call", host.name)
                    self._control[host.name] = None
                if result.returncode == 255:
                    raise _failure(host, result.stderr)
        return result

    async def _exec(self, host: Host, argv: list[str], stdin: bytes | None, limit: float
                    ) -> SshResult:
        try:
            return await self._runner(argv, stdin, limit)
        except TimeoutError as exc:
            raise HostUnreachableError(f"{host.name} ({host.address}): timeout after "
                                       f"{limit:g}s") from exc

    async def _remote(self, host: Host, args: Sequence[str], stdin: bytes | None = None
                      ) -> Any:
        """Run a ``primus.launcher.remote`` command on the host and parse its JSON answer."""
        result = await self.run(host, self._remote_argv(host, args), stdin=stdin)
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
            said = [line for line in result.stderr.splitlines() if line.startswith("sudo:")]
            if self.account is not None and said:
                raise LaunchError(f"{host.name}: cannot act as account {self.account!r}: "
                                  f"{said[0]} (see docs/operations.md, 'Applications run as "
                                  f"their owners')")
            if result.returncode == 127 or "No module named" in result.stderr:
                raise LaunchError(f"{host.name}: Primus is not installed for {host.python} "
                                  f"({detail or 'command not found'})")
            raise LaunchError(f"{host.name}: `{args[0]}` failed with exit "
                              f"{result.returncode}: {detail}")
        try:
            answer = json.loads(result.stdout)
        except ValueError as exc:
            raise LaunchError(f"{host.name}: unreadable answer to `{args[0]}`: "
                              f"{result.stdout[:200]!r}") from exc
        return answer

    async def launch(self, request: LaunchRequest) -> ProcessRef:
        payload = json.dumps(spawn_payload(request)).encode()
        answer = await self._remote(request.host, ["spawn"], stdin=payload)
        return ProcessRef(host=request.host.name, pid=int(answer["pid"]),
                          start_time=float(answer["start_time"]))

    async def launch_executors(self, host: Host, agent_dir: str,
                               requests: Sequence[LaunchRequest]
                               ) -> list[ProcessRef | LaunchError]:
        wave = {"version": __version__, "directory": agent_dir,
                "requests": [spawn_payload(r) for r in requests]}
        answer = await self._remote(host, ["launch"], stdin=json.dumps(wave).encode())
        return wave_results(host, answer, len(requests))

    async def signal(self, host: Host, process: ProcessRef, signum: int,
                     group: bool = True) -> bool:
        answer = await self._remote(host, ["signal", str(process.pid), repr(process.start_time),
                                           str(int(signum)), "1" if group else "0"])
        return bool(answer["delivered"])

    async def alive(self, host: Host, processes: Sequence[ProcessRef]) -> list[bool]:
        answer = await self._remote(host, ["alive"], stdin=json.dumps(
            [[p.pid, p.start_time] for p in processes]).encode())
        return [bool(alive) for alive in answer["alive"]]

    async def stop(self, host: Host, requests: Sequence[StopRequest],
                   release: str | None = None) -> None:
        # One connection does the whole TERM, wait, KILL sequence for all of them on the host
        # (and, told to, lets the agent go after).
        try:
            await self._remote(host, ["stop", *([release] if release is not None else [])],
                               stdin=json.dumps([
                                   {"pid": r.process.pid, "start_time": r.process.start_time,
                                    "grace": r.grace,
                                    "then_kill": [[p.pid, p.start_time] for p in r.then_kill]}
                                   for r in requests]).encode())
        finally:
            if release is not None:
                await self._close_connection(host)

    async def release(self, host: Host, agent_dir: str) -> None:
        try:
            await self._remote(host, ["release", agent_dir])
        finally:
            await self._close_connection(host)

    async def close(self) -> None:
        await asyncio.gather(*(self._close_connection(self._hosts[name])
                               for name in list(self._control)))

    async def probe(self, host: Host, cgroup_parent: str | None = None) -> dict[str, Any]:
        return await self._remote(host, ["probe", *([cgroup_parent] if cgroup_parent else [])])

    async def check_health(self, host: Host, request: dict[str, Any]) -> str | None:
        answer = await self._remote(host, ["health"], stdin=json.dumps(request).encode())
        return answer.get("failure")

    async def check_data(self, host: Host, streams: Sequence[tuple[int, dict[str, Any]]]
                         ) -> list[dict[str, str]]:
        answer = await self._remote(host, ["check-data"],
                                    stdin=json.dumps([list(s) for s in streams]).encode())
        return list(answer["problems"])

    async def copy_files(self, host: Host, files: Sequence[str], directory: str) -> None:
        """Copy local ``files`` (paths) into ``directory`` on the host, keeping base names."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path in files:
                tar.add(path, arcname=os.path.basename(path.rstrip("/")))
        await self._remote(host, ["unpack", directory], stdin=buffer.getvalue())

    async def read_log(self, host: Host, path: str, follow: Callable[[], bool] | None = None,
                       offset: int = 0) -> AsyncIterator[bytes]:
        if follow is None:
            result = await self.run(host, self._remote_argv(host, ["read", path, str(offset)]))
            if result.returncode != 0:
                raise LaunchError(f"cannot read log {path} on {host.name}: "
                                  f"{result.stderr.strip()}")
            yield result.stdout
            return
        argv = await self._command(host, self._remote_argv(host, ["follow", path, str(offset)]))
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        assert process.stdout is not None and process.stdin is not None  # pipes, just above
        following = True
        try:
            while True:
                try:
                    async with asyncio.timeout(0.5 if following else 10.0):
                        chunk = await process.stdout.read(64 * 1024)
                except TimeoutError:
                    if not following:
                        return  # the host no longer answers
                    if not follow():
                        # What was appended before may still be on its way: the remote reader
                        # sends it in one last read once its stdin closes, then ends.
                        following = False
                        process.stdin.close()
                    continue
                if not chunk:
                    return
                yield chunk
        finally:
            # Closing stdin ends the remote reader (it has no terminal to hang up).
            process.stdin.close()
            try:
                async with asyncio.timeout(5):
                    await process.wait()
            except TimeoutError:
                process.terminate()
                await process.wait()


class LocalAccountLauncher(SshLauncher):
    """Runs processes on this machine as another account: every operation is the
    ``primus.launcher.remote`` command the SSH launcher would run on a host, entered through
    the same privileged step (:func:`owner_argv`), without ssh."""

    def __init__(self, account: str, options: SshOptions | None = None,
                 runner: Runner = run_process) -> None:
        super().__init__(options, runner, None, account)

    def as_account(self, account: str) -> LocalAccountLauncher:
        return LocalAccountLauncher(account, self.options, self._runner)

    async def _command(self, host: Host, remote_argv: Sequence[str]) -> list[str]:
        return list(remote_argv)

    async def _control_path(self, host: Host) -> str | None:
        return None
