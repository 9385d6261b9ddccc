"""Protocol steps every component takes the same way, written once.

- :func:`key_values`: a key's value now, then each later one, read and watched from one
  revision so that no write in between is missed, resyncs folded in.
- :func:`unless`: await something unless a stop comes first.
- :func:`close_reading`: close an async generator a read of which may be under way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable
from typing import Any, TypeVar

from primus.store.api import Coordinator, EventType, Resync, Snapshot

T = TypeVar("T")


def _value_of(snapshot: Snapshot, key: str) -> bytes | None:
    return next((kv.value for kv in snapshot.kvs if kv.key == key), None)


async def key_values(store: Coordinator, key: str) -> AsyncGenerator[bytes | None, None]:
    """The value of ``key`` now (``None``: absent), then its value after each change.

    Read and watched from one revision: a write between the read and the watch is seen. After
    a resync (the watch fell behind a compaction) the value read then is yielded, which may
    repeat the last one. Close it (``contextlib.aclosing``) to end the watch.
    """
    snapshot = await store.get_prefix(key)
    yield _value_of(snapshot, key)
    events = store.watch_prefix(key, snapshot.revision + 1)
    try:
        async for event in events:
            if isinstance(event, Resync):
                yield _value_of(event.snapshot, key)
            elif event.key == key:
                yield event.value if event.type is EventType.PUT else None
    finally:
        await events.aclose()


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
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # lets it close what it opened (a watch)
    return None if task.cancelled() else task.result()


async def close_reading(source: AsyncGenerator[Any, None],
                        pending: asyncio.Future[Any] | None) -> None:
    """Close ``source``, cancelling first the read of it still under way (``pending``, a task
    awaiting its next item, whose outcome no one wants any more): an async generator cannot
    be closed while it is being read."""
    if pending is not None:
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pending
    await source.aclose()
