"""Parquet files as a record format (``format: parquet``): rows, read through pyarrow.

A Parquet file is cut into byte ranges like any other format, and a range owns the row groups
whose first byte lies in it (a row group *starts* in exactly one range), so a task is a set of
whole row groups. The trainer receives the rows as Arrow record batches: each block is one
batch in a self-contained Arrow IPC stream (schema, batch, end marker), which
:func:`primus.data.reader.arrow_batches` reads back; ``columns`` projects (only those columns are
read from the file).

**Positions.** Reading resumes at a row, not a byte: a checkpoint falls between two batches. A
position inside row group ``k`` is its first byte ``B[k]`` plus the number of batches of it
already read; after its last batch, the position is the next row group's first byte. Every row
group holds at least as many bytes as batches (a batch has at least ``rows / bytes`` rows of the
group), so positions grow with the rows read and stay inside the row group's bytes. The batch
size of a row group depends only on the file's metadata (about :data:`BATCH_BYTES` of
uncompressed data), so whoever resumes a task cuts the same batches as the reader before it.
"""

from __future__ import annotations

import bisect
import functools
import math
import operator
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from primus.config.spec import StreamSpec
from primus.data.api import Block, CorruptRecordError, RecordFormat, Terms, file_path
from primus.state.records import DataTask

BATCH_BYTES = 1 << 20
"""Uncompressed bytes of one batch, about: the rows of a block."""


@dataclass(frozen=True)
class _RowGroup:
    """Where a row group lies in the file and how it is cut into batches."""

    index: int
    start: int  # its first byte: the position of its first row
    end: int  # the next row group's first byte (or where this one's data ends)
    rows: int
    batch_rows: int

    @property
    def batches(self) -> int:
        return math.ceil(self.rows / self.batch_rows) if self.rows else 0

    def position_after(self, batch: int) -> int:
        """The position once ``batch`` batches of this row group were read."""
        return self.end if batch >= self.batches else self.start + batch


def _layout(meta: pq.FileMetaData) -> list[_RowGroup]:
    """The file's row groups in file order, with their positions and batch sizes."""
    found = []
    for k in range(meta.num_row_groups):
        group = meta.row_group(k)
        columns = [group.column(c) for c in range(group.num_columns)]
        starts = [c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
                  for c in columns]
        found.append((min(starts), sum(c.total_compressed_size for c in columns), k, group))
    found.sort(key=lambda item: item[0])
    layout = []
    for i, (start, compressed, k, group) in enumerate(found):
        end = found[i + 1][0] if i + 1 < len(found) else start + compressed
        rows = group.num_rows
        by_size = max(1, rows * BATCH_BYTES // max(group.total_byte_size, 1))
        layout.append(_RowGroup(k, start, end, rows,
                                max(by_size, math.ceil(rows / max(end - start, 1)))))
    return layout


class ParquetFormat(RecordFormat):
    """Rows of Parquet files, delivered as Arrow IPC record batches; ``columns`` projects."""

    name: ClassVar[str] = "parquet"
    transparent: ClassVar[bool] = False  # batches of decoded rows
    columnar: ClassVar[bool] = True
    arrow_blocks: ClassVar[bool] = True

    def __init__(self, columns: Sequence[str] | None = None,
                 filters: Terms | None = None,
                 constants: Sequence[Sequence[Any]] = ()) -> None:
        """``columns``: those to deliver (default all); ``filters``: terms ``(column, op,
        value)`` every delivered row satisfies (a stream's ``filter``); ``constants``: columns
        the file's rows have that it does not hold, ``(name, Arrow type, value)`` (a Delta
        table's partition columns), added after its own."""
        self.columns = list(columns) if columns is not None else None
        self.filters = [tuple(term) for term in filters or ()]
        self.constants = [tuple(constant) for constant in constants]

    def for_stream(self, stream: StreamSpec) -> ParquetFormat:
        return ParquetFormat(stream.columns, stream.filter)

    def for_task(self, task: DataTask) -> ParquetFormat:
        if not task.constants:
            return self
        return ParquetFormat(self.columns, self.filters, task.constants)

    def align(self, f: IO[bytes], offset: int) -> int:
        """The first byte of the first row group starting at or after ``offset``."""
        layout = self._open(f)[1]
        k = bisect.bisect_left([group.start for group in layout], offset)
        return layout[k].start if k < len(layout) else max([offset, *(g.end for g in layout)])

    def blocks(self, f: IO[bytes], start: int, end: int, block_size: int = 0, *,
               aligned: bool = False) -> Iterator[Block]:
        """The rows of the row groups starting in ``[start, end)``, a batch a block; with
        ``aligned``, ``start`` may be a position inside a row group (a checkpoint).
        ``block_size`` is not used: a row group's batches follow from the file alone."""
        path = file_path(f)
        native = native_file(f)
        try:
            parquet, layout = self._open(f, native)
            if not layout:
                return
            first, batch = self._locate(layout, start, aligned)
            for group in layout[first:]:
                if group.start >= end:
                    return
                yield from self._read_group(parquet, path, group, batch)
                batch = 0
        finally:
            if native is not None:
                native.close()

    def least_chunk(self, f: IO[bytes]) -> tuple[int, str] | None:
        """A task owns the row groups that start in it: a range smaller than the largest
        row group of the file holds none of it in most places."""
        layout = self._open(f)[1]
        return (max(group.end - group.start for group in layout), "row group") if layout \
            else None

    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        raise AssertionError("ParquetFormat.blocks reads by row group")  # pragma: no cover

    @staticmethod
    def _locate(layout: list[_RowGroup], start: int, aligned: bool) -> tuple[int, int]:
        """The row group and batch a read from ``start`` begins at."""
        starts = [group.start for group in layout]
        if aligned:
            k = bisect.bisect_right(starts, start) - 1
            if k >= 0 and start - layout[k].start < layout[k].batches:
                return k, start - layout[k].start
        return bisect.bisect_left(starts, start), 0

    def _finished(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch as delivered: the constant columns added, the columns asked for in
        their order."""
        for name, kind, value in self.constants:
            if name not in batch.schema.names and (self.columns is None or name in self.columns):
                batch = batch.append_column(name, _constant(kind, value, batch.num_rows))
        return batch.select(self.columns) if self.columns is not None else batch

    def _open(self, f: IO[bytes], native: pa.NativeFile | None = None
              ) -> tuple[pq.ParquetFile, list[_RowGroup]]:
        """``f`` as a Parquet file, read through ``native`` where given (:func:`native_file`)."""
        try:
            # A page written with its CRC is checked against it: damage is an error, not
            # values delivered wrong (pages without one cannot be checked).
            parquet = pq.ParquetFile(f if native is None else native,
                                     page_checksum_verification=True)
            layout = _layout(parquet.metadata)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptRecordError(file_path(f), 0, f"not a readable Parquet file: "
                                     f"{one_line(exc)}") from exc
        names = [*parquet.schema_arrow.names, *(name for name, _, _ in self.constants)]
        missing = [c for c in self.columns or () if c not in names] + [
            column for column, _, _ in self.filters
            if column not in names and f"/{column}=" not in file_path(f)]
        if missing:
            raise no_column_error(file_path(f), missing, names)
        return parquet, layout

    def _reading(self, names: Sequence[str]) -> tuple[list[str] | None, Any]:
        """The columns to read from a file of columns ``names`` and the row filter (``None``:
        none). A term on a column the file lacks is a table's partition column (its directory
        says ``column=value``): it chose the files, there is nothing to filter in them."""
        terms = [term for term in self.filters if term[0] in names]
        own = None if self.columns is None else [c for c in self.columns if c in names]
        if not terms:
            return own, None
        read = None if own is None else [*own, *(c for c, _, _ in terms if c not in own)]
        return read, row_filter(terms)

    def _read_group(self, parquet: pq.ParquetFile, path: str, group: _RowGroup,
                    first_batch: int) -> Iterator[Block]:
        where = group.position_after(first_batch)
        columns, keep = self._reading(parquet.schema_arrow.names)
        try:
            batches = parquet.iter_batches(batch_size=group.batch_rows,
                                           row_groups=[group.index], columns=columns,
                                           use_threads=False)
            for number, batch in enumerate(batches):
                if number < first_batch:
                    continue
                where = group.position_after(number)
                if keep is not None:
                    batch = filtered(batch, keep, path, where, self.filters)
                batch = self._finished(batch)
                yield Block(ipc_stream(batch), batch.num_rows, group.position_after(number + 1))
                where = group.position_after(number + 1)  # what a failure now did not deliver
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptRecordError(path, where, f"row group {group.index}, rows from "
                                     f"{_first_row(where, group)}: {one_line(exc)}") from exc


def row_filter(terms: Sequence[Sequence[Any]]) -> Any:
    """The pyarrow expression of a stream's ``filter`` terms (``[column, op, value]``), all of
    them to hold (``None``: no term)."""
    if not terms:
        return None
    return functools.reduce(operator.and_,
                            (filter_expression(column, op, value) for column, op, value in terms))


def filtered(batch: pa.RecordBatch, keep: Any, path: str, where: int,
             terms: Sequence[tuple[object, ...]]) -> pa.RecordBatch:
    """The rows of ``batch`` that ``keep`` (:func:`row_filter`) holds for.

    Raises:
        CorruptRecordError: a value of another type than its column's, at ``where``.
    """
    try:
        return batch.filter(keep)
    except (pa.ArrowException, TypeError) as exc:
        raise filter_error(path, where, terms, exc) from exc


def no_column_error(path: str, missing: Sequence[str], names: Sequence[str]
                    ) -> CorruptRecordError:
    """A file without the columns a stream's ``columns`` or ``filter`` names."""
    return CorruptRecordError(path, 0, f"no column {', '.join(map(repr, missing))} (its "
                              f"columns: {', '.join(names)})")


def filter_error(path: str, where: int, terms: Sequence[tuple[object, ...]],
                  exc: BaseException) -> CorruptRecordError:
    shown = ", ".join(f"[{c}, {o}, {v!r}]" for c, o, v in terms)
    return CorruptRecordError(path, where, f"the stream's filter {shown} cannot be applied to "
                              f"its rows: {one_line(exc)}")


def _first_row(position: int, group: _RowGroup) -> int:
    """The first row of the batch that begins at ``position`` of ``group``."""
    return (position - group.start) * group.batch_rows if position < group.end else group.rows


def filter_expression(column: str, op: str, value: object) -> Any:
    """The pyarrow expression of one filter term. A null satisfies no term, ``!=`` and
    ``not in`` included, as in SQL (``is_in`` says false for a null, which ``~`` would turn
    into true)."""
    field = pc.field(column)
    if op in ("in", "not in"):
        found = field.isin(value if isinstance(value, list) else [value])
        return found if op == "in" else ~found & field.is_valid()
    return {"=": field == value, "!=": field != value, "<": field < value,
            "<=": field <= value, ">": field > value, ">=": field >= value}[op]


def _constant(kind: str, value: Any, rows: int) -> pa.Array:
    """A column of ``rows`` times ``value`` of type ``kind`` (``str`` of a pyarrow type; one
    without an alias, such as a decimal, stays as the value's own type)."""
    column = pa.array([value] * rows)
    try:
        return column.cast(pa.type_for_alias(kind))  # text of a date becomes a date
    except (ValueError, KeyError):
        return column


def native_file(f: IO[bytes]) -> pa.NativeFile | None:
    """The local file ``f`` opened again as pyarrow's own file (``None`` for other files):
    Arrow's reads of a Python file object each take the GIL, which the feeder's thread holds
    while it copies the batch before into the trainer's pipe or ring."""
    try:
        fd = f.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return None
    return pa.OSFile(f"/proc/self/fd/{fd}")


def one_line(exc: BaseException) -> str:
    """pyarrow's message, on one line (its errors span several)."""
    return " ".join(str(exc).split())


def ipc_stream(batch: pa.RecordBatch) -> memoryview:
    """``batch`` as a self-contained Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return memoryview(sink.getvalue())
