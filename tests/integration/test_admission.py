"""Applications sharing hosts: admission by one leader, reservations, GPU devices, queueing.

Real etcd, real AM and executor processes on a local host declared with few slots and GPUs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

from primus.config.site import load_settings
from primus.state.keys import SchedulerKeys
from primus.state.records import ServiceLeader, decode
from primus.store.connect import open_store
from tests.support.apps import assert_nothing_left, processes_of, status_json, write_job
from tests.support.data import TRAINER as DATA_TRAINER
from tests.support.data import make_text_files, received_lines, wait_for_end
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

# A trainer that records its GPU devices, then runs until the test creates `finish-<app>`.
TRAINER = ('echo "$PRIMUS_APP_ID $PRIMUS_INDEX ${{CUDA_VISIBLE_DEVICES-unset}}" >> {out}/starts;'
           ' while [ ! -e {out}/finish-{name} ]; do sleep 0.1; done')


def inventory(tmp_path: Path, slots: int = 2, gpus: int = 2, extra: str = "") -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local primus_slots={slots}"
                    f" primus_gpus={gpus} primus_python={sys.executable} {extra}\n")
    return path


def submit(env, tmp_path: Path, hosts: Path, name: str, num: int, gpu: int, out: Path,
           extra: str = "policy: {stop_grace: 2s}") -> str:
    job = write_job(tmp_path / f"{name}.yaml", f"""
name: {name}
{extra}
roles:
  - name: worker
    num: {num}
    gpu: {gpu}
    cpu: 0.1
    command: '{TRAINER.format(out=out, name=name)}'
""")
    result = run_primus(env, "submit", str(job), "-i", str(hosts))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def admission_leader(env) -> str | None:
    """Who leads admission (``host:pid``), as etcd's leader record says."""
    async def read() -> str | None:
        store, settings = await open_store(load_settings(env=env))
        try:
            found = await store.get(SchedulerKeys(settings.prefix).leader)
            leader = decode(ServiceLeader, found.value) if found else None
            return f"{leader.host}:{leader.pid}" if leader else None
        finally:
            await store.close()
    return asyncio.run(read())


def state_of(env, app_id: str) -> str:
    return status_json(env, app_id)["status"]["state"]


def devices(out: Path) -> dict[str, list[str]]:
    """Each application's trainers' CUDA_VISIBLE_DEVICES, in start order."""
    found: dict[str, list[str]] = {}
    if (out / "starts").exists():
        for line in (out / "starts").read_text().splitlines():
            app_id, _, visible = line.split()
            found.setdefault(app_id, []).append(visible)
    return found


def test_an_application_waits_queued_until_its_hosts_are_free_and_never_shares_a_gpu(
        primus_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    hosts = inventory(tmp_path)
    first = submit(primus_env, tmp_path, hosts, "first", 2, 1, out)
    wait_until(lambda: len(devices(out).get(first, [])) == 2, 60, "first's 2 trainers")
    assert sorted(devices(out)[first]) == ["0", "1"], "one device each, never the same"

    second = submit(primus_env, tmp_path, hosts, "second", 1, 1, out)
    wait_until(lambda: state_of(primus_env, second) == "QUEUED", 30, "second to be QUEUED")
    queue = run_primus(primus_env, "queue")
    assert queue.returncode == 0, queue.stderr
    assert second in queue.stdout and "not enough slots on box" in queue.stdout
    status = run_primus(primus_env, "status", second)
    assert "waiting" in status.stdout and "not enough slots on box" in status.stdout
    listed = run_primus(primus_env, "list")
    assert "QUEUED (cannot place worker-0" in listed.stdout, listed.stdout
    assert devices(out).get(second) is None, "nothing of second starts while it waits"

    (out / "finish-first").touch()
    wait_until(lambda: len(devices(out).get(second, [])) == 1, 60, "second's trainer")
    assert state_of(primus_env, first) == "SUCCEEDED"
    assert devices(out)[second][0] in {"0", "1"}
    usage = run_primus(primus_env, "hosts", "usage", "-o", "json")
    assert usage.returncode == 0, usage.stderr
    assert second in usage.stdout and first not in usage.stdout, "first gave its hosts up"
    (out / "finish-second").touch()
    wait_until(lambda: state_of(primus_env, second) == "SUCCEEDED", 60, "second to succeed")
    assert_nothing_left(second)


def test_a_drained_host_takes_nothing_new_until_resumed_while_what_runs_goes_on(primus_env,
                                                                              tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    hosts = inventory(tmp_path)
    running = submit(primus_env, tmp_path, hosts, "running", 1, 0, out)
    wait_until(lambda: devices(out).get(running), 60, "running's trainer")

    drained = run_primus(primus_env, "hosts", "drain", "box", "--reason", "new <b>disks</b>")
    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.strip() == "box: drained by root: new <b>disks</b>"
    waiting = submit(primus_env, tmp_path, hosts, "waiting", 1, 0, out)
    wait_until(lambda: state_of(primus_env, waiting) == "QUEUED", 30, "waiting to be QUEUED")
    queue = run_primus(primus_env, "queue", "-o", "json")
    [entry] = [e for e in json.loads(queue.stdout) if e["app_id"] == waiting]
    assert entry["reason"] == ("every host it may use is out of service or kept for "
                               "applications ahead: box (drained by root: new <b>disks</b>)")
    usage = json.loads(run_primus(primus_env, "hosts", "usage", "-o", "json").stdout)
    [box] = [u for u in usage if u["host"] == "box"]
    assert (box["condition"]["state"], box["condition"]["by"]) == ("drained", "root")
    assert state_of(primus_env, running) == "RUNNING", "what runs on a drained host goes on"
    noted = "box out of service: drained by root: new <b>disks</b>; its executors there run on"
    wait_until(lambda: any(e["message"] == noted for e in
                           status_json(primus_env, running)["events"]), 30,
               "the running application's event saying its host is out of service")

    resumed = run_primus(primus_env, "hosts", "resume", "box")
    assert resumed.stdout.strip() == "box: in service (was drained by root: new <b>disks</b>)"
    wait_until(lambda: devices(out).get(waiting), 60, "waiting's trainer once box is back")
    for app_id in (running, waiting):
        (out / f"finish-{app_id.split('-')[0]}").touch()
        wait_until(lambda app_id=app_id: state_of(primus_env, app_id) == "SUCCEEDED", 60,
                   f"{app_id} to succeed")
    refused = run_primus(primus_env, "hosts", "drain", "nowhere", "--reason", "x")
    assert refused.returncode == 2
    assert "host 'nowhere': unknown to admission" in refused.stderr


def test_a_host_failing_its_health_check_is_quarantined_then_readmitted_once_it_passes(
        primus_env, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    healthy = tmp_path / "healthy"
    # On a host that declares GPUs nvidia-smi is checked too: these declare none.
    hosts = inventory(tmp_path, gpus=0, extra=f"primus_health_check='test -e {healthy}'")
    site = tmp_path / "site.yaml"
    site.write_text("health: {interval: 1s, readmit_after: 2, timeout: 5s}\n")
    env = {**primus_env, "PRIMUS_CONF": str(site)}
    leading = submit(env, tmp_path, hosts, "leading", 1, 0, out)  # its AM leads admission
    wait_until(lambda: devices(out).get(leading), 60, "leading's trainer")

    def condition() -> dict | None:
        usage = json.loads(run_primus(env, "hosts", "usage", "-o", "json").stdout)
        return next(u["condition"] for u in usage if u["host"] == "box")
    found = wait_until(condition, 30, "box to be quarantined")
    assert (found["state"], found["by"]) == ("quarantined", "the health check")
    assert found["reason"] == f"health check `test -e {healthy}`: exit 1"
    waiting = submit(env, tmp_path, hosts, "waiting", 1, 0, out)
    wait_until(lambda: state_of(env, waiting) == "QUEUED", 30, "waiting to be QUEUED")
    assert state_of(env, leading) == "RUNNING", "what runs on a quarantined host goes on"

    healthy.touch()
    wait_until(lambda: devices(out).get(waiting), 60, "waiting to start once box passed twice")
    assert condition() is None
    for name in ("leading", "waiting"):
        (out / f"finish-{name}").touch()
    for app_id in (leading, waiting):
        wait_until(lambda app_id=app_id: state_of(env, app_id) == "SUCCEEDED", 60,
                   f"{app_id} to succeed")


def test_a_killed_admission_leader_is_replaced_and_admits_nothing_twice(primus_env,
                                                                       tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    hosts = inventory(tmp_path, slots=1, gpus=1)
    first = submit(primus_env, tmp_path, hosts, "first", 1, 1, out,
                   extra="am: {replicas: 2}\npolicy: {heartbeat_ttl: 3s, stop_grace: 2s}")
    wait_until(lambda: len(devices(out).get(first, [])) == 1, 60, "first's trainer")
    second = submit(primus_env, tmp_path, hosts, "second", 1, 1, out)
    wait_until(lambda: state_of(primus_env, second) == "QUEUED", 30, "second to be QUEUED")

    # Either of first's two AM processes may have won the admission election, whichever leads
    # the application: kill the one that leads admission.
    who = admission_leader(primus_env) or ""
    # (as the scan saw each: a process that ended since has no command line to read)
    ams = {p.pid for p in processes_of(first) if "primus.am" in (p.info["cmdline"] or [])}
    host, _, pid = who.partition(":")
    assert host == socket.gethostname() and int(pid or 0) in ams, \
        f"an AM process of {first} ({sorted(ams)}) leads admission; {who!r} does"
    os.kill(int(pid), signal.SIGKILL)
    wait_until(lambda: (lambda who: who and who.split(":")[1] != pid)(
        admission_leader(primus_env)), 30, "another process to lead admission")
    wait_until(lambda: (lambda am: am and am["pid"] != int(pid))(
        status_json(primus_env, first)["am"]), 30, "first to be led by its other AM")
    assert state_of(primus_env, second) == "QUEUED", "the single slot is still held"
    (out / "finish-first").touch()
    wait_until(lambda: len(devices(out).get(second, [])) == 1, 60, "second's trainer")
    assert len(devices(out)[first]) == 1, "first was never started again"
    (out / "finish-second").touch()
    wait_until(lambda: state_of(primus_env, second) == "SUCCEEDED", 60, "second to succeed")
    assert state_of(primus_env, first) == "SUCCEEDED"
    assert_nothing_left(first)
    assert_nothing_left(second)


def test_a_preemptible_app_is_stopped_for_a_higher_priority_one_then_finishes_its_data(
        primus_env, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("queues: {default: {}, urgent: {priority: 10}}\n")
    env = {**primus_env, "PRIMUS_CONF": str(site)}
    hosts = inventory(tmp_path, slots=1, gpus=1)
    every = make_text_files(tmp_path / "data", files=4, lines=3000)  # ~20 s of reading
    records = tmp_path / "records"
    records.mkdir()
    reader = json.dumps([sys.executable, str(DATA_TRAINER), str(records), "--delay", "0.1",
                         "--read-size", "4096"])
    low = write_job(tmp_path / "low.yaml", f"""
name: low
preemptible: true
policy: {{heartbeat_ttl: 3s, stop_grace: 1s}}
roles:
  - name: worker
    command: {reader}
data:
  - name: train
    roles: [worker]
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki
    checkpoint_records: 50
""")
    result = run_primus(env, "submit", str(low), "-i", str(hosts))
    assert result.returncode == 0, result.stderr
    low_id = result.stdout.strip()
    wait_until(lambda: status_json(env, low_id)["data"].get("train", {}).get("done", 0) >= 2,
               60, "low to have read some of its data")

    urgent = write_job(tmp_path / "urgent.yaml", """
name: urgent
queue: urgent
roles:
  - name: worker
    cpu: 0.1
    command: echo urgent work done
""")
    assert status_json(env, low_id)["status"]["state"] == "RUNNING"
    result = run_primus(env, "submit", str(urgent), "-i", str(hosts), "--wait")
    assert result.returncode == 0, result.stderr
    urgent_id = result.stdout.split()[0]
    assert status_json(env, low_id)["status"]["state"] in ("QUEUED", "STARTING", "RUNNING")

    status = wait_for_end(env, low_id, timeout=120)
    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert status["status"]["attempt"] == 1, "a preemption is not a failed attempt"
    messages = [e["message"] for e in status["events"]]
    assert any(m.startswith(f"preempted to admit {urgent_id}") for m in messages), messages
    [worker] = status["executors"]["worker"]
    assert worker["plan"]["attempt"] >= 2 and worker["plan"]["failures"] == 0
    stats = status["data"]["train"]
    assert stats["done"] == stats["tasks"], "each task done once"
    assert set(every) <= set(received_lines(records)), "no record lost to the preemption"
    assert_nothing_left(low_id)


def test_gpus_that_nvidia_smi_lists_are_given_out_when_the_inventory_declares_none(
        primus_env, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nvidia-smi"  # what `nvidia-smi -L` prints on a host with two GPUs
    fake.write_text("#!/bin/sh\necho 'GPU 0: Tesla T4 (UUID: GPU-a)'\n"
                    "echo 'GPU 1: Tesla T4 (UUID: GPU-b)'\n")
    fake.chmod(0o755)
    env = {**primus_env, "PATH": f"{tools}:{os.environ['PATH']}"}
    out = tmp_path / "out"
    out.mkdir()
    job = write_job(tmp_path / "gpus.yaml", f"""
name: gpus
roles:
  - name: worker
    num: 2
    gpu: 1
    command: '{TRAINER.format(out=out, name="gpus")}'
""")
    result = run_primus(env, "submit", str(job))  # the embedded default's host, no inventory
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    wait_until(lambda: len(devices(out).get(app_id, [])) == 2, 60, "both trainers")
    assert sorted(devices(out)[app_id]) == ["0", "1"]
    (out / "finish-gpus").touch()
    wait_until(lambda: state_of(env, app_id) == "SUCCEEDED", 60, "the app to succeed")
