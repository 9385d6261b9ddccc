"""Suspend and resume with real processes and a data stream: suspended in the middle of the
stream nothing runs and no host is held; the AM candidate started by a kill-free `suspend`
leaves nothing behind; resumed, the stream goes on from its checkpoints: every record
delivered, each task done once. Refusals leave etcd as it was."""

from __future__ import annotations

import collections
import os
import signal
import subprocess

from primus.store.embedded import find_etcd_binary
from tests.support.apps import assert_nothing_left, status_json
from tests.support.data import make_text_files, received_lines, submit_data_job, wait_for_end
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


def keys_under(env: dict[str, str], prefix: str) -> list[str]:
    return subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", env["PRIMUS_ETCD"], "get", "--prefix",
         prefix, "--keys-only"], capture_output=True, text=True, check=True,
        env={**os.environ, "ETCDCTL_API": "3"}).stdout.split()


def test_suspended_mid_stream_nothing_runs_and_resumed_every_record_arrives_once_done(
        primus_env, tmp_path):
    source = make_text_files(tmp_path / "data", files=6, lines=1500)
    app_id, records = submit_data_job(
        primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki
    checkpoint_records: 50""", trainer_args="--delay 0.15 --read-size 4096")
    wait_until(lambda: status_json(primus_env, app_id)["data"].get("train", {}).get("done", 0)
               >= 2, 60, "some tasks done")

    result = run_primus(primus_env, "suspend", app_id, "--reason", "host maintenance")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{app_id} SUSPENDED"
    status = status_json(primus_env, app_id)
    assert status["status"]["state"] == "SUSPENDED" and status["am"] is None
    # Nothing runs while suspended (the AM gives up leadership just before it exits: its
    # process, and the host agent, may still be ending).
    assert_nothing_left(app_id)
    assert keys_under(primus_env, f"{primus_env['PRIMUS_PREFIX']}/scheduler/apps/{app_id}/") \
        == [], "no host is held while suspended"
    assert any("suspended by" in e["message"] and "host maintenance" in e["message"]
               for e in status["events"])
    stats = status["data"]["train"]
    assert 0 < stats["done"] < stats["tasks"], "suspended in the middle of the stream"
    again = run_primus(primus_env, "suspend", app_id)
    assert again.returncode != 0 and "is SUSPENDED; only a running" in again.stderr

    assert run_primus(primus_env, "resume", app_id).stdout.strip() == f"{app_id} resumed"
    status = wait_for_end(primus_env, app_id, timeout=180)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    got = collections.Counter(received_lines(records))
    assert [line for line in source if got[line] == 0] == [], "a record never arrived"
    stats = status["data"]["train"]
    assert (stats["done"], stats["failed"]) == (stats["tasks"], 0), "each task done once"
    resumed = run_primus(primus_env, "resume", app_id)
    assert resumed.returncode != 0 and "is SUCCEEDED, not SUSPENDED" in resumed.stderr
    assert_nothing_left(app_id)


def test_a_suspended_application_is_killed_without_resuming_it(primus_env, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: parked\npolicy: {stop_grace: 1s}\nroles:\n  - name: worker\n"
                   "    command: sleep 600\n")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()
    wait_until(lambda: status_json(primus_env, app_id)["status"]["state"] == "RUNNING", 30,
               "the application to run")
    assert run_primus(primus_env, "suspend", app_id).returncode == 0
    # An AM started for it anyway (recover, a restarted embedded etcd) finds nothing to do.
    assert run_primus(primus_env, "recover", app_id).returncode == 0
    wait_until(lambda: any("took over" in e["message"]
                           for e in status_json(primus_env, app_id)["events"]), 30,
               "the recovering AM to lead")
    wait_until(lambda: status_json(primus_env, app_id)["am"] is None, 30,
               "the recovering AM to leave")
    assert status_json(primus_env, app_id)["status"]["state"] == "SUSPENDED"
    assert_nothing_left(app_id)
    result = run_primus(primus_env, "kill", app_id)
    assert result.returncode == 0, result.stderr
    status = status_json(primus_env, app_id)
    assert status["status"]["state"] == "KILLED"
    assert status["executors"]["worker"][0]["plan"]["state"] == "KILLED"
    assert_nothing_left(app_id)


def test_suspend_carries_out_after_its_am_was_killed(primus_env, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: orphaned\npolicy: {stop_grace: 1s, heartbeat_ttl: 3s}\nroles:\n"
                   "  - name: worker\n    num: 2\n    command: sleep 600\n")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()
    wait_until(lambda: status_json(primus_env, app_id)["status"]["state"] == "RUNNING", 30,
               "the application to run")
    os.kill(status_json(primus_env, app_id)["am"]["pid"], signal.SIGKILL)

    result = run_primus(primus_env, "suspend", app_id)

    assert result.returncode == 0, result.stderr
    assert status_json(primus_env, app_id)["status"]["state"] == "SUSPENDED"
    # The AM exits just after giving up leadership, and an executor just after recording its
    # end, so both are awaited. (Seen once in a full run: another AM candidate led the
    # SUSPENDED application for a moment after the command returned; it has nothing to do
    # there and exits.)
    wait_until(lambda: status_json(primus_env, app_id)["am"] is None, 15,
               "no AM leading the suspended application")
    assert_nothing_left(app_id)
    assert run_primus(primus_env, "kill", app_id).returncode == 0
    assert_nothing_left(app_id)
