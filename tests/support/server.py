"""A real ``primus server`` process for tests, on a free loopback port."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.primus import REPO
from tests.support.waiting import wait_until


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
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
    with log.open("wb") as out:
        process = subprocess.Popen(
            [python, "-m", "primus.server", "run", "--listen", "127.0.0.1:0",
             "--ui-listen", "127.0.0.1:0", "--state-file", str(state),
             *(flags or ("--plaintext",))],
            env=env, cwd=REPO, stdout=out, stderr=out)
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
