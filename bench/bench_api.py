"""Benchmark: the Primus API (issue 11) against the same work done directly on etcd.

Against a private etcd and one real ``primus server`` (plaintext, on loopback: the etcd is plain
http on loopback too, so neither side pays TLS), on the local launcher, three parts:

* **get**: ``GetApplication`` of a RUNNING application of 8 executors (trainers ``sleep``),
  from 16 concurrent clients (16 gRPC channels in one ``grpc.aio`` event loop of this process,
  each calling back to back) for ``--seconds``: p50, p99, requests per second. **Floor**: the
  read the server itself does, :func:`primus.state.view.read_app_keys`, from 16 concurrent
  readers (16 ``EtcdCoordinator`` connections, same loop). Beside them, typed
  ``primus.api.client.Client.get_app`` from 16 threads (what a notebook or pipeline sees), against
  its own floor: the raw synchronous stub's ``GetApplication`` from 16 threads (a channel
  each); and one caller alone of each (the unloaded latency). The CPU each request costs is
  read per process (this process, the server, etcd), and one request's server side is timed
  step by step in this process (etcd read, decoding, conversion to protobuf).
* **watch**: one ``WatchApplication`` stream on the application; the benchmark rewrites an
  event key of it (``events/<seq>``, a valid ``AppEvent``) ``--writes`` times, one at a time,
  and times each from the write's acknowledgement to the update carrying it arriving at the
  client. **Floor**: a raw etcd watch of the same key, timed the same way. Blocks of writes
  alternate between the two.
* **scale**: a job of one role ``worker``, ``num: 8``, ``on_cluster_change: none`` (running
  trainers are not restarted when the gang grows), whose trainer writes ``date +%s.%N`` to
  ``$OUT/$PRIMUS_INDEX`` and sleeps. Submitted through the API (``Client.submit``): submit → 8
  trainers started is the **from scratch** figure. Once every executor is RUNNING,
  ``Client.scale_role(app, "worker", 16)``: request → the 8 new trainers started is the
  **scale-up** figure. The first 8 trainers must not have started again. Every application
  ends with ``primus kill`` and a check that none of its processes is left.

Usage: ``python bench/bench_api.py [--only get|watch|scale] [--repeat 3] [--seconds 5]
[--clients 16] [--writes 200] [--executors 8]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import grpc
import psutil
from bench_submit import (
    ROLE,
    Sandbox,
    console,
    etcd_version,
    machine_cpu_seconds,
    med,
    parse_args,
    sandbox,
    stop_app,
    wait_for_quiet,
    wait_for_trainers,
)
from rich.table import Table

from primus.api import convert
from primus.api.client import Application, Client
from primus.api.v1 import primus_pb2 as pb
from primus.api.v1 import primus_pb2_grpc as pb_grpc
from primus.client.service import ApplicationService
from primus.config.etcd import EtcdConfig
from primus.config.site import load_settings
from primus.state.keys import AppKeys
from primus.state.records import AppEvent, encode
from primus.state.states import AppState, ExecutorState
from primus.state.view import read_app_keys
from primus.store.api import WatchEvent
from primus.store.etcd_store import EtcdCoordinator

PREFIX = "/bench"
TRAINER = 'date +%s.%N > "$OUT/$PRIMUS_INDEX"; exec sleep 600'
RATIO_TARGET = 1.5
WATCH_TARGET_MS = 20.0
PROBE_SEQ = 10**11
"""The sequence number of the event key the watch part rewrites: far above the AM's own."""
WARM_UP_WRITES = 5
START_TIMEOUT = 120.0
CALL_TIMEOUT = 30.0
BREAKDOWN_CALLS = 200


# --- the server ---------------------------------------------------------------------------------


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    address: str


@contextmanager
def api_server(box: Sandbox) -> Iterator[Server]:
    """``primus server run --plaintext`` on a free loopback port, without the web UI (which
    would take its fixed default port); SIGTERM and wait after."""
    state = box.root / "server.json"
    with (box.root / "server.log").open("wb") as log:
        process = subprocess.Popen([*box.primus, "server", "run", "--listen", "127.0.0.1:0",
                                    "--no-ui", "--plaintext", "--state-file", str(state)],
                                   env=box.env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30.0
        while not state.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: "
                                   f"{(box.root / 'server.log').read_text()}")
            time.sleep(0.05)
        yield Server(process, json.loads(state.read_text())["address"])
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


# --- applications -------------------------------------------------------------------------------


def job_text(name: str, size: int, out: Path) -> str:
    return json.dumps({"name": name, "workdir": str(out), "env": {"OUT": str(out)},
                       "roles": [{"name": ROLE, "num": size, "command": TRAINER,
                                  "on_cluster_change": "none"}]})


def submit(box: Sandbox, client: Client, name: str, size: int) -> tuple[str, Path, float]:
    """Submit a job of ``size`` executors through the API; return its id, its trainers' output
    directory and when the submit started."""
    (box.root / "runs").mkdir(exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=box.root / "runs"))
    started = time.time()
    app_id = client.submit(job_text(name, size, out), source=f"{name}.json")
    return app_id, out, started


def wait_until_running(client: Client, app_id: str, size: int) -> Application:
    """The application once it and ``size`` executors are RUNNING, each registered."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        app = client.get_app(app_id, events=1000)
        views = [app.executors.get((ROLE, index)) for index in range(size)]
        if app.status.state is AppState.RUNNING and all(
                view is not None and view.plan is not None and view.live is not None
                and view.plan.state is ExecutorState.RUNNING for view in views):
            return app
        time.sleep(0.1)
    raise TimeoutError(f"{app_id} did not have {size} RUNNING executors within "
                       f"{START_TIMEOUT:g}s")


# --- get ----------------------------------------------------------------------------------------


@dataclass
class LoadRun:
    """One run of concurrent callers calling back to back."""

    latencies: list[float]
    """Seconds of every completed call."""
    seconds: float
    cpu: dict[str, float]
    """CPU seconds (user + system) used meanwhile, by process (``machine``: all of them)."""

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def cpu_ms_per_call(self, process: str) -> float:
        return self.cpu[process] / len(self.latencies) * 1000

    @property
    def others_share(self) -> float:
        """Share of the machine's CPU used by processes other than the caller, the server and
        etcd (the application's idle AM and executors among them)."""
        ours = self.cpu["client"] + self.cpu["server"] + self.cpu["etcd"]
        return max(self.cpu["machine"] - ours, 0.0) / (self.seconds * (os.cpu_count() or 1))


def percentile(values: Sequence[float], share: float) -> float:
    """The smallest value that at least ``share`` of ``values`` do not exceed."""
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


class CpuMeter:
    """CPU seconds this process, the server and etcd use between :meth:`start` and
    :meth:`read`."""

    def __init__(self, box: Sandbox, server: Server) -> None:
        self.processes = {"server": psutil.Process(server.process.pid),
                          "etcd": psutil.Process(box.etcd_pid)}
        self.before: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        now = {"client": time.process_time(), "machine": machine_cpu_seconds()}
        for name, process in self.processes.items():
            times = process.cpu_times()
            now[name] = times.user + times.system
        return now

    def start(self) -> None:
        self.before = self._now()

    def read(self) -> dict[str, float]:
        return {name: value - self.before[name] for name, value in self._now().items()}


async def closed_loop(calls: Sequence[Callable[[], Awaitable[object]]], seconds: float,
                      meter: CpuMeter) -> LoadRun:
    """Each of ``calls`` called back to back by its own task for ``seconds``."""
    latencies: list[float] = []
    meter.start()
    started = time.perf_counter()
    deadline = started + seconds

    async def caller(call: Callable[[], Awaitable[object]]) -> None:
        while (before := time.perf_counter()) < deadline:
            await call()
            latencies.append(time.perf_counter() - before)

    await asyncio.gather(*(caller(call) for call in calls))
    elapsed = time.perf_counter() - started
    return LoadRun(latencies, elapsed, meter.read())


def threaded_loop(calls: Sequence[Callable[[], object]], seconds: float,
                  meter: CpuMeter) -> LoadRun:
    """Each of ``calls`` called back to back by its own thread for ``seconds``."""
    latencies: list[float] = []
    lock = threading.Lock()
    meter.start()
    started = time.perf_counter()
    deadline = started + seconds

    def caller(call: Callable[[], object]) -> None:
        while (before := time.perf_counter()) < deadline:
            call()
            with lock:
                latencies.append(time.perf_counter() - before)

    threads = [threading.Thread(target=caller, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return LoadRun(latencies, time.perf_counter() - started, meter.read())


@dataclass
class GetResults:
    runs: dict[str, list[LoadRun]]
    """Per kind of caller (``api``, ``floor``, ``typed``, ``floor alone``, ``api alone``), one
    run per repeat."""
    breakdown: dict[str, tuple[float, float]]
    """Median wall and CPU milliseconds of each step of one request's server side, called
    alone."""
    reply_bytes: int
    keys: int


async def breakdown(box: Sandbox, store: EtcdCoordinator, app_id: str
                    ) -> dict[str, tuple[float, float]]:
    """Time the server's steps of one ``GetApplication``, one call at a time, in this process:
    the etcd read, the decoding into the client layer's report, the conversion to protobuf
    with its serialisation. Returns the median wall and CPU milliseconds of each."""
    service = ApplicationService(store, load_settings(env=box.env))
    keys = AppKeys(PREFIX, app_id)
    names = ("etcd read (read_app_keys)", "decode (ApplicationService.get_app − read)",
             "to protobuf + serialise")
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}

    def record(name: str, since: tuple[float, float]) -> tuple[float, float]:
        now = time.perf_counter(), time.process_time()
        wall[name].append(now[0] - since[0])
        cpu[name].append(now[1] - since[1])
        return now

    for _ in range(BREAKDOWN_CALLS):
        start = time.perf_counter(), time.process_time()
        await read_app_keys(store, keys)
        read = record(names[0], start)
        report = await service.get_app(app_id)  # reads again, then decodes
        decoded = time.perf_counter(), time.process_time()
        wall[names[1]].append(decoded[0] - read[0] - wall[names[0]][-1])
        cpu[names[1]].append(decoded[1] - read[1] - cpu[names[0]][-1])
        convert.report_to_message(report, 20).SerializeToString()
        record(names[2], decoded)
    return {name: (med(wall[name]) * 1000, med(cpu[name]) * 1000) for name in names}


def bench_get(box: Sandbox, server: Server, app_id: str, clients: int, seconds: float,
              repeat: int) -> GetResults:
    meter = CpuMeter(box, server)
    runs: dict[str, list[LoadRun]] = {"floor": [], "api": [], "stub": [], "typed": [],
                                      "floor alone": [], "api alone": []}
    request = pb.GetApplicationRequest(app_id=app_id)
    typed = [Client(server.address, plaintext=True, timeout=CALL_TIMEOUT)
             for _ in range(clients)]
    sync_channels = [grpc.insecure_channel(server.address) for _ in range(clients)]
    sync_stubs = [pb_grpc.PrimusStub(channel) for channel in sync_channels]

    async def measure() -> tuple[dict[str, tuple[float, float]], int, int]:
        stores = [await EtcdCoordinator.connect(EtcdConfig(endpoints=(box.etcd_url,)))
                  for _ in range(clients)]
        channels = [grpc.aio.insecure_channel(server.address) for _ in range(clients)]
        stubs = [pb_grpc.PrimusStub(channel) for channel in channels]
        keys = AppKeys(PREFIX, app_id)
        floor = [lambda store=store: read_app_keys(store, keys) for store in stores]
        api = [lambda stub=stub: stub.GetApplication(request, timeout=CALL_TIMEOUT)
               for stub in stubs]
        try:
            reply = await api[0]()
            snapshot = await floor[0]()
            await asyncio.gather(*(call() for call in [*api, *floor]))  # connect every one
            for attempt in range(repeat):
                # Interleaved, so that a slow spell of the machine hits both alike.
                wait_for_quiet()
                runs["floor"].append(await closed_loop(floor, seconds, meter))
                wait_for_quiet()
                runs["api"].append(await closed_loop(api, seconds, meter))
                wait_for_quiet()
                runs["stub"].append(threaded_loop(
                    [partial(stub.GetApplication, request, timeout=CALL_TIMEOUT)
                     for stub in sync_stubs], seconds, meter))
                wait_for_quiet()
                runs["typed"].append(threaded_loop(
                    [partial(client.get_app, app_id) for client in typed], seconds, meter))
                wait_for_quiet()
                runs["floor alone"].append(await closed_loop(floor[:1], seconds, meter))
                wait_for_quiet()
                runs["api alone"].append(await closed_loop(api[:1], seconds, meter))
                console.print(
                    f"get run {attempt + 1}/{repeat}: " + ", ".join(
                        f"{kind} p50 {statistics.median(r[-1].latencies) * 1000:.2f} ms "
                        f"{r[-1].rate:.0f}/s" for kind, r in runs.items()), style="dim")
            steps = await breakdown(box, stores[0], app_id)
            return steps, reply.ByteSize(), len(snapshot.kvs)
        finally:
            for channel in channels:
                await channel.close()
            for store in stores:
                await store.close()

    try:
        steps, reply_bytes, key_count = asyncio.run(measure())
    finally:
        for client in typed:
            client.close()
        for channel in sync_channels:
            channel.close()
    return GetResults(runs, steps, reply_bytes, key_count)


# --- watch --------------------------------------------------------------------------------------


@dataclass
class WatchRun:
    after_ack: list[float]
    """Seconds from the write's acknowledgement to the client receiving it, per write."""
    after_write: list[float]
    """Seconds from just before the write to the client receiving it, per write."""


class Receiver:
    """Hands the receive time of each probe write (by its number) to the writer waiting for it."""

    def __init__(self) -> None:
        self.waiting: dict[int, asyncio.Future[float]] = {}

    def expect(self, number: int) -> asyncio.Future[float]:
        self.waiting[number] = asyncio.get_running_loop().create_future()
        return self.waiting[number]

    def received(self, message: str) -> None:
        at = time.perf_counter()
        future = self.waiting.pop(int(message.removeprefix("probe ")), None)
        if future is not None and not future.done():
            future.set_result(at)


async def write_probes(store: EtcdCoordinator, key: str, receiver: Receiver, writes: int,
                       first: int) -> WatchRun:
    """Rewrite ``key`` ``writes`` times, each once the previous one was received."""
    run = WatchRun([], [])
    for number in range(first, first + WARM_UP_WRITES + writes):
        received = receiver.expect(number)
        event = AppEvent(seq=PROBE_SEQ, time=time.time(), kind="bench",
                         message=f"probe {number}")
        before = time.perf_counter()
        await store.put(key, encode(event))
        acknowledged = time.perf_counter()
        at = await asyncio.wait_for(received, 10.0)
        if number >= first + WARM_UP_WRITES:
            run.after_ack.append(at - acknowledged)
            run.after_write.append(at - before)
    return run


def bench_watch(box: Sandbox, server: Server, app_id: str, writes: int, repeat: int
                ) -> dict[str, list[WatchRun]]:
    key = AppKeys(PREFIX, app_id).event(PROBE_SEQ)
    per_block = max(writes // repeat, 1)
    runs: dict[str, list[WatchRun]] = {"floor": [], "api": []}

    async def measure() -> None:
        store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(box.etcd_url,)))
        channel = grpc.aio.insecure_channel(server.address)
        api_receiver, floor_receiver = Receiver(), Receiver()
        snapshot = asyncio.get_running_loop().create_future()

        async def follow_api() -> None:
            call = pb_grpc.PrimusStub(channel).WatchApplication(
                pb.WatchApplicationRequest(app_id=app_id))
            async for message in call:
                if message.HasField("snapshot") and not snapshot.done():
                    snapshot.set_result(message.revision)
                for change in message.changes:
                    if change.WhichOneof("change") == "event" and \
                            change.event.seq == PROBE_SEQ:
                        api_receiver.received(change.event.message)

        async def follow_floor(revision: int) -> None:
            async for event in store.watch_prefix(key, revision + 1):
                if isinstance(event, WatchEvent) and event.key == key and event.value:
                    floor_receiver.received(json.loads(event.value)["message"])

        api = asyncio.ensure_future(follow_api())
        revision = await asyncio.wait_for(snapshot, 30.0)
        floor = asyncio.ensure_future(follow_floor(revision))
        try:
            number = 0
            for block in range(repeat):
                for kind, receiver in (("floor", floor_receiver), ("api", api_receiver)):
                    wait_for_quiet()
                    runs[kind].append(await write_probes(store, key, receiver, per_block,
                                                         number))
                    number += WARM_UP_WRITES + per_block
                console.print(f"watch block {block + 1}/{repeat}: " + ", ".join(
                    f"{kind} median {statistics.median(r[-1].after_ack) * 1000:.2f} ms"
                    for kind, r in runs.items()), style="dim")
        finally:
            for task in (api, floor):
                task.cancel()
            await asyncio.gather(api, floor, return_exceptions=True)
            await store.delete(key)
            await channel.close()
            await store.close()

    asyncio.run(measure())
    return runs


# --- scale --------------------------------------------------------------------------------------


@dataclass
class ScaleRun:
    scratch: float
    """Seconds from the submit to the last of the first trainers started."""
    scale: float
    """Seconds from the scale request to the last of the new trainers started."""
    scratch_steps: dict[str, float]
    scale_steps: dict[str, float]


def steps(app: Application, indices: range, started: float, trainers: list[float],
          events_after: float) -> dict[str, float]:
    """When each step of starting the executors ``indices`` was reached, in seconds after
    ``started``; events are looked for from ``events_after`` on."""
    views = [app.executors[(ROLE, index)] for index in indices]
    plans = [view.plan for view in views if view.plan is not None]
    lives = [view.live for view in views if view.live is not None]
    events = [e for e in app.events if e.time >= events_after]
    changes = [e.time for e in events if e.kind == "change"]
    points = {
        "AM recorded the change": min(changes) if changes else math.nan,
        "first executor launched": min(p.launch_time or math.nan for p in plans),
        "last executor launched": max(p.launch_time or math.nan for p in plans),
        "last executor registered": max(live.registered_time for live in lives),
        "cluster written": max((e.time for e in events if e.kind == "cluster"),
                               default=math.nan),
        "last trainer wrote its time": max(trainers),
    }
    return {name: at - started for name, at in points.items()}


def run_scale(box: Sandbox, client: Client, size: int, attempt: int) -> ScaleRun:
    wait_for_quiet()
    app_id, out, submitted = submit(box, client, f"scale{attempt}", size)
    try:
        first = wait_for_trainers(out, size)
        before = wait_until_running(client, app_id, size)
        first_files = {index: (out / str(index)).read_text() for index in range(size)}
        wait_for_quiet()
        requested = time.time()
        client.scale_role(app_id, ROLE, 2 * size)
        added = wait_for_trainers(out, size, lambda i: str(size + i))
        after = wait_until_running(client, app_id, 2 * size)
        again = [i for i in range(size) if (out / str(i)).read_text() != first_files[i]]
        if again:
            raise RuntimeError(f"{app_id}: trainers {again} started again on the scale-up")
    finally:
        stop_app(box, app_id)
    scratch_steps = steps(before, range(size), submitted, first, submitted)
    scratch_steps["app written (by the server)"] = before.status.submit_time - submitted
    scratch_steps["AM leads"] = (before.leader.since - submitted if before.leader
                                 else math.nan)
    del scratch_steps["AM recorded the change"]
    return ScaleRun(max(first) - submitted, max(added) - requested, scratch_steps,
                    steps(after, range(size, 2 * size), requested, added, requested))


def bench_scale(box: Sandbox, server: Server, size: int, repeat: int) -> list[ScaleRun]:
    runs = []
    with Client(server.address, plaintext=True, timeout=CALL_TIMEOUT) as client:
        for attempt in range(repeat):
            runs.append(run_scale(box, client, size, attempt))
            console.print(f"scale run {attempt + 1}/{repeat}: from scratch "
                          f"{runs[-1].scratch:.2f}s, scale-up {runs[-1].scale:.2f}s",
                          style="dim")
    return runs


# --- report -------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def verdict(met: bool, missed: str) -> str:
    return "[green]met[/]" if met else f"[red]missed by {missed}[/]"


def report_get(results: GetResults, clients: int, executors: int) -> None:
    runs = results.runs
    table = Table(title=f"GetApplication, {clients} concurrent callers, app of {executors} "
                  f"executors ({results.keys} keys, reply {results.reply_bytes:,} bytes); "
                  f"median of runs", title_justify="left")
    for column in ("callers", "p50 ms", "p99 ms", "requests/s", "CPU ms/request: client",
                   "server", "etcd"):
        table.add_column(column, justify="right" if column != "callers" else "left")
    names = {"floor": f"floor: read_app_keys on etcd, {clients} connections",
             "api": f"API: GetApplication, {clients} channels (grpc.aio)",
             "stub": f"API: GetApplication, raw sync stub, {clients} threads",
             "typed": f"API: Client.get_app (typed), {clients} threads",
             "floor alone": "floor: read_app_keys, 1 connection alone",
             "api alone": "API: GetApplication, 1 channel alone"}
    for kind, name in names.items():
        table.add_row(name,
                      ms(med([statistics.median(r.latencies) for r in runs[kind]])),
                      ms(med([percentile(r.latencies, 0.99) for r in runs[kind]])),
                      f"{med([r.rate for r in runs[kind]]):.0f}",
                      *(f"{med([r.cpu_ms_per_call(p) for r in runs[kind]]):.2f}"
                        for p in ("client", "server", "etcd")))
    console.print(table)
    console.print("Other processes' share of the CPU during the runs, max: " + ", ".join(
        f"{kind} {max(r.others_share for r in runs[kind]):.0%}" for kind in names),
        style="dim")
    api_p50 = med([statistics.median(r.latencies) for r in runs["api"]])
    floor_p50 = med([statistics.median(r.latencies) for r in runs["floor"]])
    ratio = api_p50 / floor_p50
    p99 = (med([percentile(r.latencies, 0.99) for r in runs["api"]])
           / med([percentile(r.latencies, 0.99) for r in runs["floor"]]))
    rate = med([r.rate for r in runs["api"]]) / med([r.rate for r in runs["floor"]])
    alone = (med([statistics.median(r.latencies) for r in runs["api alone"]])
             / med([statistics.median(r.latencies) for r in runs["floor alone"]]))
    console.print(f"API / floor: p50 [bold]{ratio:.2f}×[/] (target ≤ {RATIO_TARGET:g}×: "
                  f"{verdict(ratio <= RATIO_TARGET, f'{ratio - RATIO_TARGET:.2f}×')}), "
                  f"p99 {p99:.2f}×, throughput {rate:.2f}×; one caller alone: p50 {alone:.2f}×")
    typed = (med([statistics.median(r.latencies) for r in runs["typed"]])
             / med([statistics.median(r.latencies) for r in runs["stub"]]))
    console.print(f"Client.get_app / raw sync stub: p50 [bold]{typed:.2f}×[/] (target ≤ "
                  f"{RATIO_TARGET:g}×: "
                  f"{verdict(typed <= RATIO_TARGET, f'{typed - RATIO_TARGET:.2f}×')})")
    steps_table = Table(title="One GetApplication's server side, called alone in this "
                        f"process (median of {BREAKDOWN_CALLS}, ms)", title_justify="left")
    steps_table.add_column("step")
    steps_table.add_column("wall ms", justify="right")
    steps_table.add_column("CPU ms", justify="right")
    for name, (wall, cpu) in results.breakdown.items():
        steps_table.add_row(name, f"{wall:.2f}", f"{cpu:.2f}")
    console.print(steps_table)


def report_watch(runs: dict[str, list[WatchRun]]) -> None:
    table = Table(title="Write to etcd → update received by the client (ms, all writes)",
                  title_justify="left")
    for column in ("watch", "writes", "after ack: median", "p99", "max",
                   "after write start: median", "p99"):
        table.add_column(column, justify="right" if column != "watch" else "left")
    names = {"floor": "floor: raw etcd watch of the key",
             "api": "API: WatchApplication stream"}
    for kind, name in names.items():
        after_ack = [d for r in runs[kind] for d in r.after_ack]
        after_write = [d for r in runs[kind] for d in r.after_write]
        table.add_row(name, str(len(after_ack)), ms(statistics.median(after_ack)),
                      ms(percentile(after_ack, 0.99)), ms(max(after_ack)),
                      ms(statistics.median(after_write)), ms(percentile(after_write, 0.99)))
    console.print(table)
    median_ms = statistics.median([d for r in runs["api"] for d in r.after_ack]) * 1000
    console.print(f"WatchApplication median {median_ms:.2f} ms (target ≤ {WATCH_TARGET_MS:g} "
                  f"ms: {verdict(median_ms <= WATCH_TARGET_MS, f'{median_ms - 20:.2f} ms')}); a "
                  f"raw watch's event can arrive before the write's own acknowledgement "
                  f"(negative times)")


def report_scale(runs: list[ScaleRun], size: int) -> None:
    table = Table(title=f"Trainers started through the API (s, median (min) of {len(runs)})",
                  title_justify="left")
    for column in ("what", "seconds", "scale-up / from scratch"):
        table.add_column(column, justify="right" if column != "what" else "left")
    scratch, scale = [r.scratch for r in runs], [r.scale for r in runs]
    table.add_row(f"submit {size} from scratch → {size} trainers started",
                  f"{med(scratch):.2f} ({min(scratch):.2f})", "")
    table.add_row(f"scale {size} → {2 * size} → the {size} new trainers started",
                  f"{med(scale):.2f} ({min(scale):.2f})", f"{med(scale) / med(scratch):.2f}×")
    console.print(table)
    steps_table = Table(title="Seconds after the submit / the scale request (median)",
                        title_justify="left")
    for column in ("step reached", "from scratch", "scale-up"):
        steps_table.add_column(column, justify="right" if column != "step reached" else "left")
    names = ["app written (by the server)", "AM leads", "AM recorded the change",
             *runs[0].scale_steps]
    for name in dict.fromkeys(names):
        cells = []
        for kind in ("scratch_steps", "scale_steps"):
            values = [getattr(r, kind).get(name, math.nan) for r in runs]
            cells.append("—" if all(math.isnan(v) for v in values) else f"{med(values):.2f}")
        steps_table.add_row(name, *cells)
    console.print(steps_table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("get", "watch", "scale"))
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each part, interleaved with its floor (default: 3)")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="seconds each GetApplication run lasts (default: 5)")
    parser.add_argument("--clients", type=int, default=16,
                        help="concurrent GetApplication callers (default: 16)")
    parser.add_argument("--writes", type=int, default=200,
                        help="watched writes, over all runs, per watch (default: 200)")
    parser.add_argument("--executors", type=int, default=8,
                        help="executors of the read and watched application, and of the "
                             "scaled one before the scale-up, which doubles it (default: 8)")
    args = parse_args(parser, argv, repeat=1, seconds=0.2, clients=2, writes=4, executors=1)
    began = time.monotonic()
    console.print(f"[bold]Primus API[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; server plaintext on "
                  f"loopback, etcd http on loopback")
    with sandbox() as box, api_server(box) as server:
        get_results = watch_runs = scale_runs = None
        if args.only in (None, "get", "watch"):
            with Client(server.address, plaintext=True, timeout=CALL_TIMEOUT) as client:
                app_id, out, _ = submit(box, client, "read", args.executors)
                try:
                    wait_for_trainers(out, args.executors)
                    wait_until_running(client, app_id, args.executors)
                    if args.only in (None, "get"):
                        get_results = bench_get(box, server, app_id, args.clients,
                                                args.seconds, args.repeat)
                    if args.only in (None, "watch"):
                        watch_runs = bench_watch(box, server, app_id, args.writes,
                                                 args.repeat)
                finally:
                    stop_app(box, app_id)
        if args.only in (None, "scale"):
            scale_runs = bench_scale(box, server, args.executors, args.repeat)
    if get_results is not None:
        report_get(get_results, args.clients, args.executors)
    if watch_runs is not None:
        report_watch(watch_runs)
    if scale_runs is not None:
        report_scale(scale_runs, args.executors)
    console.print(f"whole benchmark {time.monotonic() - began:.0f}s", style="dim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
