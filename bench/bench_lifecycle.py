"""Benchmark: straggler rescheduling and suspend/resume (issue 16).

Against a private etcd (``bench_submit.sandbox``), local launcher, no root.

* **stragglers**: a text stream (``--size-mib``, 128 MiB in 8 files, ``chunk_size: 8Mi``) read
  by a role ``worker`` of 4 executors, ``max_per_host: 1``, on 5 hosts of this machine (each
  its own Primus home, inventory lines ``NAME ansible_connection=local primus_home=DIR``; one
  host spare). The trainer is ``tests/integration/data_trainer.py``: it reads 32 KiB, sleeps
  ``--delay``, and so on; on the host ``slow`` it sleeps four times as long (a quarter of the
  speed). Three jobs, interleaved, ``--repeat`` times each: **without** rescheduling, **with**
  ``straggler: {factor: 2, window: 5s, max_percent: 25}``, and the **ideal**, where no host is
  slow (the floor: what the 4 readers do at full speed). Timed from just before
  ``primus submit`` to the application's recorded finish time (SUCCEEDED: the end of the
  stream). Every run must deliver every record (the lines of the trainers' outputs, over all
  attempts), complete each task once (``done == tasks``, ``failed == 0``) and have read on
  the slow host (with rescheduling: moved off it). Processes of the application left once its
  AM had gone are reported, and killed after 20 s.
* **suspend/resume**: one role ``worker`` of 8 executors (``--executors``) whose trainer writes
  ``date +%s.%N`` to ``$OUT/$PRIMUS_INDEX`` and then sleeps. Each round: ``primus submit`` →
  every trainer started (the peer of a resume), ``primus suspend`` → nothing of the application
  runs (no process names its id or carries it in ``PRIMUS_APP_ID``) and its state is SUSPENDED,
  ``primus resume`` → every trainer started again (their own clock) and every executor live and
  RUNNING in ``primus status``, then ``primus kill`` → nothing runs and KILLED (the peer of a
  suspend).

Usage: ``python bench/bench_lifecycle.py [--only stragglers|suspend] [--repeat 3]
[--size-mib 128] [--executors 8]``; ``--quick`` for a smoke run
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from bench_submit import (
    ROLE,
    Sandbox,
    app_processes,
    console,
    etcd_version,
    med,
    parse_args,
    sandbox,
    wait_for_quiet,
    wait_for_trainers,
    wait_until_running,
)
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
DATA_TRAINER = REPO / "tests" / "integration" / "data_trainer.py"
READERS = 4
HOSTS = ("slow", "fast1", "fast2", "fast3", "spare")
"""Inventory order: placement fills the first hosts, so ``slow`` holds a reader from the
start and ``spare`` is where a moved one goes."""
FILES = 8
READ_SIZE = 32768
DELAY = 0.02
"""The trainer's sleep after each read of 32 KiB: at most 1.6 MB/s."""
SLOW_FACTOR = 4
CHUNK_MIB = 8
"""Tasks of 8 MiB. A reader's rate is measured from its checkpoints, which its feeder records
as it writes 1 MiB blocks into the pipe: a window must hold several MiB of a reader's reading
for its rate to mean something."""
STRAGGLER = "{{factor: 2, window: {window:g}s, max_percent: 25}}"
VARIANTS = ("without", "with", "ideal")
SUSPEND_TRAINER = 'date +%s.%N > "$OUT/$PRIMUS_INDEX"; exec sleep 600'
STREAM_TIMEOUT = 300.0
STOP_TIMEOUT = 120.0
POLL_SECONDS = 0.05
LINGER_TIMEOUT = 20.0


# --- stragglers ---------------------------------------------------------------------------------


@dataclass
class StreamRun:
    """One application reading the stream to its end."""

    variant: str
    seconds: float
    """From just before ``primus submit`` to the application's finish time."""
    lines: int
    """Complete lines the trainers received, over every attempt."""
    repeated: int
    """Lines received more than once (read again from a moved task's checkpoint)."""
    missing: int
    """Lines of the source that no trainer received."""
    tasks: int
    done: int
    failed: int
    moves: list[tuple[float, str]]
    """The straggler events: seconds from the submit, message."""
    load: float
    """The 1-minute load average at the end of the run."""
    lingering: list[str]
    """Processes of the application left once it ended and its AM left."""
    lingered: float
    """Seconds from then until none was left."""


def make_source(directory: Path, size_mib: int) -> collections.Counter[bytes]:
    """``FILES`` files of numbered text lines, ``size_mib`` MiB in all; every line, counted."""
    directory.mkdir(parents=True)
    lines: collections.Counter[bytes] = collections.Counter()
    per_file = size_mib * 1024 * 1024 // FILES
    for index in range(FILES):
        rows, size, number = [], 0, 0
        while size < per_file:
            row = f"file{index}-line{number:07d} {'x' * (number % 800)}\n".encode()
            rows.append(row)
            size += len(row)
            number += 1
        (directory / f"part-{index}.txt").write_bytes(b"".join(rows))
        lines.update(rows)
    return lines


def received(records: Path) -> collections.Counter[bytes]:
    """Every complete line the trainers wrote out (a stopped trainer's last partial line is not
    a record it received)."""
    lines: collections.Counter[bytes] = collections.Counter()
    for out in records.glob("*.out"):
        data = out.read_bytes()
        lines.update(data[:data.rfind(b"\n") + 1].splitlines(keepends=True))
    return lines


def stream_job(work: Path, data: Path, variant: str, window: float) -> Path:
    records = work / "records"
    records.mkdir()
    slow = ["--slow-home", str(work / "homes" / "slow"), "--slow-delay",
            str(DELAY * SLOW_FACTOR)] if variant != "ideal" else []
    command = json.dumps([sys.executable, str(DATA_TRAINER), str(records),
                          "--read-size", str(READ_SIZE), "--delay", str(DELAY), *slow])
    straggler = f"\n    straggler: {STRAGGLER.format(window=window)}" if variant == "with" else ""
    job = work / "job.yaml"
    job.write_text(f"""name: stream-{variant}
policy: {{stop_grace: 1s}}
roles:
  - name: {ROLE}
    num: {READERS}
    max_per_host: 1
    command: {command}{straggler}
data:
  - name: train
    roles: [{ROLE}]
    sources: [{{path: {data}/*.txt}}]
    chunk_size: {CHUNK_MIB}Mi
    checkpoint_records: 2000
    checkpoint_interval: 1s
""")
    return job


def inventory_of(work: Path) -> Path:
    inventory = work / "hosts.ini"
    inventory.write_text("".join(
        f"{name} ansible_connection=local primus_home={work / 'homes' / name}\n"
        for name in HOSTS))
    return inventory


def submit_and_wait(box: Sandbox, job: Path, inventory: Path) -> tuple[str, dict[str, Any]]:
    """Submit ``job`` with ``primus submit --wait`` (which follows the application through
    etcd's watch, where polling ``primus status`` would start a command every half second);
    its id and its ``primus status -o json`` once it ended and its AM left."""
    submitted = subprocess.run([*box.primus, "submit", str(job), "-i", str(inventory), "--wait"],
                               env=box.env, capture_output=True, text=True,
                               timeout=STREAM_TIMEOUT, check=False)
    app_id = submitted.stdout.strip().splitlines()[0] if submitted.stdout.strip() else ""
    if not app_id:
        raise RuntimeError(f"primus submit exited {submitted.returncode}: {submitted.stderr}")
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:  # the state is written before the AM leaves
        status = json.loads(box.run("status", app_id, "-o", "json"))
        if status["am"] is None:
            return app_id, status
        time.sleep(0.5)
    raise TimeoutError(f"{app_id}: its AM did not leave within {STOP_TIMEOUT:g}s of its end")


def _described(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {process.status()} {' '.join(process.cmdline())[:200]}"
    except psutil.Error:
        return f"{process.pid} (gone)"


def wait_for_leftovers(app_id: str, timeout: float) -> float:
    """``time.time()`` once no process of the application runs, or after ``timeout``, when
    those left are killed."""
    deadline = time.monotonic() + timeout
    while (left := app_processes(app_id)) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    for process in left:
        process.kill()
    return time.time()


def wait_until_gone(app_id: str, timeout: float, command: int) -> float:
    """``time.time()`` once no process of the application runs but the ``primus`` command
    ``command`` (a pid) that names it; raise if some still do."""
    deadline = time.monotonic() + timeout
    while left := [p for p in app_processes(app_id) if p.pid != command]:
        if time.monotonic() > deadline:
            described = [_described(p) for p in left]
            for process in left:
                process.kill()
            raise RuntimeError(f"{app_id}: processes left (now killed): {described}")
        time.sleep(POLL_SECONDS)
    return time.time()


def run_stream(box: Sandbox, data: Path, source: collections.Counter[bytes],
               variant: str, window: float) -> StreamRun:
    work = Path(tempfile.mkdtemp(prefix=f"stream-{variant}-", dir=box.root / "runs"))
    job = stream_job(work, data, variant, window)
    inventory = inventory_of(work)
    started = time.time()
    app_id, status = submit_and_wait(box, job, inventory)
    ended = time.time()
    lingering = [_described(p) for p in app_processes(app_id)]
    # A host agent may outlive the application by its idle time (15 s): wait a little longer,
    # then stop what is left and report it.
    lingered = wait_for_leftovers(app_id, LINGER_TIMEOUT) - ended
    if status["status"]["state"] != "SUCCEEDED":
        raise RuntimeError(f"{variant}: {app_id} ended {status['status']}")
    got = received(work / "records")
    shutil.rmtree(work / "records")
    stats = status["data"]["train"]
    moves = [e for e in status["events"] if "straggler: read" in e["message"]]
    first_hosts = {e["plan"]["host"] for e in status["executors"][ROLE]} | {
        m for e in moves for m in re.findall(r"moved off ([^;\s]+)", e["message"])}
    if variant != "ideal" and "slow" not in first_hosts:
        raise RuntimeError(f"{variant}: no reader ran on the slow host: {first_hosts}")
    if variant == "with" and not any("moved off slow" in e["message"] for e in moves):
        raise RuntimeError(f"with: the slow host's reader was not moved: "
                           f"{[e['message'] for e in status['events']]}")
    if variant != "with" and moves:
        raise RuntimeError(f"{variant}: a reader was moved: {moves}")
    run = StreamRun(variant, status["status"]["finish_time"] - started, sum(got.values()),
                    sum(got.values()) - sum(source.values()),
                    sum(1 for line in source if got[line] == 0), stats["tasks"], stats["done"],
                    stats["failed"], [(e["time"] - started, e["message"]) for e in moves],
                    os.getloadavg()[0],
                    lingering, lingered)
    if run.missing or (run.done, run.failed) != (run.tasks, 0):
        raise RuntimeError(f"{variant}: {run.missing} lines never arrived or tasks not done "
                           f"once ({run.done}/{run.tasks} done, {run.failed} failed)")
    return run


def stragglers(box: Sandbox, repeat: int, size_mib: int, window: float) -> list[StreamRun]:
    data = box.root / "data"
    source = make_source(data, size_mib)
    runs = []
    for attempt in range(repeat):
        # Interleaved, each variant going first in turn, so that a slow spell hits all alike.
        order = VARIANTS[attempt % 3:] + VARIANTS[:attempt % 3]
        for variant in order:
            wait_for_quiet()
            runs.append(run_stream(box, data, source, variant, window))
            console.print(f"stream run {attempt + 1}/{repeat} {variant}: "
                          f"{runs[-1].seconds:.1f}s", style="dim")
    return runs


def report_stragglers(runs: list[StreamRun], size_mib: int, window: float) -> None:
    rule = STRAGGLER.format(window=window)
    table = Table(title=f"Submit → end of a {size_mib} MiB stream, {READERS} readers, one host "
                        f"at 1/{SLOW_FACTOR} speed (s); straggler: {rule}",
                  title_justify="left")
    for column in ("variant", "median (min, max)", "÷ ideal", "÷ without", "lines",
                   "read twice", "tasks done", "moves", "left after the end", "load"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    medians = {v: med([r.seconds for r in runs if r.variant == v]) for v in VARIANTS}
    names = {"without": "without", "with": "with straggler", "ideal": "ideal (no slow host)"}
    for variant in VARIANTS:
        mine = [r for r in runs if r.variant == variant]
        seconds = [r.seconds for r in mine]
        table.add_row(
            names[variant], f"{medians[variant]:.1f} ({min(seconds):.1f}, {max(seconds):.1f})",
            f"{medians[variant] / medians['ideal']:.2f}×",
            f"{medians[variant] / medians['without']:.2f}×",
            f"{med([r.lines for r in mine]):,.0f}", f"{max(r.repeated for r in mine):,}",
            f"{med([r.done for r in mine]):.0f} / {med([r.tasks for r in mine]):.0f}",
            ", ".join(str(len(r.moves)) for r in mine),
            f"{sum(bool(r.lingering) for r in mine)} runs, ≤ {max(r.lingered for r in mine):.1f}s",
            f"{max(r.load for r in mine):.1f}")
    console.print(table)
    console.print("read twice: the most in one run; moves: straggler events per run; left after "
                  "the end: runs with a process of the application left once its AM had gone, "
                  "and how long it stayed; load: the 1-minute load average at a run's end, max",
                  style="dim")
    for run in runs:
        for after, message in run.moves:
            console.print(f"{run.variant}: after {after:.1f}s: {message}", style="dim")
        for process in run.lingering:
            console.print(f"{run.variant}: left when the AM had gone: {process}", style="dim")


# --- suspend / resume ---------------------------------------------------------------------------


@dataclass
class LifecycleRound:
    """One application through submit, suspend, resume and kill (seconds, each from just
    before its command started)."""

    submit: float
    """→ every trainer started (their own clock)."""
    submit_running: float
    """→ ``primus status`` showed every executor live and RUNNING."""
    suspend: float
    """→ no process of the application, state SUSPENDED."""
    suspend_command: float
    """→ ``primus suspend`` returned."""
    resume: float
    """→ every trainer started again."""
    resume_running: float
    """→ ``primus status`` showed every executor live and RUNNING."""
    resume_command: float
    kill: float
    """→ no process of the application, state KILLED."""
    kill_command: float


def timed_stop(box: Sandbox, app_id: str, command: str, state: str) -> tuple[float, float]:
    """Run ``primus COMMAND APP``; seconds until no process of the application ran, and until
    the command returned; its state must then be ``state``."""
    started = time.time()
    process = subprocess.Popen([*box.primus, command, app_id], env=box.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    gone = wait_until_gone(app_id, STOP_TIMEOUT, process.pid)
    _, stderr = process.communicate(timeout=STOP_TIMEOUT)
    returned = time.time()
    if process.returncode != 0:
        raise RuntimeError(f"primus {command} {app_id} exited {process.returncode}: {stderr}")
    found = json.loads(box.run("status", app_id, "-o", "json"))["status"]["state"]
    if found != state:
        raise RuntimeError(f"primus {command} {app_id}: state {found}, expected {state}")
    # The command returns once the state is written; the AM may still be on its way out.
    return gone - started, returned - started


def lifecycle_round(box: Sandbox, size: int) -> LifecycleRound:
    work = Path(tempfile.mkdtemp(prefix="suspend-", dir=box.root / "runs"))
    out = work / "out"
    out.mkdir()
    job = work / "job.json"
    job.write_text(json.dumps({
        "name": "suspend", "workdir": str(out), "env": {"OUT": str(out)},
        "policy": {"stop_grace": 1},
        "roles": [{"name": ROLE, "num": size, "command": SUSPEND_TRAINER}]}))
    started = time.time()
    app_id = box.run("submit", str(job)).strip()
    submit = max(wait_for_trainers(out, size)) - started
    wait_until_running(box, app_id)
    submit_running = time.time() - started

    suspend, suspend_command = timed_stop(box, app_id, "suspend", "SUSPENDED")

    for index in range(size):
        (out / str(index)).unlink()
    started = time.time()
    box.run("resume", app_id)
    resume_command = time.time() - started
    resume = max(wait_for_trainers(out, size)) - started
    wait_until_running(box, app_id)
    resume_running = time.time() - started

    kill, kill_command = timed_stop(box, app_id, "kill", "KILLED")
    return LifecycleRound(submit, submit_running, suspend, suspend_command, resume,
                          resume_running, resume_command, kill, kill_command)


def suspend_resume(box: Sandbox, repeat: int, size: int) -> list[LifecycleRound]:
    rounds = []
    for attempt in range(repeat):
        wait_for_quiet()
        rounds.append(lifecycle_round(box, size))
        last = rounds[-1]
        console.print(f"round {attempt + 1}/{repeat}: submit {last.submit:.2f}s, suspend "
                      f"{last.suspend:.2f}s, resume {last.resume:.2f}s, kill {last.kill:.2f}s",
                      style="dim")
    return rounds


def report_suspend(rounds: list[LifecycleRound], size: int) -> None:
    def cell(name: str) -> str:
        values = [getattr(r, name) for r in rounds]
        return f"{med(values):.2f} ({min(values):.2f})"

    table = Table(title=f"Suspend and resume, {size} executors (s, median (min))",
                  title_justify="left")
    for column in ("step", "to nothing running / trainers started", "to status RUNNING",
                   "command returned", "peer", "peer's time"):
        table.add_column(column, justify="left" if column in ("step", "peer") else "right")
    table.add_row("primus suspend", cell("suspend"), "", cell("suspend_command"),
                  "primus kill", cell("kill"))
    table.add_row("primus resume", cell("resume"), cell("resume_running"),
                  cell("resume_command"), "primus submit", cell("submit"))
    table.add_row("primus submit (peer)", cell("submit"), cell("submit_running"), "", "", "")
    table.add_row("primus kill (peer)", cell("kill"), "", cell("kill_command"), "", "")
    console.print(table)


def warm_up(box: Sandbox) -> None:
    """Fill the bytecode cache (the sandbox's own) and the page cache for every module the runs
    import, so that the first run pays no compilation."""
    modules = ["primus.cli.main", "primus.am.__main__", "primus.executor.__main__",
               "primus.launcher.agent", "primus.data.feeder"]
    subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], env=box.env,
                   check=True)


# --- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("stragglers", "suspend"),
                        help="run one part (default: both)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each variant / rounds (default: 3)")
    parser.add_argument("--size-mib", type=int, default=128,
                        help="the stream's size in MiB (default: 128)")
    parser.add_argument("--window", type=float, default=5.0,
                        help="the straggler rule's window in seconds (default: 5)")
    parser.add_argument("--executors", type=int, default=8,
                        help="executors of the suspended application (default: 8)")
    args = parse_args(parser, argv, repeat=1, size_mib=16, window=2.0, executors=2)
    began = time.monotonic()
    load = os.getloadavg()
    streams: list[StreamRun] = []
    rounds: list[LifecycleRound] = []
    with sandbox() as box:
        (box.root / "runs").mkdir()
        warm_up(box)
        if args.only in (None, "stragglers"):
            streams = stragglers(box, args.repeat, args.size_mib, args.window)
        if args.only in (None, "suspend"):
            rounds = suspend_resume(box, args.repeat, args.executors)
    console.print(f"[bold]Lifecycle (issue 16)[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; {args.repeat} runs each; "
                  f"load average at the start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}, "
                  f"machine CPU busy {psutil.cpu_percent(interval=0.5):.0f}% at the end; "
                  f"whole benchmark {time.monotonic() - began:.0f}s")
    if streams:
        report_stragglers(streams, args.size_mib, args.window)
    if rounds:
        report_suspend(rounds, args.executors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
