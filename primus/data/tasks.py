"""Data tasks in etcd: executors claim, checkpoint and finish them; the AM creates and re-queues.

Layout under ``apps/<app>/data/<stream>/`` (docs/etcd-layout.md): ``tasks/<id>`` defines a task
(immutable); exactly one of ``pending/<id>``, ``owner/<id>`` (leased by its reader),
``done/<id>`` or ``failed/<id>`` says where it is; ``progress/<id>`` holds its last checkpoint.
Every move between them is one transaction:

- claim (of a few tasks at once, all or none): ``pending`` unchanged → delete it, create
  ``owner`` on the reader's lease;
- checkpoint, done, failed, release: ``owner`` still the incarnation the reader created;
- re-queue after a lost reader (its lease expired, so ``owner`` vanished): none of ``pending``,
  ``owner``, ``done``, ``failed`` exists → ``pending`` again (the AM does this), attempts + 1
  if the reader had started reading the task (:func:`was_reading`).

So a task is done exactly once, and a reader that lost its lease can change nothing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from primus.config.spec import StreamSpec
from primus.data.api import Claim
from primus.state.keys import StreamKeys
from primus.state.records import (
    READERS_KEPT,
    DataTask,
    FoldedTasks,
    ScanPart,
    StreamScan,
    StreamStats,
    TaskDone,
    TaskOwner,
    TaskProgress,
    decode,
    encode,
)
from primus.state.view import StreamFacts
from primus.store.api import (
    Compare,
    Coordinator,
    Delete,
    EventType,
    Get,
    KeyValue,
    Op,
    Put,
    Resync,
    WatchEvent,
    key_created_at,
    key_missing,
    key_unchanged_since,
    while_leased,
)
from primus.store.recipes import watching

if TYPE_CHECKING:  # imported when used: executors need no fsspec
    from primus.data.sources import FileRange

logger = logging.getLogger(__name__)

CLAIM_WINDOW = 64
"""Pending tasks an executor looks at when it claims; it picks among them in an order of its own
(read with every claim, in the same transaction)."""

CLAIM_BATCH = 8
"""Tasks an executor claims at most in one transaction (each claim costs it a round trip)..."""

CLAIM_SHARE = 4
"""...and at most this fraction of the pending tasks it sees: near the end of a stream it claims
one at a time, so that the last tasks are shared out."""

CLAIM_HORIZON = 1.0
"""...and only as many as it reads in this many seconds, at the pace it completed its last task:
an executor whose tasks take longer than that claims one at a time and holds no more than it
reads (a slow trainer cannot hoard work)."""

COMPLETION_DELAY = 0.5
"""Seconds a completed task may wait to be written when the executor writes nothing else
meanwhile: a completion rides with the executor's next write of the stream (a claim, a
checkpoint, a failure, a release), so that one transaction carries a batch's completions and
its next claim."""

KINDS = ("pending", "owner", "done", "failed")


def claim_batch_size(window: int, pace: float | None) -> int:
    """How many of the ``window`` pending tasks seen to claim in one transaction, when the
    executor completed its last task ``pace`` seconds after the one before (``None``: it has
    not completed two yet)."""
    paced = 1 if pace is None else int(CLAIM_HORIZON / max(pace, 1e-6))
    return max(1, min(CLAIM_BATCH, window // CLAIM_SHARE, paced))


async def _through_cancels(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, however often the waiting task is cancelled meanwhile
    (the caller re-raises the cancellation it is handling); ``future`` is never cancelled.
    For the short store calls that must not be abandoned half-way."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([future])
    if not future.cancelled() and future.exception() is not None:
        logger.warning("while cancelled: %s", future.exception())


@dataclass(frozen=True)
class _Writes:
    """Writes waiting for a transaction: each task's operations with the guard they need (the
    completions a board has not written yet)."""

    parts: tuple[tuple[Compare, tuple[Op, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.parts)

    def __add__(self, other: _Writes) -> _Writes:
        return _Writes(self.parts + other.parts)

    @property
    def compares(self) -> list[Compare]:
        return [guard for guard, _ in self.parts]

    @property
    def ops(self) -> list[Op]:
        return [op for _, ops in self.parts for op in ops]


class StreamBoard:
    """One executor's access to a stream: the :class:`~primus.data.feeder.TaskSource` it feeds
    from. Every write is guarded by the task's ``owner`` key, attached to the executor's lease.

    Tasks are claimed in batches (:func:`claim_batch_size`) and handed out one by one; those
    claimed but not handed out go back to pending on :meth:`close`. A completion is written with
    the board's next write, before it waits for work, on :meth:`close`, or after
    :data:`COMPLETION_DELAY` (:meth:`flush`); a completion not written when the executor is lost
    leaves its task to be read again, as one being read would be.
    """

    def __init__(self, store: Coordinator, keys: StreamKeys, stream: StreamSpec,
                 owner: TaskOwner, lease_id: int | Callable[[], int], lost: asyncio.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``lease_id``: the reader's lease, or a function giving it (an executor's lease can
        change: ``executor/host_lease.py``)."""
        self.store = store
        self.keys = keys
        self.stream = stream
        self.owner = owner
        self._lease = lease_id if callable(lease_id) else lambda: lease_id
        self.lost = lost
        self._clock = clock
        self._guards: dict[str, Compare] = {}
        self._progress: dict[str, TaskProgress] = {}
        self._window: list[KeyValue] = []  # pending tasks as the last claim or wait read them
        self._claimed: collections.deque[Claim] = collections.deque()  # not handed out yet
        self._completed: float | None = None  # when the last task was completed
        self._pace: float | None = None  # ...and how long after the one before
        self._unwritten = _Writes()  # completions waiting for the next write
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Future[None]] = set()  # started by the timer
        self._log = f"[{owner.role}-{owner.index} {stream.name}]"

    async def next(self) -> Claim | None:
        """Claim the next pending task; wait while there is none; ``None`` once the stream
        has ended."""
        while not self._claimed:
            if not self._window:
                await self.flush()  # the stream cannot end while a completion is unwritten
                if await self._wait_for_work():
                    return None
                continue
            attempt = asyncio.ensure_future(self._claim(self._pick()))
            try:
                await asyncio.shield(attempt)
            except asyncio.CancelledError:
                # Cancelled while claiming: committed claims must not stay owned by nobody
                # that knows of them until this executor's lease ends; so the claim, and the
                # release of what it claimed, run to their end through further cancels.
                await _through_cancels(attempt)
                await _through_cancels(asyncio.ensure_future(self.close()))
                raise
        return self._claimed.popleft()

    async def close(self) -> None:
        """Give back the tasks claimed but not handed out by :meth:`next` (pending again where
        they were, no attempt counted) and write the completions not written yet."""
        while self._claimed:
            claim = self._claimed.popleft()
            await self.release(claim, claim.offset, claim.records, claim.bytes)
        await self.flush()
        if self._flushes:
            await asyncio.wait(self._flushes)

    async def flush(self) -> None:
        """Write the completions not written yet, through cancels (taken from the board, they
        would otherwise be lost with a write cancelled half-way)."""
        writes = self._take_unwritten()
        if not writes:
            return
        write = asyncio.ensure_future(self._write_alone(writes, "completion"))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await _through_cancels(write)
            raise

    def _take_unwritten(self) -> _Writes:
        writes, self._unwritten = self._unwritten, _Writes()
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        return writes

    def _flush_later(self) -> None:
        """Have :meth:`flush` run in :data:`COMPLETION_DELAY` seconds unless a write carries
        the completions first."""
        def flush() -> None:
            self._flush_timer = None
            future = asyncio.ensure_future(self.flush())
            self._flushes.add(future)
            future.add_done_callback(self._flushes.discard)

        if self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(COMPLETION_DELAY, flush)

    async def _write_alone(self, writes: _Writes, what: str) -> None:
        """Write ``writes`` in one transaction; if a guard fails, each task's part alone, so
        that one lost task does not keep the others from being written."""
        if self.lost.is_set():
            return
        result = await while_leased(self.lost, lambda: self.store.txn(writes.compares,
                                                                        writes.ops))
        if result.succeeded:
            return
        if len(writes.parts) == 1:
            logger.warning("%s %s rejected: no longer the task's owner", self._log, what)
            return
        for part in writes.parts:
            await self._write_alone(_Writes((part,)), what)

    def _pick(self) -> list[KeyValue]:
        """The pending tasks of the window to claim next, in the order of their keys: the
        order they are handed out in, by which the AM tells which of them a lost reader was
        reading (:func:`was_reading`). Executors start at different places of the window (by
        index, a batch apart), so they rarely collide."""
        size = claim_batch_size(len(self._window), self._pace)
        shift = self.owner.index * size % len(self._window)
        return sorted((self._window[shift:] + self._window[:shift])[:size],
                      key=lambda kv: kv.key)

    async def _claim(self, batch: list[KeyValue]) -> None:
        """Claim the tasks of ``batch`` in one transaction, all or none (``_claimed``), and
        read the window of pending tasks after it (``_window``)."""
        tasks = [kv.key.rsplit("/", 1)[1] for kv in batch]
        owners = [self.keys.key("owner", task) for task in tasks]
        record = encode(self.owner.model_copy(update={"since": time.time()}))
        compares = [guard for kv, owner in zip(batch, owners, strict=True) for guard in
                    (key_unchanged_since(kv.key, kv.mod_revision), key_missing(owner))]
        claims = [op for kv, owner in zip(batch, owners, strict=True) for op in
                  (Delete(kv.key), Put(owner, record, self.lease_id))]
        reads = [Get(self.keys.key(kind, task)) for task in tasks
                 for kind in ("tasks", "progress")]
        window = Get(self.keys.prefix("pending"), prefix=True, limit=CLAIM_WINDOW)
        completions = self._take_unwritten()
        result = await while_leased(self.lost, lambda: self.store.txn(
            [*compares, *completions.compares], [*claims, *completions.ops, *reads, window],
            [*(Get(owner) for owner in owners), *reads, window]))
        *found, pending = result.reads
        self._window = list(pending)
        if result.succeeded:
            created, how = [result.revision] * len(tasks), ""
        else:
            # Taken by another reader, most often. Or by this one: a retry whose first try
            # had committed before its reply was lost fails its own conditions, and the tasks
            # would stay owned, by a reader that does not know it, until the lease ends.
            held, found = found[:len(tasks)], found[len(tasks):]
            if not all(owner and self._mine(owner[0]) and task not in self._guards
                       for owner, task in zip(held, tasks, strict=True)):
                if completions:  # the claim failed, not (as far as is known) they
                    await self._write_alone(completions, "completion")
                return
            created, how = [owner[0].create_revision for owner in held], \
                "its first try committed; "
        for i, task in enumerate(tasks):
            definition, progress_kv = found[2 * i], found[2 * i + 1]
            if not definition:
                continue
            spec = decode(DataTask, definition[0].value)
            progress = decode(TaskProgress, progress_kv[0].value) if progress_kv else \
                TaskProgress(offset=spec.start)
            self._guards[task] = key_created_at(owners[i], created[i])
            self._progress[task] = progress
            logger.info("%s claimed %s (%s%s from byte %s)", self._log, task, how, spec.path,
                        progress.offset)
            self._claimed.append(Claim(task=spec, offset=progress.offset,
                                       records=progress.records, bytes=progress.bytes))

    @property
    def lease_id(self) -> int:
        return self._lease()

    def _mine(self, owner: KeyValue) -> bool:
        """Whether an ``owner`` key is one this reader created: on its lease and naming it
        (the executors of a host share one lease)."""
        held = decode(TaskOwner, owner.value)
        return owner.lease == self.lease_id and (held.role, held.index, held.attempt,
                                                 held.pid) == (
            self.owner.role, self.owner.index, self.owner.attempt, self.owner.pid)

    async def _wait_for_work(self) -> bool:
        """Whether the stream has ended with no task pending; else, once a task may be pending
        (read into the window, or anything written under the stream's ``pending/`` or at its
        ``end`` key since)."""
        async with watching(self.store, self.keys.root) as watch:
            read = await self.store.txn([], [Get(self.keys.prefix("pending"), prefix=True,
                                                 limit=CLAIM_WINDOW), Get(self.keys.end)])
            pending, end = read.reads
            self._window = list(pending)
            if pending or end:
                return not pending
            async for event in watch.after(read.revision):
                if isinstance(event, Resync) or (event.type is EventType.PUT and (
                        event.key.startswith(self.keys.prefix("pending")) or
                        event.key == self.keys.end)):
                    return False
        return False

    async def _guarded(self, claim: Claim, ops: Sequence[Op], what: str) -> bool:
        """Write ``ops`` of a task this board owns, with the completions not written yet."""
        task = claim.task.task_id
        guard = self._guards.get(task)
        if guard is None or self.lost.is_set():
            return False
        completions = self._take_unwritten()
        result = await while_leased(self.lost, lambda: self.store.txn(
            [guard, *completions.compares], [*ops, *completions.ops]))
        if not result.succeeded and completions:  # write each part alone
            await self._write_alone(completions, "completion")
            result = await while_leased(self.lost, lambda: self.store.txn([guard], list(ops)))
        if not result.succeeded:
            logger.warning("%s %s of %s rejected: no longer its owner", self._log, what, task)
        return result.succeeded

    async def checkpoint(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        task = claim.task.task_id
        progress = self._progress[task].model_copy(update={
            "offset": offset, "records": records, "bytes": nbytes})
        if await self._guarded(claim, [Put(self.keys.key("progress", task), encode(progress))],
                               "checkpoint"):
            self._progress[task] = progress

    async def complete(self, claim: Claim, records: int, nbytes: int) -> None:
        """Written with the board's next write, or by :meth:`flush`."""
        task = claim.task.task_id
        guard = self._guards.get(task)
        if guard is not None and not self.lost.is_set():
            done = TaskDone(records=records, bytes=nbytes, role=self.owner.role,
                            index=self.owner.index, time=time.time(),
                            attempts=self._progress[task].attempts + 1)
            self._unwritten += _Writes(((guard, (Put(self.keys.key("done", task), encode(done)),
                                                 Delete(self.keys.key("owner", task)),
                                                 Delete(self.keys.key("progress", task)))),))
            self._flush_later()
        self._forget(task)
        now = self._clock()
        if self._completed is not None:
            self._pace = now - self._completed
        self._completed = now

    async def fail(self, claim: Claim, error: str) -> None:
        task = claim.task.task_id
        progress = self._progress[task]
        attempts = progress.attempts + 1
        logger.error("%s task %s failed (attempt %s of %s): %s", self._log, task, attempts,
                     self.stream.max_task_attempts, error)
        await self._guarded(claim, ops_after_failure(
            self.keys, self.stream, task, progress, error, self.owner.role, self.owner.index)
            + [Delete(self.keys.key("owner", task))], "failure")
        self._forget(task)

    async def release(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        task = claim.task.task_id
        progress = self._progress[task].model_copy(update={
            "offset": offset, "records": records, "bytes": nbytes})
        await self._guarded(claim, [Put(self.keys.key("progress", task), encode(progress)),
                                    Put(self.keys.key("pending", task), b""),
                                    Delete(self.keys.key("owner", task))], "release")
        self._forget(task)

    def _forget(self, task: str) -> None:
        self._guards.pop(task, None)
        self._progress.pop(task, None)


def ops_after_failure(keys: StreamKeys, stream: StreamSpec, task: str, progress: TaskProgress,
                      error: str, role: str = "", index: int = -1) -> list[Op]:
    """Back to pending with one more attempt counted, or failed for good after
    ``max_task_attempts``."""
    attempts = progress.attempts + 1
    if attempts >= stream.max_task_attempts:
        failed = TaskDone(records=progress.records, bytes=progress.bytes, role=role,
                          index=index, time=time.time(), attempts=attempts, error=error)
        return [Put(keys.key("failed", task), encode(failed)),
                Delete(keys.key("progress", task))]
    again = progress.model_copy(update={"attempts": attempts, "error": error})
    return [Put(keys.key("progress", task), encode(again)), Put(keys.key("pending", task), b"")]


WriteOps = Callable[[list[Op], list[Compare]], Awaitable[bool]]
"""The AM's guarded write: ``ops`` if ``compares`` hold (and it still leads); whether they did."""

Reader = tuple[str, int, int, int]
"""A reader: the role, index, attempt and pid of an executor (``TaskOwner``)."""


@dataclass(frozen=True)
class Holding:
    """A task as a reader holds it: ``claimed`` at which revision (a batch's tasks all at one),
    and whether the reader has ``checkpointed`` it since."""

    reader: Reader
    task: str
    claimed: int
    checkpointed: bool = False


def was_reading(lost: Holding, others: Iterable[Holding]) -> str:
    """The task the reader of ``lost`` was reading when it was lost, of ``lost`` and the
    ``others`` held then: the first it claimed (a batch's in the order of their keys, as
    :class:`StreamBoard` hands them out). A reader reads its tasks one after the other in that
    order; the others were claimed ahead, and were not read unless it checkpointed them."""
    return min((holding.claimed, holding.task) for holding in (lost, *others)
               if holding.reader == lost.reader)[1]


@dataclass(frozen=True)
class LostTask:
    """A task whose reader was lost (its ``owner`` key gone, the task nowhere else), and
    whether the reader had started reading it (``None``: not known). Only a task read counts
    an attempt when it is re-queued: a reader lost with tasks claimed ahead never read them."""

    task: str
    read: bool | None


class ReadRates:
    """How fast each executor attempt reads a stream, from the checkpoints recorded in etcd:
    bytes per second over a window (the AM's input to straggler rescheduling).

    An attempt is measured from its first claim; each checkpoint (or completion) of a task
    counts the bytes read since the task's previous one for the attempt that owns it. A task
    first seen mid-way (after an AM failover) counts from 0, which can only make its reader
    look faster, never slower.
    """

    def __init__(self) -> None:
        self.owner: dict[str, tuple[str, int, int]] = {}  # task → (role, index, attempt)
        self.seen: dict[str, int] = {}  # task → bytes at its last checkpoint
        self.read: dict[tuple[str, int, int], list[tuple[float, int]]] = {}
        self.holding: dict[tuple[str, int, int], set[str]] = {}  # reader → tasks it reads now

    def owned(self, task: str, owner: TaskOwner, now: float) -> None:
        reader = (owner.role, owner.index, owner.attempt)
        self.owner[task] = reader
        self.read.setdefault(reader, [(now, 0)])
        self.holding.setdefault(reader, set()).add(task)

    def released(self, task: str) -> None:
        """The task left its reader (done, failed, or given back)."""
        reader = self.owner.get(task)
        if reader is not None:
            self.holding.get(reader, set()).discard(task)

    def forget(self, task: str) -> None:
        """The task is gone for good (folded out of etcd)."""
        self.released(task)
        self.owner.pop(task, None)
        self.seen.pop(task, None)

    def progressed(self, task: str, nbytes: int, now: float) -> None:
        reader = self.owner.get(task)
        delta = max(0, nbytes - self.seen.get(task, 0))
        self.seen[task] = nbytes
        if reader is not None and delta:
            samples = self.read[reader]
            samples.append((now, samples[-1][1] + delta))

    def rate(self, reader: tuple[str, int, int], now: float, window: float) -> float | None:
        """Bytes per second over the last ``window`` seconds; ``None`` while the attempt has
        read for less than that, or holds no task now (a reader with nothing left to read at
        the end of a stream is idle, not slow)."""
        samples = self.read.get(reader)
        if not samples or samples[0][0] > now - window or not self.holding.get(reader):
            return None
        before = max((s for s in samples if s[0] <= now - window), key=lambda s: s[0])
        return (samples[-1][1] - before[1]) / window


class ReaderCounts:
    """Records of the tasks done per reader, and the latest epoch a task was done in, for a
    stream's stats (``StreamStats.readers``, ``epoch``): the first :data:`READERS_KEPT`
    readers only, so that the stats of a stream of thousands of readers stay small."""

    def __init__(self) -> None:
        self.records: dict[str, int] = {}
        self.partial = False
        self.epoch = 0

    def done(self, task: str, record: TaskDone) -> None:
        epoch = task.partition("-")[0]
        if epoch.isdigit():
            self.epoch = max(self.epoch, int(epoch))
        reader = f"{record.role}-{record.index}"
        if reader in self.records or len(self.records) < READERS_KEPT:
            self.records[reader] = self.records.get(reader, 0) + record.records
        else:
            self.partial = True

    def of(self, stats: StreamStats) -> StreamStats:
        """``stats`` with these counts (a copy: the counts go on changing)."""
        return stats.model_copy(update={"readers": dict(self.records), "epoch": self.epoch,
                                        "readers_partial": self.partial})


class StreamLedger:
    """The AM's side of a stream: which tasks exist and where each is; re-queues the tasks of
    lost readers; keeps ``stats``; says when every task is done or failed (``resolved``: the
    AM writes ``end`` then). ``stream`` grows by the sources added at run time
    (:meth:`extend`)."""

    def __init__(self, store: Coordinator, keys: StreamKeys, stream: StreamSpec,
                 write: WriteOps) -> None:
        self.store = store
        self.keys = keys
        self.stream = stream
        self.write = write
        self.scan = StreamScan()
        self.stats = StreamStats()
        self.where: dict[str, str] = {}  # task id → pending | owner | done | failed
        self.ended = False
        self.changed = asyncio.Event()  # set by every event folded in and every extension
        self.revision = 0  # of the last load()
        self.first_failure = ""  # "<task>: <error>" of the earliest failed task
        self.rates = ReadRates()
        self.readers = ReaderCounts()
        self.holdings: dict[str, Holding] = {}  # task → its reader's hold, while owned
        self._reading: dict[Reader, str] = {}  # lost reader → the task it was reading
        self._held: list[WatchEvent] | None = None  # events observed during load()
        self._loading = asyncio.Lock()  # one load at a time (a resync may come during one)

    async def load(self) -> None:
        """Read, at one revision, where every task is; re-queue those whose reader vanished
        while no AM watched. Events up to that revision are then ignored by :meth:`observe`;
        those observed while reading are held and folded in after it. A load called while
        one runs follows it."""
        async with self._loading:
            await self._load()

    async def _load(self) -> None:
        keys = self.keys
        self._held = []
        try:
            result = await self.store.txn([], [Get(keys.scan), Get(keys.end),
                                               Get(keys.prefix("tasks"), prefix=True),
                                               Get(keys.prefix("progress"), prefix=True),
                                               *(Get(keys.prefix(kind), prefix=True)
                                                 for kind in KINDS)])
        except BaseException:
            self._held = None
            raise
        scan, end, tasks, progress, *where = result.reads
        self.revision = result.revision
        self.scan = decode(StreamScan, scan[0].value) if scan else StreamScan()
        self.ended = bool(end)
        self.where = {}
        self.first_failure = ""
        checkpointed = {kv.key.rsplit("/", 1)[1]: kv.mod_revision for kv in progress}
        self.holdings = {}
        records = nbytes = failed_records = failed_bytes = 0
        self.readers = ReaderCounts()
        for kind, kvs in zip(KINDS, where, strict=True):
            for kv in kvs:
                task = kv.key.rsplit("/", 1)[1]
                self.where[task] = kind
                if kind == "owner":
                    self.holdings[task] = Holding(
                        _reader(decode(TaskOwner, kv.value)), task, kv.create_revision,
                        checkpointed.get(task, 0) > kv.create_revision)
                if kind in ("done", "failed"):
                    record = decode(TaskDone, kv.value)
                    if kind == "done":
                        records += record.records
                        nbytes += record.bytes
                        self.readers.done(task, record)
                    else:
                        failed_records += record.records
                        failed_bytes += record.bytes
            if kind == "failed" and kvs:
                first = min(kvs, key=lambda kv: kv.mod_revision)
                self._note_failure(first.key.rsplit("/", 1)[1], first.value)
        readers = {holding.reader for holding in self.holdings.values()}
        self._reading = {reader: task for reader, task in self._reading.items()
                         if reader in readers}  # lost, and still holds tasks
        folded = self.scan.folded or FoldedTasks()
        self.stats = StreamStats(tasks=len(tasks) + folded.tasks,
                                 done=self._count("done") + folded.tasks,
                                 failed=self._count("failed"), records=records + folded.records,
                                 bytes=nbytes + folded.bytes,
                                 failed_records=failed_records, failed_bytes=failed_bytes,
                                 exhausted=self.ended)
        held, self._held = self._held, None
        lost = [lost_task for event in held if (lost_task := self.observe(event)) is not None]
        for kv in tasks:
            task = kv.key.rsplit("/", 1)[1]
            if task not in self.where:  # its reader was lost while no AM watched
                await self.requeue(LostTask(task, read=None))
        for lost_task in lost:
            await self.requeue(lost_task)

    def extend(self, stream: StreamSpec) -> None:
        """Take the stream's sources as the application has them now: ``stream`` is this
        stream with the sources added at run time after the ones known already (the effective
        spec's). The :class:`TaskWriter` writes their tasks; the stream is not resolved until
        they are. The same sources again change nothing."""
        added = len(stream.sources) - len(self.stream.sources)
        if added <= 0:
            return
        logger.info("[%s] %s source%s added: %s", stream.name, added, "" if added == 1 else "s",
                    ", ".join(source.shown for source in stream.sources[-added:]))
        self.stream = stream
        self.changed.set()

    @property
    def unwritten_sources(self) -> int:
        """Sources of the stream the epoch being written does not read yet (added since)."""
        written = self.scan.parts[-1].sources if self.scan.parts else 0
        return len(self.stream.sources) - written

    def forget(self, task: str) -> None:
        """Forget a task folded out of etcd (:meth:`Slicer.fold`): its totals are in the
        scan's ``folded`` and still in ``stats``."""
        self.where.pop(task, None)
        self.rates.forget(task)

    def _count(self, kind: str) -> int:
        return sum(1 for where in self.where.values() if where == kind)

    def pending_count(self) -> int:
        """Tasks waiting for a reader."""
        return self._count("pending")

    def observe(self, event: WatchEvent) -> LostTask | None:
        """Fold a watch event under the stream; the task to re-queue, if its reader was lost."""
        if self._held is not None:  # load() is reading: folded in once it has
            self._held.append(event)
            return None
        if event.revision <= self.revision:
            return None  # already in what load() read
        key, kind_of_event, value = event.key, event.type, event.value
        self.changed.set()
        rest = key[len(self.keys.root):]
        kind, _, task = rest.partition("/")
        if task and kind in ("owner", "progress", "done", "failed"):
            now = time.time()
            if kind_of_event is not EventType.PUT:
                if kind == "owner":
                    self.rates.released(task)
            elif kind == "owner":
                self.rates.owned(task, decode(TaskOwner, value), now)
            elif kind == "done":
                self.rates.progressed(task, decode(TaskDone, value).bytes, now)
                self.rates.released(task)
            elif kind == "failed":
                self.rates.released(task)
            else:
                self.rates.progressed(task, decode(TaskProgress, value).bytes, now)
        if kind == "progress" and kind_of_event is EventType.PUT and task in self.holdings:
            self.holdings[task] = replace(self.holdings[task], checkpointed=True)
        if kind not in KINDS or not task:
            return None
        if kind_of_event is EventType.PUT:
            self.where[task] = kind
            if kind == "owner":
                self.holdings[task] = Holding(_reader(decode(TaskOwner, value)), task,
                                              event.revision)
            else:
                self.holdings.pop(task, None)
            if kind == "done":
                record = decode(TaskDone, value)
                self.readers.done(task, record)
                self.stats = self.stats.model_copy(update={
                    "done": self.stats.done + 1, "records": self.stats.records + record.records,
                    "bytes": self.stats.bytes + record.bytes})
            elif kind == "failed":
                record = decode(TaskDone, value)
                self.stats = self.stats.model_copy(update={
                    "failed": self.stats.failed + 1,
                    "failed_records": self.stats.failed_records + record.records,
                    "failed_bytes": self.stats.failed_bytes + record.bytes})
                self._note_failure(task, value)
            return None
        if kind == "owner" and self.where.get(task) == "owner":
            return self._lost(task)  # a delete that moved it nowhere (yet): see requeue()
        return None

    def _lost(self, task: str) -> LostTask:
        """The task's reader is lost: whether it was reading the task. Which task it was
        reading is settled at the first of its tasks lost, while it still holds them all (its
        owner keys may vanish one by one, and the first re-queued before the next vanishes)."""
        holding = self.holdings.pop(task, None)
        if holding is None:  # not expected: every owner key the ledger knows of is held
            return LostTask(task, read=None)
        reader = holding.reader
        if reader not in self._reading:
            self._reading[reader] = was_reading(holding, self.holdings.values())
        reading = self._reading[reader]
        if not any(other.reader == reader for other in self.holdings.values()):
            del self._reading[reader]  # the last of its tasks
        return LostTask(task, read=holding.checkpointed or task == reading)

    def _note_failure(self, task: str, value: bytes) -> None:
        if not self.first_failure:
            self.first_failure = f"{task}: {decode(TaskDone, value).error}"

    async def requeue(self, lost: LostTask) -> None:
        """Put a task whose reader vanished back to pending, if it is nowhere: with one more
        attempt counted (or failed, after ``max_task_attempts``) if its reader had read it;
        else as it was. Whether a reader lost while no AM watched had read it is not known:
        the task counts an attempt if any reader read part of it."""
        task = lost.task
        progress_kv = await self.store.get(self.keys.key("progress", task))
        if progress_kv is not None:
            progress = decode(TaskProgress, progress_kv.value)
        else:
            definition = await self.store.get(self.keys.key("tasks", task))
            if definition is None:
                return
            progress = TaskProgress(offset=decode(DataTask, definition.value).start)
        read = progress.bytes > 0 if lost.read is None else lost.read
        nowhere = [key_missing(self.keys.key(kind, task)) for kind in KINDS]
        ops: list[Op] = ops_after_failure(self.keys, self.stream, task, progress,
                                "reader lost (its lease expired)") if read else \
            [Put(self.keys.key("pending", task), b"")]
        if await self.write(ops, nowhere):
            logger.info("[%s] task %s re-queued after its reader was lost (%s)",
                        self.stream.name, task, f"attempt {progress.attempts + 1}" if read
                        else "not read: no attempt counted")

    @property
    def resolved(self) -> bool:
        """Every task of every epoch is written, for every source, and each is done or
        failed."""
        return self.scan.complete and not self.unwritten_sources and \
            self.stats.done + self.stats.failed >= self.stats.tasks

    def facts(self, error: str = "") -> StreamFacts:
        """What the ledger knows of the stream, as the AM's view holds it (``error``: why its
        task writer stopped, if it did)."""
        return StreamFacts(self.stats.model_copy(), self.resolved, self.first_failure, error)


def _reader(owner: TaskOwner) -> Reader:
    return owner.role, owner.index, owner.attempt, owner.pid


TASKS_PER_TXN = 60
"""Tasks written per transaction: two operations each, within etcd's default of 128."""

AHEAD = 1024
"""Pending tasks the AM keeps written ahead of consumption; it writes more as they are taken."""


class TaskWriter:
    """Writes a stream's tasks, epoch after epoch, ahead of consumption; then, until cancelled,
    those of sources added to the stream; resumable.

    An epoch is written in parts (``StreamScan.parts``): the first reads the sources the stream
    has when the epoch's first task is written; sources added meanwhile follow as a part of
    their own, numbered on, in the epoch being written (for the last epoch, also once it is
    complete); the epochs after read every source. A part lists its files in the same order at
    every scan (sorted paths, time-ordered partitions; with ``shuffle``, shuffled from seed and
    epoch). ``scan`` records the epoch being written, its parts and how many of its tasks are
    written, in the transaction of each batch of tasks; a new AM scans the epoch's last part
    again and skips what was written.
    """

    def __init__(self, ledger: StreamLedger) -> None:
        self.ledger = ledger

    async def run(self) -> None:
        ledger = self.ledger
        while True:
            if ledger.scan.complete and not ledger.unwritten_sources:
                ledger.changed.clear()  # until a source is added (or anything else happens)
                await ledger.changed.wait()
                continue
            await self._write_epoch()

    async def _write_epoch(self) -> None:
        """Write the rest of the epoch ``scan`` is in: its last part from where it got, then a
        part of the sources it does not read yet while there are; then go on to the next epoch,
        or mark the last one complete."""
        ledger = self.ledger
        epoch, created, parts = ledger.scan.epoch, ledger.scan.created, list(ledger.scan.parts)
        slicing = ledger.scan.slices is not None  # the offsets pinned at submit are written
        if parts and not ledger.scan.complete and not slicing:  # the last part may be in part
            created = await self._write_part(epoch, parts, created)
        while not slicing and \
                (sources := len(ledger.stream.sources)) > (parts[-1].sources if parts else 0):
            # An epoch's first part starts at its first task (a scan written before parts were
            # recorded has none, and may say tasks were created).
            parts.append(ScanPart(sources=sources, first_task=created if parts else 0))
            created = await self._write_part(epoch, parts, created)
        if ledger.stream.unbounded:
            await Slicer(self, StreamScan(epoch=epoch, created=created, parts=parts,
                                          slices=ledger.scan.slices,
                                          folded=ledger.scan.folded)).run()
            return
        last = epoch >= ledger.stream.epochs
        scan = StreamScan(epoch=epoch if last else epoch + 1, created=created if last else 0,
                          epoch_tasks=created, complete=last, parts=parts if last else [])
        if await ledger.write([Put(ledger.keys.scan, encode(scan))], []):
            ledger.scan = scan

    async def _write_part(self, epoch: int, parts: list[ScanPart], created: int) -> int:
        """Write what is not written yet of the last of ``parts`` (``created`` tasks of the
        epoch are); how many of the epoch are written then."""
        from primus.data.sources import file_ranges, scan_stream, shuffled  # noqa: PLC0415

        stream, part = self.ledger.stream, parts[-1]
        sources = range(parts[-2].sources if len(parts) > 1 else 0, part.sources)
        scan = StreamScan(epoch=epoch, created=created, parts=parts)
        if stream.shuffle:  # the whole part must be known to shuffle it
            files = [f async for batch in scan_stream(stream, Path("/"), part=sources)
                     for f in batch]
            ranges = shuffled(file_ranges(files, stream.chunk_size), epoch, stream.seed)
            return await self.write_ranges(ranges[created - part.first_task:], scan.model_copy(
                update={"epoch_tasks": part.first_task + len(ranges)}))
        # written as partitions become readable, in time order
        total, unwritten = part.first_task, []
        async for batch in scan_stream(stream, Path("/"), part=sources):
            ranges = file_ranges(batch, stream.chunk_size)
            unwritten += ranges[max(created - total, 0):]  # from task `created` on
            total += len(ranges)
            if len(unwritten) >= TASKS_PER_TXN:
                created = await self.write_ranges(unwritten, scan.model_copy(
                    update={"created": created}))
                unwritten = []
        return await self.write_ranges(unwritten, scan.model_copy(
            update={"created": created, "epoch_tasks": total}))

    async def write_ranges(self, ranges: Sequence[FileRange], scan: StreamScan) -> int:
        """Write the tasks of ``ranges`` (which follow the first ``scan.created`` of the epoch,
        and are numbered on from there) in batches, each with ``scan`` as it is then, waiting
        while enough tasks are pending; how many of the epoch are written then."""
        ledger = self.ledger
        created = scan.created
        for i in range(0, len(ranges), TASKS_PER_TXN):
            batch = [piece.task(scan.epoch, created + j)
                     for j, piece in enumerate(ranges[i:i + TASKS_PER_TXN])]
            while ledger.pending_count() >= AHEAD:
                ledger.changed.clear()
                await ledger.changed.wait()
            scan = scan.model_copy(update={"created": created + len(batch)})
            ops: list[Op] = [Put(ledger.keys.scan, encode(scan))]
            for task in batch:
                ops += [Put(ledger.keys.key("tasks", task.task_id), encode(task)),
                        Put(ledger.keys.key("pending", task.task_id), b"")]
            first = ledger.keys.key("tasks", batch[0].task_id)
            # Written once only: a retry after a lost reply whose first try committed must not
            # put back to pending the tasks readers have taken since.
            if not await ledger.write(ops, [key_missing(first)]) and \
                    await ledger.store.get(first) is None:
                raise asyncio.CancelledError  # leadership lost: the AM is stopping
            created = scan.created
            ledger.scan = scan
            ledger.stats = ledger.stats.model_copy(update={
                "tasks": ledger.stats.tasks + len(batch)})
            for task in batch:
                ledger.where.setdefault(task.task_id, "pending")
        return created


SLICE_INTERVAL = 1.0
"""Seconds between two looks at an unbounded Kafka stream's partitions."""

SLICE_LINGER = 2.0
"""Seconds the offsets of a partition that make no whole task (``task_size``), or no task at
all without one, wait for more before they are a task of their own: a trickle of messages
makes a task per linger, not one per look (each task is two keys in etcd until the stream
ends)."""


def slice_end(start: int, high: int, task_size: int | None, lingered: bool) -> int:
    """Where a partition's next slice ends, from ``start`` with its end at ``high``: at
    ``high`` once the offsets have ``lingered`` (:data:`SLICE_LINGER` since the partition's
    last slice, or it had none from this AM), else at its last whole task of ``task_size``
    (none without one)."""
    if lingered:
        return high
    return start + (high - start) // task_size * task_size if task_size else start


PartitionKey = tuple[str, str, int]
"""A Kafka partition as a stream reads it: (profile, topic, partition)."""


@dataclass(frozen=True)
class SliceTask:
    """A task of an unbounded Kafka stream, as :class:`UnreadOffsets` keeps it."""

    task: str
    start: int
    end: int


class UnreadOffsets:
    """Each partition of a Kafka stream's oldest offset not read yet, from what etcd holds:
    the start (or, with checkpoints, checkpoint) of its first task not resolved, else the end
    of its last task. Each look reads the task definitions written since the one before.
    ``forget``: a partition's leading resolved tasks are forgotten at each look (its end is
    kept); else only those folded (:meth:`Slicer.fold`, which takes the done ones itself)."""

    def __init__(self, ledger: StreamLedger, forget: bool = True) -> None:
        self.ledger = ledger
        self.forget = forget
        self.tasks: dict[PartitionKey, collections.deque[SliceTask]] = {}
        """Each partition's tasks not forgotten, in the order of their offsets."""
        self.ends: dict[PartitionKey, int] = {}
        """Each partition's end of its last task."""
        self._last_key = ""

    async def look(self, checkpoints: bool) -> dict[PartitionKey, int]:
        """The offsets now; with ``checkpoints``, a task being read counts from its last
        checkpoint instead of its start."""
        from primus.data.kafka import PartitionUrl  # noqa: PLC0415 - Kafka streams only

        ledger = self.ledger
        keys = ledger.keys
        read = await ledger.store.get_prefix(keys.prefix("tasks"), after=self._last_key or None)
        for kv in read.kvs:
            task = decode(DataTask, kv.value)
            where = PartitionUrl.parse(task.path)
            key = (where.client, where.topic, where.partition)
            self.ends[key] = max(self.ends.get(key, task.end), task.end)
            self.tasks.setdefault(key, collections.deque()).append(
                SliceTask(kv.key.rsplit("/", 1)[1], task.start, task.end))
            self._last_key = kv.key
        progress = {kv.key.rsplit("/", 1)[1]: decode(TaskProgress, kv.value).offset
                    for kv in (await ledger.store.get_prefix(keys.prefix("progress"))).kvs
                    } if checkpoints else {}
        below = ledger.scan.folded.below if ledger.scan.folded else {}
        oldest: dict[PartitionKey, int] = {}
        for key, queue in self.tasks.items():
            floor = below.get(key[1], {}).get(key[2], -1)
            while queue and (queue[0].end <= floor or self.forget and
                             ledger.where.get(queue[0].task) in ("done", "failed")):
                queue.popleft()
            for held in queue:  # past the floor: the tasks under it left the front
                if ledger.where.get(held.task) not in ("done", "failed"):
                    oldest[key] = progress.get(held.task, held.start)
                    break
        return {key: oldest.get(key, end) for key, end in self.ends.items()}


class Slicer:
    """An unbounded Kafka stream's tasks, written as its partitions grow: every
    :data:`SLICE_INTERVAL`, each partition's offsets from where its last slice ended to its
    end now, in tasks of ``task_size`` (one per slice without it); a partition added to a topic
    since is read from its start. Where each partition's next slice starts is written in the
    scan (``slices``) with the tasks before it, so an AM that takes over goes on from there and
    a savepoint holds it. Keeps the stream's ``lag`` in its stats: each partition's end minus
    its oldest unfinished offset (:class:`UnreadOffsets`, from the tasks' starts), summed."""

    def __init__(self, writer: TaskWriter, scan: StreamScan) -> None:
        self.writer = writer
        self.ledger = writer.ledger
        self.scan = scan
        self.sources = [source.kafka for source in self.ledger.stream.sources
                        if source.kafka is not None]
        pinned = {topic: {partition: end for partition, (_, end) in ranges.items()}
                  for kafka in self.sources for topic, ranges in (kafka.pinned or {}).items()}
        self.next = scan.slices if scan.slices is not None else pinned
        self.unread = UnreadOffsets(self.ledger, forget=False)  # fold() takes the done
        self.sliced: dict[tuple[str, int], float] = {}
        """When this AM last wrote a slice of each partition (monotonic)."""

    async def run(self) -> None:
        """Slice until cancelled (the application ended, or this AM stopped leading).

        Raises:
            KafkaSourceError: a topic of the stream no longer exists.
        """
        from primus.data.kafka import KafkaSourceError, PartitionWatch  # noqa: PLC0415

        watches = [PartitionWatch(kafka) for kafka in self.sources]
        try:
            while True:
                ends: dict[PartitionKey, int] = {}
                for kafka, watch in zip(self.sources, watches, strict=True):
                    try:
                        found = await asyncio.to_thread(watch.ends)
                    except KafkaSourceError as exc:
                        if exc.field != "client":
                            raise
                        # The cluster out of reach: the readers wait for it as well.
                        logger.warning("[%s] %s", self.ledger.stream.name, exc.reason)
                        continue
                    ends.update({(kafka.client, topic, partition): high
                                 for (topic, partition), (_, high) in found.items()})
                    await self._write_slices(kafka, found)
                self._note_lag(ends, await self.unread.look(checkpoints=False))
                await self.fold()
                await asyncio.sleep(SLICE_INTERVAL)
        finally:
            for watch in watches:
                await asyncio.to_thread(watch.close)

    async def _write_slices(self, kafka: Any, ends: dict[tuple[str, int], tuple[int, int]]
                            ) -> None:
        from primus.data.kafka import partition_url  # noqa: PLC0415
        from primus.data.sources import DataFile, file_ranges  # noqa: PLC0415

        for (topic, partition), (low, high) in sorted(ends.items()):
            known = self.next.setdefault(topic, {})
            if partition not in known:
                logger.info("[%s] kafka topic %s: partition %s is new, read from offset %s",
                            self.ledger.stream.name, topic, partition, low)
                known[partition] = low
            start = known[partition]
            last = self.sliced.get((topic, partition))
            end = slice_end(start, high, kafka.task_size,
                            lingered=last is None or time.monotonic() - last >= SLICE_LINGER)
            if end <= start:
                continue
            self.sliced[topic, partition] = time.monotonic()
            ranges = file_ranges([DataFile(partition_url(kafka.client, topic, partition), end,
                                           start=start, step=kafka.task_size)], None)
            for i in range(0, len(ranges), TASKS_PER_TXN):
                batch = ranges[i:i + TASKS_PER_TXN]
                known[partition] = batch[-1].end
                self.scan = self.scan.model_copy(update={
                    "slices": {t: dict(parts) for t, parts in self.next.items()}})
                self.scan = self.scan.model_copy(update={
                    "created": await self.writer.write_ranges(batch, self.scan)})

    async def fold(self) -> None:
        """Fold each partition's leading done tasks out of etcd: their ``tasks/`` and
        ``done/`` keys deleted and their totals added to the scan's ``folded``, in one
        transaction per :data:`TASKS_PER_TXN` tasks (the ledger's stats stay what they were).
        A failed task stops its partition's fold: it stays, with its error, for the
        application's end to report."""
        ledger = self.ledger
        while True:
            batch: list[tuple[PartitionKey, SliceTask]] = []
            for key, queue in self.unread.tasks.items():
                for task in queue:
                    if len(batch) == TASKS_PER_TXN or ledger.where.get(task.task) != "done":
                        break
                    batch.append((key, task))
            if not batch:
                return
            done = await ledger.store.txn([], [Get(ledger.keys.key("done", task.task))
                                                for _, task in batch])
            totals = self.scan.folded or FoldedTasks()
            below = {topic: dict(parts) for topic, parts in totals.below.items()}
            records = nbytes = 0
            for (key, task), found in zip(batch, done.reads, strict=True):
                if not found:  # not expected: a task leaves done only by being folded
                    logger.warning("[%s] task %s is not done in etcd: not folded",
                                   ledger.stream.name, task.task)
                    return
                record = decode(TaskDone, found[0].value)
                records += record.records
                nbytes += record.bytes
                below.setdefault(key[1], {})[key[2]] = task.end
            folded = FoldedTasks(tasks=totals.tasks + len(batch),
                                 records=totals.records + records,
                                 bytes=totals.bytes + nbytes, below=below)
            scan = self.scan.model_copy(update={"folded": folded})
            unchanged = [key_unchanged_since(ledger.keys.key("done", task.task),
                                             found[0].mod_revision)
                         for (_, task), found in zip(batch, done.reads, strict=True)]
            ops: list[Op] = [Put(ledger.keys.scan, encode(scan))]
            for _, task in batch:
                ops += [Delete(ledger.keys.key("tasks", task.task)),
                        Delete(ledger.keys.key("done", task.task))]
            if not await ledger.write(ops, unchanged):
                return  # no longer leads (the AM stops), or not as read: the next look
            self.scan = ledger.scan = scan
            for key, task in batch:
                self.unread.tasks[key].popleft()
                ledger.forget(task.task)

    def _note_lag(self, ends: dict[PartitionKey, int], unread: dict[PartitionKey, int]) -> None:
        """The stream's lag from each partition's ``ends`` now and its ``unread`` offset (a
        partition with no task yet: where its next slice starts)."""
        lags = {f"{key[1]}[{key[2]}]": max(0, high - unread.get(
                    key, self.next.get(key[1], {}).get(key[2], high)))
                for key, high in sorted(ends.items())}
        lag = sum(lags.values())
        if (lag, lags) != (self.ledger.stats.lag, self.ledger.stats.lags):
            # written with the stats (StreamSet)
            self.ledger.stats = self.ledger.stats.model_copy(update={"lag": lag, "lags": lags})


MIRROR_INTERVAL = 1.0
"""Seconds between two commits of a Kafka stream's position to its ``commit_group``."""


class OffsetMirror:
    """A Kafka stream's position, mirrored to the consumer group its sources name
    (``commit_group``) for Kafka's own lag tools: each partition's oldest offset not read yet
    (:class:`UnreadOffsets`, from the tasks' checkpoints), so that a commit never runs ahead of
    Primus's own state; once every task is resolved, the partitions' ends. The committed
    offsets are never read back: a restart, a take-over and a savepoint all resume from
    etcd."""

    def __init__(self, ledger: StreamLedger) -> None:
        self.ledger = ledger
        self.sources = [source.kafka for source in ledger.stream.sources
                        if source.kafka is not None and source.kafka.commit_group]
        self.unread = UnreadOffsets(ledger)
        self.finishing = asyncio.Event()
        """Set when the AM stops reading the stream (the application ended): one last commit,
        then :meth:`run` returns."""

    async def run(self) -> None:
        """Commit the stream's position every :data:`MIRROR_INTERVAL` while it changes, until
        every task is resolved or :attr:`finishing` is set (then once more)."""
        from confluent_kafka import KafkaException  # noqa: PLC0415 - Kafka streams only

        from primus.data.kafka import GroupMirror, KafkaSourceError  # noqa: PLC0415

        mirrors = [GroupMirror(kafka) for kafka in self.sources]
        committed: list[dict[tuple[str, int], int]] = [{} for _ in mirrors]
        try:
            while True:
                resolved = self.ledger.resolved or self.finishing.is_set()
                positions = await self.unread.look(checkpoints=True)
                for i, (kafka, mirror) in enumerate(zip(self.sources, mirrors, strict=True)):
                    wanted = {(topic, partition): offset
                              for (client, topic, partition), offset in positions.items()
                              if client == kafka.client and topic in kafka.topics}
                    if not wanted or wanted == committed[i]:
                        continue
                    try:
                        await asyncio.to_thread(mirror.commit, wanted)
                    except (KafkaException, KafkaSourceError) as exc:  # the stream reads on
                        logger.warning("[%s] commit to consumer group %s failed: %s",
                                       self.ledger.stream.name, kafka.commit_group, exc)
                        continue
                    committed[i] = wanted
                if resolved:
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(MIRROR_INTERVAL):
                        await self.finishing.wait()
        finally:
            for mirror in mirrors:
                await asyncio.to_thread(mirror.close)
