"""The host's lease with real processes: the executors the host agent forks hold one lease,
kept by the application's lease keeper on the host (``primus/executor/host_lease.py``)."""

from __future__ import annotations

import asyncio
import os
import signal

import psutil

from primus.config.etcd import EtcdConfig
from primus.state.keys import AppKeys
from primus.store.etcd_store import EtcdCoordinator
from tests.support.apps import assert_nothing_left
from tests.support.chaos import submit
from tests.support.waiting import wait_until


def live_leases(env: dict[str, str], app_id: str, count: int) -> list[int]:
    """The lease of each worker's live key (0: no key)."""
    async def read() -> list[int]:
        store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(env["PRIMUS_ETCD"],)))
        try:
            keys = AppKeys(env["PRIMUS_PREFIX"], app_id)
            kvs = [await store.get(keys.executor("worker", i, "live")) for i in range(count)]
            return [kv.lease if kv is not None else 0 for kv in kvs]
        finally:
            await store.close()
    return asyncio.run(read())


def revoke(env: dict[str, str], lease: int) -> None:
    async def run() -> None:
        store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(env["PRIMUS_ETCD"],)))
        try:
            await store.revoke_lease(lease)
        finally:
            await store.close()
    asyncio.run(run())


def keepers_of(app_id: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if " ".join(p.info["cmdline"] or []).startswith(f"primus lease keeper {app_id}")]


def test_a_hosts_executors_hold_one_lease_and_outlive_their_killed_keeper(primus_env,
                                                                         tmp_path):
    # A TTL of 9 s: an executor takes the keeper for gone after about 5 s without a renewal
    # (at the chaos suite's 3 s, after 1 s: a keeper held up that long by the full suite's
    # load on 2 cores once sent all three executors to leases of their own before the test
    # looked).
    run = submit(primus_env, tmp_path, "num: 3", ttl=9)
    for index in range(3):
        run.wait_running(index, attempt=1)
    trainers = [run.executor(i)["live"]["trainer"]["pid"] for i in range(3)]
    leases = live_leases(primus_env, run.app_id, 3)
    assert len(set(leases)) == 1 and leases[0] != 0, f"one lease for the host: {leases}"
    keeper, = keepers_of(run.app_id)

    keeper.send_signal(signal.SIGKILL)
    moved = wait_until(lambda: (now := live_leases(primus_env, run.app_id, 3)) and
                       len(set(now)) == 3 and leases[0] not in now and 0 not in now and now,
                       30, "each executor to move its key to a lease of its own")
    revoke(primus_env, leases[0])  # the host's lease ends: nobody depends on it any more
    assert live_leases(primus_env, run.app_id, 3) == moved
    status = run.status()
    assert status["status"]["state"] == "RUNNING"
    assert [run.executor(i)["live"]["trainer"]["pid"] for i in range(3)] == trainers, \
        "no trainer was stopped"
    run.go()  # the trainers finish: the application succeeds on its executors' own leases
    run.assert_invariants("SUCCEEDED", {0: 0, 1: 0, 2: 0})


def test_a_killed_executor_is_lost_at_once_not_after_the_ttl(primus_env, tmp_path):
    """Its keeper deletes its live key as its connection ends: with a TTL of 60 s, the
    application fails within 30."""
    run = submit(primus_env, tmp_path, "num: 2", ttl=60)
    for index in range(2):
        run.wait_running(index, attempt=1)
    os.kill(run.executor(1)["plan"]["process"]["pid"], signal.SIGKILL)
    status = run.wait_for_state("FAILED", timeout=30)
    assert status["executors"]["worker"][1]["plan"]["state"] == "LOST"
    assert_nothing_left(run.app_id)
