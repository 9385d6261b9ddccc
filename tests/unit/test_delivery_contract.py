"""One contract for every delivery of :data:`primus.data.deliveries.DELIVERIES`: the feeder
writes into it, a real trainer process reads it through :mod:`primus.data.reader` as the
executor would start it (its environment, inherited descriptors, stdin); every record arrives
once and in order and the end is seen; a trainer that stops early ends the feeding with its
tasks released; an empty stream ends at once. A delivery added to the registry is held to it."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from primus.data.api import RecordFormat, get_format
from primus.data.deliveries import DELIVERIES, Prepared
from primus.data.feeder import feed
from primus.data.shm import RingWriter
from primus.executor.executor import Executor
from tests.support.formats import encode_tfrecord
from tests.support.waiting import wait_until_async
from tests.unit.test_feeder import CountingClock, FakeSource, claims_for, text_file

pytestmark = pytest.mark.timeout(60)

TEXT = get_format("text")

READER = """
import os, sys, time
from primus.data.reader import records
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
limit, then = int(sys.argv[2]), sys.argv[3]
for n, record in enumerate(records("text")):
    if n == limit:
        if then == "stall":  # holds its stream open, reading no more
            time.sleep(3600)
        break
    os.write(out, record)
"""


LENGTHS = """
import sys
from primus.data.reader import records
with open(sys.argv[1], "w") as out:
    out.write(" ".join(str(len(record)) for record in records("text")))
"""
"""A reader that writes the length of each record it got: where the records were split."""


BATCHES = """
import sys
from primus.data.reader import record_batches
with open(sys.argv[1], "w") as out:
    for batch in record_batches(sys.argv[3]):
        assert isinstance(batch, list) and batch, batch
        out.write(" ".join(record.hex() for record in batch) + "\\n")
"""
"""A reader of lists: each record it got, in hex, a line per list (argv[3]: the format)."""


async def start_reader(prepared: Prepared, output: Path, limit: int = -1,
                       then: str = "exit", script: str = READER
                       ) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(output), str(limit), then,
        env={**os.environ, **prepared.env}, pass_fds=prepared.pass_fds,
        stdin=prepared.stdin if prepared.stdin is not None else asyncio.subprocess.DEVNULL)
    prepared.started()
    return process


async def feeder_target(prepared: Prepared) -> int | RingWriter:
    """What the feeder writes into, as the executor opens it (a FIFO once its reader has)."""
    target = prepared.target
    if not isinstance(target, str):
        return target
    async with asyncio.timeout(10):
        return await Executor._open_fifo(target)


async def run(prepared: Prepared, source: FakeSource, fmt: RecordFormat = TEXT, **reader: Any
              ) -> tuple[Any, Any]:
    process = await start_reader(prepared, reader.pop("output"), **reader)
    try:
        result = await feed(await feeder_target(prepared), source, fmt,
                            checkpoint_records=100, checkpoint_interval=5.0,
                            block_size=1 << 14)
        if reader.get("then") == "stall":
            return result, None
        async with asyncio.timeout(30):
            return result, await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.fixture(params=sorted(DELIVERIES))
def prepared(request: pytest.FixtureRequest, tmp_path: Path) -> Prepared:
    made = DELIVERIES[request.param].prepare(str(tmp_path), "worker-0.1")
    yield made
    if isinstance(made.target, RingWriter) and made.target.data_bell >= 0:
        made.target.close()


async def test_every_record_arrives_once_in_order_and_the_end_is_seen(
        prepared: Prepared, tmp_path: Path) -> None:
    paths = [tmp_path / f"part-{i}.txt" for i in range(3)]
    contents = b"".join(text_file(p, 300_000, seed=i) for i, p in enumerate(paths))
    claims = claims_for(paths, chunk_size=100_000)
    source = FakeSource(deque(claims))

    result, exit_code = await run(prepared, source, output=tmp_path / "out")

    assert exit_code == 0, "the trainer saw the end of its stream"
    assert (tmp_path / "out").read_bytes() == contents
    assert [c[1] for c in source.of("complete")] == [c.task.task_id for c in claims]
    assert (result.tasks, result.bytes, result.closed_by_trainer) == (
        len(claims), len(contents), False)


async def test_a_line_ends_at_a_newline_alone_whatever_the_delivery(
        prepared: Prepared, tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"one\rstill one\n" b"two\r\n" b"\n" b"\r\n" b"last, no newline\r")
    source = FakeSource(deque(claims_for([path])))

    _, exit_code = await run(prepared, source, output=tmp_path / "out", script=LENGTHS)

    assert exit_code == 0
    assert (tmp_path / "out").read_text().split() == ["14", "5", "1", "2", "17"], \
        "records end at \\n only, as the pipe's file iteration splits them"


@pytest.mark.parametrize("fmt", ["text", "tfrecord"])
async def test_record_batches_give_every_record_once_in_order_a_block_at_a_time(
        prepared: Prepared, tmp_path: Path, fmt: str) -> None:
    """The batch reader's lists, joined, are what ``records()`` yields, through every
    delivery: over a pipe its reads end inside records (a TFRecord of 3 MiB is longer than
    one read) and the records are whole all the same."""
    path = tmp_path / f"data.{fmt}"
    if fmt == "text":
        expected = text_file(path, 400_000, seed=3).splitlines(keepends=True)
    else:
        expected = [bytes([i % 251]) * size for i, size in enumerate(
            [0, 1, 250, 3 << 20, *([250] * 3000), 70_000, 5])]
        path.write_bytes(b"".join(encode_tfrecord(record) for record in expected))
    source = FakeSource(deque(claims_for([path], chunk_size=150_000)))

    _, exit_code = await run(prepared, source, get_format(fmt), output=tmp_path / "out",
                             then=fmt, script=BATCHES)

    assert exit_code == 0, "the trainer saw the end of its stream"
    lists = [line.split(" ") for line in (tmp_path / "out").read_text().splitlines()]
    assert [bytes.fromhex(record) for batch in lists for record in batch] == expected
    assert len(lists) < len(expected) / 10, "a list holds a block's records, not one"


async def test_a_trainer_that_stops_early_ends_the_feeding_and_its_tasks_are_released(
        prepared: Prepared, tmp_path: Path) -> None:
    paths = [tmp_path / f"part-{i}.txt" for i in range(4)]
    for i, path in enumerate(paths):
        text_file(path, 2_000_000, seed=i)
    source = FakeSource(deque(claims_for(paths)))

    result, exit_code = await run(prepared, source, output=tmp_path / "out", limit=50)

    assert exit_code == 0
    assert result.tasks < len(paths), "it stopped before the end"
    released = source.of("release")
    assert released, "the task it was reading went back where it got to"
    assert {call[1] for call in released} | {c[1] for c in source.of("complete")} <= \
        {f"0001-{i:08d}" for i in range(len(paths))}


async def test_an_empty_stream_ends_at_once(prepared: Prepared, tmp_path: Path) -> None:
    result, exit_code = await run(prepared, FakeSource(deque()), output=tmp_path / "out")

    assert exit_code == 0 and (result.tasks, result.bytes) == (0, 0)


async def test_through_shared_memory_checkpoints_never_count_a_block_not_read(
        tmp_path: Path) -> None:
    prepared = DELIVERIES["shm"].prepare(str(tmp_path), "worker-0.1")
    path = tmp_path / "a.txt"
    text_file(path, 3_000_000, seed=1)
    source = FakeSource(deque(claims_for([path])), hold=True)
    process = await start_reader(prepared, tmp_path / "out", limit=2000, then="stall")
    clock = CountingClock()
    feeding = asyncio.ensure_future(feed(prepared.target, source, TEXT, checkpoint_records=10,
                                         checkpoint_interval=0.05, block_size=1 << 14,
                                         clock=clock))
    output = tmp_path / "out"

    def stalled_and_checkpointed() -> bool:
        return bool(source.of("checkpoint")) and output.exists() and \
            output.read_bytes().count(b"\n") >= 2000
    try:
        await wait_until_async(stalled_and_checkpointed, 20,
                               "the reader to stall after 2000 records, with a checkpoint")
        await clock.next_look()  # the feeder has seen where the stalled reader is
        await clock.next_look()
        received = output.read_bytes()
        last = source.of("checkpoint")[-1]
        assert last[2] <= len(received), "a checkpoint counted bytes the trainer never took"
        assert received.count(b"\n") >= last[3]
    finally:
        feeding.cancel()
        await asyncio.gather(feeding, return_exceptions=True)
        process.kill()
        await process.wait()
