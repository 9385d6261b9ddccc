"""Benchmark: recovery after ``kill -9`` of a trainer, an executor or the leading AM, and torchrun.

Against a private etcd, on the local launcher, every application with one role ``worker`` of 2
executors, ``restart_policy: on_failure``, ``restart_backoff: 0``, whose trainer appends
``<role>-<index> <attempt> <pid> <date +%s.%N>`` to ``$OUT/starts`` and then ``exec``s
``sleep``. It measures, from just before ``os.kill(pid, SIGKILL)`` to the replacement trainer's
own start record (written by the trainer shell itself, so neither polling nor the CLI adds to the
figure):

* **trainer**: kill the trainer of ``worker-1``; its executor restarts it in place.
* **executor**: kill the executor of ``worker-1`` (``heartbeat_ttl`` 3 s and 10 s); etcd expires
  its lease, the AM stops the orphaned trainer and launches a new executor.
* **AM**: with ``am: {replicas: 2}`` (a fresh application each time), kill the leading AM; the
  standby takes over when the leader's lease expires. Measured to the new leader key in etcd,
  then checked: every executor adopted (same executor and trainer pids, restarts 0, no new
  trainer start, in ``primus status -o json``) and no key written but the leader key and the
  event log's entry of the take-over.
* **torchrun** (the peer, interleaved with the trainer kills): ``torchrun --nnodes=1
  --nproc-per-node=2 --max-restarts=R --no-python /bin/sh worker.sh`` with the same trainer
  (``$TORCHELASTIC_RESTART_COUNT`` as the attempt); kill local rank 1; measured until both
  restarted workers have written their start record (torchrun restarts every local worker).

Every change under the application's etcd keys is watched from this process and stamped when it
arrives, which gives the steps in between. Before each kill the benchmark waits (up to 2 s) for
the machine to be nearly idle, and reports how busy it was.

A lost executor or AM is detected when etcd expires its lease: the lease's remaining time at the
kill (up to ``heartbeat_ttl``; it is renewed every TTL/3) plus up to 0.5 s (etcd looks for
expired leases twice a second). The moment of the kill within the renewal cycle is not chosen;
the step "etcd expired the lease" shows where it fell. The time after the expiry is Primus's own
part of the recovery and is reported apart.

Usage: ``python bench/bench_recovery.py [--repeat 3] [--ttls 3,10]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

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
    stop_app,
)
from rich.table import Table

from primus.config.etcd import EtcdConfig
from primus.store.api import EventType, Resync
from primus.store.etcd_store import EtcdCoordinator

TRAINER = 'echo "$PRIMUS_ROLE-$PRIMUS_INDEX $PRIMUS_ATTEMPT $$ $(date +%s.%N)" >> "$OUT/starts"; ' \
          'exec sleep 3600'
TORCHRUN_WORKER = 'echo "rank-$LOCAL_RANK $TORCHELASTIC_RESTART_COUNT $$ $(date +%s.%N)" ' \
                  '>> "$OUT/starts"\nexec sleep 3600\n'
NUM = 2
VICTIM = 1
"""The index (Primus) and local rank (torchrun) that is killed."""
TRAINER_TARGET = 1.0
TTL_MARGIN = 2.0
"""Executor and AM recovery target: heartbeat_ttl + this."""
POLL_SECONDS = 0.01
START_TIMEOUT = 60.0
EXECUTOR_EXPIRY = "etcd expired the lease (live key deleted)"
LEADER_EXPIRY = "etcd expired the leader's lease (key deleted)"
QUIET_CPU_PERCENT = 25.0
QUIET_WAIT = 2.0
STANDBY_SETTLE = 0.5
"""Seconds to leave a standby AM after it connected to etcd, so that it campaigns."""

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll ``probe`` (a file, the process table, or the watched events) until it gives a value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value is not None:
            return value
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")


def wait_for_quiet() -> float:
    """Wait (up to QUIET_WAIT) until the machine is nearly idle, so that other work delays no
    recovery; return the share of the CPU in use over the last 0.3 s sample."""
    deadline = time.monotonic() + QUIET_WAIT
    while (busy := psutil.cpu_percent(interval=0.3)) > QUIET_CPU_PERCENT and \
            time.monotonic() < deadline:
        pass
    return busy / 100.0


# --- observation: trainer start records and etcd changes -----------------------------------------


@dataclass(frozen=True)
class Start:
    """One line of ``$OUT/starts``, written by a trainer as it started."""

    name: str
    attempt: int
    pid: int
    time: float


def read_starts(out: Path) -> list[Start]:
    path = out / "starts"
    lines = path.read_text().splitlines() if path.exists() else []
    starts = []
    for line in lines:
        words = line.split()
        if len(words) == 4:  # a line being appended may be seen half-written
            starts.append(Start(words[0], int(words[1]), int(words[2]), float(words[3])))
    return starts


def latest_start(out: Path, name: str) -> Start | None:
    mine = [s for s in read_starts(out) if s.name == name]
    return max(mine, key=lambda s: s.attempt) if mine else None


def wait_for_start(out: Path, name: str, after_attempt: int, timeout: float = START_TIMEOUT
                   ) -> Start:
    """The start record of ``name``'s first attempt after ``after_attempt``."""
    def found() -> Start | None:
        start = latest_start(out, name)
        return start if start is not None and start.attempt > after_attempt else None
    return wait_for(found, timeout, f"{name} to start after attempt {after_attempt}")


@dataclass(frozen=True)
class Change:
    """One etcd change, when this process received it, and its value as JSON (PUT only)."""

    received: float
    type: EventType
    key: str
    value: dict[str, Any] | None


class Timeline:
    """Every change under a key prefix, stamped on arrival, watched from a background thread.

    A watch event arrives within a millisecond or two of the commit on this machine, so the
    stamps time the steps of a recovery without touching the processes that perform it.
    """

    def __init__(self, etcd_url: str, prefix: str) -> None:
        self.etcd_url = etcd_url
        self.prefix = prefix
        self.changes: list[Change] = []
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete,
                                        args=(self._watch(),), daemon=True)
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> Timeline:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"cannot watch {self.prefix}: {self._error}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(10)

    async def _watch(self) -> None:
        self._task = asyncio.current_task()
        try:
            store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(self.etcd_url,)))
        except Exception as exc:  # noqa: BLE001 - reported by __enter__
            self._error = exc
            self._ready.set()
            return
        try:
            snapshot = await store.get_prefix(self.prefix)
            self._ready.set()
            async for event in store.watch_prefix(self.prefix, snapshot.revision + 1):
                received = time.time()
                if isinstance(event, Resync):  # nothing is compacted during a run
                    continue
                value = json.loads(event.value) if event.type is EventType.PUT and \
                    event.value[:1] == b"{" else None
                self.changes.append(Change(received, event.type, event.key, value))
        except asyncio.CancelledError:
            pass
        finally:
            await store.close()

    def current(self, key: str) -> dict[str, Any] | None:
        """The key's value as last seen (``None``: never written, or deleted)."""
        for change in reversed(list(self.changes)):
            if change.key == key:
                return change.value
        return None

    def first(self, key: str, after: float,
              match: Callable[[Change], bool] = lambda _: True) -> float | None:
        """When the first change of ``key`` received after ``after`` that ``match``es arrived."""
        return next((c.received for c in list(self.changes)
                     if c.received >= after and c.key == key and match(c)), None)

    def keys_changed(self, prefix: str, after: float) -> list[str]:
        return [c.key for c in list(self.changes) if c.received >= after and
                c.key.startswith(prefix)]


def put_where(**fields: Any) -> Callable[[Change], bool]:
    """Match a PUT whose value has these fields."""
    return lambda c: c.type is EventType.PUT and c.value is not None and all(
        c.value.get(name) == value for name, value in fields.items())


def deleted(change: Change) -> bool:
    return change.type is EventType.DELETE


# --- Primus applications --------------------------------------------------------------------


@dataclass
class App:
    """A submitted application, the directory its trainers record their starts in, its keys."""

    box: Sandbox
    timeline: Timeline
    app_id: str
    out: Path

    @property
    def root(self) -> str:
        return f"{self.timeline.prefix}apps/{self.app_id}/"

    def key(self, kind: str, index: int = VICTIM) -> str:
        """An executor key (``plan``, ``live``, ``result``) or, for another kind, an app key."""
        if kind in ("plan", "live", "result"):
            return f"{self.root}executors/{ROLE}/{index}/{kind}"
        return self.root + kind

    def value(self, kind: str, index: int = VICTIM) -> dict[str, Any]:
        value = self.timeline.current(self.key(kind, index))
        if value is None:
            raise RuntimeError(f"{self.app_id}: no {kind} seen")
        return value

    def wait_running(self, index: int, attempt: int) -> dict[str, Any]:
        """The live value once attempt ``attempt`` of worker-``index`` runs its trainer."""
        def running() -> dict[str, Any] | None:
            live = self.timeline.current(self.key("live", index))
            ok = live and live["attempt"] == attempt and live["state"] == "RUNNING"
            return live if ok else None
        return wait_for(running, START_TIMEOUT, f"{ROLE}-{index} attempt {attempt} to run")

    def status(self) -> dict[str, Any]:
        return json.loads(self.box.run("status", self.app_id, "-o", "json"))


@contextmanager
def running_app(box: Sandbox, timeline: Timeline, name: str, ttl: int, replicas: int = 1
                ) -> Iterator[App]:
    """Submit the benchmark's job and yield it once every trainer runs; ``primus kill`` it
    afterwards and check that none of its processes is left."""
    (box.root / "runs").mkdir(exist_ok=True)
    work = box.root / "runs" / f"{name}-{time.monotonic_ns()}"
    out = work / "out"
    out.mkdir(parents=True)
    job = {"name": name, "workdir": str(out), "env": {"OUT": str(out)},
           "am": {"replicas": replicas},
           # blacklist_failures 0: repeated kills on this one host must not change where the
           # replacement goes; stop_grace 1: the trainer (sleep) ends at once on SIGTERM.
           "policy": {"heartbeat_ttl": ttl, "stop_grace": 1, "blacklist_failures": 0},
           "roles": [{"name": ROLE, "num": NUM, "command": TRAINER,
                      "restart_policy": "on_failure", "restart_backoff": 0,
                      "max_failures": 100}]}
    path = work / "job.json"
    path.write_text(json.dumps(job, indent=2))
    app = App(box, timeline, box.run("submit", str(path)).strip(), out)
    try:
        for index in range(NUM):
            app.wait_running(index, 1)
        yield app
    finally:
        try:
            stop_app(box, app.app_id)
        except Exception:
            for process in app_processes(app.app_id):  # primus kill failed: leave nothing
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            raise


def gone(pid: int) -> bool:
    """The process no longer runs (an orphan's zombie waiting for init counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@dataclass
class Recovery:
    """One kill: seconds to the replacement, the steps in between, and broken invariants."""

    seconds: float
    steps: dict[str, float | None] = field(default_factory=dict)
    """Seconds after the kill at which each step was seen (``None``: not seen)."""
    problems: list[str] = field(default_factory=list)
    busy: float = 0.0
    """Share of the machine's CPU in use in the 0.3 s before the kill: other work on the
    machine (the benchmark's own processes are idle by then)."""


def since(kill: float, at: float | None) -> float | None:
    return None if at is None else at - kill


def kill_trainer(app: App) -> Recovery:
    """Kill worker-1's trainer; measure until its executor has started the next attempt's."""
    name = f"{ROLE}-{VICTIM}"
    victim = latest_start(app.out, name)
    assert victim is not None  # running_app waited for every trainer
    live = app.wait_running(VICTIM, victim.attempt)
    other = latest_start(app.out, f"{ROLE}-{1 - VICTIM}")
    busy = wait_for_quiet()
    killed = time.time()
    os.kill(victim.pid, signal.SIGKILL)
    start = wait_for_start(app.out, name, victim.attempt)
    after = app.wait_running(VICTIM, start.attempt)
    nxt = start.attempt
    timeline = app.timeline
    steps = {
        "executor recorded the exit": timeline.first(app.key("result"), killed),
        "AM recorded FAILED, decided to restart": timeline.first(
            app.key("plan"), killed, put_where(state="FAILED")),
        "AM planned the next attempt in place": timeline.first(
            app.key("plan"), killed, put_where(attempt=nxt)),
        "executor registered the next attempt": timeline.first(
            app.key("live"), killed, put_where(attempt=nxt, state="REGISTERED")),
        "AM wrote the cluster spec": timeline.first(app.key("cluster"), killed),
        "new trainer's own start record": start.time,
        "executor recorded the trainer RUNNING": timeline.first(
            app.key("live"), killed, put_where(attempt=nxt, state="RUNNING")),
    }
    problems = []
    if start.attempt != victim.attempt + 1:
        problems.append(f"attempt {victim.attempt} → {start.attempt}")
    if after["pid"] != live["pid"]:
        problems.append("a new executor ran it, not the same one in place")
    if latest_start(app.out, f"{ROLE}-{1 - VICTIM}") != other:
        problems.append("the other worker's trainer restarted too")
    return Recovery(start.time - killed, {k: since(killed, v) for k, v in steps.items()},
                    problems, busy)


def kill_executor(app: App, ttl: int) -> Recovery:
    """Kill worker-1's executor; measure until a new executor has started a trainer."""
    name = f"{ROLE}-{VICTIM}"
    # On a busy machine the application may not have started that trainer yet.
    victim = wait_for(lambda: latest_start(app.out, name), START_TIMEOUT,
                      f"{name}'s trainer to start")
    app.wait_running(VICTIM, victim.attempt)
    executor_pid = app.value("plan")["process"]["pid"]
    busy = wait_for_quiet()
    killed = time.time()
    os.kill(executor_pid, signal.SIGKILL)
    start = wait_for_start(app.out, name, victim.attempt, ttl + START_TIMEOUT)
    orphan_gone = gone(victim.pid)
    after = app.wait_running(VICTIM, start.attempt)
    nxt = start.attempt
    timeline = app.timeline
    steps = {
        EXECUTOR_EXPIRY: timeline.first(app.key("live"), killed, deleted),
        "AM recorded LOST, decided to restart": timeline.first(
            app.key("plan"), killed, put_where(state="LOST")),
        "AM placed the next attempt (orphan stopped)": timeline.first(
            app.key("plan"), killed, put_where(attempt=nxt, state="PLANNED")),
        "AM launched the new executor": timeline.first(
            app.key("plan"), killed, put_where(attempt=nxt, state="LAUNCHED")),
        "new executor registered": timeline.first(
            app.key("live"), killed, put_where(attempt=nxt, state="REGISTERED")),
        "AM wrote the cluster spec": timeline.first(app.key("cluster"), killed),
        "new trainer's own start record": start.time,
    }
    problems = []
    if not orphan_gone:
        problems.append(f"the killed executor's trainer {victim.pid} still ran when the new one "
                        f"started")
    if after["pid"] == executor_pid:
        problems.append("the killed executor's pid runs the new attempt")
    return Recovery(start.time - killed, {k: since(killed, v) for k, v in steps.items()},
                    problems, busy)


def am_processes(app_id: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "primus.am" in cmdline and app_id in cmdline:
            found.append(process)
    return found


def connected_to(process: psutil.Process, port: int) -> bool:
    try:
        return any(c.raddr and c.raddr.port == port for c in process.net_connections("tcp"))
    except psutil.NoSuchProcess:
        return False


def log_time(log_file: str, text: str) -> float | None:
    """The time of the first line of a Primus log containing ``text`` (logging's asctime)."""
    with contextlib.suppress(OSError):
        for line in Path(log_file).read_text().splitlines():
            if text in line:
                return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def executors_seen(status: dict[str, Any]) -> dict[int, tuple[int, int, int, int]]:
    """Index → (executor pid, trainer pid, attempt, restarts), from ``primus status``."""
    return {e["index"]: (e["live"]["pid"], e["live"]["trainer"]["pid"], e["plan"]["attempt"],
                         e["plan"]["restarts"]) for e in status["executors"][ROLE]}


def kill_leader(box: Sandbox, timeline: Timeline, ttl: int) -> Recovery:
    """Submit with a standby AM, kill the leader; measure until the standby leads, and check
    that it adopted every executor as it was."""
    with running_app(box, timeline, f"failover-ttl{ttl}", ttl, replicas=2) as app:
        leader = app.value("am/leader")
        port = int(box.etcd_url.rsplit(":", 1)[1])
        standby = wait_for(lambda: next(
            (p for p in am_processes(app.app_id)
             if p.pid != leader["pid"] and connected_to(p, port)), None),
            START_TIMEOUT, "the standby AM to connect to etcd")
        time.sleep(STANDBY_SETTLE)
        before = executors_seen(app.status())
        starts_before = read_starts(app.out)
        busy = wait_for_quiet()
        killed = time.time()
        os.kill(leader["pid"], signal.SIGKILL)
        leader_key = app.key("am/leader")
        led = wait_for(lambda: timeline.first(leader_key, killed,
                                              put_where(pid=standby.pid)),
                       ttl + START_TIMEOUT, "the standby to lead")
        status = app.status()
        shown = time.time()
        argv = standby.cmdline()
        log_file = argv[argv.index("--log-file") + 1]
        steps = {
            LEADER_EXPIRY: timeline.first(leader_key, killed, deleted),
            "standby wrote the leader key": led,
            "new leader logged 'leading as'": log_time(log_file, "leading as"),
            "the leader record's `since`": (status["am"] or {}).get("since"),
            "primus status showed it (one call after the key)": shown,
        }
        problems = []
        if (status["am"] or {}).get("pid") != standby.pid:
            problems.append(f"status shows AM {status['am']}, not the standby {standby.pid}")
        if status["status"]["state"] != "RUNNING":
            problems.append(f"application {status['status']['state']}")
        after = executors_seen(status)
        if after != before:
            problems.append(f"executors changed: {before} → {after}")
        if any(gone(pid) for seen in after.values() for pid in seen[:2]):
            problems.append("an adopted executor or trainer is gone")
        if any(seen[3] for seen in after.values()):
            problems.append("restarts > 0")
        if read_starts(app.out) != starts_before:
            problems.append("a trainer started again")
        # The new leader records its take-over in the event log; nothing else is written.
        writes = [k for k in timeline.keys_changed(app.root, killed)
                  if k != leader_key and not k.startswith(f"{app.root}events/")]
        if writes:
            problems.append(f"keys written after the kill: {writes}")
        return Recovery(led - killed, {k: since(killed, v) for k, v in steps.items()},
                        problems, busy)


# --- torchrun -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Torchrun:
    """A running ``torchrun`` whose workers record their starts in ``out``."""

    process: subprocess.Popen[bytes]
    out: Path
    log: Path
    argv: list[str]

    @property
    def command(self) -> str:
        """The command line as the report shows it: no port, no scratch path."""
        return " ".join(["torchrun", *(a for a in self.argv[1:-1] if "master-port" not in a),
                         Path(self.argv[-1]).name])


@contextmanager
def torchrun(box: Sandbox, max_restarts: int) -> Iterator[Torchrun]:
    """Start torchrun with 2 local workers; stop its process group afterwards."""
    binary = Path(sys.executable).with_name("torchrun")
    if not binary.exists():
        raise SystemExit(f"this benchmark needs torchrun next to {sys.executable}")
    work = box.root / "torchrun"
    out = work / "out"
    out.mkdir(parents=True)
    worker = work / "worker.sh"
    worker.write_text(TORCHRUN_WORKER)
    argv = [str(binary), "--nnodes=1", f"--nproc-per-node={NUM}",
            f"--max-restarts={max_restarts}", f"--master-port={free_port()}", "--no-python",
            "/bin/sh", str(worker)]
    log = work / "torchrun.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(argv, env={**box.env, "OUT": str(out)}, cwd=work,
                                   stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for rank in range(NUM):
            wait_for_start(out, f"rank-{rank}", -1)
        yield Torchrun(process, out, log, argv)
    finally:
        # SIGTERM to its process group, a grace period, then SIGKILL.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def torchrun_log_time(log: Path, text: str, after: float) -> float | None:
    """The time of the first line of torchrun's log after ``after`` containing ``text``.

    Its lines start like ``W1122 05:27:34.375000 PID file:line]`` (glog style, no year)."""
    year = datetime.now().year
    for line in log.read_text(errors="replace").splitlines():
        if text not in line:
            continue
        with contextlib.suppress(ValueError, IndexError):
            stamp = datetime.strptime(f"{year}{line[1:5]} {line.split()[1]}",
                                      "%Y%m%d %H:%M:%S.%f").timestamp()
            if stamp >= after:
                return stamp
    return None


def kill_torchrun_worker(run: Torchrun) -> Recovery:
    """Kill local rank 1; measure until every local worker has started again."""
    victim = latest_start(run.out, f"rank-{VICTIM}")
    assert victim is not None
    busy = wait_for_quiet()
    killed = time.time()
    os.kill(victim.pid, signal.SIGKILL)
    starts = [wait_for_start(run.out, f"rank-{rank}", victim.attempt) for rank in range(NUM)]
    steps = {
        "agent saw the failure, SIGTERM to the others": torchrun_log_time(
            run.log, "closing signal SIGTERM", killed),
        "first worker's own start record": min(s.time for s in starts),
        "last worker's own start record": max(s.time for s in starts),
    }
    problems = [] if all(s.attempt == victim.attempt + 1 for s in starts) else \
        [f"restart count {victim.attempt} → {[s.attempt for s in starts]}"]
    if run.process.poll() is not None:
        problems.append(f"torchrun exited {run.process.returncode}")
    return Recovery(max(s.time for s in starts) - killed,
                    {k: since(killed, v) for k, v in steps.items()}, problems, busy)


# --- report ---------------------------------------------------------------------------------


@dataclass
class Case:
    """One kind of kill, its target, and every measurement of it."""

    killed: str
    recovered: str
    target: float | None
    expiry_step: str | None = None
    """The step at which etcd expired the killed process's lease, if its death is detected
    that way: the time after it is Primus's own part of the recovery."""
    runs: list[Recovery] = field(default_factory=list)

    def after_expiry(self) -> list[float]:
        if self.expiry_step is None:
            return []
        return [r.seconds - expiry for r in self.runs
                if (expiry := r.steps.get(self.expiry_step)) is not None]

    @property
    def label(self) -> str:
        return f"{self.killed} → {self.recovered}"

    @property
    def median(self) -> float:
        return med([r.seconds for r in self.runs])

    @property
    def worst(self) -> float:
        return max(r.seconds for r in self.runs)


def verdict(case: Case) -> str:
    if case.target is None:
        return "—"
    if case.worst <= case.target:
        return f"≤ {case.target:g} [green]met[/]"
    if case.median <= case.target:
        return (f"≤ {case.target:g} [yellow]median met, max missed by "
                f"{case.worst - case.target:.2f}s[/]")
    return f"≤ {case.target:g} [red]missed by {case.median - case.target:.2f}s[/]"


def report(cases: list[Case], repeat: int, elapsed: float, torchrun_command: str) -> None:
    console.print(f"[bold]Recovery after kill -9[/] — {os.cpu_count()} cores, Python "
                  f"{platform.python_version()}, {etcd_version()}; local launcher; {repeat} "
                  f"kills per case; whole benchmark {elapsed:.0f}s")
    console.print("Clock: from just before os.kill(SIGKILL) to the replacement trainer's own "
                  "start record (its shell appends `date +%s.%N` to a file); for the AM, to the "
                  "new leader key arriving on an etcd watch.", style="dim")
    table = Table(title="Seconds from kill -9 to recovered", title_justify="left")
    for column in ("kill -9 of", "recovered when", "median", "max", "target",
                   "after expiry, med / max", "checks", "busy before"):
        table.add_column(column, justify="left" if column in ("kill -9 of", "recovered when")
                         else "right")
    for case in cases:
        problems = sorted({p for r in case.runs for p in r.problems})
        after = case.after_expiry()
        table.add_row(case.killed, case.recovered, f"{case.median:.3f}", f"{case.worst:.3f}",
                      verdict(case), f"{med(after):.3f} / {max(after):.3f}" if after else "—",
                      "[green]ok[/]" if not problems else f"[red]{'; '.join(problems)}[/]",
                      f"{max(r.busy for r in case.runs):.0%}")
    console.print(table)
    trainer, peer = cases[0], cases[1]
    console.print(f"primus / torchrun (trainer kill, medians): "
                  f"[bold]{trainer.median / peer.median:.2f}×[/] "
                  f"({trainer.median:.3f}s / {peer.median:.3f}s); torchrun: "
                  f"{torchrun_command}")

    for case in cases:
        steps = Table(title=f"{case.label}: seconds after the kill (median / max)",
                      title_justify="left")
        steps.add_column("step")
        steps.add_column("median / max", justify="right")
        for name in case.runs[0].steps:
            seen = [at for r in case.runs if (at := r.steps.get(name)) is not None]
            steps.add_row(name, f"{med(seen):.3f} / {max(seen):.3f}" if seen else "not seen")
        console.print(steps)


def warm_up(box: Sandbox) -> None:
    """Fill the page cache and the bytecode cache for every module the runs import."""
    modules = ["primus.cli.main", "primus.am.__main__", "primus.executor.__main__"]
    subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], env=box.env,
                   check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="kills per case (default: 3)")
    parser.add_argument("--ttls", default="3,10",
                        help="comma-separated heartbeat_ttl seconds for the executor and AM "
                             "kills (default: 3,10)")
    args = parse_args(parser, argv, repeat=1, ttls="3")
    if args.quick:
        global QUIET_WAIT  # noqa: PLW0603 - a smoke run waits for no quiet machine
        QUIET_WAIT = 0.0
    ttls = [int(t) for t in args.ttls.split(",")]
    began = time.monotonic()
    trainer = Case("trainer", "new trainer runs (in place)", TRAINER_TARGET)
    peer = Case("torchrun worker", "both workers run again", None)
    cases = [trainer, peer]
    with sandbox() as box, Timeline(box.etcd_url, box.env["PRIMUS_PREFIX"] + "/") as timeline:
        warm_up(box)
        with running_app(box, timeline, "trainer-kill", 10) as app, \
                torchrun(box, max(3, args.repeat)) as run:
            for attempt in range(args.repeat):
                # Interleaved, so that a slow spell of the machine hits both alike.
                trainer.runs.append(kill_trainer(app))
                peer.runs.append(kill_torchrun_worker(run))
                console.print(f"run {attempt + 1}/{args.repeat}: trainer kill: primus "
                              f"{trainer.runs[-1].seconds:.3f}s, torchrun "
                              f"{peer.runs[-1].seconds:.3f}s", style="dim")
            torchrun_command = run.command
        for ttl in ttls:
            case = Case(f"executor, TTL {ttl}s", "new trainer runs", ttl + TTL_MARGIN,
                        EXECUTOR_EXPIRY)
            cases.append(case)
            with running_app(box, timeline, f"executor-kill-ttl{ttl}", ttl) as app:
                for attempt in range(args.repeat):
                    case.runs.append(kill_executor(app, ttl))
                    console.print(f"run {attempt + 1}/{args.repeat}: executor kill, TTL "
                                  f"{ttl}s: {case.runs[-1].seconds:.3f}s", style="dim")
        for ttl in ttls:
            case = Case(f"leading AM, TTL {ttl}s", "standby leads, adopts all",
                        ttl + TTL_MARGIN, LEADER_EXPIRY)
            cases.append(case)
            for attempt in range(args.repeat):
                case.runs.append(kill_leader(box, timeline, ttl))
                console.print(f"run {attempt + 1}/{args.repeat}: AM kill, TTL {ttl}s: "
                              f"{case.runs[-1].seconds:.3f}s", style="dim")
        # By environment (trainers, what started cold) or by a command line naming the
        # sandbox (an AM, agent or executor forked from a warm Python shows the environment
        # it started with in /proc, not its own: primus/launcher/forker.py).
        root = str(box.root)
        left = [p.pid for p in psutil.process_iter(["environ", "cmdline"])
                if p.pid not in (os.getpid(), box.etcd_pid) and (
                    ((p.info["environ"] or {}).get("PRIMUS_PREFIX") == box.env["PRIMUS_PREFIX"]
                     and (p.info["environ"] or {}).get("PRIMUS_HOME") == box.env["PRIMUS_HOME"])
                    or root in " ".join(p.info["cmdline"] or []))]
        if left:
            raise RuntimeError(f"processes of the benchmark left: {left}")
    report(cases, args.repeat, time.monotonic() - began, torchrun_command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
