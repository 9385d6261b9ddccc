"""The server's Prometheus metrics, scraped by a real Prometheus (Debian's) while the examples
run through the server, and read back with PromQL; the format checked by ``promtool``; and the
scrape refused to whoever is neither a scraper nor an admin."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest

from primus.api.client import ApiError
from primus.store.pki import EtcdPki, ensure_pki
from tests.support.primus import REPO, run_primus
from tests.support.prometheus import (
    RunningPrometheus,
    fetch_metrics,
    scrape_job_of_the_playbook,
    start_prometheus,
)
from tests.support.server import RunningServer
from tests.support.tokens import TOKENS, client_of, start_token_server, through_server
from tests.support.waiting import wait_until

EXAMPLES = REPO / "examples"
DATA_RECORDS = sum(len(path.read_text().splitlines())
                   for path in (EXAMPLES / "data-injection" / "data").glob("day-*.txt")) * 2
"""The data example's records: every line of its files, in each of its two epochs."""


@pytest.fixture
def pki(tmp_path: Path) -> EtcdPki:
    return ensure_pki(tmp_path / "pki")


@pytest.fixture
def server(primus_env: dict[str, str], tmp_path: Path, pki: EtcdPki
           ) -> Iterator[RunningServer]:
    """A TLS token server on this host (four executors at a time), serving its metrics on a
    listener of their own too."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"{socket.gethostname()} ansible_connection=local primus_slots=4\n")
    running = start_token_server({**primus_env, "PRIMUS_INVENTORY": str(inventory)}, tmp_path,
                                 pki, "--metrics-listen", "127.0.0.1:0")
    yield running
    running.stop()


@pytest.fixture
def prometheus(server: RunningServer, pki: EtcdPki, tmp_path: Path
               ) -> Iterator[RunningPrometheus]:
    """Prometheus scraping :func:`server` with the job the deployment playbook writes."""
    token = tmp_path / "scraper.token"
    token.write_text(TOKENS["prometheus"])
    job = scrape_job_of_the_playbook(tmp_path, urlsplit(server.metrics_url).netloc,
                                     pki.ca_cert, token)
    running = start_prometheus(tmp_path, job)
    yield running
    running.stop()


def test_prometheus_scrapes_the_server_while_the_examples_run_and_the_figures_add_up(
        primus_env, server, prometheus, pki, tmp_path):
    alice = through_server(primus_env, server, pki, tmp_path)
    for example, code in (("hello", 0), ("failing", 1), ("data-injection", 0)):
        result = run_primus(alice, "submit", str(EXAMPLES / example / "job.yaml"), "--wait")
        assert result.returncode == code, f"{example}: {result.stdout}{result.stderr}"
    scraped_after = prometheus.scrapes()
    wait_until(lambda: prometheus.scrapes() >= scraped_after + 2, 30,
               "two more scrapes after the last example ended")

    assert prometheus.value('sum(primus_applications{state="SUCCEEDED"})') == 2
    assert prometheus.value('sum(primus_applications{state="FAILED"})') == 1
    assert prometheus.value('sum(primus_application_ends_total{state="FAILED"})') == 1
    assert prometheus.value(
        'sum(primus_executor_failures_total{role="worker",exit_class="EXIT_CODE"})') == 1
    assert prometheus.value(
        'max(max_over_time(primus_data_records_total{stream="train"}[10m]))') == DATA_RECORDS
    assert prometheus.value(
        'max(max_over_time(primus_data_tasks{stream="train",state="failed"}[10m]))') == 0
    assert prometheus.value(
        'sum(primus_api_requests_total{method="SubmitApplication",code="OK"})') == 3
    assert prometheus.value("sum(primus_admission_wait_seconds_count)") >= 3
    assert prometheus.value('primus_host_free_cpus') is None, "the inventory declares none"
    assert prometheus.value(
        f'primus_host_reserved_cpus{{host="{socket.gethostname()}"}}') == 0
    assert prometheus.value("primus_history_archive_lag_seconds") is not None
    assert prometheus.value("sum(primus_executors)") in (None, 0.0), "nothing runs now"

    # Every query of the Grafana dashboard is valid PromQL over metrics the server exports.
    _, exported = fetch_metrics(server.metrics_url, pki.ca_cert, TOKENS["prometheus"])
    families = set(re.findall(r"^# TYPE (\w+)", exported, re.MULTILINE))
    dashboard = json.loads((REPO / "deploy" / "grafana" / "primus.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"]
               for target in panel.get("targets", ())]
    assert len(queries) >= 20
    for query in queries:
        for name in re.findall(r"\b(primus_\w+)", query):
            assert {name, re.sub(r"_(bucket|count|sum)$", "", name)} & families, (name, query)
        prometheus.query(query.replace("$__rate_interval", "1m").replace("$queue", ".*"))


def test_promtool_finds_nothing_to_say_about_the_metrics(server, pki, tmp_path):
    with client_of(server, pki, tmp_path, "alice") as api:
        assert list(api.list_apps()) == []  # an API call: its histogram has samples
    def scraped() -> tuple[int, str] | None:
        # With etcd's space too: the server reads it apart from the scrapes, first at start.
        status, text = fetch_metrics(server.ui_url + "metrics", pki.ca_cert,
                                     TOKENS["prometheus"])
        assert status == 200, text
        return (status, text) if "primus_etcd_db_size_bytes{" in text else None

    _, text = wait_until(scraped, 15, "the etcd space series")
    assert 'primus_etcd_alarm{alarm="NOSPACE",member="primus"} 0.0' in text
    promtool = shutil.which("promtool")
    assert promtool is not None, "Debian's prometheus is not installed (scripts/bootstrap --test)"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                             text=True, timeout=30)
    assert checked.returncode == 0 and not checked.stdout + checked.stderr, \
        checked.stdout + checked.stderr
    assert "primus_api_request_duration_seconds_bucket" in text


@pytest.mark.parametrize("listener", ["ui", "metrics"])
def test_a_scrape_without_a_scrapers_or_an_admins_token_is_refused(server, pki, listener):
    url = server.ui_url + "metrics" if listener == "ui" else server.metrics_url
    for token in (None, TOKENS["alice"], "not-a-token"):
        status, text = fetch_metrics(url, pki.ca_cert, token)
        assert status == 401 and "primus_" not in text, (token and token[:5], status)
    status, text = fetch_metrics(url, pki.ca_cert, TOKENS["root"])
    assert status == 200 and "primus_applications" in text


def test_a_scrapers_token_is_no_identity_on_the_api(server, pki, tmp_path):
    with client_of(server, pki, tmp_path, "prometheus") as api, \
            pytest.raises(ApiError) as refused:
        list(api.list_apps())
    assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED
