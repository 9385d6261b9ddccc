"""Benchmark: ``primus submit`` → every trainer started on 4 SSH hosts, against ssh and pdsh.

It builds one cluster of 4 test hosts (network namespaces on a bridge, each with its own sshd;
``tests/support/cluster.py``) and an etcd on the bridge, then measures for each size N, interleaved:

* **primus**: ``primus submit -i INVENTORY`` of a job with one role ``worker`` of N executors,
  spread over the 4 hosts, whose trainer writes ``date +%s.%N`` to
  ``$OUT/$PRIMUS_ROLE-$PRIMUS_INDEX`` (the hosts share this machine's filesystem) and then
  sleeps. The time runs from just before the ``primus submit`` subprocess starts to the latest
  time a trainer wrote. Meanwhile the AM's ssh children are sampled, to count its SSH calls by
  remote command. Then the application is stopped with ``primus kill``; no process may remain
  on any host.
* **floor**: N ``ssh HOST true`` (round-robin over the hosts, the cluster's plain ssh command
  line), at most ``ssh.max_parallel`` (Primus's setting) at a time: the least any launcher
  that opens one SSH connection per executor pays.
* **pdsh**: ``pdsh -S -R ssh -f MAX_PARALLEL -w b[0-(N-1)] true``, where ``b0``, ``b1``, … are
  aliases of the 4 hosts (round-robin) in an ssh config file that pdsh's ssh is given, so that
  pdsh opens N connections, as Primus does, instead of deduplicating to 4.

Usage: ``python bench/bench_ssh.py [--sizes 16,64] [--repeat 3]`` (as root: it creates network
namespaces).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import yaml
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the test hosts live in tests/support/cluster.py

from bench_submit import (  # noqa: E402
    RATIO_TARGET,
    ROLE,
    CpuWatch,
    Sandbox,
    children_cpu_seconds,
    console,
    cpu_seconds,
    etcd_version,
    med,
    undisturbed,
    wait_for_trainers,
    wait_until_running,
)

from primus.config.site import load_settings  # noqa: E402
from primus.store.embedded import start_etcd, stop_pid  # noqa: E402
from tests.support.cluster import TestCluster, TestHost, missing_tools  # noqa: E402

HOSTS = 4
TRAINER = 'date +%s.%N > "$OUT/$PRIMUS_ROLE-$PRIMUS_INDEX"; exec sleep 120'
START_TIMEOUT = 300.0
KILL_TIMEOUT = 600.0
LEFTOVER_WAIT = 10.0
SAMPLE_SECONDS = 0.1
"""How often the AM's ssh children are listed; a call shorter than this may go unseen."""


@dataclass
class Testbed:
    """The hosts, the etcd they reach, the CLI's environment and the SSH parallelism."""

    cluster: TestCluster
    box: Sandbox
    max_parallel: int

    def sshd_cpu_seconds(self) -> float:
        """CPU time of the hosts' sshds and every connection and command they have reaped."""
        return sum(cpu_seconds(host.sshd.pid, children=True)
                   for host in self.cluster.hosts if host.sshd is not None)

    def round_robin(self, size: int) -> list[TestHost]:
        """``size`` hosts, taking the cluster's hosts in turn."""
        return [self.cluster.hosts[index % len(self.cluster.hosts)] for index in range(size)]


@contextmanager
def testbed() -> Iterator[Testbed]:
    """Build the 4 hosts and an etcd on their bridge; tear everything down afterwards."""
    missing = missing_tools() + ([] if shutil.which("pdsh") else ["pdsh"])
    if missing:
        raise SystemExit(f"this benchmark needs {', '.join(missing)}")
    root = Path(tempfile.mkdtemp(prefix="primus-bench-ssh-"))
    cluster = TestCluster.create(root / "cluster", HOSTS, sys.executable)
    try:
        process, info = start_etcd(root / "etcd" / "data", root / "etcd" / "etcd.log",
                                   host=cluster.gateway)
        try:
            (root / "site.yaml").write_text("")
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("PRIMUS_") and k != "PYTHONDONTWRITEBYTECODE"}
            env.update(PRIMUS_ETCD=info.client_url, PRIMUS_PREFIX=f"/bench/{root.name}",
                       PRIMUS_HOME=str(root / "home"), PRIMUS_CONF=str(root / "site.yaml"),
                       PRIMUS_SSH_KNOWN_HOSTS=str(cluster.known_hosts),
                       PYTHONPYCACHEPREFIX=str(root / "pycache"))
            box = Sandbox(root, info.client_url, process.pid, env,
                          [sys.executable, "-m", "primus.cli"])
            yield Testbed(cluster, box, load_settings(env=env).ssh.max_parallel)
        finally:
            stop_pid(process.pid)
    finally:
        cluster.destroy()
        shutil.rmtree(root, ignore_errors=True)


# --- primus -------------------------------------------------------------------------------------


@dataclass
class SshCalls:
    """The AM's ssh children of one kind of remote command, as sampled."""

    count: int = 0
    first: float = float("inf")
    last: float = 0.0
    most_at_once: int = 0


class AmSshSampler:
    """Lists the AM's ssh children every :data:`SAMPLE_SECONDS`, by remote command.

    Reads ``/proc/PID/task/*/children``, which costs far less than a scan of every process.
    """

    def __init__(self, am_pid: int, started: float) -> None:
        self.am_pid = am_pid
        self.started = started
        self.calls: dict[str, SshCalls] = {}
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> AmSshSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _children(self) -> list[int]:
        pids: list[int] = []
        for children in Path(f"/proc/{self.am_pid}/task").glob("*/children"):
            try:
                pids += [int(pid) for pid in children.read_text().split()]
            except OSError:
                continue
        return pids

    @staticmethod
    def _remote_command(pid: int) -> str | None:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if not argv or os.path.basename(argv[0].decode()) != "ssh":
            return None
        words = argv[-2].decode().split() if len(argv) > 1 else []
        if "primus.launcher.remote" in words:
            return words[words.index("primus.launcher.remote") + 1]
        return words[0] if words else "?"

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            now = time.time() - self.started
            at_once: dict[str, int] = {}
            for pid in self._children():
                kind = self._remote_command(pid)
                if kind is None:
                    continue
                at_once[kind] = at_once.get(kind, 0) + 1
                calls = self.calls.setdefault(kind, SshCalls())
                calls.first, calls.last = min(calls.first, now), max(calls.last, now)
                if pid not in self._seen:
                    self._seen.add(pid)
                    calls.count += 1
            for kind, running in at_once.items():
                self.calls[kind].most_at_once = max(self.calls[kind].most_at_once, running)


@dataclass
class PrimusRun:
    """One submit of N executors over SSH: the total, its milestones, CPU and SSH calls."""

    seconds: float
    milestones: dict[str, float]
    """Seconds after the submit started at which each milestone was reached."""
    spawn_seconds: list[float]
    """Per executor: seconds from placed to launched (queueing for a slot plus the SSH spawn)."""
    start_seconds: list[float]
    """Per executor: seconds from launched to registered (the executor's start-up)."""
    cpu: dict[str, float]
    """CPU seconds (user + system) until every trainer started, by kind of process."""
    ssh_calls: dict[str, SshCalls]
    """The AM's SSH calls from the submit until every trainer started, by remote command."""
    kill_seconds: float
    kill_ssh_calls: dict[str, SshCalls]
    """The AM's SSH calls while ``primus kill`` ran (seconds after the kill started)."""
    foreign_share: float


def write_job(path: Path, size: int, out: Path) -> None:
    job = {"name": f"bench-ssh-n{size}", "env": {"OUT": str(out)},
           "policy": {"register_timeout": "5m"},
           "roles": [{"name": ROLE, "num": size, "command": TRAINER}]}
    path.write_text(yaml.safe_dump(job, sort_keys=False))


def find_am(app_id: str) -> int:
    """The pid of the application's AM (``primus submit`` starts it on this host)."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "primus.am" in cmdline and app_id in cmdline:
            return process.pid
    raise RuntimeError(f"no AM process of {app_id} found")


def milestones(status: dict[str, Any], started: float, trainer_times: list[float]
               ) -> dict[str, float]:
    """When each step of the start-up was reached, in seconds after ``started``."""
    executors = status["executors"][ROLE]
    plans = [e["plan"] for e in executors]
    lives = [e["live"] for e in executors]
    events = status["events"]
    placed = [e["time"] for e in events if e["kind"] == "placed"]
    recorded = [e["time"] for e in events
                if e["kind"] == "executor-state" and e["message"].endswith("REGISTERED")]
    points = {
        "app written (hosts probed)": status["status"]["submit_time"],
        "AM leads": status["am"]["since"],
        "first executor placed": min(placed),
        "first executor launched": min(p["launch_time"] for p in plans),
        "last executor launched": max(p["launch_time"] for p in plans),
        "last executor registered": max(live["registered_time"] for live in lives),
        "AM recorded the last registration": max(recorded),
        "cluster written": next(e["time"] for e in events if e["kind"] == "cluster"),
        "last trainer wrote its time": max(trainer_times),
    }
    return {name: at - started for name, at in points.items()}


def host_leftovers(bed: Testbed) -> dict[str, list[int]]:
    """Processes other than sshd on each host."""
    return {host.name: pids for host in bed.cluster.hosts if (pids := host.app_pids())}


def stop_app(bed: Testbed, app_id: str, am_pid: int) -> tuple[float, dict[str, SshCalls]]:
    """``primus kill`` the app; check that no process is left on any host nor the AM.

    Returns the seconds ``primus kill`` took and the AM's SSH calls meanwhile.
    """
    started = time.time()
    with AmSshSampler(am_pid, started) as sampler:
        bed.box.run("kill", app_id, "--timeout", f"{KILL_TIMEOUT:g}", timeout=KILL_TIMEOUT + 30)
    seconds = time.time() - started
    deadline = time.monotonic() + LEFTOVER_WAIT
    while (left := host_leftovers(bed)) or psutil.pid_exists(am_pid):
        if time.monotonic() > deadline:
            for pid in [am_pid] + [pid for pids in left.values() for pid in pids]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise RuntimeError(f"{app_id}: left after primus kill (now killed): AM "
                               f"{am_pid if psutil.pid_exists(am_pid) else 'gone'}, on hosts "
                               f"{left}")
        time.sleep(0.1)
    return seconds, sampler.calls


def run_primus(bed: Testbed, size: int) -> PrimusRun:
    (bed.box.root / "runs").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"n{size}-", dir=bed.box.root / "runs"))
    out = work / "out"
    out.mkdir()
    job = work / "job.yaml"
    write_job(job, size, out)
    watch = CpuWatch(bed.box)
    watch.start()
    sshd_before = bed.sshd_cpu_seconds()
    cpu_before = children_cpu_seconds()
    started = time.time()
    app_id = bed.box.run("submit", str(job), "-i", str(bed.cluster.inventory)).strip()
    submit_cpu = children_cpu_seconds() - cpu_before  # until it exited, its ssh probes included
    am_pid = find_am(app_id)
    try:
        with AmSshSampler(am_pid, started) as sampler:
            trainer_times = wait_for_trainers(out, size, lambda index: f"{ROLE}-{index}",
                                          START_TIMEOUT)
        status = wait_until_running(bed.box, app_id)
        executors = status["executors"][ROLE]
        am_own = cpu_seconds(am_pid)
        cpu = {"submit (with its ssh probes)": submit_cpu, "AM": am_own,
               "AM's ssh clients": cpu_seconds(am_pid, children=True) - am_own,
               "sshd side (handshakes, remote helper)": bed.sshd_cpu_seconds() - sshd_before,
               "executors": sum(cpu_seconds(e["plan"]["process"]["pid"]) for e in executors),
               "trainers": sum(cpu_seconds(e["live"]["trainer"]["pid"], children=True)
                               for e in executors)}
        foreign_share = watch.foreign_share(sum(cpu.values()) - submit_cpu)
    finally:
        kill_seconds, kill_calls = stop_app(bed, app_id, am_pid)
    placed = {(e["role"], e["index"]): e["time"] for e in status["events"]
              if e["kind"] == "placed"}
    return PrimusRun(
        seconds=max(trainer_times) - started,
        milestones=milestones(status, started, trainer_times),
        spawn_seconds=[e["plan"]["launch_time"] - placed[(ROLE, e["index"])]
                       for e in executors],
        start_seconds=[e["live"]["registered_time"] - e["plan"]["launch_time"]
                       for e in executors],
        cpu=cpu, ssh_calls=sampler.calls, kill_seconds=kill_seconds, kill_ssh_calls=kill_calls,
        foreign_share=foreign_share)


# --- peers: plain ssh and pdsh ------------------------------------------------------------------


@dataclass
class PeerRun:
    """N SSH connections running ``true``, made by a peer (plain ssh or pdsh)."""

    seconds: float
    client_cpu: float
    """CPU seconds of the ssh clients (and pdsh)."""
    sshd_cpu: float
    """CPU seconds of the sshd side."""
    foreign_share: float


def measure_peer(bed: Testbed, connect: Callable[[], None]) -> PeerRun:
    """Time ``connect()``, which makes the connections in child processes it waits for."""
    watch = CpuWatch(bed.box)
    watch.start()
    sshd_before = bed.sshd_cpu_seconds()
    cpu_before = children_cpu_seconds()
    started = time.monotonic()
    connect()
    seconds = time.monotonic() - started
    sshd_cpu = bed.sshd_cpu_seconds() - sshd_before
    return PeerRun(seconds, children_cpu_seconds() - cpu_before, sshd_cpu,
                   watch.foreign_share(sshd_cpu))


def ssh_true(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr}")


def run_floor(bed: Testbed, size: int) -> PeerRun:
    argvs = [bed.cluster.ssh_argv(host, "true") for host in bed.round_robin(size)]

    def connect() -> None:
        with ThreadPoolExecutor(bed.max_parallel) as pool:
            list(pool.map(ssh_true, argvs))

    return measure_peer(bed, connect)


def pdsh_aliases(bed: Testbed, size: int) -> Path:
    """An ssh config naming ``b0`` … ``b(size-1)``, round-robin aliases of the hosts."""
    path = bed.box.root / f"pdsh-ssh-config-{size}"
    path.write_text("".join(f"Host b{index}\n  HostName {host.address}\n"
                            for index, host in enumerate(bed.round_robin(size))))
    return path


def run_pdsh(bed: Testbed, size: int) -> PeerRun:
    host = bed.cluster.hosts[0]
    options = bed.cluster.ssh_argv(host, "true")[1:-2]  # what the floor's ssh is given
    env = {**os.environ, "PDSH_SSH_ARGS": shlex.join(
        ["-F", str(pdsh_aliases(bed, size)), *options]) + " %h"}
    # -S: exit with the largest remote exit code (255 when ssh itself failed).
    argv = ["pdsh", "-S", "-R", "ssh", "-f", str(bed.max_parallel), "-w", f"b[0-{size - 1}]",
            "true"]

    def connect() -> None:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr}")

    return measure_peer(bed, connect)


def warm_up(bed: Testbed) -> None:
    """Fill the page cache and the bytecode caches (here and as the hosts' sshd sees them)."""
    modules = "primus.cli.main, primus.am.__main__, primus.executor.__main__, " \
              "primus.launcher.remote"
    subprocess.run([sys.executable, "-c", f"import {modules}"], env=bed.box.env, check=True)
    ssh_true(bed.cluster.ssh_argv(bed.cluster.hosts[0], shlex.join(
        [sys.executable, "-c", f"import {modules}"])))
    run_floor(bed, HOSTS)
    run_pdsh(bed, HOSTS)


# --- report -------------------------------------------------------------------------------------


@dataclass
class Results:
    sizes: list[int]
    repeat: int
    primus: dict[int, list[PrimusRun]] = field(default_factory=dict)
    floor: dict[int, list[PeerRun]] = field(default_factory=dict)
    pdsh: dict[int, list[PeerRun]] = field(default_factory=dict)


def tool_version(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return (done.stdout + done.stderr).splitlines()[0].strip()


def med_min(values: list[float]) -> str:
    return f"{med(values):.2f} ({min(values):.2f})"


def size_table(title: str, first_column: str, sizes: list[int]) -> Table:
    """A table with a row label column, then one column per size."""
    table = Table(title=title, title_justify="left")
    table.add_column(first_column)
    for size in sizes:
        table.add_column(f"N={size}", justify="right")
    return table


def primus_ssh_cpu_per_call(run: PrimusRun) -> float:
    """CPU per SSH call: the AM's ssh clients and the sshd side (which also served the submit's
    probes, whose client side is not counted), over the AM's sampled calls and the probes."""
    calls = sum(c.count for c in run.ssh_calls.values()) + HOSTS
    return (run.cpu["AM's ssh clients"] + run.cpu["sshd side (handshakes, remote helper)"]) / calls


def report(results: Results, max_parallel: int, elapsed: float) -> None:
    sizes, primus, floor, pdsh = results.sizes, results.primus, results.floor, results.pdsh
    console.print(
        f"[bold]Submit → all trainers started over SSH[/] — {HOSTS} hosts (netns + sshd) on "
        f"one machine of {os.cpu_count()} cores; Python {platform.python_version()}, "
        f"{tool_version(['ssh', '-V'])}, {tool_version(['pdsh', '-V'])}, {etcd_version()}; "
        f"ssh.max_parallel {max_parallel}; median (min) of {results.repeat} runs; whole "
        f"benchmark {elapsed:.0f}s")

    table = Table(title="Time to all trainers started (s)", title_justify="left")
    for column in ("N", "primus", "floor: N × ssh true", "pdsh: N × true", "primus / floor",
                   f"target ≤ {RATIO_TARGET:g}×", "primus / pdsh", "primus kill"):
        table.add_column(column, justify="right")
    for size in sizes:
        p = [r.seconds for r in primus[size]]
        f = [r.seconds for r in floor[size]]
        ratio = med(p) / med(f)
        table.add_row(str(size), med_min(p), med_min(f), med_min([r.seconds for r in pdsh[size]]),
                      f"{ratio:.2f}× ({min(p) / min(f):.2f}×)",
                      "[green]met[/]" if ratio <= RATIO_TARGET
                      else f"[red]missed by {ratio - RATIO_TARGET:.2f}×[/]",
                      f"{med(p) / med([r.seconds for r in pdsh[size]]):.2f}×",
                      med_min([r.kill_seconds for r in primus[size]]))
    console.print(table)
    console.print("Other processes' share of the CPU during the runs, max: " + ", ".join(
        f"N={s} primus {max(r.foreign_share for r in primus[s]):.0%} floor "
        f"{max(r.foreign_share for r in floor[s]):.0%} pdsh "
        f"{max(r.foreign_share for r in pdsh[s]):.0%}" for s in sizes), style="dim")

    steps = size_table("Where primus spends it: seconds after submit started (median)",
                       "milestone", sizes)
    for name in primus[sizes[0]][0].milestones:
        steps.add_row(name, *(f"{med([r.milestones[name] for r in primus[s]]):.2f}"
                              for s in sizes))
    for label, attribute in (("executor placed → launched (SSH spawn), median / max",
                              "spawn_seconds"),
                             ("executor launched → registered, median / max", "start_seconds")):
        steps.add_row(label, *(
            f"{med([med(getattr(r, attribute)) for r in primus[s]]):.2f} / "
            f"{med([max(getattr(r, attribute)) for r in primus[s]]):.2f}" for s in sizes))
    console.print(steps)

    calls = size_table(f"The AM's SSH calls, sampled every {SAMPLE_SECONDS:g}s (median): "
                       f"count, most at once, seen from → to (s after the phase began)",
                       "phase: remote command", sizes)
    for phase, attribute in (("submit → trainers started", "ssh_calls"),
                             ("primus kill", "kill_ssh_calls")):
        kinds = sorted({kind for s in sizes for r in primus[s] for kind in getattr(r, attribute)})
        for kind in kinds:
            def cell(size: int, kind: str = kind, attribute: str = attribute) -> str:
                seen = [getattr(r, attribute)[kind] for r in primus[size]
                        if kind in getattr(r, attribute)]
                if not seen:
                    return "-"
                return (f"{med([c.count for c in seen]):.0f}, "
                        f"{med([c.most_at_once for c in seen]):.0f} at once, "
                        f"{med([c.first for c in seen]):.1f} → {med([c.last for c in seen]):.1f}")
            calls.add_row(f"{phase}: {kind}", *(cell(s) for s in sizes))
    console.print(calls)

    cpu = size_table("CPU seconds (user + system) until every trainer started (median)",
                     "processes", sizes)
    for kind in primus[sizes[0]][0].cpu:
        cpu.add_row(f"primus: {kind}", *(f"{med([r.cpu[kind] for r in primus[s]]):.2f}"
                                         for s in sizes))
    cpu.add_row("primus: total", *(f"{med([sum(r.cpu.values()) for r in primus[s]]):.2f}"
                                   for s in sizes))
    cpu.add_row("primus: ≈ per SSH call, both sides (AM's calls + submit's probes)", *(
        f"{med([primus_ssh_cpu_per_call(r) for r in primus[s]]):.3f}" for s in sizes))
    for name, runs in (("floor", floor), ("pdsh", pdsh)):
        cpu.add_row(f"{name}: ssh clients" + (" and pdsh" if name == "pdsh" else ""),
                    *(f"{med([r.client_cpu for r in runs[s]]):.2f}" for s in sizes))
        cpu.add_row(f"{name}: sshd side", *(f"{med([r.sshd_cpu for r in runs[s]]):.2f}"
                                            for s in sizes))
        cpu.add_row(f"{name}: per connection, both sides", *(
            f"{med([(r.client_cpu + r.sshd_cpu) / s for r in runs[s]]):.3f}" for s in sizes))
    console.print(cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,64",
                        help="comma-separated executor counts (default: 16,64)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (default: 3)")
    args = parser.parse_args(argv)
    results = Results([int(s) for s in args.sizes.split(",")], args.repeat)
    began = time.monotonic()
    with testbed() as bed:
        warm_up(bed)
        for size in results.sizes:
            for kind in (results.primus, results.floor, results.pdsh):
                kind[size] = []
            for attempt in range(args.repeat):
                # Interleaved, so that a slow spell of the machine hits all three alike.
                label = f"N={size} run {attempt + 1}/{args.repeat}"
                results.floor[size].append(undisturbed(partial(run_floor, bed, size),
                                                       f"{label} floor"))
                results.pdsh[size].append(undisturbed(partial(run_pdsh, bed, size),
                                                      f"{label} pdsh"))
                results.primus[size].append(undisturbed(partial(run_primus, bed, size),
                                                        f"{label} primus"))
                console.print(f"{label}: primus {results.primus[size][-1].seconds:.2f}s (kill "
                              f"{results.primus[size][-1].kill_seconds:.1f}s), floor "
                              f"{results.floor[size][-1].seconds:.2f}s, pdsh "
                              f"{results.pdsh[size][-1].seconds:.2f}s", style="dim")
        max_parallel = bed.max_parallel
    report(results, max_parallel, time.monotonic() - began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
