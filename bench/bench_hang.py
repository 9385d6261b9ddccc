"""Benchmark: what watching healthy trainers for hangs costs (issue 27: below 1 % of a core per
100 trainers).

Against a private etcd, ``--trainers`` :class:`~primus.executor.hang.HangWatch` objects of one
role run in this process for ``--seconds``, each over a trainer log and a progress file of its
own that a stand-in trainer touches every second (a healthy trainer: never hung, so no stack
is taken). A watch is what each executor runs beside its trainer: a look every quarter of the
role's ``hang_timeout`` (0.5 s to 5 s) and one etcd watch of the application's ``hang`` key.
Measured for ``hang_timeout`` 2 s (looks every 0.5 s, the most often), 10 s and 10 minutes
(every 5 s): this process's CPU and etcd's, as a share of one core.

**Floor**: the same process and etcd over the same time with the stand-in trainers touching
their files and no watch.

Usage: ``python bench/bench_hang.py [--trainers 100] [--seconds 30]``; ``--quick`` for a smoke
run (2 trainers, one look each second)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from pathlib import Path

import psutil
from bench_submit import Sandbox, console, etcd_version, parse_args, sandbox
from rich.table import Table

from primus.config.etcd import EtcdConfig
from primus.config.loader import load_job_text
from primus.executor.hang import HangWatch
from primus.state.keys import AppKeys
from primus.store.etcd_store import EtcdCoordinator

TARGET = 1.0
"""Per cent of one core per 100 trainers."""


def role(timeout: str):  # noqa: ANN201 - a RoleSpec
    return load_job_text(f"name: bench\nroles:\n  - name: worker\n    command: x\n"
                         f"    hang_timeout: {timeout}\npolicy:\n  heartbeat_ttl: 2s\n",
                         "bench", None).roles[0]


async def run(box: Sandbox, trainers: int, seconds: float, timeout: str | None
              ) -> tuple[float, float]:
    """This process's and etcd's CPU seconds over ``seconds`` with ``trainers`` stand-ins
    (and their watches, unless ``timeout`` is ``None``)."""
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(box.etcd_url,)))
    keys = AppKeys("/bench", "app")
    files = []
    for index in range(trainers):
        log, progress = box.root / f"t{index}.log", box.root / f"t{index}.progress"
        log.write_text("")
        progress.write_text("")
        files.append(progress)
    watches = [] if timeout is None else [
        HangWatch(store, keys, role(timeout), index, 1, "h", os.getpid(),
                  str(box.root / f"t{index}.log"), str(files[index]))
        for index in range(trainers)]
    tasks = [asyncio.ensure_future(w.run()) for w in watches]
    etcd = psutil.Process(box.etcd_pid)
    await asyncio.sleep(1.0)  # the watches opened
    mine, theirs = time.process_time(), sum(etcd.cpu_times()[:2])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for path in files:  # the healthy trainers report progress every second
            os.utime(path)
        await asyncio.sleep(1.0)
    used = time.process_time() - mine, sum(etcd.cpu_times()[:2]) - theirs
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await store.close()
    return used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parse_args(parser, argv, trainers=2, seconds=0.5)
    console.print(f"[bold]Hang watch[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; {args.trainers} healthy "
                  f"trainers, {args.seconds:g} s each")
    rows = []
    with sandbox() as box:
        floor = asyncio.run(run(box, args.trainers, args.seconds, None))
        for timeout in ("2s", "10s", "10m"):
            rows.append((timeout, asyncio.run(run(box, args.trainers, args.seconds, timeout))))
    table = Table(title=f"CPU per 100 trainers, % of one core ({args.trainers} measured)")
    for column in ("hang_timeout", "watches (this process)", "etcd", "less the floor",
                   "target"):
        table.add_column(column, justify="right")
    scale = 100 / args.trainers / args.seconds * 100

    def share(seconds: float) -> str:
        return f"{seconds * scale:.2f} %"

    table.add_row("floor: no watch", share(floor[0]), share(floor[1]), "", "")
    for timeout, (mine, etcd) in rows:
        extra = (mine - floor[0]) + (etcd - floor[1])
        table.add_row(timeout, share(mine), share(etcd), share(extra),
                      "met" if extra * scale < TARGET else "missed")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
