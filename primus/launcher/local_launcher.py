"""Launch processes on this machine: the AM forked by this account's forker (else as a
subprocess), executors through the host agent."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from primus import __version__, processes
from primus.config.inventory import Host
from primus.config.site import Settings
from primus.launcher import agent, forker, remote
from primus.launcher.api import Launcher, LaunchError, LaunchRequest, StopRequest
from primus.launcher.remote_calls import spawn_payload, wave_results
from primus.launcher.ssh_launcher import LocalAccountLauncher
from primus.private_files import private_dir
from primus.state.records import ProcessRef

logger = logging.getLogger(__name__)


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

    def as_account(self, account: str) -> Launcher:
        return LocalAccountLauncher(account)

    async def launch(self, request: LaunchRequest) -> ProcessRef:
        """Start ``request``'s process detached: one of Primus's (``python -m primus.am``)
        forked from a warm Python by this account's forker (:mod:`primus.launcher.forker`),
        anything else, or what the forker cannot start, as a subprocess."""
        if forker.module_of(request.argv) is not None:
            try:
                pid = await asyncio.to_thread(forker.spawn, request.argv, request.env,
                                              request.log_file, request.cwd, request.secrets)
            except forker.ForkerError as exc:
                logger.debug("starting %s cold: %s", request.argv[2], exc)
            else:
                return ProcessRef(host=request.host.name, pid=pid,
                                  start_time=processes.start_time_of(pid))
        try:
            child = processes.spawn_detached(request.argv, request.env, request.log_file,
                                             request.cwd, request.secrets)
        except OSError as exc:
            raise LaunchError(f"cannot start {request.argv[0]!r} on {request.host.name}: "
                              f"{exc}") from exc
        self._children[child.pid] = child
        return ProcessRef(host=request.host.name, pid=child.pid,
                          start_time=processes.start_time_of(child.pid))

    async def launch_executors(self, host: Host, agent_dir: str,
                               requests: Sequence[LaunchRequest]
                               ) -> list[ProcessRef | LaunchError]:
        wave = {"version": __version__, "directory": agent_dir,
                "requests": [spawn_payload(r) for r in requests]}
        # The agent's socket and fork are blocking calls: off the event loop.
        answer = await asyncio.to_thread(remote.launch, wave, True)
        return wave_results(host, answer, len(requests))

    def _reap(self) -> None:
        for pid, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[pid]

    async def signal(self, host: Host, process: ProcessRef, signum: int,
                     group: bool = True) -> bool:
        self._reap()
        return processes.send_signal(process.pid, process.start_time, signum, group)

    async def alive(self, host: Host, processes_: Sequence[ProcessRef]) -> list[bool]:
        self._reap()
        return [bool(processes.identity(p.pid, p.start_time)) for p in processes_]

    async def copy_files(self, host: Host, files: Sequence[str], directory: str) -> None:
        private_dir(directory)
        for path in files:
            target = os.path.join(directory, os.path.basename(path.rstrip("/")))
            if os.path.isdir(path):
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                shutil.copy2(path, target)

    async def stop(self, host: Host, requests: Sequence[StopRequest],
                   release: str | None = None) -> None:
        self._reap()
        await asyncio.to_thread(processes.stop_groups, [processes.StopOrder(
            r.process.pid, r.process.start_time, r.grace,
            [(p.pid, p.start_time) for p in r.then_kill]) for r in requests])
        self._reap()
        if release is not None:
            await self.release(host, release)

    async def release(self, host: Host, agent_dir: str) -> None:
        await asyncio.to_thread(agent.tell_exit, agent_dir)

    async def probe(self, host: Host, cgroup_parent: str | None = None) -> dict[str, Any]:
        return remote.describe_host(cgroup_parent)

    async def check_health(self, host: Host, request: dict[str, Any]) -> str | None:
        from primus.launcher.health import check_here  # noqa: PLC0415 - the leader's alone

        return await asyncio.to_thread(check_here, request)

    async def check_data(self, host: Host, streams: Sequence[tuple[int, dict[str, Any]]]
                         ) -> list[dict[str, str]]:
        from primus.data.sources import check_streams_here  # noqa: PLC0415 - loads fsspec

        return [dataclasses.asdict(problem)
                for problem in await asyncio.to_thread(check_streams_here, streams)]

    async def read_log(self, host: Host, path: str, follow: Callable[[], bool] | None = None,
                       offset: int = 0) -> AsyncIterator[bytes]:
        if follow is None and not os.path.exists(path):
            raise LaunchError(f"cannot read log {path} on {host.name}: No such file or directory")

        def more(timeout: float) -> bool:
            if follow is None:
                return False
            time.sleep(timeout)  # in the reading thread: a file growing has no event to await
            return follow()

        chunks = processes.follow_file(path, more, offset=offset)
        try:
            while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
                yield chunk
        except OSError as exc:
            raise LaunchError(f"cannot read log {path} on {host.name}: {exc.strerror}") from exc
        finally:
            chunks.close()
