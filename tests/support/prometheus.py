"""A real Prometheus (Debian's ``prometheus``) scraping a ``primus server``, and its queries."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.deploy import ANSIBLE_ENV, PLAYBOOK, VENV_BIN
from tests.support.waiting import wait_until


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RunningPrometheus:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def query(self, expression: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query's vector: each series' labels (``__name__`` left out) and value."""
        with urllib.request.urlopen(f"{self.url}/api/v1/query?" + urllib.parse.urlencode(
                {"query": expression}), timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return {tuple(sorted((k, v) for k, v in item["metric"].items() if k != "__name__")):
                float(item["value"][1]) for item in body["data"]["result"]}

    def value(self, expression: str) -> float | None:
        """The value of a query that yields one series (``None``: none)."""
        result = self.query(expression)
        assert len(result) <= 1, f"{expression}: {result}"
        return next(iter(result.values()), None)

    def scrapes(self) -> float:
        """How many scrapes of the server succeeded (``up`` summed over time)."""
        return self.value("sum_over_time(up[1h])") or 0.0

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)


def scrape_job_of_the_playbook(tmp_path: Path, metrics_listen: str, ca_file: Path,
                               token_file: Path) -> list[dict]:
    """The scrape job the deployment playbook's ``prometheus_scrape`` role writes for one
    server on this host whose metrics listen on ``metrics_listen``."""
    inventory = tmp_path / "scrape-hosts.ini"
    inventory.write_text("[primus_server]\nsrv ansible_connection=local ansible_host=127.0.0.1 "
                         f"primus_deploy_server_metrics_listen={metrics_listen}\n")
    playbook = tmp_path / "scrape.yml"
    playbook.write_text("- hosts: primus_server\n  gather_facts: false\n"
                        "  roles: [prometheus_scrape]\n")
    job = tmp_path / "primus-scrape.yml"
    ran = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook),
         "-e", f"primus_deploy_prometheus_scrape_file={job}",
         "-e", f"primus_deploy_prometheus_token_file={token_file}",
         "-e", f"primus_deploy_prometheus_ca_file={ca_file}"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, **ANSIBLE_ENV, "ANSIBLE_ROLES_PATH": str(PLAYBOOK.parent / "roles")})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    return yaml.safe_load(job.read_text())


def start_prometheus(tmp_path: Path, scrape_jobs: list[dict]) -> RunningPrometheus:
    """Prometheus running ``scrape_jobs`` every second; returns once its first scrape is
    done."""
    binary = shutil.which("prometheus")
    assert binary is not None, "Debian's prometheus is not installed (scripts/bootstrap --test)"
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": scrape_jobs}))
    promtool = shutil.which("promtool")
    assert promtool is not None
    checked = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                             text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = _free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=out)
    running = RunningPrometheus(process, f"http://127.0.0.1:{port}", log)

    def scraped() -> bool:
        assert process.poll() is None, f"prometheus exited: {log.read_text()[-2000:]}"
        try:
            return running.value("up") == 1
        except OSError:
            return False

    try:
        wait_until(scraped, 30, "Prometheus to scrape the server once")
    except BaseException:
        running.stop()
        raise
    return running


def fetch_metrics(url: str, ca_file: Path, token: str | None) -> tuple[int, str]:
    """``GET url`` over TLS trusting ``ca_file``, with ``token`` as bearer; status and body."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}
                                     if token is not None else {})
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()
