"""Watching a trainer for hangs (a role's ``hang_timeout``), on the executor's side.

A trainer is active when it writes output (its log file grows), reads data (its feeder hands
it records) or reports progress (``PRIMUS_PROGRESS_FILE`` touched, :mod:`primus.progress`).
Each is a file's modification time or a time the feeder notes, looked at every
:func:`check_interval`: nothing is read from the trainer, so the watch costs a few ``stat``
calls per check.

When its trainer has been idle for ``hang_timeout``, the executor reports a hang at
``apps/<app>/hang`` (the first of the role to do so wins; a hang already reported is not
reported again before its trainer was active since). Every executor of the role, hung or not,
then writes its trainer's stacks (:mod:`primus.executor.stacks`) under ``stacks/<hang>/``; the
AM summarizes them and applies ``on_hang`` (``primus/am/hangs.py``). With ``restart``, the
executors of that hang stop their trainers as ``HUNG``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from primus.config.spec import RoleSpec
from primus.executor import stacks
from primus.state.keys import AppKeys
from primus.state.records import HangReport, TrainerStacks, decode, encode
from primus.store.api import Coordinator, Put, StoreError, key_missing, key_unchanged_since
from primus.store.recipes import close_reading, key_values

if TYPE_CHECKING:  # the feeder is loaded only where a role reads data
    from primus.data.api import Claim, TaskSource

logger = logging.getLogger(__name__)


def check_interval(timeout: float) -> float:
    """Seconds between two looks at a trainer watched with ``timeout``: a quarter of it, from
    half a second to five."""
    return min(max(timeout / 4, 0.5), 5.0)


def _modified(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


class HangWatch:
    """Watches one trainer of an executor attempt (:meth:`run`)."""

    def __init__(self, store: Coordinator, keys: AppKeys, role: RoleSpec, index: int,
                 attempt: int, host: str, trainer_pid: int, log_file: str,
                 progress_file: str) -> None:
        assert role.hang_timeout is not None
        self.store = store
        self.keys = keys
        self.role = role
        self.index = index
        self.attempt = attempt
        self.host = host
        self.trainer_pid = trainer_pid
        self.log_file = log_file
        self.progress_file = progress_file
        self.started = time.time()
        self.data_at = 0.0
        self._answered: set[int] = set()  # the hangs whose stacks this trainer gave
        self._name = f"[{keys.app_id}/{role.name}-{index}]"

    def note_data(self) -> None:
        """The trainer was handed data now (the feeder calls this)."""
        self.data_at = time.time()

    def last_active(self) -> float:
        """When the trainer last wrote output, read data or reported progress (its start, if
        none since)."""
        return max(self.started, self.data_at, _modified(self.log_file),
                   _modified(self.progress_file))

    async def run(self) -> str:
        """Watch until cancelled; return the summary of a hang the AM asks this trainer to
        restart for. etcd out of reach only pauses the watch (the lease decides the rest)."""
        timeout = self.role.hang_timeout
        assert timeout is not None
        while True:
            try:
                return await self._watch(timeout)
            except StoreError as exc:
                logger.warning("%s hang watch paused: %s", self._name, exc)
                await asyncio.sleep(check_interval(timeout))

    async def _watch(self, timeout: float) -> str:
        values = key_values(self.store, self.keys.hang)
        pending: asyncio.Future[bytes | None] | None = None
        try:
            while True:
                pending = pending or asyncio.ensure_future(anext(values))
                done, _ = await asyncio.wait({pending}, timeout=check_interval(timeout))
                if done:
                    value, pending = pending.result(), None
                    report = decode(HangReport, value, self.keys.hang) if value else None
                    if report is not None and await self._answer(report):
                        return report.summary
                idle = time.time() - self.last_active()
                if idle >= timeout:
                    await self._report(idle)
        finally:
            await close_reading(values, pending)

    async def _answer(self, report: HangReport) -> bool:
        """Give this trainer's stacks for a hang of its role reported since it started;
        whether the AM asks it to restart for that hang."""
        if report.role != self.role.name or report.time < self.started:
            return False
        if report.id not in self._answered:
            self._answered.add(report.id)
            taken = await stacks.take(self.trainer_pid)
            record = TrainerStacks(role=self.role.name, index=self.index, attempt=self.attempt,
                                   host=self.host, idle=time.time() - self.last_active(),
                                   where=taken.where, text=taken.text, python=taken.python)
            try:
                await self.store.put(self.keys.stack(report.id, self.role.name, self.index),
                                     encode(record))
            except StoreError as exc:
                logger.warning("%s cannot record its stacks for hang %s: %s", self._name,
                               report.id, exc)
            logger.info("%s stacks taken for hang %s: %s", self._name, report.id, taken.where)
        return report.handled and report.restart

    async def _report(self, idle: float) -> None:
        """Report this trainer hung, unless a hang reported since it was last active stands."""
        try:
            current = await self.store.get(self.keys.hang)
            known = decode(HangReport, current.value, self.keys.hang) if current else None
            if known is not None and known.time >= self.last_active():
                return  # this hang (or one of another role since) is reported already
            report = HangReport(id=known.id + 1 if known else 1, role=self.role.name,
                                index=self.index, host=self.host, idle=idle, time=time.time())
            guard = key_missing(self.keys.hang) if current is None else \
                key_unchanged_since(self.keys.hang, current.mod_revision)
            written = await self.store.txn([guard], [Put(self.keys.hang, encode(report))])
        except StoreError as exc:
            logger.warning("%s cannot report its trainer hung: %s", self._name, exc)
            return
        if written.succeeded:
            logger.warning("%s trainer idle for %.0fs (hang_timeout %gs): hang %s reported",
                           self._name, idle, self.role.hang_timeout, report.id)


async def stop_watching(task: asyncio.Future[str] | None) -> None:
    """Cancel a watch's task and wait for it to close its watch."""
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class NotedSource:
    """A feeder's task source (:class:`~primus.data.feeder.TaskSource`) that calls ``note``
    whenever what the trainer read moves a task on: reading data is activity."""

    def __init__(self, source: TaskSource, note: Callable[[], None]) -> None:
        self.source = source
        self.note = note

    async def next(self) -> Claim | None:
        return await self.source.next()

    async def checkpoint(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        self.note()
        await self.source.checkpoint(claim, offset, records, nbytes)

    async def complete(self, claim: Claim, records: int, nbytes: int) -> None:
        self.note()
        await self.source.complete(claim, records, nbytes)

    async def fail(self, claim: Claim, error: str) -> None:
        await self.source.fail(claim, error)

    async def release(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        await self.source.release(claim, offset, records, nbytes)

    async def flush(self) -> None:
        flush = getattr(self.source, "flush", None)
        if flush is not None:
            await flush()
