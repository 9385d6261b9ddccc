"""``delivery: shm`` end to end: records reach trainers through the shared-memory ring and the
reader library (real etcd, executors and trainers); every record counted."""

from __future__ import annotations

import json
import sys

from primus.data.formats import encode_tfrecord, write_tfrecords
from tests.support.apps import assert_nothing_left, write_job
from tests.support.data import (
    make_parquet_files,
    make_text_files,
    received_lines,
    received_rows,
    submit_data_job,
    wait_for_end,
)
from tests.support.formats import split_tfrecords, tfrecord_payloads
from tests.support.primus import run_primus


def test_every_record_reaches_the_trainers_exactly_once_through_shared_memory(primus_env,
                                                                               tmp_path):
    source = make_text_files(tmp_path / "data")
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki
    delivery: shm""", trainer_args="--via-reader")

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_lines(records)) == sorted(source)
    assert status["data"]["train"]["records"] == len(source)
    assert len(list(records.glob("*.eof"))) == 3, "every trainer saw the end of its stream"
    assert_nothing_left(app_id)


def test_tfrecords_and_parquet_batches_through_shared_memory(primus_env, tmp_path):
    payloads = tfrecord_payloads(400, seed=3)
    (tmp_path / "tf").mkdir()
    write_tfrecords(tmp_path / "tf" / "a.tfrecord", payloads[:250])
    write_tfrecords(tmp_path / "tf" / "b.tfrecord", payloads[250:])
    tf_app, tf_records = submit_data_job(primus_env, tmp_path / "tfrun", f"""
    sources: [{{path: {tmp_path}/tf/*.tfrecord}}]
    format: tfrecord
    chunk_size: 8Ki
    delivery: shm""", trainer_args="--via-reader", workers=2)
    rows = make_parquet_files(tmp_path / "pq", files=3, rows=4000, row_group_size=500)
    pq_app, pq_records = submit_data_job(primus_env, tmp_path / "pqrun", f"""
    sources: [{{path: {tmp_path}/pq/*.parquet}}]
    format: parquet
    columns: [n]
    delivery: shm""", trainer_args="--via-reader", workers=2)

    assert wait_for_end(primus_env, tf_app)["status"]["state"] == "SUCCEEDED"
    assert wait_for_end(primus_env, pq_app)["status"]["state"] == "SUCCEEDED"
    got = [r for out in sorted(tf_records.glob("*.out"))
           for r in split_tfrecords(out.read_bytes())]
    assert sorted(got) == sorted(encode_tfrecord(p) for p in payloads)
    assert sorted(received_rows(pq_records)) == rows


def test_a_trainer_that_stops_reading_early_ends_its_feeding(primus_env, tmp_path):
    make_text_files(tmp_path / "data", files=2, lines=3000)
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki
    delivery: shm""", trainer_args="--via-reader --read-bytes 20000", workers=1)

    status = wait_for_end(primus_env, app_id, timeout=60)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert not list(records.glob("*.eof")), "it stopped before the end"
    assert_nothing_left(app_id)


TORCH_TRAINER = """
import json, os, sys
from torch.utils.data import DataLoader
from primus.data.reader import torch_dataset

if __name__ == "__main__":  # spawned workers import this module: they run none of this
    method = sys.argv[2].split(",")[int(os.environ["PRIMUS_INDEX"])]
    out = os.path.join(sys.argv[1], f"{method}.json")
    loader = DataLoader(torch_dataset(), batch_size=None, num_workers=2,
                        multiprocessing_context=method)
    seen = [line.decode() for line in loader]
    with open(out, "w") as f:
        json.dump(seen, f)
"""

START_METHODS = ("fork", "spawn", "forkserver")


def test_a_dataloaders_workers_split_the_stream_without_duplicates_however_they_start(
        primus_env, tmp_path):
    """Three trainers, each with a DataLoader of two workers started its own way: forked
    workers inherit the ring; spawned ones and a forkserver's are passed its descriptors by
    multiprocessing (Python 3.14's default on Linux is forkserver)."""
    source = make_text_files(tmp_path / "data", files=4, lines=2000)
    trainer = tmp_path / "torch_trainer.py"
    trainer.write_text(TORCH_TRAINER)
    (tmp_path / "out").mkdir()
    job = write_job(tmp_path / "job.yaml", f"""
name: torch-shm
roles:
  - name: worker
    num: {len(START_METHODS)}
    command: {json.dumps([sys.executable, str(trainer), str(tmp_path / "out"),
                          ",".join(START_METHODS)])}
data:
  - name: train
    roles: [worker]
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki
    delivery: shm
""")
    submitted = run_primus(primus_env, "submit", str(job))
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip()

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    outputs = {out.stem: json.loads(out.read_text()) for out in (tmp_path / "out").glob("*.json")}
    assert sorted(outputs) == sorted(START_METHODS)
    assert all(outputs.values()), f"every trainer read: {[len(v) for v in outputs.values()]}"
    seen = [line.encode() for lines in outputs.values() for line in lines]
    assert sorted(seen) == sorted(source), "two DataLoader workers each: each record once"
