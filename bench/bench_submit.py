"""Benchmark: ``primus submit`` → every trainer started, against the floor of the same work.

For each size N it runs, against a private etcd:

* **primus**: ``primus submit`` of a job with one role ``worker`` of N executors whose trainer
  writes ``date +%s.%N`` to ``$OUT/$PRIMUS_INDEX`` and then sleeps. The time runs from just
  before the ``primus submit`` subprocess starts to the latest time a trainer wrote. Once every
  executor is RUNNING, the RSS of the AM and of each executor process is read, then the
  application is stopped with ``primus kill`` and no process of it may remain.
* **floor**: what any design must pay on this machine: one Python process that imports
  ``primus.cli.main`` and connects to etcd (``primus submit`` must start), then N processes
  started at once that import the executor and the etcd store, connect and read one key. The
  floor is the first process's time to connected plus the time until the last of the N has
  connected.

Usage: ``python bench/bench_submit.py [--sizes 1,8,32] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import psutil
from rich.console import Console
from rich.table import Table

from primus.store.embedded import find_etcd_binary, start_etcd, stop_pid

ROLE = "worker"
TRAINER = 'date +%s.%N > "$OUT/$PRIMUS_INDEX"; exec sleep 120'
EXECUTOR_RSS_TARGET_MB = 60.0
RATIO_TARGET = 1.5
POLL_SECONDS = 0.02
START_TIMEOUT = 120.0
QUIET_CPU_PERCENT = 25.0
QUIET_WAIT = 20.0
DISTURBED_SHARE = 0.10
"""A run during which other processes used more than this share of the CPU is measured again."""
ATTEMPTS = 3
MB = 1024 * 1024

# Run by the floor processes: import what a process of that kind must import, connect to etcd,
# read one key, print when it was ready and the CPU time it had used by then. The module to
# import comes as the first argument.
FLOOR_PROCESS = """
import asyncio, importlib, sys, time
importlib.import_module(sys.argv[1])
from primus.config.etcd import EtcdConfig
from primus.store.etcd_store import EtcdCoordinator

async def ready() -> tuple[float, float]:
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(sys.argv[2],)))
    await store.get(sys.argv[3])
    now, cpu = time.time(), time.process_time()
    await store.close()
    return now, cpu

print(*asyncio.run(ready()))
"""

console = Console(width=None if sys.stdout.isatty() else 120)


@dataclass
class Sandbox:
    """A private etcd, ``PRIMUS_HOME`` and key prefix, and the environment that selects them."""

    root: Path
    etcd_url: str
    etcd_pid: int
    env: dict[str, str]
    primus: list[str]

    def run(self, *args: str, timeout: float = 120.0) -> str:
        """Run the ``primus`` command line; return its stdout, raise with stderr on failure."""
        done = subprocess.run([*self.primus, *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"primus {' '.join(args)} exited {done.returncode}:\n"
                               f"{done.stderr}")
        return done.stdout


def sandbox_of(root: Path, client_url: str, pid: int, **settings: str) -> Sandbox:
    """The sandbox of the etcd at ``client_url`` (process ``pid``) under ``root``: ``primus``
    run with that etcd and ``settings`` (``PRIMUS_*``) alone, no site file, its home in
    ``root``."""
    (root / "site.yaml").write_text("")
    # Bytecode is read and kept as in any installation: next to the sources (where
    # scripts/bootstrap compiled it), not recompiled into a cache of the sandbox's own.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PRIMUS_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PRIMUS_ETCD=client_url, PRIMUS_HOME=str(root / "home"),
               PRIMUS_CONF=str(root / "site.yaml"), **settings)
    script = Path(sys.executable).with_name("primus")
    primus = [str(script)] if script.exists() else [sys.executable, "-m", "primus.cli"]
    return Sandbox(root, client_url, pid, env, primus)


@contextmanager
def sandbox() -> Iterator[Sandbox]:
    """Start a private etcd in a temporary directory; stop it and remove everything after."""
    root = Path(tempfile.mkdtemp(prefix="primus-bench-"))
    process, info = start_etcd(root / "etcd" / "data", root / "etcd" / "etcd.log")
    try:
        yield sandbox_of(root, info.client_url, process.pid, PRIMUS_PREFIX="/bench")
    finally:
        stop_pid(process.pid)
        shutil.rmtree(root, ignore_errors=True)


# --- primus -------------------------------------------------------------------------------------


@dataclass
class PrimusRun:
    """One submit of N executors: the total, its milestones and the memory it used."""

    seconds: float
    milestones: dict[str, float]
    """Seconds after the submit started at which each milestone was reached."""
    executor_start: list[float]
    """Per executor: seconds from its launch to its registration (process start-up)."""
    executor_rss: list[float]
    executor_uss: list[float]
    am_rss: float
    am_uss: float
    cpu: dict[str, float]
    """CPU seconds (user + system) spent until every executor was RUNNING, by process kind."""
    foreign_share: float
    """Share of the machine's CPU that other processes used during the run."""


def write_job(path: Path, size: int, out: Path) -> None:
    job = {"name": f"bench-n{size}", "workdir": str(out),
           "env": {"OUT": str(out)},
           "roles": [{"name": ROLE, "num": size, "command": TRAINER}]}
    path.write_text(json.dumps(job, indent=2))


def wait_for_trainers(out: Path, size: int, file_name: Callable[[int], str] = str,
                      timeout: float = START_TIMEOUT) -> list[float]:
    """The start time each trainer wrote (into ``out / file_name(index)``), once all ``size``
    have written it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        times = []
        for index in range(size):
            try:
                times.append(float((out / file_name(index)).read_text()))
            except (OSError, ValueError):
                break
        if len(times) == size:
            return times
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"trainers did not all start within {timeout:g}s; see {out}")


def wait_until_running(box: Sandbox, app_id: str) -> dict[str, Any]:
    """``primus status -o json`` once the app and every executor's plan are RUNNING."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        status = json.loads(box.run("status", app_id, "-o", "json"))
        executors = status["executors"][ROLE]
        if status["status"]["state"] == "RUNNING" and status["am"] and all(
                e["plan"] and e["plan"]["state"] == "RUNNING" and e["live"] for e in executors):
            return status
        time.sleep(0.2)
    raise TimeoutError(f"{app_id} did not reach RUNNING within {START_TIMEOUT:g}s")


def memory_mb(pid: int) -> tuple[float, float]:
    """RSS and USS of one process (not its children), in MB."""
    info = psutil.Process(pid).memory_full_info()
    return info.rss / MB, info.uss / MB


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User and system CPU time one process (and its waited-for children) has used so far."""
    times = psutil.Process(pid).cpu_times()
    own = times.user + times.system
    return own + times.children_user + times.children_system if children else own


def children_cpu_seconds() -> float:
    """User and system CPU time of every child of this process that has been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_cpu_seconds() -> float:
    """CPU time all processes of the machine have used since boot."""
    times = psutil.cpu_times()
    return times.user + times.nice + times.system + times.irq + times.softirq


def own_cpu_seconds(box: Sandbox) -> float:
    """CPU time of this process, its waited-for children and the sandbox's etcd."""
    return time.process_time() + children_cpu_seconds() + cpu_seconds(box.etcd_pid)


@dataclass
class CpuWatch:
    """Tells how much CPU processes outside the benchmark used while a run was measured.

    What is not accounted to the benchmark's processes (kernel threads, loopback network
    interrupts) counts as others' too: a few percent in an undisturbed run.
    """

    box: Sandbox
    started: float = 0.0
    machine: float = 0.0
    own: float = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        self.machine, self.own = machine_cpu_seconds(), own_cpu_seconds(self.box)

    def foreign_share(self, detached: float = 0.0) -> float:
        """Share of the machine's CPU capacity others used since :meth:`start`.

        ``detached`` is the CPU time of the run's processes that this process does not wait
        for (AM, executors, trainers).
        """
        machine = machine_cpu_seconds() - self.machine
        foreign = machine - (own_cpu_seconds(self.box) - self.own) - detached
        capacity = (time.monotonic() - self.started) * (os.cpu_count() or 1)
        return max(foreign, 0.0) / capacity


def milestones(status: dict[str, Any], started: float, trainer_times: list[float]
               ) -> dict[str, float]:
    """When each step of the start-up was reached, in seconds after ``started``."""
    executors = status["executors"][ROLE]
    plans = [e["plan"] for e in executors]
    lives = [e["live"] for e in executors]
    cluster_event = next(e["time"] for e in status["events"] if e["kind"] == "cluster")
    points = {
        "app written (submit connected)": status["status"]["submit_time"],
        "AM leads": status["am"]["since"],
        "first executor launched": min(p["launch_time"] for p in plans),
        "last executor launched": max(p["launch_time"] for p in plans),
        "last executor registered": max(live["registered_time"] for live in lives),
        "cluster written": cluster_event,
        "last trainer started (executor's clock)": max(live["trainer_start_time"]
                                                        for live in lives),
        "last trainer wrote its time": max(trainer_times),
    }
    return {name: at - started for name, at in points.items()}


def app_processes(app_id: str) -> list[psutil.Process]:
    """Every process of the application: AM and executors name it, trainers carry it in env."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if app_id in " ".join(process.info["cmdline"] or ()) or \
                    process.environ().get("PRIMUS_APP_ID") == app_id:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def stop_app(box: Sandbox, app_id: str) -> None:
    """``primus kill`` the app, then check that none of its processes is left."""
    box.run("kill", app_id, "--timeout", "60")
    deadline = time.monotonic() + 10.0
    left = app_processes(app_id)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = app_processes(app_id)
    if left:
        for process in left:
            process.kill()
        raise RuntimeError(f"{app_id}: processes left after primus kill (now killed): "
                           f"{[p.pid for p in left]}")


def run_primus(box: Sandbox, size: int) -> PrimusRun:
    (box.root / "runs").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"n{size}-", dir=box.root / "runs"))
    out = work / "out"
    out.mkdir()
    job = work / "job.json"
    write_job(job, size, out)
    watch = CpuWatch(box)
    watch.start()
    cpu_before = children_cpu_seconds()
    started = time.time()
    app_id = box.run("submit", str(job)).strip()
    submit_cpu = children_cpu_seconds() - cpu_before  # until it exited
    try:
        trainer_times = wait_for_trainers(out, size)
        status = wait_until_running(box, app_id)
        executors = status["executors"][ROLE]
        executor_pids = [e["plan"]["process"]["pid"] for e in executors]
        executor_memory = [memory_mb(pid) for pid in executor_pids]
        am_rss, am_uss = memory_mb(status["am"]["pid"])
        cpu = {"submit": submit_cpu, "AM": cpu_seconds(status["am"]["pid"]),
               "executors": sum(cpu_seconds(pid) for pid in executor_pids)}
        trainers = sum(cpu_seconds(e["live"]["trainer"]["pid"], children=True)
                       for e in executors)
        foreign_share = watch.foreign_share(cpu["AM"] + cpu["executors"] + trainers)
    finally:
        stop_app(box, app_id)
    return PrimusRun(
        seconds=max(trainer_times) - started,
        milestones=milestones(status, started, trainer_times),
        executor_start=[e["live"]["registered_time"] - e["plan"]["launch_time"]
                        for e in executors],
        executor_rss=[rss for rss, _ in executor_memory],
        executor_uss=[uss for _, uss in executor_memory],
        am_rss=am_rss, am_uss=am_uss, cpu=cpu, foreign_share=foreign_share)


# --- floor --------------------------------------------------------------------------------------


@dataclass
class FloorRun:
    """One floor measurement: the CLI process, then N executor-like processes at once."""

    cli_seconds: float
    executors_seconds: float
    executor_start: list[float]
    """Per executor-like process: seconds from its spawn to connected."""
    cli_cpu: float
    """CPU seconds (user + system) the CLI-like process had used when connected."""
    executor_cpu: list[float]
    """The same for each executor-like process."""
    foreign_share: float
    """Share of the machine's CPU that other processes used during the run."""

    @property
    def seconds(self) -> float:
        return self.cli_seconds + self.executors_seconds


def floor_process(box: Sandbox, module: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", FLOOR_PROCESS, module, box.etcd_url,
                             "/bench/floor"], env=box.env, stdout=subprocess.PIPE, text=True)


def ready_at(process: subprocess.Popen[str]) -> tuple[float, float]:
    """When the floor process was connected, and the CPU seconds it had used by then."""
    stdout, _ = process.communicate(timeout=START_TIMEOUT)
    if process.returncode != 0:
        raise RuntimeError(f"floor process exited {process.returncode}")
    when, cpu = stdout.split()
    return float(when), float(cpu)


def run_floor(box: Sandbox, size: int) -> FloorRun:
    watch = CpuWatch(box)
    watch.start()
    started = time.time()
    cli_ready, cli_cpu = ready_at(floor_process(box, "primus.cli.main"))
    spawned = time.time()
    processes = [floor_process(box, "primus.executor.executor") for _ in range(size)]
    ready = [ready_at(p) for p in processes]
    return FloorRun(cli_ready - started, max(t for t, _ in ready) - spawned,
                    [t - spawned for t, _ in ready], cli_cpu, [cpu for _, cpu in ready],
                    watch.foreign_share())


def warm_up(box: Sandbox) -> None:
    """Fill the page cache and the bytecode cache for every module the runs import."""
    modules = ["primus.cli.main", "primus.am.__main__", "primus.executor.__main__"]
    subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], env=box.env,
                   check=True)
    run_floor(box, 1)


# --- report -------------------------------------------------------------------------------------


def etcd_version() -> str:
    binary = find_etcd_binary()
    first = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                           check=False).stdout.splitlines()
    return f"{first[0] if first else '?'} ({binary})"


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def report(sizes: list[int], repeat: int, primus: dict[int, list[PrimusRun]],
           floor: dict[int, list[FloorRun]], elapsed: float) -> None:
    console.print(f"[bold]Submit → all trainers started[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; median (min) of {repeat} "
                  f"runs; whole benchmark {elapsed:.0f}s")

    table = Table(title="Time to all trainers started (s)", title_justify="left")
    for column in ("N", "primus", "floor", "floor: cli", "floor: N executors",
                   "primus / floor", f"target ≤ {RATIO_TARGET:g}×"):
        table.add_column(column, justify="right")
    for size in sizes:
        p = [r.seconds for r in primus[size]]
        f = [r.seconds for r in floor[size]]
        ratio = med(p) / med(f)
        table.add_row(str(size), f"{med(p):.2f} ({min(p):.2f})", f"{med(f):.2f} ({min(f):.2f})",
                      f"{med([r.cli_seconds for r in floor[size]]):.2f}",
                      f"{med([r.executors_seconds for r in floor[size]]):.2f}",
                      f"{ratio:.2f}× ({min(p) / min(f):.2f}×)",
                      "[green]met[/]" if ratio <= RATIO_TARGET
                      else f"[red]missed by {ratio - RATIO_TARGET:.2f}×[/]")
    console.print(table)
    console.print("Other processes' share of the CPU during the runs, max: " + ", ".join(
        f"N={s} primus {max(r.foreign_share for r in primus[s]):.0%} floor "
        f"{max(r.foreign_share for r in floor[s]):.0%}" for s in sizes), style="dim")

    steps = Table(title="Where primus spends it: seconds after submit started (median)",
                  title_justify="left")
    steps.add_column("milestone")
    for size in sizes:
        steps.add_column(f"N={size}", justify="right")
    for name in primus[sizes[0]][0].milestones:
        steps.add_row(name, *(f"{med([r.milestones[name] for r in primus[s]]):.2f}"
                              for s in sizes))
    steps.add_row("executor launch → registered, median / max",
                  *(f"{med([med(r.executor_start) for r in primus[s]]):.2f} / "
                    f"{med([max(r.executor_start) for r in primus[s]]):.2f}" for s in sizes))
    steps.add_row("floor: executor spawn → connected, median / max",
                  *(f"{med([med(r.executor_start) for r in floor[s]]):.2f} / "
                    f"{med([max(r.executor_start) for r in floor[s]]):.2f}" for s in sizes))
    console.print(steps)

    cpu = Table(title="CPU seconds (user + system) until every trainer started (median)",
                title_justify="left")
    cpu.add_column("processes")
    for size in sizes:
        cpu.add_column(f"N={size}", justify="right")
    for kind in primus[sizes[0]][0].cpu:
        cpu.add_row(f"primus: {kind}", *(f"{med([r.cpu[kind] for r in primus[s]]):.2f}"
                                         for s in sizes))
    primus_cpu = {s: med([sum(r.cpu.values()) for r in primus[s]]) for s in sizes}
    floor_cpu = {s: med([r.cli_cpu + sum(r.executor_cpu) for r in floor[s]]) for s in sizes}
    cpu.add_row("primus: total", *(f"{primus_cpu[s]:.2f}" for s in sizes))
    cpu.add_row("primus: per executor", *(
        f"{med([r.cpu['executors'] / s for r in primus[s]]):.3f}" for s in sizes))
    cpu.add_row("floor: cli", *(f"{med([r.cli_cpu for r in floor[s]]):.2f}" for s in sizes))
    cpu.add_row("floor: per executor", *(
        f"{med([med(r.executor_cpu) for r in floor[s]]):.3f}" for s in sizes))
    cpu.add_row("floor: total", *(f"{floor_cpu[s]:.2f}" for s in sizes))
    cpu.add_row("primus / floor", *(f"{primus_cpu[s] / floor_cpu[s]:.2f}×" for s in sizes))
    console.print(cpu)

    memory = Table(title="Memory of one process, not its children (MB, median over runs)",
                   title_justify="left")
    for column in ("process", "RSS", "USS", "target"):
        memory.add_column(column, justify="right" if column != "process" else "left")
    for size in sizes:
        rss = med([med(r.executor_rss) for r in primus[size]])
        uss = med([med(r.executor_uss) for r in primus[size]])
        verdict = "[green]met[/]" if rss <= EXECUTOR_RSS_TARGET_MB else "[red]missed[/]"
        memory.add_row(f"idle executor, RUNNING (N={size})", f"{rss:.1f}", f"{uss:.1f}",
                       f"RSS ≤ {EXECUTOR_RSS_TARGET_MB:g} {verdict}")
    for size in sizes:
        memory.add_row(f"AM supervising {size} executors",
                       f"{med([r.am_rss for r in primus[size]]):.1f}",
                       f"{med([r.am_uss for r in primus[size]]):.1f}", "")
    console.print(memory)


def wait_for_quiet() -> None:
    """Wait (up to QUIET_WAIT) until the machine is nearly idle, so that other work skews no
    run."""
    deadline = time.monotonic() + QUIET_WAIT
    while QUIET_WAIT > 0 and psutil.cpu_percent(interval=0.3) > QUIET_CPU_PERCENT:
        if time.monotonic() > deadline:
            console.print(f"[yellow]machine still busy after {QUIET_WAIT:g}s; measuring "
                          f"anyway[/]")
            return


class Measured(Protocol):
    """A measured run that knows how much of the CPU other processes used meanwhile."""

    foreign_share: float


Run = TypeVar("Run", bound=Measured)


def undisturbed(measure: Callable[[], Run], what: str) -> Run:
    """Measure, again if other processes took much of the CPU meanwhile (up to ATTEMPTS)."""
    for attempt in range(1, ATTEMPTS + 1):
        wait_for_quiet()
        run = measure()
        if run.foreign_share <= DISTURBED_SHARE or attempt == ATTEMPTS:
            return run
        console.print(f"[yellow]{what}: other processes used {run.foreign_share:.0%} of the "
                      f"CPU meanwhile; measuring again[/]")
    raise AssertionError("unreachable")


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None, **quick: Any
               ) -> argparse.Namespace:
    """The benchmark's arguments, with ``--quick``: a smoke run that sets the arguments named in
    ``quick`` (the smallest sizes that still run every part of the benchmark), measures each
    run once and waits for no quiet machine. Its figures mean nothing; it runs in the test
    suite (``tests/integration/test_bench_quick.py``), beside other tests, so that a benchmark
    cannot break unnoticed."""
    global QUIET_WAIT, ATTEMPTS  # noqa: PLW0603 - the benchmarks' one switch
    sizes = ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in quick.items())
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run of seconds, its figures meaningless: {sizes}; each run "
                             f"measured once, no wait for a quiet machine")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(quick)
        QUIET_WAIT, ATTEMPTS = 0.0, 1
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,32",
                        help="comma-separated executor counts (default: 1,8,32)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (default: 3)")
    args = parse_args(parser, argv, sizes="1,2", repeat=1)
    sizes = [int(s) for s in args.sizes.split(",")]
    began = time.monotonic()
    primus: dict[int, list[PrimusRun]] = {size: [] for size in sizes}
    floor: dict[int, list[FloorRun]] = {size: [] for size in sizes}
    with sandbox() as box:
        warm_up(box)
        for size in sizes:
            for attempt in range(args.repeat):
                # Interleaved, so that a slow spell of the machine hits both alike.
                label = f"N={size} run {attempt + 1}/{args.repeat}"
                floor[size].append(undisturbed(partial(run_floor, box, size), f"{label} floor"))
                primus[size].append(undisturbed(partial(run_primus, box, size),
                                                f"{label} primus"))
                console.print(f"{label}: primus {primus[size][-1].seconds:.2f}s, floor "
                              f"{floor[size][-1].seconds:.2f}s", style="dim")
    report(sizes, args.repeat, primus, floor, time.monotonic() - began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
