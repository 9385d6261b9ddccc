"""Topology that changes while the application runs: real etcd, real AM, executors, trainers.

Changes are asked through the client layer (what the CLI and the API call); what trainers
see is read from what they write themselves: their environment at each start, and the cluster
file after a signal.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from primus.client.api import AppEndedError
from primus.client.topology import Changed, ChangeRefusedError, RoleNotFoundError
from primus.config.loader import SpecError
from primus.config.site import Settings
from primus.state.keys import AppKeys
from primus.store.api import Coordinator
from tests.support.apps import assert_nothing_left, gone, write_job
from tests.support.primus import run_primus
from tests.support.service import call, status, wait_for_end, with_store
from tests.support.waiting import wait_until

# Each start appends "index rank world_size cluster_version pid"; the trainer ends (exit 0)
# once the test creates the file `finish`.
TRAINER = ('echo "$PRIMUS_INDEX $RANK $WORLD_SIZE $PRIMUS_CLUSTER_VERSION $$" >> {out}/{role};'
           ' while [ ! -e {out}/finish ]; do sleep 0.1; done')


def change(env: dict[str, str], operation: str, *args: Any) -> Changed:
    """Call ``ApplicationService.<operation>(*args, user="alice")`` as the CLI would."""
    return call(env, operation, *args, user="alice")


def topology_keys(env: dict[str, str], app_id: str) -> dict[str, bytes]:
    """The application's topology keys (roles/, sources/, changes/) as etcd holds them."""
    async def read(store: Coordinator, settings: Settings) -> dict[str, bytes]:
        keys = AppKeys(settings.prefix, app_id)
        return {kv.key: kv.value for prefix in (keys.roles, keys.sources, keys.changes)
                for kv in (await store.get_prefix(prefix)).kvs}
    return with_store(env, read)


def starts(out: Path, role: str = "worker") -> list[tuple[int, int, int, int, int]]:
    """Every trainer start of ``role`` so far: (index, rank, world size, version, pid)."""
    path = out / role
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]


def latest(out: Path, role: str = "worker") -> dict[int, tuple[int, int, int, int, int]]:
    """The last start of each index."""
    return {start[0]: start for start in starts(out, role)}


def world_is(out: Path, size: int, indices: range, role: str = "worker"):
    """The latest start of each of ``indices``, once every one of them runs in a world of
    ``size`` (ranks all different), else None."""
    last = latest(out, role)
    if set(last) >= set(indices) and all(last[i][2] == size for i in indices) and \
            len({last[i][1] for i in indices}) == len(indices):
        return {i: last[i] for i in indices}
    return None


def plans(env, app_id: str, role: str = "worker") -> dict[int, dict]:
    return {e["index"]: e["plan"] for e in status(env, app_id)["executors"].get(role, [])
            if e.get("plan")}


def submit(env, tmp_path: Path, text: str, *args: str) -> str:
    job = write_job(tmp_path / "job.yaml", text)
    result = run_primus(env, "submit", str(job), *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def wait_state(env, app_id: str, state: str, timeout: float = 60) -> dict:
    return wait_until(lambda: (lambda s: s if s["status"]["state"] == state else None)(
        status(env, app_id)), timeout, f"{app_id} to be {state}")


def succeeds(env, app_id: str, out: Path) -> dict:
    """Let every trainer finish; the status once the application has ended, SUCCEEDED."""
    (out / "finish").touch()
    ended = wait_for_end(env, app_id)
    assert ended["status"]["state"] == "SUCCEEDED", ended["status"]
    return ended


def test_scale_up_then_down_gang_restarts_the_role_with_each_new_world(primus_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    app_id = submit(primus_env, tmp_path, f"""
name: elastic
policy: {{stop_grace: 2s}}
roles:
  - name: worker
    num: 2
    on_cluster_change: restart
    command: '{TRAINER.format(out=out, role="worker")}'
""")
    first = wait_until(lambda: world_is(out, 2, range(2)), 60, "2 workers in a world of 2")

    changed = change(primus_env, "scale_role", app_id, "worker", 4)
    assert (changed.previous, changed.role.num) == (2, 4)
    grown = wait_until(lambda: world_is(out, 4, range(4)), 60, "4 workers in a world of 4")
    assert sorted(start[1] for start in grown.values()) == [0, 1, 2, 3]
    assert all(grown[i][4] != first[i][4] for i in range(2)), "workers 0-1 restarted"
    # A trainer writes its start line before its executor records RUNNING: await the plans.
    now = wait_until(lambda: (lambda p: p if len(p) == 4 and all(
        p[i]["state"] == "RUNNING" for i in range(4)) else None)(plans(primus_env, app_id)),
        30, "workers 0-3 RUNNING in their plans")
    assert all(now[i]["attempt"] == 1 and now[i]["failures"] == 0 for i in range(4)), \
        f"a gang restart is no new attempt: {now}"

    change(primus_env, "scale_role", app_id, "worker", 1)
    alone = wait_until(lambda: world_is(out, 1, range(1)), 60, "worker 0 alone in a world of 1")
    assert alone[0][1] == 0
    retired = wait_until(lambda: (lambda p: p if all(
        p[i]["state"] == "KILLED" and p[i]["retired"] for i in (1, 2, 3)) else None)(
        plans(primus_env, app_id)), 60, "workers 1-3 retired")
    assert all("scaled down to 1 executor" in retired[i]["diagnosis"] for i in (1, 2, 3))
    assert not any(os.path.exists(f"/proc/{latest(out)[i][4]}") for i in (1, 2, 3))

    ended = succeeds(primus_env, app_id, out)
    messages = [e["message"] for e in ended["events"]]
    assert "change 1 by alice: role worker scaled from 2 to 4 executors" in messages
    assert "change 2 by alice: role worker scaled from 4 to 1 executor" in messages
    assert ended["status"]["changes_recorded"] == 2
    assert_nothing_left(app_id)


@pytest.mark.parametrize("form", ["argv", "sh -c pipeline"])
def test_signal_mode_rewrites_the_cluster_file_and_signals_the_running_trainer(
        primus_env, tmp_path, form):
    # "argv": the trainer is the process group's leader, and the role names its signal.
    # "sh -c pipeline": a command string runs under /bin/sh -c, which stays the group's leader
    # (dash does not exec the last command); with cat after a pipe, three processes share the
    # group the default signal goes to, and only Python handles it.
    out = tmp_path / "out"
    out.mkdir()
    signal_name = "SIGUSR2" if form == "argv" else "SIGUSR1"
    trainer = tmp_path / "trainer.py"
    trainer.write_text(f"""
import json, os, signal, time
def reread(signum, frame):
    cluster = json.load(open(os.environ["PRIMUS_CLUSTER_FILE"]))
    with open("{out}/signalled-" + os.environ["PRIMUS_INDEX"], "a") as f:
        f.write(cluster["env"]["WORLD_SIZE"] + " " + str(len(cluster["members"])) + "\\n")
signal.signal(signal.{signal_name}, reread)
with open("{out}/started-" + os.environ["PRIMUS_INDEX"], "a") as f:
    f.write(str(os.getpid()) + "\\n")
while not os.path.exists("{out}/finish"):
    time.sleep(0.1)
""")
    role = (f"cluster_signal: SIGUSR2\n    command: [{json.dumps(str(Path(sys.executable)))}, "
            f"{json.dumps(str(trainer))}]" if form == "argv" else
            f"command: 'cd {tmp_path} && {sys.executable} trainer.py | cat'")
    app_id = submit(primus_env, tmp_path, f"""
name: signalled
roles:
  - name: worker
    num: 1
    on_cluster_change: signal
    {role}
""")
    wait_until(lambda: (out / "started-0").exists(), 60, "worker 0's trainer to start")

    change(primus_env, "scale_role", app_id, "worker", 2)
    wait_until(lambda: (out / "signalled-0").exists() and
               "2 2" in (out / "signalled-0").read_text(), 60,
               "worker 0 to be signalled with a cluster file of 2 members")
    assert len((out / "started-0").read_text().split()) == 1, "a signal restarts nothing"
    ended = succeeds(primus_env, app_id, out)
    worker = {e["index"]: e["plan"] for e in ended["executors"]["worker"]}[0]
    assert (worker["state"], worker["exit_code"]) == ("SUCCEEDED", 0), worker


def test_added_role_joins_the_cluster_and_a_removed_role_leaves_it_without_failing(
        primus_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    app_id = submit(primus_env, tmp_path, f"""
name: grows
policy: {{stop_grace: 2s}}
roles:
  - name: chief
    on_cluster_change: restart
    command: '{TRAINER.format(out=out, role="chief")}'
""")
    wait_until(lambda: world_is(out, 1, range(1), "chief"), 60, "the chief alone")

    added = change(primus_env, "add_role", app_id, {
        "name": "evaluator", "num": 2, "command": TRAINER.format(out=out, role="evaluator")})
    assert added.role.name == "evaluator" and added.role.num == 2
    wait_until(lambda: world_is(out, 3, range(1), "chief") and
               world_is(out, 3, range(2), "evaluator"), 60, "chief and 2 evaluators, world 3")
    cluster = status(primus_env, app_id)["cluster"]
    assert [(m["role"], m["index"], m["rank"]) for m in cluster["members"]] == [
        ("chief", 0, 0), ("evaluator", 0, 1), ("evaluator", 1, 2)]

    change(primus_env, "remove_role", app_id, "evaluator")
    wait_until(lambda: world_is(out, 1, range(1), "chief") if len(starts(out, "chief")) == 3
               else None, 60, "the chief restarted alone")
    gone = wait_until(lambda: (lambda p: p if p and all(
        p[i]["retired"] for i in (0, 1)) else None)(plans(primus_env, app_id, "evaluator")),
        60, "the evaluators retired")
    assert all("role evaluator removed" in gone[i]["diagnosis"] for i in (0, 1))
    ended = succeeds(primus_env, app_id, out)
    assert any(e["message"] == "change 2 by alice: role evaluator removed (2 executors "
               "stopped)" for e in ended["events"])
    assert_nothing_left(app_id)


@contextlib.contextmanager
def launches_held(agent_dir: Path) -> Iterator[None]:
    """Launches of executors to the host whose agent directory is ``agent_dir``
    (``APP_DIR/hosts/HOST``, ``launcher/layout.py``) wait while this holds the lock under
    which a launcher starts the application's agent there (``launcher/agent.py``), as long as
    no agent of the application runs there yet."""
    agent_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(agent_dir / "agent.lock", "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def executor_processes(app_id: str, role: str = "worker") -> collections.Counter[int]:
    """How many executor processes of each index of ``role`` run on this machine."""
    executor = re.compile(
        rf"-m primus\.executor --app {re.escape(app_id)} --role {role} --index (\d+) ")
    counts: collections.Counter[int] = collections.Counter()
    for proc in psutil.process_iter(["cmdline", "status"]):
        found = executor.search(" ".join(proc.info["cmdline"] or []))
        if found and proc.info["status"] != psutil.STATUS_ZOMBIE:
            counts[int(found[1])] += 1
    return counts


def running_trainers(out: Path, role: str = "worker") -> collections.Counter[int]:
    """How many of the trainers that started for each index of ``role`` still run."""
    return collections.Counter(index for index, *_, pid in starts(out, role) if not gone(pid))


def test_am_killed_halfway_through_a_scale_up_leaves_the_next_am_to_finish_it_once(
        primus_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        f"a ansible_connection=local primus_python={sys.executable} primus_home={tmp_path}/a "
        "primus_slots=3\n"
        f"b ansible_connection=local primus_python={sys.executable} primus_home={tmp_path}/b\n")
    app_id = submit(primus_env, tmp_path, f"""
name: failover
placement: pack             # workers 0-2 on a (3 slots), 3-4 on b
am: {{replicas: 2}}
policy: {{heartbeat_ttl: 3s, stop_grace: 2s}}
roles:
  - name: worker
    num: 2
    on_cluster_change: restart
    command: '{TRAINER.format(out=out, role="worker")}'
""", "-i", str(inventory))
    wait_until(lambda: world_is(out, 2, range(2)), 60, "2 workers in a world of 2")
    leader = status(primus_env, app_id)["am"]
    # The AM plans workers 2-4, then launches them: on a at once, on b only once the lock is
    # let go, after the AM was killed.
    with launches_held(tmp_path / "b" / "apps" / app_id / "hosts" / "b"):
        change(primus_env, "scale_role", app_id, "worker", 5)
        half = wait_until(lambda: (lambda p: p if len(p) == 5 and p[2]["state"] == "LAUNCHED"
                                   else None)(plans(primus_env, app_id)), 60,
                          "worker-2 to be launched on a while the launches to b wait")
        os.kill(leader["pid"], signal.SIGKILL)  # the scale half done
        wait_until(lambda: gone(leader["pid"]), 10, "the killed AM to be gone")
    assert [(half[i]["host"], half[i]["state"]) for i in (3, 4)] == [("b", "PLANNED")] * 2, \
        f"workers 3-4 planned on b, not launched: {half}"

    wait_until(lambda: world_is(out, 5, range(5)), 60, "5 workers in a world of 5")
    assert status(primus_env, app_id)["am"]["pid"] != leader["pid"]
    # A trainer writes its world before its executor's RUNNING reaches the AM's plan.
    starting = ("PLANNED", "LAUNCHED", "REGISTERED")
    now = wait_until(lambda: (lambda p: p if len(p) == 5 and all(
        plan["state"] not in starting for plan in p.values()) else None)(
        plans(primus_env, app_id)), 30, "every executor's plan past its start")
    assert now[2]["process"] == half[2]["process"], "worker-2 adopted, not launched again"
    assert [(p["host"], p["state"], p["attempt"], p["failures"]) for _, p in sorted(now.items())
            ] == [("a", "RUNNING", 1, 0)] * 3 + [("b", "RUNNING", 1, 0)] * 2, \
        "workers 0-4 running, each as its first attempt, none failed"
    assert executor_processes(app_id) == {i: 1 for i in range(5)}, "one executor per index"
    assert running_trainers(out) == {i: 1 for i in range(5)}, "one trainer per index"
    succeeds(primus_env, app_id, out)
    assert_nothing_left(app_id)


def test_a_change_that_cannot_be_made_is_refused_and_changes_nothing(primus_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    app_id = submit(primus_env, tmp_path, f"""
name: refuses
roles:
  - name: worker
    command: '{TRAINER.format(out=out, role="worker")}'
""")
    wait_state(primus_env, app_id, "RUNNING")
    before = topology_keys(primus_env, app_id)
    with pytest.raises(SpecError, match="executors: got 0; must be >= 1"):
        change(primus_env, "scale_role", app_id, "worker", 0)
    with pytest.raises(RoleNotFoundError, match="no role 'ps'"):
        change(primus_env, "scale_role", app_id, "ps", 2)
    with pytest.raises(ChangeRefusedError, match="last role"):
        change(primus_env, "remove_role", app_id, "worker")
    with pytest.raises(SpecError, match=r"role: command: .*required"):
        change(primus_env, "add_role", app_id, {"name": "ps"})
    assert topology_keys(primus_env, app_id) == before
    assert status(primus_env, app_id)["status"]["changes_recorded"] == 0
    succeeds(primus_env, app_id, out)
    with pytest.raises(AppEndedError, match="has ended"):
        change(primus_env, "scale_role", app_id, "worker", 2)
