"""The data task protocol against a real etcd: the executor's side (primus/data/tasks.py)
and the AM's (primus/am/streams.py).

Boards (one per reader, each on its own lease) claim, checkpoint, complete, fail and release
tasks; the AM's side (:class:`~primus.am.streams.DataStreams`: the stream's ledger, its task
writer, its stats and end) re-queues the tasks of lost readers, judges the stream and keeps
tasks written ahead of the readers. :class:`AmSide` feeds that object as ``ApplicationMaster``
does: a watch of the application's keys, opened before the object loads, every event folded
into it (also while it loads), and its ``run`` against the view of a running application. One
difference: its write has no leadership guard (no AM leads here).

Every task is a ``TASK_BYTES`` range of one file (``chunk_size``), so task ``i`` starts at byte
``i * TASK_BYTES``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from primus.am.background import Background
from primus.am.reconcile import stream_verdict
from primus.am.streams import DataStreams
from primus.config.spec import JobSpec, RoleSpec, SourceSpec, StreamSpec
from primus.data import tasks as tasks_module
from primus.data.api import Claim
from primus.data.tasks import (
    AHEAD,
    CLAIM_BATCH,
    CLAIM_HORIZON,
    COMPLETION_DELAY,
    TASKS_PER_TXN,
    StreamBoard,
)
from primus.state.keys import AppKeys, StreamKeys
from primus.state.records import (
    AppStatus,
    DataTask,
    ScanPart,
    StreamScan,
    TaskDone,
    TaskOwner,
    TaskProgress,
    decode,
    task_id,
)
from primus.state.states import AppState
from primus.state.view import AppView
from primus.store.api import (
    Compare,
    Coordinator,
    EventType,
    Get,
    KeyValue,
    Lease,
    Op,
    Put,
    StoreUnavailableError,
    TxnResult,
    WatchEvent,
    while_leased,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TASK_BYTES = 100
ETCD_MAX_TXN_OPS = 128
"""etcd's default ``--max-txn-ops``; the test etcd runs with the default."""

TASK_KINDS = ("pending", "owner", "progress", "done", "failed")


# --- Waiting, bounded -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def within(seconds: float, what: str) -> AsyncIterator[None]:
    """Fail the test, saying what did not happen, if the block takes longer than ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        pytest.fail(f"{what}: not within {seconds:g} s")


async def until_key(store: Coordinator, key: str, present: bool, what: str,
                    seconds: float = 10.0) -> KeyValue | None:
    """Wait (watching, not polling) until ``key`` exists (``present``) or does not; its value."""
    async with within(seconds, what):
        result = await store.txn([], [Get(key)])
        if bool(result.reads[0]) == present:
            return result.reads[0][0] if present else None
        events = store.watch_prefix(key, result.revision + 1)
        try:
            async for event in events:
                assert isinstance(event, WatchEvent), "no compaction happens in these tests"
                if event.key == key and (event.type is EventType.PUT) == present:
                    return await store.get(key) if present else None
        finally:
            await events.aclose()
    raise AssertionError("unreachable: a prefix watch never ends")


# --- Reading the stream's keys --------------------------------------------------------------------


async def task_keys(store: Coordinator, keys: StreamKeys, task: str) -> dict[str, KeyValue]:
    """The keys of one task that exist, by kind (pending, owner, progress, done, failed), read
    at one revision."""
    result = await store.txn([], [Get(keys.key(kind, task)) for kind in TASK_KINDS])
    return {kind: kvs[0] for kind, kvs in zip(TASK_KINDS, result.reads, strict=True) if kvs}


async def kind_keys(store: Coordinator, keys: StreamKeys, kind: str) -> dict[str, KeyValue]:
    """Every key of one kind, by task id."""
    snapshot = await store.get_prefix(keys.prefix(kind))
    return {kv.key.rsplit("/", 1)[1]: kv for kv in snapshot.kvs}


async def progress_of(store: Coordinator, keys: StreamKeys, task: str) -> TaskProgress:
    kv = await store.get(keys.key("progress", task))
    assert kv is not None, f"task {task} has no progress/ key"
    return decode(TaskProgress, kv.value)


async def ended_record(store: Coordinator, keys: StreamKeys, kind: str, task: str) -> TaskDone:
    kv = await store.get(keys.key(kind, task))
    assert kv is not None, f"task {task} has no {kind}/ key"
    return decode(TaskDone, kv.value)


# --- The AM side ----------------------------------------------------------------------------------


class AmSide:
    """The AM's side of the stream (:class:`~primus.am.streams.DataStreams`), fed as the AM
    feeds it; every write is recorded and, as ``ApplicationMaster._data_write`` does, tried
    again while etcd does not answer.

    Started with :meth:`load` (a watch of the application's keys from the current revision
    on, folded into the object, then its ledger reads the stream) and :meth:`run` (the
    object's ``run`` against the view of a running application: it loads again, then the
    writer, the stats and ``end``).
    """

    def __init__(self, store: Coordinator, keys: AppKeys, stream: StreamSpec) -> None:
        self.store = store
        self.keys = keys.stream(stream.name)
        self.activity = asyncio.Event()  # set after every write and every event folded in
        self.streams = DataStreams(store, keys, [stream], self.write, self.activity.set)
        self.ledger = self.streams.ledgers[stream.name]
        self.view = AppView(keys, JobSpec(name="app", roles=[RoleSpec(
            name="worker", command="true")], data=[stream]), AppStatus(
            app_id=keys.app_id, name="app", state=AppState.RUNNING, submit_time=time.time()))
        self.folded: list[WatchEvent] = []  # every event folded in, in order
        self.writes: list[list[Op]] = []  # the ops of every write, in order
        self.pending_high = 0  # an upper bound of pending/ keys right after any write
        self.in_flight = 0  # writes sent and not yet answered
        self.errors: list[BaseException] = []
        self.lost = asyncio.Event()  # the AM's lease is never lost here
        self._root = keys.root
        self._background = Background(self._failed)

    async def write(self, ops: list[Op], compares: list[Compare]) -> bool:
        """The object's write (:data:`~primus.data.tasks.WriteOps`), unguarded."""
        self.in_flight += 1
        try:
            added = sum(1 for op in ops if isinstance(op, Put) and
                        op.key.startswith(self.keys.prefix("pending")))
            if added:
                # Only writes add pending tasks; readers only take them away. So the count
                # before a write plus what it adds bounds the count after it from above.
                before = await self.store.count_prefix(self.keys.prefix("pending"))
                self.pending_high = max(self.pending_high, before + added)
            result = await while_leased(self.lost, lambda: self.store.txn(compares, ops))
            if result.succeeded:
                self.writes.append(ops)
            return result.succeeded
        finally:
            self.in_flight -= 1
            self.activity.set()

    async def load(self) -> None:
        """As the AM: its watch opened first, so that events come while the ledger loads."""
        revision = (await self.store.txn([], [])).revision
        self._background.spawn(self._follow(revision + 1))
        await self.streams.load()

    def run(self) -> None:
        self._background.spawn(self.streams.run(self.view))  # until stopped: sources may come

    def _failed(self, error: BaseException) -> None:
        self.errors.append(error)
        self.activity.set()

    async def _follow(self, revision: int) -> None:
        async for event in self.store.watch_prefix(self._root, revision):
            assert isinstance(event, WatchEvent), "no compaction happens in these tests"
            self.streams.observe(event)
            self.folded.append(event)
            self.activity.set()

    async def until(self, condition: Callable[[], bool], what: str,
                    seconds: float = 10.0) -> None:
        """Wait until ``condition()`` holds, looking again after every write and event."""
        async with within(seconds, what):
            while not condition():
                if self.errors:
                    raise AssertionError(f"the AM side failed: {self.errors[0]!r}") \
                        from self.errors[0]
                self.activity.clear()
                await self.activity.wait()

    async def stop(self) -> None:
        """Stop watching and writing, as an AM that died; raise what went wrong meanwhile."""
        self.streams.cancel()
        await asyncio.gather(*self._background.cancel(), return_exceptions=True)
        if self.errors:
            raise AssertionError(f"the AM side failed: {self.errors[0]!r}") from self.errors[0]


class StreamTestbed:
    """One stream under a unique prefix: its data file, AM sides and readers (with leases)."""

    def __init__(self, store: Coordinator, prefix: str, tmp_path: Path) -> None:
        self.store = store
        self.app_keys = AppKeys(prefix, "app")
        self.keys = self.app_keys.stream("train")
        self.tmp_path = tmp_path
        self.ams: list[AmSide] = []
        self.leases: list[Lease] = []

    def stream(self, tasks: int, **fields: Any) -> StreamSpec:
        """A stream of ``tasks`` tasks of ``TASK_BYTES`` each, in one file."""
        data = self.tmp_path / "data" / "part-0.txt"
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_bytes(b"x" * (tasks * TASK_BYTES))
        return StreamSpec(name="train", roles=["worker"], sources=[SourceSpec(path=str(data))],
                          chunk_size=TASK_BYTES, **fields)

    def side(self, stream: StreamSpec, store: Any = None) -> AmSide:
        """An AM side, not started."""
        side = AmSide(store or self.store, self.app_keys, stream)
        self.ams.append(side)
        return side

    async def am(self, stream: StreamSpec, run: bool = True, store: Any = None) -> AmSide:
        side = self.side(stream, store)
        await side.load()
        if run:
            side.run()
        return side

    async def board(self, stream: StreamSpec, index: int, ttl: int = 30,
                    store: Any = None, clock: Callable[[], float] = time.monotonic
                    ) -> StreamBoard:
        """A reader's board on a lease of its own (not kept alive: ``ttl`` is its life)."""
        lease = await self.store.grant_lease(ttl)
        self.leases.append(lease)
        owner = TaskOwner(role="worker", index=index, attempt=1, since=0.0)
        return StreamBoard(store or self.store, self.keys, stream, owner, lease.id,
                           asyncio.Event(), clock)

    async def close(self) -> None:
        for side in self.ams:
            await side.stop()
        for lease in self.leases:
            await self.store.revoke_lease(lease.id)


@pytest.fixture
async def testbed(store, prefix, tmp_path) -> AsyncIterator[StreamTestbed]:
    bed = StreamTestbed(store, prefix, tmp_path)
    try:
        yield bed
    finally:
        await bed.close()


# --- Faults at a transaction ----------------------------------------------------------------------


class GatedStore:
    """The real store, except for the first transaction whose operations ``match``: it waits at
    a gate ``before`` it is sent, or ``after`` etcd committed it; or etcd commits it and its
    reply is lost (``lost-reply``): the caller gets :class:`StoreUnavailableError` once the gate
    opens, as when etcd timed out or the connection dropped after the commit."""

    def __init__(self, store: Coordinator, match: Callable[[Sequence[Op]], bool],
                 hold: str) -> None:
        self._store = store
        self._match = match
        self._hold = hold
        self.reached = asyncio.Event()  # the transaction is at the gate
        self.gate = asyncio.Event()
        self.committed: TxnResult | None = None
        self.retried = asyncio.Event()  # the same transaction was sent again and answered

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        if not self._match(success):
            return await self._store.txn(compares, success, failure)
        if self.reached.is_set():
            result = await self._store.txn(compares, success, failure)
            self.retried.set()
            return result
        if self._hold == "before":
            self.reached.set()
            await self.gate.wait()
        self.committed = await self._store.txn(compares, success, failure)
        if self._hold != "before":
            self.reached.set()
            await self.gate.wait()
        if self._hold == "lost-reply":
            raise StoreUnavailableError("the reply was lost (injected)")
        return self.committed


# --- Readers --------------------------------------------------------------------------------------


def tid(seq: int) -> str:
    """The id of task ``seq`` of epoch 1."""
    return task_id(1, seq)


async def complete_rest(board: StreamBoard, claim: Claim, *, flush: bool = True) -> None:
    """Complete ``claim`` as if the rest of its range was read: one record per 10 bytes; and
    write it now (``flush``) rather than with the board's next write."""
    rest = claim.task.end - claim.offset
    await board.complete(claim, claim.records + rest // 10, claim.bytes + rest)
    if flush:
        await board.flush()


async def drain(board: StreamBoard, claimed: collections.Counter[str]) -> None:
    """Claim and complete tasks until the stream ends, counting every claim; completions are
    written as a reader writes them (with its next claim, or before it waits for work)."""
    while (got := await board.next()) is not None:
        claimed[got.task.task_id] += 1
        await complete_rest(board, got, flush=False)


async def claim(board: StreamBoard, what: str = "a claim", seconds: float = 10.0) -> Claim:
    async with within(seconds, what):
        got = await board.next()
    assert got is not None, f"{what}: the stream ended instead"
    return got


# --- Concurrent claimers --------------------------------------------------------------------------


async def test_concurrent_claimers_complete_every_task_exactly_once(testbed):
    total = 200
    stream = testbed.stream(total)
    am = await testbed.am(stream)
    boards = [await testbed.board(stream, index) for index in range(8)]
    claimed: collections.Counter[str] = collections.Counter()

    async with within(40, f"8 readers draining {total} tasks"):
        await asyncio.gather(*(drain(board, claimed) for board in boards))

    every = {tid(seq) for seq in range(total)}
    assert set(claimed) == every, f"never claimed: {sorted(every - set(claimed))[:5]}"
    twice = {task: n for task, n in claimed.items() if n > 1}
    assert not twice, f"claimed more than once: {twice}"
    done = await kind_keys(testbed.store, testbed.keys, "done")
    assert set(done) == every
    assert all(kv.version == 1 for kv in done.values()), "a done/ key was written twice"
    for kind in ("pending", "owner", "progress", "failed"):
        assert await kind_keys(testbed.store, testbed.keys, kind) == {}, f"{kind}/ not empty"
    await am.until(lambda: am.ledger.stats.done == total, f"the ledger counting {total} done")
    stats = am.ledger.stats
    assert (stats.tasks, stats.done, stats.failed) == (total, total, 0)
    assert (stats.records, stats.bytes) == (total * TASK_BYTES // 10, total * TASK_BYTES)
    end = await testbed.store.get(testbed.keys.end)
    assert end is not None and end.mod_revision > max(kv.mod_revision for kv in done.values())


class CountingStore:
    """The real store, counting the transactions sent through it."""

    def __init__(self, store: Coordinator) -> None:
        self._store = store
        self.txns = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        self.txns += 1
        return await self._store.txn(compares, success, failure)


def ticking(step: float) -> Callable[[], float]:
    """A clock that moves ``step`` seconds at every look."""
    now = itertools.count(step=step)
    return lambda: next(now)


async def paced_reader(testbed: StreamTestbed, stream: StreamSpec, index: int,
                       store: Any = None) -> StreamBoard:
    """A reader that has claimed and completed two tasks one by one, a millisecond apart: its
    next claim is a batch."""
    reader = await testbed.board(stream, index, store=store, clock=ticking(0.001))
    for i in range(2):
        await complete_rest(reader, await claim(reader, f"single claim {i}"))
    return reader


async def test_a_fast_reader_claims_a_batch_in_one_transaction_and_hands_it_out_one_by_one(
        testbed):
    stream = testbed.stream(40)
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.stats.tasks == 40, "the 40 tasks written")
    counting = CountingStore(testbed.store)
    reader = await paced_reader(testbed, stream, 0, counting)
    sent = counting.txns
    batch = [await claim(reader, f"claim {i} of the batch") for i in range(CLAIM_BATCH)]

    assert counting.txns == sent + 1, "a batch is claimed in one transaction"
    owned = await kind_keys(testbed.store, testbed.keys, "owner")
    assert set(owned) == {got.task.task_id for got in batch}
    assert all(kv.lease == reader.lease_id for kv in owned.values())
    for got in batch:
        await complete_rest(reader, got)
    assert len(await kind_keys(testbed.store, testbed.keys, "done")) == 2 + CLAIM_BATCH


async def test_a_batchs_completions_ride_with_the_next_claim_in_one_transaction(testbed):
    stream = testbed.stream(40)
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.stats.tasks == 40, "the 40 tasks written")
    counting = CountingStore(testbed.store)
    reader = await paced_reader(testbed, stream, 0, counting)
    batch = [await claim(reader, f"claim {i} of the batch") for i in range(CLAIM_BATCH)]
    sent = counting.txns

    for got in batch:
        await complete_rest(reader, got, flush=False)
    assert counting.txns == sent, "a completion waits for the reader's next write"
    following = await claim(reader, "the next batch's first task")

    assert counting.txns == sent + 1, "the completions and the next claim: one transaction"
    done = await kind_keys(testbed.store, testbed.keys, "done")
    owner = await testbed.store.get(testbed.keys.key("owner", following.task.task_id))
    assert owner is not None
    assert {kv.mod_revision for task, kv in done.items()
            if task in {got.task.task_id for got in batch}} == {owner.create_revision}, \
        "the batch's completions were not written by the next claim"


async def test_a_completion_is_written_within_the_delay_when_the_reader_writes_nothing_else(
        testbed):
    stream = testbed.stream(4)
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.stats.tasks == 4, "the 4 tasks written")
    reader = await testbed.board(stream, 0)
    got = await claim(reader)
    await complete_rest(reader, got, flush=False)
    key = testbed.keys.key("done", got.task.task_id)
    assert await testbed.store.get(key) is None, "written at once, not with the next write"

    await until_key(testbed.store, key, True, "the completion written after its delay",
                    seconds=COMPLETION_DELAY + 5)
    await am.until(lambda: am.ledger.stats.done == 1, "the ledger counting it done")


async def test_completions_are_written_alone_when_the_claim_they_ride_with_collides(testbed):
    stream = testbed.stream(6)
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.stats.tasks == 6, "the 6 tasks written")
    counting = CountingStore(testbed.store)
    reader = await testbed.board(stream, 0, store=counting)  # one task per claim
    first = await claim(reader, "the reader's first task")
    await complete_rest(reader, first, flush=False)
    rival = await testbed.board(stream, 0)  # the same index: it picks the same next task
    taken = await claim(rival, "the rival's claim")
    sent = counting.txns

    got = await claim(reader, "the reader's claim after the collision")

    assert got.task.task_id != taken.task.task_id
    assert counting.txns == sent + 3, \
        "expected the failed claim with the completion, the completion alone, the claim again"
    done = await ended_record(testbed.store, testbed.keys, "done", first.task.task_id)
    assert done.index == 0
    assert await testbed.store.get(testbed.keys.key("owner", first.task.task_id)) is None


async def test_a_slow_reader_claims_one_task_at_a_time(testbed):
    stream = testbed.stream(40)
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.stats.tasks == 40, "the 40 tasks written")
    reader = await testbed.board(stream, 0, clock=ticking(2 * CLAIM_HORIZON))
    for i in range(4):
        got = await claim(reader, f"claim {i}")
        assert set(await kind_keys(testbed.store, testbed.keys, "owner")) == \
            {got.task.task_id}, "a reader slower than the claim horizon holds only its task"
        await complete_rest(reader, got)


async def test_tasks_claimed_in_a_batch_and_not_handed_out_go_back_unattempted_on_close(
        testbed):
    stream = testbed.stream(40)
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.stats.tasks == 40, "the 40 tasks written")
    reader = await paced_reader(testbed, stream, 0)
    handed = await claim(reader, "the first task of a batch")
    assert len(await kind_keys(testbed.store, testbed.keys, "owner")) == CLAIM_BATCH

    await reader.close()

    owned = await kind_keys(testbed.store, testbed.keys, "owner")
    assert set(owned) == {handed.task.task_id}, "only the task handed out is still owned"
    pending = await kind_keys(testbed.store, testbed.keys, "pending")
    assert len(pending) == 40 - 2 - 1
    for task in pending:
        kv = await testbed.store.get(testbed.keys.key("progress", task))
        assert kv is None or decode(TaskProgress, kv.value).attempts == 0, \
            f"task {task} given back counts an attempt"


async def test_a_lost_readers_unstarted_batch_is_requeued_and_every_task_done_once(testbed):
    total = 40
    stream = testbed.stream(total)
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.stats.tasks == total, f"the {total} tasks written")
    lost_reader = await paced_reader(testbed, stream, 0)
    started = await claim(lost_reader, "the first task of a batch")
    await lost_reader.checkpoint(started, started.offset + 40, 4, 40)
    held = set(await kind_keys(testbed.store, testbed.keys, "owner"))
    assert len(held) == CLAIM_BATCH

    await testbed.store.revoke_lease(lost_reader.lease_id)  # as when its lease expires
    await am.until(lambda: all(am.ledger.where.get(task) == "pending" for task in held),
                   "the ledger re-queuing every task of the lost reader's batch")
    claimed: collections.Counter[str] = collections.Counter()
    async with within(20, "a new reader draining the stream"):
        await drain(await testbed.board(stream, 1), claimed)

    assert held <= set(claimed) and max(claimed.values()) == 1
    done = await kind_keys(testbed.store, testbed.keys, "done")
    assert len(done) == total and await kind_keys(testbed.store, testbed.keys, "failed") == {}
    resumed = await ended_record(testbed.store, testbed.keys, "done", started.task.task_id)
    assert (resumed.attempts, resumed.records) == (2, TASK_BYTES // 10), \
        "the started task resumed at its checkpoint"


async def test_a_task_a_lost_reader_claimed_but_never_read_is_requeued_without_an_attempt(
        testbed):
    total = 40
    stream = testbed.stream(total, max_task_attempts=1)  # an attempt counted fails a task
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.stats.tasks == total, f"the {total} tasks written")
    lost_reader = await paced_reader(testbed, stream, 0)
    reading = await claim(lost_reader, "the first task of a batch")  # read, not checkpointed
    held = set(await kind_keys(testbed.store, testbed.keys, "owner"))
    assert len(held) == CLAIM_BATCH

    await testbed.store.revoke_lease(lost_reader.lease_id)  # as when its lease expires
    await am.until(lambda: all(am.ledger.where.get(task) in ("pending", "failed")
                               for task in held),
                   "the ledger re-queuing or failing every task of the lost reader")

    where = {task: am.ledger.where[task] for task in held}
    assert where == {task: "failed" if task == reading.task.task_id else "pending"
                     for task in held}, "only the task it was reading counts an attempt"
    for task in held - {reading.task.task_id}:
        kv = await testbed.store.get(testbed.keys.key("progress", task))
        assert kv is None or decode(TaskProgress, kv.value).attempts == 0, \
            f"task {task}, claimed ahead and never read, counts an attempt"
    failed = await ended_record(testbed.store, testbed.keys, "failed", reading.task.task_id)
    assert failed.attempts == 1 and "reader lost" in failed.error
    claimed: collections.Counter[str] = collections.Counter()
    async with within(20, "a new reader draining the stream"):
        await drain(await testbed.board(stream, 1), claimed)
    assert held - {reading.task.task_id} <= set(claimed) and max(claimed.values()) == 1
    done = await kind_keys(testbed.store, testbed.keys, "done")
    assert len(done) == total - 1


# --- Writing ahead of the readers -----------------------------------------------------------------


async def test_writer_keeps_a_bounded_number_of_tasks_ahead_of_the_readers(testbed):
    total = 2500
    assert 2 * TASKS_PER_TXN + 1 <= ETCD_MAX_TXN_OPS  # scan + (tasks/, pending/) per task
    stream = testbed.stream(total)
    am = await testbed.am(stream)
    first_round = -(-AHEAD // TASKS_PER_TXN) * TASKS_PER_TXN  # the first batch end >= AHEAD
    assert first_round < total

    # No reader yet: the writer stops once AHEAD tasks are pending. It updates the ledger and
    # blocks in the same step as a write returns, so once no write is in flight after the
    # last batch, it is waiting for consumption.
    await am.until(lambda: am.ledger.stats.tasks >= AHEAD and am.in_flight == 0,
                   f"the writer writing {AHEAD} tasks ahead")
    assert am.ledger.stats.tasks == first_round, \
        f"with no reader, {am.ledger.stats.tasks} of {total} tasks written"
    assert await testbed.store.count_prefix(testbed.keys.prefix("pending")) == first_round
    scan = decode(StreamScan, (await testbed.store.get(testbed.keys.scan)).value)
    assert (scan.created, scan.complete) == (first_round, False)

    boards = [await testbed.board(stream, index) for index in range(8)]
    claimed: collections.Counter[str] = collections.Counter()
    async with within(50, f"8 readers draining {total} tasks"):
        await asyncio.gather(*(drain(board, claimed) for board in boards))

    assert sorted(claimed) == [tid(seq) for seq in range(total)]
    assert set(claimed.values()) == {1}
    task_writes = [ops for ops in am.writes if any(
        isinstance(op, Put) and op.key.startswith(testbed.keys.prefix("tasks")) for op in ops)]
    assert sum(len(ops) // 2 for ops in task_writes) == total  # each: scan + 2 per task
    assert max(len(ops) for ops in task_writes) <= ETCD_MAX_TXN_OPS
    assert max(len(ops) // 2 for ops in task_writes) <= TASKS_PER_TXN
    assert am.pending_high <= AHEAD + TASKS_PER_TXN - 1, \
        f"up to {am.pending_high} tasks pending, more than written ahead ({AHEAD})"
    assert len(await testbed.store.list_keys(testbed.keys.prefix("tasks"))) == total
    scan = decode(StreamScan, (await testbed.store.get(testbed.keys.scan)).value)
    assert scan.complete and scan.epoch_tasks == total


# --- Losing a reader ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["revoked", "expired"])
async def test_lost_readers_task_is_requeued_and_resumed_at_its_checkpoint(testbed, how):
    stream = testbed.stream(1)
    await testbed.am(stream)
    store, keys, task = testbed.store, testbed.keys, tid(0)
    await until_key(store, keys.key("pending", task), True, "the task written")
    lost_reader = await testbed.board(stream, 0, ttl=2 if how == "expired" else 30)
    first = await claim(lost_reader, "the first claim")
    await lost_reader.checkpoint(first, 40, 4, 40)
    next_reader = await testbed.board(stream, 1)
    waiting = asyncio.ensure_future(next_reader.next())  # nothing pending: it waits

    if how == "revoked":
        await store.revoke_lease(lost_reader.lease_id)
    await until_key(store, keys.key("owner", task), False,
                    f"the lost reader's owner key vanishing ({how} lease)")
    async with within(10, "the next reader claiming the re-queued task"):
        resumed = await waiting

    assert resumed is not None and resumed.task.task_id == task
    assert (resumed.offset, resumed.records, resumed.bytes) == (40, 4, 40)
    progress = await progress_of(store, keys, task)
    assert (progress.offset, progress.records, progress.bytes) == (40, 4, 40)
    assert progress.attempts == 1 and "lost" in progress.error
    await complete_rest(next_reader, resumed)
    done = await ended_record(store, keys, "done", task)
    assert (done.attempts, done.index, done.records, done.bytes) == (2, 1, 10, 100)


# --- A reader that lost ownership -----------------------------------------------------------------


@pytest.mark.parametrize("then", ["complete", "release", "fail"])
@pytest.mark.parametrize("reclaimed", [False, True], ids=["requeued", "reclaimed"])
async def test_reader_that_lost_its_lease_can_commit_nothing(testbed, reclaimed, then):
    stream = testbed.stream(1)
    am = await testbed.am(stream)
    store, keys, task = testbed.store, testbed.keys, tid(0)
    lost_reader = await testbed.board(stream, 0)
    stale = await claim(lost_reader)
    await lost_reader.checkpoint(stale, 40, 4, 40)
    await store.revoke_lease(lost_reader.lease_id)  # its `lost` event is not set: it does not know
    await until_key(store, keys.key("pending", task), True, "the ledger re-queuing the task")
    if reclaimed:
        new_reader = await testbed.board(stream, 1)
        fresh = await claim(new_reader, "the new reader's claim")
    before = await task_keys(store, keys, task)

    await lost_reader.checkpoint(stale, 90, 9, 90)
    if then == "complete":
        await lost_reader.complete(stale, 10, 100)
    elif then == "release":
        await lost_reader.release(stale, 90, 9, 90)
    else:
        await lost_reader.fail(stale, "a corrupt record")
    await lost_reader.flush()

    assert await task_keys(store, keys, task) == before, \
        f"the lost reader's checkpoint and {then} changed the task's keys"
    if reclaimed:
        await complete_rest(new_reader, fresh)
        done = await ended_record(store, keys, "done", task)
        assert (done.index, done.attempts, done.records, done.bytes) == (1, 2, 10, 100)
        await am.until(lambda: am.ledger.resolved, "the ledger seeing the task done")
        assert (am.ledger.stats.done, am.ledger.stats.failed) == (1, 0)


async def test_reader_that_knows_its_lease_is_lost_writes_nothing(testbed):
    stream = testbed.stream(1)
    await testbed.am(stream)
    store, keys, task = testbed.store, testbed.keys, tid(0)
    reader = await testbed.board(stream, 0)
    owned = await claim(reader)
    before = await task_keys(store, keys, task)
    assert set(before) == {"owner"}

    reader.lost.set()  # its lease keeper gave up; etcd may not have expired the lease yet
    await reader.checkpoint(owned, 50, 5, 50)
    await reader.complete(owned, 10, 100)

    assert await task_keys(store, keys, task) == before


# --- Attempts and the verdict ---------------------------------------------------------------------


@pytest.mark.parametrize("last", ["failed", "lost"])
async def test_task_failing_max_task_attempts_times_ends_in_failed_with_its_error(testbed,
                                                                                   last):
    stream = testbed.stream(1, max_task_attempts=3)
    am = await testbed.am(stream)
    store, keys, task = testbed.store, testbed.keys, tid(0)
    reader = await testbed.board(stream, 0)
    for attempt in (1, 2):
        got = await claim(reader, f"claim {attempt}")
        assert (got.offset, got.records) == ((20, 2) if attempt == 2 else (0, 0))
        await reader.checkpoint(got, 20, 2, 20)
        await reader.fail(got, f"corrupt record at byte 20 (attempt {attempt})")
        progress = await progress_of(store, keys, task)
        assert (progress.attempts, progress.offset) == (attempt, 20)
        assert progress.error == f"corrupt record at byte 20 (attempt {attempt})"
    doomed = await testbed.board(stream, 1)
    got = await claim(doomed, "claim 3")
    await doomed.checkpoint(got, 50, 5, 50)
    if last == "failed":
        await doomed.fail(got, "unreadable file")
    else:
        await store.revoke_lease(doomed.lease_id)

    failed = await until_key(store, keys.key("failed", task), True, "the task failing")
    record = decode(TaskDone, failed.value)
    assert record.attempts == 3
    if last == "failed":
        assert record.error == "unreadable file"
    else:
        assert "reader lost" in record.error
    assert (record.records, record.bytes) == (5, 50)
    assert set(await task_keys(store, keys, task)) == {"failed"}
    await am.until(lambda: am.ledger.stats.failed == 1, "the ledger counting the failure")
    assert am.ledger.resolved
    assert "1 of 1 tasks failed" in (stream_verdict(am.ledger.stream, am.ledger.facts()) or "")
    async with within(10, "the stream ending after its only task failed"):
        assert await reader.next() is None


async def fail_at_once(board: StreamBoard, count: int) -> None:
    for _ in range(count):
        await board.fail(await claim(board), "corrupt record")


async def test_verdict_fails_the_stream_once_more_tasks_failed_than_allowed(testbed):
    stream = testbed.stream(4, max_task_attempts=1, task_failed_percent=25)
    am = await testbed.am(stream)
    reader = await testbed.board(stream, 0)

    await fail_at_once(reader, 1)
    await am.until(lambda: am.ledger.stats.failed == 1, "the ledger counting 1 failed")
    assert stream_verdict(am.ledger.stream, am.ledger.facts()) is None  # 25% may fail
    await fail_at_once(reader, 1)
    await am.until(lambda: am.ledger.stats.failed == 2, "the ledger counting 2 failed")

    verdict = stream_verdict(am.ledger.stream, am.ledger.facts())
    failed = await kind_keys(testbed.store, testbed.keys, "failed")
    first = min(failed, key=lambda task: failed[task].mod_revision)
    assert verdict == ("data stream train: 2 of 4 tasks failed (50.0%, task_failed_percent 25); "
                       f"first: {first}: corrupt record"), verdict


@pytest.mark.parametrize("success_percent, verdict", [
    (50, None), (75, "data stream train: 2 of 4 tasks done (50.0%, task_success_percent 75); "
                     "first: 0001-00000000: corrupt record")],
    ids=["enough-done", "too-few-done"])
async def test_verdict_on_too_few_tasks_done_comes_once_the_stream_is_resolved(
        testbed, success_percent, verdict):
    stream = testbed.stream(4, max_task_attempts=1, task_failed_percent=50,
                            task_success_percent=success_percent)
    am = await testbed.am(stream)
    reader = await testbed.board(stream, 0)
    await fail_at_once(reader, 2)
    await complete_rest(reader, await claim(reader))
    await am.until(lambda: am.ledger.stats.done + am.ledger.stats.failed == 3,
                   "the ledger seeing 3 tasks resolved")
    assert not am.ledger.resolved and stream_verdict(am.ledger.stream, am.ledger.facts()) is None

    await complete_rest(reader, await claim(reader))
    await am.until(lambda: am.ledger.resolved, "the ledger seeing every task resolved")
    assert stream_verdict(am.ledger.stream, am.ledger.facts()) == verdict
    async with within(10, "the resolved stream ending"):
        assert await reader.next() is None


# --- A new AM -------------------------------------------------------------------------------------


async def test_new_ledger_mid_stream_keeps_done_tasks_and_requeues_readers_lost_meanwhile(
        testbed, monkeypatch):
    # A small window ahead, so that the first AM stops with most of the stream unwritten.
    monkeypatch.setattr(tasks_module, "AHEAD", 40)
    monkeypatch.setattr(tasks_module, "TASKS_PER_TXN", 10)
    total = 150
    stream = testbed.stream(total)
    store, keys = testbed.store, testbed.keys
    first_am = await testbed.am(stream)
    worker, lost_reader, finisher = [await testbed.board(stream, i) for i in range(3)]
    for _ in range(15):
        await complete_rest(worker, await claim(worker))
    lost = await claim(lost_reader, "the reader to be lost claiming")
    await lost_reader.checkpoint(lost, lost.task.start + 30, 3, 30)
    unfinished = await claim(finisher, "the finisher claiming")
    # Stopped while its writer waits for consumption, not in the middle of a write.
    await first_am.until(lambda: first_am.ledger.stats.done == 15 and
                         first_am.ledger.where.get(unfinished.task.task_id) == "owner" and
                         first_am.ledger.pending_count() >= tasks_module.AHEAD and
                         first_am.in_flight == 0,
                         "the first AM seeing 15 done, 2 owned, and enough written ahead")
    await first_am.stop()

    # No AM watches: a reader is lost, others finish tasks.
    await store.revoke_lease(lost_reader.lease_id)
    await complete_rest(finisher, unfinished)
    for _ in range(3):
        await complete_rest(worker, await claim(worker))
    done_before = await kind_keys(store, keys, "done")
    tasks_before = await kind_keys(store, keys, "tasks")
    assert len(done_before) == 19 and len(tasks_before) < total
    lost_id = lost.task.task_id
    assert set(await task_keys(store, keys, lost_id)) == {"progress"}  # nowhere

    second_am = await testbed.am(stream, run=False)
    ledger = second_am.ledger
    records = [decode(TaskDone, kv.value) for kv in done_before.values()]
    assert (ledger.stats.tasks, ledger.stats.done, ledger.stats.failed) == \
        (len(tasks_before), 19, 0)
    assert (ledger.stats.records, ledger.stats.bytes) == \
        (sum(r.records for r in records), sum(r.bytes for r in records))
    assert all(ledger.where[task] == "done" for task in done_before)
    assert set(await task_keys(store, keys, lost_id)) == {"pending", "progress"}, \
        "the task of the reader lost while no AM watched was not re-queued"
    progress = await progress_of(store, keys, lost_id)
    assert (progress.offset, progress.records, progress.bytes, progress.attempts) == \
        (lost.task.start + 30, 3, 30, 1)

    second_am.run()
    claimed: collections.Counter[str] = collections.Counter()
    late = await testbed.board(stream, 3)
    async with within(30, "two readers draining the rest of the stream"):
        await asyncio.gather(drain(worker, claimed), drain(late, claimed))

    done = await kind_keys(store, keys, "done")
    assert set(done) == {tid(seq) for seq in range(total)}
    assert all(done[task] == kv for task, kv in done_before.items()), "a done task was rewritten"
    assert all(kv.version == 1 for kv in done.values()), "a task was done twice"
    assert set(claimed) == set(done) - set(done_before), "a done task was claimed again"
    assert set(claimed.values()) == {1}
    tasks_after = await kind_keys(store, keys, "tasks")
    assert len(tasks_after) == total and all(kv.version == 1 for kv in tasks_after.values())
    assert all(tasks_after[task] == kv for task, kv in tasks_before.items())
    resumed = await ended_record(store, keys, "done", lost_id)
    assert (resumed.attempts, resumed.records, resumed.bytes) == (2, 10, 100)
    await second_am.until(lambda: ledger.stats.done == total, "the new ledger counting all")
    assert (ledger.stats.records, ledger.stats.bytes) == (total * 10, total * TASK_BYTES)


async def test_events_folded_in_while_the_ledger_loads_are_not_lost(testbed):
    stream = testbed.stream(1)
    store, keys, task = testbed.store, testbed.keys, tid(0)
    first_am = await testbed.am(stream)
    reader = await testbed.board(stream, 0)
    owned = await claim(reader)
    await first_am.until(lambda: first_am.ledger.scan.complete, "the task written")
    await first_am.stop()

    gated = GatedStore(store, lambda ops: bool(ops) and ops[0] == Get(keys.scan), "after")
    second_am = testbed.side(stream, store=gated)
    loading = asyncio.ensure_future(second_am.load())
    async with within(10, "the new ledger reading the stream"):
        await gated.reached.wait()
    await complete_rest(reader, owned)  # committed after the ledger's read
    # put done/, delete owner/ (there is no progress/ to delete)
    await second_am.until(lambda: any(event.key == keys.key("owner", task)
                                      for event in second_am.folded),
                          "the completion's events folded in while the ledger reads")
    gated.gate.set()
    async with within(10, "the new ledger loading"):
        await loading

    ledger = second_am.ledger
    assert ledger.stats.done == 1 and ledger.resolved, \
        f"the task done after the ledger's read is lost: {ledger.stats}, {ledger.where}"


# --- Writes whose reply was lost (etcd committed them; the caller saw it unavailable) -------------


async def test_claim_whose_reply_was_lost_is_not_left_owned_by_nobody(testbed):
    stream = testbed.stream(1)
    await testbed.am(stream)
    store, keys, task = testbed.store, testbed.keys, tid(0)
    await until_key(store, keys.key("pending", task), True, "the task written")
    lossy = GatedStore(store, lambda ops: any(
        isinstance(op, Put) and op.key == keys.key("owner", task) for op in ops), "lost-reply")
    lossy.gate.set()
    reader = await testbed.board(stream, 0, store=lossy)
    claiming = asyncio.ensure_future(reader.next())
    async with within(10, "the claim tried again after its lost reply"):
        await lossy.retried.wait()

    owner = await store.get(keys.key("owner", task))
    assert owner is not None and owner.lease == reader.lease_id  # the first try committed
    finished, _ = await asyncio.wait({claiming}, timeout=2)
    claiming.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await claiming
    assert claiming in finished, \
        f"task {task} is owned on the reader's lease, but its next() waits for other work"
    assert claiming.result() is not None and claiming.result().task.task_id == task


async def test_task_batch_written_again_after_a_lost_reply_repeats_no_task(testbed):
    stream = testbed.stream(3)
    store, keys = testbed.store, testbed.keys
    lossy = GatedStore(store, lambda ops: any(
        isinstance(op, Put) and op.key.startswith(keys.prefix("tasks")) for op in ops),
        "lost-reply")
    await testbed.am(stream, store=lossy)
    async with within(10, "the batch of tasks committed"):
        await lossy.reached.wait()
    reader = await testbed.board(stream, 0)
    owned = await claim(reader)  # while the AM waits for the reply
    await complete_rest(reader, owned)

    lossy.gate.set()
    async with within(10, "the AM writing the batch again"):
        await lossy.retried.wait()

    task = owned.task.task_id
    assert set(await task_keys(store, keys, task)) == {"done"}, \
        f"task {task} was done, and is pending again after the batch was written again"


# --- A cancelled claim ----------------------------------------------------------------------------


@pytest.mark.parametrize(("hold", "cancels"), [("before", 1), ("after", 1), ("after", 3)],
                         ids=["cancelled-before-commit", "cancelled-after-commit",
                              "cancelled-again-while-releasing"])
async def test_claim_cancelled_mid_way_leaves_the_task_claimable(testbed, hold, cancels):
    stream = testbed.stream(1)
    await testbed.am(stream)
    store, keys, task = testbed.store, testbed.keys, tid(0)
    await until_key(store, keys.key("pending", task), True, "the task written")
    gated = GatedStore(store, lambda ops: any(
        isinstance(op, Put) and op.key == keys.key("owner", task) for op in ops), hold)
    reader = await testbed.board(stream, 0, store=gated)
    claiming = asyncio.ensure_future(reader.next())
    async with within(10, "the claim transaction"):
        await gated.reached.wait()

    claiming.cancel()
    for _ in range(cancels - 1):  # more cancels while next() waits for its claim to settle
        for _ in range(5):
            await asyncio.sleep(0)
        claiming.cancel()
    gated.gate.set()
    with pytest.raises(asyncio.CancelledError):
        async with within(10, "the cancelled claim returning"):
            await claiming

    assert gated.committed is not None and gated.committed.succeeded
    assert set(await task_keys(store, keys, task)) == {"pending", "progress"}
    progress = await progress_of(store, keys, task)
    assert (progress.offset, progress.records, progress.attempts) == (0, 0, 0)
    other = await testbed.board(stream, 1)
    again = await claim(other, "claiming the released task")
    assert (again.task.task_id, again.offset) == (task, 0)


# --- The end of the stream ------------------------------------------------------------------------


async def test_waiting_reader_gets_the_end_once_every_task_is_resolved(testbed):
    stream = testbed.stream(3)
    am = await testbed.am(stream)
    store, keys = testbed.store, testbed.keys
    holder = await testbed.board(stream, 0)
    held = [await claim(holder, f"claim {i}") for i in range(3)]
    idle = await testbed.board(stream, 1)
    waiting = asyncio.ensure_future(idle.next())

    for owned in held[:2]:
        await complete_rest(holder, owned)
    await am.until(lambda: am.ledger.stats.done == 2, "the ledger counting 2 done")
    assert not am.ledger.resolved and await store.get(keys.end) is None
    assert not waiting.done(), "a reader got an answer while a task was still being read"
    await complete_rest(holder, held[2])

    async with within(10, "the waiting reader seeing the end"):
        assert await waiting is None
    end = await store.get(keys.end)
    last_done = await store.get(keys.key("done", held[2].task.task_id))
    assert end is not None and last_done is not None
    assert end.mod_revision > last_done.mod_revision
    assert am.ledger.resolved and am.ledger.stats.done == 3
    newcomer = await testbed.board(stream, 2)
    async with within(5, "a new reader seeing the end"):
        assert await newcomer.next() is None


# --- Sources added to a running stream ------------------------------------------------------------


def with_added_source(testbed: StreamTestbed, stream: StreamSpec, tasks: int) -> StreamSpec:
    """``stream`` with a source added after its own: a file of ``tasks`` tasks, as the
    application's effective spec has it once ``primus data add`` added it."""
    data = testbed.tmp_path / "added" / "part-0.txt"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(b"y" * (tasks * TASK_BYTES))
    return stream.model_copy(update={"sources": [*stream.sources, SourceSpec(path=str(data))]})


async def written_tasks(testbed: StreamTestbed) -> dict[str, DataTask]:
    return {task: decode(DataTask, kv.value)
            for task, kv in (await kind_keys(testbed.store, testbed.keys, "tasks")).items()}


async def test_source_added_once_every_task_is_written_gets_tasks_and_holds_back_the_end(
        testbed):
    stream = testbed.stream(3)
    am = await testbed.am(stream)
    reader = await testbed.board(stream, 0)
    held = [await claim(reader, f"claim {i}") for i in range(3)]
    await am.until(lambda: am.ledger.scan.complete and am.in_flight == 0, "every task written")
    grown = with_added_source(testbed, stream, 2)

    am.streams.extend([grown])
    am.streams.extend([grown])  # as the AM does after each change and resync: nothing more
    assert not am.ledger.resolved, "the added source's tasks are not written yet"
    for owned in held:
        await complete_rest(reader, owned)
    await am.until(lambda: am.ledger.stats.done == 3 and am.ledger.stats.tasks == 5,
                   "the 3 tasks done and the added source's 2 written")
    assert await testbed.store.get(testbed.keys.end) is None
    claimed: collections.Counter[str] = collections.Counter()
    async with within(10, "a reader draining the added source"):
        await drain(reader, claimed)

    assert claimed == {tid(3): 1, tid(4): 1}
    tasks = await written_tasks(testbed)
    assert [tasks[tid(seq)].path for seq in range(5)] == \
        [stream.sources[0].path] * 3 + [grown.sources[1].path] * 2
    scan = decode(StreamScan, (await testbed.store.get(testbed.keys.scan)).value)
    assert scan.complete and scan.parts == [ScanPart(sources=1, first_task=0),
                                            ScanPart(sources=2, first_task=3)]
    done = await kind_keys(testbed.store, testbed.keys, "done")
    assert set(done) == set(tasks) and all(kv.version == 1 for kv in done.values())
    assert (am.ledger.stats.tasks, am.ledger.stats.done) == (5, 5) and am.ledger.resolved


async def test_new_ledger_resumes_an_added_source_written_in_part_repeating_no_task(testbed):
    stream = testbed.stream(5)
    store, keys = testbed.store, testbed.keys
    first_am = await testbed.am(stream)
    await first_am.until(lambda: first_am.ledger.scan.complete and first_am.in_flight == 0,
                         "every task written")
    added = AHEAD + 100
    grown = with_added_source(testbed, stream, added)
    first_am.streams.extend([grown])
    # Stopped while its writer waits for consumption, the added source written in part.
    await first_am.until(lambda: first_am.ledger.pending_count() >= AHEAD and
                         first_am.in_flight == 0, "the added source written up to AHEAD")
    await first_am.stop()
    scan = decode(StreamScan, (await store.get(keys.scan)).value)
    assert not scan.complete and 5 < scan.created < 5 + added
    assert scan.parts == [ScanPart(sources=1, first_task=0), ScanPart(sources=2, first_task=5)]
    before = await kind_keys(store, keys, "tasks")

    await testbed.am(grown)  # the new AM's ledger has the effective spec: both sources
    boards = [await testbed.board(grown, index) for index in range(4)]
    claimed: collections.Counter[str] = collections.Counter()
    async with within(50, "4 readers draining both sources"):
        await asyncio.gather(*(drain(board, claimed) for board in boards))

    assert sorted(claimed) == [tid(seq) for seq in range(5 + added)]
    assert set(claimed.values()) == {1}
    after = await kind_keys(store, keys, "tasks")
    assert all(kv.version == 1 for kv in after.values())
    assert all(after[task] == kv for task, kv in before.items()), "a written task was rewritten"
    tasks = await written_tasks(testbed)
    assert [(tasks[tid(seq)].path, tasks[tid(seq)].start) for seq in range(5, 5 + added)] == \
        [(grown.sources[1].path, i * TASK_BYTES) for i in range(added)]
    scan = decode(StreamScan, (await store.get(keys.scan)).value)
    assert scan.complete and scan.created == 5 + added
    assert await until_key(store, keys.end, True, "the end once every task is done")


async def test_added_source_joins_the_epoch_being_written_shuffled_apart_then_every_epoch_after(
        testbed):
    per_epoch = AHEAD + 100
    stream = testbed.stream(per_epoch, epochs=2, shuffle=True, seed=3)
    am = await testbed.am(stream)
    await am.until(lambda: am.ledger.pending_count() >= AHEAD and am.in_flight == 0,
                   "epoch 1 written up to AHEAD")
    grown = with_added_source(testbed, stream, 3)
    am.streams.extend([grown])
    boards = [await testbed.board(grown, index) for index in range(8)]
    claimed: collections.Counter[str] = collections.Counter()
    async with within(80, "8 readers draining both epochs"):
        await asyncio.gather(*(drain(board, claimed) for board in boards))

    tasks = await written_tasks(testbed)
    assert len(tasks) == 2 * (per_epoch + 3) and set(claimed) == set(tasks)
    assert set(claimed.values()) == {1}
    epoch_1 = [tasks[task_id(1, seq)] for seq in range(per_epoch + 3)]
    epoch_2 = [tasks[task_id(2, seq)] for seq in range(per_epoch + 3)]
    old, new = stream.sources[0].path, grown.sources[1].path
    assert {t.path for t in epoch_1[:per_epoch]} == {old}, "epoch 1's own part, shuffled"
    assert sorted(t.start for t in epoch_1[per_epoch:]) == [0, TASK_BYTES, 2 * TASK_BYTES]
    assert {t.path for t in epoch_1[per_epoch:]} == {new}, "then the added source's part"
    assert {(t.path, t.start) for t in epoch_2} == {(t.path, t.start) for t in epoch_1}
    assert {t.path for t in epoch_2[per_epoch:]} != {new}, "epoch 2 shuffles all sources"
    scan = decode(StreamScan, (await testbed.store.get(testbed.keys.scan)).value)
    assert (scan.epoch, scan.complete, scan.parts) == (2, True, [
        ScanPart(sources=2, first_task=0)])
