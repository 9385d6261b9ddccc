"""Arrow IPC files as a record format (``format: arrow``): rows, read through pyarrow.

Both forms of Arrow's IPC format are read: the *file* form (``ARROW1`` at both ends, a footer
that indexes the record batches; ``.arrow``/``.feather`` v2) and the *stream* form (messages
back to back, what Hugging Face ``datasets`` keeps its tables in). The trainer receives the
rows as Arrow record batches, as for Parquet (:mod:`primus.data.parquet`): each block is one
batch in a self-contained IPC stream, which :func:`primus.data.reader.arrow_batches` reads.
``columns`` projects and ``filter`` selects rows, as for Parquet.

**Tasks are whole files.** Neither form says where its batches lie without reading them (the
file form's footer does, but pyarrow does not expose it), so a file is one task:
:meth:`ArrowFormat.least_chunk` is the file's size, and a ``chunk_size`` below it is refused at
submit.

**Positions.** A file's batches are cut into pieces of about :data:`PIECE_BYTES` (a batch of
Hugging Face's may be far larger), and a position is the number of pieces read: reading resumes
after the last piece a checkpoint counted, reading the file again from its start to find it.
A piece's rows follow from its batch alone, so whoever resumes cuts the same pieces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any, ClassVar

import pyarrow as pa

from primus.config.spec import StreamSpec
from primus.data.api import Block, CorruptRecordError, RecordFormat, Terms, file_path, file_size
from primus.data.parquet import filtered, ipc_stream, no_column_error, one_line, row_filter

PIECE_BYTES = 1 << 20
"""Bytes of one piece of a batch, about: the rows of a block (as Parquet's batches)."""
FILE_MAGIC = b"ARROW1"
"""The first bytes of Arrow's IPC file form (the stream form starts with a message)."""


class ArrowFormat(RecordFormat):
    """Rows of Arrow IPC files (file or stream form), delivered as Arrow IPC record batches."""

    name: ClassVar[str] = "arrow"
    transparent: ClassVar[bool] = False  # pieces of decoded batches, positions are counts
    columnar: ClassVar[bool] = True
    arrow_blocks: ClassVar[bool] = True

    def __init__(self, columns: list[str] | None = None, filters: Terms | None = None) -> None:
        self.columns = list(columns) if columns is not None else None
        self.filters = [tuple(term) for term in filters or ()]

    def for_stream(self, stream: StreamSpec) -> ArrowFormat:
        return ArrowFormat(stream.columns, stream.filter)

    def least_chunk(self, f: IO[bytes]) -> tuple[int, str] | None:
        return file_size(f), "file"

    def align(self, f: IO[bytes], offset: int) -> int:
        """A file is one task: only its start is a boundary."""
        return 0 if offset <= 0 else max(offset, file_size(f))

    def blocks(self, f: IO[bytes], start: int, end: int, block_size: int = 0, *,
               aligned: bool = False) -> Iterator[Block]:
        """The pieces of the file's batches, from piece ``start`` when ``aligned`` (a
        checkpoint), else from the first when the range starts the file (and none when it
        does not: a range of a file is a task only at its start). A batch of no rows is
        counted, not delivered."""
        if not aligned and (start > 0 or end <= start):
            return
        path = file_path(f)
        position = 0
        try:
            batches, names = self._open(f)
            keep = self._keep(names, path)
            for batch in batches:
                for piece in _pieces(batch):
                    position += 1
                    if position <= start or not piece.num_rows:
                        continue
                    if keep is not None:
                        piece = filtered(piece, keep, path, position - 1, self.filters)
                    if self.columns is not None:
                        piece = piece.select(self.columns)
                    yield Block(ipc_stream(piece), piece.num_rows, position)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptRecordError(path, position, f"batch piece {position}: "
                                     f"{one_line(exc)}") from exc

    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        raise AssertionError("ArrowFormat.blocks reads by batch")  # pragma: no cover

    def _open(self, f: IO[bytes]) -> tuple[Iterator[pa.RecordBatch], list[str]]:
        """The file's batches, in order, and its columns."""
        f.seek(0)
        head = f.read(len(FILE_MAGIC))
        f.seek(0)
        try:
            if head == FILE_MAGIC:
                reader = pa.ipc.open_file(f)
                batches: Iterator[pa.RecordBatch] = (
                    reader.get_batch(i) for i in range(reader.num_record_batches))
                schema = reader.schema
            else:
                stream = pa.ipc.open_stream(f)
                batches, schema = iter(stream), stream.schema
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptRecordError(file_path(f), 0, f"not an Arrow IPC file or stream: "
                                     f"{one_line(exc)}") from exc
        return batches, schema.names

    def _keep(self, names: list[str], path: str) -> Any:
        """The row filter (``None``: none), once the columns asked for are known there."""
        missing = [c for c in self.columns or () if c not in names] + [
            c for c, _, _ in self.filters if c not in names]
        if missing:
            raise no_column_error(path, missing, names)
        return row_filter(self.filters)


def _pieces(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """``batch`` in slices of about :data:`PIECE_BYTES` (views, no copy); an empty batch is a
    piece of its own, so that every batch counts the same on every read."""
    rows = max(1, batch.num_rows * PIECE_BYTES // max(batch.nbytes, 1))
    if batch.num_rows <= rows:
        yield batch
        return
    for offset in range(0, batch.num_rows, rows):
        yield batch.slice(offset, rows)
