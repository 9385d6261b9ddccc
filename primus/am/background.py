"""Background work of the AM: tasks started and left to run until cancelled together."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class Background:
    """Tasks started with :meth:`spawn` and kept until they end or :meth:`cancel` ends them.
    Each that fails is handed to ``failed`` (without it, asyncio reports it as unretrieved)."""

    def __init__(self, failed: Callable[[BaseException], None] | None = None) -> None:
        self._failed = failed
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._failed is not None and not task.cancelled() and task.exception() is not None:
            self._failed(task.exception())  # type: ignore[arg-type]

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel every task still running; return them (to await their end)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return tasks
