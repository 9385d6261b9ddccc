"""A role's elastic minimum (min_num) with real executors: the application goes on through the
loss of executors down to the minimum — trainers that failed, executors lost and replaced while
the restart policy allows it — succeeds with what is left, and refuses to be scaled below it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from primus.config.loader import SpecError
from tests.support.apps import assert_nothing_left, write_job
from tests.support.primus import run_primus
from tests.support.service import call, status, wait_for_end
from tests.support.waiting import wait_until

# Each start appends "index attempt"; the trainer exits 0 once the test creates `finish`, or
# at once with code 7 when its index is in FAILING.
TRAINER = ('echo "$PRIMUS_INDEX $PRIMUS_ATTEMPT" >> {out}/starts;'
           ' case " $FAILING " in *" $PRIMUS_INDEX "*) exit 7;; esac;'
           ' while [ ! -e {out}/finish ]; do sleep 0.1; done')


def submit(env: dict[str, str], tmp_path: Path, role: str, policy: str = "{}",
           failing: str = "") -> tuple[str, Path]:
    """Submit a job of one role ``worker`` (its other fields in ``role``) whose trainers run
    :data:`TRAINER`; the application's id and the trainers' output directory."""
    out = tmp_path / "out"
    out.mkdir()
    job = write_job(tmp_path / "job.yaml", f"""
name: elastic
policy: {policy}
env: {{FAILING: "{failing}"}}
roles:
  - name: worker
    command: '{TRAINER.format(out=out)}'
{role}""")
    result = run_primus(env, "submit", str(job))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip(), out


def worker(env: dict[str, str], app_id: str, index: int) -> dict:
    return status(env, app_id)["executors"]["worker"][index]


def test_an_application_goes_on_and_succeeds_with_its_minimum_after_a_loss(primus_env, tmp_path):
    app_id, out = submit(primus_env, tmp_path, """
    num: 3
    min_num: 2
    restart_policy: never
""", failing="0")
    try:
        wait_until(lambda: (worker(primus_env, app_id, 0)["plan"] or {}).get("state") ==
                   "FAILED", 60, "worker-0 to fail")
        assert status(primus_env, app_id)["status"]["state"] == "RUNNING", \
            "the application goes on with 2 workers of min_num 2"
    finally:
        (out / "finish").touch()
    ended = wait_for_end(primus_env, app_id)
    assert ended["status"]["state"] == "SUCCEEDED"
    states = [e["plan"]["state"] for e in ended["executors"]["worker"]]
    assert states == ["FAILED", "SUCCEEDED", "SUCCEEDED"]
    assert_nothing_left(app_id)


def test_lost_executors_are_replaced_then_the_role_goes_on_at_its_minimum(primus_env, tmp_path):
    app_id, out = submit(primus_env, tmp_path, policy="{heartbeat_ttl: 3s, stop_grace: 1s}",
                         role="""
    num: 3
    min_num: 2
    restart_policy: on_failure
    max_failures: 2
""")

    def running(attempt: int) -> dict | None:
        """worker-1's executor at ``attempt``, once it runs and its trainer has started (has
        written its line: an executor killed before would take a trainer that never ran)."""
        found = worker(primus_env, app_id, 1)
        live = found["live"]
        starts = out / "starts"
        started = starts.exists() and f"1 {attempt}" in starts.read_text().splitlines()
        return found if live and (live["attempt"], live["state"]) == (attempt, "RUNNING") \
            and started else None

    try:
        first = wait_until(lambda: running(1), 60, "worker-1 attempt 1 to run")
        os.kill(first["plan"]["process"]["pid"], signal.SIGKILL)  # its lease expires: LOST
        second = wait_until(lambda: running(2), 30, "worker-1 to be replaced by attempt 2")
        assert second["plan"]["failures"] == 1
        assert second["plan"]["process"]["pid"] != first["plan"]["process"]["pid"]
        assert status(primus_env, app_id)["status"]["state"] == "RUNNING"

        os.kill(second["plan"]["process"]["pid"], signal.SIGKILL)  # its last failure allowed
        lost = wait_until(lambda: (lambda p: p if p["state"] == "LOST" else None)(
            worker(primus_env, app_id, 1)["plan"]), 30, "worker-1 attempt 2 to be recorded LOST")
        assert (lost["attempt"], lost["restart_at"]) == (2, None), f"not replaced again: {lost}"
        assert status(primus_env, app_id)["status"]["state"] == "RUNNING", \
            "the application goes on with 2 workers of min_num 2"
    finally:
        (out / "finish").touch()
    ended = wait_for_end(primus_env, app_id)
    assert (ended["status"]["state"], ended["status"]["attempt"]) == ("SUCCEEDED", 1)
    plans = [e["plan"] for e in ended["executors"]["worker"]]
    assert [(p["state"], p["attempt"]) for p in plans] == [
        ("SUCCEEDED", 1), ("LOST", 2), ("SUCCEEDED", 1)]
    starts = sorted(tuple(map(int, line.split()))
                    for line in (out / "starts").read_text().splitlines())
    assert starts == [(0, 1), (1, 1), (1, 2), (2, 1)], "one trainer per attempt"
    messages = [e["message"] for e in ended["events"]]
    lost_message = "worker-1 LOST: lease expired without a result: executor or host lost; "
    assert lost_message + "restarting now (failure 1 of max_failures 2)" in messages, messages
    assert lost_message + "not restarted: failed 2 times (max_failures 2)" in messages, messages
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
    found = status(primus_env, result.stdout.strip())
    assert found["status"]["state"] == "FAILED"
    assert "failed: trainer exited with code 7" in found["status"]["diagnosis"]


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
        wait_until(lambda: status(primus_env, app_id)["status"]["state"] == "RUNNING", 30,
                   "the application to run")
        with pytest.raises(SpecError, match="min_num 2 is above num 1"):
            call(primus_env, "scale_role", app_id, "worker", 1, user="alice")
        assert status(primus_env, app_id)["desired"] == {"worker": 3}
    finally:
        call(primus_env, "kill", app_id, "the test is over", 60)
