"""Contract of :class:`Coordinator`, run against a real etcd."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from primus.config.etcd import EtcdConfig
from primus.store.api import (
    Delete,
    EventType,
    Get,
    LeaseKeeper,
    LeaseState,
    Put,
    Resync,
    StoreError,
    StoreUnavailableError,
    key_created_at,
    key_missing,
    key_unchanged_since,
)
from primus.store.embedded import find_etcd_binary, restart_etcd, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from primus.store.recipes import campaign


async def next_events(watch, count: int, timeout: float = 10.0) -> list:
    """The next ``count`` items of a watch, failing clearly if they do not come in time."""
    items = []

    async def take() -> None:
        async for item in watch:
            items.append(item)
            if len(items) == count:
                return

    try:
        await asyncio.wait_for(take(), timeout)
    except asyncio.TimeoutError:
        pytest.fail(f"expected {count} watch items within {timeout}s, got {items}")
    return items


async def test_put_returns_revision_and_get_reads_it(store, prefix):
    revision = await store.put(f"{prefix}/a", b"1")
    kv = await store.get(f"{prefix}/a")
    assert kv is not None and kv.value == b"1"
    assert kv.mod_revision == kv.create_revision == revision
    assert await store.get(f"{prefix}/missing") is None


async def test_get_prefix_reads_every_key_at_one_revision(store, prefix):
    for name in ("x", "y", "z"):
        last = await store.put(f"{prefix}/{name}", name.encode())
    await store.put(f"{prefix}-sibling", b"not under the prefix")
    snapshot = await store.get_prefix(f"{prefix}/")
    assert [kv.key for kv in snapshot.kvs] == [f"{prefix}/x", f"{prefix}/y", f"{prefix}/z"]
    assert snapshot.revision >= last
    assert await store.list_keys(f"{prefix}/") == [kv.key for kv in snapshot.kvs]


async def test_list_keys_modified_after_a_revision_lists_only_those_written_since(store,
                                                                                  prefix):
    first = await store.put(f"{prefix}/a", b"1")
    await store.put(f"{prefix}/b", b"2")
    last = await store.put(f"{prefix}/a", b"3")
    assert await store.list_keys(f"{prefix}/", modified_after=first) == [f"{prefix}/a",
                                                                         f"{prefix}/b"]
    assert await store.list_keys(f"{prefix}/", modified_after=last - 1) == [f"{prefix}/a"]
    assert await store.list_keys(f"{prefix}/", modified_after=last) == []


async def test_get_prefix_at_a_past_revision_reads_the_keys_as_they_were(store, prefix):
    await store.put(f"{prefix}/a", b"first")
    then = await store.put(f"{prefix}/b", b"first")
    await store.put(f"{prefix}/a", b"second")
    await store.delete(f"{prefix}/b")
    await store.put(f"{prefix}/c", b"later")

    past = await store.get_prefix(f"{prefix}/", revision=then)

    assert [(kv.key, kv.value) for kv in past.kvs] == [(f"{prefix}/a", b"first"),
                                                       (f"{prefix}/b", b"first")]


async def test_get_prefix_pages_in_key_order_and_count_reads_no_values(store, prefix):
    for name in ("a", "b", "c", "d"):
        await store.put(f"{prefix}/{name}", name.encode())
    await store.put(f"{prefix}-sibling", b"not under the prefix")

    first = await store.get_prefix(f"{prefix}/", limit=2)
    rest = await store.get_prefix(f"{prefix}/", limit=2, after=first.kvs[-1].key)
    none_left = await store.get_prefix(f"{prefix}/", after=f"{prefix}/d")

    assert [kv.value for kv in first.kvs + rest.kvs] == [b"a", b"b", b"c", b"d"]
    assert none_left.kvs == ()
    assert await store.count_prefix(f"{prefix}/") == 4
    assert await store.count_prefix(f"{prefix}/nothing/") == 0


async def test_a_read_of_the_last_keys_under_a_prefix_gives_them_in_key_order(store, prefix):
    for i in range(10):
        await store.put(f"{prefix}/events/{i:03}", str(i).encode())
    last = Get(f"{prefix}/events/", prefix=True, limit=3, last=True)
    alone = await store.txn([], [last, Get(f"{prefix}/events/", prefix=True, limit=2)])
    guarded = await store.txn([key_missing(f"{prefix}/none")], [last])
    for reads in (alone.reads[0], guarded.reads[0]):
        assert [kv.value for kv in reads] == [b"7", b"8", b"9"]
    assert [kv.value for kv in alone.reads[1]] == [b"0", b"1"]


async def test_delete_prefix_removes_only_keys_under_it(store, prefix):
    await store.put(f"{prefix}/a/1", b"")
    await store.put(f"{prefix}/a/2", b"")
    await store.put(f"{prefix}/b", b"")
    assert await store.delete(f"{prefix}/a/", prefix=True) == 2
    assert await store.list_keys(f"{prefix}/") == [f"{prefix}/b"]


async def test_txn_runs_success_branch_only_when_every_compare_holds(store, prefix):
    key = f"{prefix}/k"
    created = await store.txn([key_missing(key)], [Put(key, b"first")], [Get(key)])
    assert created.succeeded
    again = await store.txn([key_missing(key)], [Put(key, b"second")], [Get(key)])
    assert not again.succeeded
    assert again.reads[0][0].value == b"first"
    guarded = await store.txn([key_created_at(key, created.revision)], [Delete(key)])
    assert guarded.succeeded and await store.get(key) is None


async def test_unchanged_since_revision_0_holds_for_a_missing_key_only(store, prefix):
    # A record read as absent is guarded by the revision it was read at, 0, as one read present
    # is by its own: no writer needs key_missing beside it.
    key = f"{prefix}/k"
    created = await store.txn([key_unchanged_since(key, 0)], [Put(key, b"first")])
    assert created.succeeded
    again = await store.txn([key_unchanged_since(key, 0)], [Put(key, b"second")])
    assert not again.succeeded
    kept = await store.get(key)
    assert kept is not None and kept.value == b"first"
    moved = await store.txn([key_unchanged_since(key, kept.mod_revision)], [Put(key, b"third")])
    assert moved.succeeded


async def test_keys_attached_to_a_lease_vanish_when_it_is_revoked(store, prefix):
    lease = await store.grant_lease(30)
    await store.put(f"{prefix}/leased", b"v", lease=lease.id)
    assert await store.refresh_lease(lease.id) > 0
    await store.revoke_lease(lease.id)
    assert await store.get(f"{prefix}/leased") is None
    assert await store.refresh_lease(lease.id) == 0


async def test_keys_attached_to_a_lease_vanish_when_it_expires(store, prefix):
    lease = await store.grant_lease(2)
    await store.put(f"{prefix}/leased", b"v", lease=lease.id)
    start = await store.get_prefix(f"{prefix}/")
    events = await next_events(store.watch_prefix(f"{prefix}/", start.revision + 1), 1,
                               timeout=10)
    assert events[0].type is EventType.DELETE and events[0].key == f"{prefix}/leased"


async def test_watch_delivers_puts_and_deletes_in_order_from_a_revision(store, prefix):
    start = await store.put(f"{prefix}/before", b"0")
    await store.put(f"{prefix}/a", b"1")
    await store.delete(f"{prefix}/a")
    events = await next_events(store.watch_prefix(f"{prefix}/", start + 1), 2)
    assert [(e.type, e.key, e.value) for e in events] == [
        (EventType.PUT, f"{prefix}/a", b"1"), (EventType.DELETE, f"{prefix}/a", b"")]
    assert events[0].revision < events[1].revision


async def test_a_watch_being_opened_is_cancelled_whenever_the_cancel_arrives(store, prefix):
    """A cancellation that arrives at any step of opening a watch ends the watching task (aetcd
    waits with ``asyncio.wait_for``, which can swallow it on Python 3.11: CPython gh-86296)."""
    revision = await store.put(f"{prefix}/k", b"v")

    async def watch() -> None:
        async for _ in store.watch_prefix(f"{prefix}/none/", revision + 1):
            pass

    for steps in range(60):  # cancel after 0, 1, 2... turns of the event loop
        task = asyncio.create_task(watch())
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        try:
            async with asyncio.timeout(5):
                await asyncio.gather(task, return_exceptions=True)
        except TimeoutError:
            pytest.fail(f"a watch cancelled after {steps} loop turns was still running 5 s later")
        assert task.cancelled(), f"cancelled after {steps} turns, the task ended otherwise"


async def test_watch_from_a_compacted_revision_relists_the_prefix(store, prefix, etcd_server):
    first = await store.put(f"{prefix}/a", b"old")
    latest = await store.put(f"{prefix}/a", b"new")
    subprocess.run([str(find_etcd_binary("etcdctl")), "--endpoints", etcd_server.client_url,
                    "compact", str(latest)], check=True, capture_output=True,
                   env={**os.environ, "ETCDCTL_API": "3"})
    items = await next_events(store.watch_prefix(f"{prefix}/", first), 1)
    assert isinstance(items[0], Resync)
    assert [(kv.key, kv.value) for kv in items[0].snapshot.kvs] == [(f"{prefix}/a", b"new")]


async def test_watch_resumes_after_etcd_restarts_without_missing_an_event(tmp_path):
    _, info = start_etcd(tmp_path / "data", tmp_path / "etcd.log")
    store = await EtcdCoordinator.connect(EtcdConfig((info.client_url,), request_timeout=2))
    try:
        start = await store.put("/w/seed", b"")
        watch = store.watch_prefix("/w/", start + 1, retry_interval=0.1)
        await store.put("/w/1", b"before")
        assert [e.key for e in await next_events(watch, 1)] == ["/w/1"]
        stop_pid(info.pid)
        _, info = restart_etcd(info)
        writer = await EtcdCoordinator.connect(EtcdConfig((info.client_url,)))
        await writer.put("/w/2", b"after")
        await writer.put("/w/3", b"after")
        await writer.close()
        events = await next_events(watch, 2, timeout=20)
        assert [e.key for e in events] == ["/w/2", "/w/3"]
        await watch.aclose()
    finally:
        await store.close()
        stop_pid(info.pid)


async def test_client_is_back_within_a_second_of_etcd_returning_after_a_long_outage(tmp_path):
    process, info = start_etcd(tmp_path / "data", tmp_path / "etcd.log")
    store = await EtcdCoordinator.connect(EtcdConfig((info.client_url,), request_timeout=1))
    try:
        await store.put("/r/k", b"v")
        process.kill()
        process.wait()
        # Calls keep failing meanwhile, as a lease keeper's would; 10 s is long enough for
        # gRPC's default reconnect backoff (1 s, x1.6 each time) to have grown past 4 s.
        down_until = time.monotonic() + 10
        while time.monotonic() < down_until:
            with pytest.raises(StoreUnavailableError):
                await store.get("/r/k")
            await asyncio.sleep(0.5)
        process, info = await asyncio.to_thread(restart_etcd, info)
        back = time.monotonic()
        while True:
            try:
                assert (await store.get("/r/k")).value == b"v"
                break
            except StoreUnavailableError:
                assert time.monotonic() - back < 1.5, "the client stayed away from etcd"
                await asyncio.sleep(0.05)
    finally:
        await store.close()
        stop_pid(info.pid)


async def test_unreachable_endpoint_fails_fast_naming_it():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{sock.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match=closed):
        await EtcdCoordinator.connect(EtcdConfig((closed,), request_timeout=2))
    assert time.monotonic() - started < 5


async def test_endpoint_that_never_answers_times_out_naming_it():
    with socket.socket() as silent:  # accepts TCP connections, never speaks HTTP/2
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match=endpoint):
            await EtcdCoordinator.connect(EtcdConfig((endpoint,), request_timeout=1.5))
        assert time.monotonic() - started < 5


async def test_connect_falls_back_to_the_next_endpoint(etcd_server):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{sock.getsockname()[1]}"
    store = await EtcdCoordinator.connect(EtcdConfig((closed, etcd_server.client_url)))
    assert store.endpoint == etcd_server.client_url
    await store.close()


async def test_second_candidate_leads_only_after_the_first_lease_ends(store, prefix):
    key = f"{prefix}/leader"
    first_lease = await store.grant_lease(30)
    first = await campaign(store, key, b"first", first_lease)
    second_lease = await store.grant_lease(30)
    second = asyncio.ensure_future(campaign(store, key, b"second", second_lease))
    done, _ = await asyncio.wait({second}, timeout=1.0)
    assert not done, "second candidate must wait while the first leads"
    await store.revoke_lease(first_lease.id)
    leadership = await asyncio.wait_for(second, 10)
    assert (await store.get(key)).value == b"second"
    deposed = await store.txn([first.guard()], [Put(f"{prefix}/write", b"stale")])
    assert not deposed.succeeded, "a deposed leader's guarded write must be rejected"
    assert (await store.txn([leadership.guard()], [Put(f"{prefix}/write", b"ok")])).succeeded
    await store.revoke_lease(second_lease.id)


async def test_lease_keeper_keeps_a_short_lease_alive(store, prefix):
    lease = await store.grant_lease(2)
    keeper = LeaseKeeper(store, lease, margin=0.5)
    keeper.start()
    await store.put(f"{prefix}/kept", b"", lease=lease.id)
    start = await store.get_prefix(f"{prefix}/")
    watch = store.watch_prefix(f"{prefix}/", start.revision + 1)
    deleted = asyncio.ensure_future(next_events(watch, 1, timeout=5))
    done, _ = await asyncio.wait({deleted}, timeout=4.5)  # more than twice the TTL
    assert not done, "the kept lease expired"
    assert keeper.state is LeaseState.HEALTHY
    deleted.cancel()
    await keeper.stop(revoke=True)
    assert await store.get(f"{prefix}/kept") is None


async def test_a_leader_cancelled_gives_its_key_up_at_once(store, prefix):
    # As an AM's admission leadership ends with the AM: its task cancelled, the keeper
    # stopped in its finally. The key must go then, not when the lease expires.
    lease = await store.grant_lease(30)
    keeper = LeaseKeeper(store, lease)
    keeper.start()
    await campaign(store, f"{prefix}/leader", b"me", lease)

    leads = asyncio.Event()

    async def lead() -> None:
        try:
            leads.set()
            await asyncio.Event().wait()
        finally:
            await keeper.stop(revoke=True)

    leading = asyncio.ensure_future(lead())
    await asyncio.wait_for(leads.wait(), 5)  # it runs, inside its try
    leading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leading
    assert await store.get(f"{prefix}/leader") is None, "the lease was revoked"


async def test_lease_keeper_reports_lost_when_the_lease_is_revoked_elsewhere(store):
    lease = await store.grant_lease(3)
    reasons: list[str] = []
    keeper = LeaseKeeper(store, lease, on_lost=[reasons.append])
    keeper.start()
    await store.revoke_lease(lease.id)
    await asyncio.wait_for(keeper.lost.wait(), 5)
    assert keeper.state is LeaseState.LOST and "no longer knows" in reasons[0]
    await keeper.stop(revoke=False)


async def test_lease_keeper_reports_lost_before_the_ttl_when_etcd_stops_answering(tmp_path):
    _, info = start_etcd(tmp_path / "data", tmp_path / "etcd.log")
    store = await EtcdCoordinator.connect(EtcdConfig((info.client_url,), request_timeout=1))
    try:
        lease = await store.grant_lease(3)
        keeper = LeaseKeeper(store, lease, margin=1.0)
        keeper.start()
        os.kill(info.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        await asyncio.wait_for(keeper.lost.wait(), 6)
        assert time.monotonic() - frozen <= 3.0, "LOST must be declared within TTL - margin"
        await keeper.stop(revoke=False)
    finally:
        os.kill(info.pid, signal.SIGCONT)
        await store.close()
        stop_pid(info.pid)


def test_etcd_binary_is_found():
    assert Path(find_etcd_binary()).is_file()


async def test_a_request_past_etcds_size_limit_is_a_clear_store_error(store, prefix):
    with pytest.raises(StoreError, match="refused a request as too large"):
        await store.put(f"{prefix}/big", b"x" * (3 << 20))

    assert await store.get(f"{prefix}/big") is None
