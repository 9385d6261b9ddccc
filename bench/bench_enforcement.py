"""Benchmark: what holding a trainer to its reservation costs its start (issue 26).

Each round starts a trainer the way the executor does — ``setpriv --pdeathsig KILL -- true``,
in a process group of its own — and waits for it, two ways, interleaved:

* **floor**: as without enforcement: the trainer alone;
* **cgroup**: as with it (``primus.executor.cgroups``): its cgroup made with the limits written
  (memory, cpu, pids), the trainer started through the joining shell (which writes its pid
  into each controller's ``cgroup.procs``, then execs it), the OOM count read once it ended,
  and the cgroup removed.

The difference is the cost per executor start (target: median ≤ 5 ms); the make, wrap and
remove steps are also timed alone. Run as root (or where the cgroup parent is writable).

Usage: ``python bench/bench_enforcement.py [--rounds 300]``; ``--quick`` for a smoke run (3 rounds)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_submit import parse_args  # noqa: E402

from primus.executor.cgroups import Limits, TrainerCgroup, find_hierarchy, writable  # noqa: E402
from primus.executor.executor import die_with_executor  # noqa: E402

console = Console()
TARGET_MS = 5.0


def start(argv: list[str]) -> None:
    subprocess.Popen(argv, process_group=0, stdout=subprocess.DEVNULL).wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parse_args(parser, argv, rounds=3)
    hierarchy = find_hierarchy()
    why = writable(hierarchy)
    if why:
        console.print(f"[red]cannot make cgroups here: {why}[/]")
        return 1
    console.print(f"[bold]Enforcement[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {hierarchy.describe()}, {args.rounds} rounds")
    trainer = die_with_executor(["true"])
    limits = Limits(memory=1 << 30, cpu=1.0, pids=16384)
    floor, enforced, made, ended = [], [], [], []
    for i in range(args.rounds + 10):
        before = time.perf_counter()
        start(trainer)
        plain = time.perf_counter() - before
        before = time.perf_counter()
        cgroup = TrainerCgroup.make(hierarchy, f"primus.bench.worker-{i}.1", limits)
        making = time.perf_counter() - before
        start(cgroup.wrap(trainer))
        after_run = time.perf_counter()
        cgroup.oom_kills()
        cgroup.remove()
        whole = time.perf_counter() - before
        if i >= 10:  # warm-up
            floor.append(plain)
            enforced.append(whole)
            made.append(making)
            ended.append(time.perf_counter() - after_run)
    table = Table(title="one trainer started and ended (ms)", title_justify="left")
    for column in ("what", "median", "p90", "max"):
        table.add_column(column, justify="left" if column == "what" else "right")

    def row(name: str, values: list[float]) -> None:
        ordered = sorted(values)
        table.add_row(name, f"{statistics.median(values) * 1000:.2f}",
                      f"{ordered[int(len(ordered) * 0.9)] * 1000:.2f}",
                      f"{max(values) * 1000:.2f}")

    row("floor: the trainer alone", floor)
    row("with its cgroup: made, joined, read, removed", enforced)
    row("  of which: make (mkdir, limits)", made)
    row("  of which: OOM count read, removed", ended)
    console.print(table)
    cost = (statistics.median(enforced) - statistics.median(floor)) * 1000
    console.print(f"cost per executor start: {cost:.2f} ms median (target ≤ {TARGET_MS:g} ms: "
                  f"{'[green]met[/]' if cost <= TARGET_MS else '[red]missed[/]'}); "
                  f"ratio {statistics.median(enforced) / statistics.median(floor):.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
