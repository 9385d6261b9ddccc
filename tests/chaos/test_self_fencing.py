"""Self-fencing: an executor that cannot renew its lease stops its trainer and exits."""

from __future__ import annotations

import os
import signal
import time

import psutil

from primus.store.embedded import start_etcd, stop_pid
from tests.support.apps import gone, processes_of, status_json, write_job
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

TTL = 3


def test_executors_cut_off_from_etcd_stop_their_trainers_within_the_ttl(primus_env, tmp_path):
    _, etcd = start_etcd(tmp_path / "etcd" / "data", tmp_path / "etcd" / "etcd.log")
    env = {**primus_env, "PRIMUS_ETCD": etcd.client_url}
    app_id = ""
    try:
        job = write_job(tmp_path / "job.yaml", f"""
name: fenced
policy: {{heartbeat_ttl: {TTL}s, stop_grace: 1s}}
roles:
  - name: worker
    num: 2
    command: sleep 600
""")
        app_id = run_primus(env, "submit", str(job)).stdout.strip()
        wait_until(lambda: all(e["live"] and e["live"]["state"] == "RUNNING"
                               for e in status_json(env, app_id)["executors"]["worker"]),
                   60, "both trainers to run")
        workers = status_json(env, app_id)["executors"]["worker"]
        trainers = [e["live"]["trainer"]["pid"] for e in workers]
        executors = [e["plan"]["process"]["pid"] for e in workers]
        os.kill(etcd.pid, signal.SIGSTOP)  # etcd stops answering: nobody can renew a lease
        cut_off = time.monotonic()
        try:
            wait_until(lambda: all(gone(pid) for pid in trainers + executors), TTL + 5,
                       "every executor to fence itself: trainer stopped, executor exited")
            assert time.monotonic() - cut_off <= TTL + 5
        finally:
            os.kill(etcd.pid, signal.SIGCONT)
        assert run_primus(env, "kill", app_id).returncode == 0
        wait_until(lambda: not processes_of(app_id), 30, "every process of the app to end")
        assert all(not psutil.pid_exists(p) or gone(p) for p in trainers)
    finally:
        for left in processes_of(app_id) if app_id else []:
            left.kill()  # on failure: an AM would wait for the stopped etcd for ever
        stop_pid(etcd.pid)
