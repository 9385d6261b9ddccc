"""Launch and control processes on inventory hosts with the OpenSSH client.

Every remote operation is ``ssh HOST -- <python> -m primus.launcher.remote COMMAND ARGS``: an
argument list, quoted once with :func:`shlex.join`. Anything that may hold a secret (the
environment of a process) travels as JSON on ssh's stdin, never on a command line. The launched
process is detached on the host (its own session, output in a log file), so the SSH connection
ends as soon as it has started; liveness comes from etcd, not from SSH.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import shlex
import tarfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from primus.config.inventory import Host
from primus.config.site import Settings
from primus.config.ssh import SshOptions
from primus.launcher.api import HostUnreachableError, Launcher, LaunchError, LaunchRequest
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


@dataclass(frozen=True)
class SshResult:
    """What one ssh invocation returned."""

    returncode: int
    stdout: bytes
    stderr: str


def _failure(host: Host, stderr: str) -> HostUnreachableError:
    """Turn ssh's own failure (exit 255) into an error naming the host and the cause."""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else "ssh failed"
    cause = next((text for marker, text in _CAUSES if marker in stderr), last)
    error = TransientSshError if any(m in stderr for m in _TRANSIENT) else HostUnreachableError
    return error(f"{host.name} ({host.address}): {cause}" +
                 (f" — {last}" if cause != last else ""))


class SshLauncher(Launcher):
    """Runs processes on inventory hosts over SSH, with bounded parallelism and retries."""

    def __init__(self, options: SshOptions | None = None) -> None:
        self.options = options or SshOptions()
        self._slots = asyncio.Semaphore(self.options.max_parallel)

    @classmethod
    def from_settings(cls, settings: Settings) -> SshLauncher:
        return cls(settings.ssh)

    async def run(self, host: Host, remote_argv: Sequence[str], stdin: bytes | None = None,
                  timeout: float | None = None) -> SshResult:
        """Run ``remote_argv`` on ``host``; retry transient connection failures with backoff.

        Raises:
            HostUnreachableError: ssh itself failed (exit 255); names the host and the cause.
        """
        argv = self.options.argv(host, shlex.join(remote_argv))
        limit = timeout or self.options.connect_timeout + 30
        async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(TransientSshError),
                stop=stop_after_attempt(self.options.retries),
                wait=wait_exponential_jitter(multiplier=0.2, max=3.0), reraise=True):
            with attempt:
                async with self._slots:
                    result = await self._exec(host, argv, stdin, limit)
                if result.returncode == 255:
                    raise _failure(host, result.stderr)
        return result

    @staticmethod
    async def _exec(host: Host, argv: list[str], stdin: bytes | None, limit: float
                    ) -> SshResult:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None
            else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            async with asyncio.timeout(limit):
                out, err = await process.communicate(stdin)
        except TimeoutError as exc:
            process.kill()
            await process.wait()
            raise HostUnreachableError(f"{host.name} ({host.address}): timeout after "
                                       f"{limit:g}s") from exc
        return SshResult(process.returncode or 0, out, err.decode(errors="replace"))

    async def _remote(self, host: Host, args: Sequence[str], stdin: bytes | None = None
                      ) -> Any:
        """Run a ``primus.launcher.remote`` command on the host and parse its JSON answer."""
        result = await self.run(host, [host.python, "-m", "primus.launcher.remote", *args],
                                stdin=stdin)
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
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
        payload = json.dumps({"argv": list(request.argv), "env": dict(request.env),
                              "cwd": request.cwd, "log_file": request.log_file}).encode()
        answer = await self._remote(request.host, ["spawn"], stdin=payload)
        return ProcessRef(host=request.host.name, pid=int(answer["pid"]),
                          start_time=float(answer["start_time"]))

    async def signal(self, host: Host, process: ProcessRef, signum: int,
                     group: bool = True) -> bool:
        answer = await self._remote(host, ["signal", str(process.pid), repr(process.start_time),
                                           str(int(signum)), "1" if group else "0"])
        return bool(answer["delivered"])

    async def is_alive(self, host: Host, process: ProcessRef) -> bool:
        answer = await self._remote(host, ["alive", str(process.pid), repr(process.start_time)])
        return bool(answer["alive"])

    async def stop(self, host: Host, process: ProcessRef, grace: float,
                   then_kill: Sequence[ProcessRef] = ()) -> None:
        # One connection does the whole TERM, wait, KILL sequence on the host.
        await self._remote(host, ["stop", repr(grace), *(f"{p.pid}:{p.start_time!r}"
                                                         for p in (process, *then_kill))])

    async def probe(self, host: Host) -> dict[str, Any]:
        return await self._remote(host, ["probe"])

    async def copy_files(self, host: Host, files: Sequence[str], directory: str) -> None:
        """Copy local ``files`` (paths) into ``directory`` on the host, keeping base names."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path in files:
                tar.add(path, arcname=os.path.basename(path.rstrip("/")))
        await self._remote(host, ["unpack", directory], stdin=buffer.getvalue())

    async def read_log(self, host: Host, path: str, follow: Callable[[], bool] | None = None
                       ) -> AsyncIterator[bytes]:
        if follow is None:
            result = await self.run(host, ["cat", "--", path])
            if result.returncode != 0:
                raise LaunchError(f"cannot read log {path} on {host.name}: "
                                  f"{result.stderr.strip()}")
            yield result.stdout
            return
        argv = self.options.argv(host, shlex.join(
            [host.python, "-m", "primus.launcher.remote", "follow", path]))
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        assert process.stdout is not None and process.stdin is not None  # pipes, just above
        try:
            while True:
                try:
                    async with asyncio.timeout(0.5):
                        chunk = await process.stdout.read(64 * 1024)
                except TimeoutError:
                    if not follow():
                        return
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
