"""Benchmark: right-sized reservations (issue 46), autosize against fixed reservations, and
the latency of a resize in place.

Against a private etcd and a ``primus server`` (its autosizer elected), on one local host
that declares ``--host-cpu`` (2) CPUs:

* **mix**: ``--apps`` (10) single-executor applications reserving ``--cpu`` (0.5) CPUs each,
  submitted back to back, faster than the host can hold them. Each trainer runs
  ``--seconds`` (40) wall seconds and wants a share of its reservation spread evenly from 30 %
  to 60 % (it spins for that much CPU time every 100 ms, then sleeps); four times a second it
  notes its cgroup's CPU quota and its own CPU time. The same mix runs twice in one run:
  reservations fixed, then every role with ``autosize: {cpu: {target: --target}, interval:
  --interval}``. Per application, from the trainer's own notes: its utilization (CPU time used
  over the integral of its quota while it ran) and its queue wait (trainer start − submit);
  and the makespan (first submit → last trainer end). Floor for utilization: the fixed run.
* **latency**: one application of ``--executors`` (16) executors (trainers that sleep), resized
  between two CPU sizes ``--resizes`` (10) times through :meth:`ApplicationService.resize_role`
  in this process; from the call to every trainer's cgroup quota showing the new size (each
  cgroup file read every 5 ms). Target ≤ 1 s. Floors: the same 16 quota files written by this
  process directly, and a raw etcd put seen by a watch.
* **pass**: the autosizer's look every 2 s over a deployment of ``--fold-executors`` (10,000)
  running executors, half of them in autosized roles, their usage records folded as the
  server's metrics fold them (no etcd: :meth:`Autosizer.look` on a fold filled in process,
  every figure new at each pass, no window long enough to read a spec). Floor: one loop over
  the same records, reading each.

Usage: ``python bench/bench_autosize.py [--only mix|latency|pass] [--apps 10] [--seconds 40]
[--cpu 0.5] [--host-cpu 2] [--target 0.9] [--interval 3] [--executors 16] [--resizes 10]
[--fold-executors 10000]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench_submit import Sandbox, console, med, parse_args, sandbox, wait_for_quiet
from rich.table import Table

from primus.client.service import ApplicationService
from primus.config.site import load_settings
from primus.config.spec import JobSpec
from primus.server.autosize import Autosizer
from primus.server.metrics import Fold
from primus.state.records import AppStatus, ExecutorPlan, ExecutorUsage, encode
from primus.state.states import AppState, ExecutorState
from primus.store.api import Coordinator, KeyValue, WatchEvent
from primus.store.connect import open_store
from primus.store.recipes import watching

TRAINER = """\
import os, sys, time
out, want, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
lines = open("/proc/self/cgroup").read().splitlines()
paths = {c: p for _, cs, p in (line.split(":", 2) for line in lines) for c in cs.split(",") if c}
base = f"/sys/fs/cgroup/cpu{paths['cpu']}/"
def quota():
    q = int(open(base + "cpu.cfs_quota_us").read())
    return q / int(open(base + "cpu.cfs_period_us").read()) if q > 0 else -1.0
start = time.time()
notes = open(out, "w", buffering=1)
notes.write(f"start {start} {time.process_time()}\\n")
period, noted = 0.1, 0.0
while time.time() - start < seconds:
    tick = time.time()
    spun = time.process_time()
    while time.process_time() - spun < want * period and time.time() - tick < period:
        pass
    if tick - noted >= 0.25:
        notes.write(f"{tick} {quota()} {time.process_time()}\\n")
        noted = tick
    time.sleep(max(0.0, period - (time.time() - tick)))
notes.write(f"end {time.time()} {time.process_time()}\\n")
"""

SLEEPER = 'cat /proc/self/cgroup > "$OUT/cg-$PRIMUS_INDEX"; exec sleep 3600'


@dataclass
class AppRun:
    submitted: float
    started: float
    ended: float
    used: float
    """CPU seconds the trainer used."""
    reserved: float
    """The integral of its CPU quota over its run (core-seconds)."""
    settled: float
    """Its utilization from its quota's first change on (the whole run where it never
    changed): once autosize measured it."""

    @property
    def utilization(self) -> float:
        return self.used / self.reserved if self.reserved else 0.0


@dataclass
class MixRun:
    apps: list[AppRun]

    @property
    def makespan(self) -> float:
        return max(a.ended for a in self.apps) - min(a.submitted for a in self.apps)


def start_server(box: Sandbox, site: Path) -> subprocess.Popen[bytes]:
    state = box.root / f"server-{time.monotonic_ns()}.json"
    log = state.with_suffix(".log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "primus.server", "run", "--listen", "127.0.0.1:0",
         "--plaintext", "--state-file", str(state)],
        env={**box.env, "PRIMUS_CONF": str(site)}, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while not state.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start: {state.with_suffix('.log')}")
        time.sleep(0.1)
    return process


def notes_of(path: Path) -> AppRun | None:
    """The trainer's notes, once it wrote its end."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if not lines or not lines[-1].startswith("end "):
        return None
    _, start, cpu_start = lines[0].split()
    _, end, cpu_end = lines[-1].split()
    samples = [tuple(map(float, line.split())) for line in lines[1:-1]]
    if not samples:
        return None
    reserved = 0.0
    times = [float(start), *(s[0] for s in samples[1:]), float(end)]
    spans = list(zip(samples, times, times[1:], strict=False))
    for (_, quota, _), begin, finish in spans:
        reserved += max(quota, 0.0) * (finish - begin)
    changed = next((i for i, s in enumerate(samples) if s[1] != samples[0][1]), 0)
    settled_reserved = sum(max(quota, 0.0) * (finish - begin)
                           for (_, quota, _), begin, finish in spans[changed:])
    settled_used = float(cpu_end) - (samples[changed][2] if changed else float(cpu_start))
    return AppRun(0.0, float(start), float(end), float(cpu_end) - float(cpu_start), reserved,
                  settled_used / settled_reserved if settled_reserved else 0.0)


def run_mix(box: Sandbox, args: argparse.Namespace, autosize: bool) -> MixRun:
    label = "autosize" if autosize else "fixed"
    work = box.root / label
    work.mkdir()
    (work / "trainer.py").write_text(TRAINER)
    hosts = work / "hosts.ini"
    hosts.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local "
                     f"primus_cpu={args.host_cpu} primus_memory=64Gi "
                     f"primus_python={sys.executable}\n")
    submitted: dict[int, tuple[str, float]] = {}
    for index in range(args.apps):
        share = 0.3 + 0.3 * index / max(1, args.apps - 1)
        role = {"name": "worker", "cpu": args.cpu, "memory": "256Mi",
                "command": [sys.executable, str(work / "trainer.py"), str(work / f"{index}.out"),
                            f"{share * args.cpu:.4f}", str(args.seconds)]}
        if autosize:
            role["autosize"] = {"cpu": {"target": args.target}, "memory": {"headroom": 0.5},
                                "interval": args.interval}
        job = work / f"{index}.json"
        job.write_text(json.dumps({"name": f"mix-{label}-{index}", "roles": [role]}))
        at = time.time()
        app_id = box.run("submit", str(job), "-i", str(hosts)).strip().splitlines()[-1]
        submitted[index] = (app_id, at)
    deadline = time.monotonic() + 30 * args.seconds + 300
    runs: dict[int, AppRun] = {}
    while len(runs) < args.apps:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{label}: {args.apps - len(runs)} trainers never ended")
        for index, (_, at) in submitted.items():
            if index not in runs and (run := notes_of(work / f"{index}.out")) is not None:
                run.submitted = at
                runs[index] = run
        time.sleep(0.5)
    for app_id, _ in submitted.values():
        box.run("kill", app_id)
    return MixRun([runs[i] for i in sorted(runs)])


def run_latency(box: Sandbox, args: argparse.Namespace) -> tuple[list[float], list[float],
                                                                    list[float]]:
    work = box.root / "latency"
    work.mkdir()
    hosts = work / "hosts.ini"
    hosts.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local "
                     f"primus_cpu={args.executors} primus_memory=64Gi "
                     f"primus_python={sys.executable}\n")
    job = work / "job.json"
    job.write_text(json.dumps({"name": "latency", "env": {"OUT": str(work)}, "roles": [
        {"name": "worker", "num": args.executors, "cpu": 0.2, "memory": "64Mi",
         "command": SLEEPER}]}))
    app_id = box.run("submit", str(job), "-i", str(hosts)).strip().splitlines()[-1]
    files = [work / f"cg-{i}" for i in range(args.executors)]
    deadline = time.monotonic() + 120
    while not all(f.exists() and f.read_text() for f in files):
        if time.monotonic() > deadline:
            raise RuntimeError("the 16 trainers did not start")
        time.sleep(0.2)
    quotas = []
    for f in files:
        paths = {c: p for _, cs, p in (line.split(":", 2) for line in
                                        f.read_text().splitlines()) for c in cs.split(",") if c}
        quotas.append(Path(f"/sys/fs/cgroup/cpu{paths['cpu']}/cpu.cfs_quota_us"))
    try:
        return asyncio.run(measure_resizes(box, args, app_id, quotas))
    finally:
        box.run("kill", app_id)


async def measure_resizes(box: Sandbox, args: argparse.Namespace, app_id: str,
                          quotas: list[Path]) -> tuple[list[float], list[float], list[float]]:
    """Resize the role back and forth; each time, the seconds until every quota file says
    so, and the floors'."""
    settings = load_settings(env=box.env)
    store, settings = await open_store(settings)
    service = ApplicationService(store, settings)
    resized: list[float] = []
    direct: list[float] = []
    watched: list[float] = []
    try:
        # The kernel's files are polled: a cgroup file changing sends no event to wait on.
        while any(int(q.read_text()) != 20_000 for q in quotas):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        for attempt in range(args.resizes):
            cpu = 0.3 if attempt % 2 == 0 else 0.2
            want = round(cpu * 100_000)
            began = time.perf_counter()
            await service.resize_role(app_id, "worker", cpu, None, "bench")
            while any(int(q.read_text()) != want for q in quotas):  # noqa: ASYNC110
                if time.perf_counter() - began > 30:
                    raise RuntimeError(f"resize {attempt}: not applied within 30 s")
                await asyncio.sleep(0.005)
            resized.append(time.perf_counter() - began)
            # Floor: the same files written here (back to the size they hold).
            began = time.perf_counter()
            for q in quotas:
                q.write_text(str(want))
            direct.append(time.perf_counter() - began)
            watched.append(await watch_delay(store, settings.prefix + "/bench-floor"))
            await asyncio.sleep(0.5)
    finally:
        await store.close()
    return resized, direct, watched


async def watch_delay(store: Coordinator, key: str) -> float:
    """Seconds from a put to its event on a watch opened before it."""
    async with watching(store, key) as watch:
        began = time.perf_counter()
        await store.put(key, b"x")
        async for event in watch.after(watch.revision):
            if isinstance(event, WatchEvent) and event.key == key:
                return time.perf_counter() - began
    return float("nan")


def run_pass(args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Seconds of the autosizer's look, and of the floor's loop, at each of 20 passes over a
    fold of ``--fold-executors`` running executors (100 a role, every other role autosized)."""
    fold = Fold("/bench", "default")
    roles_per_app = 10
    apps = max(1, args.fold_executors // (100 * roles_per_app))
    per_role = max(1, args.fold_executors // (apps * roles_per_app))
    for a in range(apps):
        app_id = f"big-{a}"
        roles = [{"name": f"r{r}", "num": per_role, "command": "true", "cpu": 1,
                  **({"autosize": {"cpu": {}, "interval": 3600}} if r % 2 == 0 else {})}
                 for r in range(roles_per_app)]
        spec = JobSpec.model_validate({"name": "big", "roles": roles})
        fold.put(KeyValue(f"/bench/apps/{app_id}/spec", spec.model_dump_json().encode(), 0, 1, 1))
        fold.put(KeyValue(f"/bench/apps/{app_id}/status", encode(AppStatus(
            app_id=app_id, name="big", state=AppState.RUNNING, submit_time=0.0)), 0, 2, 1))
        for r in range(roles_per_app):
            for i in range(per_role):
                fold.put(KeyValue(f"/bench/apps/{app_id}/executors/r{r}/{i}/plan", encode(
                    ExecutorPlan(role=f"r{r}", index=i, attempt=1, host="h", address="h",
                                 state=ExecutorState.RUNNING)), 0, 3, 1))
    keys = list(fold.plans)
    sizer = Autosizer(None, fold)  # type: ignore[arg-type] # its service is used only to resize
    looks: list[float] = []
    loops: list[float] = []
    for n in range(20):
        for app_id, role, index in keys:  # every executor's figures new since the last pass
            fold.usage[(app_id, role, index)] = ExecutorUsage(
                attempt=1, time=float(n), cpu=0.5, cpu_seconds=float(n), memory=1 << 20,
                memory_peak=1 << 20, cpu_reserved=1.0, memory_reserved=1 << 30)
        began = time.perf_counter()
        asyncio.run(sizer.look())
        looks.append(time.perf_counter() - began)
        began = time.perf_counter()
        seen = 0.0
        for usage in fold.usage.values():
            seen += usage.cpu_seconds or 0.0
        for plan in fold.plans.values():
            seen += plan.attempt
        loops.append(time.perf_counter() - began)
    return looks, loops


def report(mixes: dict[str, MixRun], latency: tuple[list[float], list[float], list[float]]
           | None, args: argparse.Namespace, seconds: float,
           passes: tuple[list[float], list[float]] | None = None) -> None:
    if mixes:
        table = Table(title=f"{args.apps} applications of {args.cpu:g} CPUs, trainers wanting "
                            f"30–60 % of it for {args.seconds:g} s, host of {args.host_cpu} "
                            f"CPUs: fixed reservations against autosize (target "
                            f"{args.target:g}, interval {args.interval:g} s)")
        for column in ("measure", "fixed", "autosize", "ratio"):
            table.add_column(column, justify="left" if column == "measure" else "right")
        fixed, auto = mixes.get("fixed"), mixes.get("autosize")

        def row(name: str, value, fmt: str) -> None:  # noqa: ANN001 - a getter
            a = value(fixed) if fixed else None
            b = value(auto) if auto else None
            table.add_row(name, fmt.format(a) if a is not None else "-",
                          fmt.format(b) if b is not None else "-",
                          f"{b / a:.2f}×" if a and b is not None else "")

        row("utilization of the reservation, mean", lambda m: statistics.fmean(
            a.utilization for a in m.apps), "{:.2f}")
        row("utilization, lowest application", lambda m: min(
            a.utilization for a in m.apps), "{:.2f}")
        row("utilization once resized (fixed: all along), mean", lambda m: statistics.fmean(
            a.settled for a in m.apps), "{:.2f}")
        row("queue wait, mean (s)", lambda m: statistics.fmean(
            a.started - a.submitted for a in m.apps), "{:.1f}")
        row("makespan (s)", lambda m: m.makespan, "{:.1f}")
        console.print(table)
    if latency:
        resized, direct, watched = latency
        table = Table(title=f"Resize latency: a role of {args.executors} executors, from the "
                            f"request to every trainer's new cgroup quota ({len(resized)} "
                            f"resizes)")
        for column in ("measure", "median ms", "max ms", "floor median ms", "ratio", "target"):
            table.add_column(column, justify="left" if column == "measure" else "right")
        table.add_row("resize_role → every cgroup quota", f"{med(resized) * 1000:.0f}",
                      f"{max(resized) * 1000:.0f}", "", "",
                      "≤ 1000: " + ("met" if max(resized) <= 1 else "missed"))
        table.add_row(f"floor: the {args.executors} quota files written directly",
                      f"{med(direct) * 1000:.2f}", f"{max(direct) * 1000:.2f}",
                      f"{med(direct) * 1000:.2f}", f"{med(resized) / med(direct):.0f}×", "")
        table.add_row("floor: an etcd put seen by a watch", f"{med(watched) * 1000:.2f}",
                      f"{max(watched) * 1000:.2f}", f"{med(watched) * 1000:.2f}",
                      f"{med(resized) / med(watched):.0f}×", "")
        console.print(table)
    if passes:
        looks, loops = passes
        table = Table(title=f"The autosizer's look at {args.fold_executors} running executors, "
                            f"half autosized (20 passes)")
        for column in ("measure", "median ms", "max ms", "CPU at one look per 2 s"):
            table.add_column(column, justify="left" if column == "measure" else "right")
        table.add_row("Autosizer.look", f"{med(looks) * 1000:.1f}", f"{max(looks) * 1000:.1f}",
                      f"{med(looks) / 2 * 100:.1f} % of a core")
        table.add_row("floor: one loop reading the same records", f"{med(loops) * 1000:.1f}",
                      f"{max(loops) * 1000:.1f}", f"ratio {med(looks) / med(loops):.0f}×")
        console.print(table)
    console.print(f"whole benchmark: {seconds:.0f} s", style="dim")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("mix", "latency", "pass"))
    parser.add_argument("--apps", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--cpu", type=float, default=0.5)
    parser.add_argument("--host-cpu", type=int, default=2)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--interval", type=float, default=3)
    parser.add_argument("--executors", type=int, default=16)
    parser.add_argument("--resizes", type=int, default=10)
    parser.add_argument("--fold-executors", type=int, default=10_000)
    args = parse_args(parser, argv, apps=1, seconds=4, executors=2, resizes=2, host_cpu=1,
                      fold_executors=1000)
    if not os.path.isdir("/sys/fs/cgroup/cpu"):
        console.print("needs cgroup v1's cpu controller (/sys/fs/cgroup/cpu) and root")
        return 2
    began = time.monotonic()
    mixes: dict[str, MixRun] = {}
    latency = None
    passes = run_pass(args) if args.only in (None, "pass") else None
    if args.only == "pass":
        report(mixes, latency, args, time.monotonic() - began, passes)
        return 0
    with sandbox() as box:
        site = box.root / "site-server.yaml"
        site.write_text("trust: one-account\nresources: {usage_interval: 1}\n")
        box.env["PRIMUS_CONF"] = str(site)
        server = start_server(box, site)
        try:
            if args.only in (None, "mix"):
                for autosize in (False, True):
                    wait_for_quiet()
                    mixes["autosize" if autosize else "fixed"] = run_mix(box, args, autosize)
            if args.only in (None, "latency"):
                wait_for_quiet()
                latency = run_latency(box, args)
        finally:
            server.terminate()
            server.wait(30)
    report(mixes, latency, args, time.monotonic() - began, passes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
