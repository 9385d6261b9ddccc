"""A stream's ``shuffle_buffer``: each reader hands its trainer the records of a task in a
random order, a window of records at a time (docs/data.md, "Shuffling records").

A window is the whole blocks of one task that hold ``shuffle_buffer`` records (or
:data:`WINDOW_BYTES`, or the rest of the task, whichever comes first). Its records are drawn in
an order that depends only on the stream's ``seed``, the task (its epoch, file and range) and
where the window starts in it: a task read again from a window's start, by another executor
after a loss or by a run restored from a savepoint, gives the same records in the same order.

The feeder moves a task's checkpoint only once the trainer consumed a whole window: a restart
resumes at the start of the window the trainer was in, and the records of that window it had
been given are given again (at most a window's worth per reader); no record is lost.

Records are told apart by the format (:meth:`~primus.data.api.RecordFormat.records_of`: lines,
framed TFRecords, WebDataset samples), or are the rows of the Arrow batches of Parquet, Arrow
and Kafka streams.
A text file's last line without a newline gets one when it is shuffled into a window.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from primus.data.api import Block, RecordFormat
from primus.state.records import DataTask

WINDOW_BYTES = 256 << 20
"""Bytes of records a window holds at most, whatever ``shuffle_buffer`` says: what a reader
keeps in memory to shuffle."""


@dataclass(frozen=True)
class Chunk:
    """What the feeder writes for a window: ``data`` of ``records`` shuffled records, and
    where the task stands once the trainer consumed it: at ``offset`` with ``done_records``
    and ``done_bytes`` more (nothing more before the window's last chunk)."""

    data: bytes | memoryview
    records: int
    offset: int
    done_records: int
    done_bytes: int


@dataclass(frozen=True)
class ShuffleBuffer:
    """The shuffling of one stream: its format, window size and seed."""

    fmt: RecordFormat
    size: int
    seed: int
    block_size: int

    def chunks(self, task: DataTask, start: int, next_block: Callable[[], Block | None]
               ) -> Iterator[Chunk]:
        """The task's records from ``start`` (a window's start), window by window, as the
        blocks ``next_block`` reads come."""
        at = start
        while True:
            window: list[Block] = []
            records = nbytes = 0
            while records < self.size and nbytes < WINDOW_BYTES:
                block = next_block()
                if block is None:
                    break
                window.append(block)
                records += block.records
                nbytes += len(block.data)
            if not window:
                return
            yield from self._window(task, at, window)
            at = window[-1].end_offset
            if records < self.size and nbytes < WINDOW_BYTES:
                return  # the task ended (or reading failed) inside this window

    def _window(self, task: DataTask, start: int, window: list[Block]) -> Iterator[Chunk]:
        order = random.Random(f"{self.seed}:{task.epoch}:{task.path}:{task.start}:{start}")
        records = sum(block.records for block in window)
        nbytes = sum(len(block.data) for block in window)
        pieces = (_shuffled_rows(window, order) if self.fmt.arrow_blocks
                  else _shuffled_records(self.fmt, window, order, self.block_size))
        if not pieces:  # nothing to deliver (rows a filter left out): the progress alone
            pieces = [(b"", 0)]
        for piece, (data, count) in enumerate(pieces, 1):
            last = piece == len(pieces)
            yield Chunk(data, count, window[-1].end_offset if last else start,
                        records if last else 0, nbytes if last else 0)


def _shuffled_records(fmt: RecordFormat, window: list[Block], order: random.Random,
                      block_size: int) -> list[tuple[bytes, int]]:
    """The window's records as stored, in a random order, packed in blocks of about
    ``block_size`` bytes."""
    records = [record for block in window for record in fmt.records_of(bytes(block.data))]
    order.shuffle(records)
    packed: list[tuple[bytes, int]] = []
    current: list[bytes] = []
    size = 0
    for record in records:
        current.append(record)
        size += len(record)
        if size >= block_size:
            packed.append((b"".join(current), len(current)))
            current, size = [], 0
    if current:
        packed.append((b"".join(current), len(current)))
    return packed


def _shuffled_rows(window: list[Block], order: random.Random) -> list[tuple[bytes, int]]:
    """The rows of the window's Arrow batches in a random order, in batches as large as the
    window's (each a self-contained IPC stream, as the format delivers them)."""
    import pyarrow as pa  # noqa: PLC0415 - formats of Arrow batches only

    from primus.data.parquet import ipc_stream  # noqa: PLC0415

    batches = [batch for block in window
               for batch in pa.ipc.open_stream(pa.py_buffer(bytes(block.data)))]
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    rows = list(range(table.num_rows))
    order.shuffle(rows)
    shuffled = table.take(pa.array(rows, pa.int64()))
    per_batch = max([1, *(batch.num_rows for batch in batches)])
    return [(bytes(ipc_stream(batch)), batch.num_rows)
            for batch in shuffled.combine_chunks().to_batches(max_chunksize=per_batch)]
