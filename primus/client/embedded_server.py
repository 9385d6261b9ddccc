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

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

from primus.client.server_info import ServerError, ServerInfo
from primus.private_files import append_private, write_private
from primus.store.embedded import exclusive_lock, own_process_argv, stop_pid

START_TIMEOUT = 30.0


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
            argv = [sys.executable, "-m", "primus.server", "run", "--listen", "127.0.0.1:0",
                    "--ui-listen", "127.0.0.1:0", "--state-file", str(self.state_file)]
            with append_private(self.log_file) as log:
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=log, start_new_session=True,
                                           env={**os.environ, **(env or {}),
                                                "PRIMUS_HOME": str(self.home)})
            deadline = time.monotonic() + START_TIMEOUT
            # The server writes its state file once it answers: there is nothing to await but
            # the file, or the process's exit.
            while (info := self._read_state()) is None or info.pid != process.pid:
                if process.poll() is not None or time.monotonic() > deadline:
                    if process.poll() is None:
                        process.kill()
                    tail = self.log_file.read_text(errors="replace")[-2000:]
                    raise ServerError(f"the API server did not start (exit {process.poll()}); "
                                      f"log {self.log_file}:\n{tail}")
                time.sleep(0.05)
            return info

    def stop(self) -> ServerInfo | None:
        """Stop the server (SIGTERM, a grace, SIGKILL); return what was stopped, if anything."""
        with exclusive_lock(self.dir):
            info = self.status()
            if info is None:
                return None
            stop_pid(info.pid)
            return info
