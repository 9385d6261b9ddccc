"""A role's elastic minimum (min_num) with real executors: the application goes on through the
loss of executors down to the minimum, succeeds with what is left, and refuses to be scaled
below it."""

from __future__ import annotations

from tests.support.apps import assert_nothing_left, status_json, write_job
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


def test_an_application_goes_on_and_succeeds_with_its_minimum_after_a_loss(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: elastic
roles:
  - name: worker
    num: 3
    min_num: 2
    restart_policy: never
    command: '[ "$PRIMUS_INDEX" != 0 ] || exit 7; sleep 3'
""")
    result = run_primus(primus_env, "submit", str(job), "--wait")
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    status = status_json(primus_env, app_id)
    assert status["status"]["state"] == "SUCCEEDED"
    states = [e["plan"]["state"] for e in status["executors"]["worker"]]
    assert states == ["FAILED", "SUCCEEDED", "SUCCEEDED"]
    assert_nothing_left(app_id)


def test_an_application_fails_below_its_minimum(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: shrinking
roles:
  - name: worker
    num: 3
    min_num: 2
    restart_policy: never
    command: '[ "$PRIMUS_INDEX" = 2 ] || exit 7; sleep 600'
""")
    result = run_primus(primus_env, "submit", str(job), "--wait")
    assert result.returncode == 1
    status = status_json(primus_env, result.stdout.strip())
    assert status["status"]["state"] == "FAILED"
    assert "failed: trainer exited with code 7" in status["status"]["diagnosis"]


def test_a_role_is_not_scaled_below_its_minimum(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: floor
roles:
  - name: worker
    num: 3
    min_num: 2
    command: sleep 600
""")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()
    try:
        wait_until(lambda: status_json(primus_env, app_id)["status"]["state"] == "RUNNING", 30,
                   "the application to run")
        result = run_primus(primus_env, "scale", app_id, "worker", "1")
        assert result.returncode != 0
        assert "min_num 2 is above num 1" in result.stderr, result.stderr
        assert status_json(primus_env, app_id)["desired"] == {"worker": 3}
    finally:
        run_primus(primus_env, "kill", app_id)
