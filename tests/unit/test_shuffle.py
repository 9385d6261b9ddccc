"""A stream's shuffle buffer (primus.data.shuffle) through the real feeder into a real reader
process: every record once, in an order that depends on the seed alone; checkpoints only at
the end of a window the trainer consumed whole, and a task resumed there gives the rest in the
same order; columnar rows shuffled too; formats that cannot shuffle are refused."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from primus.data.api import Block, Claim, get_format
from primus.data.shuffle import ShuffleBuffer
from primus.state.records import DataTask
from tests.support.formats import parquet_file, parquet_rows, webdataset_file, webdataset_samples
from tests.unit import test_feeder
from tests.unit.test_feeder import (
    TEXT,
    TFRECORD,
    CountingClock,
    FakeSource,
    claims_for,
    feed_to,
    text_file,
    tfrecord_file,
)

pytestmark = pytest.mark.timeout(60)

start_trainer = test_feeder.start_trainer
"""The feeder tests' fixture: a trainer process reading a real pipe."""

BLOCK = 1 << 13


def lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def shuffle(fmt: Any, size: int, seed: int = 7) -> ShuffleBuffer:
    return ShuffleBuffer(fmt, size, seed, BLOCK)


async def fed(start_trainer: Callable[..., Any], claims: deque[Claim], buffer: ShuffleBuffer,
              fmt: Any = TEXT, **options: Any) -> tuple[bytes, FakeSource]:
    source = FakeSource(claims)
    trainer = await start_trainer()
    await feed_to(trainer, source, fmt, block_size=BLOCK, shuffle=buffer, **options)
    assert await trainer.process.wait() == 0
    return trainer.received(), source


async def test_every_line_arrives_once_shuffled_the_same_way_for_a_seed(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
    files = [lines(text_file(p, 200_000, seed=i)) for i, p in enumerate(paths)]
    expected = sorted(line if line.endswith(b"\n") else line + b"\n"
                      for file in files for line in file)
    content = [line for file in files for line in file]

    runs = [await fed(start_trainer, claims_for(paths, chunk_size=120_000), shuffle(TEXT, n, s))
            for n, s in ((60, 7), (60, 7), (60, 8), (50_000, 7))]

    for received, source in runs:
        assert sorted(lines(received)) == expected, "each line once, every one with its newline"
        assert len(source.of("complete")) == 4
    (first, _), (again, _), (other_seed, _), (whole, _) = runs
    assert first == again, "the same seed, the same order"
    assert first != other_seed and first != whole
    assert lines(first)[:20] != content[:20], "shuffled"
    # Records mix within a window: a line never moves further than its window allows.
    position = {line: i for i, line in enumerate(content)}
    moved = [abs(position.get(line, position.get(line[:-1], 0)) - i)
             for i, line in enumerate(lines(first))]
    assert max(moved) < 60 + 2 * (BLOCK // 20), "within a window of about 60 lines"


async def test_checkpoints_fall_at_window_ends_and_a_resumed_task_gives_the_same_rest(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    path = tmp_path / "a.tfrecord"
    content = tfrecord_file(path, 3000, seed=1, size=200)
    buffer = shuffle(TFRECORD, 300)
    claims = claims_for([path])
    # The windows as the feeder makes them: their ends, and the order of the whole task.
    with open(path, "rb") as f:
        blocks = iter(list(TFRECORD.blocks(f, 0, len(content), BLOCK)))
        chunks = list(buffer.chunks(claims[0].task, 0, lambda: next(blocks, None)))
    window_ends = {c.offset for c in chunks if c.done_records}
    whole = b"".join(bytes(c.data) for c in chunks)

    source = FakeSource(deque(claims))
    limit = len(whole) // 2
    trainer = await start_trainer(chunk=4096, delay=0.001, limit=limit, then="stall")
    clock = CountingClock()
    feeding = asyncio.ensure_future(feed_to(trainer, source, TFRECORD, block_size=BLOCK,
                                            checkpoint_records=1, clock=clock, shuffle=buffer))
    await trainer.wait_for_output(limit)
    await clock.next_look()
    os.kill(trainer.process.pid, signal.SIGKILL)
    await feeding

    assert trainer.received() == whole[:limit], "the feeder writes the windows as made"
    checkpoints = source.of("checkpoint")
    assert checkpoints and {offset for _, _, offset, _, _ in checkpoints} <= window_ends
    [(_, _, released_at, records, _)] = source.of("release")
    assert released_at in window_ends and released_at < limit
    assert records == sum(c.done_records for c in chunks if c.offset <= released_at)

    resumed = claims_for([path])[0]
    resumed = Claim(task=resumed.task, offset=released_at, records=records, bytes=released_at)
    received, _ = await fed(start_trainer, deque([resumed]), buffer, TFRECORD)
    given_before = sum(len(c.data) for c in chunks if c.offset < released_at or (
        c.offset == released_at and c.done_records))
    assert received == whole[given_before:], "the rest, in the same order"


async def test_parquet_rows_and_webdataset_samples_are_shuffled_whole(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "w").mkdir()
    table, numbers = parquet_file(tmp_path / "p", 400)
    shard, samples = webdataset_file(tmp_path / "w", 80)
    parquet, webdataset = get_format("parquet"), get_format("webdataset")

    rows, _ = await fed(start_trainer, claims_for([table]), shuffle(parquet, 100), parquet)
    tars, _ = await fed(start_trainer, claims_for([shard]), shuffle(webdataset, 20), webdataset)

    got = parquet_rows(rows)
    assert sorted(got) == numbers and got != numbers
    got_samples = webdataset_samples(tars)
    assert sorted(got_samples, key=repr) == sorted(samples, key=repr)
    assert got_samples != samples


async def test_a_preprocess_step_transforms_the_shuffled_records(
        tmp_path: Path, start_trainer: Callable[..., Any]) -> None:
    from primus.data.preprocess import Preprocessor  # noqa: PLC0415

    (tmp_path / "prep.py").write_text("def up(record):\n    return record.upper()\n")
    path = tmp_path / "a.txt"
    content = lines(text_file(path, 100_000, seed=5))
    step = Preprocessor("prep:up", "text", {**os.environ, "PYTHONPATH": str(tmp_path)},
                        str(tmp_path))
    try:
        received, _ = await fed(start_trainer, claims_for([path]), shuffle(TEXT, 50),
                                preprocess=step)
    finally:
        step.close()

    expected = [(line if line.endswith(b"\n") else line + b"\n").upper() for line in content]
    assert sorted(lines(received)) == sorted(expected)
    assert lines(received) != expected, "shuffled, then transformed"


def test_a_format_that_cannot_tell_its_records_apart_does_not_shuffle() -> None:
    import primus.data.kafka  # noqa: F401, PLC0415 - registers kafka

    names = ("text", "tfrecord", "parquet", "arrow", "webdataset", "kafka", "bytes")
    assert [get_format(name).shuffles for name in names] == [True] * 6 + [False]
    with pytest.raises(NotImplementedError, match="format bytes cannot tell its records apart"):
        get_format("bytes").records_of(b"abc")


def test_a_window_of_no_rows_still_moves_its_task_on() -> None:
    import pyarrow as pa  # noqa: PLC0415

    from primus.data.parquet import ipc_stream  # noqa: PLC0415

    empty = pa.RecordBatch.from_pylist([], schema=pa.schema([("n", pa.int64())]))
    blocks = iter([Block(ipc_stream(empty), 0, 40), Block(ipc_stream(empty), 0, 80)])
    task = DataTask(epoch=1, seq=0, path="/x.parquet", start=0, end=100, size=100)
    [chunk] = shuffle(get_format("parquet"), 10).chunks(task, 0, lambda: next(blocks, None))
    assert (bytes(chunk.data), chunk.offset, chunk.done_records) == (b"", 80, 0)
