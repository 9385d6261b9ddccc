"""etcd restart: a restart on the same data directory, shorter than the TTL, fails nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from primus.config.etcd import EtcdConfig
from primus.store.api import Snapshot
from primus.store.embedded import restart_etcd, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from tests.support.apps import assert_nothing_left, gone, processes_of, status_json, write_job
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

TTL = 10


def read_prefix(client_url: str, prefix: str) -> Snapshot:
    """Every key under ``prefix``, read at one revision on a connection of its own."""
    async def read() -> Snapshot:
        store = await EtcdCoordinator.connect(EtcdConfig((client_url,)))
        try:
            return await store.get_prefix(prefix)
        finally:
            await store.close()
    return asyncio.run(read())


def put(client_url: str, key: str, value: bytes) -> int:
    """Write ``key`` and return the revision etcd acknowledged it at."""
    async def write() -> int:
        store = await EtcdCoordinator.connect(EtcdConfig((client_url,)))
        try:
            return await store.put(key, value)
        finally:
            await store.close()
    return asyncio.run(write())


def holds(predicate, duration: float, what: str, interval: float = 0.2,
          explain=lambda: "") -> None:
    """Require ``predicate`` to stay true for ``duration`` seconds, checked every ``interval``;
    a failure adds what ``explain`` says."""
    start = time.monotonic()
    while time.monotonic() - start < duration:
        if not predicate():
            pytest.fail(f"{what} stopped holding {time.monotonic() - start:.1f}s into "
                        f"{duration:.1f}s {explain()}")
        time.sleep(interval)


def test_etcd_restart_shorter_than_the_ttl_fails_nothing_and_loses_nothing(
        primus_env, prefix, tmp_path):
    process, etcd = start_etcd(tmp_path / "etcd" / "data", tmp_path / "etcd" / "etcd.log")
    env = {**primus_env, "PRIMUS_ETCD": etcd.client_url}
    go = tmp_path / "GO"
    app_id = ""
    try:
        job = write_job(tmp_path / "job.yaml", f"""
name: etcdrestart
policy: {{heartbeat_ttl: {TTL}s, stop_grace: 1s}}
roles:
  - name: worker
    num: 2
    command: "while [ ! -e {go} ]; do sleep 0.1; done"
""")
        app_id = run_primus(env, "submit", str(job)).stdout.strip()
        wait_until(lambda: all(e["plan"] and e["plan"]["state"] == "RUNNING" and e["live"]
                               and e["live"]["state"] == "RUNNING"
                               for e in status_json(env, app_id)["executors"]["worker"]),
                   60, "both trainers to run, as the AM recorded")
        before = status_json(env, app_id)
        processes = {
            "am": before["am"]["pid"],
            **{f"executor {e['index']}": e["plan"]["process"]["pid"]
               for e in before["executors"]["worker"]},
            **{f"trainer {e['index']}": e["live"]["trainer"]["pid"]
               for e in before["executors"]["worker"]},
        }
        root = f"{prefix}/apps/{app_id}/"
        stored = read_prefix(etcd.client_url, root)
        # The last write acknowledged before the crash must survive it.
        marker = put(etcd.client_url, f"{prefix}/marker", b"acknowledged")

        process.kill()  # kill -9: no clean shutdown, no chance to flush anything more
        process.wait()
        killed = time.monotonic()
        process, etcd = restart_etcd(etcd)
        outage = time.monotonic() - killed
        assert outage < TTL / 2, f"etcd took {outage:.1f}s to restart; the test needs < TTL/2"

        # A keeper that cannot renew fences its holder within TTL - 1 s of the crash, and etcd
        # expires a lease nobody renews TTL after it restarts: past both, renewals resumed.
        holds(lambda: not any(gone(pid) for pid in processes.values()), TTL + 1,
              "every process of the app (AM, executors, trainers) staying alive",
              explain=lambda: "gone: " + ", ".join(
                  name for name, pid in processes.items() if gone(pid)) + "\n" + "\n".join(
                  f"--- {log.name}:\n" + "\n".join(log.read_text().splitlines()[-8:])
                  for log in sorted(Path(env["PRIMUS_HOME"]).rglob("*.log"))))
        after = status_json(env, app_id)
        assert after["status"]["state"] == "RUNNING", after["status"]
        assert after["am"]["pid"] == processes["am"]
        assert after["executors"] == before["executors"], "no executor restarted or changed"

        marker_kv = read_prefix(etcd.client_url, f"{prefix}/marker").kvs
        assert [(kv.value, kv.mod_revision) for kv in marker_kv] == [(b"acknowledged", marker)]
        kept = read_prefix(etcd.client_url, root)
        assert kept.revision >= marker
        # Nothing of the app changed while it ran: same keys, same incarnations, same values;
        # the leased keys (live, am/leader) are still attached to leases that did not expire.
        assert {kv.key: kv for kv in kept.kvs} == {kv.key: kv for kv in stored.kvs}

        go.touch()
        wait_until(lambda: status_json(env, app_id)["status"]["state"] != "RUNNING", 30,
                   "the AM to see the results written after the restart")
        done = status_json(env, app_id)
        assert done["status"]["state"] == "SUCCEEDED", done["status"]
        assert [(e["plan"]["state"], e["result"]["exit_code"], e["plan"]["attempt"])
                for e in done["executors"]["worker"]] == [("SUCCEEDED", 0, 1)] * 2
        wait_until(lambda: status_json(env, app_id)["am"] is None, 30, "the AM to finish")
        assert_nothing_left(app_id)
        am_log = (Path(primus_env["PRIMUS_HOME"]) / "apps" / app_id / "am.log").read_text()
        assert "resuming from revision" in am_log, "the AM's watch never broke: no restart seen"
    finally:
        go.touch()  # on failure, lets the trainers end rather than loop forever
        for left in processes_of(app_id) if app_id else []:
            left.kill()  # on failure: an AM would wait for the stopped etcd for ever
        stop_pid(etcd.pid)
