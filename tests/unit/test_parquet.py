"""``format: parquet`` beyond the formats' contract (``test_format_contract.py``): tasks of whole
row groups, positions inside a row group, projection, damage named by file and row group, and
the trainer's reader."""

from __future__ import annotations

import datetime
import io
import os
import threading
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from primus.config.spec import StreamSpec
from primus.data.api import Block, CorruptRecordError, get_format
from primus.data.parquet import ParquetFormat, _layout
from primus.data.reader import arrow_batches
from primus.state.records import DataTask

PARQUET = get_format("parquet")


def write_rows(path: Path, rows: int, row_group_size: int, *, constant: bool = False) -> Path:
    """A Parquet file of ``rows`` rows (``n`` counts from 0; ``name`` is its text; ``flag`` a
    boolean, the same in every row when ``constant``) in row groups of ``row_group_size``."""
    table = pa.table({"n": pa.array(range(rows), pa.int64()),
                      "name": [f"row {i}" for i in range(rows)],
                      "flag": [True if constant else i % 3 == 0 for i in range(rows)]})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def read(fmt: ParquetFormat, path: Path, start: int, end: int, *,
         aligned: bool = False) -> list[Block]:
    with fsspec.open(str(path), "rb") as f:
        return [Block(bytes(b.data), b.records, b.end_offset)
                for b in fmt.blocks(f, start, end, aligned=aligned)]


def rows_of(blocks: list[Block], column: str = "n") -> list[object]:
    """The values of ``column`` in the blocks, as the trainer's reader gives them."""
    stream = io.BufferedReader(io.BytesIO(b"".join(b.data for b in blocks)))  # type: ignore[arg-type]
    return [value for batch in arrow_batches(stream) for value in batch.column(column).to_pylist()]


def test_a_task_holds_the_whole_row_groups_that_start_in_it(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 3000, 1000)
    with open(path, "rb") as f:
        layout = _layout(pq.ParquetFile(f).metadata)
    second = layout[1]

    blocks = read(PARQUET, path, second.start, second.start + 1)

    assert rows_of(blocks) == list(range(1000, 2000))
    assert blocks[-1].end_offset == second.end == layout[2].start


def test_a_row_group_of_more_rows_than_bytes_keeps_its_positions_inside_it(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 300_000, 300_000, constant=True)
    narrow = ParquetFormat(["flag"])
    with open(path, "rb") as f:
        (group,) = _layout(pq.ParquetFile(f).metadata)
    assert group.batches <= group.end - group.start

    blocks = read(narrow, path, 0, path.stat().st_size)

    assert all(group.start < b.end_offset <= group.end for b in blocks)
    assert sum(b.records for b in blocks) == 300_000
    for block in blocks[:-1]:
        rest = read(narrow, path, block.end_offset, path.stat().st_size, aligned=True)
        assert sum(b.records for b in rest) == 300_000 - sum(
            b.records for b in blocks if b.end_offset <= block.end_offset)


def test_columns_read_only_those_columns_in_the_order_asked(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 10, 4)
    fmt = PARQUET.for_stream(StreamSpec(name="s", roles=["worker"], format="parquet",
                                        columns=["flag", "n"], sources=[{"path": "x"}]))

    stream = io.BufferedReader(io.BytesIO(b"".join(  # type: ignore[arg-type]
        b.data for b in read(fmt, path, 0, path.stat().st_size))))
    batches = list(arrow_batches(stream))

    assert {tuple(b.schema.names) for b in batches} == {("flag", "n")}
    assert [v for b in batches for v in b.column("n").to_pylist()] == list(range(10))


def test_a_tables_partition_columns_come_in_their_types_and_may_be_asked_for(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 10, 4)
    task = DataTask(epoch=1, seq=0, path=str(path), start=0, end=path.stat().st_size,
                    size=path.stat().st_size,
                    constants=[("day", "date32[day]", "2026-11-26"), ("shard", "int32", 7)])
    every = PARQUET.for_task(task)
    asked = ParquetFormat(["shard", "n"], [("n", ">=", 5)]).for_task(task)

    batches = list(arrow_batches(io.BufferedReader(io.BytesIO(b"".join(  # type: ignore[arg-type]
        b.data for b in read(every, path, 0, path.stat().st_size))))))
    projected = list(arrow_batches(io.BufferedReader(io.BytesIO(b"".join(  # type: ignore[arg-type]
        b.data for b in read(asked, path, 0, path.stat().st_size))))))

    assert batches[0].schema.names == ["n", "name", "flag", "day", "shard"]
    assert batches[0].schema.field("day").type == pa.date32()
    assert {d for b in batches for d in b.column("day").to_pylist()} == {
        datetime.date(2026, 11, 26)}
    assert {tuple(b.schema.names) for b in projected} == {("shard", "n")}
    assert [(s, n) for b in projected for s, n in zip(*(c.to_pylist() for c in b.columns),
                                                      strict=True)] == [(7, n) for n in
                                                                        range(5, 10)]


def test_a_column_the_file_lacks_fails_naming_the_file_and_the_column(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 10, 4)

    with pytest.raises(CorruptRecordError) as caught:
        read(ParquetFormat(["n", "missing"]), path, 0, path.stat().st_size)

    assert str(path) in str(caught.value) and "missing" in str(caught.value)


def test_a_file_that_is_no_parquet_file_fails_naming_it(tmp_path):
    path = tmp_path / "not.parquet"
    path.write_bytes(b"PAR1 but nothing after it")

    with pytest.raises(CorruptRecordError, match="not a readable Parquet file") as caught:
        read(PARQUET, path, 0, path.stat().st_size)

    assert caught.value.path == str(path) and caught.value.offset == 0


def test_a_damaged_row_group_fails_naming_it_after_the_rows_before_it(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 3000, 1000)
    with open(path, "rb") as f:
        layout = _layout(pq.ParquetFile(f).metadata)
    content = bytearray(path.read_bytes())
    damaged = layout[1]
    content[damaged.start:damaged.end] = os.urandom(damaged.end - damaged.start)
    path.write_bytes(bytes(content))

    with pytest.raises(CorruptRecordError) as caught:
        read(PARQUET, path, 0, path.stat().st_size)

    assert f"{path}: row group 1, rows from 0" in str(caught.value)
    assert caught.value.offset == damaged.start
    before = read(PARQUET, path, 0, caught.value.offset, aligned=True)
    assert rows_of(before) == list(range(1000)), "the rows before the damage can be delivered"


def test_the_reader_reads_the_batches_from_a_pipe_until_it_closes(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 20_000, 3000)
    blocks = read(PARQUET, path, 0, path.stat().st_size)
    read_end, write_end = os.pipe()

    def write() -> None:
        with open(write_end, "wb") as pipe:
            for block in blocks:
                pipe.write(block.data)

    writer = threading.Thread(target=write)
    writer.start()
    with open(read_end, "rb") as pipe:
        got = [v for batch in arrow_batches(pipe) for v in batch.column("n").to_pylist()]
    writer.join()

    assert got == list(range(20_000))


def test_the_filter_keeps_only_the_rows_every_term_holds_for_reading_its_columns_too(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 30, 7)
    fmt = ParquetFormat(["name"], [("n", ">=", 20), ("flag", "=", True)])

    stream = io.BufferedReader(io.BytesIO(b"".join(  # type: ignore[arg-type]
        b.data for b in read(fmt, path, 0, path.stat().st_size))))
    batches = list(arrow_batches(stream))

    assert {tuple(b.schema.names) for b in batches} == {("name",)}
    assert [v for b in batches for v in b.column("name").to_pylist()] == \
        [f"row {i}" for i in range(20, 30) if i % 3 == 0]


@pytest.mark.parametrize(("op", "value", "kept"), [
    ("not in", [1, 2], [0, 3]),
    ("not in", 1, [0, 2, 3]),
    ("!=", 1, [0, 2, 3]),
    ("in", [1, 2], [1, 2]),
])
def test_a_null_satisfies_no_filter_term_not_in_and_not_equal_included(tmp_path, op, value,
                                                                         kept):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(6)), "n": [0, 1, 2, 3, None, None]}), path)
    fmt = ParquetFormat(None, [("n", op, value)])

    assert rows_of(read(fmt, path, 0, path.stat().st_size), "n") == kept


def test_a_filter_value_of_another_type_than_its_column_fails_naming_the_filter(tmp_path):
    path = write_rows(tmp_path / "t.parquet", 30, 7)

    with pytest.raises(CorruptRecordError) as caught:
        read(ParquetFormat(None, [("n", ">=", "twenty")]), path, 0, path.stat().st_size)

    assert "the stream's filter [n, >=, 'twenty'] cannot be applied to its rows" in \
        str(caught.value)


def test_a_damaged_page_fails_naming_the_first_row_it_did_not_deliver(tmp_path):
    # Pages written with their CRC: 16 bytes changed in the last quarter of the one row group
    # (values, no compression: nothing but the checksum can tell).
    path = tmp_path / "t.parquet"
    rows = 400_000
    pq.write_table(pa.table({"n": pa.array(range(rows), pa.int64())}), path,
                   row_group_size=rows, compression="NONE", use_dictionary=False,
                   write_page_checksum=True, data_page_size=64 * 1024)
    with open(path, "rb") as f:
        (group,) = _layout(pq.ParquetFile(f).metadata)
    data = bytearray(path.read_bytes())
    at = group.start + (group.end - group.start) * 7 // 8
    data[at:at + 16] = bytes(b ^ 0xFF for b in data[at:at + 16])
    path.write_bytes(bytes(data))

    delivered: list[Block] = []
    with open(path, "rb") as f, pytest.raises(CorruptRecordError) as caught:
        for block in PARQUET.blocks(f, 0, path.stat().st_size):
            delivered.append(block)

    rows_delivered = sum(block.records for block in delivered)
    assert 0 < rows_delivered < rows * 7 // 8, "the batches before the damage were delivered"
    assert rows_of(delivered) == list(range(rows_delivered)), "and only intact values"
    assert f"row group 0, rows from {rows_delivered}:" in str(caught.value)
    assert "checksum" in str(caught.value).lower()
