"""Start policies with real executors and trainers: the times in the executor records show in
which order roles started (ordered), a role short of its share when the timeout passes fails
the application or lets the next role go on, and dynamic trainers start with the cluster as
far as it has registered."""

from __future__ import annotations

from tests.support.apps import assert_nothing_left, status_json, write_job
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


def _executors(env: dict[str, str], app_id: str, role: str) -> list[dict]:
    return status_json(env, app_id)["executors"][role]


def _all_running(env: dict[str, str], app_id: str, role: str) -> bool:
    return all(e["live"] and e["live"]["state"] == "RUNNING" for e in _executors(env, app_id, role))


def test_ordered_launches_no_worker_before_every_ps_trainer_runs(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: ordered
start: {policy: ordered, schedule_percent: 100}
roles:
  - name: ps
    num: 2
    command: sleep 600
  - name: worker
    num: 2
    command: sleep 600
""")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()
    try:
        wait_until(lambda: _all_running(primus_env, app_id, "worker"), 60,
                   "the workers to run")
        ps = _executors(primus_env, app_id, "ps")
        workers = _executors(primus_env, app_id, "worker")
        share_reached = max(e["live"]["trainer_start_time"] for e in ps)
        assert all(w["plan"]["launch_time"] >= share_reached for w in workers), (
            "a worker was launched before every ps trainer ran")
        assert status_json(primus_env, app_id)["status"]["state"] == "RUNNING"
    finally:
        run_primus(primus_env, "kill", app_id)
    assert_nothing_left(app_id)


ORDERED_PS_NEVER_UP = """
name: stuck
policy: {{stop_grace: 1s}}
start: {{policy: ordered, timeout: 3s, on_timeout: {on_timeout}}}
roles:
  - name: ps
    command: sleep 600
    hosts: [broken]        # a group: its host's Primus home cannot be made, launches fail
    restart_policy: on_failure
    max_failures: 50
    restart_backoff: 60s
  - name: worker
    command: sleep 600
    hosts: [good]
"""


def submit_stuck(env: dict[str, str], tmp_path, on_timeout: str, *args: str):
    """An ordered job whose ps never runs (its host's Primus home is unwritable), on two
    hosts of this machine."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[good]\ngood ansible_connection=local primus_home={tmp_path}/good\n"
                         "[broken]\nbroken ansible_connection=local "
                         "primus_home=/proc/no-primus-here\n")
    job = write_job(tmp_path / "job.yaml", ORDERED_PS_NEVER_UP.format(on_timeout=on_timeout))
    return run_primus(env, "submit", str(job), "-i", str(inventory), *args)


def test_ordered_fails_when_the_timeout_passes_short_of_the_share(primus_env, tmp_path):
    result = submit_stuck(primus_env, tmp_path, "fail", "--wait")
    assert result.returncode == 1
    app_id = result.stdout.strip()
    status = status_json(primus_env, app_id)
    assert status["status"]["state"] == "FAILED"
    assert status["status"]["diagnosis"] == (
        "ordered start: role ps has 0 of 1 executors running 3s after it was first launched, "
        "short of start.schedule_percent 100% (1); role worker not started")
    assert status["executors"]["worker"][0]["plan"] is None, "the worker was never launched"
    assert_nothing_left(app_id)


def test_ordered_goes_on_with_what_runs_when_the_timeout_passes(primus_env, tmp_path):
    app_id = submit_stuck(primus_env, tmp_path, "continue").stdout.strip()
    try:
        wait_until(lambda: _all_running(primus_env, app_id, "worker"), 60,
                   "the worker to run after the timeout")
        started = status_json(primus_env, app_id)["status"]["start_time"]
        [worker] = _executors(primus_env, app_id, "worker")
        assert worker["plan"]["launch_time"] >= started + 3
    finally:
        run_primus(primus_env, "kill", app_id)
    assert_nothing_left(app_id)


def test_dynamic_trainers_start_with_the_cluster_registered_so_far(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: dynamic
start: {policy: dynamic}
roles:
  - name: ps
    command: 'echo "ps sees $WORLD_SIZE at version $PRIMUS_CLUSTER_VERSION"'
  - name: worker
    num: 3
    command: 'echo "worker sees $WORLD_SIZE at version $PRIMUS_CLUSTER_VERSION"'
""")
    result = run_primus(primus_env, "submit", str(job), "--wait")
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    logs = run_primus(primus_env, "logs", app_id).stdout
    seen = [int(line.split(" sees ")[1].split()[0]) for line in logs.splitlines()
            if " sees " in line]
    assert len(seen) == 4 and all(1 <= size <= 4 for size in seen), logs
    events = [e["message"] for e in status_json(primus_env, app_id)["events"]]
    assert any("cluster spec version 1 written" in m or "every executor registered" in m
               for m in events), events
