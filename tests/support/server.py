"""A real ``primus server`` process for tests, on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from primus.client.embedded_server import SERVER_MODULES
from primus.launcher import forker
from primus.processes import identity, start_time_of
from tests.support.primus import REPO
from tests.support.waiting import wait_until


@dataclass
class ServerProcess:
    """A server forked by the account's forker (``primus/launcher/forker.py``), as the
    embedded server is: not a child of this process."""

    pid: int
    started: float

    def poll(self) -> int | None:
        """``None`` while it runs (its exit status is its forker's to collect)."""
        return None if identity(self.pid, self.started) else -1

    def send_signal(self, signum: int) -> None:
        """Signal it while it runs (as ``Popen.send_signal``, nothing once it has ended)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def wait(self, timeout: float) -> None:
        wait_until(lambda: self.poll() is not None, timeout, f"the server {self.pid} to exit")


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes] | ServerProcess
    address: str
    log: Path
    ui_url: str = ""
    """The web UI's URL, ending in ``/``."""
    metrics_url: str = ""
    """Where ``--metrics-listen`` serves the metrics (empty without it)."""

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)


def start_server(env: dict[str, str], tmp_path: Path, *flags: str,
                 python: str = sys.executable) -> RunningServer:
    """Run ``python -m primus.server run`` on a free loopback port; return once it serves."""
    state = tmp_path / f"server-{time.monotonic_ns()}.json"
    log = state.with_suffix(".log")
    argv = [python, "-m", "primus.server", "run", "--listen", "127.0.0.1:0",
            "--ui-listen", "127.0.0.1:0", "--state-file", str(state),
            *(flags or ("--plaintext",))]
    process: subprocess.Popen[bytes] | ServerProcess
    try:  # as the embedded server starts (primus/client/embedded_server.py)
        pid = forker.spawn(argv, env, str(log), str(REPO), warm=SERVER_MODULES, inherit=False)
        process = ServerProcess(pid, start_time_of(pid))
    except forker.ForkerError:
        with log.open("wb") as out:
            process = subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=out)
    wait_until(lambda: state.exists() or process.poll() is not None, 30,
               "the server to write its state file")
    assert process.poll() is None, f"the server exited: {log.read_text()}"
    info = json.loads(state.read_text())
    return RunningServer(process, info["address"], log, info["ui_url"], info["metrics_url"])


def one_account_site(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """``env`` with its site file (``$PRIMUS_CONF``) copied to one that also says
    ``trust: one-account``: a server of several users on a site without ``accounts:`` (the
    tests of tokens, certificates and reads, which run everything as this account) starts
    only with it. ``env`` unchanged when its site already says whose accounts run what."""
    conf = env.get("PRIMUS_CONF", "-")
    data = (yaml.safe_load(Path(conf).read_text()) or {}) if conf != "-" else {}
    if "accounts" in data or "trust" in data:
        return env
    site = tmp_path / f"site-one-account-{time.monotonic_ns()}.yaml"
    site.write_text(yaml.safe_dump({**data, "trust": "one-account"}))
    return {**env, "PRIMUS_CONF": str(site)}
