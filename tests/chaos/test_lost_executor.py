"""A lost executor (kill -9): detected through its lease, its orphaned trainer stopped too."""

from __future__ import annotations

import os
import signal

from tests.support.apps import assert_nothing_left, gone, status_json, write_job
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


def test_killed_executor_is_lost_and_its_orphaned_trainer_is_stopped(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: orphan
policy: {heartbeat_ttl: 3s, stop_grace: 2s}
roles:
  - name: worker
    num: 2
    command: sleep 600
""")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()
    wait_until(lambda: all(e["plan"] and e["plan"]["state"] == "RUNNING"
                           for e in status_json(primus_env, app_id)["executors"]["worker"]),
               60, "both workers to run")
    victim = status_json(primus_env, app_id)["executors"]["worker"][1]
    trainer_pid = victim["live"]["trainer"]["pid"]
    # Its trainer dies with it (PR_SET_PDEATHSIG), at once or a moment later: whether it still
    # exists right after the kill is a race, not a property.
    os.kill(victim["plan"]["process"]["pid"], signal.SIGKILL)
    wait_until(lambda: status_json(primus_env, app_id)["status"]["state"] == "FAILED", 30,
               "the lost executor to fail the application")
    status = status_json(primus_env, app_id)
    assert "worker-1" in status["status"]["diagnosis"]
    assert "lease expired" in status["status"]["diagnosis"]
    assert status["executors"]["worker"][1]["plan"]["state"] == "LOST"
    wait_until(lambda: status_json(primus_env, app_id)["am"] is None, 30, "the AM to finish")
    assert gone(trainer_pid), "the orphaned trainer must be stopped"
    assert_nothing_left(app_id)
