"""For trainers: reading the records Primus delivers.

A trainer's stream arrives on its stdin (``delivery: stdin``) or through the named pipe in
``PRIMUS_DATA_FIFO`` (``delivery: fifo``); :func:`open_input` opens whichever it is. Rows of a
columnar format (``format: parquet``) arrive as Arrow record batches, each in a self-contained
Arrow IPC stream; :func:`arrow_batches` yields them::

    from primus.data.reader import arrow_batches

    for batch in arrow_batches():
        train_on(batch.to_pydict())

Text, bytes and TFRecord records arrive as stored in their files (lines, raw bytes, framed
records) and need nothing of Primus to read.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

FIFO_ENV = "PRIMUS_DATA_FIFO"
"""The named pipe of a ``delivery: fifo`` stream."""


def open_input() -> IO[bytes]:
    """The trainer's stream: the named pipe in ``PRIMUS_DATA_FIFO`` when set, else stdin."""
    fifo = os.environ.get(FIFO_ENV)
    return open(fifo, "rb") if fifo else sys.stdin.buffer  # noqa: SIM115 - the caller's


def arrow_batches(source: IO[bytes] | None = None) -> Iterator[pa.RecordBatch]:
    """The Arrow record batches of a columnar stream, in order, until it ends.

    Args:
        source: a buffered binary file (``open(path, "rb")``, ``sys.stdin.buffer``); default
            :func:`open_input`.

    Raises:
        pyarrow.ArrowInvalid: the input holds something other than Arrow IPC streams.
    """
    import pyarrow as pa  # noqa: PLC0415 - only columnar streams need it

    stream = source if source is not None else open_input()
    while stream.peek(1):  # type: ignore[attr-defined]
        yield from pa.ipc.open_stream(stream)
