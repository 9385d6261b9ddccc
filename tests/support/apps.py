"""Applications run through the real ``primus`` command: job files, status, and the processes an
application leaves on this machine or on the hosts of the SSH test cluster."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path, PurePosixPath

import psutil

from primus.launcher.agent import IDLE_SECONDS
from tests.support import service
from tests.support.cluster import TestCluster, TestHost
from tests.support.primus import run_primus

AGENT_EXIT = IDLE_SECONDS + 5.0
"""How long a host agent may outlive the application's last executor where no AM released it:
it exits once it has had none for IDLE_SECONDS (it looks each second); the rest is a margin for a
busy machine."""


def write_job(path: Path, text: str) -> Path:
    """Write the job file ``text`` to ``path``; return ``path``."""
    path.write_text(text)
    return path


def status_json(env: dict[str, str], app_id: str) -> dict:
    """What ``primus status APP_ID -o json`` prints for an application in etcd, computed in
    this process by the client layer the command calls (:func:`tests.support.service.status`):
    a test that polls an application starts no interpreter for each look (0.4 s of CPU each, on
    the machine whose timing the test depends on). The command itself is
    :func:`cli_status_json`."""
    return service.status(env, app_id)


def cli_status_json(env: dict[str, str], app_id: str) -> dict:
    """``primus status APP_ID -o json`` run for real, parsed (it also reads the history and
    starts the embedded etcd); the command must succeed."""
    result = run_primus(env, "status", app_id, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def command_lines() -> list[bytes]:
    """The command line of every process of this machine, as the kernel holds it (NUL between
    words); a process gone between the listing and the read is left out."""
    found = []
    for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
        with contextlib.suppress(OSError):
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes())
    return found


def _names_app(words: list[str], app_id: str) -> bool:
    """The command line ``words`` (or a process title, whose words a title may join into one)
    names the application: a word that is its id (``--app APP_ID``, the lease keeper's title
    ``primus lease keeper APP_ID``), or a path in its directory (``.../apps/APP_ID/...``: its
    host agent's directory ``.../apps/APP_ID/hosts/HOST``, a log an executor writes or a reader
    follows)."""
    for word in " ".join(words).split():
        parts = PurePosixPath(word).parts
        if word == app_id or ("apps", app_id) in pairwise(parts):
            return True
    return False


HOST_SERVICES = ("primus.launcher.agent", "primus lease keeper", "primus.launcher.remote")
"""What the command line (or title) of an application's processes that serve a host, not one
executor, holds: its host agent, the lease keeper the agent forked (they end when the AM
releases the host, or :data:`AGENT_EXIT` after its last executor), and a launcher's command
there (a stop, a release, a log reader: it ends with its call)."""


def _belonging(app_id: str) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """Every process of the application on this machine and on the test hosts (whose
    processes this machine sees): those a command line, a title or the environment
    (``PRIMUS_APP_ID``, a trainer's) ties to it, without and with :data:`HOST_SERVICES`."""
    own: list[psutil.Process] = []
    services: list[psutil.Process] = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmdline = proc.info["cmdline"] or []
            environ = proc.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if _names_app(cmdline, app_id) or environ.get("PRIMUS_APP_ID") == app_id:
            title = " ".join(cmdline)
            (services if any(kind in title for kind in HOST_SERVICES) else own).append(proc)
    return own, services


def processes_of(app_id: str) -> list[psutil.Process]:
    """Every process of the application on this machine and on the test hosts: AM,
    executors, trainers, and any other that names it (a log reader); not its
    :data:`HOST_SERVICES` (:func:`host_services_of`)."""
    return _belonging(app_id)[0]


def host_services_of(app_id: str) -> list[psutil.Process]:
    """The application's :data:`HOST_SERVICES` on this machine and on the test hosts."""
    return _belonging(app_id)[1]


PRIMUS_PROCESSES = ("primus.am", "primus.launcher.agent", "primus.executor", "primus lease keeper")
"""What the command line (or title) of each kind of Primus process of an application holds."""


def primus_environments(app_id: str) -> list[tuple[str, dict[str, str]]]:
    """The kind (:data:`PRIMUS_PROCESSES`) and the environment of each Primus process of the
    application on this machine and on the test hosts (not its trainers), as the kernel shows
    it to root: the environment the process was started with, whatever it changed since."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        title = " ".join(proc.info["cmdline"] or [])
        kind = next((kind for kind in PRIMUS_PROCESSES if kind in title), None)
        if kind is not None and app_id in title:
            with contextlib.suppress(psutil.Error):
                found.append((kind, proc.environ()))
    return found


def agents_of(app_id: str) -> list[psutil.Process]:
    """The application's host agents on this machine and on the test hosts, by the command
    line an agent runs with: ``PYTHON -m primus.launcher.agent DIRECTORY READY_FD``, its
    directory in the application's (``HOME/apps/APP_ID/hosts/HOST``, as
    :func:`primus.launcher.layout.agent_dir` makes it, or ``HOME/apps/APP_ID`` itself)."""
    return [proc for proc in host_services_of(app_id)
            if (proc.info["cmdline"] or [])[1:3] == ["-m", "primus.launcher.agent"]]


def assert_nothing_left(app_id: str, timeout: float = 10.0) -> None:
    """No process of the application remains, nor any of its :data:`HOST_SERVICES`. The AM
    releases leadership just before it exits, so a command that waited for that may return
    while the AM process is still ending; an agent no AM released ends :data:`AGENT_EXIT` after
    the last executor at the latest, and its lease keeper with it."""
    left = _gone_within(lambda: processes_of(app_id), timeout)
    assert left == [], f"processes of {app_id} left: {_described(left)}"
    services = _gone_within(lambda: host_services_of(app_id), AGENT_EXIT)
    assert services == [], (f"host agents, lease keepers or launcher commands of {app_id} left "
                            f"{AGENT_EXIT:g}s after its last process: {_described(services)}")


def _described(processes: list[psutil.Process]) -> str:
    """Each process as ``pid: command line``, for a failure message."""
    return "; ".join(line.rstrip() for line in TestHost.describe([p.pid for p in processes]))


def _gone_within(find: Callable[[], list[psutil.Process]], timeout: float
                 ) -> list[psutil.Process]:
    """Wait up to ``timeout`` seconds for the processes ``find`` lists to exit; those left."""
    deadline = time.monotonic() + timeout
    while (left := find()) and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=0.5)
    return find()


def gone(pid: int) -> bool:
    """The process no longer runs. An orphan killed under us stays a zombie until init reaps
    it, which init here does in its own time."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def leftovers(cluster: TestCluster) -> dict[str, list[int]]:
    """Processes other than sshd on each host (each host's looked at once)."""
    return {h.name: pids for h in cluster.hosts if (pids := h.app_pids())}


def assert_hosts_left_empty(cluster: TestCluster, timeout: float = AGENT_EXIT) -> None:
    """No process but sshd's is left on any test host within ``timeout`` seconds: what an
    application ran there has ended (a host agent ends :data:`AGENT_EXIT` after its last
    executor at the latest, a log reader once its connection closed)."""
    deadline = time.monotonic() + timeout
    while (left := leftovers(cluster)) and time.monotonic() < deadline:
        time.sleep(0.1)
    # One look decides, and its message names what it saw (a second look, as this took
    # before, could fail naming nothing).
    assert not left, "processes left on the hosts: " + "; ".join(
        f"{name}: {TestHost.describe(pids)}" for name, pids in left.items())
