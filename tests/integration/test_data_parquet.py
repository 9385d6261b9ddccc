"""``format: parquet`` end to end: real etcd, executors and trainers; rows checked one by one.

The trainers (``data_trainer.py``) write every byte they read; the rows are read back from the
Arrow IPC streams they received (``tests/support/data.received_rows``).
"""

from __future__ import annotations

import collections
import os
import random
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq

from primus.data.parquet import _layout
from primus.data.reader import arrow_batches
from tests.support.apps import assert_nothing_left, status_json
from tests.support.data import (
    make_parquet_files,
    received_rows,
    submit_data_job,
    wait_for_end,
)
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


def test_every_parquet_row_reaches_the_trainers_once_with_only_the_columns_asked(
        primus_env, tmp_path):
    numbers = make_parquet_files(tmp_path / "data")
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.parquet}}]
    format: parquet
    columns: [text, n]
    chunk_size: 16Ki""")

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_rows(records)) == numbers
    assert sorted(received_rows(records, "text")) == sorted(f"row {n}" for n in numbers)
    for out in records.glob("*.out"):
        with open(out, "rb") as stream:
            assert {tuple(b.schema.names) for b in arrow_batches(stream)} == {("text", "n")}
    stats = status["data"]["train"]
    assert (stats["done"], stats["failed"], stats["records"]) == (stats["tasks"], 0,
                                                                   len(numbers))
    assert stats["tasks"] > 4, "16 KiB chunks split the files"
    assert_nothing_left(app_id)


def test_parquet_rows_survive_executors_killed_at_random_points(primus_env, tmp_path):
    numbers = make_parquet_files(tmp_path / "data", files=6, rows=6000, row_group_size=500)
    app_id, records = submit_data_job(
        primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.parquet}}]
    format: parquet
    chunk_size: 16Ki
    checkpoint_records: 200""",
        roles="restart_policy: on_failure\n    max_failures: 10",
        trainer_args="--delay 0.1 --read-size 4096")
    wait_until(lambda: status_json(primus_env, app_id)["data"].get("train", {}).get("done", 0)
               >= 2, 60, "some tasks done")
    rng = random.Random(7)
    kills = 0
    while kills < 3:
        status = status_json(primus_env, app_id)
        if status["status"]["state"] in ("SUCCEEDED", "FAILED", "KILLED"):
            break
        running = [e for e in status["executors"]["worker"]
                   if e["live"] and e["live"]["state"] == "RUNNING"]
        if not running:
            continue
        try:
            os.kill(rng.choice(running)["plan"]["process"]["pid"], signal.SIGKILL)
        except ProcessLookupError:
            continue  # it ended between the status read and the kill: choose again
        kills += 1
        time.sleep(rng.uniform(0.5, 1.5))  # a random point of the run, not a synchronisation
    assert kills == 3, "the run ended before three executors could be killed; slow it down"

    status = wait_for_end(primus_env, app_id, timeout=180)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    got = collections.Counter(received_rows(records))
    missing = [n for n in numbers if got[n] == 0]
    assert missing == [], f"{len(missing)} rows never reached a trainer"
    assert set(got) == set(numbers)
    per_task = len(numbers) // status["data"]["train"]["tasks"] * 2
    assert sum(got.values()) - len(numbers) <= kills * (200 + per_task), \
        "redelivery is bounded by what came after the last checkpoint"
    stats = status["data"]["train"]
    assert (stats["done"], stats["failed"]) == (stats["tasks"], 0), "each task done once"
    assert_nothing_left(app_id)


def test_a_damaged_row_group_fails_its_task_naming_the_file_and_the_row_group(
        primus_env, tmp_path):
    make_parquet_files(tmp_path / "data", files=2, rows=3000, row_group_size=1000)
    bad = tmp_path / "data" / "part-01.parquet"
    with open(bad, "rb") as f:
        damaged = _layout(pq.ParquetFile(f).metadata)[2]
    content = bytearray(bad.read_bytes())
    content[damaged.start:damaged.end] = bytes(damaged.end - damaged.start)
    bad.write_bytes(bytes(content))
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.parquet}}]
    format: parquet
    max_task_attempts: 2""", workers=1)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "FAILED"
    diagnosis = status["status"]["diagnosis"]
    assert diagnosis.startswith("data stream train: 1 of 2 tasks failed (50.0%, "
                                f"task_failed_percent 0); first: 0001-00000001: {bad}: row "
                                "group 2, rows from 0: "), diagnosis
    assert sorted(received_rows(records)) == list(range(5000)), \
        "the good file and the rows before the damage were delivered"
    assert_nothing_left(app_id)


def test_a_parquet_stream_that_names_columns_of_a_format_without_them_is_refused(
        primus_env, tmp_path):
    make_parquet_files(tmp_path / "data", files=1, rows=10)
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: data
roles: [{{name: worker, num: 1, command: "true"}}]
data:
  - name: train
    roles: [worker]
    sources: [{{path: {tmp_path}/data/*.parquet}}]
    format: tfrecord
    columns: [n]
""")

    result = run_primus(primus_env, "submit", str(job))

    assert result.returncode == 2
    assert "data[0].columns: got 'n'; format tfrecord has no columns" in result.stderr
    assert not (Path(primus_env["PRIMUS_HOME"]) / "apps").exists(), "nothing may be launched"
