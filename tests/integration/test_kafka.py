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
import socket
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from primus.data.kafka import PartitionUrl
from primus.store.embedded import find_etcd_binary
from primus.store.pki import ensure_pki
from tests.support.apps import assert_nothing_left, gone, status_json, write_job
from tests.support.data import (
    cut_tasks,
    kill_executors_at_random_points,
    savepoint_mid_stream,
    stream_keys,
    stream_record,
    submit_data_job,
    wait_for_end,
)
from tests.support.kafka import Broker, start_broker, write_profiles
from tests.support.primus import run_primus
from tests.support.tokens import start_token_server, through_server
from tests.support.waiting import wait_until

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


def fill(broker: Broker, topic: str, per_partition: int,
         size: int = 0) -> dict[int, list[bytes]]:
    """A topic of :data:`PARTITIONS` partitions, each holding ``per_partition`` messages whose
    value is ``b"P:SEQ"`` (padded to ``size`` bytes); the values written, by partition."""
    broker.create_topic(topic, PARTITIONS)
    values = {p: [f"{p}:{seq:06d}".encode().ljust(size, b".") for seq in range(per_partition)]
              for p in range(PARTITIONS)}
    broker.produce(topic, ((p, value, str(p).encode()) for p in range(PARTITIONS)
                           for value in values[p]))
    return values


def group_offsets(broker: Broker, group: str) -> dict[int, int]:
    """The offsets consumer group ``group`` has committed for topic ``clicks``, by partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**broker.config(), "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition("clicks", p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        consumer.close()


def received(records: Path) -> list[tuple[str, list[dict]]]:
    """Each trainer attempt's output (``.out``: Arrow IPC streams one after the other), as
    (name, rows) in the order received."""
    found = []
    for out in sorted(records.glob("*.out")):
        rows: list[dict] = []
        with pa.input_stream(str(out)) as stream:
            buffered = pa.BufferReader(stream.read())
            while buffered.tell() < buffered.size():
                try:
                    rows += pa.ipc.open_stream(buffered).read_all().to_pylist()
                except pa.ArrowInvalid:  # a trainer that stopped inside a batch: not read
                    break
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
    sources: [{kafka: {client: local, topics: [clicks], task_size: 150,
                       commit_group: mirror}}]""")

    status = wait_for_end(kafka_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_each_once_in_order(records, values, task_size=150)
    stats = status["data"]["train"]
    assert (stats["tasks"], stats["done"], stats["records"]) == (
        PARTITIONS * 3, PARTITIONS * 3, PARTITIONS * 400), stats
    assert_nothing_left(app_id)
    # The position mirrored to the consumer group: every partition read to its end.
    wait_until(lambda: group_offsets(broker, "mirror") == {p: 400 for p in range(PARTITIONS)},
               15, "the group's committed offsets at the partitions' ends")
    # Credentials never reach etcd, a trainer's environment or a log.
    dump = subprocess.run([str(find_etcd_binary().with_name("etcdctl")),
                           f"--endpoints={kafka_env['PRIMUS_ETCD']}", "get", "--prefix",
                           kafka_env["PRIMUS_PREFIX"]], capture_output=True, check=True)
    assert SECRET.encode() not in dump.stdout
    assert b"pinned" in dump.stdout, "the offsets were pinned in the spec etcd holds"
    home = Path(kafka_env["PRIMUS_HOME"])
    assert not [path for path in home.rglob("*") if path.is_file()
                and SECRET.encode() in path.read_bytes()]


def test_a_shuffle_buffer_mixes_each_tasks_messages_and_reads_each_once(
        kafka_env, tmp_path, broker):
    values = fill(broker, "clicks", 120)
    app_id, records = submit_data_job(kafka_env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], task_size: 60}}]
    shuffle_buffer: 40
    seed: 3""", workers=2)

    status = wait_for_end(kafka_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    got = messages_received(records)
    assert set(got) == {(p, offset) for p in values for offset in range(120)}
    assert max(got.values()) == 1, "each message once"
    orders = [[row["offset"] for row in rows if row["partition"] == p]
              for _, rows in received(records) for p in range(PARTITIONS)]
    assert any(order != sorted(order) for order in orders), "a task's messages come shuffled"
    for _, rows in received(records):
        for row in rows:
            assert row["value"] == values[row["partition"]][row["offset"]], row


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
    copies = messages_received(records)
    # Read again after a kill: what the killed reader's trainer took after its last checkpoint,
    # at most a checkpoint's worth and the blocks (here whole tasks) around it, as
    # test_data.py bounds it for files.
    twice = sorted(key for key, count in copies.items() if count > 1)
    assert sum(copies.values()) - len(copies) <= kills * (50 + 2 * 100), (
        f"{sum(copies.values()) - len(copies)} read again: {twice[:3]} ... {twice[-3:]}")


def messages_received(records: Path) -> collections.Counter[tuple[int, int]]:
    """How often each (partition, offset) reached a trainer."""
    return collections.Counter((row["partition"], row["offset"])
                               for _, rows in received(records) for row in rows)


def test_a_trainer_stopping_early_leaves_its_messages_to_the_others(kafka_env, tmp_path, broker):
    """worker-1's trainer reads 20 KiB and exits 0: its executor gives its task back where the
    trainer got to, and the other two read the rest; what it took inside a batch it did not
    finish is read again, no more."""
    values = fill(broker, "clicks", 300)
    app_id, records = submit_data_job(kafka_env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], task_size: 100}}]""",
                                      trainer_args="--read-bytes 20000 --early-index 1")

    status = wait_for_end(kafka_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_each_once_in_order(records, values, task_size=100, duplicates_allowed=True)
    assert status["data"]["train"]["done"] == status["data"]["train"]["tasks"]
    copies = messages_received(records)
    assert sum(copies.values()) - len(copies) <= 100, "at most one task's batch read again"


def test_an_am_killed_mid_stream_loses_and_repeats_no_message(kafka_env, tmp_path, broker):
    values = fill(broker, "clicks", 300)
    app_id, records = submit_data_job(kafka_env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], task_size: 100}}]""",
                                      trainer_args="--delay 0.1 --read-size 512")
    am = wait_until(lambda: (s := status_json(kafka_env, app_id))["am"] and
                    s["data"].get("train", {}).get("done", 0) >= 2 and s["am"],
                    60, "some tasks done")
    os.kill(am["pid"], 9)
    wait_until(lambda: gone(am["pid"]), 10, "the AM to die")
    assert run_primus(kafka_env, "recover", app_id).returncode == 0

    status = wait_for_end(kafka_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_each_once_in_order(records, values, task_size=100)


def test_an_unbounded_stream_reads_what_a_producer_writes_and_ends_with_primus_succeed(
        kafka_env, tmp_path, broker):
    """A producer writes while the application runs; its lag shows in the stream's stats; its
    done tasks are folded out of etcd, their totals kept in the scan, the stats and a savepoint
    unchanged by it; once the producer stopped and everything was read, ``primus succeed``
    ends the application. A run from the savepoint then reads what was produced since, and
    nothing before. (A partition added meanwhile: the next test.)"""
    broker.create_topic("clicks", 4)
    values: dict[int, list[bytes]] = {p: [] for p in range(4)}

    def produce(batches: int) -> None:
        for _ in range(batches):
            batch = [(p, f"{p}:{len(values[p]) + i:06d}".encode()) for p in range(4)
                     for i in range(25)]
            broker.produce("clicks", ((p, value, str(p).encode()) for p, value in batch))
            for p, value in batch:
                values[p].append(value)

    produce(2)  # before the submit: pinned as the first slice
    app_id, records = submit_data_job(kafka_env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], end: none, task_size: 40,
                       max_lag: 100000}}]""", workers=2)
    lags = []

    def lag_seen() -> dict | None:
        stats = status_json(kafka_env, app_id)["data"].get("train", {})
        lags.append(stats.get("lag"))
        return stats if stats.get("lag") is not None and stats.get("done", 0) >= 2 else None
    seen = wait_until(lag_seen, 60, "the stream's lag in its stats, some tasks done")
    # Per partition too (the UI's stream figure draws it), adding up to the stream's lag.
    assert set(seen["lags"]) == {f"clicks[{p}]" for p in range(4)}, seen
    assert sum(seen["lags"].values()) == seen["lag"], seen
    for _ in range(6):  # the producer goes on while the application reads
        produce(1)
        wait_until(lambda: len(messages_received(records)) >= sum(map(len, values.values())),
                   60, "what was produced so far read")
    produced = sum(map(len, values.values()))

    def all_folded() -> bool:  # every message read, every task done and folded
        stats = status_json(kafka_env, app_id)["data"]["train"]
        folded = (stream_record(kafka_env, app_id, "scan") or {}).get("folded") or {}
        return stats["records"] == produced and folded.get("tasks") == stats["tasks"]
    wait_until(all_folded, 30, "the done tasks folded out of etcd")
    status = status_json(kafka_env, app_id)
    stats = status["data"]["train"]
    assert status["status"]["state"] == "RUNNING" and not stats["exhausted"]
    assert stats["done"] == stats["tasks"] >= 4 * 5, stats
    assert stream_keys(kafka_env, app_id, "tasks") == stream_keys(kafka_env, app_id, "done") \
        == {}, "a folded task's keys are deleted"
    folded = stream_record(kafka_env, app_id, "scan")["folded"]
    assert folded == {"tasks": stats["tasks"], "records": produced, "bytes": stats["bytes"],
                      "below": {"clicks": {str(p): len(values[p]) for p in range(4)}}}, folded
    created = run_primus(kafka_env, "savepoint", "create", app_id)
    assert created.returncode == 0, created.stderr
    assert f"{stats['tasks']}/{stats['tasks']} tasks done" in created.stderr and \
        f"{produced:,} records before the cut" in created.stderr, created.stderr
    assert run_primus(kafka_env, "succeed", app_id).returncode == 0

    final = wait_for_end(kafka_env, app_id)

    assert final["status"]["state"] == "SUCCEEDED", final["status"]
    got = messages_received(records)
    expected = {(p, offset) for p, kept in values.items() for offset in range(len(kept))}
    assert set(got) == expected and max(got.values()) == 1
    for name, rows in received(records):
        for row in rows:
            assert row["value"] == values[row["partition"]][row["offset"]], (name, row)
    assert any(lag is not None for lag in lags)

    produce(1)  # after the cut: what the restored run must read, and no more
    restored, again = submit_data_job(kafka_env, tmp_path / "restored", """
    sources: [{kafka: {client: local, topics: [clicks], end: none, task_size: 40,
                       max_lag: 100000}}]""", workers=2,
                                      submit_args=("--from-savepoint", created.stdout.strip()))
    wait_until(lambda: len(messages_received(again)) >= 4 * 25, 60, "the new messages read")
    assert run_primus(kafka_env, "succeed", restored).returncode == 0
    assert wait_for_end(kafka_env, restored)["status"]["state"] == "SUCCEEDED"
    got = messages_received(again)
    assert set(got) == {(p, offset) for p in range(4)
                        for offset in range(len(values[p]) - 25, len(values[p]))}
    assert max(got.values()) == 1


def test_a_partition_the_pinned_offsets_do_not_know_is_found_and_read_from_its_start(
        kafka_env, tmp_path, broker):
    """tansu cannot add a partition to a topic (no CreatePartitions): the job comes pinned
    as a submit would have pinned it when the topic had two partitions of its four. The AM's
    look at the topic finds the other two and reads them from their start."""
    values = fill(broker, "clicks", 50)
    app_id, records = submit_data_job(kafka_env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], end: none, task_size: 40,
                       pinned: {clicks: {0: [0, 50], 1: [0, 50]}}}}]""", workers=2)

    wait_until(lambda: len(messages_received(records)) >= PARTITIONS * 50, 60,
               "every partition's messages read, those the pinned offsets did not name too")
    assert run_primus(kafka_env, "succeed", app_id).returncode == 0
    final = wait_for_end(kafka_env, app_id)

    assert final["status"]["state"] == "SUCCEEDED", final["status"]
    got = messages_received(records)
    assert set(got) == {(p, offset) for p in values for offset in range(50)}
    assert max(got.values()) == 1
    am_log = (Path(kafka_env["PRIMUS_HOME"]) / "apps" / app_id / "am.log").read_text()
    assert "kafka topic clicks: partition 2 is new, read from offset 0" in am_log, am_log[-2000:]


def test_a_broker_that_lost_its_messages_fails_the_stream_naming_partition_and_offsets(
        kafka_env, tmp_path, broker):
    """tansu's ``memory://`` storage loses every message on a restart, and a fetch past a
    partition's end then returns nothing instead of an error: the readers must not wait
    forever, and the application fails saying which partition lost which offsets."""
    fill(broker, "clicks", 400)
    app_id, _ = submit_data_job(kafka_env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], task_size: 50}}]
    max_task_attempts: 1""", trainer_args="--delay 0.2 --read-size 256")
    wait_until(lambda: status_json(kafka_env, app_id)["data"].get("train", {}).get(
        "done", 0) >= 1, 60, "a task done")
    broker.restart()

    status = wait_for_end(kafka_env, app_id, timeout=90)

    assert status["status"]["state"] == "FAILED", status["status"]
    said = status["status"]["diagnosis"]
    assert "topic 'clicks' partition" in said and "offsets " in said and (
        "no longer exists on the broker" in said or "beyond the partition's end 0" in said), said


def test_a_broker_restarted_on_durable_storage_loses_and_repeats_no_message(
        tmp_path, primus_env):
    """tansu on S3 storage (moto's server) keeps what it stored across a restart: the readers
    reconnect and go on from where they were, nothing lost, nothing read twice."""
    (tmp_path / "s3").mkdir()
    with start_broker(tmp_path / "s3", durable=True) as durable:
        profiles = write_profiles(tmp_path / "durable.yaml",
                                  local={"bootstrap.servers": durable.servers})
        env = {**primus_env, "PRIMUS_KAFKA_CLIENTS": str(profiles)}
        values = fill(durable, "clicks", 300)
        app_id, records = submit_data_job(env, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], task_size: 100}}]""",
                                          trainer_args="--delay 0.1 --read-size 512")
        wait_until(lambda: status_json(env, app_id)["data"].get("train", {}).get(
            "done", 0) >= 2, 60, "some tasks done")
        durable.restart()

        status = wait_for_end(env, app_id, timeout=120)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_each_once_in_order(records, values, task_size=100)


def before_the_cut(env: dict[str, str], app_id: str, number: int) -> set[tuple[int, int]]:
    """The messages the savepoint says were delivered: those of its done tasks, and of each
    task it resumes, those before its checkpoint (the next offset to read)."""
    return {(PartitionUrl.parse(task.path).partition, offset)
            for task, upto in cut_tasks(env, app_id, number)
            for offset in range(task.start, upto)}


def test_a_run_from_a_savepoint_taken_mid_stream_reads_every_message_after_the_cut_once(
        kafka_env, tmp_path, broker):
    # 4 KiB values: a task (a whole partition) is three blocks of about 1 MiB, each taken
    # for a second, so the cut can fall inside a task, at its checkpoint.
    values = fill(broker, "clicks", 600, size=4096)
    stream = """
    sources: [{kafka: {client: local, topics: [clicks]}}]
    checkpoint_records: 100
    delivery: shm"""
    first, _ = submit_data_job(kafka_env, tmp_path / "first", stream, workers=2,
                               trainer_args="--via-reader --delay 1 --read-size 1")
    ref = savepoint_mid_stream(kafka_env, first)
    before = before_the_cut(kafka_env, first, 1)
    assert 0 < len(before) < PARTITIONS * 600, len(before)

    restored, records = submit_data_job(
        kafka_env, tmp_path / "restored", stream, workers=2,
        trainer_args="--via-reader", submit_args=("--from-savepoint", ref))
    status = wait_for_end(kafka_env, restored)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    got = messages_received(records)
    expected = {(p, offset) for p in values for offset in range(600)} - before
    assert set(got) == expected, (f"{len(set(got) - expected)} read again, "
                                  f"{len(expected - set(got))} skipped")
    assert max(got.values()) == 1, "each message after the cut once"


def test_through_the_server_the_submitting_user_pins_the_offsets_with_their_own_profile(
        kafka_env, tmp_path, broker):
    """The server reads no owner's Kafka profile: ``primus submit`` through it resolves the
    partitions' offsets where it runs, with the user's profile, and sends them pinned; the
    run reads every message once. A source the user's profile cannot resolve is refused
    before the request is sent, as a direct submit refuses it."""
    values = fill(broker, "clicks", 120)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"{socket.gethostname()} ansible_connection=local primus_slots=4\n")
    pki = ensure_pki(tmp_path / "pki")
    server = start_token_server({**kafka_env, "PRIMUS_INVENTORY": str(inventory)}, tmp_path, pki)
    try:
        alice = {**through_server(kafka_env, server, pki, tmp_path, "alice"),
                 "PRIMUS_KAFKA_CLIENTS": kafka_env["PRIMUS_KAFKA_CLIENTS"]}
        app_id, records = submit_data_job(alice, tmp_path, """
    sources: [{kafka: {client: local, topics: [clicks], task_size: 60}}]""", workers=2)
        status = wait_for_end(alice, app_id)

        assert status["status"]["state"] == "SUCCEEDED", status["status"]
        assert_each_once_in_order(records, values, task_size=60)
        job = write_job(tmp_path / "unknown.yaml", """
name: unknown
roles: [{name: worker, command: "true"}]
data:
  - {name: train, roles: [worker], sources: [{kafka: {client: nowhere, topics: [clicks]}}]}
""")
        refused = run_primus(alice, "submit", str(job))
        assert refused.returncode == 2, refused.stderr
        assert "data[0].sources[0].kafka.client" in refused.stderr, refused.stderr
    finally:
        server.stop()


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
