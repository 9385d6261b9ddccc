"""The executor: registers under a lease, waits for the gang, runs the trainer, reports its exit.

One executor process supervises one trainer attempt. Its ``live`` key is attached to its lease,
so its death is detected by etcd; if it cannot renew the lease in time it stops its trainer and
exits (self-fencing), so a cut-off host never keeps a duplicate trainer running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass

import psutil

from primus.config.spec import JobSpec
from primus.executor.cluster import trainer_env
from primus.launcher.processes import start_time_of
from primus.state.keys import AppKeys
from primus.state.records import (
    ClusterSpec,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    ProcessRef,
    decode,
    encode,
)
from primus.state.states import ExecutorState
from primus.store.api import (
    Coordinator,
    Delete,
    EventType,
    LeaseKeeper,
    Put,
    Resync,
    Snapshot,
    key_created_at,
    key_missing,
)

logger = logging.getLogger(__name__)

EXECUTOR_ERROR_EXIT = 255
"""Exit code recorded when the executor itself failed (not its trainer)."""


def reserve_ports(count: int) -> list[socket.socket]:
    """Bind ``count`` TCP sockets on free ports; they are held until the trainer starts."""
    sockets = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", 0))
        sockets.append(sock)
    return sockets


def network_env(address: str) -> dict[str, str]:
    """Point gloo and NCCL at the interface that carries the executor's registered address.

    Left alone, they pick the address the host name resolves to, which is often loopback on
    bare-metal hosts; peers then cannot connect. The job's env can still override these.
    """
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == address for a in addresses):
            return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}
    return {}


def describe_exit(returncode: int) -> tuple[int, str]:
    """Shell-style exit code (128+N for signal N) and a diagnosis for a trainer's exit."""
    if returncode >= 0:
        return returncode, "" if returncode == 0 else f"trainer exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return 128 - returncode, f"trainer killed by {name}"


@dataclass(frozen=True)
class ExecutorIdentity:
    """Which executor attempt this process is, and where it runs."""

    role: str
    index: int
    attempt: int
    host: str
    address: str
    log_file: str
    app_dir: str

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


class Executor:
    """Runs one executor attempt against the store; see the module docstring."""

    def __init__(self, store: Coordinator, keys: AppKeys, me: ExecutorIdentity) -> None:
        self.store = store
        self.keys = keys
        self.me = me
        self.stop_requested = asyncio.Event()
        self.stop_reason = ""
        self._trainer_pid: int | None = None
        self._fenced = asyncio.Event()  # replaced by the lease keeper's "lost" event
        self._prefix = f"[{keys.app_id}/{me.name}]"

    def request_stop(self, reason: str) -> None:
        """Ask the executor to stop its trainer and exit (signal handlers call this)."""
        if not self.stop_requested.is_set():
            self.stop_reason = reason
            self.stop_requested.set()

    async def run(self) -> int:
        """Run the attempt to its end and return the trainer's exit code (shell convention)."""
        spec_kv = await self.store.get(self.keys.spec)
        plan_kv = await self.store.get(self.keys.executor(self.me.role, self.me.index, "plan"))
        if spec_kv is None or plan_kv is None:
            logger.error("%s no spec or plan in etcd; nothing to run", self._prefix)
            return 2
        spec = JobSpec.model_validate_json(spec_kv.value)
        plan = decode(ExecutorPlan, plan_kv.value)
        if plan.attempt != self.me.attempt:
            logger.error("%s attempt %s is stale (plan is at %s); exiting", self._prefix,
                         self.me.attempt, plan.attempt)
            return 2
        role = spec.role(self.me.role)
        lease = await self.store.grant_lease(spec.policy.heartbeat_ttl)
        keeper = LeaseKeeper(self.store, lease, on_lost=[
            lambda why: self.request_stop(f"lease lost ({why}); trainer stopped (self-fenced)")])
        self._fenced = keeper.lost
        keeper.start()
        live_key = self.keys.executor(self.me.role, self.me.index, "live")
        try:
            return await self._run_leased(spec, role.ports, role.command, keeper)
        except Exception as exc:
            # An executor bug must not leave a trainer behind nor go unreported.
            logger.exception("%s executor error", self._prefix)
            if self._trainer_pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._trainer_pid, signal.SIGKILL)
            live = None if keeper.lost.is_set() else await self.store.get(live_key)
            if live is not None and live.lease == keeper.lease.id:
                await self._report(key_created_at(live_key, live.create_revision), live_key,
                                   EXECUTOR_ERROR_EXIT, f"executor error: {exc!r}")
            return EXECUTOR_ERROR_EXIT
        finally:
            await keeper.stop(revoke=True)

    async def _run_leased(self, spec: JobSpec, port_count: int, command: str | list[str],
                          keeper: LeaseKeeper) -> int:
        live_key = self.keys.executor(self.me.role, self.me.index, "live")
        sockets = reserve_ports(port_count)
        live = ExecutorLive(attempt=self.me.attempt, host=self.me.host, address=self.me.address,
                            pid=os.getpid(), ports=[s.getsockname()[1] for s in sockets],
                            state=ExecutorState.REGISTERED, registered_time=time.time())
        registered = await self.store.txn([key_missing(live_key)],
                                          [Put(live_key, encode(live), keeper.lease.id)])
        if not registered.succeeded:
            logger.error("%s another executor holds %s; exiting", self._prefix, live_key)
            return 2
        guard = key_created_at(live_key, registered.revision)
        logger.info("%s registered on %s with ports %s", self._prefix, self.me.address,
                    live.ports)
        cluster = await self._wait_for_cluster()
        for sock in sockets:
            sock.close()
        if cluster is None:
            return await self._report(guard, live_key, 143, self.stop_reason)

        # The trainer never sees the executor's etcd password.
        inherited = {k: v for k, v in os.environ.items() if k != "PRIMUS_ETCD_PASSWORD"}
        env = {**inherited, **network_env(self.me.address), **spec.env,
               **spec.role(self.me.role).env,
               **trainer_env(self.keys.app_id, self.me.role, self.me.index, self.me.attempt,
                             cluster)}
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        os.makedirs(os.path.dirname(self.me.log_file) or ".", exist_ok=True)
        # Without a workdir, trainers run where the job's files were copied on this host.
        workdir = spec.workdir or os.path.join(self.me.app_dir, "work")
        os.makedirs(workdir, exist_ok=True)
        with open(self.me.log_file, "ab") as log:
            try:
                trainer = await asyncio.create_subprocess_exec(
                    *argv, cwd=workdir, env=env, stdin=asyncio.subprocess.DEVNULL,
                    stdout=log, stderr=asyncio.subprocess.STDOUT, process_group=0)
            except OSError as exc:
                return await self._report(guard, live_key, 127,
                                          f"cannot start trainer {argv[0]!r}: {exc.strerror}")
        started = time.time()
        self._trainer_pid = trainer.pid
        trainer_ref = ProcessRef(host=self.me.host, pid=trainer.pid,
                                 start_time=start_time_of(trainer.pid))
        running = live.model_copy(update={"state": ExecutorState.RUNNING, "trainer": trainer_ref,
                                          "trainer_start_time": started})
        await self.store.txn([guard], [Put(live_key, encode(running), keeper.lease.id)])
        logger.info("%s trainer started, pid %s", self._prefix, trainer.pid)

        exit_task = asyncio.ensure_future(trainer.wait())
        stop_task = asyncio.ensure_future(self.stop_requested.wait())
        await asyncio.wait({exit_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        if not exit_task.done():
            await self._stop_trainer(trainer.pid, exit_task, spec.policy.stop_grace)
        stop_task.cancel()
        exit_code, diagnosis = describe_exit(exit_task.result())
        if self.stop_requested.is_set():
            diagnosis = self.stop_reason
        return await self._report(guard, live_key, exit_code, diagnosis)

    async def _wait_for_cluster(self) -> ClusterSpec | None:
        """Wait until the AM writes the cluster spec of this attempt, or a stop is requested."""
        def written(snapshot: Snapshot) -> ClusterSpec | None:
            found = [kv for kv in snapshot.kvs if kv.key == self.keys.cluster]
            return decode(ClusterSpec, found[0].value) if found else None

        async def watch() -> ClusterSpec:
            # Read and watch from one revision, so a write in between cannot be missed.
            snapshot = await self.store.get_prefix(self.keys.cluster)
            cluster = written(snapshot)
            events = self.store.watch_prefix(self.keys.cluster, snapshot.revision + 1)
            while cluster is None:
                event = await anext(events)
                if isinstance(event, Resync):
                    cluster = written(event.snapshot)
                elif event.key == self.keys.cluster and event.type is EventType.PUT:
                    cluster = decode(ClusterSpec, event.value)
            await events.aclose()
            return cluster

        cluster_task = asyncio.ensure_future(watch())
        stop_task = asyncio.ensure_future(self.stop_requested.wait())
        await asyncio.wait({cluster_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        stop_task.cancel()
        if not cluster_task.done():
            cluster_task.cancel()
            return None
        return cluster_task.result()

    async def _stop_trainer(self, pid: int, exit_task: asyncio.Future[int], grace: float) -> None:
        """SIGTERM the trainer's process group, wait ``grace`` seconds, then SIGKILL it."""
        logger.info("%s stopping trainer: %s", self._prefix, self.stop_reason)
        for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pid, signum)
            except ProcessLookupError:
                pass
            done, _ = await asyncio.wait({exit_task}, timeout=wait)
            if done:
                break
        try:
            os.killpg(pid, signal.SIGKILL)  # children that outlived the trainer itself
        except ProcessLookupError:
            pass

    async def _report(self, guard, live_key: str, exit_code: int, diagnosis: str) -> int:  # type: ignore[no-untyped-def]
        """Record the result and drop the live key in one transaction, if still ours."""
        if self._fenced.is_set():
            # The lease is gone: the guard would reject the write, and etcd is probably out of
            # reach, so waiting on it would only keep a fenced executor alive longer.
            logger.error("%s fenced; result not recorded (exit %s: %s)", self._prefix,
                         exit_code, diagnosis)
            return exit_code
        result = ExecutorResult(attempt=self.me.attempt, exit_code=exit_code,
                                finish_time=time.time(), diagnosis=diagnosis)
        result_key = self.keys.executor(self.me.role, self.me.index, "result")
        written = await self.store.txn([guard], [Put(result_key, encode(result)),
                                                 Delete(live_key)])
        if not written.succeeded:
            logger.error("%s lease already gone; result not recorded (exit %s: %s)",
                         self._prefix, exit_code, diagnosis)
        logger.info("%s finished: exit %s %s", self._prefix, exit_code, diagnosis)
        return exit_code
