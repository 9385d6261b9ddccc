"""Hung trainers, for real on this host: a slow trainer that prints or reports progress is left
alone; a silent one is reported with every rank's stacks, which the CLI (direct and through a
TLS server), the API and the UI give back; ``on_hang: restart`` stops it as HUNG and its
restart policy starts it again. The same over two SSH hosts with PyTorch DDP is in
test_ddp.py."""

from __future__ import annotations

import socket
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from primus.api.client import ApiError
from primus.store.pki import EtcdPki, ensure_pki
from tests.support.apps import status_json, write_job
from tests.support.primus import run_primus
from tests.support.server import RunningServer
from tests.support.service import wait_for_end
from tests.support.tokens import TOKENS, client_of, start_token_server, through_server

PYTHON = sys.executable  # has primus installed: the trainers import primus.progress


def submitted(env: dict[str, str], job: Path, *args: str) -> str:
    result = run_primus(env, "submit", str(job), *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def events(env: dict[str, str], app_id: str, kind: str) -> list[str]:
    return [e["message"] for e in status_json(env, app_id)["events"] if e["kind"] == kind]


def test_a_slow_trainer_that_prints_or_reports_progress_is_not_hung(primus_env, tmp_path):
    # 10 s of work, never 5 s without a line or a progress report
    job = write_job(tmp_path / "slow.yaml", f"""
name: slow
roles:
  - name: worker
    num: 2
    hang_timeout: 5s
    on_hang: fail
    command:
      - {PYTHON}
      - -c
      - |
        import os, time
        import primus.progress
        for step in range(10):
            time.sleep(1)
            if os.environ["PRIMUS_INDEX"] == "0":
                print("step", step, flush=True)
            else:
                primus.progress.report()
policy:
  heartbeat_ttl: 3s
""")
    app_id = submitted(primus_env, job, "--wait")
    status = status_json(primus_env, app_id)
    assert status["status"]["state"] == "SUCCEEDED", status["status"]["diagnosis"]
    assert events(primus_env, app_id, "hang") == []


@pytest.fixture
def pki(tmp_path: Path) -> EtcdPki:
    return ensure_pki(tmp_path / "pki")


@pytest.fixture
def server(primus_env: dict[str, str], tmp_path: Path, pki: EtcdPki
           ) -> Iterator[RunningServer]:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"{socket.gethostname()} ansible_connection=local primus_slots=3\n")
    running = start_token_server({**primus_env, "PRIMUS_INVENTORY": str(inventory)}, tmp_path,
                                 pki)
    yield running
    running.stop()


def test_a_reported_hang_leaves_the_run_alone_and_its_stacks_are_there_for_cli_api_and_ui(
        primus_env, server, pki, tmp_path):
    job = write_job(tmp_path / "stall.yaml", f"""
name: stall
roles:
  - name: worker
    num: 2
    hang_timeout: 3s
    command:
      - {PYTHON}
      - -c
      - |
        import os, time
        def stalled_in_rank_1():
            time.sleep(10)
        def waiting_for_the_others():
            time.sleep(10)
        if os.environ["PRIMUS_INDEX"] == "1":
            stalled_in_rank_1()
        else:
            waiting_for_the_others()
        print("went on", flush=True)
policy:
  heartbeat_ttl: 3s
""")
    alice = through_server(primus_env, server, pki, tmp_path)
    app_id = submitted(alice, job, "--wait")
    assert status_json(primus_env, app_id)["status"]["state"] == "SUCCEEDED"
    [said] = events(primus_env, app_id, "hang")
    assert "in `stalled_in_rank_1 (<string>:3)`" in said and \
        "in `waiting_for_the_others (<string>:5)`" in said and "reported" in said, said

    for env in (primus_env, alice):  # direct, and through the server's GetStacks
        shown = run_primus(env, "logs", app_id, "--stacks")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith("hang 1 at ")
        assert "=== worker-1 on" in shown.stdout and "=== worker-0 on" in shown.stdout
        assert "    stalled_in_rank_1 (<string>:3)\n    <module> (<string>:7)" in shown.stdout

    with client_of(server, pki, tmp_path, "bob") as api, pytest.raises(ApiError) as refused:
        api.stacks(app_id)
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert f"bob may not read the stacks of application {app_id}" in refused.value.details
    with client_of(server, pki, tmp_path, "root") as api:  # an admin
        found = api.stacks(app_id)
    assert found.hang is not None and found.hang.handled and found.hangs == [1]
    assert [(s.role, s.index, s.python) for s in found.stacks] == [("worker", 0, True),
                                                                   ("worker", 1, True)]

    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    cookie = {"Cookie": f"primus_token={TOKENS['alice']}"}
    page = urllib.request.urlopen(urllib.request.Request(
        f"{server.ui_url}apps/{app_id}/stacks", headers=cookie), context=context).read().decode()
    assert "stalled_in_rank_1 (&lt;string&gt;:3)" in page, "text from a trainer is escaped"
    download = urllib.request.urlopen(urllib.request.Request(
        f"{server.ui_url}apps/{app_id}/stacks/1/worker-1", headers=cookie), context=context)
    assert "attachment" in download.headers["Content-Disposition"]
    assert "stalled_in_rank_1 (<string>:3)" in download.read().decode()
    with pytest.raises(urllib.error.HTTPError) as forbidden:  # bob: not his application's
        urllib.request.urlopen(urllib.request.Request(
            f"{server.ui_url}apps/{app_id}/stacks",
            headers={"Cookie": f"primus_token={TOKENS['bob']}"}), context=context)
    assert forbidden.value.code == 403


def test_on_hang_restart_stops_the_hung_trainer_as_hung_and_its_policy_restarts_it(
        primus_env, tmp_path):
    job = write_job(tmp_path / "restart.yaml", f"""
name: restart-hung
roles:
  - name: worker
    num: 1
    hang_timeout: 3s
    on_hang: restart
    restart_policy: on_failure
    command:
      - {PYTHON}
      - -c
      - |
        import os, time
        def stuck_in_the_first_attempt():
            time.sleep(600)
        if os.environ["PRIMUS_ATTEMPT"] == "1":
            stuck_in_the_first_attempt()
        print("attempt", os.environ["PRIMUS_ATTEMPT"], "done", flush=True)
policy:
  heartbeat_ttl: 3s
  stop_grace: 1s
""")
    app_id = submitted(primus_env, job)
    final = wait_for_end(primus_env, app_id, timeout=90)
    assert final["status"]["state"] == "SUCCEEDED", final["status"]["diagnosis"]
    [plan] = [e["plan"] for e in final["executors"]["worker"]]
    assert plan["attempt"] == 2
    [said] = events(primus_env, app_id, "hang")
    assert "`stuck_in_the_first_attempt (<string>:3)`" in said and "stop as HUNG" in said
    assert any("HUNG: " in message for message in events(primus_env, app_id, "executor-state")
               ), events(primus_env, app_id, "executor-state")
