"""Kafka topics as a stream's source, end to end: a real broker (tansu, tests/support/kafka.py),
real etcd, executors and trainers. Every message carries its partition and sequence number in
its value, so the tests count what reached the trainers: each message exactly once, in order
within a partition.

Trainers (``data_trainer.py``) write what they read as it comes: over a pipe the Arrow IPC
streams the executor wrote; through shared memory (``--via-reader``) each batch re-encoded.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from primus.store.embedded import find_etcd_binary
from tests.support.apps import assert_nothing_left, write_job
from tests.support.data import kill_executors_at_random_points, submit_data_job, wait_for_end
from tests.support.kafka import Broker, start_broker, write_profiles
from tests.support.primus import run_primus

PARTITIONS = 8
SECRET = "kafka-secret-4c1d9a"
"""A secret-bearing setting of the profile (``ssl.key.password``, which a plaintext connection
does not use): it must reach no etcd value, trainer environment or log."""


@pytest.fixture
def broker(tmp_path: Path):
    with start_broker(tmp_path) as running:
        yield running


@pytest.fixture
def kafka_env(primus_env: dict[str, str], tmp_path: Path, broker: Broker) -> dict[str, str]:
    """``primus_env`` with a Kafka profiles file naming the broker as profile ``local``."""
    profiles = write_profiles(tmp_path / "kafka.yaml", local={
        "bootstrap.servers": broker.servers, "ssl.key.password": SECRET})
    return {**primus_env, "PRIMUS_KAFKA_CLIENTS": str(profiles)}


def fill(broker: Broker, topic: str, per_partition: int) -> dict[int, list[bytes]]:
    """A topic of :data:`PARTITIONS` partitions, each holding ``per_partition`` messages whose
    value is ``b"P:SEQ"``; the values written, by partition."""
    broker.create_topic(topic, PARTITIONS)
    values = {p: [f"{p}:{seq:06d}".encode() for seq in range(per_partition)]
              for p in range(PARTITIONS)}
    broker.produce(topic, ((p, value, str(p).encode()) for p in range(PARTITIONS)
                           for value in values[p]))
    return values


def received(records: Path) -> list[tuple[str, list[dict]]]:
    """Each trainer attempt's output (``.out``: Arrow IPC streams one after the other), as
    (name, rows) in the order received."""
    found = []
    for out in sorted(records.glob("*.out")):
        rows: list[dict] = []
        with pa.input_stream(str(out)) as stream:
            buffered = pa.BufferReader(stream.read())
            while buffered.tell() < buffered.size():
                rows += pa.ipc.open_stream(buffered).read_all().to_pylist()
        found.append((out.stem, rows))
    return found


def assert_each_once_in_order(records: Path, values: dict[int, list[bytes]], task_size: int,
                              duplicates_allowed: bool = False) -> None:
    """Every message reached a trainer (exactly once unless ``duplicates_allowed``), with its
    partition, offset and key, each trainer seeing the offsets of each task (``task_size`` of
    a partition) in order."""
    counts: collections.Counter[tuple[int, int]] = collections.Counter()
    for name, rows in received(records):
        last: dict[tuple[int, int], int] = {}
        for row in rows:
            partition, offset = row["partition"], row["offset"]
            assert row["value"] == values[partition][offset], (name, row)
            assert row["key"] == str(partition).encode() and row["topic"] == "clicks", row
            task = (partition, offset // task_size)
            assert offset > last.get(task, -1) or duplicates_allowed, (
                f"{name}: partition {partition} offset {offset} after {last[task]}")
            last[task] = offset
            counts[partition, offset] += 1
    expected = {(p, offset) for p, kept in values.items() for offset in range(len(kept))}
    assert set(counts) == expected, f"missing {sorted(expected - set(counts))[:10]}"
    if not duplicates_allowed:
        assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1][:10]


def test_a_bounded_stream_of_8_partitions_reaches_3_trainers_each_message_once_in_order(
        kafka_env, tmp_path, broker):
    values = fill(broker, "clicks", 400)
    app_id, records = submit_data_job(kafka_env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], task_size: 150}}]""")

    status = wait_for_end(kafka_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_each_once_in_order(records, values, task_size=150)
    stats = status["data"]["train"]
    assert (stats["tasks"], stats["done"], stats["records"]) == (
        PARTITIONS * 3, PARTITIONS * 3, PARTITIONS * 400), stats
    assert_nothing_left(app_id)
    # Credentials never reach etcd, a trainer's environment or a log.
    dump = subprocess.run([str(find_etcd_binary().with_name("etcdctl")),
                           f"--endpoints={kafka_env['PRIMUS_ETCD']}", "get", "--prefix",
                           kafka_env["PRIMUS_PREFIX"]], capture_output=True, check=True)
    assert SECRET.encode() not in dump.stdout
    assert b"pinned" in dump.stdout, "the offsets were pinned in the spec etcd holds"
    home = Path(kafka_env["PRIMUS_HOME"])
    assert not [path for path in home.rglob("*") if path.is_file()
                and SECRET.encode() in path.read_bytes()]


def test_executors_killed_mid_task_lose_no_message_through_shared_memory(
        kafka_env, tmp_path, broker):
    values = fill(broker, "clicks", 400)
    app_id, records = submit_data_job(
        kafka_env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], task_size: 100}}]
    checkpoint_records: 50
    delivery: shm""",
        roles="restart_policy: on_failure\n    max_failures: 10",
        trainer_args="--via-reader --delay 0.6 --read-size 1")
    kills = kill_executors_at_random_points(kafka_env, app_id, seed=11)
    assert kills == 3, "the run ended before three executors could be killed; slow it down"

    status = wait_for_end(kafka_env, app_id, timeout=180)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_each_once_in_order(records, values, task_size=100, duplicates_allowed=True)
    copies = collections.Counter((row["partition"], row["offset"])
                                 for _, rows in received(records) for row in rows)
    # Read again after a kill: what the killed reader's trainer took after its last checkpoint,
    # at most a checkpoint's worth and the blocks (here whole tasks) around it, as
    # test_data.py bounds it for files.
    twice = sorted(key for key, count in copies.items() if count > 1)
    assert sum(copies.values()) - len(copies) <= kills * (50 + 2 * 100), (
        f"{sum(copies.values()) - len(copies)} read again: {twice[:3]} ... {twice[-3:]}")


@pytest.mark.parametrize(("source", "extra", "field", "says"), [
    ("{client: nowhere, topics: [clicks]}", "", "kafka.client", "no profile 'nowhere'"),
    ("{client: local, topics: [clicks, absent]}", "", "kafka.topics[1]",
     "topic 'absent' does not exist"),
    ("{client: local, topics: [clicks], start: {clicks: {0: 30}}, end: {clicks: {0: 20}}}", "",
     "kafka", "is before its start offset 30"),
    ("{client: local, topics: [clicks], start: {clicks: {3: 999}}}", "", "kafka.start",
     "outside the partition, which holds offsets 0 to 10"),
    ("{client: local, topics: [clicks], settings: {sasl.password: x}}", "", "kafka",
     "sasl.password: not a tuning setting"),
    ("{client: local, topics: [clicks], end: none}", "epochs: 2", "data[0]",
     "epochs is not for an unbounded stream"),
])
def test_a_bad_kafka_source_is_refused_at_submit_naming_the_field(
        kafka_env, tmp_path, broker, source, extra, field, says):
    fill(broker, "clicks", 10)
    job = write_job(tmp_path / "job.yaml", f"""
name: bad
roles: [{{name: worker, command: "true"}}]
data:
  - name: train
    roles: [worker]
    sources: [{{kafka: {source}}}]
    {extra}
""")
    result = run_primus(kafka_env, "submit", str(job))

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and field in result.stderr and \
        says in result.stderr, result.stderr
    listed = run_primus(kafka_env, "list", "-o", "json")
    assert json.loads(listed.stdout or "[]") == [], "nothing was written"


def test_a_profiles_file_others_may_read_is_refused_when_it_holds_a_secret(
        kafka_env, tmp_path, broker):
    fill(broker, "clicks", 10)
    os.chmod(kafka_env["PRIMUS_KAFKA_CLIENTS"], 0o644)
    job = write_job(tmp_path / "job.yaml", """
name: loose
roles: [{name: worker, command: "true"}]
data:
  - name: train
    roles: [worker]
    sources: [{kafka: {client: local, topics: [clicks]}}]
""")
    result = run_primus(kafka_env, "submit", str(job))

    assert result.returncode == 2, result.stderr
    assert "holds secrets (ssl.key.password)" in result.stderr and "chmod 600" in result.stderr
    assert SECRET not in result.stderr
