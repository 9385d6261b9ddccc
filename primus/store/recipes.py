"""Protocol steps every component takes the same way, written once.

- :func:`watching`: a watch opened before a read, so that nothing written after the read is
  missed nor seen late; the read and the watch's events then agree on one revision. Or, for a
  read made earlier (a page, a follower that resumes), a watch of every change after it.
- :func:`key_values`: a key's value now, then each later one, resyncs folded in.
- :func:`unless`: await something unless a stop comes first.
- :func:`close_reading`: close an async generator a read of which may be under way.
- :func:`campaign`: become leader at a key once no one holds it;
  :func:`lead_while_elected`: lead while elected, standing again after a loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from primus.store.api import (
    Coordinator,
    EventType,
    Get,
    Leadership,
    Lease,
    LeaseKeeper,
    Put,
    Resync,
    Snapshot,
    StoreError,
    StoreUnavailableError,
    WatchEvent,
    cancel_and_wait,
    key_missing,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Watch:
    """A watch of a prefix (see :func:`watching`): an async iterator of its events after
    :attr:`revision`, or after the revision given to :meth:`after`, and of a :class:`Resync`
    when it fell behind a compaction."""

    def __init__(self, events: AsyncGenerator[WatchEvent | Resync, None], revision: int) -> None:
        self._events = events
        self._pending: asyncio.Future[WatchEvent | Resync] | None = None
        self._reader: asyncio.Task[Any] | None = None  # a task reading by async for, if any
        self._after = revision
        self.revision = revision
        """The revision the watch sees every change after: the store's when the watch was
        created, for a watch from now."""

    def after(self, revision: int) -> Watch:
        """Skip the events up to ``revision`` (that of a read made since the watch was opened:
        they are in what was read); returns the watch, to iterate."""
        self._after = revision
        return self

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent | Resync:
        # Straight from the store's watch, with no turn of the event loop between the events
        # of one response: a reader folds a transaction's events (an executor's result and
        # its live key) before anything else runs. (:meth:`next_within` waits on a task,
        # which lets other tasks run between any two events.)
        while True:
            self._reader = asyncio.current_task()
            try:
                if self._pending is not None:  # a read begun before (opening, next_within)
                    item = await self._pending
                    self._pending = None
                else:
                    item = await anext(self._events)
            finally:
                self._reader = None
            if self._wanted(item):
                return item

    async def next_within(self, timeout: float | None) -> WatchEvent | Resync | None:
        """The next event (or resync), or ``None`` when none came within ``timeout`` seconds
        (``None``: no limit). The read goes on: the next call returns what it brings, also
        when this one was cancelled."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._pending is None:
                self._pending = asyncio.ensure_future(anext(self._events))
            if not self._pending.done():
                left = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait({self._pending}, timeout=left)
                if not done:
                    return None
            item = self._pending.result()
            self._pending = None
            if self._wanted(item):
                return item

    def _wanted(self, item: WatchEvent | Resync) -> bool:
        """Whether a reader gets ``item``: a resync, or an event after :meth:`after`'s
        revision."""
        return isinstance(item, Resync) or item.revision > self._after

    async def _open(self, created: asyncio.Future[int]) -> None:
        """Open the watch from now: once the store has created it, ``created`` holds its
        revision."""
        pending = self._pending = asyncio.ensure_future(anext(self._events))  # opens, then awaits
        either: set[asyncio.Future[Any]] = {pending, created}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not created.done():
            pending.result()  # the error that stopped the watch from opening
            raise AssertionError("unreachable: a watch yields nothing before it is opened")
        self.revision = created.result()

    async def _close(self) -> None:
        # A task of the block's reading the watch with async for (cancelled, or not yet):
        # the store's watch closes once its read has ended.
        reader = self._reader
        if reader is not None and reader is not asyncio.current_task() and not reader.done():
            reader.cancel()
            await asyncio.wait({reader})
        await close_reading(self._events, self._pending)


@contextlib.asynccontextmanager
async def watching(store: Coordinator, prefix: str, after: int = 0) -> AsyncIterator[Watch]:
    """A watch of ``prefix`` from now, already created in the store when the block starts;
    with ``after``, a watch of every change after that revision instead.

    Read inside the block, then iterate ``watch.after(read revision)``: a write that lands
    after the read is an event of the watch, which is never behind it. (A watch opened after
    the read, from the read's revision + 1, starts in the past whenever a write landed in
    between, and etcd serves such a watch only at its next catch-up round, up to 100 ms
    later.) The watch ends with the block.

    ``after`` is for a read made before the watch could be opened: by an earlier request
    (the page a live feed updates), or by a follower that resumes from the last revision it
    received. That watch starts in the past, and is not waited on to open.

    Raises:
        StoreUnavailableError: the store did not answer when a watch from now was opened.
    """
    created: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def opened(revision: int) -> None:
        created.set_result(revision)

    watch = Watch(store.watch_prefix(prefix, after + 1) if after
                  else store.watch_prefix(prefix, 0, opened=opened), after)
    try:
        if not after:
            await watch._open(created)
        yield watch
    finally:
        created.cancel()
        await watch._close()


def _value_of(snapshot: Snapshot, key: str) -> bytes | None:
    return next((kv.value for kv in snapshot.kvs if kv.key == key), None)


async def key_values(store: Coordinator, key: str) -> AsyncGenerator[bytes | None, None]:
    """The value of ``key`` now (``None``: absent), then its value after each change.

    Watched from before the read (:func:`watching`): a write between the read and the watch
    is seen, at once. After a resync (the watch fell behind a compaction) the value read then
    is yielded, which may repeat the last one. Close it (``contextlib.aclosing``) to end the
    watch. While etcd does not answer (a restart), the watch and the read are tried again, as
    the watch itself resumes later: the executors reading their keys outlive a restart shorter
    than their lease, and a lost lease is theirs to act on.
    """
    async with contextlib.AsyncExitStack() as stack:
        watch, snapshot = await _watch_and_read(store, key, stack)
        yield _value_of(snapshot, key)
        async for event in watch.after(snapshot.revision):
            if isinstance(event, Resync):
                yield _value_of(event.snapshot, key)
            elif event.key == key:
                yield event.value if event.type is EventType.PUT else None


async def _watch_and_read(store: Coordinator, prefix: str,
                          stack: contextlib.AsyncExitStack) -> tuple[Watch, Snapshot]:
    """A watch of ``prefix`` from now (closed with ``stack``) and a read of it under the watch,
    tried again, 0.1 s then up to 1 s apart, while etcd does not answer."""
    delay = 0.1
    while True:
        attempt = contextlib.AsyncExitStack()
        try:
            watch = await attempt.enter_async_context(watching(store, prefix))
            snapshot = await store.get_prefix(prefix)
        except StoreUnavailableError as exc:
            await attempt.aclose()
            logger.warning("reading %s: %s; trying again in %.1f s", prefix, exc, delay)
            await asyncio.sleep(delay)
            delay = min(2 * delay, 1.0)
            continue
        stack.push_async_callback(attempt.aclose)
        return watch, snapshot


async def unless(stop: asyncio.Event, awaitable: Awaitable[T]) -> T | None:
    """The result of ``awaitable``, or ``None`` if ``stop`` is set first (it is then
    cancelled)."""
    task = asyncio.ensure_future(awaitable)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            await cancel_and_wait(task)  # lets it close what it opened (a watch)
    return None if task.cancelled() else task.result()


async def close_reading(source: AsyncGenerator[Any, None],
                        pending: asyncio.Future[Any] | None) -> None:
    """Close ``source``, cancelling first the read of it still under way (``pending``, a task
    awaiting its next item, whose outcome no one wants any more): an async generator cannot
    be closed while it is being read."""
    if pending is not None:
        await cancel_and_wait(pending)
    await source.aclose()


async def campaign(store: Coordinator, key: str, value: bytes, lease: Lease) -> Leadership:
    """Become leader at ``key``: create it, attached to ``lease``, once it is absent.

    Waits (watching ``key``) while another candidate holds it.
    """
    async with watching(store, key) as watch:
        while True:
            result = await store.txn([key_missing(key)], [Put(key, value, lease.id)],
                                     [Get(key)])
            if result.succeeded:
                return Leadership(key, result.revision, lease.id)
            holder = result.reads[0][0] if result.reads and result.reads[0] else None
            if holder is not None and holder.lease == lease.id:
                return Leadership(key, holder.create_revision, lease.id)
            async for event in watch.after(result.revision):
                if isinstance(event, Resync) or event.type is EventType.DELETE:
                    break


async def lead_while_elected(store: Coordinator, key: str, me: bytes, ttl: int,
                             lead: Callable[[Leadership, asyncio.Event], Awaitable[None]],
                             name: str) -> None:
    """Stand for the leadership at ``key`` (as ``me``, the leader record the key then holds,
    on a lease of ``ttl`` seconds); while elected, run ``lead(leadership, lost)``; stand again
    after the lease is lost or ``lead`` failed; until cancelled. ``name`` prefixes the log
    lines (``admission``).

    A failure of ``lead`` (a bug) gives the lease up, so that another candidate leads, and
    this one stands again a second later; so does etcd out of reach, which no event says the
    end of.
    """
    while True:
        try:
            lease = await store.grant_lease(ttl)
            keeper = LeaseKeeper(store, lease)
            keeper.start()
            try:
                leadership = await campaign(store, key, me, lease)
                logger.info("[%s] leads as %s", name, me.decode())
                leading = asyncio.ensure_future(lead(leadership, keeper.lost))
                lost = asyncio.ensure_future(keeper.lost.wait())
                try:
                    await asyncio.wait({leading, lost}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    leading.cancel()
                    lost.cancel()
                error = leading.exception() if leading.done() and not leading.cancelled() \
                    else None
                if error is not None:
                    raise error
            finally:
                await keeper.stop(revoke=True)
        except StoreError as exc:
            logger.warning("[%s] %s; standing again", name, exc)
            await asyncio.sleep(1.0)
        except Exception:
            logger.exception("[%s] leader failed; standing again", name)
            await asyncio.sleep(1.0)
