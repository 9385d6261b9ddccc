"""A stream's ``preprocess:`` step: a Python callable of the job's own (``module:function``)
applied to every record before it is delivered: decoding, filtering, close to the data.

It runs in a process of its own (:class:`Preprocessor` starts ``python -m
primus.data.preprocess``), not in the executor: user code never runs where Primus's
credentials are. The process gets the trainer's environment and working directory (so that it
imports the job's modules) and dies with its executor. The feeder hands it one block at a time
and delivers what comes back:

- text, bytes, TFRecord: the function gets each record's data (a line without its newline, a
  TFRecord's data) and returns the new data (``bytes`` or ``str``) or ``None`` to drop the
  record; what it returns is framed again (a newline, TFRecord framing);
- Parquet: it gets each ``pyarrow.RecordBatch`` and returns a batch (any schema) or ``None``.

A record the function fails on fails its task, the message naming the function, the file, the
record's byte and the error. Records are counted (checkpoints, ``records``) as read from the
files, dropped ones included.

Protocol on the pipes (little-endian): a request is ``u32 length, u32 block start offset``
and the block; an answer is ``u32 status, u32 length`` and the new block (status 0) or an
error message (status 1, the length first the record's byte offset as ``u64``).
"""

from __future__ import annotations

import importlib
import io
import os
import struct
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from primus.data.formats import encode_tfrecord
from primus.data.reader import split_lines

_REQUEST = struct.Struct("<IQ")
_ANSWER = struct.Struct("<II")
_OFFSET = struct.Struct("<Q")
_LENGTH = struct.Struct("<Q")
PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
"""What ``preprocess:`` names: ``module:function``."""


class PreprocessError(Exception):
    """The function failed on a record (``offset``: its byte in the file), or the process
    cannot run it."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


def resolve(target: str) -> Callable[[Any], Any]:
    """The function ``module:function`` names."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def _records(fmt: str, block: bytes) -> Iterator[tuple[int, bytes]]:
    """Each record's position in ``block`` and its data."""
    if fmt == "text":
        pos = 0
        for line in split_lines(block):
            yield pos, line.rstrip(b"\n")
            pos += len(line)
    elif fmt == "tfrecord":
        pos = 0
        while pos < len(block):
            (length,) = _LENGTH.unpack_from(block, pos)
            yield pos, block[pos + 12:pos + 12 + length]
            pos += 16 + length
    else:
        yield 0, block


def transform(fmt: str, function: Callable[[Any], Any], block: bytes, start: int) -> bytes:
    """``block`` (starting at byte ``start`` of its file) with ``function`` applied to each
    record.

    Raises:
        PreprocessError: the function failed on a record, or returned what cannot be framed.
    """
    if fmt == "parquet":
        return _transform_batches(function, block, start)
    out = io.BytesIO()
    for pos, record in _records(fmt, block):
        try:
            result = function(record)
            if result is None:
                continue
            data = result.encode() if isinstance(result, str) else bytes(result)
        except Exception as exc:  # noqa: BLE001 - the user's function: any failure is its task's
            raise PreprocessError(_failure(exc), start + pos) from exc
        if fmt == "text":
            out.write(data if data.endswith(b"\n") else data + b"\n")
        elif fmt == "tfrecord":
            out.write(encode_tfrecord(data))
        else:
            out.write(data)
    return out.getvalue()


def _transform_batches(function: Callable[[Any], Any], block: bytes, start: int) -> bytes:
    import pyarrow as pa  # noqa: PLC0415 - Parquet streams only

    out = pa.BufferOutputStream()
    for batch in pa.ipc.open_stream(pa.py_buffer(block)):
        try:
            result = function(batch)
        except Exception as exc:  # noqa: BLE001
            raise PreprocessError(_failure(exc), start) from exc
        if result is None:
            continue
        if not isinstance(result, pa.RecordBatch):
            raise PreprocessError(f"returned a {type(result).__name__}, not a "
                                  f"pyarrow.RecordBatch or None", start)
        with pa.ipc.new_stream(out, result.schema) as writer:
            writer.write_batch(result)
    return out.getvalue().to_pybytes()


def _failure(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} ({os.path.basename(where.filename)}:{where.lineno})"


def _read_exactly(stream: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class Preprocessor:
    """The executor's side: the process that runs ``target`` on the blocks of format
    ``fmt``; :meth:`apply` is called from the feeder's thread, one block at a time."""

    def __init__(self, target: str, fmt: str, env: Mapping[str, str], cwd: str,
                 wrap: Callable[[list[str]], list[str]] = lambda argv: argv) -> None:
        self.target = target
        self.process = subprocess.Popen(  # noqa: S603 - argv of our own, no shell
            wrap([sys.executable, "-m", "primus.data.preprocess", target, fmt]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(env), cwd=cwd)

    def apply(self, data: bytes | memoryview, start: int) -> bytes:
        """The block transformed.

        Raises:
            PreprocessError: the function failed on a record (the message says where), or
                the process ended.
        """
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(_REQUEST.pack(len(data), start))
            self.process.stdin.write(data)
            self.process.stdin.flush()
            status, length = _ANSWER.unpack(_read_exactly(self.process.stdout, _ANSWER.size))
            answer = _read_exactly(self.process.stdout, length)
        except (OSError, EOFError, ValueError) as exc:
            code = self.process.poll()
            raise PreprocessError(f"preprocess {self.target}: its process ended"
                                  f"{f' (exit {code})' if code is not None else ''}; its "
                                  f"errors are in the executor's log") from exc
        if status == 0:
            return answer
        (offset,) = _OFFSET.unpack_from(answer)
        raise PreprocessError(f"preprocess {self.target}: {answer[_OFFSET.size:].decode()}",
                              offset)

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main(argv: list[str]) -> int:
    """The process: answer each block until the executor closes the pipe."""
    target, fmt = argv
    source = sys.stdin.buffer
    # The answers' own descriptor: what the function prints goes to stderr (the executor's
    # log), never into the answers.
    sink = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        function = resolve(target)
    except Exception as exc:  # noqa: BLE001 - said to the executor, block after block
        function, failure = None, f"cannot import {target}: {type(exc).__name__}: {exc}"
    while True:
        try:
            length, start = _REQUEST.unpack(_read_exactly(source, _REQUEST.size))
            block = _read_exactly(source, length)
        except EOFError:
            return 0
        try:
            if function is None:
                raise PreprocessError(failure, start)
            answer, status = transform(fmt, function, block, start), 0
        except PreprocessError as exc:
            answer = _OFFSET.pack(exc.offset or start) + str(exc).encode()
            status = 1
        sink.write(_ANSWER.pack(status, len(answer)))
        sink.write(answer)
        sink.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
