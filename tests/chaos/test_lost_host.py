"""A host cut off from the network, then back: fenced, replaced elsewhere, never duplicated.

The hosts are network namespaces of the SSH test cluster (``tests/support/cluster.py``).
Taking a host's link down cuts it off from etcd, from the AM and from SSH while its processes
keep running. The namespaces share the machine's process table and file system, so the test
sees their processes and the records of the trainers (``tests/chaos/trainer.py``) directly.
"""

from __future__ import annotations

import time
from contextlib import suppress
from dataclasses import dataclass

import psutil

from tests.support.apps import assert_hosts_left_empty, gone, processes_of, status_json, write_job
from tests.support.chaos import REPLACED_WITHIN, TTL, Run, link_down, submit
from tests.support.cluster import TestCluster, TestHost
from tests.support.primus import run_primus
from tests.support.server import start_server
from tests.support.waiting import wait_until


@dataclass
class Victim:
    """Worker-1's first attempt and the host it runs on."""

    host: TestHost
    executor_pid: int
    trainer_pid: int
    executor_log: str


def start_two_workers(ssh_testbed, primus_env, tmp_path, **options) -> tuple[Run, Victim]:
    """Both workers running on the test hosts; worker-1's first attempt is the victim."""
    cluster: TestCluster = ssh_testbed.cluster
    run = submit(ssh_testbed.env(primus_env), tmp_path, "num: 2\n    restart_policy: on_failure",
                 submit_args=("-i", str(cluster.inventory)), **options)
    run.wait_running(0, 1)
    running = run.wait_running(1, 1)
    host = next(h for h in cluster.hosts if h.name == running["plan"]["host"])
    victim = Victim(host, running["plan"]["process"]["pid"], running["live"]["trainer"]["pid"],
                    running["plan"]["executor_log"])
    assert {victim.executor_pid, victim.trainer_pid} <= set(host.pids()), \
        f"worker-1 attempt 1 runs on {host.name}"
    return run, victim


def runs_attempt(process: psutil.Process, index: int, attempt: int) -> bool:
    """``process`` is the executor or the trainer of worker-``index``'s attempt ``attempt``."""
    try:
        argv, env = process.cmdline(), process.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    if "primus.executor" in argv:
        return (argv[argv.index("--index") + 1], argv[argv.index("--attempt") + 1]) == \
            (str(index), str(attempt))
    return (env.get("PRIMUS_INDEX"), env.get("PRIMUS_ATTEMPT")) == (str(index), str(attempt))


def lost_at(run: Run, name: str) -> float:
    """When the AM recorded ``name`` LOST: just after etcd expired its lease."""
    return next(e["time"] for e in run.status()["events"]
                if e["message"].startswith(f"{name} LOST"))


def test_cut_off_host_fences_itself_is_replaced_elsewhere_and_stays_dead_when_back(
        ssh_testbed, primus_env, tmp_path):
    cluster = ssh_testbed.cluster
    run, victim = start_two_workers(ssh_testbed, primus_env, tmp_path)
    host = victim.host

    with link_down(host):
        wait_until(lambda: gone(victim.trainer_pid), TTL + 2,
                   f"the executor cut off on {host.name} to kill its trainer (self-fencing)")
        fenced_at = time.time()
        wait_until(lambda: gone(victim.executor_pid), 5,
                   f"the fenced executor on {host.name} to exit")
        replaced = run.wait_running(1, 2, timeout=REPLACED_WITHIN)

        assert replaced["plan"]["host"] != host.name, "the replacement avoids the lost host"
        assert host.app_pids() == [], \
            f"processes left on the cut-off {host.name}: {host.describe(host.app_pids())}"
        assert not [p for p in processes_of(run.app_id) if runs_attempt(p, 1, 1)], \
            "no process of worker-1 attempt 1 remains anywhere"
        assert fenced_at < lost_at(run, "worker-1"), \
            "the trainer was stopped before the lease expired"
        with open(victim.executor_log) as log:
            assert "trainer stopped (self-fenced)" in log.read()
    cluster.wait_for_ssh(host)  # reachable again: anything of attempt 1 left there could act now

    assert not [p for p in processes_of(run.app_id) if p.pid in host.pids()], \
        f"a process of the application runs on {host.name} again"
    now = run.executor(1)
    assert now["result"] is None, "attempt 1 recorded no result, during the cut or after it"
    assert (now["live"]["attempt"], now["live"]["state"]) == (2, "RUNNING")
    assert [s["attempt"] for s in run.starts(1)] == [1, 2]
    run.go()
    status = run.assert_invariants("SUCCEEDED", {0: 0, 1: 1})
    assert status["executors"]["worker"][1]["result"]["attempt"] == 2
    # sshd's session process of a connection that just closed may linger for a moment.
    assert_hosts_left_empty(cluster)
    messages = run.messages()
    assert any(m.startswith("worker-1 LOST: lease expired without a result") and
               m.endswith("restarting now (failure 1 of max_failures 3)") for m in messages)
    assert f"worker-1 attempt 2 placed on {replaced['plan']['host']}" in messages


def test_cut_off_trainer_slow_to_stop_on_sigterm_is_dead_before_its_lease_expires(
        ssh_testbed, primus_env, tmp_path):
    """A trainer may take its time after SIGTERM (saving a checkpoint, within ``stop_grace``).
    A fenced executor cannot wait for it: its lease expires within a second and the AM starts a
    replacement on another host, beside the old trainer."""
    run, victim = start_two_workers(ssh_testbed, primus_env, tmp_path,
                                    stop_grace="30s", trainer_args="--term-delay 25")
    old_trainer = psutil.Process(victim.trainer_pid)
    try:
        with link_down(victim.host):
            run.wait_running(1, 2, timeout=REPLACED_WITHIN)
            overlaps = run.records / "overlaps.jsonl"
            assert not overlaps.exists(), \
                f"the replacement started beside the fenced trainer: {overlaps.read_text()}"
            assert gone(victim.trainer_pid), "the fenced trainer outlived its lease"
        run.go()
        run.assert_invariants("SUCCEEDED", {0: 0, 1: 1})
    finally:
        with suppress(psutil.NoSuchProcess):  # an orphan would hold its lock for 25 s more
            old_trainer.kill()
        run.go()  # whatever else of the application still runs ends now, without a SIGTERM
        wait_until(lambda: not processes_of(run.app_id), 30, "the application to end")


def test_the_server_moves_the_am_of_a_cut_off_host_to_another_allowed_host(
        ssh_testbed, primus_env, tmp_path):
    cluster: TestCluster = ssh_testbed.cluster
    env = {**ssh_testbed.env(primus_env), "PRIMUS_INVENTORY": str(cluster.inventory)}
    server = start_server(env, tmp_path)  # its AM keeper; the inventory is the test hosts'
    h1 = next(h for h in cluster.hosts if h.name == "h1")
    job = write_job(tmp_path / "job.yaml", f"""
name: moved
am: {{host: h1}}
policy: {{heartbeat_ttl: {TTL}s, stop_grace: 1s}}
roles:
  - {{name: worker, num: 2, command: sleep 600, restart_policy: on_failure}}
""")
    submitted = run_primus(env, "submit", str(job), "-i", str(cluster.inventory))
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip()
    try:
        wait_until(lambda: status_json(env, app_id)["status"]["state"] == "RUNNING", 60,
                   "the application to run")
        first = status_json(env, app_id)["am"]
        assert first["pid"] in h1.pids(), "the AM runs on h1, its am.host"
        with link_down(h1):
            # h1's AM loses its lease within the TTL; the server's try on h1 fails after ssh's
            # ConnectTimeout (10 s), and the next allowed host takes the AM.
            moved = wait_until(lambda: (am := status_json(env, app_id)["am"]) and
                               am["pid"] != first["pid"] and am, REPLACED_WITHIN,
                               "an AM to lead from another host")
        assert [h.name for h in cluster.hosts if moved["pid"] in h.pids()] in (
            ["h2"], ["h3"], ["h4"])
    finally:
        assert run_primus(env, "kill", app_id).returncode == 0
        server.stop()
    # h1's first AM, back on the network, finds the application ended and exits.
    assert_hosts_left_empty(cluster, timeout=30)
