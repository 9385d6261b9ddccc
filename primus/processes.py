"""Process operations on *this* host: start detached, identify, signal, stop, follow a log,
describe an account, count GPUs.

The local launcher calls these in-process; the SSH launcher runs them on a remote host through
``python -m primus.launcher.remote``; the executor stops and signals its trainer with them, the
AM and the client layer tell a process by its pid and start time. Either way the same code
decides what "alive" and "the same process" mean. On the lowest floor of Primus's layers
(``.importlinter``), beside the modules it imports (:mod:`primus.private_files`,
:mod:`primus.process_secrets`), so that every package may use it.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import psutil

from primus.private_files import append_private, private_dir
from primus.process_secrets import handed_over

# Kept free of pydantic and the rest of Primus: this module is what every remote command imports.


def start_time_of(pid: int) -> float:
    """The kernel's start time of ``pid`` (its identity with the pid); 0 if it already exited."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return 0.0


def spawn_detached(argv: Sequence[str], env: Mapping[str, str], log_file: str,
                   cwd: str | None = None, secrets: Mapping[str, str] | None = None
                   ) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session with output appended to ``log_file``.

    The child survives whoever started it: it has its own session and process group, no
    terminal, stdin from ``/dev/null``, and does not hold the starter's pipes. The log and the
    directories made for it are private to this account (0600, 0700). ``secrets`` reach it on
    an inherited pipe (:func:`primus.process_secrets.handed_over`), never in its environment,
    which loses any variable of theirs it would have inherited from this process.
    """
    log_file = os.path.expanduser(log_file)
    if os.path.dirname(log_file):
        private_dir(os.path.dirname(log_file))
    secrets = secrets or {}
    inherited = {name: value for name, value in os.environ.items() if name not in secrets}
    with append_private(log_file) as log, handed_over(secrets) as (named, fds):
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                                env={**inherited, **env, **named}, pass_fds=fds)


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


@dataclass(frozen=True)
class StopOrder:
    """A process group to stop: SIGTERM, up to ``grace`` seconds for its leader to exit, then
    SIGKILL; then SIGKILL for the groups of ``then_kill`` (what the leader should have stopped
    itself, as an executor its trainer)."""

    pid: int
    start_time: float
    grace: float
    then_kill: Sequence[tuple[int, float]] = ()


def stop_groups(orders: Sequence[StopOrder], poll: float = 0.05) -> None:
    """Stop every group of ``orders`` at once: the TERM, wait, KILL sequence of Primus.

    Each group gets its own grace, all of them running together, so stopping a host's
    executors takes as long as the slowest of them, not their sum.
    """
    now = time.monotonic()
    pending = {(order.pid, order.start_time): now + order.grace for order in orders
               if send_signal(order.pid, order.start_time, signal.SIGTERM, group=True)}
    _kill_when_due(pending, poll)
    _kill_when_due({(pid, start): 0.0 for order in orders for pid, start in order.then_kill},
                   poll)


def _kill_when_due(deadlines: dict[tuple[int, float], float], poll: float) -> None:
    """SIGKILL each process group at its deadline, or as soon as its leader has gone (the group
    may outlive it); return once every leader is gone, or 2 s after its SIGKILL.

    A leader's exit is seen at once (a pidfd of it turns readable); at the latest after
    ``poll`` seconds, where no pidfd could be had."""
    killed: dict[tuple[int, float], float] = {}
    with _ExitWatch([*deadlines]) as exits:
        while deadlines or killed:
            now = time.monotonic()
            for leader, deadline in list(deadlines.items()):
                if now >= deadline or not identity(*leader):
                    send_signal(*leader, signal.SIGKILL, group=True)
                    del deadlines[leader]
                    killed[leader] = now + 2.0
            for leader, deadline in list(killed.items()):
                if now >= deadline or not identity(*leader):
                    del killed[leader]
            if deadlines or killed:
                due = min([*deadlines.values(), *killed.values()])
                exits.wait(max(0.0, min(poll, due - time.monotonic())))


class _ExitWatch:
    """Waits until one of some processes exits (Linux pidfds), or a timeout passes."""

    def __init__(self, processes: Sequence[tuple[int, float]]) -> None:
        self._poller = select.poll()
        self._fds: list[int] = []
        for pid, start_time in processes:
            with contextlib.suppress(OSError, AttributeError):  # gone, or no pidfd here
                fd = os.pidfd_open(pid)
                if identity(pid, start_time):  # the pid is still that process's
                    self._fds.append(fd)
                    self._poller.register(fd, select.POLLIN)
                else:
                    os.close(fd)

    def __enter__(self) -> _ExitWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds:
            os.close(fd)

    def wait(self, timeout: float) -> None:
        """Return once a watched process has exited since the last wait, or after
        ``timeout`` seconds."""
        for fd, _ in self._poller.poll(timeout * 1000):
            self._poller.unregister(fd)  # seen: the next wait is for the others


def open_log(path: str) -> BinaryIO:
    """``path`` opened to read, only if it is a regular file and not a symbolic link: a log's
    path is Primus's (the application's directory, a role and an index), but what lies there
    is the application's, which could make it a link to a file of somebody else's, or a FIFO
    that would hold the reader forever.

    Raises:
        OSError: it is missing, a link (``ELOOP``), or not a regular file.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link, not followed", path) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def follow_file(path: str, more: Callable[[float], bool], chunk: int = 64 * 1024,
                offset: int = 0) -> Generator[bytes, None, None]:
    """Yield the content of ``path`` from byte ``offset`` on, then what is appended to it,
    while ``more(timeout)`` — which waits up to ``timeout`` seconds — says to go on; one last
    read once it says no.

    A file that does not exist yet (a trainer not started) is waited for the same way.
    """
    while not os.path.lexists(path):
        if not more(0.2):
            return
    with open_log(path) as log:
        log.seek(offset)
        while True:
            data = log.read(chunk)
            if data:
                yield data
            elif not more(0.2):
                rest = log.read()  # what was written between the read and the answer
                if rest:
                    yield rest
                return


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


def gpu_topology_matrix() -> str | None:
    """What ``nvidia-smi topo -m`` prints: how this host's GPUs are linked; ``None`` where
    it is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                              timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_devices() -> list[dict[str, Any]] | None:
    """Each GPU ``nvidia-smi`` lists: its ``index``, ``uuid`` and ``pci_bus_id``; ``None``
    where it is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = []
    for line in listing.splitlines():
        index, uuid, bus_id = ([part.strip() for part in line.split(",")] + ["", ""])[:3]
        if index.isdigit() and uuid:
            found.append({"index": int(index), "uuid": uuid, "pci_bus_id": bus_id})
    return found


def describe_account(name: str | None = None) -> dict[str, Any] | None:
    """The account ``name`` (default: the one this process runs as) on this host: name, uid,
    home and the names of its groups (what :func:`primus.config.accounts.refusal` checks);
    ``None`` when there is no such account."""
    try:
        me = pwd.getpwuid(os.getuid()) if name is None else pwd.getpwnam(name)
    except KeyError:
        return None
    groups = set()
    gids = os.getgroups() if name is None else os.getgrouplist(me.pw_name, me.pw_gid)
    for gid in {me.pw_gid, *gids}:
        with contextlib.suppress(KeyError):
            groups.add(grp.getgrgid(gid).gr_name)
    return {"name": me.pw_name, "uid": me.pw_uid, "home": me.pw_dir, "groups": sorted(groups)}
