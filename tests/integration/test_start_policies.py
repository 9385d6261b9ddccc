"""Start policies with real executors and trainers: the times in the executor records show in
which order roles started (ordered), a role short of its share when the timeout passes fails
the application or lets the next role go on, and dynamic trainers start before the rest of
their role registered, with the cluster as far as it has, which grows as members arrive."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from primus.config.site import Settings
from primus.state.keys import AppKeys, apps_prefix
from primus.state.records import ExecutorLive, encode
from primus.state.states import ExecutorState
from primus.store.api import Coordinator, Put, WatchEvent, key_missing
from primus.store.recipes import watching
from tests.support.apps import assert_nothing_left, write_job
from tests.support.primus import REPO, run_primus
from tests.support.service import call, status, wait_for_end, with_store
from tests.support.waiting import wait_until


def _executors(env: dict[str, str], app_id: str, role: str) -> list[dict]:
    return status(env, app_id)["executors"][role]


def _all_running(env: dict[str, str], app_id: str, role: str) -> bool:
    return all(e["live"] and e["live"]["state"] == "RUNNING" for e in _executors(env, app_id, role))


def test_ordered_launches_no_worker_before_every_ps_trainer_runs(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: ordered
policy: {stop_grace: 1s}
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
        assert status(primus_env, app_id)["status"]["state"] == "RUNNING"
    finally:
        call(primus_env, "kill", app_id, "the test is over", 60)
    assert_nothing_left(app_id)


ORDERED_PS_NEVER_UP = """
name: stuck
policy: {{stop_grace: 1s}}
start: {{policy: ordered, timeout: 1s, on_timeout: {on_timeout}}}
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
    found = status(primus_env, app_id)
    assert found["status"]["state"] == "FAILED"
    assert found["status"]["diagnosis"] == (
        "ordered start: role ps has 0 of 1 executors running 1s after it was first launched, "
        "short of start.schedule_percent 100% (1); role worker not started")
    assert found["executors"]["worker"][0]["plan"] is None, "the worker was never launched"
    assert_nothing_left(app_id)


def test_ordered_goes_on_with_what_runs_when_the_timeout_passes(primus_env, tmp_path):
    app_id = submit_stuck(primus_env, tmp_path, "continue").stdout.strip()
    try:
        wait_until(lambda: _all_running(primus_env, app_id, "worker"), 60,
                   "the worker to run after the timeout")
        started = status(primus_env, app_id)["status"]["start_time"]
        [worker] = _executors(primus_env, app_id, "worker")
        assert worker["plan"]["launch_time"] >= started + 1
    finally:
        call(primus_env, "kill", app_id, "the test is over", 60)
    assert_nothing_left(app_id)


NO_PROCESS = 2 ** 22 + 1
"""A pid no process has: above the largest the kernel gives (pid_max is at most 2^22)."""


def submit_holding_back(env: dict[str, str], job: Path, role: str, held: Sequence[int]) -> str:
    """Submit ``job`` and, before its AM plans anything, take the ``live`` key of each executor
    ``held`` of ``role`` as an earlier attempt of it would hold it. Launched, such an executor
    waits for that attempt to let go (up to heartbeat_ttl + 5 s) before it registers: until
    :func:`let_register`. Returns the application's id."""
    async def body(store: Coordinator, settings: Settings) -> str:
        apps = apps_prefix(settings.prefix)
        async with watching(store, apps) as watch:
            submit = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "primus.cli", "submit", str(job), env=env, cwd=REPO,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            try:
                async with asyncio.timeout(60):
                    async for event in watch:  # the submission's first write
                        if isinstance(event, WatchEvent) and event.key.endswith("/status"):
                            break
            except TimeoutError:
                submit.kill()
                pytest.fail(f"no application recorded: {(await submit.communicate())[1]!r}")
            keys = AppKeys(settings.prefix, event.key[len(apps):].split("/")[0])
            earlier = ExecutorLive(attempt=0, host="earlier", address="127.0.0.1",
                                   pid=NO_PROCESS, state=ExecutorState.RUNNING,
                                   registered_time=time.time())
            taken = await store.txn(
                [key_missing(keys.executor(role, i, "plan")) for i in held],
                [Put(keys.executor(role, i, "live"), encode(earlier)) for i in held])
            _, stderr = await submit.communicate()
        assert submit.returncode == 0, stderr.decode()
        assert taken.succeeded, f"the AM planned one of {role} {list(held)} before the test " \
                                f"could hold it back"
        return keys.app_id
    return with_store(env, body)


def let_register(env: dict[str, str], app_id: str, role: str, index: int) -> None:
    """Let go of the ``live`` key :func:`submit_holding_back` took: the executor registers."""
    async def body(store: Coordinator, settings: Settings) -> None:
        await store.delete(AppKeys(settings.prefix, app_id).executor(role, index, "live"))
    with_store(env, body)


# Each start appends "index rank world_size cluster_version"; once the test creates `finish`,
# the trainer appends "index world_size" of its cluster file as it is then, and exits 0.
DYNAMIC_TRAINER = """
echo "$PRIMUS_INDEX $RANK $WORLD_SIZE $PRIMUS_CLUSTER_VERSION" >> {out}/starts
while [ ! -e {out}/finish ]; do sleep 0.1; done
echo "$PRIMUS_INDEX $(grep -o '"WORLD_SIZE": "[0-9]*"' "$PRIMUS_CLUSTER_FILE" | tr -dc 0-9)" \\
    >> {out}/ends
"""


def lines(path: Path) -> dict[int, tuple[int, ...]]:
    """Each line of ``path`` as integers, by its first."""
    if not path.exists():
        return {}
    return {int(line.split()[0]): tuple(map(int, line.split()[1:]))
            for line in path.read_text().splitlines()}


def test_dynamic_trainers_start_before_their_role_registered_and_see_the_world_grow(
        primus_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    trainer = tmp_path / "trainer.sh"
    trainer.write_text(DYNAMIC_TRAINER.format(out=out))
    job = write_job(tmp_path / "job.yaml", f"""
name: dynamic
start: {{policy: dynamic}}
policy: {{heartbeat_ttl: 40s}}   # a held executor waits for its key up to 45 s
roles:
  - name: worker
    num: 3
    on_cluster_change: none
    command: [sh, {trainer}]
""")
    app_id = submit_holding_back(primus_env, job, "worker", held=(1, 2))
    started = out / "starts"
    try:
        first = wait_until(lambda: lines(started).get(0), 30,
                           "worker-0's trainer to start while workers 1 and 2 have not registered")
        assert first == (0, 1, 1), "worker-0 starts alone: rank 0, world 1, cluster version 1"
        held = _executors(primus_env, app_id, "worker")[1:]
        assert [(e["plan"]["state"], e["live"]["attempt"]) for e in held] == \
            [("LAUNCHED", 0)] * 2, f"workers 1 and 2 launched, waiting to register: {held}"

        let_register(primus_env, app_id, "worker", 1)
        second = wait_until(lambda: lines(started).get(1), 30, "worker-1's trainer to start")
        assert second == (1, 2, 2), "worker-1 joins: rank 1, world 2, cluster version 2"
        let_register(primus_env, app_id, "worker", 2)
        third = wait_until(lambda: lines(started).get(2), 30, "worker-2's trainer to start")
        assert third == (2, 3, 3), "worker-2 joins: rank 2, world 3, cluster version 3"
        assert len(started.read_text().splitlines()) == 3, "no trainer restarted"
    finally:
        (out / "finish").touch()
    assert wait_for_end(primus_env, app_id)["status"]["state"] == "SUCCEEDED"
    assert lines(out / "ends") == {0: (3,), 1: (3,), 2: (3,)}, \
        "every trainer's cluster file grew to the 3 members"
    assert_nothing_left(app_id)
