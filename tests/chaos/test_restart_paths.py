"""Restart paths under real faults, each followed by the invariants the policy implies.

Every trainer here is ``tests/chaos/trainer.py``: it records each start and holds a lock per
executor index for as long as it lives, so a second trainer of the same index running at the
same time is caught by the kernel, not by timing.
"""

from __future__ import annotations

import os
import signal

import psutil

from tests.support.apps import gone
from tests.support.chaos import TTL, submit
from tests.support.waiting import wait_until


def test_killed_trainer_is_restarted_in_place_by_its_executor(primus_env, tmp_path):
    run = submit(primus_env, tmp_path, "num: 2\n    restart_policy: on_failure")
    run.wait_running(0, 1)
    victim = run.wait_running(1, 1)

    os.kill(victim["live"]["trainer"]["pid"], signal.SIGKILL)

    again = run.wait_running(1, 2)
    assert again["live"]["pid"] == victim["live"]["pid"], "the same executor restarts it"
    assert again["live"]["ports"] == victim["live"]["ports"], "on the same ports when free"
    assert run.status()["cluster"]["version"] == 2
    run.go()
    status = run.assert_invariants("SUCCEEDED", {0: 0, 1: 1})
    assert status["executors"]["worker"][1]["plan"]["attempt"] == 2
    assert ("worker-1 FAILED (exit 137): trainer killed by SIGKILL; restarting now"
            " (failure 1 of max_failures 3)") in run.messages()


def test_killed_executor_is_lost_then_replaced_by_a_new_one(primus_env, tmp_path):
    run = submit(primus_env, tmp_path, "num: 2\n    restart_policy: on_failure")
    run.wait_running(0, 1)
    victim = run.wait_running(1, 1)

    os.kill(victim["plan"]["process"]["pid"], signal.SIGKILL)

    replaced = run.wait_running(1, 2, timeout=TTL + 30)
    assert replaced["live"]["pid"] != victim["live"]["pid"]
    assert gone(victim["live"]["trainer"]["pid"]), "the orphaned trainer was stopped first"
    run.go()
    run.assert_invariants("SUCCEEDED", {0: 0, 1: 1})
    assert any(m.startswith("worker-1 LOST: lease expired without a result") and
               m.endswith("restarting now (failure 1 of max_failures 3)") for m in run.messages())


def test_paused_executor_past_its_ttl_is_replaced_and_its_late_writes_rejected(primus_env,
                                                                              tmp_path):
    run = submit(primus_env, tmp_path, "num: 1\n    restart_policy: on_failure")
    victim = run.wait_running(0, 1)
    executor_pid = victim["plan"]["process"]["pid"]

    os.kill(executor_pid, signal.SIGSTOP)
    try:
        run.wait_running(0, 2, timeout=TTL + 30)
    finally:
        os.kill(executor_pid, signal.SIGCONT) if psutil.pid_exists(executor_pid) else None
    wait_until(lambda: gone(executor_pid), 30, "the paused executor to be gone")
    assert gone(victim["live"]["trainer"]["pid"])
    now = run.executor(0)
    assert now["result"] is None, "the old attempt wrote no result after losing its lease"
    assert (now["live"]["attempt"], now["live"]["state"]) == (2, "RUNNING")
    run.go()
    run.assert_invariants("SUCCEEDED", {0: 1})


def test_permanent_exit_code_fails_the_app_at_once(primus_env, tmp_path):
    run = submit(primus_env, tmp_path, "num: 1\n    restart_policy: on_failure\n"
                 "    permanent_exit_codes: [42]", trainer_args="--code 42")

    status = run.assert_invariants("FAILED", {0: 0})

    assert status["status"]["exit_code"] == 42
    assert "worker-0 FAILED (exit 42): trainer exited with code 42; not restarted: exit code 42"\
           " is permanent" in run.messages()


def test_retryable_exit_code_is_retried_up_to_max_failures(primus_env, tmp_path):
    run = submit(primus_env, tmp_path, "num: 1\n    restart_policy: exit_code\n"
                 "    retryable_exit_codes: [3]\n    max_failures: 3\n    restart_backoff: 0",
                 trainer_args="--code 3")

    status = run.assert_invariants("FAILED", {0: 2})

    assert status["status"]["diagnosis"] == "worker-0 failed: trainer exited with code 3"
    assert [s["attempt"] for s in run.starts(0)] == [1, 2, 3]
    assert any(m.endswith("not restarted: failed 3 times (max_failures 3)")
               for m in run.messages())


def test_failed_attempt_restarts_the_whole_application(primus_env, tmp_path):
    run = submit(primus_env, tmp_path, "num: 2", policy="max_app_attempts: 2",
                 trainer_args="--code 3 --fail-until 2 --app-attempts")
    # Both workers fail in application attempt 1; attempt 2 runs until GO.
    wait_until(lambda: run.status()["status"]["attempt"] == 2, 60, "application attempt 2")
    run.wait_running(0, 2)
    run.wait_running(1, 2)
    run.go()

    status = run.assert_invariants("SUCCEEDED", {0: 0, 1: 0})

    # The first worker to fail ends attempt 1, maybe before the other's trainer started.
    assert {s["app_attempt"] for i in (0, 1) for s in run.starts(i)} == {1, 2}
    assert any(m.startswith("application RESTARTING: attempt 1 failed: worker-")
               for m in run.messages())
    assert status["status"]["attempt"] == 2


def test_deadline_stops_the_application_and_fails_it(primus_env, tmp_path):
    # Long enough for both trainers to start on a machine busy with other test workers.
    run = submit(primus_env, tmp_path, "num: 2", policy="deadline: 8s")
    run.wait_running(0, 1)

    status = run.assert_invariants("FAILED", {0: 0, 1: 0})

    assert status["status"]["exit_code"] == 124
    assert status["status"]["diagnosis"] == "deadline of 8s from submission passed"
