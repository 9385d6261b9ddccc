"""For trainers: reading the records Primus delivers.

A trainer's stream arrives on its stdin (``delivery: stdin``), through the named pipe in
``PRIMUS_DATA_FIFO`` (``delivery: fifo``), or through shared memory (``delivery: shm``: a
ring whose descriptors are in ``PRIMUS_DATA_SHM``); ``PRIMUS_DATA_FORMAT`` names the stream's
format. This module reads whichever it is::

    from primus.data.reader import records, arrow_batches

    for record in records():          # text lines, TFRecord payloads, bytes blocks
        train_on(record)

    for batch in arrow_batches():     # format: parquet, kafka
        train_on(batch.to_pydict())

For PyTorch, :func:`torch_dataset` is an ``IterableDataset`` whose DataLoader workers split
the stream among themselves without duplicates (``delivery: shm``); for TensorFlow,
``tf.data.Dataset.from_generator(primus.data.reader.records, output_signature=
tf.TensorSpec((), tf.string))``.

Over a pipe the records arrive as stored in their files (lines, TFRecord framing), so a
trainer can read them without this module (``tf.data.TFRecordDataset("/dev/stdin")``); shared
memory needs it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import struct
import sys
import tarfile
from collections.abc import Callable, Iterator
from functools import partial
from typing import IO, TYPE_CHECKING, Any

from primus.data._framing import split_tfrecords

if TYPE_CHECKING:
    import pyarrow as pa

    from primus.data.shm import Frame, RingReader

FIFO_ENV = "PRIMUS_DATA_FIFO"
"""The named pipe of a ``delivery: fifo`` stream."""
SHM_ENV = "PRIMUS_DATA_SHM"
"""The ring of a ``delivery: shm`` stream (its descriptors)."""
FORMAT_ENV = "PRIMUS_DATA_FORMAT"
"""The stream's record format."""
COLUMNAR = frozenset({"parquet", "arrow"})
"""Formats whose records are Arrow record batches (:func:`arrow_batches`)."""
CONTROL_ENV = "PRIMUS_CONTROL"
"""The descriptor of the trainer's end of a socket to its executor (where it asks for a
savepoint)."""

_LENGTH = struct.Struct("<Q")

SAMPLE_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
"""A WebDataset member's name: its sample's key (the path up to the first dot of the file's
name) and its extension, as WebDataset's own loader splits them."""

Sample = dict[str, object]
"""A WebDataset sample, as WebDataset's loader gives it: ``{"__key__": KEY, EXTENSION: bytes}``.
"""


def open_input() -> IO[bytes]:
    """The trainer's stream over a pipe: the named pipe in ``PRIMUS_DATA_FIFO`` when set, else
    stdin."""
    fifo = os.environ.get(FIFO_ENV)
    return open(fifo, "rb") if fifo else sys.stdin.buffer  # noqa: SIM115 - the caller's


def open_ring(workers: int = 1, ring: str | None = None) -> RingReader:
    """The ring of a ``delivery: shm`` stream, read by one of ``workers`` readers (processes
    with its descriptors, which take its blocks in turn).

    Args:
        ring: its descriptors (``RING,DATA,SPACE``); default ``$PRIMUS_DATA_SHM``.

    Raises:
        KeyError: the stream is not delivered through shared memory.
    """
    from primus.data.shm import RingReader  # noqa: PLC0415

    return RingReader.open(ring if ring is not None else os.environ[SHM_ENV], workers)


def _ring_spec(ring: str | None) -> str | None:
    return ring if ring is not None else os.environ.get(SHM_ENV)


def records(fmt: str | None = None, *, workers: int = 1, ring: str | None = None
            ) -> Iterator[Any]:
    """Each record of the stream, in order, until it ends: a text line (its newline
    included), the data of a TFRecord, a block of a ``bytes`` stream, the value of a Kafka
    message (``arrow_batches()`` has its offset, key, timestamp and headers too), a WebDataset
    sample (``{"__key__": KEY, EXTENSION: bytes, ...}``, as WebDataset's loader gives it). With
    ``workers``, this process is one of that many readers, each reading the blocks it takes
    (shared memory only). :func:`record_batches` gives the same records a block at a time,
    for a fraction of the cost per record.

    Args:
        fmt: the stream's format; default ``$PRIMUS_DATA_FORMAT``.
        ring: the ring's descriptors; default ``$PRIMUS_DATA_SHM`` (:func:`open_ring`).
    """
    fmt = fmt or os.environ.get(FORMAT_ENV, "text")
    if fmt == "kafka":  # each message's value, from the batches the stream delivers
        for batch in arrow_batches(workers=workers, ring=ring):
            yield from batch.column("value").to_pylist()
        return
    _check_record_format(fmt, "records")
    spec = _ring_spec(ring)
    if spec is None:
        yield from _pipe_records(_pipe_of(workers), fmt)
        return
    split = _SPLIT[fmt]
    with _ring_read(workers, spec) as (frames, reading):
        for frame in frames:
            if reading is None:
                for record, _ in split(frame.payload):
                    yield record
                continue
            reading.records = reading.nbytes = 0
            for record, size in split(frame.payload):
                reading.records += 1
                reading.nbytes += size
                yield record


def record_batches(fmt: str | None = None, *, workers: int = 1, ring: str | None = None
                   ) -> Iterator[list[Any]]:
    """The records of :func:`records`, a list at a time: those of one block as the executor
    wrote it (about 1 MiB), or of one Kafka batch. For small records (a TFRecord of 250 bytes,
    a line) most of a trainer's time in :func:`records` is spent handing records over one by
    one; a list per block costs one call per block.

    Through shared memory, a savepoint taken while the trainer works on a list counts the
    whole list as taken.
    """
    fmt = fmt or os.environ.get(FORMAT_ENV, "text")
    if fmt == "kafka":
        for batch in arrow_batches(workers=workers, ring=ring):
            yield batch.column("value").to_pylist()
        return
    _check_record_format(fmt, "record_batches")
    spec = _ring_spec(ring)
    if spec is None:
        yield from _pipe_batches(_pipe_of(workers), fmt)
        return
    split = _SPLIT_ALL[fmt]
    with _ring_read(workers, spec) as (frames, reading):
        for frame in frames:
            batch = split(frame.payload)
            if reading is not None:
                reading.records, reading.nbytes = len(batch), len(frame.payload)
            yield batch


@contextlib.contextmanager
def _ring_read(workers: int, spec: str) -> Iterator[tuple[Iterator[Frame], _Reading | None]]:
    """The frames of the ring ``spec`` names, read by one of ``workers`` readers, and, for the
    one reader, how far the trainer got in the current one (what :func:`savepoint` tells the
    executor); the ring closed at the end."""
    global _reading  # noqa: PLW0603 - what savepoint() tells the executor
    ring_reader = open_ring(workers, spec)
    reading = _reading = _Reading(ring_reader) if workers == 1 else None
    frames = ring_reader.frames()
    try:
        yield frames, reading
    finally:
        frames.close()  # before the ring: a reader that stopped early tells the feeder so
        if _reading is reading:
            _reading = None
        ring_reader.close()


def _check_record_format(fmt: str, function: str) -> None:
    if fmt not in _SPLIT:
        raise ValueError(f"{function}(): format {fmt!r} has no records to iterate; a columnar "
                         f"stream is read with arrow_batches()")


def _pipe_of(workers: int) -> IO[bytes]:
    if workers != 1:
        raise ValueError("a stream over a pipe cannot be split among workers: use "
                         "delivery: shm")
    return open_input()


class _Reading:
    """How far the trainer got in the block it reads (shared memory, one reader)."""

    __slots__ = ("ring", "records", "nbytes")

    def __init__(self, ring: RingReader) -> None:
        self.ring = ring
        self.records = self.nbytes = 0


_reading: _Reading | None = None


def _pipe_records(stream: IO[bytes], fmt: str) -> Iterator[Any]:
    if fmt == "text":
        yield from stream
    elif fmt == "webdataset":
        yield from _stream_samples(stream)
    elif fmt == "bytes":
        while chunk := stream.read1(1 << 20):  # type: ignore[attr-defined]
            yield chunk
    else:
        while header := stream.read(12):
            (length,) = _LENGTH.unpack_from(header)
            data = stream.read(length + 4)
            yield data[:length]


_PIPE_READ = 1 << 20
"""Bytes a batch reader asks the pipe for at a time."""


def _pipe_batches(stream: IO[bytes], fmt: str) -> Iterator[list[Any]]:
    read = stream.read1  # type: ignore[attr-defined]
    if fmt == "webdataset":  # a tar stream has no blocks: lists of about 1 MiB of samples
        batch: list[Any] = []
        size = 0
        for sample in _stream_samples(stream):
            batch.append(sample)
            size += sum(len(v) for v in sample.values() if isinstance(v, bytes))
            if size >= _PIPE_READ:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch
    elif fmt == "bytes":
        while chunk := read(_PIPE_READ):
            yield [chunk]
    elif fmt == "text":
        pending: list[bytes] = []  # the start of a line that began in an earlier chunk
        while chunk := read(_PIPE_READ):
            cut = chunk.rfind(b"\n") + 1
            if not cut:
                pending.append(chunk)
                continue
            whole = b"".join((*pending, chunk[:cut])) if pending else chunk[:cut]
            pending = [chunk[cut:]] if cut < len(chunk) else []
            yield split_lines(whole)
        if pending:  # a last line without a newline
            yield [b"".join(pending)]
    else:
        rest = b""
        while chunk := read(_PIPE_READ):
            data = rest + chunk if rest else chunk
            batch, used = split_tfrecords(data)
            rest = data[used:]
            if len(rest) >= 12:  # a record longer than what came: read the rest of it at once
                missing = 16 + _LENGTH.unpack_from(rest)[0] - len(rest)
                rest += stream.read(missing)
            if batch:
                yield batch
        if rest:
            raise ValueError(f"the stream ended inside a TFRecord ({len(rest)} bytes of it)")


def split_lines(data: bytes | memoryview) -> list[bytes]:
    """The text records of ``data``, each with its newline: split on ``\\n`` alone, never on a
    bare ``\\r`` (as ``bytes.splitlines`` would), as iterating a file splits them (the pipe's
    delivery); a last line without a newline is a record too. The one definition of a line in
    every delivery and in a preprocess step. (``io.BytesIO`` splits in C, at 2.5 times the
    speed of splitting and appending the newlines again.)"""
    return io.BytesIO(data).readlines()


def _text(payload: memoryview | bytes) -> Iterator[tuple[bytes, int]]:
    for line in split_lines(payload):
        yield line, len(line)


def _tfrecords(payload: memoryview | bytes) -> Iterator[tuple[bytes, int]]:
    for record in split_tfrecords(payload)[0]:
        yield record, 16 + len(record)


def _bytes(payload: memoryview | bytes) -> Iterator[tuple[bytes, int]]:
    yield bytes(payload), len(payload)


def samples_of(payload: memoryview | bytes) -> Iterator[tuple[Sample, int]]:
    """The samples of a block of a ``webdataset`` stream (whole samples as stored: tar bytes
    without the archive's end), each with the bytes it takes in the block: they add up to the
    block's (what lies between two samples, a directory's header, is the first one's)."""
    if not len(payload):
        return
    raw = bytes(payload)
    tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:")
    previous: Sample | None = None
    at = 0
    for sample, start in _grouped(
            tar, lambda member: raw[member.offset_data:member.offset_data + member.size]):
        if previous is not None:
            yield previous, start - at
            at = start
        previous = sample
    if previous is not None:
        yield previous, len(raw) - at


def _stream_samples(stream: IO[bytes]) -> Iterator[Sample]:
    """The samples of a ``webdataset`` stream read from a pipe as it comes (a tar stream)."""
    try:
        tar = tarfile.open(fileobj=stream, mode="r|")
    except tarfile.ReadError:  # nothing came: an empty stream
        return

    def data_of(member: tarfile.TarInfo) -> bytes:
        data = tar.extractfile(member)
        return data.read() if data is not None else b""
    for sample, _ in _grouped(tar, data_of):
        yield sample


def _grouped(tar: tarfile.TarFile, data_of: Callable[[tarfile.TarInfo], bytes]
             ) -> Iterator[tuple[Sample, int]]:
    """The samples of ``tar``: its files grouped by key as they follow one another (each
    file's data read with ``data_of`` before the next member), each with where its first
    file's header starts."""
    sample: Sample | None = None
    start = 0
    for member in tar:
        if not member.isreg():
            continue
        key, extension = _key_of(member.name)
        if sample is not None and sample["__key__"] != key:
            yield sample, start
            sample = None
        if sample is None:
            sample, start = {"__key__": key}, member.offset
        sample[extension] = data_of(member)
    if sample is not None:
        yield sample, start


def _key_of(name: str) -> tuple[str, str]:
    """A member's key and extension (the executor refused a member without them)."""
    found = SAMPLE_KEY.match(name)
    return (found.group(1), found.group(2)) if found else (name, "")


_SPLIT: dict[str, Callable[[memoryview | bytes], Iterator[tuple[Any, int]]]] = {
    "text": _text, "tfrecord": _tfrecords, "bytes": _bytes, "webdataset": samples_of}
_SPLIT_ALL: dict[str, Callable[[memoryview | bytes], list[Any]]] = {
    "text": split_lines, "tfrecord": lambda payload: split_tfrecords(payload)[0],
    "bytes": lambda payload: [bytes(payload)],
    "webdataset": lambda payload: [sample for sample, _ in samples_of(payload)]}
"""Every record of a block, as one list."""


def arrow_batches(source: IO[bytes] | None = None, *, workers: int = 1,
                  ring: str | None = None) -> Iterator[pa.RecordBatch]:
    """The Arrow record batches of a columnar stream, in order, until it ends.

    Args:
        source: a buffered binary file (``open(path, "rb")``, ``sys.stdin.buffer``); default
            the stream (:func:`open_input`, or the ring of ``delivery: shm``).
        workers: this process is one of that many readers of the ring.
        ring: the ring's descriptors; default ``$PRIMUS_DATA_SHM`` (:func:`open_ring`).

    Raises:
        pyarrow.ArrowInvalid: the input holds something other than Arrow IPC streams.
    """
    import pyarrow as pa  # noqa: PLC0415 - only columnar streams need it

    spec = _ring_spec(ring)
    if source is None and spec is not None:
        ring_reader = open_ring(workers, spec)
        try:
            for frame in ring_reader.frames():
                # A copy: the batch outlives the frame, whose space the feeder reuses.
                yield from pa.ipc.open_stream(pa.py_buffer(bytes(frame.payload)))
        finally:
            ring_reader.close()
        return
    stream = source if source is not None else open_input()
    while stream.peek(1):  # type: ignore[attr-defined]
        yield from pa.ipc.open_stream(stream)


def savepoint(name: str = "", timeout: float = 300.0) -> str:
    """Ask for a savepoint of the application's data streams where this trainer is now, and
    wait until it is taken; its id (``APP/NUMBER``), to keep with the model's checkpoint.

    Every trainer of a data-parallel job calls it at the same step with the same ``name``
    (``f"step-{step}"``): each one's executor writes where its trainer is, and the AM takes
    one savepoint once every reader has (or after a minute, the others at their last
    checkpoint). Through shared memory the cut falls after the last record this trainer was
    given; through a pipe, after the last block it took from the pipe.

    Raises:
        RuntimeError: not under Primus, no data stream, or the savepoint failed.
    """
    fd = os.environ.get(CONTROL_ENV)
    if not fd:
        raise RuntimeError(f"savepoint(): ${CONTROL_ENV} is not set: the trainer has no data "
                           f"stream of Primus's")
    if _reading is not None:
        _reading.ring.took(_reading.records, _reading.nbytes)
    with socket.fromfd(int(fd), socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.sendall(json.dumps({"savepoint": name}).encode() + b"\n")
        answer = json.loads(_read_line(connection) or b"{}")
    if "savepoint" not in answer:
        raise RuntimeError(f"savepoint(): {answer.get('error', 'no answer from the executor')}")
    return str(answer["savepoint"])


def _read_line(connection: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n") and (data := connection.recv(4096)):
        line += data
    return line


def torch_dataset(fmt: str | None = None) -> Any:
    """A PyTorch ``IterableDataset`` of the stream's records (or Arrow batches, for a
    columnar format). In a DataLoader with workers, each worker reads its share of the
    stream's blocks (``delivery: shm``), so no record reaches two workers, whether the workers
    are forked, spawned or started by a forkserver (:mod:`primus.data.torch_stream`)."""
    from primus.data.torch_stream import PrimusStream  # noqa: PLC0415 - it imports torch

    fmt = fmt or os.environ.get(FORMAT_ENV, "text")
    read = partial(arrow_batches, None) if fmt in COLUMNAR else partial(records, fmt)
    return PrimusStream(read, _ring_spec(None))
