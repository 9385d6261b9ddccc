"""The store recipes (:mod:`primus.store.recipes`) against a real etcd."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

import pytest

from primus.config.etcd import EtcdConfig
from primus.store.api import EventType, Put, StoreUnavailableError, WatchEvent
from primus.store.embedded import restart_etcd, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from primus.store.recipes import close_reading, key_values, unless, watching


async def next_item(iterator, what: str, timeout: float = 10.0):
    """The next item of ``iterator``, failing clearly if it does not come in time."""
    try:
        async with asyncio.timeout(timeout):
            return await anext(iterator)
    except TimeoutError:
        pytest.fail(f"no {what} within {timeout}s")


async def test_watching_is_opened_before_the_read_so_a_write_between_is_read_not_repeated(
        store, prefix):
    await store.put(f"{prefix}/a", b"1")
    async with watching(store, f"{prefix}/") as watch:
        between = await store.put(f"{prefix}/a", b"2")  # after the watch, before the read
        snapshot = await store.get_prefix(f"{prefix}/")
        assert watch.revision < between <= snapshot.revision
        assert [kv.value for kv in snapshot.kvs] == [b"2"]
        after = await store.put(f"{prefix}/b", b"3")
        event = await next_item(watch.after(snapshot.revision), "event for the write after")
    assert isinstance(event, WatchEvent)
    assert (event.key, event.value, event.revision) == (f"{prefix}/b", b"3", after)


async def test_watching_passes_every_event_after_the_revision_it_is_given(store, prefix):
    async with watching(store, f"{prefix}/") as watch:
        first = await store.put(f"{prefix}/a", b"1")
        await store.delete(f"{prefix}/a")
        events = [await next_item(watch.after(watch.revision), "event") for _ in range(2)]
    assert [(e.type, e.key, e.revision > watch.revision) for e in events] == [
        (EventType.PUT, f"{prefix}/a", True), (EventType.DELETE, f"{prefix}/a", True)]
    assert events[0].revision == first


async def test_a_reader_gets_the_events_of_one_transaction_with_no_other_task_run_between(
        store, prefix):
    # The AM decides between folds: an executor's result without its live key of the same
    # transaction would send it to start the next attempt elsewhere, not in place.
    seen: list[str] = []
    folded = asyncio.Event()
    looks: list[int] = []  # how many events another task found folded, each time it ran
    async with watching(store, f"{prefix}/") as watch:

        async def follow() -> None:
            async for event in watch:
                seen.append(event.key)
                folded.set()

        async def look() -> None:
            while True:
                looks.append(len(seen))
                await asyncio.sleep(0)

        following, looking = asyncio.ensure_future(follow()), asyncio.ensure_future(look())
        try:
            for round_ in range(20):
                await store.txn([], [Put(f"{prefix}/result", str(round_).encode()),
                                     Put(f"{prefix}/live", str(round_).encode())])
                async with asyncio.timeout(10):
                    while len(seen) < 2 * (round_ + 1):
                        folded.clear()
                        await folded.wait()
        finally:
            following.cancel()
            looking.cancel()
            await asyncio.gather(following, looking, return_exceptions=True)
    split = sum(1 for n in looks if n % 2)
    assert not split, f"another task ran {split} times between a transaction's two events"


async def test_a_watch_closes_while_another_task_reads_it_cancelled_or_not(store, prefix):
    for cancel_first in (True, False):
        async with watching(store, f"{prefix}/") as watch:
            reading = asyncio.ensure_future(anext(aiter(watch)))
            await asyncio.sleep(0)  # it is reading now
            if cancel_first:
                reading.cancel()  # and not awaited before the block ends, as a leader does
        assert reading.cancelled(), f"cancel first: {cancel_first}: {reading}"


async def test_watching_after_a_revision_sees_every_change_since_then(store, prefix):
    read = await store.put(f"{prefix}/a", b"1")  # read by an earlier request, say
    since = await store.put(f"{prefix}/b", b"2")
    async with watching(store, f"{prefix}/", after=read) as watch:
        later = await store.put(f"{prefix}/c", b"3")
        events = [await next_item(watch, "event") for _ in range(2)]
    assert watch.revision == read
    assert [(e.key, e.revision) for e in events] == [(f"{prefix}/b", since),
                                                     (f"{prefix}/c", later)]


async def test_next_within_gives_none_when_nothing_came_and_keeps_the_read_for_the_next_call(
        store, prefix):
    async with watching(store, f"{prefix}/") as watch:
        assert await watch.next_within(0.2) is None
        waiting = asyncio.ensure_future(watch.next_within(None))
        await asyncio.sleep(0)  # one turn of the loop: it is waiting now
        waiting.cancel()  # a reader that gave up: the read it started goes on
        written = await store.put(f"{prefix}/a", b"1")
        async with asyncio.timeout(10):
            event = await watch.next_within(10)
    assert isinstance(event, WatchEvent)
    assert (event.key, event.revision) == (f"{prefix}/a", written)


async def test_key_values_yields_the_value_now_then_each_change_and_none_once_deleted(
        store, prefix):
    key = f"{prefix}/k"
    await store.put(key, b"now")
    async with contextlib.aclosing(key_values(store, key)) as values:
        assert await next_item(values, "the value now") == b"now"
        await store.put(f"{key}-other", b"ignored")  # under the key as a prefix, not the key
        await store.put(key, b"later")
        assert await next_item(values, "the changed value") == b"later"
        await store.delete(key)
        assert await next_item(values, "the deletion") is None


async def test_key_values_of_a_missing_key_starts_with_none(store, prefix):
    async with contextlib.aclosing(key_values(store, f"{prefix}/none")) as values:
        assert await next_item(values, "the value now") is None


async def test_unless_returns_none_and_closes_the_watch_when_stopped_first(store, prefix):
    stop = asyncio.Event()

    async def never() -> bytes | None:
        async with contextlib.aclosing(key_values(store, f"{prefix}/k")) as values:
            async for value in values:
                if value == b"never written":
                    return value
        return None

    waiting = asyncio.ensure_future(unless(stop, never()))
    await store.put(f"{prefix}/k", b"something else")
    stop.set()
    async with asyncio.timeout(10):
        assert await waiting is None


async def test_a_watch_from_now_resumes_where_it_started_and_fails_fast_when_unreachable(
        tmp_path):
    _, info = start_etcd(tmp_path / "data", tmp_path / "etcd.log")
    store = await EtcdCoordinator.connect(EtcdConfig((info.client_url,), request_timeout=2))
    try:
        async with watching(store, "/w/") as watch:
            snapshot = await store.get_prefix("/w/")
            stop_pid(info.pid)
            _, info = restart_etcd(info)
            writer = await EtcdCoordinator.connect(EtcdConfig((info.client_url,)))
            written = await writer.put("/w/after-restart", b"")
            await writer.close()
            event = await next_item(watch.after(snapshot.revision), "event after a restart",
                                    timeout=20)
        assert isinstance(event, WatchEvent)
        assert (event.key, event.revision) == ("/w/after-restart", written)
        stop_pid(info.pid)
        with pytest.raises(StoreUnavailableError):
            async with asyncio.timeout(20):
                async with watching(store, "/w/"):
                    pytest.fail("a watch was opened with etcd stopped")
    finally:
        await store.close()
        stop_pid(info.pid)


async def test_key_values_started_while_etcd_restarts_yields_once_it_answers(tmp_path):
    _, info = start_etcd(tmp_path / "data", tmp_path / "etcd.log")
    store = await EtcdCoordinator.connect(EtcdConfig((info.client_url,), request_timeout=2))
    try:
        await store.put("/k", b"before")
        stop_pid(info.pid)
        values = key_values(store, "/k")
        first = asyncio.ensure_future(anext(values))
        done, _ = await asyncio.wait({first}, timeout=3)  # past its first tries
        assert not done, f"it gave up while etcd was down: {first.exception()!r}"

        _, info = restart_etcd(info)

        async with asyncio.timeout(20):
            assert await first == b"before"
        await store.put("/k", b"after")
        assert await next_item(values, "the change after the restart") == b"after"
        await values.aclose()
    finally:
        await store.close()
        stop_pid(info.pid)


async def test_a_task_cancelled_while_it_waits_for_a_cancelled_read_stays_cancelled():
    let_go = asyncio.Event()

    async def slow_to_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await let_go.wait()  # cleans up before it ends
            raise

    async def source() -> AsyncGenerator[int, None]:
        yield 1

    pending = asyncio.ensure_future(slow_to_cancel())
    await asyncio.sleep(0)  # it waits in its body
    closer = asyncio.ensure_future(close_reading(source(), pending))
    await asyncio.sleep(0)  # the closer waits for the read to end
    closer.cancel()  # as a server stopping cancels its tasks
    let_go.set()

    async with asyncio.timeout(5):
        await asyncio.wait({closer})
    assert closer.cancelled(), "the closer's own cancellation was swallowed: it went on"


async def test_a_renewal_waiting_its_turn_on_a_stream_dropped_meanwhile_fails_as_unavailable(
        store):
    # Two leases renew on the connection's one keepalive stream; the first one's cancel drops
    # it while the second waits to write (a server stopping its two leaderships at once).
    first, second = await store.grant_lease(30), await store.grant_lease(30)
    keepalives = store._keepalives
    assert await store.refresh_lease(first.id) > 0  # the stream is open
    async with keepalives._writing:  # the first renewal is writing
        waiting = asyncio.ensure_future(store.refresh_lease(second.id))
        await asyncio.sleep(0.1)  # (only lets it reach the lock; the assertion below waits)
        keepalives.close()  # the first renewal is cancelled: its stream is dropped
    with pytest.raises(StoreUnavailableError):
        async with asyncio.timeout(10):
            await waiting
    assert await store.refresh_lease(second.id) > 0, "the next renewal opens a new stream"

