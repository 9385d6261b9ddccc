"""The built-in record formats (text, bytes, TFRecord), and splitting files into byte ranges;
the contract they keep, :class:`~primus.data.api.RecordFormat`, and the registry are in
``api.py``. Importing this module registers the built-in formats there: whoever looks a format
up by name (:func:`~primus.data.api.get_format`) imports it first.

A file is read in byte ranges ``[start, end)``, and a record belongs to the range in which it
*starts*: a range that begins inside a record skips to the next record boundary
(:meth:`RecordFormat.align`), and its last record may run past ``end``. Ranges cut at arbitrary
offsets therefore deliver every record of the file exactly once, which is what lets large files
be shared among executors without an index.

Reading is block-oriented so that feeding a trainer runs at memory speed:
:meth:`RecordFormat.blocks` yields large slices of the file (records with their framing, as the
trainer receives them) that end on record boundaries, each with its record count and the offset
where it ends. A consumer checkpoints ``(end_offset, records so far)`` between blocks and resumes
with ``blocks(f, end_offset, end, aligned=True)``.

Files are opened through fsspec (``fsspec.open(url, "rb")``), so any filesystem it knows can be
read; the functions here only need a seekable binary file object whose ``read(n)`` returns fewer
than ``n`` bytes only at the end of the file.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterable, Iterator
from typing import IO

import fsspec

from primus.data._framing import DATA_MISMATCH, HEADER_MISMATCH, check_tfrecords, masked_crc32c
from primus.data.api import (
    DEFAULT_BLOCK_SIZE,
    Block,
    CorruptRecordError,
    RecordFormat,
    file_path,
    file_size,
    register,
)
from primus.data.reader import split_lines

logger = logging.getLogger(__name__)


class TextFormat(RecordFormat):
    """Lines ending in a newline; a last line without one is a record too."""

    name = "text"

    def align(self, f: IO[bytes], offset: int) -> int:
        if offset <= 0:
            return 0
        # A line starts at offset exactly when the byte before it ends a line.
        pos = offset - 1
        f.seek(pos)
        while chunk := f.read(_TEXT_SCAN_SIZE):
            newline = chunk.find(b"\n")
            if newline >= 0:
                return pos + newline + 1
            pos += len(chunk)
        return max(pos, offset)

    def records_of(self, data: bytes) -> list[bytes]:
        """Lines, each ending in a newline: a file's last line without one gets it, so that it
        stays a line wherever it is shuffled to."""
        lines = split_lines(data)
        if lines and not lines[-1].endswith(b"\n"):
            lines[-1] += b"\n"
        return lines

    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        f.seek(pos)
        while pos < end:
            data = f.read(block_size)
            if not data:
                return
            while True:
                limit = end - pos  # lines starting before this index belong to the range
                if len(data) >= limit:
                    newline = data.find(b"\n", limit - 1)
                else:
                    newline = data.rfind(b"\n")
                if newline >= 0:
                    cut = newline + 1
                    break
                # No line ends in the buffer: a line longer than it; read on.
                more = f.read(max(block_size, len(data)))
                if not more:
                    cut = len(data)
                    break
                data += more
            records = data.count(b"\n", 0, cut) + (data[cut - 1] != _NEWLINE)
            yield Block(memoryview(data)[:cut], records, pos + cut)
            pos += cut
            if cut < len(data):
                # Read the partial line again with the next block rather than copying it.
                f.seek(pos)


class BytesFormat(RecordFormat):
    """Raw bytes with no record structure: each block is a record, and any offset a boundary."""

    name = "bytes"

    def align(self, f: IO[bytes], offset: int) -> int:
        return offset

    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        f.seek(pos)
        while pos < end and (data := f.read(min(block_size, end - pos))):
            pos += len(data)
            yield Block(data, 1, pos)


class TFRecordFormat(RecordFormat):
    """TFRecord framing, with both checksums of every record verified.

    Each record is ``uint64 length (little-endian) | uint32 masked crc32c of the length |
    data | uint32 masked crc32c of the data``.

    Nothing marks where a record starts, so :meth:`align` searches for a position where a
    header with a matching checksum starts a record whose data checksum matches too, and
    from which the next few headers chain on (or the file ends exactly). The chain rejects
    records embedded whole in another record's data (a record's data that is itself a short
    TFRecord file), unless more than :data:`_CHAIN_HOPS` (four) are embedded back to back.
    Records of 4 GiB or more cannot be found this way, so files holding them must be read whole.

    A search passes over damaged records, which belong to the range in which they start; so
    that the damage is reported rather than skipped, each range also checks the record just
    after its end the way the next range's search will, and raises if it would be passed over.

    Args:
        scan_size: bytes read at a time while searching for a record boundary.
    """

    name = "tfrecord"

    def __init__(self, scan_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if scan_size <= _HEADER.size:
            raise ValueError(f"scan_size must exceed {_HEADER.size} bytes, got {scan_size}")
        self.scan_size = scan_size

    def align(self, f: IO[bytes], offset: int) -> int:
        path = file_path(f)
        size = file_size(f)
        window_start = offset
        while window_start + _HEADER.size <= size:
            f.seek(window_start)
            window = f.read(self.scan_size)
            last = len(window) - _HEADER.size  # headers must start in window[:last + 1]
            for i in _header_candidates(window, last):
                length_crc = _HEADER.unpack_from(window, i)[1]
                if length_crc != masked_crc32c(window[i:i + 8]):
                    continue
                try:
                    _check_boundary(f, path, window_start + i, size)
                except CorruptRecordError:
                    continue
                if window_start + i != offset:
                    logger.debug("%s: first record at or after byte %d starts at byte %d",
                                 path, offset, window_start + i)
                return window_start + i
            window_start += last + 1
        return max(size, offset)

    def records_of(self, data: bytes) -> list[bytes]:
        """The framed records (the block's framing was checked as it was read)."""
        records, pos, end = [], 0, len(data)
        while pos < end:
            stop = pos + _FRAMING + _HEADER.unpack_from(data, pos)[0]
            records.append(data[pos:stop])
            pos = stop
        return records

    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        path = file_path(f)
        f.seek(pos)
        data = f.read(block_size)
        while data:
            # The records of the block are walked and checked in C (``_framing``): in Python the
            # loop, not the checksums, bounded records of a few hundred bytes.
            i, records, need, error = check_tfrecords(data, end - pos)
            if error == HEADER_MISMATCH:
                raise _header_mismatch(path, pos + i)
            if error == DATA_MISMATCH:
                raise _data_mismatch(path, pos + i)
            if records:
                yield Block(memoryview(data)[:i], records, pos + i)
            pos += i
            if pos >= end:
                _check_boundary(f, path, pos, file_size(f))
                return
            if need > block_size and pos + need > file_size(f):  # a length past the file's end
                raise _truncated(path, pos, data[i:i + _HEADER.size], file_size(f) - pos)
            f.seek(pos)
            data = f.read(max(block_size, need))
            if 0 < len(data) < need:
                raise _truncated(path, pos, data)


_NEWLINE = ord("\n")
_TEXT_SCAN_SIZE = 64 << 10

_HEADER = struct.Struct("<QI")  # data length, masked crc32c of the length's 8 bytes
_FOOTER = struct.Struct("<I")  # masked crc32c of the data
_FRAMING = _HEADER.size + _FOOTER.size
_CHAIN_HOPS = 4
_ZERO_RUN = re.compile(rb"\x00{4,}")


def _header_candidates(window: bytes, last: int) -> Iterator[int]:
    """Indexes up to ``last`` in ``window`` where a header of a record under 4 GiB may start.

    The length's high four bytes are then zero, so candidates lie around runs of four or more
    zero bytes. Inside a long run, twelve zero bytes are no header (the checksum of a zero
    length is not zero), so only the few positions at either end of a run are tried: data full
    of zeros costs no more to search than any other.
    """
    for run in _ZERO_RUN.finditer(window):
        a, b = run.span()  # a header at i needs window[i + 4:i + 8] inside the run
        yield from range(max(a - 4, 0), min(a, b - 7, last + 1))
        yield from range(max(a, b - 11), min(b - 7, last + 1))


def _check_boundary(f: IO[bytes], path: str, pos: int, size: int) -> None:
    """Check that a record starts at ``pos`` as :meth:`TFRecordFormat.align` would accept it.

    The record's header and data must check, and so must the headers of the next
    :data:`_CHAIN_HOPS` records, or the file must end exactly after one of them.
    """
    if pos >= size:
        return
    stop = _record_end(f, path, pos, size)
    length = stop - pos - _FRAMING
    if length >= 1 << 32:
        raise CorruptRecordError(path, pos, f"record at byte {pos} holds {length} bytes; records "
                                 "of 4 GiB or more cannot be found by a search, so read this "
                                 "file whole")
    f.seek(pos + _HEADER.size)
    data = f.read(length)
    if _FOOTER.unpack(f.read(_FOOTER.size))[0] != masked_crc32c(data):
        raise _data_mismatch(path, pos)
    for _ in range(_CHAIN_HOPS):
        if stop == size:
            return
        stop = _record_end(f, path, stop, size)


def _record_end(f: IO[bytes], path: str, pos: int, size: int) -> int:
    """Where the record starting at ``pos`` ends, after checking its header."""
    f.seek(pos)
    header = f.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise _truncated(path, pos, header)
    length, length_crc = _HEADER.unpack(header)
    if length_crc != masked_crc32c(header[:8]):
        raise _header_mismatch(path, pos)
    if pos + _FRAMING + length > size:
        raise _truncated(path, pos, header, size - pos)
    return pos + _FRAMING + length


def _truncated(path: str, pos: int, head: bytes,
               available: int | None = None) -> CorruptRecordError:
    """The error for a record at ``pos`` of which only ``available`` bytes (``head``) exist."""
    available = len(head) if available is None else available
    if available < _HEADER.size:
        detail = f"the file ends after {available} bytes, a record header takes {_HEADER.size}"
    else:
        length = _HEADER.unpack_from(head)[0]
        detail = (f"header says {length} bytes ({length + _FRAMING} with framing), "
                  f"file ends after {available}")
    return CorruptRecordError(path, pos, f"truncated record at byte {pos}: {detail}")


def _header_mismatch(path: str, pos: int) -> CorruptRecordError:
    return CorruptRecordError(path, pos, f"header checksum mismatch at byte {pos}")


def _data_mismatch(path: str, pos: int) -> CorruptRecordError:
    return CorruptRecordError(path, pos, f"data checksum mismatch at byte {pos}")


def encode_tfrecord(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, _FOOTER.pack(masked_crc32c(length)), data,
                     _FOOTER.pack(masked_crc32c(data))))


def write_tfrecords(target: str | os.PathLike[str] | IO[bytes], records: Iterable[bytes]) -> int:
    """Write ``records`` in TFRecord framing and return how many were written.

    Args:
        target: a path or fsspec URL (the file is created or replaced), or a binary file
            open for writing.
        records: the data of each record.
    """
    if isinstance(target, str | os.PathLike):
        with fsspec.open(os.fspath(target), "wb") as f:
            return write_tfrecords(f, records)
    count = 0
    for record in records:
        target.write(encode_tfrecord(record))
        count += 1
    return count


def split_ranges(size: int, chunk_size: int | None) -> list[tuple[int, int]]:
    """Byte ranges that cover a file of ``size`` bytes, in order.

    One range for the whole file when ``chunk_size`` is ``None``, else consecutive ranges of
    ``chunk_size`` bytes (the last one shorter). Ranges need not fall on record boundaries:
    each record belongs to the range in which it starts. An empty file still gets one (empty)
    range, so that it is accounted for like any other.
    """
    if size < 0:
        raise ValueError(f"a file size cannot be negative, got {size}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive number of bytes, got {chunk_size}")
    if chunk_size is None or size == 0:
        return [(0, size)]
    return [(start, min(start + chunk_size, size)) for start in range(0, size, chunk_size)]


# The built-in formats, registered as this module is imported (the contract imports none).
for _format in (TextFormat(), BytesFormat(), TFRecordFormat()):
    register(_format)

from primus.data import kafka as _kafka  # noqa: E402, F401 - registers kafka (reads no file)
