"""Benchmark: ``primus submit`` → every trainer started on 4 SSH hosts, against ssh, pdsh, torchrun.

It builds one cluster of 4 test hosts (network namespaces on a bridge, each with its own sshd;
``tests/support/cluster.py``) and an etcd on the bridge, then measures for each size N, interleaved:

* **primus**: ``primus submit -i INVENTORY`` of a job with one role ``worker`` of N executors,
  spread over the 4 hosts, whose trainer writes ``date +%s.%N`` to
  ``$OUT/$PRIMUS_ROLE-$PRIMUS_INDEX`` (the hosts share this machine's filesystem) and then
  sleeps. The time runs from just before the ``primus submit`` subprocess starts to the latest
  time a trainer wrote. Meanwhile the AM's ssh children are sampled, to count its SSH calls by
  remote command, and the remaining TTL of the AM's lease (the lease of its leader key) is read
  from etcd every :data:`LEASE_SAMPLE_SECONDS`. A few seconds after every executor is RUNNING,
  the USS of each executor and of each host agent is read. Then the application is stopped with
  ``primus kill`` (timed); no process may remain on any host, nor the AM, nor its shared SSH
  connections.
* **floor**: N ``ssh HOST true`` (round-robin over the hosts, the cluster's plain ssh command
  line), at most ``ssh.max_parallel`` (Primus's setting) at a time: the least any launcher
  that opens one SSH connection per executor pays.
* **pdsh**: ``pdsh -S -R ssh -f MAX_PARALLEL -w b[0-(N-1)] true``, where ``b0``, ``b1``, … are
  aliases of the 4 hosts (round-robin) in an ssh config file that pdsh's ssh is given, so that
  pdsh opens N connections instead of deduplicating to 4.
* **torchrun**: what a user would run instead: one ``pdsh -w H1,H2,H3,H4`` that starts
  ``python -m torch.distributed.run --nnodes 4 --nproc-per-node N/4`` (c10d rendezvous on h1)
  on each host, whose workers write ``time.time()`` to ``$OUT/$RANK`` and sleep; timed to the
  latest worker's time, then stopped (``pdsh … pkill -TERM``, timed until nothing is left).

Beside them, once: the USS of a cold ``python -m primus.executor``'s imports (a Python that has
imported ``primus.executor.__main__`` and waits), the floor of an executor that is not forked.

Usage: ``python bench/bench_ssh.py [--sizes 16,64] [--repeat 3]`` (as root: it creates network
namespaces).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import itertools
import json
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
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psutil
import yaml
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the test hosts live in tests/support/cluster.py

import bench_submit  # noqa: E402
from bench_submit import (  # noqa: E402
    ROLE,
    CpuWatch,
    Sandbox,
    children_cpu_seconds,
    console,
    cpu_seconds,
    etcd_version,
    med,
    memory_mb,
    undisturbed,
    wait_for_trainers,
    wait_until_running,
)

from primus.config.site import load_settings  # noqa: E402
from primus.launcher.ssh_launcher import control_directory  # noqa: E402
from primus.state.keys import AppKeys  # noqa: E402
from primus.store.embedded import start_etcd, stop_pid  # noqa: E402
from tests.support.cluster import TestCluster, TestHost, missing_tools  # noqa: E402

HOSTS = 4
TRAINER = 'date +%s.%N > "$OUT/$PRIMUS_ROLE-$PRIMUS_INDEX"; exec sleep 120'
START_TIMEOUT = 300.0
KILL_TIMEOUT = 600.0
LEFTOVER_WAIT = 10.0
SAMPLE_SECONDS = 0.1
"""How often the AM's ssh children are listed; a call shorter than this may go unseen."""
LEASE_SAMPLE_SECONDS = 0.05
"""How often the remaining TTL of the AM's lease is read from etcd during a launch."""
IDLE_SECONDS = 3.0
"""How long executors idle after RUNNING before their memory is read."""
PDSH_TARGET = 1.0
"""Issue 15: primus / pdsh at N = 64."""
KILL_TARGET = 1.5
"""Issue 28 (2 s in issue 15): seconds of ``primus kill`` of 64 executors."""
USS_TARGET_MB = 15.0
"""Issue 15: idle executor USS."""
TORCHRUN_PORT = 29500
"""The first port of the torchrun peer's c10d rendezvous on h1 (one more for each run)."""
TORCHRUN_WORKER = """\
import os
import time
from pathlib import Path

started = time.time()
Path(os.environ["OUT"], os.environ["RANK"]).write_text(repr(started))
time.sleep(600)
"""
COLD_EXECUTOR = "import sys, primus.executor.__main__; print('ready', flush=True); sys.stdin.read()"
"""A cold executor's imports, then a wait: the memory a Python pays before any work."""


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
                       PRIMUS_SSH_KNOWN_HOSTS=str(cluster.known_hosts))
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
        for option, kind in ((b"-G", "ssh -G (reads the user's ssh config)"),
                             (b"-O", "ssh -O stop (lets the shared connection go)")):
            if option in argv:
                return kind
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
class LeaseMargin:
    """The remaining TTL of the AM's lease, as etcd reported it while the executors started."""

    granted: int = 0
    """The lease's TTL (seconds)."""
    least: float = float("inf")
    """The smallest remaining TTL read (seconds; etcd rounds down to whole seconds)."""
    longest_gap: float = 0.0
    """The longest time between two renewals seen (a reading larger than the one before),
    seconds; a keeper on time renews every TTL / 3."""
    samples: int = 0
    first: float = float("inf")
    """Seconds after the submit started of the first reading."""


class LeaseSampler:
    """Reads the remaining TTL of the AM's lease every :data:`LEASE_SAMPLE_SECONDS`.

    It finds the lease on the application's leader key, then asks etcd's ``LeaseTimeToLive``
    through its HTTP gateway over one kept-alive connection (cheaper than an etcdctl per read).
    """

    def __init__(self, client_url: str, leader_key: str, started: float) -> None:
        self.leader_key = leader_key
        self.started = started
        self.margin = LeaseMargin()
        self._address = client_url.split("://", 1)[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LeaseSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _call(self, connection: http.client.HTTPConnection, path: str, body: dict[str, Any]
              ) -> dict[str, Any]:
        connection.request("POST", path, json.dumps(body),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"etcd {path}: {response.status} {answer}")
        return answer

    def _lease(self, connection: http.client.HTTPConnection) -> str | None:
        key = base64.b64encode(self.leader_key.encode()).decode()
        kvs = self._call(connection, "/v3/kv/range", {"key": key}).get("kvs") or []
        return str(kvs[0]["lease"]) if kvs and kvs[0].get("lease") else None

    def _run(self) -> None:
        connection = http.client.HTTPConnection(self._address, timeout=5)
        try:
            lease = None
            renewed, before = 0.0, float("inf")
            while not self._stop.wait(LEASE_SAMPLE_SECONDS):
                if lease is None:
                    lease = self._lease(connection)
                    continue
                answer = self._call(connection, "/v3/lease/timetolive", {"ID": lease})
                now = time.time()
                remaining = int(answer.get("TTL", -1))
                if remaining > before:
                    if renewed:
                        self.margin.longest_gap = max(self.margin.longest_gap, now - renewed)
                    renewed = now
                before = remaining
                self.margin.granted = int(answer.get("grantedTTL", 0))
                self.margin.least = min(self.margin.least, remaining)
                self.margin.first = min(self.margin.first, now - self.started)
                self.margin.samples += 1
        finally:
            connection.close()


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
    lease: LeaseMargin
    """The AM's lease from its first reading until every trainer started."""
    executor_uss: list[float]
    """MB, per executor, :data:`IDLE_SECONDS` after every executor was RUNNING."""
    agent_uss: list[float]
    """MB, per host agent, read at the same time."""
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


def shared_connections(bed: Testbed) -> list[int]:
    """The ssh processes here that use Primus's (submit's or AM's) shared connections.

    A master retitles itself ``ssh: CONTROL_PATH [mux]``; a client names the socket in its
    ``-o ControlPath=…``: both name the control directory.
    """
    control = control_directory(bed.box.env["PRIMUS_HOME"]) + "/"
    return [process.pid for process in psutil.process_iter(["cmdline"])
            if control in " ".join(process.info["cmdline"] or [])]


def host_leftovers(bed: Testbed) -> dict[str, list[int]]:
    """Processes other than sshd on each host, and Primus's shared SSH connections left here."""
    left = {host.name: pids for host in bed.cluster.hosts if (pids := host.app_pids())}
    if masters := shared_connections(bed):
        left["shared ssh connections (this machine)"] = masters
    return left


def host_processes(bed: Testbed, kind: Callable[[psutil.Process], bool]) -> list[int]:
    """The processes of one kind now running on the hosts (the listening sshds excepted)."""
    pids = []
    for host in bed.cluster.hosts:
        for pid in host.app_pids():
            try:
                if kind(psutil.Process(pid)):
                    pids.append(pid)
            except psutil.NoSuchProcess:
                continue
    return pids


def is_agent(process: psutil.Process) -> bool:
    return "primus.launcher.agent" in process.cmdline()


def is_sshd(process: psutil.Process) -> bool:
    """An sshd serving a connection (a shared connection's stays while the application runs)."""
    return process.name() == "sshd"


def cpu_of(pids: list[int], children: bool = False) -> float:
    """CPU seconds of the processes of ``pids`` that still run (and of their reaped children)."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid, children)
        except psutil.NoSuchProcess:
            continue
    return total


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
    leader_key = AppKeys(bed.box.env["PRIMUS_PREFIX"], app_id).leader
    try:
        with AmSshSampler(am_pid, started) as sampler, \
                LeaseSampler(bed.box.etcd_url, leader_key, started) as lease:
            trainer_times = wait_for_trainers(out, size, lambda index: f"{ROLE}-{index}",
                                              START_TIMEOUT)
        status = wait_until_running(bed.box, app_id)
        executors = status["executors"][ROLE]
        am_own = cpu_seconds(am_pid)
        # A shared connection's ssh master (started by the submit's probes or the AM, then
        # detached) and the sshd serving it run until the application ends: counted live.
        cpu = {"submit (with its ssh probes)": submit_cpu, "AM": am_own,
               "AM's ssh clients": cpu_seconds(am_pid, children=True) - am_own,
               "shared connections' ssh masters": cpu_of(shared_connections(bed)),
               "sshd side (handshakes, remote helper)": bed.sshd_cpu_seconds() - sshd_before
               + cpu_of(host_processes(bed, is_sshd), children=True),
               "host agents": cpu_of(host_processes(bed, is_agent)),
               "executors": sum(cpu_seconds(e["plan"]["process"]["pid"]) for e in executors),
               "trainers": sum(cpu_seconds(e["live"]["trainer"]["pid"], children=True)
                               for e in executors)}
        foreign_share = watch.foreign_share(sum(cpu.values()) - submit_cpu)
        time.sleep(IDLE_SECONDS)  # not a synchronisation: the executors settle into idling
        executor_uss = [memory_mb(e["plan"]["process"]["pid"])[1] for e in executors]
        agent_uss = [memory_mb(pid)[1] for pid in host_processes(bed, is_agent)]
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
        cpu=cpu, ssh_calls=sampler.calls, lease=lease.margin, executor_uss=executor_uss,
        agent_uss=agent_uss, kill_seconds=kill_seconds, kill_ssh_calls=kill_calls,
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


# --- peer: torchrun started by pdsh -------------------------------------------------------------


@dataclass
class TorchrunRun:
    """One pdsh starting torchrun on every host: to all workers started, and its stop."""

    seconds: float
    cpu: float
    """CPU seconds until every worker started: pdsh and its ssh clients, the hosts' sshds and
    everything running or reaped on the hosts (torchrun, workers)."""
    stop_seconds: float
    """From ``pdsh … pkill -TERM`` to no process left on any host and the first pdsh ended."""
    foreign_share: float


def torchrun_command(bed: Testbed, size: int, out: Path, port: int) -> str:
    """What pdsh runs on each host: torchrun of ``size / HOSTS`` workers, rendezvous on h1.

    The hosts are network namespaces of one machine: they share its host name, so torchrun
    cannot tell which of them the endpoint names, and each is told (``is_host``) by its address.
    """
    first = bed.cluster.hosts[0].address
    worker = bed.box.root / "torchrun_worker.py"
    worker.write_text(TORCHRUN_WORKER)
    torchrun = shlex.join([
        "env", f"OUT={out}", sys.executable, "-m", "torch.distributed.run", "--nnodes",
        str(HOSTS), "--nproc-per-node", str(size // HOSTS), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"{first}:{port}", "--rdzv-id", f"bench-{port}", "--max-restarts",
        "0"])
    return (f'case " $(hostname -I) " in *" {first} "*) is_host=1 ;; *) is_host=0 ;; esac; '
            f"exec {torchrun} --rdzv-conf is_host=$is_host {shlex.quote(str(worker))}")


def pdsh_hosts(bed: Testbed, command: str) -> tuple[list[str], dict[str, str]]:
    """One pdsh over the 4 hosts running ``command``: its argv and environment."""
    options = bed.cluster.ssh_argv(bed.cluster.hosts[0], "true")[1:-2]
    env = {**os.environ, "PDSH_SSH_ARGS": shlex.join(options) + " %h"}
    return (["pdsh", "-S", "-R", "ssh", "-f", str(HOSTS), "-w",
             ",".join(host.address for host in bed.cluster.hosts), command], env)


def run_torchrun(bed: Testbed, size: int, ports: Iterator[int]) -> TorchrunRun:
    """One pdsh starting torchrun on the hosts; its rendezvous port is the next of ``ports``."""
    (bed.box.root / "runs").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"torchrun-n{size}-", dir=bed.box.root / "runs"))
    out = work / "out"
    out.mkdir()
    argv, env = pdsh_hosts(bed, torchrun_command(bed, size, out, next(ports)))
    watch = CpuWatch(bed.box)
    watch.start()
    sshd_before = bed.sshd_cpu_seconds()
    started = time.time()
    with open(work / "pdsh.log", "wb") as log:
        pdsh = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        try:
            worker_times = wait_for_trainers(out, size, str, START_TIMEOUT)
        except TimeoutError as exc:
            tail = (work / "pdsh.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"torchrun peer: {exc}; pdsh's output ends:\n{tail}") from exc
        process = psutil.Process(pdsh.pid)
        local = cpu_seconds(pdsh.pid) + sum(cpu_seconds(child.pid) for child in
                                            process.children(recursive=True))
        cpu = (local + cpu_of(host_processes(bed, lambda _: True), children=True)
               + bed.sshd_cpu_seconds() - sshd_before)
        foreign_share = watch.foreign_share(cpu)
    finally:
        stop_seconds = stop_torchrun(bed, pdsh)
    return TorchrunRun(max(worker_times) - started, cpu, stop_seconds, foreign_share)


def stop_torchrun(bed: Testbed, pdsh: subprocess.Popen[bytes]) -> float:
    """``pkill -TERM`` torchrun on every host through pdsh, again every second while anything
    is left (a torchrun still starting its workers can miss the first); wait until nothing is.

    Returns the seconds from the first pkill's start until no process was left on any host.
    """
    argv, env = pdsh_hosts(bed, "pkill -TERM -f '[t]orch.distributed.run'")
    started = time.monotonic()
    subprocess.run(argv, env=env, capture_output=True, check=False)
    deadline = started + LEFTOVER_WAIT + 30  # torchrun's own grace for its workers is 30 s
    again = started + 1.0
    while (left := host_leftovers(bed)) or pdsh.poll() is None:
        if time.monotonic() > again:
            subprocess.run(argv, env=env, capture_output=True, check=False)
            again = time.monotonic() + 1.0
        if time.monotonic() > deadline:
            os.killpg(pdsh.pid, signal.SIGKILL)
            for host in bed.cluster.hosts:
                for pid in host.app_pids():
                    os.kill(pid, signal.SIGKILL)
            pdsh.wait()
            raise RuntimeError(f"torchrun peer: left after pkill (now killed): {left}")
        time.sleep(0.05)
    return time.monotonic() - started


def cold_executor_uss() -> float:
    """USS (MB) of a Python that has imported what a cold ``python -m primus.executor`` does."""
    process = subprocess.Popen([sys.executable, "-c", COLD_EXECUTOR], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None  # pipes, just above
    try:
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the cold executor's imports failed")
        return memory_mb(process.pid)[1]
    finally:
        process.stdin.close()
        process.wait(timeout=30)


def warm_up(bed: Testbed) -> None:
    """Fill the page cache and the bytecode caches (here and as the hosts' sshd sees them)."""
    modules = "primus.cli.main, primus.am.__main__, primus.executor.__main__, " \
              "primus.launcher.remote"
    subprocess.run([sys.executable, "-c", f"import {modules}"], env=bed.box.env, check=True)
    ssh_true(bed.cluster.ssh_argv(bed.cluster.hosts[0], shlex.join(
        [sys.executable, "-c", f"import {modules}"])))
    run_floor(bed, HOSTS)
    run_pdsh(bed, HOSTS)
    run_torchrun(bed, HOSTS, iter([TORCHRUN_PORT - 1]))


# --- report -------------------------------------------------------------------------------------


@dataclass
class Results:
    sizes: list[int]
    repeat: int
    primus: dict[int, list[PrimusRun]] = field(default_factory=dict)
    floor: dict[int, list[PeerRun]] = field(default_factory=dict)
    pdsh: dict[int, list[PeerRun]] = field(default_factory=dict)
    torchrun: dict[int, list[TorchrunRun]] = field(default_factory=dict)
    cold_uss: list[float] = field(default_factory=list)
    """MB: a cold executor's imports, measured :attr:`repeat` times."""


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
    """CPU per SSH call: the AM's ssh clients, the shared connections' masters and the sshd side
    (which also served the submit's probes, whose client side is not counted), over the AM's
    sampled calls and the probes."""
    calls = sum(c.count for c in run.ssh_calls.values()) + HOSTS
    return (run.cpu["AM's ssh clients"] + run.cpu["shared connections' ssh masters"]
            + run.cpu["sshd side (handshakes, remote helper)"]) / calls


def target_cell(value: float, target: float, unit: str) -> str:
    return "[green]met[/]" if value <= target else f"[red]missed by {value - target:.2f}{unit}[/]"


def report(results: Results, max_parallel: int, elapsed: float) -> None:
    sizes, primus, floor, pdsh, torchrun = (results.sizes, results.primus, results.floor,
                                            results.pdsh, results.torchrun)
    console.print(
        f"[bold]Submit → all trainers started over SSH[/] — {HOSTS} hosts (netns + sshd) on "
        f"one machine of {os.cpu_count()} cores; Python {platform.python_version()}, "
        f"{tool_version(['ssh', '-V'])}, {tool_version(['pdsh', '-V'])}, {etcd_version()}, "
        f"torch {version('torch')}; ssh.max_parallel {max_parallel}; median (min) of "
        f"{results.repeat} runs; whole benchmark {elapsed:.0f}s")

    table = Table(title="Time to all trainers started (s)", title_justify="left")
    for column in ("N", "primus", "floor: N × ssh true", "pdsh: N × true",
                   "torchrun: pdsh × 4 hosts, N/4 each", "primus / floor", "primus / pdsh",
                   f"target ≤ {PDSH_TARGET:g}× pdsh", "primus / torchrun"):
        table.add_column(column, justify="right")
    for size in sizes:
        p = [r.seconds for r in primus[size]]
        f = [r.seconds for r in floor[size]]
        d = [r.seconds for r in pdsh[size]]
        t = [r.seconds for r in torchrun[size]]
        table.add_row(str(size), med_min(p), med_min(f), med_min(d), med_min(t),
                      f"{med(p) / med(f):.2f}×", f"{med(p) / med(d):.2f}× ({min(p) / min(d):.2f}×)",
                      target_cell(med(p) / med(d), PDSH_TARGET, "×"), f"{med(p) / med(t):.2f}×")
    console.print(table)
    console.print("Other processes' share of the CPU during the runs, max: " + ", ".join(
        f"N={s} primus {max(r.foreign_share for r in primus[s]):.0%} floor "
        f"{max(r.foreign_share for r in floor[s]):.0%} pdsh "
        f"{max(r.foreign_share for r in pdsh[s]):.0%} torchrun "
        f"{max(r.foreign_share for r in torchrun[s]):.0%}" for s in sizes), style="dim")

    stop = Table(title="Stop all N (s)", title_justify="left")
    for column in ("N", "primus kill", f"target ≤ {KILL_TARGET:g} s",
                   "torchrun: pdsh pkill -TERM → nothing left", "primus / torchrun"):
        stop.add_column(column, justify="right")
    for size in sizes:
        k = [r.kill_seconds for r in primus[size]]
        t = [r.stop_seconds for r in torchrun[size]]
        stop.add_row(str(size), med_min(k), target_cell(med(k), KILL_TARGET, " s"), med_min(t),
                     f"{med(k) / med(t):.2f}×")
    console.print(stop)

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

    memory = size_table(f"Memory: USS (MB), {IDLE_SECONDS:g} s after every executor was RUNNING "
                        f"(median of runs)", "process", sizes)
    memory.add_row("idle executor, forked by the host agent: median / max", *(
        f"{med([med(r.executor_uss) for r in primus[s]]):.1f} / "
        f"{med([max(r.executor_uss) for r in primus[s]]):.1f}" for s in sizes))
    memory.add_row(f"target ≤ {USS_TARGET_MB:g} MB (the median)", *(
        target_cell(med([med(r.executor_uss) for r in primus[s]]), USS_TARGET_MB, " MB")
        for s in sizes))
    memory.add_row("host agent (one per host), median", *(
        f"{med([med(r.agent_uss) for r in primus[s]]):.1f}" for s in sizes))
    memory.add_row("cold executor's imports (python -c 'import primus.executor.__main__')",
                   *(f"{med(results.cold_uss):.1f}" for _ in sizes))
    console.print(memory)

    lease = size_table(f"The AM's lease while the executors started: remaining TTL read from "
                       f"etcd every {LEASE_SAMPLE_SECONDS * 1000:g} ms", "", sizes)
    lease.add_row("TTL granted (s)", *(f"{med([r.lease.granted for r in primus[s]]):g}"
                                       for s in sizes))
    lease.add_row("least remaining (s): median (min) of runs", *(
        f"{med([r.lease.least for r in primus[s]]):g} ({min(r.lease.least for r in primus[s]):g})"
        for s in sizes))
    lease.add_row("longest time between two renewals seen (s): median (max) of runs", *(
        f"{med([r.lease.longest_gap for r in primus[s]]):.2f} "
        f"({max(r.lease.longest_gap for r in primus[s]):.2f})" for s in sizes))
    lease.add_row("readings per run, from (s after submit)", *(
        f"{med([r.lease.samples for r in primus[s]]):.0f}, from "
        f"{med([r.lease.first for r in primus[s]]):.2f}" for s in sizes))
    console.print(lease)

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
    cpu.add_row("torchrun: total (pdsh, ssh, sshd side, torchrun, workers)", *(
        f"{med([r.cpu for r in torchrun[s]]):.2f}" for s in sizes))
    console.print(cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,64",
                        help="comma-separated executor counts, multiples of 4 (default: 16,64)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (default: 3)")
    parser.add_argument("--attempts", type=int, default=bench_submit.ATTEMPTS,
                        help="measurements of a run at most, while other processes use more than "
                             f"{bench_submit.DISTURBED_SHARE * 100:.0f} %% of the CPU (default: "
                             f"{bench_submit.ATTEMPTS}; 1 on a machine that stays busy)")
    parser.add_argument("--quiet-wait", type=float, default=bench_submit.QUIET_WAIT,
                        help="seconds to wait for a nearly idle machine before each measurement "
                             f"(default: {bench_submit.QUIET_WAIT:g})")
    args = bench_submit.parse_args(parser, argv, sizes="4", repeat=1, attempts=1, quiet_wait=0)
    bench_submit.ATTEMPTS, bench_submit.QUIET_WAIT = args.attempts, args.quiet_wait
    results = Results([int(s) for s in args.sizes.split(",")], args.repeat)
    if any(size % HOSTS for size in results.sizes):
        parser.error(f"--sizes {args.sizes}: each size must be a multiple of {HOSTS} (the "
                     f"torchrun peer starts size / {HOSTS} workers a host)")
    began = time.monotonic()
    ports = itertools.count(TORCHRUN_PORT)
    with testbed() as bed:
        warm_up(bed)
        results.cold_uss = [cold_executor_uss() for _ in range(args.repeat)]
        for size in results.sizes:
            for kind in (results.primus, results.floor, results.pdsh, results.torchrun):
                kind[size] = []
            for attempt in range(args.repeat):
                # Interleaved, so that a slow spell of the machine hits all four alike.
                label = f"N={size} run {attempt + 1}/{args.repeat}"
                results.floor[size].append(undisturbed(partial(run_floor, bed, size),
                                                       f"{label} floor"))
                results.pdsh[size].append(undisturbed(partial(run_pdsh, bed, size),
                                                      f"{label} pdsh"))
                results.torchrun[size].append(undisturbed(
                    partial(run_torchrun, bed, size, ports), f"{label} torchrun"))
                results.primus[size].append(undisturbed(partial(run_primus, bed, size),
                                                        f"{label} primus"))
                run = results.primus[size][-1]
                console.print(f"{label}: primus {run.seconds:.2f}s (kill {run.kill_seconds:.1f}s,"
                              f" lease ≥ {run.lease.least:g}/{run.lease.granted}s, executor USS "
                              f"{med(run.executor_uss):.1f} MB), floor "
                              f"{results.floor[size][-1].seconds:.2f}s, pdsh "
                              f"{results.pdsh[size][-1].seconds:.2f}s, torchrun "
                              f"{results.torchrun[size][-1].seconds:.2f}s (stop "
                              f"{results.torchrun[size][-1].stop_seconds:.1f}s)", style="dim")
        max_parallel = bed.max_parallel
    report(results, max_parallel, time.monotonic() - began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
