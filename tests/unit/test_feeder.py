"""The feeder: records reach a real reader process through a real pipe, exactly once and in
order; progress never counts what is still in the pipe; failures, early exits and cancellation
give tasks back where the reader got to. The task source is an in-memory fake recording calls.
"""

from __future__ import annotations

import asyncio
import os
import random
import select
import signal
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import fsspec
import pytest

from primus.data.api import Block, Claim, RecordFormat, get_format
from primus.data.feeder import PIPE_SIZE, FeedResult, _queued, feed
from primus.data.formats import encode_tfrecord, split_ranges, write_tfrecords
from primus.state.records import DataTask
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.timeout(60)

TEXT = get_format("text")
TFRECORD = get_format("tfrecord")

# A trainer that copies its stdin to a file, writing what it read before reading on (no
# userspace buffer: what it consumed from the pipe is in the file); optionally slowly, and up
# to a limit after which it exits (closing its input) or stalls.
READER = """
import os, sys, time
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
chunk, delay, limit, then = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
total = 0
while limit < 0 or total < limit:
    data = os.read(0, chunk if limit < 0 else min(chunk, limit - total))
    if not data:
        break
    view = memoryview(data)
    while view:
        view = view[os.write(out, view):]
    total += len(data)
    time.sleep(delay)
if then == "stall":
    time.sleep(3600)
"""


@dataclass
class Trainer:
    process: asyncio.subprocess.Process
    output: Path
    pipe: int  # the write end, for the feeder

    def received(self) -> bytes:
        return self.output.read_bytes()

    async def wait_for_output(self, size: int) -> None:
        async with asyncio.timeout(30):
            while True:
                if self.output.exists() and self.output.stat().st_size >= size:
                    return
                await asyncio.sleep(0.01)  # the output is a file: no event tells it grew

    def input_is_full(self) -> bool:
        """Whether the pipe has no room left (poll does not find its write end writable): the
        feeder can write no more until the trainer reads. Only while the feeder holds the write
        end open."""
        poller = select.poll()
        poller.register(self.pipe, select.POLLOUT)
        return not poller.poll(0)


@pytest.fixture
async def start_trainer(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[Trainer] = []

    async def start(chunk: int = 1 << 16, delay: float = 0.0, limit: int = -1,
                    then: str = "exit", fifo: Path | None = None) -> Trainer:
        output = tmp_path / f"received-{len(started)}"
        if fifo is None:
            read_end, write_end = os.pipe()
        else:  # opened as the executor does: for writing once a reader has it open
            os.mkfifo(fifo)
            read_end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            write_end = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.set_blocking(read_end, True)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", READER, str(output), str(chunk), str(delay), str(limit), then,
            stdin=read_end)
        os.close(read_end)
        trainer = Trainer(process, output, write_end)
        started.append(trainer)
        return trainer

    yield start
    for trainer in started:
        if trainer.process.returncode is None:
            trainer.process.kill()
            await trainer.process.wait()


@dataclass
class FakeSource:
    """Hands out ``claims`` in order, then ends the stream (or, with ``hold``, waits for more
    forever); records every call."""

    claims: deque[Claim]
    hold: bool = False
    calls: list[tuple] = field(default_factory=list)

    async def next(self) -> Claim | None:
        self.calls.append(("next",))
        if self.claims:
            return self.claims.popleft()
        if self.hold:
            await asyncio.Event().wait()
        return None

    async def checkpoint(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        self.calls.append(("checkpoint", claim.task.task_id, offset, records, nbytes))

    async def complete(self, claim: Claim, records: int, nbytes: int) -> None:
        self.calls.append(("complete", claim.task.task_id, records, nbytes))

    async def fail(self, claim: Claim, error: str) -> None:
        self.calls.append(("fail", claim.task.task_id, error))

    async def release(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        self.calls.append(("release", claim.task.task_id, offset, records, nbytes))

    def of(self, kind: str) -> list[tuple]:
        return [call for call in self.calls if call[0] == kind]


class CountingFormat(RecordFormat):
    """A format that counts the blocks read through it, and the claims it was told to prepare
    and to drop (as Kafka's prepares a consumer)."""

    name = "counting"

    def __init__(self, inner: RecordFormat) -> None:
        self.inner = inner
        self.blocks_read = 0
        self.bytes_read = 0
        self.prepared: list[str] = []
        self.unprepared: list[str] = []

    def prepare(self, claim: Claim) -> None:
        self.prepared.append(claim.task.task_id)

    def unprepare(self, claim: Claim) -> None:
        self.unprepared.append(claim.task.task_id)

    def blocks(self, f: IO[bytes], start: int, end: int, block_size: int = 1 << 20, *,
               aligned: bool = False) -> Iterator[Block]:
        for block in self.inner.blocks(f, start, end, block_size, aligned=aligned):
            self.blocks_read += 1
            self.bytes_read += len(block.data)
            yield block

    def align(self, f: IO[bytes], offset: int) -> int:
        return self.inner.align(f, offset)

    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        raise NotImplementedError  # blocks() delegates


@dataclass
class CountingClock:
    """A clock for the feeder that counts its reads.

    The feeder reads its clock each time it has looked at how far the trainer read, to know
    which checkpoints are due. So once the clock was read twice after a moment (claiming a task
    reads it too), the feeder has looked at what the trainer had consumed by then and made the
    checkpoints, completions and failures that called for.
    """

    time_source: Callable[[], float] = time.monotonic
    reads: int = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.time_source()

    async def next_look(self) -> None:
        """Wait until the feeder has looked at the pipe, and reported, since this call."""
        seen = self.reads + 2
        await wait_until_async(lambda: self.reads >= seen, 10,
                               "the feeder to look at how far the trainer read", interval=0.01)


def text_file(path: Path, size: int, seed: int) -> bytes:
    """Lines of mixed lengths (empty ones too) up to about ``size`` bytes, the last without a
    newline."""
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = b"%d " % len(lines) + b"x" * rng.choice([0, 1, 10, 80, 300, 2000]) + b"\n"
        lines.append(line)
        total += len(line)
    content = b"".join(lines) + b"last line without a newline"
    path.write_bytes(content)
    return content


def tfrecord_file(path: Path, count: int, seed: int, size: int = 1000) -> bytes:
    rng = random.Random(seed)
    write_tfrecords(path, (rng.randbytes(rng.randint(0, size)) for _ in range(count)))
    return path.read_bytes()


def claims_for(paths: list[Path], chunk_size: int | None = None, seq: int = 0) -> deque[Claim]:
    """Fresh claims of one task per file, or per ``chunk_size`` bytes of it, numbered from
    ``seq``."""
    claims: deque[Claim] = deque()
    for path in paths:
        size = path.stat().st_size
        for start, end in split_ranges(size, chunk_size):
            task = DataTask(epoch=1, seq=seq + len(claims), path=str(path), start=start,
                            end=end, size=size)
            claims.append(Claim(task=task, offset=start))
    return claims


def records_in(fmt: RecordFormat, path: str, start: int, end: int,
               aligned: bool = False) -> tuple[int, int]:
    """Records and bytes of the records starting in ``[start, end)`` of the file."""
    with fsspec.open(path, "rb") as f:
        blocks = list(fmt.blocks(f, start, end, aligned=aligned))
    return sum(b.records for b in blocks), sum(len(b.data) for b in blocks)


def assert_monotonic(checkpoints: list[tuple]) -> None:
    by_task: dict[str, list[tuple]] = {}
    for call in checkpoints:
        by_task.setdefault(call[1], []).append(call)
    for calls in by_task.values():
        offsets = [c[2] for c in calls]
        records = [c[3] for c in calls]
        assert offsets == sorted(set(offsets)), calls
        assert records == sorted(records), calls


async def feed_to(trainer: Trainer, source: FakeSource, fmt: RecordFormat, **kwargs: Any
                  ) -> FeedResult:
    options = {"checkpoint_records": 1000, "checkpoint_interval": 5.0, **kwargs}
    return await feed(trainer.pipe, source, fmt, **options)


@pytest.mark.parametrize("fmt", [TEXT, TFRECORD], ids=["text", "tfrecord"])
async def test_every_record_reaches_the_trainer_once_in_order_then_end_of_file(
        tmp_path: Path, start_trainer: Callable[..., Any], fmt: RecordFormat) -> None:
    paths = [tmp_path / f"part-{i}" for i in range(4)]
    contents = []
    for i, path in enumerate(paths[:3]):
        contents.append(text_file(path, 400_000 * (i + 1), seed=i) if fmt is TEXT else
                        tfrecord_file(path, 300 * (i + 1), seed=i))
    paths[3].write_bytes(b"")
    contents.append(b"")
    claims = claims_for(paths[:2])
    claims += claims_for(paths[2:], chunk_size=150_000, seq=len(claims))
    source = FakeSource(deque(claims))
    trainer = await start_trainer()

    result = await feed_to(trainer, source, fmt, block_size=1 << 15, checkpoint_records=200)

    assert await trainer.process.wait() == 0  # it exits only at end-of-file
    assert trainer.received() == b"".join(contents)
    expected = [("complete", c.task.task_id, *records_in(fmt, c.task.path, c.task.start,
                                                         c.task.end)) for c in claims]
    assert source.of("complete") == expected
    assert source.of("fail") == source.of("release") == []
    assert_monotonic(source.of("checkpoint"))
    total_records = sum(call[2] for call in expected)
    assert (result.tasks, result.failed, result.released) == (len(claims), 0, 0)
    assert (result.records, result.bytes) == (total_records, sum(map(len, contents)))
    assert not result.closed_by_trainer
    assert result.elapsed > 0


async def test_a_fifo_is_fed_like_a_pipe(tmp_path: Path,
                                         start_trainer: Callable[..., Any]) -> None:
    paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
    content = b"".join(text_file(p, 1_000_000, seed=i) for i, p in enumerate(paths))
    source = FakeSource(claims_for(paths))
    trainer = await start_trainer(chunk=4096, fifo=tmp_path / "fifo")

    result = await feed_to(trainer, source, TEXT, block_size=1 << 14)

    assert await trainer.process.wait() == 0
    assert trainer.received() == content
    assert [call[1] for call in source.of("complete")] == ["0001-00000000", "0001-00000001"]
    assert result.bytes == len(content)


async def test_an_empty_stream_closes_the_trainers_input_at_once(
        start_trainer: Callable[..., Any]) -> None:
    trainer = await start_trainer()
    result = await feed_to(trainer, FakeSource(deque()), TEXT)
    assert await trainer.process.wait() == 0
    assert trainer.received() == b""
    assert (result.tasks, result.records, result.closed_by_trainer) == (0, 0, False)


async def test_checkpoints_never_count_what_is_still_in_the_pipe(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
    content = text_file(paths[0], 3_000_000, seed=1) + text_file(paths[1], 3_000_000, seed=2)
    claims = claims_for(paths)
    source = FakeSource(deque(claims))
    fmt = CountingFormat(TEXT)
    block_size = 1 << 14
    limit = 1_500_000
    # Slow, small reads up to the limit, then nothing more: the pipe stays full.
    trainer = await start_trainer(chunk=8192, delay=0.001, limit=limit, then="stall")
    clock = CountingClock()
    feeding = asyncio.ensure_future(feed_to(trainer, source, fmt, block_size=block_size,
                                            checkpoint_records=300, clock=clock))
    await trainer.wait_for_output(limit)
    await clock.next_look()  # the checkpoints of everything consumed were made
    checkpoints_at_stall = source.of("checkpoint")
    os.kill(trainer.process.pid, signal.SIGKILL)
    result = await feeding

    received = trainer.received()
    assert len(received) == limit
    assert received == content[:limit]
    assert fmt.bytes_read > limit + PIPE_SIZE // 2  # the pipe held much that was not consumed
    assert result.closed_by_trainer
    checkpoints = source.of("checkpoint")
    assert checkpoints == checkpoints_at_stall  # nothing consumed after the stall
    assert len(checkpoints) >= 5
    assert_monotonic(checkpoints)
    first, ahead = claims[0].task, claims[1].task
    last_records = 0
    for _, task, offset, records, nbytes in checkpoints:
        assert task == first.task_id  # the limit lies in the first file
        assert offset <= len(received)
        assert (records, nbytes) == records_in(TEXT, first.path, 0, offset)
        assert records - last_records >= 300
        last_records = records
    # Released where the trainer got to: the last block boundary it consumed whole; the task
    # claimed ahead goes back untouched.
    [(_, task, offset, records, nbytes), released_ahead] = source.of("release")
    assert task == first.task_id
    assert offset <= len(received) < offset + block_size + 2100
    assert (records, nbytes) == records_in(TEXT, first.path, 0, offset)
    assert content[:offset].endswith(b"\n")
    assert released_ahead == ("release", ahead.task_id, 0, 0, 0)
    assert (result.tasks, result.released) == (0, 2)


@pytest.mark.parametrize("fmt", [TEXT, TFRECORD], ids=["text", "tfrecord"])
async def test_a_claim_with_an_offset_resumes_exactly_there(
        tmp_path: Path, start_trainer: Callable[..., Any], fmt: RecordFormat) -> None:
    path = tmp_path / "data"
    content = text_file(path, 500_000, seed=3) if fmt is TEXT else \
        tfrecord_file(path, 500, seed=3)
    size = len(content)
    with fsspec.open(str(path), "rb") as f:  # a checkpoint: a block boundary midway
        blocks = list(fmt.blocks(f, 0, size, 1 << 14))
    resume = blocks[len(blocks) // 2].end_offset
    records_before = sum(b.records for b in blocks[:len(blocks) // 2 + 1])
    task = DataTask(epoch=1, seq=7, path=str(path), start=0, end=size, size=size)
    claim = Claim(task=task, offset=resume, records=records_before, bytes=resume)
    source = FakeSource(deque([claim]))
    trainer = await start_trainer()

    result = await feed_to(trainer, source, fmt)

    await trainer.process.wait()
    assert trainer.received() == content[resume:]
    total_records = sum(b.records for b in blocks)
    assert source.of("complete") == [("complete", task.task_id, total_records, size)]
    assert (result.records, result.bytes) == (total_records - records_before, size - resume)


async def test_a_resumed_range_of_a_file_delivers_only_its_own_records(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    path = tmp_path / "data.tfrecord"
    content = tfrecord_file(path, 600, seed=4)
    size = len(content)
    start, end = size // 3, 2 * size // 3
    with fsspec.open(str(path), "rb") as f:
        first = TFRECORD.align(f, start)
        blocks = list(TFRECORD.blocks(f, start, end, 1 << 12))
    resume = blocks[2].end_offset
    task = DataTask(epoch=1, seq=0, path=str(path), start=start, end=end, size=size)
    claim = Claim(task=task, offset=resume, records=sum(b.records for b in blocks[:3]),
                  bytes=resume - first)
    source = FakeSource(deque([claim]))
    trainer = await start_trainer()

    await feed_to(trainer, source, TFRECORD)

    await trainer.process.wait()
    assert trainer.received() == content[resume:blocks[-1].end_offset]
    assert source.of("complete") == [("complete", task.task_id,
                                      sum(b.records for b in blocks),
                                      blocks[-1].end_offset - first)]


@pytest.mark.parametrize("damage", ["checksum", "truncated"])
async def test_a_damaged_file_fails_its_task_after_its_good_records_and_feeding_goes_on(
        tmp_path: Path, start_trainer: Callable[..., Any], damage: str) -> None:
    records = [encode_tfrecord(random.Random(i).randbytes(1000)) for i in range(200)]
    bad = tmp_path / "bad.tfrecord"
    if damage == "checksum":
        good = b"".join(records[:120])
        damaged = bytearray(records[120])
        damaged[500] ^= 0x40
        bad.write_bytes(good + bytes(damaged) + b"".join(records[121:]))
    else:
        good = b"".join(records[:199])
        bad.write_bytes(good + records[199][:600])
    missing = tmp_path / "missing.tfrecord"
    fine = tmp_path / "fine.tfrecord"
    fine_content = tfrecord_file(fine, 50, seed=9)
    claims = claims_for([bad])
    claims.append(Claim(DataTask(epoch=1, seq=1, path=str(missing), start=0, end=100,
                                 size=100), offset=0))
    claims += claims_for([fine], seq=2)
    source = FakeSource(deque(claims))
    trainer = await start_trainer()

    result = await feed_to(trainer, source, TFRECORD)

    await trainer.process.wait()
    assert trainer.received() == good + fine_content
    good_records = len(good) // len(records[0])
    bad_id, missing_id, fine_id = (c.task.task_id for c in claims)
    # Checkpointed at the damaged record, so that a retry starts there.
    assert source.of("checkpoint") == [("checkpoint", bad_id, len(good), good_records,
                                        len(good))]
    [(_, failed_bad, bad_error), (_, failed_missing, missing_error)] = source.of("fail")
    assert (failed_bad, failed_missing) == (bad_id, missing_id)
    assert str(bad) in bad_error
    assert f"byte {len(good)}" in bad_error
    assert ("checksum mismatch" if damage == "checksum" else "truncated") in bad_error
    assert missing_error == f"cannot read {missing}: No such file or directory"
    assert source.of("complete") == [("complete", fine_id, 50, len(fine_content))]
    assert (result.tasks, result.failed, result.released) == (1, 2, 0)
    # The retry of the damaged task reports the damage at once, without delivering anything.
    retry = Claim(task=claims[0].task, offset=len(good), records=good_records, bytes=len(good))
    source = FakeSource(deque([retry]))
    trainer = await start_trainer()
    await feed_to(trainer, source, TFRECORD)
    await trainer.process.wait()
    assert trainer.received() == b""
    assert [call[1] for call in source.of("fail")] == [bad_id]


async def test_a_trainer_that_closes_its_input_early_gets_its_tasks_released_where_it_stopped(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    paths = [tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"]
    content = b"".join(text_file(p, 2_000_000, seed=i) for i, p in enumerate(paths))
    claims = claims_for(paths)
    source = FakeSource(deque(claims))
    block_size = 1 << 14
    trainer = await start_trainer(chunk=4096, limit=300_000, then="exit")

    result = await feed_to(trainer, source, TEXT, block_size=block_size, prefetch=1)

    received = trainer.received()
    assert len(received) == 300_000 and received == content[:300_000]
    assert result.closed_by_trainer
    first, ahead = claims[0].task, claims[1].task
    [(_, task, offset, records, nbytes), released_ahead] = source.of("release")
    assert task == first.task_id
    assert offset <= len(received) < offset + block_size + 2100
    assert (records, nbytes) == records_in(TEXT, first.path, 0, offset)
    assert released_ahead == ("release", ahead.task_id, 0, 0, 0)
    assert len(source.of("next")) == 2  # the one being written and one ahead
    assert source.of("complete") == source.of("fail") == []
    assert (result.tasks, result.released) == (0, 2)


async def test_cancelling_the_feeder_releases_every_claimed_task_and_closes_the_pipe(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    paths = [tmp_path / f"{i}.txt" for i in range(5)]
    content = b"".join(text_file(p, 1_500_000, seed=i) for i, p in enumerate(paths))
    claims = claims_for(paths)
    source = FakeSource(deque(claims))
    trainer = await start_trainer(chunk=4096, limit=200_000, then="stall")
    # A second reader of the pipe shows whether the feeder closed its end.
    witness = os.open(f"/proc/self/fd/{trainer.pipe}", os.O_RDONLY | os.O_NONBLOCK)
    block_size = 1 << 14
    fmt = CountingFormat(TEXT)
    feeding = asyncio.ensure_future(feed_to(trainer, source, fmt, block_size=block_size,
                                            prefetch=2))
    await trainer.wait_for_output(200_000)
    await wait_until_async(trainer.input_is_full, 10,
                           "the feeder to fill the pipe of the stalled trainer", interval=0.01)

    feeding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await feeding

    received = trainer.received()
    assert received == content[:200_000]
    releases = source.of("release")
    assert [call[1] for call in releases] == [c.task.task_id for c in list(claims)[:3]]
    _, _, offset, records, nbytes = releases[0]
    assert offset <= len(received) < offset + block_size + 2100
    assert (records, nbytes) == records_in(TEXT, str(paths[0]), 0, offset)
    assert [call[2:] for call in releases[1:]] == [(0, 0, 0), (0, 0, 0)]
    assert len(source.of("next")) == 3
    assert fmt.prepared == fmt.unprepared == [call[1] for call in releases], \
        "what was prepared for a task given back is dropped (Kafka's consumers)"
    try:
        while os.read(witness, 1 << 20):  # what was left in the pipe, then end-of-file
            pass
    except BlockingIOError:
        pytest.fail("the feeder left its end of the pipe open: the trainer would never see "
                    "end-of-file")
    finally:
        os.close(witness)


async def test_a_trainer_that_does_not_read_stops_the_reading(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    paths = [tmp_path / "big.txt", tmp_path / "next.txt", tmp_path / "later.txt"]
    for i, path in enumerate(paths):
        text_file(path, 20_000_000 if i == 0 else 100, seed=i)
    source = FakeSource(claims_for(paths))
    fmt = CountingFormat(TEXT)
    trainer = await start_trainer(limit=0, then="stall")
    feeding = asyncio.ensure_future(feed_to(trainer, source, fmt, prefetch=1))

    # Paused: the pipe is full, and the feeder holds a block it has no room for.
    await wait_until_async(
        lambda: trainer.input_is_full() and fmt.bytes_read > _queued(trainer.pipe), 10,
        "the feeder to fill the pipe and hold a block it has no room for", interval=0.01)
    read_while_stalled = fmt.blocks_read
    await asyncio.sleep(0.3)  # the trainer not reading for a while: the behaviour under test
    assert fmt.blocks_read == read_while_stalled
    # What fills the pipe, plus the block being written.
    assert fmt.blocks_read <= PIPE_SIZE // (1 << 20) + 2
    assert len(source.of("next")) == 2
    assert source.of("checkpoint") == []
    feeding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await feeding
    assert [call[2:] for call in source.of("release")] == [(0, 0, 0), (0, 0, 0)]


async def test_a_trainer_that_does_not_read_lets_no_more_than_prefetch_tasks_be_claimed_ahead(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    paths = [tmp_path / "first.txt", *(tmp_path / f"empty-{i}.txt" for i in range(200))]
    paths[0].write_bytes(b"a line the trainer never reads\n")
    for path in paths[1:]:
        path.write_bytes(b"")
    source = FakeSource(claims_for(paths))
    trainer = await start_trainer(limit=0, then="stall")
    feeding = asyncio.ensure_future(feed_to(trainer, source, TEXT, prefetch=1))

    await wait_until_async(lambda: _queued(trainer.pipe) == paths[0].stat().st_size, 10,
                           "the first task to be written into the pipe", interval=0.01)
    await asyncio.sleep(0.3)  # the trainer not reading for a while: the behaviour under test

    # The task the trainer should be reading and one ahead, though the pipe takes them all.
    assert len(source.of("next")) == 2
    assert source.of("complete") == []
    feeding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await feeding
    assert len(source.of("release")) == 2


async def test_a_reader_holds_at_most_prefetch_tasks_beyond_the_one_its_trainer_reads(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    paths = [tmp_path / f"small-{i:02d}.txt" for i in range(40)]
    content = b"".join(text_file(p, 2_000, seed=i) for i, p in enumerate(paths))
    source = FakeSource(claims_for(paths))
    trainer = await start_trainer(chunk=512)

    result = await feed_to(trainer, source, TEXT, prefetch=2)

    assert trainer.received() == content
    assert result.tasks == 40
    held = most_held = 0
    for call in source.calls[:-1]:  # the last next() found the stream ended
        held += 1 if call[0] == "next" else -1 if call[0] in ("complete", "fail", "release") \
            else 0
        most_held = max(most_held, held)
    assert most_held == 3, "the task being read and two ahead, never more"


async def test_checkpoints_come_after_the_interval_when_few_records_were_consumed(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    path = tmp_path / "a.txt"
    content = text_file(path, 3_000_000, seed=5)
    source = FakeSource(claims_for([path]))
    now = [1000.0]
    clock = CountingClock(lambda: now[0])
    trainer = await start_trainer(limit=100_000, then="stall")
    feeding = asyncio.ensure_future(feed_to(
        trainer, source, TEXT, block_size=1 << 12, checkpoint_records=10**9,
        checkpoint_interval=30.0, clock=clock))
    await trainer.wait_for_output(100_000)
    await clock.next_look()
    assert source.of("checkpoint") == []

    now[0] += 30.0
    await clock.next_look()

    checkpoints = source.of("checkpoint")
    assert len(checkpoints) == 1, f"one checkpoint once the interval passed, seen {checkpoints}"
    [(_, _, offset, records, _)] = checkpoints
    assert 100_000 - (1 << 12) - 2100 < offset <= 100_000
    assert content[:offset].endswith(b"\n")
    assert records == content[:offset].count(b"\n")
    now[0] += 30.0  # nothing consumed since: no new checkpoint
    await clock.next_look()
    assert len(source.of("checkpoint")) == 1
    feeding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await feeding


async def test_a_descriptor_that_is_not_a_pipe_is_refused_and_closed(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "file", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(ValueError, match="not a pipe"):
        await feed(fd, FakeSource(deque()), TEXT, checkpoint_records=1, checkpoint_interval=1)
    with pytest.raises(OSError):
        os.fstat(fd)


def test_reading_the_pipe_queue_from_its_write_end_counts_unread_bytes() -> None:
    """What the feeder relies on: FIONREAD on the write end is what the reader has not read,
    and it still says so after the reader closed its end."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"x" * 1000)
        assert _queued(write_end) == 1000
        os.read(read_end, 300)
        assert _queued(write_end) == 700
        os.close(read_end)
        assert _queued(write_end) == 700
    finally:
        os.close(write_end)
