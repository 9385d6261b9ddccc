"""The API server on the embedded default: one per ``$PRIMUS_HOME``, beside the embedded etcd.

It lives under ``$PRIMUS_HOME/server`` (0700): ``server.json`` (0600) with its pid and address,
written by the server once it answers, ``server.log`` and ``ui-token`` (0600). It listens on
loopback on ports the system picks; the API serves TLS with the embedded etcd's certificates and
admits only the embedded client certificate; the web UI serves HTTP on loopback and signs in
only whoever holds ``ui-token`` (``primus ui`` prints a link that carries it).
Started and stopped like the embedded etcd: a pid read from the state file
is signalled only once it is verified to be this home's server.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from primus.client.server_info import ServerError, ServerInfo
from primus.launcher import forker
from primus.private_files import append_private, write_private
from primus.processes import identity, start_time_of
from primus.store.embedded import exclusive_lock, own_process_argv, stop_pid

START_TIMEOUT = 30.0
SERVER_MODULES = ("primus.server.grpc_server",)
"""What the server imports as it starts, beyond what ``primus.server``'s ``__main__`` does:
the forker imports these before it forks one."""


def runs_server_for(pid: int, state_file: Path) -> bool:
    """Whether ``pid`` is a ``primus.server`` of this account writing ``state_file``."""
    argv = own_process_argv(pid)
    if "primus.server" not in argv or "--state-file" not in argv:
        return False
    position = argv.index("--state-file")
    try:
        return position + 1 < len(argv) and os.path.samefile(argv[position + 1], state_file)
    except OSError:
        return False


class EmbeddedServer:
    """The API server of ``home``; safe to use from concurrent commands."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.dir = home / "server"
        self.state_file = self.dir / "server.json"
        self.log_file = self.dir / "server.log"
        self.ui_token_file = self.dir / "ui-token"

    def ui_token(self) -> str:
        """The token that signs this account in to the web UI (``server/ui-token``, 0600),
        made by the server at its first start and kept across restarts, so that open pages
        stay signed in."""
        try:
            token = self.ui_token_file.read_text().strip()
        except FileNotFoundError:
            token = ""
        if not token:
            token = secrets.token_urlsafe(32)
            write_private(self.ui_token_file, (token + "\n").encode())
        return token

    def _read_state(self) -> ServerInfo | None:
        try:
            return ServerInfo(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def status(self) -> ServerInfo | None:
        """The running server, or ``None`` when none runs for this home."""
        info = self._read_state()
        if info is None or not runs_server_for(info.pid, self.state_file):
            return None
        return info

    def ensure_running(self, env: dict[str, str] | None = None) -> ServerInfo:
        """Reuse the running server or start one, detached; return it once it answers.

        Raises:
            ServerError: it exited or did not answer within :data:`START_TIMEOUT` seconds;
                the message carries the tail of its log.
        """
        with exclusive_lock(self.dir):
            info = self.status()
            if info is not None:
                return info
            self.state_file.unlink(missing_ok=True)
            pid, ended = self._start({**(env or {}), "PRIMUS_HOME": str(self.home)})
            deadline = time.monotonic() + START_TIMEOUT
            # The server writes its state file once it answers: there is nothing to await but
            # the file, or the process's exit.
            while (info := self._read_state()) is None or info.pid != pid:
                if ended() or time.monotonic() > deadline:
                    why = "it exited" if ended() else f"no answer within {START_TIMEOUT:g}s"
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                    tail = self.log_file.read_text(errors="replace")[-2000:]
                    raise ServerError(f"the API server did not start ({why}); "
                                      f"log {self.log_file}:\n{tail}")
                time.sleep(0.05)
            return info

    def _start(self, env: dict[str, str]) -> tuple[int, Callable[[], bool]]:
        """Start ``python -m primus.server run`` detached, forked by this account's forker
        (:mod:`primus.launcher.forker`: it has imported the server already), else cold;
        return its pid and a test of whether it has ended."""
        argv = [sys.executable, "-m", "primus.server", "run", "--listen", "127.0.0.1:0",
                "--ui-listen", "127.0.0.1:0", "--state-file", str(self.state_file)]
        try:
            pid = forker.spawn(argv, env, str(self.log_file), warm=SERVER_MODULES)
        except forker.ForkerError:
            with append_private(self.log_file) as log:
                child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, start_new_session=True,
                                         env={**os.environ, **env})
            return child.pid, lambda: child.poll() is not None
        started = start_time_of(pid)
        return pid, lambda: identity(pid, started) is None

    def stop(self) -> ServerInfo | None:
        """Stop the server (SIGTERM, a grace, SIGKILL); return what was stopped, if anything."""
        with exclusive_lock(self.dir):
            info = self.status()
            if info is None:
                return None
            stop_pid(info.pid)
            return info
