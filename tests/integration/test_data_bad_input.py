"""Bad input for data streams, end to end: a truncated TFRecord and files that cannot be read
each fail their task, naming the file, and the failure counts against the stream's policy;
never a hang, never a silent skip.

A pattern matching nothing, a corrupt TFRecord and a partition without its success marker are
covered in ``test_data.py``. The tests run as root, for whom no permission bit stops a read,
so an unreadable file is one that is gone, or is no longer a file, when its task is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from primus.data.formats import encode_tfrecord, write_tfrecords
from tests.support.apps import assert_nothing_left
from tests.support.data import make_text_files, stream_keys, submit_data_job, wait_for_end
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


def the_failed_task(env: dict[str, str], app_id: str, status: dict) -> dict:
    """The stream's only failed task, once the diagnosis was checked to name it and its error
    (what a user reads first)."""
    [(task, failed)] = stream_keys(env, app_id, "failed").items()
    total = status["data"]["train"]["tasks"]
    assert status["status"]["diagnosis"] == (
        f"data stream train: 1 of {total} tasks failed ({100 / total:.1f}%, "
        f"task_failed_percent 0); first: {task}: {failed['error']}"), status["status"]
    return failed


def write_truncated_tfrecord(path: Path, cut: int) -> int:
    """100 records whose last one keeps only its first ``cut`` bytes; where that one starts."""
    framed = [encode_tfrecord(b"payload %03d " % i * 8) for i in range(100)]
    last = sum(len(record) for record in framed[:-1])
    path.write_bytes(b"".join(framed)[:last + cut])
    return last


@pytest.mark.parametrize(("cut", "chunk_size"), [(5, "null"), (40, "null"), (40, "1Ki")],
                         ids=["in-the-header", "in-the-data", "in-the-data-of-the-last-range"])
def test_truncated_tfrecord_fails_its_task_after_delivering_the_records_before_the_cut(
        primus_env, tmp_path, cut, chunk_size):
    (tmp_path / "data").mkdir()
    write_tfrecords(tmp_path / "data" / "a.tfrecord", [b"fine"] * 100)
    truncated = tmp_path / "data" / "b.tfrecord"
    last = write_truncated_tfrecord(truncated, cut)
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.tfrecord}}]
    format: tfrecord
    chunk_size: {chunk_size}
    max_task_attempts: 2""", workers=1)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "FAILED"
    stats = status["data"]["train"]
    assert (stats["done"], stats["failed"]) == (stats["tasks"] - 1, 1)
    assert stats["tasks"] == (2 if chunk_size == "null" else 13)
    failed = the_failed_task(primus_env, app_id, status)
    assert failed["error"].startswith(f"{truncated}: truncated record at byte {last}"), failed
    assert failed["attempts"] == 2, "both attempts count against max_task_attempts"
    assert stats["records"] + failed["records"] == 100 + 99, "every whole record counted once"
    delivered = b"".join(out.read_bytes() for out in sorted(records.glob("*.out")))
    assert delivered == (tmp_path / "data" / "a.tfrecord").read_bytes() + \
        truncated.read_bytes()[:last], "every whole record once, nothing of the cut one"
    assert_nothing_left(app_id)


def test_failed_task_within_the_failed_percent_lets_the_stream_succeed(primus_env, tmp_path):
    (tmp_path / "data").mkdir()
    write_tfrecords(tmp_path / "data" / "a.tfrecord", [b"fine"] * 100)
    write_truncated_tfrecord(tmp_path / "data" / "b.tfrecord", 40)
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.tfrecord}}]
    format: tfrecord
    max_task_attempts: 2
    task_failed_percent: 50
    task_success_percent: 50""", workers=2)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    stats = status["data"]["train"]
    assert (stats["tasks"], stats["done"], stats["failed"], stats["records"],
            stats["exhausted"]) == (2, 1, 1, 100, True)
    assert len(list(records.glob("*.eof"))) == 2, "every trainer saw the end of its input"
    assert_nothing_left(app_id)


# Ways for z.txt to become unreadable; each returns what the task's error must say why.

def _remove(path: Path) -> str:
    path.unlink()
    return "No such file or directory"


def _make_directory(path: Path) -> str:
    path.unlink()
    path.mkdir()
    return "Is a directory"


def _dangle(path: Path) -> str:
    path.unlink()
    path.symlink_to(path.with_name("gone"))
    return "No such file or directory"


def _make_fifo(path: Path) -> str:
    path.unlink()
    os.mkfifo(path)
    return "not a regular file"


def submit_then_change(env: dict[str, str], tmp_path: Path,
                       change: Callable[[Path], str]) -> tuple[str, Path, Path, str]:
    """Submit a stream of a 3 MiB file and ``z.txt`` to one trainer that reads nothing until
    ``GO``; once both tasks are written, ``change`` z.txt, then let the trainer read.

    The first task fills the pipe (and the block the feeder holds), so z.txt is opened only
    after the change. Returns the application, the records directory, z.txt and what
    ``change`` returned.
    """
    make_text_files(tmp_path / "data", files=1, lines=80_000)
    changed = tmp_path / "data" / "z.txt"
    changed.write_bytes(b"".join(b"line %04d\n" % i for i in range(1000)))
    app_id, records = submit_data_job(env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    max_task_attempts: 2""", trainer_args="--wait-go", workers=1)
    # Looked for in etcd, not in the stream's stats, which the AM may publish late.
    wait_until(lambda: len(stream_keys(env, app_id, "tasks")) == 2, 30,
               "the tasks to be written")
    why = change(changed)
    (records / "GO").touch()
    return app_id, records, changed, why


def wait_for_end_or_kill(env: dict[str, str], app_id: str) -> dict:
    """:func:`wait_for_end`, with a time limit a healthy run stays far below; a stream that
    hangs is killed rather than left running after the test."""
    try:
        return wait_for_end(env, app_id, timeout=20)
    except BaseException:
        run_primus(env, "kill", app_id)
        raise


@pytest.mark.parametrize("change", [
    _remove, _make_directory, _dangle, _make_fifo], ids=[
    "removed", "replaced-by-a-directory", "replaced-by-a-dangling-link",
        "replaced-by-a-fifo"])
def test_file_unreadable_when_its_task_is_read_fails_the_task_naming_it(primus_env, tmp_path,
                                                                        change):
    app_id, records, unreadable, why = submit_then_change(primus_env, tmp_path, change)

    status = wait_for_end_or_kill(primus_env, app_id)

    assert status["status"]["state"] == "FAILED"
    failed = the_failed_task(primus_env, app_id, status)
    assert failed["error"].startswith(f"cannot read {unreadable}: ") and why in failed["error"], \
        failed
    assert failed["attempts"] == 2, "both attempts count against max_task_attempts"
    delivered = b"".join(out.read_bytes() for out in records.glob("*.out"))
    assert delivered == (tmp_path / "data" / "part-00.txt").read_bytes()
    assert_nothing_left(app_id)


def test_file_shorter_than_when_it_was_listed_fails_its_task_naming_it(primus_env, tmp_path):
    def shorten(path: Path) -> str:
        path.write_bytes(path.read_bytes()[:5000])  # 500 of its 1000 lines
        return ""

    app_id, _, shortened, _ = submit_then_change(primus_env, tmp_path, shorten)

    status = wait_for_end_or_kill(primus_env, app_id)

    assert status["status"]["state"] == "FAILED", status["data"]
    (failed,) = stream_keys(primus_env, app_id, "failed").values()
    assert str(shortened) in failed["error"], failed
    assert_nothing_left(app_id)


def test_dangling_link_matched_by_the_pattern_fails_its_task_naming_it(primus_env, tmp_path):
    make_text_files(tmp_path / "data", files=1, lines=100)
    link = tmp_path / "data" / "z.txt"
    link.symlink_to(tmp_path / "gone")
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    max_task_attempts: 2""", workers=1)

    status = wait_for_end_or_kill(primus_env, app_id)

    assert status["status"]["state"] == "FAILED"
    failed = the_failed_task(primus_env, app_id, status)
    assert failed["error"] == f"cannot read {link}: No such file or directory", failed
    delivered = b"".join(out.read_bytes() for out in records.glob("*.out"))
    assert delivered == (tmp_path / "data" / "part-00.txt").read_bytes()
    assert_nothing_left(app_id)
