"""The host's lease (``primus/executor/host_lease.py``) against a real etcd: a keeper served in
this process on its real Unix socket, executors' sides joining it, keys under its lease."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from primus.executor import host_lease
from primus.executor.host_lease import HostLeaseKeeper, SharedLease
from primus.state.records import ExecutorLive, TaskOwner, encode
from primus.state.states import ExecutorState
from primus.store.api import Coordinator, KeyValue
from tests.support.waiting import key_settles, wait_until_async


class Served:
    """A keeper serving in this test's event loop, and where executors find it."""

    def __init__(self, keeper: HostLeaseKeeper, path: str, task: asyncio.Task[str]) -> None:
        self.keeper = keeper
        self.path = path
        self.task = task

    @property
    def lease_id(self) -> int:
        return self.keeper.lease.id


async def serve(store: Coordinator, directory: Path, ttl: int, idle: float = 60) -> Served:
    keeper = HostLeaseKeeper(store, ttl, str(directory), idle=idle)
    task = asyncio.create_task(keeper.serve(host_lease.listen(str(directory))))
    async with asyncio.timeout(10):
        await asyncio.wait([task, asyncio.ensure_future(keeper.leased.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
    assert keeper.leased.is_set(), f"the keeper took no lease: {task.result()}"
    return Served(keeper, str(directory / host_lease.SOCKET_NAME), task)


@pytest.fixture
async def served(store, tmp_path) -> AsyncIterator[Served]:
    made = await serve(store, tmp_path, ttl=30)
    yield made
    made.keeper.stop()
    await made.task


async def register(store: Coordinator, key: str, lease: int) -> None:
    """A live key as an executor of this process registers it."""
    live = ExecutorLive(attempt=1, host="h", address="127.0.0.1", pid=os.getpid(),
                        state=ExecutorState.RUNNING, registered_time=0.0)
    await store.put(key, encode(live), lease)


async def test_executors_of_a_host_hold_one_lease_and_a_departed_ones_keys_go_at_once(
        store, prefix, served):
    first = await SharedLease.join(store, served.path, f"{prefix}/a/live",
                                   owners=[f"{prefix}/data/s/owner/"])
    second = await SharedLease.join(store, served.path, f"{prefix}/b/live")
    assert first is not None and second is not None
    assert first.lease.id == second.lease.id == served.lease_id
    for shared in (first, second):
        shared.start()
        await register(store, shared.live_key, shared.lease.id)
    claim = TaskOwner(role="w", index=0, attempt=1, since=0.0, pid=os.getpid())
    await store.put(f"{prefix}/data/s/owner/t1", encode(claim), served.lease_id)
    await store.put(f"{prefix}/data/other/owner/t2", encode(claim), served.lease_id)
    await wait_until_async(lambda: served.keeper.holders == 2, 10, "both executors held")

    await first.stop()  # as an executor that died: its connection ends
    # The TTL is 30 s: a key gone within 10 s went because the keeper deleted it.
    await key_settles(store, first.live_key, _missing, 10, "the first key deleted")
    # ... and its task claims after it, in a transaction of their own.
    await key_settles(store, f"{prefix}/data/s/owner/t1", _missing, 10,
                      "its task claim deleted too")
    assert (await store.get(second.live_key)).lease == served.lease_id
    assert await store.get(f"{prefix}/data/other/owner/t2") is not None, \
        "a claim under a prefix the departed executor did not read stays"
    await second.stop()


def _missing(kv: KeyValue | None) -> bool:
    return kv is None


async def test_an_executor_silent_for_the_ttl_loses_its_key_and_is_told_so(store, prefix,
                                                                          tmp_path):
    served = await serve(store, tmp_path, ttl=2)
    key = f"{prefix}/silent/live"
    reader, writer = await asyncio.open_unix_connection(served.path)
    writer.write(json.dumps({"live": key}).encode() + b"\n")  # then never a heartbeat
    granted = json.loads(await reader.readline())
    await register(store, key, granted["lease"])
    said = {}
    async with asyncio.timeout(10):
        while "lost" not in said:
            said = json.loads(await reader.readline())
    assert "heard nothing from this executor for 2s" in said["lost"]
    await key_settles(store, key, _missing, 10, "the silent executor's key deleted")
    writer.close()
    served.keeper.stop()
    await served.task


async def test_a_key_another_process_registered_is_not_deleted_when_a_holder_leaves(
        store, prefix, served):
    """The keeper deletes a departed holder's key only when it is that holder's (its pid)."""
    key = f"{prefix}/other/live"
    shared = await SharedLease.join(store, served.path, key)
    shared.start()
    live = ExecutorLive(attempt=2, host="h", address="127.0.0.1", pid=1,
                        state=ExecutorState.RUNNING, registered_time=0.0)
    await store.put(key, encode(live), served.lease_id)
    await shared.stop()
    await wait_until_async(lambda: served.keeper.holders == 0, 10,
                           "the holder to leave (a holder counts until its key is settled)")
    assert await store.get(key) is not None


@pytest.mark.parametrize("gone", ["its connection ends", "it tells no renewal"])
async def test_when_the_keeper_is_gone_each_executor_moves_its_key_to_a_lease_of_its_own(
        store, prefix, tmp_path, gone):
    served = await serve(store, tmp_path, ttl=6)  # 2 s for its own renewal when taking over
    shared = await SharedLease.join(store, served.path, f"{prefix}/moved/live")
    shared.start()
    await register(store, shared.live_key, shared.lease.id)
    host_lease_id = served.lease_id

    if gone == "its connection ends":
        served.keeper.stop()  # its lease is left to expire
        await served.task
    else:  # stuck: the connection stays, the renewals stop
        await served.keeper.renewals.stop(revoke=False)
    moved = await key_settles(
        store, shared.live_key, lambda kv: kv and kv.lease not in (0, host_lease_id) and kv.lease,
        10, "the key to move to a lease of the executor's own")
    await store.revoke_lease(host_lease_id)  # the host's lease ends: the key stays
    assert (await store.get(shared.live_key)).lease == moved
    assert not shared.lost.is_set()
    await shared.stop()
    assert await store.get(shared.live_key) is None, "its own lease is revoked as it stops"
    if not served.task.done():
        served.keeper.stop()
        await served.task


async def test_a_lost_host_lease_fences_every_executor_holding_it(store, prefix, tmp_path):
    served = await serve(store, tmp_path, ttl=2)
    holders = [await SharedLease.join(store, served.path, f"{prefix}/{i}/live") for i in range(3)]
    reasons: list[str] = []
    for shared in holders:
        shared.on_lost.append(reasons.append)
        shared.start()
    await store.revoke_lease(served.lease_id)  # as etcd expiring it while the host was away
    await wait_until_async(lambda: all(s.lost.is_set() for s in holders), 10,
                           "every executor to be told the lease is lost")
    assert len(reasons) == 3 and "no longer knows the lease" in reasons[0]
    assert await served.task == "lease lost"
    for shared in holders:
        await shared.stop()


async def test_an_idle_keeper_revokes_its_lease_and_ends(store, tmp_path):
    served = await serve(store, tmp_path, ttl=10, idle=0.5)
    assert await asyncio.wait_for(served.task, 10) == "no executor for 0.5s"
    assert await store.refresh_lease(served.lease_id) == 0


async def test_an_executor_whose_keeper_does_not_answer_keeps_a_lease_of_its_own(
        store, prefix, tmp_path):
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(tmp_path / "mute.sock"))
    mute.listen(1)  # accepts in the kernel, never answers
    kept = await host_lease.keep_lease(store, 5, f"{prefix}/x/live", str(tmp_path / "mute.sock"),
                                       join_timeout=0.5)
    assert not isinstance(kept, SharedLease)
    assert kept.lease.ttl == 5
    await kept.stop()
    mute.close()


async def test_an_executor_whose_keeper_stalled_after_etcd_ended_the_lease_is_fenced(
        store, prefix, tmp_path):
    """Taking over needs a renewal first: keys that went with the lease are not brought back
    on a lease of the executor's own (a replacement may already run)."""
    served = await serve(store, tmp_path, ttl=3)
    shared = await SharedLease.join(store, served.path, f"{prefix}/late/live")
    shared.start()
    await register(store, shared.live_key, shared.lease.id)
    await served.keeper.renewals.stop(revoke=False)  # stuck: nothing renews, nothing is told
    await store.revoke_lease(served.lease_id)  # etcd ends the lease, the live key with it
    await wait_until_async(shared.lost.is_set, 10, "the executor to be fenced")
    assert shared.own is None, "no lease of its own was taken"
    assert await store.get(shared.live_key) is None
    await shared.stop()
    served.keeper.stop()
    await served.task
