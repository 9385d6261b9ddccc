"""Bounded waits for conditions that have no event to await."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

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


async def wait_for_async(check: Callable[[], Awaitable[T | None]], timeout: float, what: str,
                         interval: float = 0.1) -> T:
    """:func:`wait_until_async` for a check that is itself awaited (a read of the store)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")
