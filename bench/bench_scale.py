"""Benchmark: a scale model of 10,000 executors on 1,250 hosts against one real etcd (issue 15).

For each executor count N (``--counts``, default 1000,2500,5000,10000; 8 executors a host), a
private etcd is started and one application of one role ``worker``, ``num: N``, is recorded in
it as an AM that had launched every executor would have left it: spec, status RUNNING, the
inventory of N / 8 hosts, every executor's plan (RUNNING, with its process and trainer), its
reservation and the hosts' admission records, the cluster spec of the N members (version 1) and
a full event log (1,000 entries). No AM leads: the one that launched them is gone.

The executors are simulated by a few worker processes (``--per-worker``, 1,000 executors each,
whole hosts), with Primus's own code, as they run on a host once their trainers run. Each
simulated host has the application's lease keeper (``primus/executor/host_lease.py``): a
``HostLeaseKeeper`` on its own connection to etcd (``EtcdCoordinator``), keeping one lease of
``policy.heartbeat_ttl`` (a renewal every TTL / 3 on the connection's long-lived
``LeaseKeepAlive`` stream) and serving its Unix socket (``host_lease.listen``) in a directory of
the host's own. Each of the host's 8 executors does what ``primus/executor/executor.py`` does:
its own connection to etcd; it joins the keeper (``SharedLease.join``: its liveness from now on
is a line on the keeper's socket every TTL / 3, and the keeper tells it of each renewal);
registers its ``live`` key (an ``ExecutorLive``, RUNNING) attached to the host's lease in the
guarded transaction of its registration; and watches the application's ``cluster`` key from
the revision after the cluster spec was written (where ``_cluster_changes`` watches).

What the model leaves out: each keeper and executor is a coroutine in a worker's event loop,
not a process of its own (a worker's CPU is that of its hosts' keepers and executors together;
the pid in an executor's live key is not its process's, so a keeper never deletes the key of an
executor that leaves); no host agent forks them; no trainer runs and no data stream is read (no
task claims under the lease). An executor does not read the cluster spec: a real one reads it
twice as it starts (once waiting for the gang, once to follow it), which the benchmark prices
apart (the keyspace table), as it would take the simulation minutes at N = 10,000. Nothing here
leaves or kills one executor alone (the keeper deleting its key at once) or kills a keeper (its
executors moving to leases of their own): ``tests/integration/test_host_lease.py`` and
``tests/chaos/test_host_lease.py`` cover those. A lost host is lost whole, keeper and executors
stopped at once, as a host that lost its power: none of them is told or tries anything (on a
host cut off from etcd instead, the executors would try leases of their own and stop their
trainers once the lease was lost).

Then, for each N:

* **keepalive load**: for ``--window`` seconds, with the executors alone: renewals per second
  and keepalive streams opened per second as etcd counts them (its ``/metrics``), against the
  expected hosts × 3 / TTL; etcd's CPU and RSS (psutil); the keepers' renewal latency, every
  renewal that failed and every executor told its lease was lost. The **peer**
  (``--baseline``): the design Primus left, a lease per executor, on its own connection as
  well, renewed every TTL / 3 on one long-lived ``LeaseKeepAlive`` stream (as etcd's Go
  client does): N × 3 / TTL renewals a second, in a fresh etcd; its CPU beside the simulated
  executors' and keepers'.
* **AM**: a real AM (``python -m primus.am``) is started. It takes the application over and
  adopts every executor (``primus/am/reconcile.py``: a RUNNING plan whose live key is there is
  left alone); its time to lead, its RSS and USS with N executors in its view, its idle CPU
  and etcd's during another window, and every plan it rewrote (none should be, but those of
  executors lost meanwhile). Beside it, timed in the benchmark's process: building the AM's view
  from one read of the application, one ``decide`` pass on it (the AM makes one on every
  event it sees and every second), and one pass with a tenth of the executors' live keys gone
  (a mass loss).
* **lost host**: one host's lease (its 8 executors' live keys) is revoked (``--repeat``
  hosts, one after the other), its keeper and executors stopped first,
  and the time from the revoke to each of its 8 plans marked LOST in etcd is read from a watch
  in this process; the **floor** is the live keys' deletions arriving on that watch (the AM
  cannot know sooner). With ``--expiry`` one more host goes silent instead (stopped alike,
  nothing is revoked): etcd expires its lease within the TTL, and the AM's part after the
  expiry is shown apart.
* **keyspace**: keys and bytes (keys + values) under the application's prefix and its
  admission keys, by kind, etcd's database size (``etcdctl endpoint status``), the cluster
  spec's size against etcd's request limit, and the time to read it once.

The job's role has ``restart_policy: never`` and ``failure_action: fail_executor``: a lost
executor is recorded LOST for good and the others go on, so a lost host costs exactly its 8
plan records and nothing is relaunched. The AM still stops what a lost executor may have left
(``StopExecutor``) through the hosts' launcher: the hosts are ``local`` ones (this machine) and
every executor's and trainer's process reference carries a pid above Linux's largest possible
pid (``PID_MAX_LIMIT``, 2^22), so that stop finds no process and signals nothing.

On the 2-core test machine the simulated executors, the AM and etcd share the CPU; the
simulation's own CPU is reported beside etcd's (on a cluster it is spread over N / 8 hosts),
and its processes are niced, so that etcd and the AM come first, as they would on a cluster.
A count "breaks" when it misses one of issue 28's targets (no executor told its lease was
lost; etcd's CPU with the executors alone at most 20 % of a core; the executors' CPU at most
the peer's; a lost host's executors all LOST within 2 s of its lease's end; an AM leading
within 5 s of its start), a renewal failed, a cluster watch was not opened, the AM rewrote a
plan it should have adopted, or the cluster spec is over etcd's request limit.

Usage: ``python bench/bench_scale.py [--counts 1000,2500,5000,10000] [--window 30]``;
``--quick`` for a smoke run of a few seconds (N = 96, the default TTL, no expiry, no wait for a
quiet machine: it runs in the test suite, beside other test workers that keep both cores busy,
where 200 executors renewing every 1.7 s on a stream each lost every lease; issue 28's subject).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc
import psutil
from aetcd import rpc
from bench_submit import Sandbox, console, etcd_version, sandbox, wait_for_quiet
from rich.table import Table

from primus.am.reconcile import decide
from primus.config.etcd import EtcdConfig
from primus.config.inventory import Host
from primus.config.spec import JobSpec, PolicySpec, RoleSpec
from primus.executor import host_lease
from primus.executor.cluster import build_cluster
from primus.executor.host_lease import HostLeaseKeeper, SharedLease
from primus.state.keys import EVENT_LOG_SIZE, AppKeys
from primus.state.records import (
    AppEvent,
    AppStatus,
    ExecutorLive,
    ExecutorPlan,
    ProcessRef,
    Reservation,
    decode,
    decode_hosts,
    encode,
    encode_host,
    encode_hosts,
)
from primus.state.states import AppState, ExecutorState
from primus.state.view import AppView, read_app_keys
from primus.store.api import (
    Coordinator,
    EventType,
    Put,
    Resync,
    Snapshot,
    StoreError,
    StoreUnavailableError,
    key_missing,
)
from primus.store.etcd_store import EtcdCoordinator

ROLE = "worker"
HOST_SIZE = 8
"""Executors per host."""
PID_BASE = 2**22
"""Linux's PID_MAX_LIMIT: no process or process group ever has this id or a larger one."""
TRAINER_PORT = 29500
MAX_TXN_OPS = 100
"""Operations per setup transaction, under etcd's default limit of 128."""
ETCD_MAX_REQUEST = int(1.5 * 1024 * 1024)
"""etcd's default --max-request-bytes: the largest value one write can carry."""
WORKER_NICE = 10
START_CONCURRENCY = 32
"""Simulated executors of one worker that connect and register at the same time (the peer's
leases; whole hosts of them)."""
START_ATTEMPTS = 3
READY_TIMEOUT = 600.0
DECISION_TIMEOUT = 120.0
LOST_AT_ONCE = 10
"""One executor in this many is lost at once in the mass-loss ``decide`` pass."""
KB = 1024
MB = 1024 * 1024
LIVENESS_CPU = 0.20
"""Issue 28's targets: etcd's CPU for the executors' liveness, a share of one core; seconds
from a lost host's lease ending to its executors all LOST; seconds from an AM's start to its
leading, over N executors."""
LOST_HOST_S = 2.0
TAKEOVER_S = 5.0
KEEPALIVES = 'grpc_server_msg_received_total{grpc_method="LeaseKeepAlive"'
KEEPALIVE_STREAMS = 'grpc_server_started_total{grpc_method="LeaseKeepAlive"'


def host_name(number: int) -> str:
    return f"h{number:05d}"


def host_address(number: int) -> str:
    return f"10.{number // 62500}.{number // 250 % 250}.{number % 250 + 1}"


def host_of(index: int) -> int:
    """The host number of executor ``index``: hosts are filled 8 at a time, in index order."""
    return index // HOST_SIZE


def process_ref(host: str, index: int, trainer: bool, started: float) -> ProcessRef:
    """A process reference no process matches: its pid is above any pid Linux can give."""
    return ProcessRef(host=host, pid=PID_BASE + 2 * index + int(trainer), start_time=started)


# --- the simulated executors (worker processes) --------------------------------------------------


@dataclass
class Renewals:
    """Lease renewals of one worker since the last report: how long each took, how many
    failed; and the cluster watches that failed (etcd did not open them in time)."""

    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    watches_failed: int = 0

    def take(self, lost: int, moved: int) -> dict[str, Any]:
        """The figures so far (``lost``: executors told their lease is lost, the peer's leases
        lost; ``moved``: executors on a lease of their own, their keeper gone), then start anew
        (the failed watches are counted from the start)."""
        figures = {"failures": self.failures, "lost": lost, "moved": moved,
                   "watches_failed": self.watches_failed, "latencies": self.latencies}
        self.latencies, self.failures = [], 0
        return figures


RENEWALS = Renewals()
"""The renewals of this (worker) process: its hosts' keepers' (the peer's: its leases')."""


class TimedCoordinator(EtcdCoordinator):
    """Primus's etcd store, with each lease renewal timed into :data:`RENEWALS` (a keeper's;
    an executor renews only once its keeper died)."""

    async def refresh_lease(self, lease_id: int) -> int:
        began = time.monotonic()
        try:
            ttl = await super().refresh_lease(lease_id)
        except StoreError:
            RENEWALS.failures += 1
            raise
        RENEWALS.latencies.append(time.monotonic() - began)
        return ttl


@dataclass(frozen=True)
class WorkerJob:
    """What one worker process simulates: the executors of ``hosts`` (numbers), 8 each."""

    etcd_url: str
    prefix: str
    app_id: str
    ttl: int
    hosts: tuple[int, ...]
    cluster_revision: int
    raw: bool = False
    """Hold bare leases on long-lived keepalive streams instead (the peer)."""


class SimulatedExecutor:
    """One RUNNING executor: its connection, its hold on the host's lease (through the host's
    keeper), its live key under that lease and its cluster watch."""

    def __init__(self, job: WorkerJob, index: int, keeper_path: str) -> None:
        self.job = job
        self.index = index
        self.host = host_of(index)
        self.keeper_path = keeper_path
        self.keys = AppKeys(job.prefix, job.app_id)
        self.store: Coordinator | None = None
        self.shared: SharedLease | None = None
        self.watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect, join the host's lease, register the live key as RUNNING, watch; on a
        machine so busy that etcd does not answer in time, try again (up to
        ``START_ATTEMPTS`` times), as a relaunched executor would."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await self._start(first=attempt == 1)
                return
            except StoreUnavailableError:
                if attempt == START_ATTEMPTS:
                    raise
                if self.shared is not None:
                    await self.shared.stop()
                    self.shared = None
                if self.store is not None:
                    await self.store.close()
                    self.store = None

    async def _start(self, first: bool) -> None:
        """One try, in the order of ``Executor.run``; after the first, the live key a try that
        timed out may have written is taken over."""
        self.store = await TimedCoordinator.connect(EtcdConfig(endpoints=(self.job.etcd_url,)))
        key = self.keys.executor(ROLE, self.index, "live")
        self.shared = await SharedLease.join(self.store, self.keeper_path, key)
        if self.shared is None:
            raise RuntimeError(f"the lease keeper of {host_name(self.host)} did not answer")
        self.shared.start()
        name, now = host_name(self.host), time.time()
        live = ExecutorLive(attempt=1, host=name, address=host_address(self.host),
                            pid=PID_BASE + 2 * self.index,
                            ports=[TRAINER_PORT + self.index % HOST_SIZE],
                            state=ExecutorState.RUNNING, registered_time=now,
                            trainer=process_ref(name, self.index, True, now),
                            trainer_start_time=now)
        registered = await self.store.txn([key_missing(key)] if first else [],
                                          [Put(key, encode(live), self.shared.lease.id)])
        if not registered.succeeded:
            raise RuntimeError(f"{key} is held already")
        self.watch = asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        """Watch the cluster spec as a running executor does (nothing changes it here)."""
        assert self.store is not None  # started
        try:
            async for _ in self.store.watch_prefix(self.keys.cluster,
                                                   self.job.cluster_revision + 1):
                pass
        except StoreError:
            RENEWALS.watches_failed += 1

    @property
    def lost(self) -> bool:
        """Told by the keeper that the host's lease is lost (or lost its own after the
        keeper died)."""
        return self.shared is not None and self.shared.lost.is_set()

    @property
    def moved(self) -> bool:
        """On a lease of its own: its keeper was gone, or told no renewal for too long."""
        return self.shared is not None and self.shared.own is not None

    async def stop(self) -> None:
        """Leave the host's lease, as an executor that ends (the keeper leaves its live key:
        the pid in it is not this process's)."""
        if self.watch is not None:
            self.watch.cancel()
        if self.shared is not None:
            await self.shared.stop(revoke=False)


class SimulatedHost:
    """One host of the application: its lease keeper, on a connection of its own and serving
    its socket in ``directory``, and its 8 executors, which join it."""

    def __init__(self, job: WorkerJob, number: int, directory: str) -> None:
        self.job = job
        self.number = number
        self.directory = directory
        self.store: Coordinator | None = None
        self.keeper: HostLeaseKeeper | None = None
        self.serving: asyncio.Task[str] | None = None
        self.executors = [SimulatedExecutor(job, number * HOST_SIZE + i,
                                            os.path.join(directory, host_lease.SOCKET_NAME))
                          for i in range(HOST_SIZE)]

    async def start(self) -> None:
        """Start the keeper (its lease granted), then the executors, all at once."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        listener = host_lease.listen(self.directory)
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await self._keep(listener)
                break
            except StoreUnavailableError:
                if attempt == START_ATTEMPTS:
                    raise
                if self.store is not None:
                    await self.store.close()
                    self.store = None
        await asyncio.gather(*(e.start() for e in self.executors))

    async def _keep(self, listener: socket.socket) -> None:
        """Serve ``listener`` with a keeper that never ends for want of executors; return once
        it holds its lease, raise what ended it before."""
        self.store = await TimedCoordinator.connect(EtcdConfig(endpoints=(self.job.etcd_url,)))
        keeper = self.keeper = HostLeaseKeeper(self.store, self.job.ttl, self.directory,
                                               idle=math.inf)
        serving = self.serving = asyncio.ensure_future(keeper.serve(listener))
        await asyncio.wait([serving, asyncio.ensure_future(keeper.leased.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        if not keeper.leased.is_set():
            raise RuntimeError(f"the lease keeper of {host_name(self.number)} ended: "
                               f"{serving.result()}")

    @property
    def lost(self) -> int:
        """Its executors told that the host's lease is lost."""
        return sum(e.lost for e in self.executors)

    @property
    def moved(self) -> int:
        """Its executors on leases of their own."""
        return sum(e.moved for e in self.executors)

    async def vanish(self) -> None:
        """Stop at once, as a host that lost its power: the keeper's renewals stop, then the
        executors' watches and their hold on the keeper (else, told of no renewal, they
        would move to leases of their own); etcd alone ends the host's lease."""
        assert self.keeper is not None and self.keeper.renewals is not None  # started
        await self.keeper.renewals.stop(revoke=False)
        await asyncio.gather(*(e.stop() for e in self.executors))

    async def revoke(self) -> None:
        """Revoke the host's lease: what its expiry does, at once."""
        assert self.store is not None and self.keeper is not None  # started
        await self.store.revoke_lease(self.keeper.lease.id)

    async def stop(self) -> None:
        """End it: stopped as a lost host is, then the keeper stops serving and revokes its
        lease, which none holds any more."""
        await self.vanish()
        assert self.keeper is not None and self.serving is not None  # started
        self.keeper.stop()
        await self.serving


class RawLeaseHolder:
    """The peer: a bare lease renewed every TTL / 3 on one long-lived keepalive stream of its
    own connection, as etcd's Go client keeps a lease."""

    def __init__(self, job: WorkerJob, index: int) -> None:
        self.job = job
        self.index = index
        self.lease_lost = False
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        channel = grpc.aio.insecure_channel(self.job.etcd_url.split("://", 1)[-1])
        stub = rpc.LeaseStub(channel)
        grant = await stub.LeaseGrant(rpc.LeaseGrantRequest(TTL=self.job.ttl), timeout=10)
        self.task = asyncio.ensure_future(self._keep(stub, grant.ID))

    @property
    def lost(self) -> bool:
        return self.lease_lost

    async def _keep(self, stub: rpc.LeaseStub, lease_id: int) -> None:
        stream = stub.LeaseKeepAlive()
        # Started together, the leases would renew in bursts: spread them as executors'
        # start-ups spread theirs.
        await asyncio.sleep(random.uniform(0, self.job.ttl / 3))
        while True:
            began = time.monotonic()
            try:
                await stream.write(rpc.LeaseKeepAliveRequest(ID=lease_id))
                reply = await stream.read()
            except grpc.aio.AioRpcError:
                RENEWALS.failures += 1
                stream = stub.LeaseKeepAlive()
                continue
            RENEWALS.latencies.append(time.monotonic() - began)
            if reply.TTL <= 0:
                self.lease_lost = True
                return
            await asyncio.sleep(self.job.ttl / 3)


async def received(conn: Connection) -> Any:
    """The next message on ``conn``, awaited in the event loop (no thread blocks on it, so
    that a cancellation, Ctrl-C, ends the wait)."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), wake)
    try:
        await readable
    finally:
        loop.remove_reader(conn.fileno())
    return conn.recv()


def run_worker(conn: Connection, job: WorkerJob) -> None:
    """A worker process: start every executor of its hosts, then answer the benchmark's
    commands (``stats``, ``revoke HOST``, ``silence HOST``, ``stop``) until told to stop.

    It runs niced: on a cluster the executors run on their own hosts and take no CPU from etcd
    or the AM, so here they yield it to them; when the machine is short of CPU, the simulated
    renewals are the ones that lag (and the lag is theirs, not etcd's).
    """
    os.nice(WORKER_NICE)
    asyncio.run(_work(conn, job))


async def _work(conn: Connection, job: WorkerJob) -> None:
    with tempfile.TemporaryDirectory(prefix="primus-bench-hosts-") as directory:
        units: list[SimulatedHost | RawLeaseHolder]
        if job.raw:
            units = [RawLeaseHolder(job, host * HOST_SIZE + i)
                     for host in job.hosts for i in range(HOST_SIZE)]
            gate = asyncio.Semaphore(START_CONCURRENCY)
        else:
            units = [SimulatedHost(job, host, os.path.join(directory, host_name(host)))
                     for host in job.hosts]
            gate = asyncio.Semaphore(max(START_CONCURRENCY // HOST_SIZE, 1))
        began = time.monotonic()

        async def start(unit: SimulatedHost | RawLeaseHolder) -> None:
            async with gate:
                await unit.start()

        await asyncio.gather(*(start(u) for u in units))
        conn.send({"started": time.monotonic() - began})
        hosts = [u for u in units if isinstance(u, SimulatedHost)]  # the lost ones too
        while True:
            command, number = await received(conn)
            if command == "stats":
                conn.send(RENEWALS.take(sum(u.lost for u in units), sum(
                    u.moved for u in units if isinstance(u, SimulatedHost))))
            elif command in ("revoke", "silence"):
                host = next(h for h in hosts if h.number == number)
                if host.lost:  # not a host that is lost at once: another one
                    conn.send(None)
                    continue
                await host.vanish()
                units = [u for u in units if u is not host]
                began_at = time.time()
                if command == "revoke":
                    await host.revoke()
                conn.send(began_at)
            else:
                await asyncio.gather(*(h.stop() for h in hosts))
                return


@dataclass
class Worker:
    """The benchmark's handle on one worker process."""

    process: multiprocessing.process.BaseProcess
    conn: Connection
    hosts: tuple[int, ...]

    async def ask(self, command: str, host: int = -1) -> Any:
        self.conn.send((command, host))
        return await received(self.conn)


async def start_workers(box: Sandbox, app_id: str, count: int, per_worker: int, ttl: int,
                        cluster_revision: int, raw: bool = False) -> tuple[list[Worker], float]:
    """Start the worker processes of ``count`` executors; return them once every executor
    runs, and how long that took."""
    context = multiprocessing.get_context("spawn")
    hosts_per_worker = max(per_worker // HOST_SIZE, 1)
    hosts = list(range(math.ceil(count / HOST_SIZE)))
    workers = []
    began = time.monotonic()
    for first in range(0, len(hosts), hosts_per_worker):
        mine = tuple(hosts[first:first + hosts_per_worker])
        job = WorkerJob(box.etcd_url, box.env["PRIMUS_PREFIX"], app_id, ttl, mine,
                        cluster_revision, raw)
        parent, child = context.Pipe()
        process = context.Process(target=run_worker, args=(child, job), daemon=True)
        process.start()
        workers.append(Worker(process, parent, mine))
    for worker in workers:
        async with asyncio.timeout(READY_TIMEOUT):
            ready = await received(worker.conn)
        if "started" not in ready:
            raise RuntimeError(f"a worker failed: {ready}")
    return workers, time.monotonic() - began


def stop_workers(workers: Sequence[Worker]) -> None:
    for worker in workers:
        with contextlib.suppress(OSError):
            worker.conn.send(("stop", -1))
    for worker in workers:
        worker.process.join(10)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(5)


# --- the application as an AM that launched it would have left it --------------------------------


def job_spec(count: int, ttl: int) -> JobSpec:
    return JobSpec(name="scale", roles=[RoleSpec(
        name=ROLE, num=count, command="exec sleep infinity", restart_policy="never",
        failure_action="fail_executor")], policy=PolicySpec(heartbeat_ttl=ttl))


def app_records(keys: AppKeys, count: int, ttl: int, now: float) -> tuple[list[Put], bytes]:
    """Every key the application has once its AM launched ``count`` executors, all RUNNING,
    and its AM died; and the cluster spec (written apart: its size is one of the figures)."""
    spec = job_spec(count, ttl)
    hosts = [Host(name=host_name(h), address=host_address(h), python=sys.executable,
                  slots=HOST_SIZE, cpu=float(HOST_SIZE), memory=HOST_SIZE * 2**30, gpus=0)
             for h in range(math.ceil(count / HOST_SIZE))]
    status = AppStatus(app_id=keys.app_id, name=spec.name, state=AppState.RUNNING,
                       user="bench", submit_host=platform.node(), submit_time=now - 60,
                       start_time=now - 50)
    sched = keys.scheduler
    puts = [Put(keys.spec, spec.model_dump_json().encode()), Put(keys.status, encode(status)),
            Put(keys.hosts, encode_hosts(hosts)), Put(keys.desired(ROLE), str(count).encode())]
    puts += [Put(sched.host(h.name), encode_host(h)) for h in hosts]
    members = {}
    for index in range(count):
        host = hosts[host_of(index)]
        work = Path(f"/var/tmp/primus/apps/{keys.app_id}")
        plan = ExecutorPlan(role=ROLE, index=index, attempt=1, host=host.name,
                            address=host.address, state=ExecutorState.RUNNING,
                            launch_time=now - 45,
                            process=process_ref(host.name, index, False, now - 45),
                            trainer=process_ref(host.name, index, True, now - 40),
                            log_file=str(work / f"{ROLE}-{index}.log"),
                            executor_log=str(work / f"{ROLE}-{index}.executor.log"))
        reservation = Reservation(app_id=keys.app_id, user="bench", queue="", role=ROLE,
                                  index=index, host=host.name, cpu=1.0, memory=2**30,
                                  since=now - 55)
        puts += [Put(keys.executor(ROLE, index, "plan"), encode(plan)),
                 Put(sched.reservation(keys.app_id, ROLE, index), encode(reservation))]
        members[(ROLE, index)] = (host.address, [TRAINER_PORT + index % HOST_SIZE], 1)
    # The last EVENT_LOG_SIZE events, as the AM keeps them: placements, then the cluster.
    for seq in range(EVENT_LOG_SIZE):
        index = count - EVENT_LOG_SIZE + seq
        event = AppEvent(seq=count + seq, time=now - 40, kind="executor-state",
                         message=f"{ROLE}-{index} RUNNING", role=ROLE, index=index) \
            if index >= 0 else AppEvent(seq=count + seq, time=now - 40, kind="placed",
                                        message=f"{ROLE}-{seq} placed on {host_name(0)}")
        puts.append(Put(keys.event(count + seq), encode(event)))
    cluster = build_cluster(spec, 1, members, version=1)
    return puts, encode(cluster)


async def record_app(store: Coordinator, keys: AppKeys, count: int, ttl: int) -> int:
    """Write the application's keys; return the cluster spec's revision."""
    puts, cluster = app_records(keys, count, ttl, time.time())
    for first in range(0, len(puts), MAX_TXN_OPS):
        await store.txn([], puts[first:first + MAX_TXN_OPS])
    return await store.put(keys.cluster, cluster)


# --- measuring ---------------------------------------------------------------------------------


def etcd_metrics(box: Sandbox) -> dict[str, float]:
    """The keepalive counters of etcd's /metrics (every label set of each summed)."""
    with urllib.request.urlopen(f"{box.etcd_url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    sums = {KEEPALIVES: 0.0, KEEPALIVE_STREAMS: 0.0}
    for line in text.splitlines():
        for name in sums:
            if line.startswith(name):
                sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


def cpu_of(pids: Sequence[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


def machine_busy() -> float:
    times = psutil.cpu_times()
    return times.user + times.nice + times.system + times.irq + times.softirq + times.steal


@dataclass
class Window:
    """``seconds`` of the model left alone: what etcd, the simulation, the AM and the rest of
    the machine did meanwhile."""

    keepalives_per_s: float
    streams_per_s: float
    etcd_cpu: float
    """Share of one core, 0..1 (and beyond, on several cores)."""
    etcd_rss_mb: float
    simulation_cpu: float
    am_cpu: float
    others_cpu: float
    failures: int
    lost: int
    moved: int
    watches_failed: int
    latencies: list[float]


async def window(box: Sandbox, workers: Sequence[Worker], seconds: float,
                 am_pid: int | None = None) -> Window:
    for worker in workers:
        await worker.ask("stats")  # starts the workers' counts anew
    simulation = [w.process.pid for w in workers if w.process.pid is not None]
    ours = [box.etcd_pid, *simulation, *([am_pid] if am_pid else []), os.getpid()]
    before = (time.monotonic(), etcd_metrics(box), cpu_of([box.etcd_pid]), cpu_of(simulation),
              cpu_of([am_pid] if am_pid else []), cpu_of(ours), machine_busy())
    await asyncio.sleep(seconds)
    after = (time.monotonic(), etcd_metrics(box), cpu_of([box.etcd_pid]), cpu_of(simulation),
             cpu_of([am_pid] if am_pid else []), cpu_of(ours), machine_busy())
    stats = [await worker.ask("stats") for worker in workers]
    elapsed = after[0] - before[0]
    return Window(
        keepalives_per_s=(after[1][KEEPALIVES] - before[1][KEEPALIVES]) / elapsed,
        streams_per_s=(after[1][KEEPALIVE_STREAMS] - before[1][KEEPALIVE_STREAMS]) / elapsed,
        etcd_cpu=(after[2] - before[2]) / elapsed,
        etcd_rss_mb=psutil.Process(box.etcd_pid).memory_info().rss / MB,
        simulation_cpu=(after[3] - before[3]) / elapsed,
        am_cpu=(after[4] - before[4]) / elapsed,
        others_cpu=max(0.0, (after[6] - before[6]) - (after[5] - before[5])) / elapsed,
        failures=sum(s["failures"] for s in stats),
        lost=sum(s["lost"] for s in stats),
        moved=sum(s["moved"] for s in stats),
        watches_failed=sum(s["watches_failed"] for s in stats),
        latencies=[x for s in stats for x in s["latencies"]])


@dataclass(frozen=True)
class Change:
    """One change under the application's executors, stamped when it arrived here."""

    received: float
    type: EventType
    key: str
    state: str


class Timeline:
    """Every change under the application's ``executors/``, stamped on arrival."""

    def __init__(self, store: Coordinator, keys: AppKeys) -> None:
        self.store = store
        self.keys = keys
        self.changes: list[Change] = []
        self.arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        revision = (await self.store.get_prefix(self.keys.status)).revision
        self._task = asyncio.ensure_future(self._watch(revision + 1))

    async def _watch(self, revision: int) -> None:
        async for event in self.store.watch_prefix(self.keys.executors, revision):
            received = time.time()
            if isinstance(event, Resync):
                continue
            parsed = self.keys.parse_executor(event.key)
            state = decode(ExecutorPlan, event.value).state.value \
                if parsed is not None and parsed.kind == "plan" and \
                event.type is EventType.PUT else ""
            self.changes.append(Change(received, event.type, event.key, state))
            self.arrived.set()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def plans_written(self, after: float) -> list[Change]:
        return [c for c in self.changes if c.received >= after and c.key.endswith("/plan")]

    async def until(self, found: Callable[[], float | None], deadline: float) -> float:
        """Wait for the changes to make ``found`` give a time; ``math.inf`` if they have not
        by ``deadline`` (on the monotonic clock)."""
        while (value := found()) is None:
            self.arrived.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return math.inf
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.arrived.wait()
        return value


@dataclass
class LostHost:
    """One host's 8 executors lost: seconds from the revoke (or the silence) to each step
    (``math.inf``: not within the benchmark's timeout)."""

    expired: float
    """The last of its live keys' deletions arriving here."""
    first_lost: float
    last_lost: float


async def lose_host(timeline: Timeline, worker: Worker, host: int, command: str,
                    timeout: float) -> LostHost | None:
    """Revoke (or silence) ``host``'s lease; time the deletions and the AM's decisions.
    ``None`` when the host's lease was lost already (nothing is done to it)."""
    keys = timeline.keys
    indices = range(host * HOST_SIZE, (host + 1) * HOST_SIZE)
    lives = {keys.executor(ROLE, i, "live") for i in indices}
    plans = {keys.executor(ROLE, i, "plan") for i in indices}
    began = await worker.ask(command, host)
    if began is None:
        return None
    deadline = time.monotonic() + timeout

    def deleted() -> float | None:
        seen = [c.received for c in timeline.changes if c.received >= began and
                c.key in lives and c.type is EventType.DELETE]
        return max(seen) if len(seen) == len(lives) else None

    def decided() -> float | None:
        seen = [c.received for c in timeline.changes if c.received >= began and
                c.key in plans and c.state == ExecutorState.LOST.value]
        return max(seen) if len(seen) == len(plans) else None

    expired = await timeline.until(deleted, deadline)
    last = await timeline.until(decided, deadline)
    first = min((c.received for c in timeline.changes if c.received >= began and
                 c.key in plans and c.state == ExecutorState.LOST.value), default=math.inf)
    return LostHost(expired - began, first - began, last - began)


async def lose_hosts(timeline: Timeline, workers: Sequence[Worker], count: int, command: str,
                     timeout: float, exclude: Sequence[int] = ()) -> list[tuple[int, LostHost]]:
    """Lose ``count`` hosts one after the other, spread over the workers and away from the
    first hosts (whose executors the AM lists first), skipping those whose lease was lost
    already."""
    by_host = {h: w for w in workers for h in w.hosts}
    hosts = sorted(by_host)
    spread = [hosts[(i * 7919 + len(hosts) // 3) % len(hosts)] for i in range(len(hosts))]
    lost: list[tuple[int, LostHost]] = []
    for host in spread:
        if len(lost) == count:
            break
        if host in exclude or any(host == h for h, _ in lost):
            continue
        measured = await lose_host(timeline, by_host[host], host, command, timeout)
        if measured is not None:
            lost.append((host, measured))
    return lost


async def decide_pass(store: Coordinator, keys: AppKeys, count: int
                      ) -> tuple[float, float, float]:
    """Seconds to build the AM's view from one read of the application (what an AM does once,
    when it takes over), of one ``decide`` pass on it (what it does on every event and every
    second), and of one pass on the view without the live keys of a tenth of the executors
    (lost at once), timed in this process."""
    snapshot = await read_app_keys(store, keys)
    began = time.perf_counter()
    view = AppView.from_snapshot(keys, snapshot)
    built = time.perf_counter() - began
    hosts = decode_hosts(next(kv.value for kv in snapshot.kvs if kv.key == keys.hosts))
    began = time.perf_counter()
    decide(view, time.time(), hosts)
    one = time.perf_counter() - began
    gone = {keys.executor(ROLE, index, "live") for index in range(count // LOST_AT_ONCE)}
    view = AppView.from_snapshot(keys, Snapshot(snapshot.revision, tuple(
        kv for kv in snapshot.kvs if kv.key not in gone)))
    began = time.perf_counter()
    decide(view, time.time(), hosts)
    return built, one, time.perf_counter() - began


def memory_mb(pid: int) -> tuple[float, float]:
    info = psutil.Process(pid).memory_full_info()
    return info.rss / MB, info.uss / MB


def etcd_db_size(box: Sandbox) -> tuple[float, float]:
    """etcd's database size and the part of it in use, in MB (``etcdctl endpoint status``)."""
    etcdctl = Path(sys.executable).with_name("etcdctl")
    done = subprocess.run([str(etcdctl if etcdctl.exists() else "etcdctl"),
                           f"--endpoints={box.etcd_url}", "endpoint", "status", "-w", "json"],
                          capture_output=True, text=True, check=True, timeout=30)
    status = json.loads(done.stdout)[0]["Status"]
    return status["dbSize"] / MB, status.get("dbSizeInUse", status["dbSize"]) / MB


@dataclass
class Keyspace:
    keys: int
    bytes: int
    by_kind: dict[str, tuple[int, int]]
    db_mb: float
    db_in_use_mb: float
    cluster_bytes: int
    cluster_read_s: float


def key_kind(keys: AppKeys, key: str) -> str:
    parsed = keys.parse_executor(key)
    if parsed is not None:
        return parsed.kind
    if key.startswith(keys.scheduler.reservations(keys.app_id)):
        return "reservation"
    if key.startswith(keys.scheduler.hosts):
        return "admission host"
    if key.startswith(keys.events):
        return "event"
    return "other"


async def keyspace(box: Sandbox, store: Coordinator, keys: AppKeys) -> Keyspace:
    by_kind: dict[str, tuple[int, int]] = {}
    for prefix in (keys.root, keys.scheduler.root):
        for kv in (await store.get_prefix(prefix)).kvs:
            kind = "cluster" if kv.key == keys.cluster else key_kind(keys, kv.key)
            count, size = by_kind.get(kind, (0, 0))
            by_kind[kind] = (count + 1, size + len(kv.key) + len(kv.value))
    reads = []
    for _ in range(5):
        began = time.monotonic()
        cluster = await store.get(keys.cluster)
        reads.append(time.monotonic() - began)
    db, in_use = await asyncio.to_thread(etcd_db_size, box)
    return Keyspace(sum(c for c, _ in by_kind.values()), sum(s for _, s in by_kind.values()),
                    by_kind, db, in_use, len(cluster.value) if cluster else 0,
                    statistics.median(reads))


# --- one count ---------------------------------------------------------------------------------


@dataclass
class Model:
    """Every figure of the model at one executor count."""

    count: int
    started_s: float
    alone: Window
    with_am: Window
    takeover_s: float
    am_rss_mb: float
    am_uss_mb: float
    records_bytes: int
    """Bytes of the plan, live and reservation values the AM holds in its view."""
    rewritten: int
    """Plans the AM wrote while adopting and idle: as many as executors were lost by then when
    every executor was adopted."""
    view_s: float
    decide_s: float
    mass_decide_s: float
    """One ``decide`` pass with a tenth of the executors lost at once."""
    revoked: list[LostHost]
    silent: LostHost | None
    space: Keyspace
    raw: Window | None = None


def start_am(box: Sandbox, app_id: str) -> subprocess.Popen[bytes]:
    log = box.root / f"am-{app_id}.log"
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "primus.am", "--app", app_id,
                                 "--log-file", str(log)], env=box.env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop_am(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 9)
    process.wait(10)


async def led(store: Coordinator, keys: AppKeys, am: subprocess.Popen[bytes],
              timeout: float) -> None:
    """Wait until the AM leads (its leader key exists); fail if it exits first."""
    deadline = time.monotonic() + timeout
    while await store.get(keys.leader) is None:
        if am.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the AM did not lead (exit {am.poll()})")
        await asyncio.sleep(0.05)


async def model(args: argparse.Namespace, count: int) -> Model:
    app_id = f"scale-{count}"
    with sandbox() as box:
        config = EtcdConfig(endpoints=(box.etcd_url,))
        store = await EtcdCoordinator.connect(config)
        keys = AppKeys(box.env["PRIMUS_PREFIX"], app_id)
        workers: list[Worker] = []
        am = None
        timeline = Timeline(store, keys)
        try:
            cluster_revision = await record_app(store, keys, count, args.ttl)
            workers, started = await start_workers(box, app_id, count, args.per_worker,
                                                   args.ttl, cluster_revision)
            console.print(f"N={count}: {count} executors running after {started:.1f}s",
                          style="dim")
            alone = await window(box, workers, args.window)
            await timeline.start()
            began = time.time()
            am = start_am(box, app_id)
            await led(store, keys, am, READY_TIMEOUT)
            takeover = time.time() - began
            with_am = await window(box, workers, args.window, am.pid)
            rss, uss = memory_mb(am.pid)
            rewritten = len(timeline.plans_written(began))
            view_s, decide_s, mass_decide_s = await decide_pass(store, keys, count)
            snapshot = await store.get_prefix(keys.executors)
            records = sum(len(kv.value) for kv in snapshot.kvs) + sum(
                len(kv.value) for kv in (await store.get_prefix(
                    keys.scheduler.reservations(app_id))).kvs)
            revoked = await lose_hosts(timeline, workers, args.repeat, "revoke",
                                       DECISION_TIMEOUT)
            for host, measured in revoked:
                console.print(f"N={count}: {host_name(host)} revoked: LOST after "
                              f"{measured.last_lost:.3f} s", style="dim")
            silent = None
            if args.expiry:
                silenced = await lose_hosts(timeline, workers, 1, "silence",
                                            args.ttl + DECISION_TIMEOUT,
                                            exclude=[h for h, _ in revoked])
                silent = silenced[0][1] if silenced else None
            space = await keyspace(box, store, keys)
            return Model(count, started, alone, with_am, takeover, rss, uss, records,
                         rewritten, view_s, decide_s, mass_decide_s,
                         [measured for _, measured in revoked], silent, space)
        finally:
            timeline.stop()
            if am is not None:
                stop_am(am)
            stop_workers(workers)
            await store.close()


async def baseline(args: argparse.Namespace, result: Model) -> None:
    """The peer's keepalive load, in a fresh etcd: a lease per executor, on long-lived
    streams."""
    with sandbox() as box:
        workers: list[Worker] = []
        try:
            workers, _ = await start_workers(box, "raw", result.count, args.per_worker,
                                             args.ttl, 0, raw=True)
            result.raw = await window(box, workers, args.window)
        finally:
            stop_workers(workers)


# --- report ------------------------------------------------------------------------------------


def pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "—"
    return "not seen" if seconds == math.inf else f"{seconds * 1000:.0f}"


def sec(seconds: float) -> str:
    if math.isnan(seconds):
        return "—"
    return "not seen" if seconds == math.inf else f"{seconds:.2f} s"


def per_renewal(measured: Window) -> str:
    """etcd's CPU per renewal, in microseconds (all its CPU counted against the renewals)."""
    if not measured.keepalives_per_s:
        return "—"
    return f"{measured.etcd_cpu / measured.keepalives_per_s * 1e6:.0f}"


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else math.nan


@dataclass(frozen=True)
class Target:
    """One of issue 28's targets, as the model measured it at one count."""

    name: str
    goal: str
    measured: str
    met: bool | None
    """None: not measured in this run (no peer, no host lost)."""


def lost_host_after_expiry(result: Model) -> float:
    """The slowest of the lost hosts, from its lease's end (the revoke; or, for the silent
    host, its live keys' deletions) to its last plan LOST."""
    after = [x.last_lost for x in result.revoked]
    if result.silent is not None:
        after.append(result.silent.last_lost - result.silent.expired)
    return max(after, default=math.nan)


def targets(result: Model) -> list[Target]:
    """Issue 28's targets at this count, met or not."""
    alone, raw = result.alone, result.raw
    lost = max(result.alone.lost, result.with_am.lost)
    decided = lost_host_after_expiry(result)
    return [
        Target("executors lost", "0", str(lost), lost == 0),
        Target("etcd CPU, executors alone", f"≤ {pct(LIVENESS_CPU)} of a core",
               pct(alone.etcd_cpu), alone.etcd_cpu <= LIVENESS_CPU),
        Target("executors' CPU", "≤ the peer's",
               f"{pct(alone.simulation_cpu)} (peer {pct(raw.simulation_cpu)})" if raw else "—",
               alone.simulation_cpu <= raw.simulation_cpu if raw else None),
        Target("a lost host all LOST after its expiry", f"≤ {LOST_HOST_S:g} s", sec(decided),
               decided <= LOST_HOST_S if not math.isnan(decided) else None),
        Target("AM start → leading", f"≤ {TAKEOVER_S:g} s", sec(result.takeover_s),
               result.takeover_s <= TAKEOVER_S),
    ]


def broke(result: Model) -> list[str]:
    """Why the model at this count no longer holds, if it does not: the targets it missed
    first."""
    reasons = [f"{t.name} {t.measured}, target {t.goal}" for t in targets(result)
               if t.met is False]
    failures = result.alone.failures + result.with_am.failures
    if failures:
        reasons.append(f"{failures} renewals failed")
    moved = max(result.alone.moved, result.with_am.moved)
    if moved:
        reasons.append(f"{moved} executors moved to leases of their own (their keeper silent)")
    if result.with_am.watches_failed:
        reasons.append(f"{result.with_am.watches_failed} cluster watches not opened")
    if result.rewritten > result.with_am.lost:
        reasons.append(f"the AM rewrote {result.rewritten} plans on takeover, "
                       f"{result.with_am.lost} of them of executors lost")
    if result.space.cluster_bytes > ETCD_MAX_REQUEST:
        reasons.append("cluster spec over etcd's request limit")
    return reasons


def report(results: list[Model], args: argparse.Namespace, elapsed: float) -> None:
    console.print(f"[bold]Scale model[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; heartbeat_ttl {args.ttl}s, "
                  f"{HOST_SIZE} executors a host, windows of {args.window:g}s; whole benchmark "
                  f"{elapsed:.0f}s")

    load = Table(title="Keepalive load on etcd (executors alone: a lease a host, renewed by "
                       "its keeper; peer: a lease an executor, on long-lived streams)",
                 title_justify="left")
    for column in ("N", "renewals/s (expected)", "streams opened/s", "etcd CPU",
                   "etcd CPU µs / renewal", "etcd RSS MB", "renewal p50 / p99 / max ms",
                   "failed / executors lost / on own lease", "executors' CPU", "others' CPU",
                   "peer: renewals/s (expected)", "peer: etcd CPU", "peer: µs / renewal",
                   "peer: etcd RSS MB", "peer: executors' CPU"):
        load.add_column(column, justify="right")
    for r in results:
        w, raw = r.alone, r.raw
        hosts = math.ceil(r.count / HOST_SIZE)
        load.add_row(
            str(r.count), f"{w.keepalives_per_s:.0f} ({hosts * 3 / args.ttl:.0f})",
            f"{w.streams_per_s:.0f}", pct(w.etcd_cpu), per_renewal(w), f"{w.etcd_rss_mb:.0f}",
            f"{ms(percentile(w.latencies, 0.5))} / {ms(percentile(w.latencies, 0.99))} / "
            f"{ms(max(w.latencies, default=math.nan))}", f"{w.failures} / {w.lost} / {w.moved}",
            pct(w.simulation_cpu), pct(w.others_cpu),
            f"{raw.keepalives_per_s:.0f} ({r.count * 3 / args.ttl:.0f})" if raw else "—",
            pct(raw.etcd_cpu) if raw else "—",
            per_renewal(raw) if raw else "—", f"{raw.etcd_rss_mb:.0f}" if raw else "—",
            pct(raw.simulation_cpu) if raw else "—")
    console.print(load)

    am = Table(title="The AM over N executors (a real AM taking the application over)",
               title_justify="left")
    for column in ("N", "start → leading s", "plans rewritten (executors lost)", "RSS MB",
                   "USS MB", "USS growth KB / executor", "floor: records KB / executor",
                   "AM CPU idle", "view built from a read s", "one decide pass ms",
                   f"one pass, N / {LOST_AT_ONCE} lost at once, s",
                   "etcd CPU with AM", "renewals failed"):
        am.add_column(column, justify="right")
    previous = None
    for r in results:
        growth = "—" if previous is None else \
            f"{(r.am_uss_mb - previous.am_uss_mb) * KB / (r.count - previous.count):.1f}"
        am.add_row(str(r.count), f"{r.takeover_s:.1f}", f"{r.rewritten} ({r.with_am.lost})",
                   f"{r.am_rss_mb:.0f}", f"{r.am_uss_mb:.0f}", growth,
                   f"{r.records_bytes / KB / r.count:.2f}", pct(r.with_am.am_cpu),
                   f"{r.view_s:.2f}", ms(r.decide_s), f"{r.mass_decide_s:.2f}",
                   pct(r.with_am.etcd_cpu),
                   str(r.with_am.failures))
        previous = r
    console.print(am)

    lost = Table(title=f"A host lost (its lease, its {HOST_SIZE} executors', revoked): ms "
                       f"from the revoke (median / max of {args.repeat})", title_justify="left")
    for column in ("N", "floor: live keys deleted, seen", "first plan LOST", "last plan LOST",
                   "AM after the floor", f"bound: TTL {args.ttl}s", "silent host: expired",
                   "silent host: last LOST", "AM after the expiry"):
        lost.add_column(column, justify="right")
    for r in results:
        def both(values: list[float]) -> str:
            if not values:
                return "—"
            return f"{ms(statistics.median(values))} / {ms(max(values))}"
        worst = max((x.last_lost for x in r.revoked), default=math.nan)
        silent = r.silent
        lost.add_row(str(r.count), both([x.expired for x in r.revoked]),
                     both([x.first_lost for x in r.revoked]),
                     both([x.last_lost for x in r.revoked]),
                     both([x.last_lost - x.expired for x in r.revoked]),
                     "[green]within[/]" if worst <= args.ttl else "[red]over[/]"
                     if worst > args.ttl else "—",
                     sec(silent.expired) if silent else "—",
                     sec(silent.last_lost) if silent else "—",
                     ms(silent.last_lost - silent.expired) if silent else "—")
    console.print(lost)

    space = Table(title="Keyspace (the application's keys and its admission keys)",
                  title_justify="left")
    kinds = sorted({k for r in results for k in r.space.by_kind})
    for column in ("N", "keys", "MB", *(f"{k} KB" for k in kinds), "etcd db MB (in use)",
                   "cluster spec KB (limit 1536)", "one read of it ms",
                   "2N reads at gang start GB"):
        space.add_column(column, justify="right")
    for r in results:
        s = r.space
        space.add_row(str(r.count), str(s.keys), f"{s.bytes / MB:.1f}",
                      *(f"{s.by_kind.get(k, (0, 0))[1] / KB:.0f}" for k in kinds),
                      f"{s.db_mb:.0f} ({s.db_in_use_mb:.0f})", f"{s.cluster_bytes / KB:.0f}",
                      f"{s.cluster_read_s * 1000:.1f}",
                      f"{2 * r.count * s.cluster_bytes / 1e9:.1f}")
    console.print(space)

    goals = Table(title="Issue 28's targets", title_justify="left")
    goals.add_column("N", justify="right")
    for target in targets(results[0]):
        goals.add_column(f"{target.name} ({target.goal})", justify="right")
    for r in results:
        goals.add_row(str(r.count), *(
            t.measured if t.met is None else f"[green]{t.measured}[/]" if t.met
            else f"[red]{t.measured}[/]" for t in targets(r)))
    console.print(goals)

    verdicts = Table(title="Where it breaks", title_justify="left")
    for column in ("N", "start of the simulation s", "verdict"):
        verdicts.add_column(column, justify="right" if column != "verdict" else "left")
    for r in results:
        reasons = broke(r)
        verdicts.add_row(str(r.count), f"{r.started_s:.0f}",
                         "[green]holds[/]" if not reasons else "[red]" + "; ".join(reasons) +
                         "[/]")
    console.print(verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,2500,5000,10000",
                        help="comma-separated executor counts (default: 1000,2500,5000,10000)")
    parser.add_argument("--ttl", type=int, default=PolicySpec().heartbeat_ttl,
                        help="heartbeat_ttl in seconds (default: the policy's default)")
    parser.add_argument("--window", type=float, default=30.0,
                        help="seconds of each load measurement (default: 30)")
    parser.add_argument("--repeat", type=int, default=3, help="hosts revoked per count "
                                                              "(default: 3)")
    parser.add_argument("--per-worker", type=int, default=1000,
                        help="executors per simulating process (default: 1000)")
    parser.add_argument("--expiry", action=argparse.BooleanOptionalAction, default=True,
                        help="also let one host's lease expire (default: on)")
    parser.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True,
                        help="measure the peer's keepalive load too, a lease per executor "
                             "(default: on)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: N = 96, the default TTL, windows of 1.5 s, one host "
                             "revoked, no expiry")
    args = parser.parse_args(argv)
    if args.quick:
        args.counts, args.window, args.repeat, args.expiry = "96", 1.5, 1, False
    counts = [int(c) for c in args.counts.split(",")]
    began = time.monotonic()
    if not args.quick:
        wait_for_quiet()
    results = []
    for count in counts:
        result = asyncio.run(model(args, count))
        if args.baseline:
            asyncio.run(baseline(args, result))
        results.append(result)
    report(results, args, time.monotonic() - began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
