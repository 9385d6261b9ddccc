"""The ``preprocess:`` step (:mod:`primus.data.preprocess`): records transformed and dropped,
framed again, failures naming the record's byte; a real process of its own."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from primus.data.formats import encode_tfrecord
from primus.data.preprocess import PreprocessError, Preprocessor, transform
from tests.support.formats import split_tfrecords


def shout(record: bytes) -> bytes | None:
    return None if record.endswith(b"3") else record.upper()


def test_text_records_are_transformed_or_dropped_and_get_their_newline_back():
    block = b"a1\nb2\nc3\nd4\n"

    assert transform("text", shout, block, 0) == b"A1\nB2\nD4\n"


def test_tfrecords_are_framed_again():
    block = b"".join(encode_tfrecord(r) for r in (b"x1", b"y3", b"z5"))

    out = transform("tfrecord", shout, block, 0)

    assert split_tfrecords(out) == [encode_tfrecord(b"X1"), encode_tfrecord(b"Z5")]


def test_a_parquet_batch_is_given_and_returned_as_arrow():
    batch = pa.record_batch({"n": [1, 2, 3]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)

    out = transform("parquet", lambda b: b.filter(pc.greater(b["n"], 1)),
                    sink.getvalue().to_pybytes(), 0)

    batches = list(pa.ipc.open_stream(pa.py_buffer(out)))
    assert [b.column("n").to_pylist() for b in batches] == [[2, 3]]


def test_a_failure_names_the_error_and_the_records_byte_in_the_file():
    def picky(record: bytes) -> bytes:
        if record == b"bad":
            raise ValueError("cannot decode")
        return record

    with pytest.raises(PreprocessError, match="ValueError: cannot decode") as failed:
        transform("text", picky, b"good\nbad\n", 1000)

    assert failed.value.offset == 1005


@pytest.fixture
def module_dir(tmp_path: Path) -> Path:
    (tmp_path / "prep.py").write_text(
        "def up(record):\n"
        "    print('noise on stdout')  # must not reach the answers\n"
        "    if record == b'boom':\n"
        "        raise RuntimeError('no')\n"
        "    return record.upper()\n")
    return tmp_path


def test_the_step_runs_in_a_process_of_its_own_whose_prints_do_not_corrupt_it(module_dir):
    step = Preprocessor("prep:up", "text", {**os.environ, "PYTHONPATH": str(module_dir)},
                        str(module_dir))
    try:
        assert step.apply(b"a\nb\n", 0) == b"A\nB\n"
        with pytest.raises(PreprocessError, match=r"prep:up: RuntimeError: no \(prep.py:4\)"):
            step.apply(b"ok\nboom\n", 10)
        assert step.apply(b"c\n", 20) == b"C\n", "it goes on after a failure"
        assert step.process.pid != os.getpid()
    finally:
        step.close()


def test_a_function_that_does_not_import_is_said_for_every_block(module_dir):
    step = Preprocessor("nowhere:up", "text", dict(os.environ), str(module_dir))
    try:
        with pytest.raises(PreprocessError, match="cannot import nowhere:up: "
                                                  "ModuleNotFoundError"):
            step.apply(b"a\n", 0)
    finally:
        step.close()
