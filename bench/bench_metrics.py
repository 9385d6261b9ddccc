"""Benchmark: a Prometheus scrape of ``primus server`` (issue 27) with 1,000 applications in
etcd and 10,000 in the history.

Against a private etcd, a SQLite history named in the site defaults file and one real ``primus
server run --plaintext`` with its UI on a free loopback port (no tokens: the scrape is open):
``examples/hello`` is run once; its record and ``--history`` copies of it are archived (the
history is not read by a scrape, and is there to show it); ``--apps`` running applications are
recorded in etcd as copies of hello's keys, each with a data stream's stats and a reservation
(no process runs). Once the server's fold holds them all, GET of ``/metrics`` ``--scrapes``
times over one keep-alive connection, in interleaved blocks with the floor and the peer:

* **floor**: GET of ``/static/primus.css`` from the same server (its HTTP stack alone);
* **peer**: the same samples (every family, label set and value of one scrape) served by
  ``prometheus_client``'s own HTTP server in a process of its own, from plain metrics objects:
  what exposing these figures costs with the library alone, with nothing to compute.

Measured once the server is idle (its start-up passes over the applications done). Figures:
p50 and p99 of each, the server's CPU per scrape (less what it uses idle over as long), the
body's size and sample count.
Target: a scrape's p50 ≤ 100 ms.

Usage: ``python bench/bench_metrics.py [--apps 1000] [--history 10000] [--scrapes 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil
from bench_api import ms, percentile, verdict
from bench_submit import Sandbox, console, etcd_version, med, parse_args, sandbox
from bench_ui import (
    PREFIX,
    archived_hello,
    connect,
    fill_history,
    record_running_apps,
    run_hello,
    ui_server,
)
from prometheus_client.parser import text_string_to_metric_families
from rich.table import Table

from primus.config.site import load_settings
from primus.state.keys import AppKeys, SchedulerKeys
from primus.state.records import Reservation, StreamStats, encode
from primus.store.api import Put

TARGET = 0.100
BLOCKS = 10
PEER = r"""
import json, sys, time
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
registry = CollectorRegistry()
for name, kind, labels, samples in json.load(sys.stdin):
    make = Counter if kind == "counter" else Gauge
    metric = make(name, name, labels, registry=registry)
    for values, value in samples:
        (metric.labels(*values) if labels else metric).inc(value) if kind == "counter" else \
            (metric.labels(*values) if labels else metric).set(value)
server, _ = start_http_server(0, "127.0.0.1", registry=registry)
print(server.server_port, flush=True)
time.sleep(3600)
"""


async def record_streams_and_reservations(box: Sandbox, app_ids: list[str]) -> None:
    """Give each running application a data stream's stats and one reservation."""
    store = await connect(box)
    scheduler = SchedulerKeys(PREFIX)
    try:
        for start in range(0, len(app_ids), 50):
            puts = []
            for app_id in app_ids[start:start + 50]:
                keys = AppKeys(PREFIX, app_id)
                puts.append(Put(keys.stream("train").stats, encode(StreamStats(
                    tasks=100, done=40, records=40_000, bytes=4 << 20))))
                puts.append(Put(scheduler.reservation(app_id, "worker", 0), encode(Reservation(
                    app_id=app_id, user="bench", queue="", role="worker", index=0,
                    host=f"h{hash(app_id) % 16:02d}", cpu=1, memory=1 << 30,
                    since=time.time()))))
            await store.txn([], puts)
    finally:
        await store.close()


def peer_families(text: str) -> list[tuple[str, str, list[str], list]]:
    """Every counter and gauge family of a scrape, as the peer re-creates them (histograms as
    their samples' gauges)."""
    families = []
    for family in text_string_to_metric_families(text):
        kind = family.type if family.type in ("counter", "gauge") else "gauge"
        samples: dict[str, list] = {}
        for sample in family.samples:
            name = sample.name if kind == "gauge" else family.name
            labels = sorted(sample.labels)
            samples.setdefault(name, []).append(
                (labels, [sample.labels[k] for k in labels], sample.value))
        for name, rows in samples.items():
            families.append((name, kind, rows[0][0], [(values, value)
                                                       for _, values, value in rows]))
    return families


async def wait_for_fold(session: aiohttp.ClientSession, url: str, apps: int) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        async with session.get(url) as answer:
            text = await answer.text()
        running = sum(sample.value for family in text_string_to_metric_families(text)
                      for sample in family.samples if sample.name == "primus_applications"
                      and sample.labels.get("state") == "RUNNING")
        if running >= apps:
            return text
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the server's fold did not reach {apps} running applications")


def cpu_of(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def settle(server: psutil.Process, most: float = 0.05, timeout: float = 120.0) -> None:
    """Wait until the server uses less than ``most`` of a core over a second (its start-up
    passes over the applications are done)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_of(server)
        await asyncio.sleep(1.0)
        if cpu_of(server) - before < most:
            return
    console.print("the server never settled: figures include its background work",
                  style="yellow")


async def time_gets(session: aiohttp.ClientSession, urls: dict[str, str], scrapes: int,
                    server: psutil.Process) -> tuple[dict[str, list[float]], float]:
    """GET each URL ``scrapes`` times in interleaved blocks; the latencies, and the server's
    CPU seconds per scrape of ``/metrics``, less what it uses idle over as long (measured
    after each block)."""
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    cpu = 0.0
    for _ in range(BLOCKS):
        for name, url in urls.items():
            before, began = cpu_of(server), time.perf_counter()
            for _ in range(max(scrapes // BLOCKS, 1)):
                started = time.perf_counter()
                async with session.get(url) as answer:
                    await answer.read()
                latencies[name].append(time.perf_counter() - started)
            if name == "primus":
                used, took = cpu_of(server) - before, time.perf_counter() - began
                idle = cpu_of(server)
                await asyncio.sleep(took)
                cpu += used - (cpu_of(server) - idle)
    return latencies, cpu / len(latencies["primus"])


async def measure(box: Sandbox, args: argparse.Namespace) -> None:
    settings = load_settings(env=box.env)
    hello = await archived_hello(box, settings, run_hello(box))
    filled = await fill_history(settings, hello, args.history)
    console.print(f"history: {args.history + 1:,} applications archived in {filled:.0f}s",
                  style="dim")
    running = await record_running_apps(box, settings, hello, args.apps)
    await record_streams_and_reservations(box, [status.app_id for status in running])
    with ui_server(box) as server:
        async with aiohttp.ClientSession() as session:
            text = await wait_for_fold(session, f"{server.url}metrics", args.apps)
            await settle(psutil.Process(server.process.pid))
            peer = subprocess.Popen([sys.executable, "-c", PEER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
            try:
                assert peer.stdin is not None and peer.stdout is not None
                peer.stdin.write(json.dumps(peer_families(text)))
                peer.stdin.close()
                port = int(peer.stdout.readline())
                latencies, cpu = await time_gets(
                    session, {"primus": f"{server.url}metrics",
                              "floor": f"{server.url}static/primus.css",
                              "peer": f"http://127.0.0.1:{port}/metrics"},
                    args.scrapes, psutil.Process(server.process.pid))
            finally:
                peer.kill()
                peer.wait()
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    table = Table(title=f"GET /metrics: {args.apps:,} applications in etcd, "
                        f"{args.history + 1:,} in the history ({samples:,} samples, "
                        f"{len(text.encode()):,} bytes)")
    for column in ("series", "p50", "p99", "p50 ÷ peer", "server CPU per scrape"):
        table.add_column(column, justify="right" if column != "series" else "left")
    peer_p50 = med(latencies["peer"])
    for name, shown in (("primus", "primus /metrics"), ("peer", "peer: prometheus_client "
                                                                "alone"),
                        ("floor", "floor: a static file")):
        values = latencies[name]
        table.add_row(shown, ms(med(values)), ms(percentile(values, 0.99)),
                      f"{med(values) / peer_p50:.2f}×",
                      ms(cpu) if name == "primus" else "")
    console.print(table)
    console.print(f"target: p50 ≤ {ms(TARGET)} — "
                  + verdict(med(latencies['primus']) <= TARGET, "missed"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=1000,
                        help="running applications in etcd (default: 1000)")
    parser.add_argument("--history", type=int, default=10_000,
                        help="archived applications (default: 10000)")
    parser.add_argument("--scrapes", type=int, default=200,
                        help="GETs of each series (default: 200)")
    args = parse_args(parser, argv, apps=2, history=2, scrapes=1)
    began = time.monotonic()
    console.print(f"[bold]Primus metrics[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; UI plaintext on loopback")
    with sandbox() as box:
        url = f"sqlite:///{box.root / 'history.db'}"
        Path(box.root / "site.yaml").write_text(json.dumps({"history": {"url": url}}))
        asyncio.run(measure(box, args))
    console.print(f"whole benchmark {time.monotonic() - began:.0f}s", style="dim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
