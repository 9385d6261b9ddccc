"""etcd out longer than the TTL, with or without the AM: the application still reaches a decision
by itself, and is never shown RUNNING with nothing running.

Past the TTL every lease holder fences itself: executors stop their trainers and exit, the AM
stops leading. When etcd is back, the same AM process stands again and decides on the executors
whose leases went; when the AM died too, the command that brings the embedded etcd back starts
an AM candidate for every application that no AM leads.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from primus.am import master
from primus.config.site import load_settings
from primus.store.embedded import restart_etcd, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from tests.support.apps import gone, processes_of, write_job
from tests.support.chaos import TRAINER, Run, submit
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

STANDING_AGAIN = "standing as a candidate again"


def am_log(am: dict) -> str:
    return Path(am["log_file"]).read_text()


def wait_fenced(running: dict) -> None:
    """Wait until every executor and trainer of the status ``running`` has fenced itself
    (etcd is down): trainer killed, executor exited."""
    workers = running["executors"]["worker"]
    pids = [e["plan"]["process"]["pid"] for e in workers] + \
           [e["live"]["trainer"]["pid"] for e in workers]
    wait_until(lambda: all(gone(pid) for pid in pids), 30,
               "every executor to fence itself: trainer stopped, executor exited",
               explain=lambda: f"still running: {[pid for pid in pids if not gone(pid)]}\n" +
               "\n".join(f"--- {e['plan']['executor_log']}:\n{_tail(e['plan']['executor_log'])}"
                         for e in workers))


def _tail(path: str, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc.strerror})"


@pytest.fixture
def leftovers() -> Iterator[list[str]]:
    """Application ids whose processes are killed at the end, whatever the outcome: an AM
    waits for etcd as long as it takes, and a failed test would leave it waiting."""
    apps: list[str] = []
    yield apps
    for app_id in apps:
        for process in processes_of(app_id):
            process.kill()


def running(run: Run) -> dict:
    """Wait until both trainers run; return the status that says so."""
    run.wait_running(0, 1)
    run.wait_running(1, 1)
    return run.status()


def test_etcd_down_past_the_ttl_then_back_the_same_am_restarts_the_lost_executors(
        primus_env, tmp_path, leftovers):
    process, etcd = start_etcd(tmp_path / "etcd" / "data", tmp_path / "etcd" / "etcd.log")
    env = {**primus_env, "PRIMUS_ETCD": etcd.client_url}
    try:
        run = submit(env, tmp_path, "num: 2\n    restart_policy: on_failure")
        leftovers.append(run.app_id)
        before = running(run)
        am = before["am"]

        process.kill()  # kill -9, and kept down until every lease holder has given up
        process.wait()
        wait_fenced(before)
        wait_until(lambda: STANDING_AGAIN in am_log(am), 30,
                   "the AM to lose its lease and stand again")
        assert not gone(am["pid"]), "the AM waits for etcd rather than exit"
        assert "leadership lost" in am_log(am)

        process, etcd = restart_etcd(etcd)
        run.go()  # the next attempts end as soon as they start
        status = run.assert_invariants("SUCCEEDED", {0: 1, 1: 1})
        # The AM records the end, then gives up leadership and exits: once it is gone (the
        # invariants await that), no AM leads.
        assert run.status()["am"] is None
        assert [e["plan"]["attempt"] for e in status["executors"]["worker"]] == [2, 2]
        messages = run.messages()
        for index in (0, 1):
            assert any(m.startswith(f"worker-{index} LOST: lease expired without a result")
                       and "restarting now" in m for m in messages), messages
        assert f"AM {am['am_id']} leads (took over)" in messages, "the same AM led again"
    finally:
        stop_pid(etcd.pid)


def embedded_env(primus_env: dict[str, str]) -> dict[str, str]:
    """``primus_env`` without an etcd: commands use the embedded etcd under its PRIMUS_HOME."""
    return {k: v for k, v in primus_env.items() if k != "PRIMUS_ETCD"}


def kill_am_and_etcd(env: dict[str, str], am: dict) -> int:
    """kill -9 the AM and the embedded etcd; return etcd's pid."""
    state = Path(env["PRIMUS_HOME"]) / "etcd" / "etcd.json"
    etcd_pid = json.loads(state.read_text())["pid"]
    os.kill(am["pid"], signal.SIGKILL)
    os.kill(etcd_pid, signal.SIGKILL)
    wait_until(lambda: gone(am["pid"]) and gone(etcd_pid), 10, "the AM and etcd to die")
    return etcd_pid


def test_am_and_embedded_etcd_killed_any_command_brings_back_an_am_that_ends_the_app(
        primus_env, tmp_path, leftovers):
    env = embedded_env(primus_env)
    try:
        run = submit(env, tmp_path, "num: 2")  # restart_policy never: lost executors fail it
        leftovers.append(run.app_id)
        before = running(run)
        am = before["am"]
        kill_am_and_etcd(env, am)
        wait_fenced(before)  # the AM and every executor are gone: nothing runs the app now

        shown = run_primus(env, "status", run.app_id)
        assert shown.returncode == 0, shown.stderr
        assert f"no AM led {run.app_id} when etcd came back: started an AM candidate" in \
            shown.stderr
        # The dead AM's leader key came back with etcd for one more TTL: it leads nothing.
        assert "RUNNING (no AM leads)" in shown.stdout, shown.stdout
        assert f"pid {am['pid']} no longer runs" in shown.stdout, shown.stdout

        status = run.wait_for_state("FAILED")
        assert status["status"]["diagnosis"].startswith("worker-"), status["status"]
        assert "lease expired without a result" in status["status"]["diagnosis"]
        # Both leases expire together; one found gone after the verdict is stopped instead.
        states = {e["plan"]["state"] for e in status["executors"]["worker"]}
        assert "LOST" in states and states <= {"LOST", "KILLED"}, states
        assert any(m.startswith("worker-0 LOST: lease expired") for m in run.messages())
        wait_until(lambda: run.status()["am"] is None, 30, "the new AM to finish")
        wait_until(lambda: not processes_of(run.app_id), 10, "every process of the app to end")
        assert "(no AM leads)" not in run_primus(env, "list").stdout
    finally:
        assert run_primus(env, "etcd", "stop").returncode == 0


def test_am_and_embedded_etcd_killed_a_new_am_adopts_the_running_executors(
        primus_env, tmp_path, leftovers):
    env = embedded_env(primus_env)
    try:
        # A TTL long enough for the executors to outlive etcd's restart.
        records = tmp_path / "records"
        command = json.dumps([sys.executable, str(TRAINER), str(records)])
        job = write_job(tmp_path / "job.yaml", f"""
name: adopted
policy: {{heartbeat_ttl: 10s, stop_grace: 1s}}
roles:
  - name: worker
    num: 2
    command: {command}
""")
        submitted = run_primus(env, "submit", str(job))
        assert submitted.returncode == 0, submitted.stderr
        run = Run(env, submitted.stdout.strip(), records)
        leftovers.append(run.app_id)
        before = running(run)
        kill_am_and_etcd(env, before["am"])

        listed = run_primus(env, "list")
        assert listed.returncode == 0, listed.stderr
        assert "started an AM candidate" in listed.stderr

        wait_until(lambda: (am := run.status()["am"]) and am["pid"] != before["am"]["pid"],
                   60, "a new AM to lead once the dead one's key expired")
        after = run.status()
        assert after["status"]["state"] == "RUNNING"
        assert after["executors"] == before["executors"], "adopted as they were: no restart"
        run.go()
        run.assert_invariants("SUCCEEDED", {0: 0, 1: 0})
    finally:
        assert run_primus(env, "etcd", "stop").returncode == 0


def test_an_am_whose_etcd_stays_out_of_reach_exits_saying_so(tmp_path, monkeypatch):
    monkeypatch.setattr(master, "STAND_AGAIN_GIVE_UP", 1.0)
    process, etcd = start_etcd(tmp_path / "etcd" / "data", tmp_path / "etcd" / "etcd.log")
    settings = load_settings(env={"PRIMUS_ETCD": etcd.client_url, "PRIMUS_CONF": "-",
                                  "PRIMUS_HOME": str(tmp_path / "home"),
                                  "PRIMUS_ETCD_REQUEST_TIMEOUT": "1"})

    async def stand() -> None:
        assert settings.etcd is not None
        store = await EtcdCoordinator.connect(settings.etcd)
        try:
            stop_pid(process.pid)  # gone for good: the AM below never gets a lease
            with pytest.raises(master.EtcdGoneError, match=r"etcd out of reach for 1s \("):
                await asyncio.wait_for(master.stand_until_ended(store, settings, "gone-app"),
                                       60)
        finally:
            await store.close()
    asyncio.run(stand())
