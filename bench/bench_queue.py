"""Benchmark: applications queued as records (issue 43), through one API server.

Against a private etcd and one real ``primus server`` (plaintext on loopback: its admission
leader and its AM keeper), on the local launcher, with a site inventory of one host of one slot
that a *blocker* application holds (submitted first, its trainer sleeps). Then:

* **submit**: N applications of one executor each, submitted through the API
  (``Client.submit``) from C concurrent clients (a thread and a channel each), over three
  queues of the site. Each waits as a record (the host is full): no AM process. Figure:
  applications per second. **Floor**: N etcd transactions from C concurrent writers (an
  ``EtcdCoordinator`` each), each writing as many keys, of the same sizes, as one submitted
  application holds (its keys read back from etcd).
* **waiting**: with N waiting, the AM processes of the waiting applications (must be 0), the
  RSS of the server and of etcd, their CPU over ``--idle`` seconds, and the etcd bytes of an
  application (keys and values under ``apps/<app>/`` and ``scheduler/apps/<app>/``, averaged).
* **admission**: one pass of the admission leader's decision (``admit``) over every request,
  as the leader folds etcd's keys (its vetting, which reads each application's records once,
  timed apart): p50 of ``--passes``. **Floor**: sorting the requests into admission order.
* **queue**: ``ListQueue`` through the API, the first 100 (what the UI's hosts page shows)
  and every one (the server answers from its own copy of admission's keys: what ``primus
  queue`` through a server waits for),
  and ``primus queue`` beside etcd (the command reads and vets every request itself): p50 of
  ``--passes``. **Floor** of the command: ``primus --version`` (the interpreter's start and
  the command's imports).
* **grant → AM**: the blocker is killed; from the first waiting application's reservations
  made (their ``since``) to its AM leading (its leader record's ``since``): the keeper's
  reaction and an AM's start, stamped by one clock.

One user (the server's account: a site without ``accounts:`` serves one person), three queues.

Usage: ``python bench/bench_queue.py [--apps 10000] [--clients 8]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
from bench_api import api_server
from bench_submit import console, etcd_version, parse_args, sandbox
from rich.table import Table

from primus.api.client import Client
from primus.config.etcd import EtcdConfig
from primus.scheduler.admission import admit, order
from primus.scheduler.leader import read_state, vet_requests
from primus.state.keys import AppKeys, SchedulerKeys
from primus.state.records import AmLeader, Reservation, decode
from primus.store.api import EventType, Put, WatchEvent
from primus.store.etcd_store import EtcdCoordinator
from primus.store.recipes import watching

PREFIX = "/bench"
QUEUES = ("default", "batch", "urgent")
SITE = """\
inventory: {inventory}
queues:
  default: {{priority: 0}}
  batch: {{priority: -5}}
  urgent: {{priority: 10}}
default_queue: default
"""
IDLE_SECONDS = 10.0
"""Seconds over which the server's and etcd's CPU is read while the applications wait."""
PASSES = 5
"""Timed passes of the admission decision and of each queue listing."""
SUBMIT_TARGET = 100.0
ADMIT_TARGET_MS = 100.0
QUEUE_TARGET_MS = 200.0
QUEUE_PAGE = 100
"""What the UI's hosts page lists of the queue (``primus.ui.web.QUEUE_SHOWN``)."""
GRANT_TARGET_S = 1.0


def job_text(name: str, queue: str, command: str = "true") -> str:
    return json.dumps({"name": name, "queue": queue,
                       "roles": [{"name": "worker", "num": 1, "cpu": 0.1, "command": command}]})


@dataclass
class Results:
    apps: int
    clients: int
    idle: float
    submit_seconds: float = 0.0
    floor_seconds: float = 0.0
    ams_waiting: int = 0
    server_rss_mb: float = 0.0
    etcd_rss_mb: float = 0.0
    server_cpu: float = 0.0
    etcd_cpu: float = 0.0
    bytes_per_app: float = 0.0
    keys_per_app: float = 0.0
    vet_ms: float = 0.0
    admit_ms: list[float] = field(default_factory=list)
    order_ms: list[float] = field(default_factory=list)
    list_queue_ms: list[float] = field(default_factory=list)
    queue_command_ms: list[float] = field(default_factory=list)
    queue_page_ms: list[float] = field(default_factory=list)
    command_start_ms: list[float] = field(default_factory=list)
    grant_to_am: float = float("nan")


def submit_all(address: str, apps: int, clients: int) -> tuple[list[str], float]:
    """Submit ``apps`` waiting applications from ``clients`` threads; their ids and the wall
    time."""
    ids: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(number: int) -> None:
        try:
            with Client(address, plaintext=True, timeout=120) as client:
                for n in range(number, apps, clients):
                    app_id = client.submit(job_text(f"q{n}", QUEUES[n % len(QUEUES)]),
                                           source=f"q{n}.json")
                    with lock:
                        ids.append(app_id)
        except BaseException as exc:  # noqa: BLE001 - reported after the threads end
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return ids, time.monotonic() - began


async def app_footprint(store: EtcdCoordinator, prefix: str, app_ids: list[str]
                        ) -> tuple[list[int], float, float]:
    """The value sizes of one application's keys (what the floor writes), and the keys and
    bytes (key and value) an application holds on average."""
    sizes: list[int] = []
    total_keys = total_bytes = 0
    for app_id in app_ids:
        keys = AppKeys(prefix, app_id)
        found = [kv for p in (keys.root, keys.scheduler.app(app_id))
                 for kv in (await store.get_prefix(p)).kvs]
        total_keys += len(found)
        total_bytes += sum(len(kv.key) + len(kv.value) for kv in found)
        if not sizes:
            sizes = [len(kv.value) for kv in found]
    return sizes, total_keys / len(app_ids), total_bytes / len(app_ids)


async def floor_writes(url: str, sizes: list[int], apps: int, clients: int) -> float:
    """``apps`` transactions of ``len(sizes)`` puts each, from ``clients`` writers."""
    stores = [await EtcdCoordinator.connect(EtcdConfig(endpoints=(url,)))
              for _ in range(clients)]
    try:
        async def writer(number: int, store: EtcdCoordinator) -> None:
            for n in range(number, apps, clients):
                await store.txn([], [Put(f"/floor/{n}/{k}", b"x" * size)
                                     for k, size in enumerate(sizes)])

        began = time.monotonic()
        await asyncio.gather(*(writer(n, s) for n, s in enumerate(stores)))
        return time.monotonic() - began
    finally:
        for store in stores:
            await store.close()


async def admission_pass(store: EtcdCoordinator, results: Results, passes: int) -> None:
    """Fold the admission keys as the leader does, vet every request once, then time
    ``admit`` over them (and the sort of the floor)."""
    keys = SchedulerKeys(PREFIX)
    snapshot = await store.get_prefix(keys.root)
    state = read_state(keys, None, snapshot.kvs, snapshot.revision)
    began = time.perf_counter()
    await vet_requests(store, state)
    results.vet_ms = (time.perf_counter() - began) * 1000
    hosts = {name: host for name, (host, _) in state.hosts.items()}
    for _ in range(passes):
        pending = state.pending()
        began = time.perf_counter()
        admit(pending, list(state.reservations.values()), hosts, state.config,
              out_of_service=state.out_of_service())
        results.admit_ms.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        order(pending, state.config)
        results.order_ms.append((time.perf_counter() - began) * 1000)


def cpu_of(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def am_processes(app_ids: set[str]) -> int:
    """The AM processes of these applications on this machine."""
    found = 0
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        if "primus.am" in line and any(a in app_ids for a in line):
            found += 1
    return found


async def grant_to_am(store: EtcdCoordinator, app_id: str, blocker_gone: Callable[[], object]
                      ) -> float:
    """Seconds from ``app_id``'s reservations made (their ``since``, written by the admission
    leader as it grants) to its AM leading (its leader record's ``since``), once
    ``blocker_gone`` frees the host: both stamped by this machine's clock, both read from the
    events of one watch (the application may end, and give its reservations up, at once)."""
    keys = AppKeys(PREFIX, app_id)
    granted: float | None = None
    async with watching(store, f"{PREFIX}/") as watch:
        await asyncio.to_thread(blocker_gone)
        async with asyncio.timeout(120):
            async for event in watch.after(watch.revision):
                if not isinstance(event, WatchEvent) or event.type is not EventType.PUT:
                    continue
                if event.key.startswith(keys.scheduler.reservations(app_id)):
                    since = decode(Reservation, event.value).since
                    granted = since if granted is None else min(granted, since)
                elif event.key == keys.leader and granted is not None:
                    return decode(AmLeader, event.value).since - granted
    return float("nan")


def ms_of(runs: list[float]) -> str:
    return f"{statistics.median(runs):.1f}"


def verdict(met: bool) -> str:
    return "met" if met else "missed"


def report(r: Results) -> None:
    rate = r.apps / r.submit_seconds
    floor_rate = r.apps / r.floor_seconds
    table = Table(title=f"{r.apps} applications queued through one server ({r.clients} "
                        f"clients), one host held by a blocker", title_justify="left")
    for column in ("measure", "Primus", "floor", "ratio", "target"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row("submit (applications/s)", f"{rate:.0f}", f"{floor_rate:.0f} (raw etcd txns)",
                  f"{rate / floor_rate:.2f}×",
                  f"≥ {SUBMIT_TARGET:.0f}/s: {verdict(rate >= SUBMIT_TARGET)}")
    admit_ms = statistics.median(r.admit_ms)
    table.add_row("one admission pass (ms, p50)", f"{admit_ms:.1f}",
                  f"{ms_of(r.order_ms)} (the sort)",
                  f"{admit_ms / max(statistics.median(r.order_ms), 1e-6):.0f}×",
                  f"≤ {ADMIT_TARGET_MS:.0f} ms: {verdict(admit_ms <= ADMIT_TARGET_MS)}")
    table.add_row("vetting every request once (ms)", f"{r.vet_ms:.0f}", "", "", "")
    for name, runs in ((f"ListQueue, the first {QUEUE_PAGE} (the UI's page; ms, p50)",
                        r.queue_page_ms),
                       (f"ListQueue, all {r.apps} (ms, p50)", r.list_queue_ms)):
        table.add_row(name, ms_of(runs), "", "", f"≤ {QUEUE_TARGET_MS:.0f} ms: "
                      f"{verdict(statistics.median(runs) <= QUEUE_TARGET_MS)}")
    start = statistics.median(r.command_start_ms)
    table.add_row("primus queue beside etcd (ms, p50)", ms_of(r.queue_command_ms),
                  f"{start:.0f} (primus --version)",
                  f"{statistics.median(r.queue_command_ms) / start:.1f}×", "")
    table.add_row("grant → its AM leads (s)", f"{r.grant_to_am:.2f}", "", "",
                  f"≤ {GRANT_TARGET_S:.0f} s: {verdict(r.grant_to_am <= GRANT_TARGET_S)}")
    console.print(table)
    waiting = Table(title=f"While {r.apps} applications wait", title_justify="left")
    for column in ("measure", "value"):
        waiting.add_column(column, justify="left" if column == "measure" else "right")
    waiting.add_row("AM processes of waiting applications", str(r.ams_waiting))
    waiting.add_row("server RSS (MB)", f"{r.server_rss_mb:.0f}")
    waiting.add_row("etcd RSS (MB)", f"{r.etcd_rss_mb:.0f}")
    waiting.add_row(f"server CPU over {r.idle:g} s (s)", f"{r.server_cpu:.2f}")
    waiting.add_row(f"etcd CPU over {r.idle:g} s (s)", f"{r.etcd_cpu:.2f}")
    waiting.add_row("etcd keys per application", f"{r.keys_per_app:.1f}")
    waiting.add_row("etcd bytes per application (keys and values)", f"{r.bytes_per_app:.0f}")
    console.print(waiting)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=10_000,
                        help="applications queued (default: 10000)")
    parser.add_argument("--clients", type=int, default=8,
                        help="concurrent API clients submitting (default: 8)")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS,
                        help=f"seconds the idle CPU is read over (default: {IDLE_SECONDS:g})")
    parser.add_argument("--passes", type=int, default=PASSES,
                        help=f"timed passes of admission and of each listing (default: {PASSES})")
    args = parse_args(parser, argv, apps=20, clients=2, idle=1.0, passes=1)
    began = time.monotonic()
    console.print(f"[bold]Queued applications[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}")
    results = Results(args.apps, args.clients, args.idle)
    with sandbox() as box:
        inventory = box.root / "hosts.ini"
        inventory.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local "
                             f"primus_slots=1 primus_python={sys.executable}\n")
        (box.root / "site.yaml").write_text(SITE.format(inventory=inventory))
        with api_server(box) as server:
            with Client(server.address, plaintext=True, timeout=120) as client:
                blocker = client.submit(job_text("blocker", "default", "exec sleep 600"),
                                        source="blocker.json")
                deadline = time.monotonic() + 120
                while client.get_app(blocker).status.state.name != "RUNNING":
                    if time.monotonic() > deadline:
                        raise RuntimeError("the blocker did not start")
                    time.sleep(0.1)
            ids, results.submit_seconds = submit_all(server.address, args.apps, args.clients)
            results.ams_waiting = am_processes(set(ids))

            async def measure_etcd() -> list[int]:
                store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(box.etcd_url,)))
                try:
                    sizes, results.keys_per_app, results.bytes_per_app = await app_footprint(
                        store, PREFIX, ids[:50])
                    await admission_pass(store, results, args.passes)
                    return sizes
                finally:
                    await store.close()
            sizes = asyncio.run(measure_etcd())
            server_cpu, etcd_cpu = cpu_of(server.process.pid), cpu_of(box.etcd_pid)
            time.sleep(args.idle)
            results.server_cpu = cpu_of(server.process.pid) - server_cpu
            results.etcd_cpu = cpu_of(box.etcd_pid) - etcd_cpu
            results.server_rss_mb = psutil.Process(server.process.pid).memory_info().rss / 2**20
            results.etcd_rss_mb = psutil.Process(box.etcd_pid).memory_info().rss / 2**20
            with Client(server.address, plaintext=True, timeout=120) as client:
                for _ in range(args.passes):
                    start = time.perf_counter()
                    listed = client.queue()
                    results.list_queue_ms.append((time.perf_counter() - start) * 1000)
                    start = time.perf_counter()
                    head, total = client.queue_page(QUEUE_PAGE)
                    results.queue_page_ms.append((time.perf_counter() - start) * 1000)
                assert len(listed) == len(ids) == total, (len(listed), len(ids), total)
                assert head == listed[:QUEUE_PAGE]
            for _ in range(args.passes):
                for runs, command in ((results.queue_command_ms, ("queue", "-o", "json")),
                                      (results.command_start_ms, ("--version",))):
                    start = time.perf_counter()
                    box.run(*command)
                    runs.append((time.perf_counter() - start) * 1000)
            results.floor_seconds = asyncio.run(floor_writes(
                box.etcd_url, sizes, args.apps, args.clients))
            first = next(q.request.app_id for q in listed if q.position == 1)

            async def measure_grant() -> float:
                store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(box.etcd_url,)))
                try:
                    return await grant_to_am(store, first, lambda: box.run(
                        "kill", blocker, "--timeout", "60"))
                finally:
                    await store.close()
            results.grant_to_am = asyncio.run(measure_grant())
        # The server stopped: no keeper starts another AM. The AMs started meanwhile (their
        # trainers are `true`) end; any left is killed.
        deadline = time.monotonic() + 60
        while am_processes(set(ids)) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = am_processes(set(ids))
        if left:
            raise RuntimeError(f"{left} AM processes of queued applications left")
    report(results)
    console.print(f"whole benchmark {time.monotonic() - began:.0f}s", style="dim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
