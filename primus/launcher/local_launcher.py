"""Launch executors as local subprocesses, each in its own session."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from primus.config.inventory import Host
from primus.config.site import Settings
from primus.launcher import processes
from primus.launcher.api import Launcher, LaunchError, LaunchRequest
from primus.private_files import private_dir
from primus.state.records import ProcessRef

logger = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class LocalLauncher(Launcher):
    """Runs processes on this machine.

    Children are started in their own session so they survive the launching process and can be
    stopped as a process group. Children of this launcher are reaped as they exit.
    """

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalLauncher:
        return cls()

    async def launch(self, request: LaunchRequest) -> ProcessRef:
        try:
            child = processes.spawn_detached(request.argv, request.env, request.log_file,
                                             request.cwd)
        except OSError as exc:
            raise LaunchError(f"cannot start {request.argv[0]!r} on {request.host.name}: "
                              f"{exc}") from exc
        self._children[child.pid] = child
        return ProcessRef(host=request.host.name, pid=child.pid,
                          start_time=processes.start_time_of(child.pid))

    def _reap(self, process: ProcessRef) -> None:
        child = self._children.get(process.pid)
        if child is not None and child.poll() is not None:
            del self._children[process.pid]

    async def signal(self, host: Host, process: ProcessRef, signum: int,
                     group: bool = True) -> bool:
        self._reap(process)
        return processes.send_signal(process.pid, process.start_time, signum, group)

    async def is_alive(self, host: Host, process: ProcessRef) -> bool:
        self._reap(process)
        return bool(processes.identity(process.pid, process.start_time))

    async def copy_files(self, host: Host, files: Sequence[str], directory: str) -> None:
        private_dir(directory)
        for path in files:
            target = os.path.join(directory, os.path.basename(path.rstrip("/")))
            if os.path.isdir(path):
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                shutil.copy2(path, target)

    async def stop(self, host: Host, process: ProcessRef, grace: float,
                   then_kill: Sequence[ProcessRef] = ()) -> None:
        self._reap(process)
        await asyncio.to_thread(processes.stop_group, process.pid, process.start_time, grace,
                                [(p.pid, p.start_time) for p in then_kill])
        self._reap(process)

    async def probe(self, host: Host) -> dict[str, Any]:
        return processes.describe_host()

    async def read_log(self, host: Host, path: str, follow: Callable[[], bool] | None = None
                       ) -> AsyncIterator[bytes]:
        # The trainer may not have started yet; a file appearing has no event to await.
        while follow is not None and follow() and not os.path.exists(path):  # noqa: ASYNC110
            await asyncio.sleep(0.2)
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
