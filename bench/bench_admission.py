"""Benchmark: admission (issue 12), the admission leader against the raw etcd work it needs.

Against a private etcd, one admission leader (:class:`primus.scheduler.leader.AdmissionLeader`,
in a process of its own, as in an AM or ``primus server``) and a host record
``scheduler/hosts/box``; the benchmark writes the requests an AM would write
(``scheduler/apps/<app>/request``, one executor each) and, as the AM does, deletes each request
once its reservation appeared. Three parts:

* **burst**: ``--apps`` (200) requests written back to back on a host with a slot for each;
  from each request's write to its reservation appearing (p50, p99), and admissions per second
  (from the first write to the last reservation). **Floors**: a raw *relay* process (a watch of
  ``scheduler/apps/``, one guarded transaction per request seen, in the order seen: the least
  any watch-driven leader does), and the guarded transactions alone, done directly one after the
  other as fast as possible (compares: leadership, the host's and the request's revisions; puts:
  the reservation, the host record, the granted request; delete: the waiting record). Beside
  them, the same burst through a host of ``--churn-slots`` (4) slots whose applications end at
  once (the benchmark deletes each reservation as it appears): 200 queued applications passing
  through a few slots.
* **serial**: one request at a time, the next written once the previous one's reservation
  appeared: the unloaded latency, beside the relay's.
* **handover**: a host of 1 slot; application A holds it, B's request waits (the leader has
  written B's waiting record); A's reservation is deleted (as its AM does when its executor ends
  for good) and the time until B's reservation appears is measured; B becomes A; ``--handovers``
  (100) times (target: median ≤ 100 ms). **Floor**: a raw etcd watch's delay for a write,
  interleaved, same connection.
* **drain**: a host of 1 slot held by A, B waiting for it; the host is drained
  (``scheduler/conditions/box``, as ``primus hosts drain`` writes) and the time until the
  leader's next decision says so (B's waiting record naming the host out of service) is
  measured, then it is resumed and the time until B waits for the slot again; ``--drains``
  (60) times each (target: the next admission round). **Floor**: a raw watch's delay.

Usage: ``python bench/bench_admission.py [--only burst|serial|handover|drain] [--repeat 3]
[--apps 200] [--serial 100] [--handovers 100] [--drains 60] [--churn-slots 4]``
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import psutil
from bench_submit import (
    Sandbox,
    console,
    etcd_version,
    med,
    parse_args,
    sandbox,
    wait_for_quiet,
)
from rich.table import Table

from primus.config.etcd import EtcdConfig
from primus.config.inventory import Host
from primus.config.spec import JobSpec, RoleSpec
from primus.state.keys import AppKeys, SchedulerKeys
from primus.state.records import (
    AdmissionRequest,
    AppOwner,
    HostCondition,
    Reservation,
    Waiting,
    decode,
    encode,
    encode_host,
    encode_hosts,
)
from primus.store.api import (
    Compare,
    Delete,
    EventType,
    Put,
    WatchEvent,
    key_created_at,
    key_unchanged_since,
)
from primus.store.etcd_store import EtcdCoordinator

HOST = "box"
T = TypeVar("T")
WRITES_METRIC = "etcd_server_proposals_committed_total"
HANDOVER_TARGET_MS = 100.0
TIMEOUT = 120.0
WARM_UP = 5
"""Requests (serial) and hand-overs done before measuring, in each run."""

# The admission leader as an AM or ``primus server`` runs it; its log (INFO: one line per
# admission and per refused write) goes to stderr, which the benchmark keeps in a file.
LEADER_PROCESS = """
import asyncio, logging, sys
from primus.scheduler.leader import AdmissionLeader
from primus.config.etcd import EtcdConfig
from primus.store.etcd_store import EtcdCoordinator

logging.basicConfig(stream=sys.stderr, format="%(created).4f %(message)s")
logging.getLogger("primus.scheduler.leader").setLevel(logging.INFO)

async def lead() -> None:
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(sys.argv[1],)))
    await AdmissionLeader(store, sys.argv[2]).run()

asyncio.run(lead())
"""

# The floor of a watch-driven leader: take the leadership key, then for every request that
# appears under scheduler/apps/ (in watch order, one at a time) run the one guarded transaction
# that admits it on the one host, whose revision it follows from its own writes.
RELAY_PROCESS = """
import asyncio, json, sys, time
from primus.state.keys import SchedulerKeys
from primus.config.etcd import EtcdConfig
from primus.store.api import Delete, EventType, Put, key_created_at, key_unchanged_since
from primus.store.etcd_store import EtcdCoordinator

async def relay() -> None:
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(sys.argv[1],)))
    keys, host = SchedulerKeys(sys.argv[2]), sys.argv[3]
    await store.put(keys.leader, b"relay")
    leader = await store.get(keys.leader)
    host_kv = await store.get(keys.host(host))
    guard, host_revision = key_created_at(keys.leader, leader.create_revision), host_kv.mod_revision
    async for event in store.watch_prefix(keys.apps, leader.mod_revision + 1):
        app_id, kind, _ = keys.parse(event.key)
        if kind != "request" or event.type is not EventType.PUT:
            continue
        request = json.loads(event.value)
        if request["granted"]:
            continue
        role = request["roles"][0]
        reservation = json.dumps({
            "app_id": app_id, "user": request["user"], "queue": request["queue"],
            "role": role["name"], "index": 0, "host": host, "cpu": role["cpu"],
            "memory": role["memory"], "gpus": [], "since": time.time()}).encode()
        request["granted"] = True
        result = await store.txn(
            [guard, key_unchanged_since(keys.host(host), host_revision),
             key_unchanged_since(event.key, event.revision)],
            [Put(keys.reservation(app_id, role["name"], 0), reservation),
             Put(keys.host(host), host_kv.value), Put(event.key, json.dumps(request).encode()),
             Delete(keys.waiting(app_id))])
        if not result.succeeded:
            raise SystemExit(f"relay: the transaction admitting {app_id} was refused")
        host_revision = result.revision

asyncio.run(relay())
"""


# --- what the benchmark writes and sees ---------------------------------------------------------


WORKER = RoleSpec.model_validate({"name": "worker", "command": "true", "cpu": 0.5,
                                  "memory": "64Mi"})


def request(app_id: str) -> AdmissionRequest:
    """What an AM writes for a job of one executor that may use the host ``box``."""
    return AdmissionRequest(app_id=app_id, user="bench", queue="", submit_time=time.time(),
                            hosts=[HOST], roles=[WORKER], executors=[("worker", 0)])


async def record_apps(store: EtcdCoordinator, prefix: str, names: Sequence[str]) -> None:
    """Write what submit writes of each application and admission vets its request against
    (its owner record, spec and hosts), as submit would have before any request."""
    spec = JobSpec(name="bench", roles=[WORKER]).model_dump_json().encode()
    hosts = encode_hosts([Host(HOST, "127.0.0.1")])
    for start in range(0, len(names), 30):
        ops = []
        for name in names[start:start + 30]:
            keys = AppKeys(prefix, name)
            ops += [Put(keys.owner, encode(AppOwner(app_id=name, name=name, user="bench",
                                                    submit_time=time.time()))),
                    Put(keys.spec, spec), Put(keys.hosts, hosts)]
        await store.txn([], ops)


class Follower:
    """Watches ``scheduler/apps/``: when each application's reservation and waiting record
    appeared, and plays each application's AM: once its reservation appeared, deletes its
    request (and, for applications that end at once, the reservation)."""

    def __init__(self, store: EtcdCoordinator, keys: SchedulerKeys, end_at_once: bool) -> None:
        self.store, self.keys, self.end_at_once = store, keys, end_at_once
        self.reserved: dict[str, asyncio.Future[float]] = {}
        self.waiting: dict[str, asyncio.Future[float]] = {}
        self.writes: set[asyncio.Task[object]] = set()

    def _future(self, table: dict[str, asyncio.Future[float]], app_id: str
                ) -> asyncio.Future[float]:
        if app_id not in table:
            table[app_id] = asyncio.get_running_loop().create_future()
        return table[app_id]

    def reservation(self, app_id: str) -> asyncio.Future[float]:
        return self._future(self.reserved, app_id)

    def waits(self, app_id: str) -> asyncio.Future[float]:
        return self._future(self.waiting, app_id)

    async def follow(self, revision: int) -> None:
        async for event in self.store.watch_prefix(self.keys.apps, revision):
            if not isinstance(event, WatchEvent) or event.type is not EventType.PUT:
                continue
            at = time.perf_counter()
            app_id, kind, _ = self.keys.parse(event.key)
            if kind == "reservations":
                future = self.reservation(app_id)
                if not future.done():
                    future.set_result(at)
                    self._act_as_am(app_id)
            elif kind == "waiting":
                future = self.waits(app_id)
                if not future.done():
                    future.set_result(at)

    def _act_as_am(self, app_id: str) -> None:
        ops: list[Delete] = [Delete(self.keys.request(app_id))]
        if self.end_at_once:
            ops.append(Delete(self.keys.reservation(app_id, "worker", 0)))
        task = asyncio.ensure_future(self.store.txn([], ops))
        self.writes.add(task)
        task.add_done_callback(self.writes.discard)

    async def settle(self) -> None:
        await asyncio.gather(*self.writes)


@dataclass
class Run:
    """One run of requests: per request, seconds from its write to its reservation."""

    latencies: list[float]
    seconds: float
    """From the first write to the last reservation."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds by process (``leader``, ``etcd``) meanwhile."""
    refused: int = 0
    """Writes of the leader etcd refused (a host or request changed since it read them)."""
    writes: int = 0
    """Writes etcd committed meanwhile (its metrics), every writer's: the benchmark's requests
    and deletes too."""

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds


def percentile(values: Sequence[float], share: float) -> float:
    """The smallest value that at least ``share`` of ``values`` do not exceed."""
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


def etcd_writes(box: Sandbox) -> int:
    """Writes (puts, deletes, transactions, refused or not) etcd has committed through raft
    since it started (``etcd_server_proposals_committed_total``)."""
    with urllib.request.urlopen(f"{box.etcd_url}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(f"{WRITES_METRIC} "):
                return int(float(line.split()[1]))
    raise RuntimeError(f"etcd's /metrics has no {WRITES_METRIC}")


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


class Meter:
    """CPU seconds of the leader (if any) and etcd, and etcd's writes, since made."""

    def __init__(self, box: Sandbox, leader: Leader | None) -> None:
        self.box = box
        self.pids = {"etcd": box.etcd_pid} | ({"leader": leader.process.pid} if leader else {})
        self.cpu = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.writes = etcd_writes(box)

    def fill(self, run: Run) -> Run:
        run.cpu = {name: cpu_seconds(pid) - self.cpu[name] for name, pid in self.pids.items()}
        run.writes = etcd_writes(self.box) - self.writes
        return run


class Leader:
    """A leader process (Primus's, or the relay floor) for one prefix; stopped on exit."""

    def __init__(self, box: Sandbox, prefix: str, kind: str) -> None:
        self.log = box.root / f"{prefix.strip('/').replace('/', '-')}.log"
        script = LEADER_PROCESS if kind == "primus" else RELAY_PROCESS
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([sys.executable, "-c", script, box.etcd_url, prefix,
                                             HOST], env=box.env, stderr=log)

    async def wait_leading(self, store: EtcdCoordinator, keys: SchedulerKeys) -> None:
        deadline = time.monotonic() + 30.0
        while await store.get(keys.leader) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no leader for {keys.root}: {self.log.read_text()}")
            await asyncio.sleep(0.05)

    def refused(self) -> int:
        return self.log.read_text().count("a write was refused")

    async def wait(self, seen: Awaitable[T]) -> T:
        """``seen``'s result; an error with the leader's log if it does not come in time."""
        try:
            return await asyncio.wait_for(seen, TIMEOUT)
        except TimeoutError:
            raise RuntimeError(f"not seen within {TIMEOUT:g}s (leader "
                               f"{'exited' if self.process.poll() is not None else 'running'}"
                               f"): {self.log.read_text()[-3000:]}") from None

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


async def prepared(box: Sandbox, prefix: str, slots: int, kind: str, end_at_once: bool
                   ) -> tuple[EtcdCoordinator, SchedulerKeys, Leader, Follower, asyncio.Task[None]]:
    """A host of ``slots`` under ``prefix``, a leader of ``kind`` leading, and a follower."""
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(box.etcd_url,)))
    keys = SchedulerKeys(prefix)
    revision = await store.put(keys.host(HOST), encode_host(
        Host(name=HOST, address="127.0.0.1", slots=slots)))
    follower = Follower(store, keys, end_at_once)
    following = asyncio.ensure_future(follower.follow(revision + 1))
    leader = Leader(box, prefix, kind)
    await leader.wait_leading(store, keys)
    return store, keys, leader, follower, following


async def finished(store: EtcdCoordinator, leader: Leader, follower: Follower,
                   following: asyncio.Task[None]) -> None:
    leader.stop()
    await follower.settle()
    following.cancel()
    await asyncio.gather(following, return_exceptions=True)
    await store.close()


# --- burst --------------------------------------------------------------------------------------


async def burst(box: Sandbox, prefix: str, apps: int, slots: int, kind: str,
                end_at_once: bool = False) -> Run:
    """``apps`` requests written back to back; each one's write → its reservation."""
    store, keys, leader, follower, following = await prepared(box, prefix, slots, kind,
                                                              end_at_once)
    try:
        names = [f"app{i:04d}" for i in range(apps)]
        await record_apps(store, prefix, names)
        values = {name: encode(request(name)) for name in names}
        meter = Meter(box, leader)
        written: dict[str, float] = {}
        started = time.perf_counter()
        for name in names:
            follower.reservation(name)
            await store.put(keys.request(name), values[name])
            written[name] = time.perf_counter()
        reserved = await leader.wait(
            asyncio.gather(*(follower.reservation(name) for name in names)))
        return meter.fill(Run([at - written[name]
                                for name, at in zip(names, reserved, strict=True)],
                               max(reserved) - started, refused=leader.refused()))
    finally:
        await finished(store, leader, follower, following)


async def direct_txns(box: Sandbox, prefix: str, apps: int) -> Run:
    """The floor: the guarded transaction admitting each of ``apps`` requests, run directly one
    after the other (the requests are written beforehand, untimed)."""
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(box.etcd_url,)))
    keys = SchedulerKeys(prefix)
    try:
        await store.put(keys.leader, b"floor")
        leader = await store.get(keys.leader)
        if leader is None:
            raise RuntimeError(f"{keys.leader} vanished after it was written")
        guard = key_created_at(keys.leader, leader.create_revision)
        host = encode_host(Host(name=HOST, address="127.0.0.1", slots=apps))
        host_revision = await store.put(keys.host(HOST), host)
        requests = [request(f"app{i:04d}") for i in range(apps)]
        revisions = [await store.put(keys.request(r.app_id), encode(r)) for r in requests]
        meter = Meter(box, None)
        latencies = []
        started = time.perf_counter()
        for item, revision in zip(requests, revisions, strict=True):
            before = time.perf_counter()
            reservation = Reservation(app_id=item.app_id, user=item.user, queue=item.queue,
                                      role="worker", index=0, host=HOST, cpu=WORKER.cpu,
                                      memory=WORKER.memory, since=time.time())
            granted = item.model_copy(update={"granted": True})
            compares: list[Compare] = [guard, key_unchanged_since(keys.host(HOST), host_revision),
                                       key_unchanged_since(keys.request(item.app_id), revision)]
            result = await store.txn(compares, [
                Put(keys.reservation(item.app_id, "worker", 0), encode(reservation)),
                Put(keys.host(HOST), host), Put(keys.request(item.app_id), encode(granted)),
                Delete(keys.waiting(item.app_id))])
            if not result.succeeded:
                raise RuntimeError(f"the floor's transaction admitting {item.app_id} was refused")
            host_revision = result.revision
            latencies.append(time.perf_counter() - before)
        return meter.fill(Run(latencies, time.perf_counter() - started))
    finally:
        await store.close()


# --- serial -------------------------------------------------------------------------------------


async def serial(box: Sandbox, prefix: str, count: int, kind: str) -> Run:
    """``count`` requests, each written once the previous one's reservation appeared."""
    store, keys, leader, follower, following = await prepared(box, prefix, count + WARM_UP,
                                                              kind, False)
    try:
        latencies = []
        await record_apps(store, prefix, [f"app{i:04d}" for i in range(WARM_UP + count)])
        started, meter = time.perf_counter(), Meter(box, leader)
        for i in range(WARM_UP + count):
            name = f"app{i:04d}"
            follower.reservation(name)
            if i == WARM_UP:
                started, meter = time.perf_counter(), Meter(box, leader)
            await store.put(keys.request(name), encode(request(name)))
            written = time.perf_counter()
            reserved = await leader.wait(follower.reservation(name))
            if i >= WARM_UP:
                latencies.append(reserved - written)
        return meter.fill(Run(latencies, time.perf_counter() - started,
                              refused=leader.refused()))
    finally:
        await finished(store, leader, follower, following)


# --- handover -----------------------------------------------------------------------------------


@dataclass
class Handovers:
    after_ack: list[float]
    """Seconds from the acknowledged delete of A's reservation to B's reservation seen."""
    after_write: list[float]
    """The same from just before the delete."""
    floor: list[float]
    """Seconds from a probe write's acknowledgement to its raw watch event, interleaved."""
    refused: int


async def handover(box: Sandbox, prefix: str, count: int) -> Handovers:
    """A host of 1 slot, handed from one application to the next ``count`` times."""
    store, keys, leader, follower, following = await prepared(box, prefix, 1, "primus", False)
    probe_key = f"{prefix}/probe"
    probes: asyncio.Queue[float] = asyncio.Queue()

    async def watch_probe(revision: int) -> None:
        async for event in store.watch_prefix(probe_key, revision):
            if isinstance(event, WatchEvent):
                probes.put_nowait(time.perf_counter())

    probing = asyncio.ensure_future(watch_probe(await store.put(probe_key, b"start") + 1))
    try:
        result = Handovers([], [], [], 0)
        holder = "app0000"
        await record_apps(store, prefix, [f"app{i:04d}" for i in range(WARM_UP + count + 1)])
        await store.put(keys.request(holder), encode(request(holder)))
        await leader.wait(follower.reservation(holder))
        for i in range(1, WARM_UP + count + 1):
            name = f"app{i:04d}"
            await store.put(keys.request(name), encode(request(name)))
            await leader.wait(follower.waits(name))
            follower.reservation(name)
            before = time.perf_counter()
            await store.delete(keys.reservation(holder, "worker", 0))
            acknowledged = time.perf_counter()
            reserved = await leader.wait(follower.reservation(name))
            await store.put(probe_key, f"probe {i}".encode())
            probe_acknowledged = time.perf_counter()
            probe_seen = await asyncio.wait_for(probes.get(), TIMEOUT)
            if i > WARM_UP:
                result.after_ack.append(reserved - acknowledged)
                result.after_write.append(reserved - before)
                result.floor.append(probe_seen - probe_acknowledged)
            holder = name
        result.refused = leader.refused()
        return result
    finally:
        probing.cancel()
        await asyncio.gather(probing, return_exceptions=True)
        await finished(store, leader, follower, following)


@dataclass
class Drains:
    drained: list[float]
    """Seconds from just before the condition's write to B's waiting record saying so."""
    resumed: list[float]
    """Seconds from just before the condition's delete to B waiting for the slot again."""
    floor: list[float]
    """Seconds from just before a probe write to its raw watch event, interleaved."""
    refused: int


async def drains(box: Sandbox, prefix: str, count: int) -> Drains:
    """A host of 1 slot held by A, B waiting; the host drained and resumed ``count`` times:
    from each condition written to B's waiting record saying so."""
    store, keys, leader, follower, following = await prepared(box, prefix, 1, "primus", False)
    reasons: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
    probe_key = f"{prefix}/probe"
    probes: asyncio.Queue[float] = asyncio.Queue()

    async def watch(key: str, revision: int, into: asyncio.Queue) -> None:  # type: ignore[type-arg]
        async for event in store.watch_prefix(key, revision):
            if isinstance(event, WatchEvent) and event.type is EventType.PUT:
                at = time.perf_counter()
                into.put_nowait(at if into is probes else
                                (at, decode(Waiting, event.value).reason))

    async def said(out: bool) -> float:
        while True:
            at, reason = await asyncio.wait_for(reasons.get(), TIMEOUT)
            if ("out of service" in reason) == out:
                return at

    await record_apps(store, prefix, ["holder", "waiter"])
    await store.put(keys.request("holder"), encode(request("holder")))
    await leader.wait(follower.reservation("holder"))
    start = await store.put(probe_key, b"start") + 1
    watching = [asyncio.ensure_future(watch(keys.waiting("waiter"), start, reasons)),
                asyncio.ensure_future(watch(probe_key, start, probes))]
    try:
        await store.put(keys.request("waiter"), encode(request("waiter")))
        await said(False)
        result = Drains([], [], [], 0)
        condition = encode(HostCondition(state="drained", reason="bench", since=time.time(),
                                         by="bench"))
        for i in range(WARM_UP + count):
            for write, out in ((Put(keys.condition(HOST), condition), True),
                               (Delete(keys.condition(HOST)), False)):
                before = time.perf_counter()
                await store.txn([], [write])
                seen = await said(out)
                probe_before = time.perf_counter()
                await store.put(probe_key, f"probe {i}".encode())
                probe_seen = await asyncio.wait_for(probes.get(), TIMEOUT)
                if i >= WARM_UP:
                    (result.drained if out else result.resumed).append(seen - before)
                    result.floor.append(probe_seen - probe_before)
        result.refused = leader.refused()
        return result
    finally:
        for task in watching:
            task.cancel()
        await asyncio.gather(*watching, return_exceptions=True)
        await finished(store, leader, follower, following)


# --- report -------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def runs_table(title: str, runs: list[Run]) -> Table:
    table = Table(title=f"{title} (write → reservation seen; median of {len(runs)} runs)",
                  title_justify="left")
    for column in ("admitting", "requests", "p50 ms", "p99 ms", "adm./s", "CPU ms/adm.: leader",
                   "etcd", "etcd writes/adm.", "refused"):
        table.add_column(column, justify="right" if column != "admitting" else "left")
    return table


def row(table: Table, name: str, runs: list[Run]) -> None:
    per_admission = [
        {process: run.cpu.get(process, math.nan) / len(run.latencies) * 1000
         for process in ("leader", "etcd")} for run in runs]
    table.add_row(name, str(len(runs[0].latencies)),
                  ms(med([statistics.median(r.latencies) for r in runs])),
                  ms(med([percentile(r.latencies, 0.99) for r in runs])),
                  f"{med([r.rate for r in runs]):.0f}",
                  *(f"{med([p[process] for p in per_admission]):.2f}"
                    for process in ("leader", "etcd")),
                  f"{med([r.writes / len(r.latencies) for r in runs]):.1f}",
                  f"{med([r.refused for r in runs]):.0f}")


def report_burst(runs: dict[str, list[Run]], apps: int, churn_slots: int) -> None:
    table = runs_table(f"{apps} single-executor requests written back to back", runs["primus"])
    row(table, f"Primus leader, {apps} slots", runs["primus"])
    row(table, "floor: relay process", runs["relay"])
    row(table, "floor: guarded txns alone", runs["txns"])
    row(table, f"Primus leader, {churn_slots} slots, apps end", runs["churn"])
    console.print(table)
    rate = {kind: med([r.rate for r in kind_runs]) for kind, kind_runs in runs.items()}
    p50 = {kind: med([statistics.median(r.latencies) for r in kind_runs])
           for kind, kind_runs in runs.items()}
    console.print(f"admissions/s: Primus / relay [bold]{rate['primus'] / rate['relay']:.2f}×[/], "
                  f"Primus / guarded txns alone {rate['primus'] / rate['txns']:.2f}×; p50: "
                  f"Primus / relay {p50['primus'] / p50['relay']:.1f}×")


def report_serial(runs: dict[str, list[Run]]) -> None:
    table = runs_table("One request at a time", runs["primus"])
    row(table, "Primus leader", runs["primus"])
    row(table, "floor: relay process", runs["relay"])
    console.print(table)
    ratio = (med([statistics.median(r.latencies) for r in runs["primus"]])
             / med([statistics.median(r.latencies) for r in runs["relay"]]))
    console.print(f"p50 Primus / relay [bold]{ratio:.2f}×[/]")


def report_handover(runs: list[Handovers]) -> None:
    after_ack = [d for r in runs for d in r.after_ack]
    after_write = [d for r in runs for d in r.after_write]
    floor = [d for r in runs for d in r.floor]
    table = Table(title="Host of 1 slot: A's reservation deleted → B's reservation seen "
                  f"(ms, {len(after_ack)} hand-overs in {len(runs)} runs)", title_justify="left")
    for column in ("what", "median", "p99", "max"):
        table.add_column(column, justify="right" if column != "what" else "left")
    table.add_row("Primus: after the delete's acknowledgement", ms(statistics.median(after_ack)),
                  ms(percentile(after_ack, 0.99)), ms(max(after_ack)))
    table.add_row("Primus: after just before the delete", ms(statistics.median(after_write)),
                  ms(percentile(after_write, 0.99)), ms(max(after_write)))
    table.add_row("floor: raw etcd watch of a write, after its ack", ms(statistics.median(floor)),
                  ms(percentile(floor, 0.99)), ms(max(floor)))
    console.print(table)
    median_ms = statistics.median(after_ack) * 1000
    met = median_ms <= HANDOVER_TARGET_MS
    console.print(f"end → next admitted: median {median_ms:.2f} ms (target ≤ "
                  f"{HANDOVER_TARGET_MS:g} ms: "
                  f"{'[green]met[/]' if met else f'[red]missed by {median_ms - 100:.2f} ms[/]'}"
                  f"); refused leader writes per run: {[r.refused for r in runs]}")


def report_drain(runs: list[Drains]) -> None:
    drained = [d for r in runs for d in r.drained]
    resumed = [d for r in runs for d in r.resumed]
    floor = [d for r in runs for d in r.floor]
    table = Table(title="Host of 1 slot, B waiting: condition written (from just before) → B's "
                  f"waiting record says so (ms, {len(drained)} drains in {len(runs)} runs)",
                  title_justify="left")
    for column in ("what", "median", "p99", "max", "/ floor"):
        table.add_column(column, justify="right" if column != "what" else "left")
    base = statistics.median(floor)
    for name, values in (("drained → out of service said", drained),
                         ("resumed → waiting for the slot again", resumed),
                         ("floor: a write seen by a raw watch", floor)):
        table.add_row(name, ms(statistics.median(values)), ms(percentile(values, 0.99)),
                      ms(max(values)), f"{statistics.median(values) / base:.1f}×")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("burst", "serial", "handover", "drain"))
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each part, interleaved with its floors (default: 3)")
    parser.add_argument("--apps", type=int, default=200,
                        help="requests written back to back per burst (default: 200)")
    parser.add_argument("--serial", type=int, default=100,
                        help="requests written one at a time per serial run (default: 100)")
    parser.add_argument("--handovers", type=int, default=100,
                        help="hand-overs of the 1-slot host, over all runs (default: 100)")
    parser.add_argument("--drains", type=int, default=60,
                        help="drains (and resumes) of the 1-slot host, over all runs "
                             "(default: 60)")
    parser.add_argument("--churn-slots", type=int, default=4,
                        help="slots of the host the burst also passes through, each "
                             "application ending at once (default: 4)")
    args = parse_args(parser, argv, repeat=1, apps=4, serial=2, handovers=2, drains=2,
                      churn_slots=2)
    began = time.monotonic()
    console.print(f"[bold]Admission[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; leader and relay in "
                  f"processes of their own, etcd http on loopback")
    bursts: dict[str, list[Run]] = {"primus": [], "relay": [], "txns": [], "churn": []}
    serials: dict[str, list[Run]] = {"primus": [], "relay": []}
    handovers: list[Handovers] = []
    drained: list[Drains] = []

    async def measure(box: Sandbox) -> None:
        for attempt in range(args.repeat):
            # Interleaved, so that a slow spell of the machine hits each alike.
            if args.only in (None, "burst"):
                for kind, measured in (
                        ("txns", lambda p: direct_txns(box, p, args.apps)),
                        ("relay", lambda p: burst(box, p, args.apps, args.apps, "relay")),
                        ("primus", lambda p: burst(box, p, args.apps, args.apps, "primus")),
                        ("churn", lambda p: burst(box, p, args.apps, args.churn_slots,
                                                  "primus", end_at_once=True))):
                    wait_for_quiet()
                    bursts[kind].append(await measured(f"/bench/burst-{kind}-{attempt}"))
                console.print(f"burst run {attempt + 1}/{args.repeat}: " + ", ".join(
                    f"{kind} {runs[-1].rate:.0f}/s p50 "
                    f"{statistics.median(runs[-1].latencies) * 1000:.1f} ms"
                    for kind, runs in bursts.items()), style="dim")
            if args.only in (None, "serial"):
                for kind in ("relay", "primus"):
                    wait_for_quiet()
                    serials[kind].append(await serial(box, f"/bench/serial-{kind}-{attempt}",
                                                      args.serial, kind))
                console.print(f"serial run {attempt + 1}/{args.repeat}: " + ", ".join(
                    f"{kind} p50 {statistics.median(runs[-1].latencies) * 1000:.1f} ms"
                    for kind, runs in serials.items()), style="dim")
            if args.only in (None, "handover"):
                wait_for_quiet()
                handovers.append(await handover(box, f"/bench/handover-{attempt}",
                                                max(args.handovers // args.repeat, 1)))
                console.print(f"handover run {attempt + 1}/{args.repeat}: median "
                              f"{statistics.median(handovers[-1].after_ack) * 1000:.1f} ms, "
                              f"floor {statistics.median(handovers[-1].floor) * 1000:.2f} ms",
                              style="dim")
            if args.only in (None, "drain"):
                wait_for_quiet()
                drained.append(await drains(box, f"/bench/drain-{attempt}",
                                            max(args.drains // args.repeat, 1)))
                console.print(f"drain run {attempt + 1}/{args.repeat}: median "
                              f"{statistics.median(drained[-1].drained) * 1000:.1f} ms",
                              style="dim")

    with sandbox() as box:
        asyncio.run(measure(box))
    if bursts["primus"]:
        report_burst(bursts, args.apps, args.churn_slots)
    if serials["primus"]:
        report_serial(serials)
    if handovers:
        report_handover(handovers)
    if drained:
        report_drain(drained)
    console.print(f"whole benchmark {time.monotonic() - began:.0f}s", style="dim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
