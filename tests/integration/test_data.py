"""Data injection end to end: real etcd, real executors and trainers, faults injected for real.

Trainers (``data_trainer.py``) write every byte they read, as soon as they read it, so the test
can compare what reached the trainers with the source files.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from primus.data.formats import encode_tfrecord, write_tfrecords
from primus.state.records import (
    DataTask,
    StreamScan,
    StreamStats,
    TaskDone,
    TaskOwner,
    TaskProgress,
    decode,
)
from primus.store.embedded import find_etcd_binary
from tests.support.apps import assert_nothing_left, gone, status_json, write_job
from tests.support.data import (
    TRAINER,
    kill_executors_at_random_points,
    make_text_files,
    received_lines,
    submit_data_job,
    wait_for_end,
)
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


def test_every_record_reaches_the_trainers_exactly_once(primus_env, tmp_path):
    source = make_text_files(tmp_path / "data")
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki""")

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_lines(records)) == sorted(source)
    stats = status["data"]["train"]
    assert (stats["done"], stats["failed"], stats["records"], stats["exhausted"]) == (
        stats["tasks"], 0, len(source), True)
    assert stats["tasks"] > 6, "16 KiB chunks split the files"
    assert len(list(records.glob("*.eof"))) == 3, "every trainer saw the end of its input"
    assert_nothing_left(app_id)


@pytest.mark.parametrize("delivery", ["stdin", "shm"])
def test_records_survive_executors_killed_at_random_points(primus_env, tmp_path, delivery):
    source = make_text_files(tmp_path / "data", files=6, lines=1500)
    app_id, records = submit_data_job(
        primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki
    checkpoint_records: 50
    delivery: {delivery}""",
        roles="restart_policy: on_failure\n    max_failures: 10",
        trainer_args="--delay 0.15 --read-size 4096" +
        (" --via-reader" if delivery == "shm" else ""))
    kills = kill_executors_at_random_points(primus_env, app_id, seed=5)
    assert kills == 3, "the run ended before three executors could be killed; slow it down"

    status = wait_for_end(primus_env, app_id, timeout=180)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    got = collections.Counter(received_lines(records))
    missing = [line for line in source if got[line] == 0]
    assert missing == [], f"{len(missing)} records never reached a trainer"
    duplicates = sum(got.values()) - len(source)
    per_task = max(len(source) // status["data"]["train"]["tasks"] * 2, 1)
    assert duplicates <= kills * (50 + per_task), \
        "redelivery is bounded by what came after the last checkpoint"
    stats = status["data"]["train"]
    assert (stats["done"], stats["failed"]) == (stats["tasks"], 0), "each task done once"
    assert_nothing_left(app_id)


def test_am_killed_mid_stream_loses_and_repeats_nothing(primus_env, tmp_path):
    source = make_text_files(tmp_path / "data")
    app_id, records = submit_data_job(
        primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki""", trainer_args="--delay 0.15 --read-size 4096")
    job_am = wait_until(lambda: (s := status_json(primus_env, app_id))["am"] and
                        s["data"].get("train", {}).get("done", 0) >= 2 and s["am"],
                        60, "some tasks done")
    os.kill(job_am["pid"], signal.SIGKILL)
    wait_until(lambda: gone(job_am["pid"]), 10, "the AM to die")
    assert run_primus(primus_env, "recover", app_id).returncode == 0

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_lines(records)) == sorted(source), "no task reset or repeated"
    assert status["data"]["train"]["done"] == status["data"]["train"]["tasks"]
    assert_nothing_left(app_id)


def test_epochs_deliver_every_record_once_per_epoch_in_a_seeded_order(primus_env, tmp_path):
    source = make_text_files(tmp_path / "data", files=4, lines=300)
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    epochs: 2
    shuffle: true
    seed: 11""", workers=2)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert collections.Counter(received_lines(records)) == collections.Counter(source * 2)
    assert status["data"]["train"]["tasks"] == 8


def test_tfrecords_through_a_fifo(primus_env, tmp_path):
    (tmp_path / "data").mkdir()
    payloads = [f"record {i} ".encode() * (i % 7 + 1) for i in range(3000)]
    write_tfrecords(tmp_path / "data" / "a.tfrecord", payloads[:1500])
    write_tfrecords(tmp_path / "data" / "b.tfrecord", payloads[1500:])
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.tfrecord}}]
    format: tfrecord
    chunk_size: 8Ki
    delivery: fifo""", workers=2)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    framed = b"".join(out.read_bytes() for out in records.glob("*.out"))
    assert len(framed) == sum(len(encode_tfrecord(p)) for p in payloads)
    assert status["data"]["train"]["records"] == 3000


def test_corrupt_tfrecord_fails_its_task_and_the_application(primus_env, tmp_path):
    (tmp_path / "data").mkdir()
    write_tfrecords(tmp_path / "data" / "good.tfrecord", [b"fine"] * 100)
    bad = tmp_path / "data" / "bad.tfrecord"
    write_tfrecords(bad, [b"payload %d" % i for i in range(100)])
    damaged = bytearray(bad.read_bytes())
    damaged[500] ^= 0xFF
    bad.write_bytes(bytes(damaged))
    app_id, _ = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.tfrecord}}]
    format: tfrecord
    max_task_attempts: 2""", workers=1)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "FAILED"
    assert status["status"]["diagnosis"].startswith(
        "data stream train: 1 of 2 tasks failed (50.0%, task_failed_percent 0); first: "
        f"0001-00000000: {bad}: "), status["status"]["diagnosis"]
    assert "checksum mismatch at byte" in status["status"]["diagnosis"]
    assert status["data"]["train"]["failed"] == 1
    assert_nothing_left(app_id)


def test_partition_without_its_marker_fails_naming_it(primus_env, tmp_path):
    for day in ("20261101", "20261102"):
        (tmp_path / "logs" / day).mkdir(parents=True)
        (tmp_path / "logs" / day / "part-0").write_text("a\nb\n")
    (tmp_path / "logs" / "20261101" / "_SUCCESS").touch()
    app_id, _ = submit_data_job(primus_env, tmp_path, f"""
    sources:
      - path: "{tmp_path}/logs/{{{{YYYY}}}}{{{{MM}}}}{{{{DD}}}}/part-*"
        start: 2026-11-01
        end: 2026-11-02
        success_marker: _SUCCESS
        marker_timeout: 2s""", workers=1)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "FAILED"
    diagnosis = status["status"]["diagnosis"]
    assert "20261102" in diagnosis and "_SUCCESS" in diagnosis, diagnosis
    assert_nothing_left(app_id)


def test_pattern_matching_nothing_is_refused_at_submit(primus_env, tmp_path):
    job = write_job(tmp_path / "job.yaml", f"""
name: data
roles: [{{name: worker, command: cat}}]
data: [{{name: train, roles: [worker], sources: [{{path: {tmp_path}/none/*.txt}}]}}]
""")
    result = run_primus(primus_env, "submit", str(job))
    assert result.returncode == 2
    assert "data[0].sources[0].path" in result.stderr and "matches no file" in result.stderr
    assert json.loads(run_primus(primus_env, "list", "-o", "json").stdout) == []


@pytest.mark.parametrize("read_bytes", [0, 4096])
def test_trainer_closing_its_input_early_is_handled(primus_env, tmp_path, read_bytes):
    make_text_files(tmp_path / "data", files=2, lines=2000)
    app_id, _ = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]""", trainer_args=f"--read-bytes {read_bytes}",
        workers=1)

    status = wait_for_end(primus_env, app_id, timeout=60)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_nothing_left(app_id)


def test_submit_wait_shows_the_streams_progress(primus_env, tmp_path):
    make_text_files(tmp_path / "data", files=2, lines=300)
    job = write_job(tmp_path / "job.yaml", f"""
name: data
roles: [{{name: worker, num: 2, command: cat}}]
data: [{{name: train, roles: [worker], sources: [{{path: {tmp_path}/data/*.txt}}]}}]
""")
    result = run_primus(primus_env, "submit", str(job), "--wait")

    assert result.returncode == 0, result.stderr
    bar = next(line for line in result.stderr.splitlines() if line.startswith("data train "))
    assert "━" in bar and "2/2 tasks, 600 records" in bar, bar
    state = next(line for line in result.stderr.splitlines() if line.startswith("data-"))
    assert "SUCCEEDED  100%" in state, state


def test_every_data_value_parses_when_read_with_etcdctl(primus_env, etcd_server, tmp_path):
    make_text_files(tmp_path / "data", files=3, lines=200)
    app_id, _ = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]""", workers=2)
    status = wait_for_end(primus_env, app_id)
    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    root = f"{primus_env['PRIMUS_PREFIX']}/apps/{app_id}/data/train/"
    listing = subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", etcd_server.client_url, "get",
         "--prefix", root, "-w", "json"],
        capture_output=True, text=True, check=True, env={**os.environ, "ETCDCTL_API": "3"})

    kvs = {base64.b64decode(kv["key"]).decode()[len(root):]: base64.b64decode(kv.get("value", ""))
           for kv in json.loads(listing.stdout)["kvs"]}
    models = {"tasks": DataTask, "progress": TaskProgress, "owner": TaskOwner, "done": TaskDone,
              "failed": TaskDone, "scan": StreamScan, "stats": StreamStats}
    for key, value in kvs.items():
        kind = key.split("/")[0]
        if kind in ("pending", "end"):
            assert value == b"", f"{key} is a marker without a value"
        else:
            decode(models[kind], value)
    tasks = {key.split("/")[1] for key in kvs if key.startswith("tasks/")}
    assert {key.split("/")[1] for key in kvs if key.startswith("done/")} == tasks
    assert {"scan", "stats", "end"} <= kvs.keys()
    assert decode(StreamStats, kvs["stats"]).records == 600


def test_two_streams_go_to_their_own_roles(primus_env, tmp_path):
    train = make_text_files(tmp_path / "train", files=3, lines=400)
    (tmp_path / "eval").mkdir()
    payloads = [b"eval %d" % i for i in range(500)]
    write_tfrecords(tmp_path / "eval" / "e.tfrecord", payloads)
    records = tmp_path / "records"
    records.mkdir()
    command = json.dumps([sys.executable, str(TRAINER), str(records)])
    job = write_job(tmp_path / "job.yaml", f"""
name: data
roles:
  - {{name: worker, num: 2, command: {command}}}
  - {{name: evaluator, num: 1, command: {command}}}
data:
  - {{name: train, roles: [worker], sources: [{{path: {tmp_path}/train/*.txt}}],
      chunk_size: 8Ki}}
  - {{name: eval, roles: [evaluator], format: tfrecord,
      sources: [{{path: {tmp_path}/eval/*.tfrecord}}]}}
""")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    worker_lines = [line for out in sorted(records.glob("worker-*.out"))
                    for line in out.read_bytes().splitlines(keepends=True)]
    assert sorted(worker_lines) == sorted(train)
    assert (records / "evaluator-0.1.out").read_bytes() == b"".join(
        encode_tfrecord(p) for p in payloads)
    assert status["data"]["train"]["records"] == len(train)
    assert status["data"]["eval"]["records"] == len(payloads)


def test_the_data_injection_example_feeds_every_example_to_its_workers_once_per_epoch(
        primus_env):
    example = Path(__file__).parents[2] / "examples" / "data-injection"
    lines = [line for path in sorted((example / "data").glob("day-*.txt"))
             for line in path.read_bytes().splitlines()]

    result = run_primus(primus_env, "submit", str(example / "job.yaml"), "--wait")

    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    status = status_json(primus_env, app_id)
    stats = status["data"]["train"]
    assert (stats["records"], stats["exhausted"], stats["failed"]) == (2 * len(lines), True, 0)
    logs = run_primus(primus_env, "logs", app_id).stdout
    trained = [int(line.split(" trained on ")[1].split()[0]) for line in logs.splitlines()
               if " trained on " in line]
    assert len(trained) == 3 and sum(trained) == 2 * len(lines), logs
    assert_nothing_left(app_id)


def test_sources_read_through_an_fsspec_url_reach_the_trainers_exactly_once(primus_env, tmp_path):
    # A zip archive read through fsspec's zip:// filesystem, chained to the local file: the
    # paths of its tasks must carry the chain, and each reader open it anew.
    source = make_text_files(tmp_path / "data", files=4, lines=3000)
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as packed:
        for path in sorted((tmp_path / "data").glob("*.txt")):
            packed.write(path, f"day/{path.name}")
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: "zip://day/*.txt::{archive}"}}]
    chunk_size: 32Ki""", workers=2)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_lines(records)) == sorted(source)
    stats = status["data"]["train"]
    assert (stats["records"], stats["failed"]) == (len(source), 0)
    assert_nothing_left(app_id)


PREP = """
def shout(line):
    if line.endswith(b"7 "):
        return None
    return line.upper()


def picky(line):
    if line.startswith(b"file1-line00042"):
        raise ValueError("cannot decode " + line[:15].decode())
    return line
"""


def test_a_preprocess_step_transforms_and_drops_records_before_delivery(primus_env, tmp_path):
    source = make_text_files(tmp_path / "data", files=3, lines=500)
    (tmp_path / "prep.py").write_text(PREP)
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 8Ki
    preprocess: prep:shout""", roles=f"env: {{PYTHONPATH: {tmp_path}}}", workers=2)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    expected = [line.upper() for line in source if not line.endswith(b"7 \n")]
    assert sorted(received_lines(records)) == sorted(expected)
    assert status["data"]["train"]["records"] == len(source), "records count as read"


def test_a_record_the_preprocess_step_fails_on_fails_its_task_naming_it(primus_env, tmp_path):
    make_text_files(tmp_path / "data", files=2, lines=200)
    (tmp_path / "prep.py").write_text(PREP)
    app_id, _ = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    max_task_attempts: 1
    preprocess: prep:picky""", roles=f"env: {{PYTHONPATH: {tmp_path}}}", workers=1)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "FAILED", status["status"]
    offset = (tmp_path / "data" / "part-01.txt").read_bytes().index(b"file1-line00042")
    diagnosis = status["status"]["diagnosis"]
    assert "preprocess prep:picky: ValueError: cannot decode file1-line00042" in diagnosis
    assert f"part-01.txt at byte {offset}" in diagnosis, diagnosis


@pytest.mark.parametrize(("on_unread", "state"), [("warn", "SUCCEEDED"), ("fail", "FAILED")])
def test_trainers_that_end_without_reading_their_stream_do_not_end_it_silently(
        primus_env, tmp_path, on_unread, state):
    make_text_files(tmp_path / "in", files=2, lines=20_000)  # each more than a pipe holds
    job = write_job(tmp_path / "job.yaml", f"""
name: unread
roles:
  - {{name: worker, num: 1, command: "head -n 1"}}
data:
  - {{name: train, roles: [worker], sources: [{{path: {tmp_path}/in/*.txt}}],
      on_unread: {on_unread}}}
""")
    app_id = run_primus(primus_env, "submit", str(job)).stdout.strip()

    status = wait_for_end(primus_env, app_id)

    # Its one trainer read a line and exited 0: it had claimed a task, so both were listed.
    said = "data stream train: 0 of 2 tasks read when its trainers ended"
    assert status["status"]["state"] == state, status["status"]
    assert status["status"]["diagnosis"].startswith(said), status["status"]
    assert any(said in event["message"] for event in status["events"])
    shown = run_primus(primus_env, "status", app_id)
    assert said in shown.stdout, shown.stdout
