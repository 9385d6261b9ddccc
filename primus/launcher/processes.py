"""Process operations on *this* host: start detached, identify, signal, describe the host.

The local launcher calls these in-process; the SSH launcher runs them on a remote host through
``python -m primus.launcher.remote``. Either way the same code decides what "alive" and "the same
process" mean.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from primus import __version__
from primus.private_files import append_private, private_dir

# Kept free of pydantic and the rest of Primus: this module is what every remote command imports.


def start_time_of(pid: int) -> float:
    """The kernel's start time of ``pid`` (its identity with the pid); 0 if it already exited."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return 0.0


def spawn_detached(argv: Sequence[str], env: Mapping[str, str], log_file: str,
                   cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session with output appended to ``log_file``.

    The child survives whoever started it: it has its own session and process group, no
    terminal, stdin from ``/dev/null``, and does not hold the starter's pipes. The log and the
    directories made for it are private to this account (0600, 0700).
    """
    log_file = os.path.expanduser(log_file)
    if os.path.dirname(log_file):
        private_dir(os.path.dirname(log_file))
    with append_private(log_file) as log:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                env={**os.environ, **env})


def identity(pid: int, start_time: float) -> bool | None:
    """True if ``pid`` is still the process started at ``start_time``; False if the pid was
    recycled; None if it is gone (a zombie counts as gone)."""
    try:
        found = psutil.Process(pid)
        if found.status() == psutil.STATUS_ZOMBIE:
            return None
        return abs(found.create_time() - start_time) < 0.05
    except psutil.NoSuchProcess:
        return None


def send_signal(pid: int, start_time: float, signum: int, group: bool) -> bool:
    """Signal the process (its whole group when ``group``); False when there was nothing to hit.

    A process group can outlive its leader, so with ``group`` the group is signalled even when
    the leader is gone — but never when the pid now belongs to another process.
    """
    same = identity(pid, start_time)
    if same is False:
        return False
    try:
        if group:
            os.killpg(pid, signum)
        elif same:
            os.kill(pid, signum)
        else:
            return False
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_group(pid: int, start_time: float, grace: float,
               then_kill: Sequence[tuple[int, float]] = (), poll: float = 0.05) -> None:
    """SIGTERM a process group, wait up to ``grace`` seconds for its leader, SIGKILL the group;
    then SIGKILL the groups in ``then_kill`` (what the leader should have stopped itself)."""
    if send_signal(pid, start_time, signal.SIGTERM, group=True):
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and identity(pid, start_time):
            time.sleep(poll)
        # The group may outlive its leader: SIGKILL it even when the leader has gone.
        send_signal(pid, start_time, signal.SIGKILL, group=True)
    for other_pid, other_start in then_kill:
        send_signal(other_pid, other_start, signal.SIGKILL, group=True)


def count_gpus() -> int:
    """GPUs that ``nvidia-smi`` lists, 0 when it is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def describe_host() -> dict[str, Any]:
    """What ``primus hosts check`` reports about this host."""
    return {
        "primus_version": __version__,
        "home": os.path.expanduser("~"),
        "cpu": psutil.cpu_count(logical=True),
        "memory": psutil.virtual_memory().total,
        "gpus": count_gpus(),
        "load": os.getloadavg()[0],
    }
