"""Launch executors as local subprocesses, each in its own session."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from collections.abc import AsyncIterator, Callable

import psutil

from primus.config.inventory import Host
from primus.launcher.api import Launcher, LaunchError, LaunchRequest
from primus.state.records import ProcessRef

logger = logging.getLogger(__name__)

_CHUNK = 64 * 1024


def process_ref(host: str, pid: int) -> ProcessRef:
    """A reference to a local process; a process that already exited gets start time 0."""
    try:
        start_time = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        start_time = 0.0
    return ProcessRef(host=host, pid=pid, start_time=start_time)


class LocalLauncher(Launcher):
    """Runs processes on this machine.

    Children are started with ``start_new_session`` so they survive the launching process and
    can be stopped as a process group. Children of this launcher are reaped as they exit.
    """

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    async def launch(self, request: LaunchRequest) -> ProcessRef:
        os.makedirs(os.path.dirname(request.log_file) or ".", exist_ok=True)
        try:
            with open(request.log_file, "ab") as log:
                child = subprocess.Popen(
                    list(request.argv), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, cwd=request.cwd, start_new_session=True,
                    env={**os.environ, **request.env})
        except OSError as exc:
            raise LaunchError(f"cannot start {request.argv[0]!r} on {request.host.name}: "
                              f"{exc}") from exc
        self._children[child.pid] = child
        return process_ref(request.host.name, child.pid)

    def _identity_matches(self, process: ProcessRef) -> bool | None:
        """True if the pid is still this process, False if recycled, None if gone."""
        child = self._children.get(process.pid)
        if child is not None and child.poll() is not None:
            del self._children[process.pid]
            return None
        try:
            found = psutil.Process(process.pid)
            if found.status() == psutil.STATUS_ZOMBIE:
                return None
            return abs(found.create_time() - process.start_time) < 0.05
        except psutil.NoSuchProcess:
            return None

    async def signal(self, process: ProcessRef, signum: int, group: bool = True) -> bool:
        identity = self._identity_matches(process)
        if identity is False:
            return False
        try:
            if group:
                # The group can outlive its leader, so signal it even when the leader is gone.
                os.killpg(process.pid, signum)
            elif identity:
                os.kill(process.pid, signum)
            else:
                return False
            return True
        except (ProcessLookupError, PermissionError):
            return False

    async def is_alive(self, process: ProcessRef) -> bool:
        return bool(self._identity_matches(process))

    async def read_log(self, host: Host, path: str, follow: Callable[[], bool] | None = None
                       ) -> AsyncIterator[bytes]:
        try:
            log = open(path, "rb")  # noqa: SIM115 - held open across yields
        except OSError as exc:
            raise LaunchError(f"cannot read log {path} on {host.name}: {exc.strerror}") from exc
        with log:
            while True:
                chunk = log.read(_CHUNK)
                if chunk:
                    yield chunk
                    continue
                if follow is None or not follow():
                    # One last read: content written between the read and the check.
                    rest = log.read()
                    if rest:
                        yield rest
                    return
                await asyncio.sleep(0.2)
