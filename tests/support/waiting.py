"""Bounded waits: polling for conditions that have no event to await, a watch for a key's."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from primus.store.api import Coordinator, KeyValue
from primus.store.recipes import key_values

T = TypeVar("T")


def wait_until(predicate: Callable[[], T | None], timeout: float, what: str,
               interval: float = 0.1, explain: Callable[[], str] | None = None) -> T:
    """Poll ``predicate`` (a process-table or file check) until it returns a true value; fail
    the test naming ``what`` after ``timeout`` seconds, with what ``explain`` then says (the
    logs of what did not happen)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}"
                + (f"\n{explain()}" if explain is not None else ""))


async def wait_until_async(predicate: Callable[[], T | None], timeout: float, what: str,
                           interval: float = 0.1) -> T:
    """:func:`wait_until` for a test running on an event loop: the loop's other tasks (a
    reader, a launcher's call) go on while it waits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")



async def key_settles(store: Coordinator, key: str, check: Callable[[KeyValue | None], T | None],
                      timeout: float, what: str) -> T:
    """Await writes to ``key`` (a watch, no polling) until ``check`` of the key as it is then
    (``None``: absent) gives a true value; fail naming ``what`` after ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout), \
                contextlib.aclosing(key_values(store, key)) as changes:
            async for _ in changes:
                if found := check(await store.get(key)):
                    return found
    except TimeoutError:
        pass
    pytest.fail(f"timed out after {timeout}s waiting for {what}")
