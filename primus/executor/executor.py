"""The executor: registers under a lease, waits for the gang, runs the trainer, reports its exit.

One executor process supervises one trainer attempt. Its ``live`` key is attached to its lease,
so its death is detected by etcd; if it cannot renew the lease in time it stops its trainer and
exits (self-fencing), so a cut-off host never keeps a duplicate trainer running.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import TYPE_CHECKING

import psutil

from primus.config.resources import ResourcePolicy
from primus.config.spec import HUNG, OOM_KILLED, JobSpec, RoleSpec, StreamSpec, size_text
from primus.executor.cgroups import (
    JOIN_FAILED_EXIT,
    CgroupError,
    Hierarchy,
    Limits,
    TrainerCgroup,
    find_hierarchy,
    held_go,
    host_pid_max,
    writable,
)
from primus.executor.cluster import gpu_env, trainer_env
from primus.executor.hang import HangWatch, NotedSource, stop_watching
from primus.executor.host_lease import ENV as HOST_LEASE_ENV
from primus.executor.host_lease import keep_lease
from primus.executor.usage import UsageSampler
from primus.private_files import append_private, private_dir, write_private
from primus.processes import (
    StopOrder,
    describe_account,
    send_signal,
    start_time_of,
    stop_groups,
)
from primus.state.keys import AppKeys
from primus.state.records import (
    ClusterSpec,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    ProcessRef,
    Reservation,
    TaskOwner,
    decode,
    encode,
)
from primus.state.states import ExecutorState
from primus.state.topology import RoleResources
from primus.state.view import read_spec
from primus.store.api import (
    Compare,
    Coordinator,
    Delete,
    KeptLease,
    Put,
    StoreError,
    key_created_at,
    key_missing,
    while_leased,
)
from primus.store.recipes import close_reading, key_values, unless

if TYPE_CHECKING:
    from primus.data.feeder import FeedControl
    from primus.data.preprocess import Preprocessor
    from primus.data.shm import RingWriter

logger = logging.getLogger(__name__)

EXECUTOR_ERROR_EXIT = 255
"""Exit code recorded when the executor itself failed (not its trainer)."""


def die_with_executor(argv: list[str]) -> list[str]:
    """``argv`` run so that the trainer receives SIGKILL when its executor dies (Linux
    ``PR_SET_PDEATHSIG``, set by util-linux ``setpriv`` before it execs the trainer under the
    same pid): an executor killed with -9 takes its trainer with it at once instead of leaving
    it running, and reading data nobody checkpoints, until the AM sees the lease expire.
    Children the trainer starts are stopped by the AM, which kills the process group. (A
    ``preexec_fn`` cannot do it: forking a process that runs gRPC threads may crash the child.)
    Without ``setpriv`` the AM alone stops an orphaned trainer."""
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


def trainer_argv(role: RoleSpec) -> list[str]:
    """The role's command as a process's arguments (a string runs in ``/bin/sh -c``).

    With ``on_cluster_change: signal`` the command starts with the role's ``cluster_signal``
    ignored, as ``nohup`` starts one with SIGHUP ignored: of the trainer's process group,
    which the signal is sent to, only the processes that set a handler of their own see it.
    The shell that runs a command string (``sh -c 'cd job && python train.py'``), a ``tee``
    in its pipeline and a trainer still importing its libraries carry on, where the signal's
    default action would have killed them, and the trainer with them.
    """
    command = role.command
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    if role.on_cluster_change != "signal":
        return argv
    number = signal.Signals[role.cluster_signal].value
    return ["/bin/sh", "-c", f'trap "" {number}; exec "$@"', "primus-trainer", *argv]


@dataclass
class HeldTrainer:
    """A trainer process started in its attempt's cgroups before its attempt begins, waiting
    on a pipe for its environment (``TrainerCgroup.wrap_held``): at the attempt's start it
    execs the role's command at once, the cgroup move behind it."""

    attempt: int
    process: asyncio.subprocess.Process
    cgroup: TrainerCgroup
    pipe: int
    """The pipe's write end: the environment goes in, then it closes."""

    def go(self, environment: dict[str, str]) -> bool:
        """Tell it its environment, so that it execs the command; False (nothing told) when
        the environment cannot be told this way."""
        told = held_go(environment)
        if told is None:
            return False
        try:
            view = memoryview(told)
            while view:
                view = view[os.write(self.pipe, view):]
        except OSError:
            return False
        finally:
            os.close(self.pipe)
            self.pipe = -1
        return True

    async def discard(self) -> None:
        """Let it go unused: its pipe closes with nothing told, it exits; its cgroup goes."""
        if self.pipe >= 0:
            os.close(self.pipe)
            self.pipe = -1
        with contextlib.suppress(ProcessLookupError):
            if self.process.returncode is None:
                try:
                    async with asyncio.timeout(5.0):
                        await self.process.wait()
                except TimeoutError:
                    self.process.kill()
                    await self.process.wait()
        await asyncio.to_thread(self.cgroup.remove)


@cache
def _setpriv() -> str | None:
    return shutil.which("setpriv") if sys.platform.startswith("linux") else None


def reserve_ports(count: int, prefer: Sequence[int] = ()) -> list[socket.socket]:
    """Bind ``count`` TCP sockets, held until the trainer starts: on the ``prefer`` ports
    where they are free (a restart in place keeps its peers' view of it), else on any."""
    sockets = []
    for i in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", prefer[i] if i < len(prefer) else 0))
        except OSError:
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
class Ending:
    """How a trainer attempt ended: its exit code (shell convention), why, and its class
    (``OOM_KILLED``, or empty)."""

    exit_code: int
    diagnosis: str
    exit_class: str = ""


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


def within_record(granted: Reservation, recorded: RoleResources | None, role: RoleSpec
                  ) -> Reservation:
    """``granted`` (a reservation: a key the application's identity can write) taken no
    further than the role's size as the server records it (``recorded``, else the job's
    ``role``): a forged reservation cannot raise a trainer's limits."""
    most = recorded if recorded is not None else role
    return granted.model_copy(update={"cpu": min(granted.cpu, most.cpu),
                                      "memory": min(granted.memory, most.memory)})


class Executor:
    """Runs one executor attempt against the store; see the module docstring."""

    def __init__(self, store: Coordinator, keys: AppKeys, me: ExecutorIdentity,
                 registered: Callable[[], None] | None = None,
                 resources: ResourcePolicy | None = None,
                 host_lease: str | None = None,
                 secrets: Mapping[str, str] | None = None) -> None:
        """``registered`` is called once the executor has registered (or failed to): the
        host agent then lets the next executor start up. ``resources``: how the trainer is
        held to its reservation (the site's ``resources:``). ``host_lease``: the socket of the
        host's lease keeper (``host_lease.py``); without, the executor keeps a lease of its
        own. ``secrets``: what the executor received outside its environment
        (:mod:`primus.process_secrets`); the trainer gets the job's ``secret_env`` among
        them in its environment."""
        self.store = store
        self.keys = keys
        self.me = me
        self.resources = resources or ResourcePolicy()
        self._hierarchy: Hierarchy | str | None = None  # found once; a string: why none
        self._registered = registered
        self._host_lease = host_lease
        self._secrets = dict(secrets or {})
        self.stop_requested = asyncio.Event()
        self.stop_reason = ""
        self._trainer_pid: int | None = None
        self._held: HeldTrainer | None = None  # the next attempt's trainer, in its cgroups
        self._gpus: list[int] = []  # the GPU devices of its reservation
        self._numa_nodes: list[int] = []  # where its trainer is bound (cpu_binding: numa)
        self._nics: list[str] = []  # the RDMA NICs closest to its GPUs
        self._fenced = asyncio.Event()  # replaced by the lease keeper's "lost" event
        self._prefix = f"[{keys.app_id}/{me.name}]"

    def request_stop(self, reason: str) -> None:
        """Ask the executor to stop its trainer and exit (signal handlers call this)."""
        if not self.stop_requested.is_set():
            self.stop_reason = reason
            self.stop_requested.set()

    async def run(self) -> int:
        """Run the attempt to its end and return the trainer's exit code (shell convention)."""
        spec = await read_spec(self.store, self.keys)
        plan_kv = await self.store.get(self.keys.executor(self.me.role, self.me.index, "plan"))
        if spec is None or plan_kv is None or self.me.role not in {r.name for r in spec.roles}:
            logger.error("%s no spec, plan or role in etcd; nothing to run", self._prefix)
            return 2
        plan = decode(ExecutorPlan, plan_kv.value)
        self._gpus = plan.gpus
        self._numa_nodes = plan.numa_nodes
        self._nics = plan.nics
        if plan.attempt != self.me.attempt:
            logger.error("%s attempt %s is stale (plan is at %s); exiting", self._prefix,
                         self.me.attempt, plan.attempt)
            return 2
        live_key = self.keys.executor(self.me.role, self.me.index, "live")
        stream = spec.stream_of(self.me.role)
        owners = [] if stream is None else [self.keys.stream(stream.name).prefix("owner")]
        keeper = await keep_lease(self.store, spec.policy.heartbeat_ttl, live_key,
                                  self._host_lease, owners)
        keeper.on_lost.append(
            lambda why: self.request_stop(f"lease lost ({why}); trainer stopped (self-fenced)"))
        self._fenced = keeper.lost
        keeper.start()
        try:
            return await self._run_leased(spec, keeper)
        except Exception as exc:
            # An executor bug must not leave a trainer behind nor go unreported.
            logger.exception("%s executor error", self._prefix)
            if self._trainer_pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._trainer_pid, signal.SIGKILL)
            live = None if keeper.lost.is_set() else await self.store.get(live_key)
            if live is not None and live.lease == keeper.lease.id:
                await self._report(key_created_at(live_key, live.create_revision), live_key,
                                   Ending(EXECUTOR_ERROR_EXIT, f"executor error: {exc!r}"))
            return EXECUTOR_ERROR_EXIT
        finally:
            await self._discard_held()
            await keeper.stop(revoke=True)

    async def _run_leased(self, spec: JobSpec, keeper: KeptLease) -> int:
        """Register, then run attempts until one ends without a restart in place."""
        role = spec.role(self.me.role)
        live_key = self.keys.executor(self.me.role, self.me.index, "live")
        sockets = reserve_ports(role.ports)
        live = ExecutorLive(attempt=self.me.attempt, host=self.me.host, address=self.me.address,
                            pid=os.getpid(), ports=[s.getsockname()[1] for s in sockets],
                            state=ExecutorState.REGISTERED, registered_time=time.time())
        guard = await self._register(live_key, live, keeper, spec.policy.heartbeat_ttl)
        if self._registered is not None:
            self._registered()
        if guard is None:
            return 2
        while True:
            ending = await self._run_attempt(spec, sockets, live, guard, keeper)
            exit_code = ending.exit_code
            if self.stop_requested.is_set() or not role.restartable(exit_code,
                                                                    ending.exit_class):
                return await self._report(guard, live_key, ending)
            # The policy may restart this index: keep the lease and the live key, and let the
            # AM decide whether this executor starts the next attempt on this host.
            waiting = live.model_copy(update={
                "state": ExecutorState.SUCCEEDED if exit_code == 0 else ExecutorState.FAILED})
            if not await self._record(guard, live_key, ending, waiting, keeper):
                return exit_code
            # While the AM decides: the trainer of the attempt this executor would start in
            # place moves into its cgroups (the kernel's first move after a quiet spell waits
            # for an RCU grace period, ~10 ms), and waits to be told its environment.
            await self._hold_trainer(spec, role, self.me.attempt + 1)
            attempt = await self._wait_for_decision()
            if attempt is None:
                await self._discard_held()
                if not self._fenced.is_set():
                    await while_leased(self._fenced,
                                       lambda: self.store.txn([guard], [Delete(live_key)]))
                logger.info("%s no restart here; exiting", self._prefix)
                return exit_code
            self.me = replace(self.me, attempt=attempt)
            sockets = reserve_ports(role.ports, prefer=live.ports)
            live = live.model_copy(update={
                "attempt": attempt, "ports": [s.getsockname()[1] for s in sockets],
                "state": ExecutorState.REGISTERED, "registered_time": time.time(),
                "trainer": None, "trainer_start_time": None})
            await while_leased(self._fenced, partial(
                self.store.txn, [guard], [Put(live_key, encode(live), keeper.lease.id)]))
            logger.info("%s restarting in place as attempt %s", self._prefix, attempt)

    async def _register(self, live_key: str, live: ExecutorLive, keeper: KeptLease,
                        ttl: float) -> Compare | None:
        """Create the leased live key; return the guard that proves it is still ours.

        The executor of the previous attempt may still hold the key for a moment (it leaves
        when it sees the new plan, or its lease expires): wait for it, up to the TTL.
        """
        deadline = time.monotonic() + ttl + 5.0
        while True:
            registered = await self.store.txn([key_missing(live_key)],
                                              [Put(live_key, encode(live), keeper.lease.id)])
            if registered.succeeded:
                logger.info("%s registered on %s with ports %s", self._prefix,
                            self.me.address, live.ports)
                return key_created_at(live_key, registered.revision)
            async with contextlib.aclosing(key_values(self.store, live_key)) as values:
                value = await anext(values)
                while value is not None:  # None: released, register again
                    holder = decode(ExecutorLive, value)
                    left = deadline - time.monotonic()
                    if holder.attempt >= self.me.attempt or left <= 0:
                        logger.error("%s attempt %s of this executor holds %s; exiting",
                                     self._prefix, holder.attempt, live_key)
                        return None
                    logger.info("%s waiting for attempt %s to release %s", self._prefix,
                                holder.attempt, live_key)
                    try:
                        async with asyncio.timeout(left):
                            value = await anext(values)
                    except TimeoutError:
                        break

    async def _run_attempt(self, spec: JobSpec, sockets: list[socket.socket],
                           live: ExecutorLive, guard: Compare, keeper: KeptLease) -> Ending:
        """Wait for the gang, run this attempt's trainer to its end; its exit code and why.

        While the trainer runs, a new cluster spec that changes the gang is written to the
        trainer's cluster file and handled as the role's ``on_cluster_change`` says: with
        ``restart`` the trainer is stopped and started again with the new environment.
        """
        cluster = await self._wait_for_cluster()
        for sock in sockets:
            sock.close()
        while cluster is not None:
            outcome = await self._run_trainer(spec, cluster, live, guard, keeper)
            if isinstance(outcome, ClusterSpec):
                cluster = outcome
                continue
            return outcome
        return Ending(143, self.stop_reason)

    def _trainer_env(self, spec: JobSpec, cluster: ClusterSpec) -> dict[str, str]:
        # The trainer gets no etcd credential of the executor's (user, password, certificate,
        # key) and no address of etcd either: it talks to Primus through the executor; nor the
        # host's lease keeper, which is the executors'. Of the executor's secrets, it gets
        # the job's secret_env, as the job asks.
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith("PRIMUS_ETCD") and k != HOST_LEASE_ENV}
        secret_env = {name: self._secrets[name] for name in spec.secret_env
                      if name in self._secrets}
        # The NICs closest to its GPUs, as NCCL reads them; a job's own env wins.
        nics = {"NCCL_IB_HCA": ",".join(self._nics)} if self._nics else {}
        return {**inherited, **secret_env, **network_env(self.me.address), **nics, **spec.env,
                **spec.role(self.me.role).env,
                **trainer_env(self.keys.app_id, self.me.role, self.me.index, self.me.attempt,
                              cluster),
                **gpu_env(spec.role(self.me.role).gpu, self._gpus),
                "PRIMUS_CLUSTER_FILE": self._cluster_file,
                "PRIMUS_RESOURCES_FILE": self._resources_file}

    @property
    def _resources_file(self) -> str:
        return os.path.join(self.me.app_dir, f"{self.me.name}.resources.json")

    def _write_resources_file(self, cpu: float, memory: int) -> None:
        """What the trainer reserves now, to PRIMUS_RESOURCES_FILE (replaced in one step): a
        data loader may read it again after a resize to change its worker count."""
        write_private(self._resources_file, json.dumps({"cpu": cpu, "memory": memory}).encode())

    @property
    def _cluster_file(self) -> str:
        return os.path.join(self.me.app_dir, f"{self.me.name}.cluster.json")

    def _write_cluster_file(self, cluster: ClusterSpec) -> None:
        """Write the trainer's view of ``cluster`` (its environment's cluster variables and
        every member) to PRIMUS_CLUSTER_FILE, replacing the file in one step."""
        env = trainer_env(self.keys.app_id, self.me.role, self.me.index, self.me.attempt,
                          cluster)
        write_private(self._cluster_file, json.dumps({
            "version": cluster.version, "env": env,
            "members": [m.model_dump(mode="json") for m in cluster.members]}, indent=1).encode())

    async def _run_trainer(self, spec: JobSpec, cluster: ClusterSpec, live: ExecutorLive,
                           guard: Compare, keeper: KeptLease) -> Ending | ClusterSpec:
        """Run the trainer with ``cluster``'s environment until it exits or a stop comes (its
        exit code and why), or until a changed cluster restarts it (the new cluster)."""
        live_key = self.keys.executor(self.me.role, self.me.index, "live")
        role = spec.role(self.me.role)
        env = self._trainer_env(spec, cluster)
        self._write_cluster_file(cluster)
        self._write_resources_file(role.cpu, role.memory)
        argv = trainer_argv(role)
        workdir = self._workdir(spec)
        stream = spec.stream_of(self.me.role)
        progress_file = os.path.join(self.me.app_dir,
                                     f"{self.me.name}.{self.me.attempt}.progress")
        write_private(progress_file, b"")
        env["PRIMUS_PROGRESS_FILE"] = progress_file
        delivery = None
        if stream is not None:
            from primus.data.deliveries import DELIVERIES  # noqa: PLC0415 - data roles only

            delivery = DELIVERIES[stream.delivery].prepare(
                self.me.app_dir, f"{self.me.name}.{self.me.attempt}")
            env.update(delivery.env)
            env["PRIMUS_DATA_FORMAT"] = stream.format
            # Where the trainer asks for a savepoint: a socket only it inherits.
            control_socket, trainer_socket = socket.socketpair()
            delivery.pass_fds = (*delivery.pass_fds, trainer_socket.fileno())
            delivery.keep(trainer_socket, control_socket)
            env["PRIMUS_CONTROL"] = str(trainer_socket.fileno())
        # The log is private; what the trainer itself writes keeps its user's umask.
        if describe_account() is None:  # removed while its application runs
            if delivery is not None:
                delivery.abandon()
            return Ending(126, f"the account of uid {os.getuid()} no longer exists on this "
                                f"host: no trainer starts as it")
        held, self._held = self._held, None
        if held is not None and (
                (stream is not None and not DELIVERIES[stream.delivery].held_trainer) or
                held.attempt != self.me.attempt or not held.go(
                    {k: v for k, v in env.items() if k != "PRIMUS_CONTROL"})):  # not inherited
            await held.discard()
            held = None
        cgroup: TrainerCgroup | None  # None: resources are not enforced here
        if held is not None:
            trainer, cgroup = held.process, held.cgroup
            if delivery is not None:
                delivery.started()
        else:
            try:
                cgroup = self._trainer_cgroup(role, self.me.attempt)
            except CgroupError as exc:
                if delivery is not None:
                    delivery.abandon()
                return Ending(JOIN_FAILED_EXIT, f"resources.enforce is required and {exc}")
            try:
                with append_private(self.me.log_file) as log:
                    started_argv = die_with_executor(argv)
                    trainer = await asyncio.create_subprocess_exec(
                        *(cgroup.wrap(started_argv) if cgroup else started_argv), cwd=workdir,
                        env=env, stdout=log, stderr=asyncio.subprocess.STDOUT,
                        stdin=asyncio.subprocess.DEVNULL if delivery is None or
                        delivery.stdin is None else delivery.stdin,
                        pass_fds=delivery.pass_fds if delivery is not None else (),
                        process_group=0)
            except OSError as exc:
                if delivery is not None:
                    delivery.abandon()
                if cgroup is not None:
                    cgroup.remove()
                return Ending(127, f"cannot start trainer {argv[0]!r}: {exc.strerror}")
            finally:
                if delivery is not None:
                    delivery.started()  # the trainer's ends are its own
        watch = None if role.hang_timeout is None else HangWatch(
            self.store, self.keys, role, self.me.index, self.me.attempt, self.me.host,
            trainer.pid, self.me.log_file, progress_file)
        control = None
        if stream is not None and delivery is not None:
            from primus.data.feeder import FeedControl  # noqa: PLC0415

            control = FeedControl()
        preprocess = None
        if stream is not None and stream.preprocess:
            from primus.data.preprocess import Preprocessor  # noqa: PLC0415

            # The trainer's environment, less what only the trainer inherits.
            preprocess = Preprocessor(stream.preprocess, stream.format, {
                k: v for k, v in env.items() if k not in ("PRIMUS_CONTROL", "PRIMUS_DATA_SHM")},
                workdir, die_with_executor)
        feeder = None if stream is None or delivery is None else asyncio.ensure_future(
            self._feed(stream, delivery.target, keeper,
                       watch.note_data if watch is not None else None, control, preprocess))
        answering = None if control is None else asyncio.ensure_future(
            self._answer_savepoints(control_socket, control))
        started = time.time()
        self._trainer_pid = trainer.pid
        trainer_ref = ProcessRef(host=self.me.host, pid=trainer.pid,
                                 start_time=start_time_of(trainer.pid))
        running = live.model_copy(update={"state": ExecutorState.RUNNING, "trainer": trainer_ref,
                                          "trainer_start_time": started})
        await while_leased(self._fenced, lambda: self.store.txn(
            [guard], [Put(live_key, encode(running), keeper.lease.id)]))
        logger.info("%s attempt %s: trainer started, pid %s (cluster spec version %s)",
                    self._prefix, self.me.attempt, trainer.pid, cluster.version)

        sampler = UsageSampler(self.me.attempt, role.cpu, role.memory)
        sampling = None if cgroup is None else asyncio.ensure_future(
            self._sample_usage(cgroup, sampler, role, guard))
        resizing = None if cgroup is None else asyncio.ensure_future(
            self._follow_resizes(cgroup, sampler, role, trainer.pid))
        exit_task = asyncio.ensure_future(trainer.wait())
        stop_task = asyncio.ensure_future(self.stop_requested.wait())
        hang_task = asyncio.ensure_future(watch.run()) if watch is not None else None
        changes = self._cluster_changes(cluster)
        change_task = asyncio.ensure_future(anext(changes))
        restart_with: ClusterSpec | None = None
        hung = ""  # why the AM asked to restart it as hung
        try:
            while restart_with is None:
                await asyncio.wait({exit_task, stop_task, change_task,
                                    *([hang_task] if hang_task is not None else [])},
                                   return_when=asyncio.FIRST_COMPLETED)
                if hang_task is not None and hang_task.done() and not exit_task.done():
                    hung = hang_task.result()
                    break
                if exit_task.done() or stop_task.done():
                    break
                cluster = change_task.result()
                self._write_cluster_file(cluster)
                mode = role.on_cluster_change
                logger.info("%s cluster spec version %s: %s", self._prefix, cluster.version, {
                    "restart": "restarting the trainer", "none": "cluster file updated",
                    "signal": f"cluster file updated, {role.cluster_signal} sent"}[mode])
                if mode == "restart":
                    restart_with = cluster
                elif mode == "signal":  # its processes started with it ignored: trainer_argv
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(trainer.pid, signal.Signals[role.cluster_signal])
                if restart_with is None:
                    change_task = asyncio.ensure_future(anext(changes))
        finally:
            await close_reading(changes, change_task)
            await stop_watching(hang_task)
        if not exit_task.done():
            # Fenced, the lease may expire in etcd within a second and a replacement start:
            # the trainer gets no grace. Otherwise it gets stop_grace to save its work.
            grace = 0.0 if self._fenced.is_set() else spec.policy.stop_grace
            await self._stop_trainer(trainer_ref, exit_task, grace,
                                     f"hung: {hung}" if hung else
                                     self.stop_reason if restart_with is None else
                                     f"cluster spec version {cluster.version}")
        else:
            # What remains of its process group (children it left behind) goes with it, so
            # nothing of this attempt outlives it.
            send_signal(trainer_ref.pid, trainer_ref.start_time, signal.SIGKILL, group=True)
        stop_task.cancel()
        self._trainer_pid = None
        if answering is not None:
            answering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answering
        if feeder is not None:  # its tasks go back to pending where the trainer got to
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder
        oom_kills = 0
        if cgroup is not None:
            for task in (sampling, resizing):  # figures and resizes: never the trainer's end
                if task is not None:
                    task.cancel()
                    try:
                        await task
                    except asyncio.CancelledError:
                        pass
                    except Exception:
                        logger.exception("%s usage or resize task failed", self._prefix)
            await self._write_usage(cgroup, sampler, role, guard)  # its last figures, its peak
            oom_kills = cgroup.oom_kills()
            await asyncio.to_thread(cgroup.remove)
        if restart_with is not None and not self.stop_requested.is_set():
            return restart_with
        exit_code, diagnosis = describe_exit(exit_task.result())
        if self.stop_requested.is_set():
            return Ending(exit_code, self.stop_reason)
        if hung:
            return Ending(exit_code, f"{HUNG}: {hung}", HUNG)
        if oom_kills and cgroup is not None and exit_code != 0:
            return Ending(exit_code, (
                f"{OOM_KILLED}: {self.me.name} used its {size_text(role.memory)} of memory "
                f"(limit {size_text(cgroup.limits.memory)} with the site's margin; {diagnosis}, "
                f"the kernel killed {oom_kills} of its processes)"), OOM_KILLED)
        return Ending(exit_code, diagnosis)

    def _workdir(self, spec: JobSpec) -> str:
        """Where the trainer runs: the job's workdir, else where the job's files were copied on
        this host (under PRIMUS_HOME, as private; a workdir of the job is the user's own)."""
        private_dir(os.path.dirname(os.path.abspath(self.me.log_file)))
        if spec.workdir:
            os.makedirs(spec.workdir, exist_ok=True)
            return spec.workdir
        return str(private_dir(os.path.join(self.me.app_dir, "work")))

    async def _hold_trainer(self, spec: JobSpec, role: RoleSpec, attempt: int) -> None:
        """Start ``attempt``'s trainer process in its cgroups, held until it is told its
        environment (:class:`HeldTrainer`); not where resources are not enforced, nor for a
        trainer that reads its data on stdin (its pipe is made with the attempt)."""
        stream = spec.stream_of(role.name)
        from primus.data.deliveries import DELIVERIES  # noqa: PLC0415

        if self._held is not None or (stream is not None and
                                      not DELIVERIES[stream.delivery].held_trainer):
            return
        try:
            cgroup = self._trainer_cgroup(role, attempt)
        except CgroupError:
            return  # said again, and acted on, when the attempt starts
        if cgroup is None:
            return
        read, write = os.pipe()
        try:
            with append_private(self.me.log_file) as log:
                process = await asyncio.create_subprocess_exec(
                    *cgroup.wrap_held(die_with_executor(trainer_argv(role))),
                    cwd=self._workdir(spec), env={}, stdin=read, stdout=log,
                    stderr=asyncio.subprocess.STDOUT, process_group=0)
        except OSError:
            os.close(write)
            cgroup.remove()
            return
        finally:
            os.close(read)
        self._held = HeldTrainer(attempt, process, cgroup, write)
        logger.info("%s attempt %s's trainer waits in its cgroups (pid %s)", self._prefix,
                    attempt, process.pid)

    async def _discard_held(self) -> None:
        """Let a held trainer go, unused (the executor ends, or the attempt is elsewhere)."""
        held, self._held = self._held, None
        if held is not None:
            await held.discard()

    async def _follow_resizes(self, cgroup: TrainerCgroup, sampler: UsageSampler,
                              role: RoleSpec, trainer_pid: int) -> None:
        """While the trainer runs: each size admission grants this executor in place (its
        reservation rewritten after ``primus resize``) applied to the trainer's cgroup, the
        trainer running on. CPU and more memory at once; less memory once the trainer holds
        less than the new limit (looked at every second, the log saying it waits). Then
        PRIMUS_RESOURCES_FILE is rewritten, and where the role's ``on_cluster_change`` is
        ``signal`` its ``cluster_signal`` sent. The reservation is a key its application's
        identity can write: its size is taken only up to the role's size as the server records
        it (``roles/<role>/resources``, else the job's)."""
        key = self.keys.scheduler.reservation(self.keys.app_id, self.me.role, self.me.index)
        applied = (cgroup.limits.cpu, cgroup.limits.memory)
        while True:  # etcd refusing a watch or a read (its auth changing): follow again
            try:
                async with contextlib.aclosing(key_values(self.store, key)) as values:
                    async for value in values:
                        if value is None:
                            continue
                        recorded = await self.store.get(self.keys.role_resources(self.me.role))
                        granted = within_record(decode(Reservation, value, key), decode(
                            RoleResources, recorded.value, recorded.key) if recorded else None,
                            role)
                        wanted = (granted.cpu, self.resources.memory_limit(granted.memory))
                        if wanted == applied:
                            continue
                        await self._resize_trainer(cgroup, *wanted)
                        applied = wanted
                        sampler.cpu_reserved = granted.cpu
                        sampler.memory_reserved = granted.memory
                        self._write_resources_file(granted.cpu, granted.memory)
                        logger.info("%s resized in place: %g CPUs, memory limit %s",
                                    self._prefix, granted.cpu, size_text(wanted[1]))
                        if role.on_cluster_change == "signal":
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(trainer_pid, signal.Signals[role.cluster_signal])
                return
            except StoreError as exc:
                logger.warning("%s following its reservation: %s; again in a second",
                               self._prefix, exc)
                await asyncio.sleep(1.0)

    async def _resize_trainer(self, cgroup: TrainerCgroup, cpu: float, memory: int) -> None:
        """Write the trainer's new limits, waiting while it holds more memory than the new
        limit (the kernel would reclaim or kill to get there)."""
        said = False
        while True:
            held = cgroup.usage().memory
            if held is None or held <= memory:
                try:
                    cgroup.resize(cpu, memory)
                    return
                except CgroupError as exc:  # it grew meanwhile: wait again
                    logger.warning("%s resize: %s", self._prefix, exc)
            if not said:
                logger.info("%s resize waits: the trainer holds %s, more than its new memory "
                            "limit %s", self._prefix, size_text(held or 0), size_text(memory))
                said = True
            await asyncio.sleep(1.0)

    async def _sample_usage(self, cgroup: TrainerCgroup, sampler: UsageSampler, role: RoleSpec,
                            guard: Compare) -> None:
        """Every ``resources.usage_interval`` while the trainer runs: its usage figures."""
        while True:
            await asyncio.sleep(self.resources.usage_interval)
            await self._write_usage(cgroup, sampler, role, guard)

    async def _write_usage(self, cgroup: TrainerCgroup, sampler: UsageSampler, role: RoleSpec,
                           guard: Compare) -> None:
        """The trainer's usage figures as its cgroup counts them now, into ``usage`` (while
        this executor is the attempt's: fenced, it writes nothing). A failure to read or write
        them is logged: they are figures, the trainer runs on."""
        try:
            figures = sampler.figures(time.time(), cgroup.usage())
            await self.store.txn([guard], [Put(self.keys.executor(
                role.name, self.me.index, "usage"), encode(figures))])
        except (OSError, StoreError) as exc:
            logger.warning("%s usage figures not written: %s", self._prefix, exc)

    def _trainer_cgroup(self, role: RoleSpec, attempt: int) -> TrainerCgroup | None:
        """The trainer's own cgroup, held to the role's reservation (the site's
        ``resources:``); ``None`` when resources are not enforced here.

        Raises:
            CgroupError: it cannot be made and ``resources.enforce`` is ``required``.
        """
        policy = self.resources
        if policy.enforce == "off":
            if self._numa_nodes:
                logger.warning("%s cpu_binding numa: not bound, the site's resources.enforce "
                               "is off", self._prefix)
            return None
        if self._hierarchy is None:
            try:
                found = find_hierarchy(policy.cgroup_parent)
                self._hierarchy = writable(found) or found
            except (CgroupError, OSError) as exc:
                self._hierarchy = str(exc)
        try:
            if isinstance(self._hierarchy, str):
                raise CgroupError(self._hierarchy)
            name = f"primus.{self.keys.app_id}.{self.me.name}.{attempt}"
            return TrainerCgroup.make(self._hierarchy, name, Limits(
                memory=policy.memory_limit(role.memory), cpu=role.cpu,
                pids=policy.pids_limit(host_pid_max()),  # this host's, not the submitter's
                gpus=tuple(self._gpus),  # a trainer that reserved none opens none
                numa_nodes=tuple(self._numa_nodes)))
        except CgroupError as exc:
            if policy.enforce == "required":
                raise
            logger.warning("%s resources not enforced on this host: %s", self._prefix, exc)
            return None

    async def _cluster_changes(self, started: ClusterSpec
                               ) -> AsyncGenerator[ClusterSpec, None]:
        """Each later cluster spec of this application attempt that changes the gang (a
        member joined, left, restarted or moved) and still lists this executor's attempt."""
        def gang(cluster: ClusterSpec) -> list[tuple[str, int, str, list[int], int]]:
            return [(m.role, m.index, m.address, m.ports, m.attempt) for m in cluster.members]

        current = started
        async with contextlib.aclosing(key_values(self.store, self.keys.cluster)) as values:
            async for value in values:
                if value is None:
                    continue
                cluster = decode(ClusterSpec, value)
                member = cluster.member(self.me.role, self.me.index)
                if cluster.attempt != current.attempt or cluster.version <= current.version \
                        or member is None or member.attempt != self.me.attempt:
                    continue
                if gang(cluster) != gang(current):
                    yield cluster
                current = cluster

    async def _answer_savepoints(self, connection: socket.socket, control: FeedControl
                                 ) -> None:
        """Until the trainer ends: each savepoint its trainer asks for (a line of JSON on
        the socket, ``{"savepoint": NAME}``) once its position is written, answered
        ``{"savepoint": "APP/NUMBER"}`` or ``{"error": ...}``."""
        from primus.data.savepoints import SavepointError, join  # noqa: PLC0415

        reader, writer = await asyncio.open_unix_connection(sock=connection)
        try:
            while line := await self._request_line(reader):
                try:
                    name = str(json.loads(line).get("savepoint") or "")[:200]
                    await control.checkpoint_now()
                    answer = {"savepoint": await join(self.store, self.keys, name,
                                                      f"{self.me.role}-{self.me.index}")}
                    logger.info("%s savepoint %s taken (asked by the trainer)", self._prefix,
                                answer["savepoint"])
                except (ValueError, AttributeError) as exc:
                    answer = {"error": f"a request is a line of JSON: {exc}"}
                except (SavepointError, StoreError) as exc:
                    answer = {"error": str(exc)}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

    async def _request_line(self, reader: asyncio.StreamReader) -> bytes:
        """The trainer's next request; nothing (no more answers) once it closed its end or
        sent a line longer than a request can be."""
        try:
            return await reader.readline()
        except (ValueError, ConnectionError) as exc:  # readline: a line over its limit
            logger.warning("%s the trainer's savepoint requests end: %s", self._prefix, exc)
            return b""

    async def _feed(self, stream: StreamSpec, target: int | str | RingWriter,
                    keeper: KeptLease, on_data: Callable[[], None] | None,
                    control: FeedControl | None = None,
                    preprocess: Preprocessor | None = None) -> None:
        """Feed the trainer the stream's records until it ends (then close the trainer's
        input) or the trainer stops reading. ``target``: the pipe's write end, the FIFO, or
        the shared-memory ring; ``on_data``: called as what the trainer read moves its tasks
        on."""
        import primus.data.formats  # noqa: F401, PLC0415 - registers the built-in formats
        from primus.data.api import DEFAULT_BLOCK_SIZE, get_format  # noqa: PLC0415
        from primus.data.feeder import feed  # noqa: PLC0415 - only roles that read data
        from primus.data.shuffle import ShuffleBuffer  # noqa: PLC0415
        from primus.data.tasks import StreamBoard  # noqa: PLC0415

        board = StreamBoard(self.store, self.keys.stream(stream.name), stream, TaskOwner(
            role=self.me.role, index=self.me.index, attempt=self.me.attempt,
            since=time.time(), pid=os.getpid()), lambda: keeper.lease.id, self._fenced)
        try:
            fd = await self._open_fifo(target) if isinstance(target, str) else target
            fmt = get_format(stream.format).for_stream(stream)
            shuffle = None if stream.shuffle_buffer is None else ShuffleBuffer(
                fmt, stream.shuffle_buffer, stream.seed, DEFAULT_BLOCK_SIZE)
            result = await feed(fd, board if on_data is None else NotedSource(board, on_data),
                                fmt, checkpoint_records=stream.checkpoint_records,
                                checkpoint_interval=stream.checkpoint_interval,
                                prefetch=stream.prefetch, control=control,
                                preprocess=preprocess, shuffle=shuffle)
            logger.info("%s data stream %s fed: %s", self._prefix, stream.name, result)
        except asyncio.CancelledError:
            raise
        except Exception:  # feed() closed the input: the trainer sees it end
            logger.exception("%s feeding data stream %s failed", self._prefix, stream.name)
        finally:
            if preprocess is not None:
                await asyncio.to_thread(preprocess.close)
            try:  # the tasks claimed in a batch that the feeder never took go back
                await board.close()
            except Exception:  # noqa: BLE001 - the lease ends with the executor: re-queued
                logger.exception("%s giving back the unread tasks of %s failed", self._prefix,
                                 stream.name)

    @staticmethod
    async def _open_fifo(path: str) -> int:
        """Open the FIFO for writing once the trainer opened it for reading (never blocks the
        event loop: an open without a reader fails with ENXIO and is tried again)."""
        while True:
            try:
                return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
            await asyncio.sleep(0.05)  # no event tells when a reader opens a FIFO

    async def _wait_for_decision(self) -> int | None:
        """After a restartable exit: the attempt this executor starts next on this host, or
        ``None`` when the AM restarts the index elsewhere, not at all, or a stop is requested.
        """
        plan_key = self.keys.executor(self.me.role, self.me.index, "plan")

        async def decision() -> int | None:
            async with contextlib.aclosing(key_values(self.store, plan_key)) as values:
                async for value in values:
                    if value is None:
                        return None
                    plan = decode(ExecutorPlan, value)
                    if plan.attempt > self.me.attempt:
                        mine = plan.host == self.me.host and plan.process is not None and \
                            plan.process.pid == os.getpid()
                        return plan.attempt if mine else None
                    if plan.state.terminal and plan.restart_at is None:
                        return None
            return None

        logger.info("%s waiting for the AM's decision on attempt %s", self._prefix,
                    self.me.attempt)
        return await unless(self.stop_requested, decision())

    async def _wait_for_cluster(self) -> ClusterSpec | None:
        """Wait until the AM writes a cluster spec that lists this executor's attempt, or a
        stop is requested."""
        async def listed() -> ClusterSpec | None:
            async with contextlib.aclosing(key_values(self.store, self.keys.cluster)) as values:
                async for value in values:
                    cluster = decode(ClusterSpec, value) if value is not None else None
                    member = cluster.member(self.me.role, self.me.index) if cluster else None
                    if member is not None and member.attempt == self.me.attempt:
                        return cluster
            return None

        return await unless(self.stop_requested, listed())

    async def _stop_trainer(self, trainer: ProcessRef, exit_task: asyncio.Future[int],
                            grace: float, reason: str) -> None:
        """Stop the trainer's process group with Primus's one stop sequence (SIGTERM,
        ``grace`` seconds, SIGKILL: ``processes.stop_groups``), then collect its exit."""
        logger.info("%s stopping trainer: %s", self._prefix, reason)
        await asyncio.to_thread(stop_groups, [StopOrder(trainer.pid, trainer.start_time, grace)])
        await asyncio.wait({exit_task}, timeout=10.0)

    async def _report(self, guard: Compare, live_key: str, ending: Ending) -> int:
        """Record the final result and drop the live key, if still ours; the exit code."""
        await self._record(guard, live_key, ending, None, None)
        logger.info("%s finished: exit %s %s", self._prefix, ending.exit_code,
                    ending.diagnosis)
        return ending.exit_code

    async def _record(self, guard: Compare, live_key: str, ending: Ending,
                      waiting: ExecutorLive | None, keeper: KeptLease | None) -> bool:
        """Write this attempt's result in one transaction guarded by the live key: with the
        live key deleted, or replaced by ``waiting`` (still leased by ``keeper``)."""
        exit_code, diagnosis = ending.exit_code, ending.diagnosis
        if self._fenced.is_set():
            # The lease is gone: the guard would reject the write, and etcd is probably out of
            # reach, so waiting on it would only keep a fenced executor alive longer.
            logger.error("%s fenced; result not recorded (exit %s: %s)", self._prefix,
                         exit_code, diagnosis)
            return False
        result = ExecutorResult(attempt=self.me.attempt, exit_code=exit_code,
                                finish_time=time.time(), diagnosis=diagnosis,
                                exit_class=ending.exit_class)
        result_key = self.keys.executor(self.me.role, self.me.index, "result")
        live_op = Delete(live_key) if waiting is None or keeper is None else \
            Put(live_key, encode(waiting), keeper.lease.id)
        written = await while_leased(self._fenced, lambda: self.store.txn(
            [guard], [Put(result_key, encode(result)), live_op]))
        if not written.succeeded:
            logger.error("%s lease already gone; result not recorded (exit %s: %s)",
                         self._prefix, exit_code, diagnosis)
        return written.succeeded
