"""``format: webdataset`` end to end: tar shards through real executors to trainers that read
samples with ``primus.data.reader``, through a pipe and through shared memory, as records and
as lists; a shard a task cuts into byte ranges; what a bad shard does."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support.apps import assert_nothing_left, write_job
from tests.support.data import stream_keys, wait_for_end
from tests.support.formats import webdataset_file
from tests.support.primus import run_primus

TRAINER = """
import hashlib, json, os, sys
from primus.data.reader import record_batches, records

reading = records() if sys.argv[2] == "records" else (
    sample for batch in record_batches() for sample in batch)
out = os.path.join(sys.argv[1], os.environ["PRIMUS_INDEX"] + ".jsonl")
with open(out, "w") as f:
    for sample in reading:
        f.write(json.dumps({k: v if k == "__key__" else hashlib.sha1(v).hexdigest()
                            for k, v in sample.items()}) + "\\n")
"""


def digest(sample: dict) -> dict:
    return {k: v if k == "__key__" else hashlib.sha1(v).hexdigest() for k, v in sample.items()}


def submit(env: dict[str, str], tmp_path: Path, stream: str, read_with: str = "records",
           workers: int = 2) -> tuple[str, Path]:
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    job = write_job(tmp_path / "job.yaml", f"""
name: shards
policy: {{heartbeat_ttl: 3s, stop_grace: 1s}}
roles:
  - name: worker
    num: {workers}
    command: {json.dumps([sys.executable, str(trainer), str(out), read_with])}
data:
  - name: train
    roles: [worker]
    format: webdataset
    {stream}
""")
    submitted = run_primus(env, "submit", str(job))
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip(), out


@pytest.mark.parametrize("delivery,read_with", [("stdin", "records"), ("shm", "record_batches")])
def test_every_sample_of_every_shard_arrives_once_whole(primus_env, tmp_path, delivery,
                                                         read_with):
    every = []
    for index in range(3):
        shard = tmp_path / "shards" / f"{index}"
        shard.mkdir(parents=True)
        every += webdataset_file(shard, count=60, seed=index)[1]
    app_id, out = submit(primus_env, tmp_path, f"""sources: [{{path: {tmp_path}/shards/*/*.tar}}]
    chunk_size: 8Ki
    delivery: {delivery}""", read_with)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    got = [json.loads(line) for path in out.glob("*.jsonl")
           for line in path.read_text().splitlines()]
    assert sorted(got, key=json.dumps) == sorted(map(digest, every), key=json.dumps), \
        "each sample once, with every one of its files"
    stats = status["data"]["train"]
    assert stats["records"] == len(every) and stats["tasks"] > 3, stats
    assert_nothing_left(app_id)


def test_a_member_without_a_key_and_a_damaged_header_fail_their_tasks_naming_them(
        primus_env, tmp_path):
    (tmp_path / "shards").mkdir()
    keyless = tmp_path / "shards" / "a.tar"
    with tarfile.open(keyless, "w") as tar:
        for name in ("s1.jpg", "README"):
            member = tarfile.TarInfo(name)
            member.size = 3
            tar.addfile(member, io.BytesIO(b"abc"))
    damaged = tmp_path / "shards" / "b.tar"
    path, _ = webdataset_file(tmp_path, count=4)
    content = bytearray(path.read_bytes())
    content[1024 + 148:1024 + 156] = b"0000000\0"  # the second member's header checksum
    damaged.write_bytes(bytes(content))
    app_id, _ = submit(primus_env, tmp_path, f"""sources: [{{path: {tmp_path}/shards/*.tar}}]
    max_task_attempts: 1
    task_failed_percent: 100""", workers=1)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    said = " | ".join(failed["error"] for failed in stream_keys(primus_env, app_id,
                                                                "failed").values())
    assert f"{keyless}: member 'README' (byte 1024) has no key: a WebDataset sample's files " \
           "are named KEY.EXTENSION" in said, said
    assert f"{damaged}: the tar header at byte " in said, said
    assert status["data"]["train"]["failed"] == 2
