"""Benchmark: the ``primus`` command through an API server, against the same command reaching
etcd itself, on the embedded default.

In a temporary ``$PRIMUS_HOME`` it starts the embedded etcd (``primus submit`` of the hello
example, which ends), then a ``primus server run`` on that etcd with TLS (the embedded
certificates) and a tokens file. Then, interleaved, ``--repeat`` times each:

* **direct**: ``primus status APP`` and ``primus list`` with no server configured (the command
  opens the embedded etcd with its client certificate);
* **server**: the same commands with ``$PRIMUS_SERVER``, ``$PRIMUS_SERVER_CA`` and
  ``$PRIMUS_TOKEN`` set (the command calls ``GetApplication`` or ``ListApplications``).

Each figure is the wall time of the whole command, from just before the subprocess starts to
its exit, so it includes the interpreter's start-up, which both modes pay. It prints the
median and the minimum of each, and server/direct (target: at most 1.2x). The outputs of the
two modes are compared once: they must be equal.

Usage: ``python bench/bench_cli.py [--repeat 15]``; ``--quick`` for a smoke run (1 run each)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_submit import parse_args
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
HELLO = REPO / "examples" / "hello" / "job.yaml"
TARGET = 1.2
TOKEN = "bench-token-5d1c0a93e8f7"


def primus(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "primus.cli", *args], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"primus {' '.join(args)} failed: {result.stderr}")
    return took, result


def start_server(env: dict[str, str], home: Path) -> tuple[subprocess.Popen[bytes], str]:
    from primus.client.access import token_digest  # noqa: PLC0415 - after the venv check

    tokens = home / "tokens.yaml"
    # bench, the one user, is its admin: a server without accounts: serves one admin only
    tokens.write_text(f"tokens:\n  - user: bench\n    sha256: {token_digest(TOKEN)}\n"
                      "admins: [bench]\n")
    pki = home / "etcd" / "pki"
    state = home / "server.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "primus.server", "run", "--listen", "127.0.0.1:0", "--no-ui",
         "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
         "--tokens", str(tokens), "--state-file", str(state)],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=(home / "server.log").open("wb"))
    deadline = time.monotonic() + 30
    while not state.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start: {(home / 'server.log').read_text()}")
        time.sleep(0.05)
    return process, json.loads(state.read_text())["address"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    args = parse_args(parser, argv, repeat=1)
    with tempfile.TemporaryDirectory(prefix="primus-bench-cli-") as tmp:
        home = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
        env.update(PRIMUS_HOME=str(home / "home"), PRIMUS_CONF="-", COLUMNS="200")
        _, submitted = primus(env, "submit", str(HELLO), "--wait")
        app_id = submitted.stdout.strip()
        server, address = start_server(env, home / "home")
        remote = {**env, "PRIMUS_SERVER": address, "PRIMUS_TOKEN": TOKEN,
                  "PRIMUS_SERVER_CA": str(home / "home" / "etcd" / "pki" / "ca.crt"),
                  "PRIMUS_HOME": str(home / "laptop")}
        try:
            commands = {"status": ("status", app_id), "list": ("list",)}
            for name, command in commands.items():
                direct_out, server_out = primus(env, *command)[1].stdout, \
                    primus(remote, *command)[1].stdout
                if direct_out != server_out:
                    raise SystemExit(f"{name}: the two modes printed different things")
            times: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.repeat):
                for name, command in commands.items():
                    for mode, mode_env in (("direct", env), ("server", remote)):
                        times.setdefault((name, mode), []).append(primus(mode_env,
                                                                         *command)[0])
        finally:
            server.terminate()
            server.wait(30)
            subprocess.run([sys.executable, "-m", "primus.cli", "etcd", "stop"], env=env,
                           capture_output=True, check=False)
    table = Table(title=f"primus through a server vs direct, embedded default, {args.repeat} "
                        f"runs each (seconds, whole command)")
    for column in ("command", "direct median", "direct min", "server median", "server min",
                   "server/direct", f"target ≤ {TARGET}x"):
        table.add_column(column)
    for name in ("status", "list"):
        direct, through = times[(name, "direct")], times[(name, "server")]
        ratio = statistics.median(through) / statistics.median(direct)
        table.add_row(name, f"{statistics.median(direct):.3f}", f"{min(direct):.3f}",
                      f"{statistics.median(through):.3f}", f"{min(through):.3f}",
                      f"{ratio:.2f}x", "met" if ratio <= TARGET else "MISSED")
    Console().print(table)


if __name__ == "__main__":
    main()
