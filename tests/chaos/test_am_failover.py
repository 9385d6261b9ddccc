"""AM failover: a standby or recovered AM adopts running executors without restarting them."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from tests.support.apps import assert_nothing_left, status_json, write_job
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

JOB = """
name: guarded
am: {{replicas: {replicas}}}
policy: {{heartbeat_ttl: 3s, stop_grace: 2s}}
roles:
  - name: worker
    num: 2
    command: sleep 600
"""


def running(env, job) -> str:
    app_id = run_primus(env, "submit", str(job)).stdout.strip()
    wait_until(lambda: status_json(env, app_id)["status"]["state"] == "RUNNING", 60,
               "the application to run")
    return app_id


def executor_pids(env, app_id: str) -> dict[int, tuple[int, int]]:
    """Executor index → (executor pid, attempt), from the plans."""
    return {e["index"]: (e["plan"]["process"]["pid"], e["plan"]["attempt"])
            for e in status_json(env, app_id)["executors"]["worker"]}


def new_leader(env, app_id: str, old_pid: int) -> dict:
    return wait_until(lambda: (lambda am: am if am and am["pid"] != old_pid else None)(
        status_json(env, app_id)["am"]), 30, "another AM to lead")


def test_standby_am_adopts_every_executor_when_the_leader_is_killed(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", JOB.format(replicas=2))
    app_id = running(primus_env, job)
    before = executor_pids(primus_env, app_id)
    leader = status_json(primus_env, app_id)["am"]
    os.kill(leader["pid"], signal.SIGKILL)
    new_leader(primus_env, app_id, leader["pid"])
    status = status_json(primus_env, app_id)
    assert status["status"]["state"] == "RUNNING"
    assert executor_pids(primus_env, app_id) == before, "adoption restarts nothing"
    assert all(psutil.pid_exists(pid) for pid, _ in before.values())
    assert run_primus(primus_env, "kill", app_id).returncode == 0
    assert status_json(primus_env, app_id)["status"]["state"] == "KILLED"
    assert_nothing_left(app_id)


def test_recover_starts_an_am_that_adopts_a_leaderless_application(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", JOB.format(replicas=1))
    app_id = running(primus_env, job)
    before = executor_pids(primus_env, app_id)
    leader = status_json(primus_env, app_id)["am"]
    os.kill(leader["pid"], signal.SIGKILL)
    wait_until(lambda: status_json(primus_env, app_id)["am"] is None, 15,
               "the dead AM's leadership to expire")
    result = run_primus(primus_env, "recover", app_id)
    assert result.returncode == 0, result.stderr
    new_leader(primus_env, app_id, leader["pid"])
    assert executor_pids(primus_env, app_id) == before
    assert run_primus(primus_env, "kill", app_id).returncode == 0
    assert_nothing_left(app_id)


def test_on_the_embedded_default_its_server_replaces_an_am_killed_with_etcd_up(primus_env,
                                                                               tmp_path):
    # The embedded default: no etcd configured; `primus submit` starts the embedded etcd and
    # the server beside it, which keeps the application led.
    env = {k: v for k, v in primus_env.items() if k != "PRIMUS_ETCD"}
    try:
        app_id = running(env, write_job(tmp_path / "job.yaml", JOB.format(replicas=1)))
        before = executor_pids(env, app_id)
        leader = status_json(env, app_id)["am"]

        os.kill(leader["pid"], signal.SIGKILL)

        new_leader(env, app_id, leader["pid"])  # its key expires in 3 s, the server acts then
        # Its election is won before it records that it leads (a loaded machine shows the
        # gap): the record is awaited, not read once.
        wait_until(lambda: any("(took over; started by server " in e["message"]
                               for e in status_json(env, app_id)["events"]), 30,
                   "the new AM to record that it took over, started by the server")
        assert executor_pids(env, app_id) == before, "adoption restarts nothing"
        assert run_primus(env, "kill", app_id).returncode == 0
        assert_nothing_left(app_id)
    finally:
        assert run_primus(env, "etcd", "stop").returncode == 0


def test_paused_leader_that_wakes_after_losing_leadership_writes_nothing_and_stands_by(
        primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", JOB.format(replicas=2))
    app_id = running(primus_env, job)
    # Everything the leader has to record is recorded before it is paused: an executor state
    # it had yet to record would be recorded by its successor, after the take-over.
    wait_until(lambda: {f"worker-{i} RUNNING" for i in (0, 1)} <= {
        e["message"] for e in status_json(primus_env, app_id)["events"]}, 30,
        "both workers' RUNNING to be recorded")
    leader = status_json(primus_env, app_id)["am"]
    paused = psutil.Process(leader["pid"])
    paused.suspend()
    try:
        successor = new_leader(primus_env, app_id, leader["pid"])
        events = len(wait_until(lambda: (lambda status: status["events"] if any(
            e["message"] == f"AM {successor['am_id']} leads (took over)"
            for e in status["events"]) else None)(status_json(primus_env, app_id)), 30,
            "the successor to record that it took over"))
    finally:
        paused.resume()
    log = Path(leader["log_file"])
    wait_until(lambda: "standing as a candidate again" in log.read_text(), 30,
               "the woken AM to find its leadership lost and stand again")
    assert "leadership lost" in log.read_text()
    after = status_json(primus_env, app_id)
    assert after["am"]["pid"] == successor["pid"]
    assert after["status"]["state"] == "RUNNING"
    assert len(after["events"]) == events, f"the deposed AM wrote {after['events'][events:]}"
    assert paused.is_running(), "it waits as a standby while the application runs"
    assert run_primus(primus_env, "kill", app_id).returncode == 0
    assert_nothing_left(app_id)  # the standby exits too once the application has ended
