"""Savepoints over real runs: a savepoint taken by a running application's AM, the application
killed, another started from the savepoint; every record counted (real etcd, executors and
trainers; ``data_trainer.py`` writes every byte it reads as soon as it reads it)."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from primus.client.savepoints import wait_taken
from primus.state.keys import AppKeys
from primus.state.records import (
    Savepoint,
    SavepointState,
    encode,
)
from primus.store.api import CompactedError, StoreUnavailableError
from primus.store.pki import ensure_pki
from tests.support.apps import write_job
from tests.support.data import (
    cut_tasks,
    make_text_files,
    received_lines,
    received_rows,
    savepoint_mid_stream,
    stream_keys,
    submit_data_job,
    wait_for_end,
)
from tests.support.primus import REPO, run_primus
from tests.support.server import RunningServer
from tests.support.tokens import start_token_server, through_server
from tests.support.waiting import wait_until

STREAM = """
    sources: [{{path: {data}/*.txt}}]
    chunk_size: 4Mi
    checkpoint_records: 200"""


def line_starts(directory: Path) -> dict[str, list[tuple[int, bytes]]]:
    """Each file's lines with the byte offset each starts at."""
    found = {}
    for path in sorted(directory.glob("*.txt")):
        offset, lines = 0, []
        for line in path.read_bytes().splitlines(keepends=True):
            lines.append((offset, line))
            offset += len(line)
        found[str(path)] = lines
    return found


def before_the_cut(env: dict[str, str], app_id: str, number: int,
                   files: dict[str, list[tuple[int, bytes]]]) -> list[bytes]:
    """The records the savepoint says were delivered: those of its done tasks, and of each
    task it resumes, those before its checkpoint (a text record belongs to the task its first
    byte lies in)."""
    return [line for task, upto in cut_tasks(env, app_id, number)
            for start, line in files[task.path] if task.start <= start < upto]


def assert_read_exactly_after_the_cut(records: Path, source: list[bytes],
                                      before: list[bytes]) -> None:
    """The trainers of the run started from the savepoint read every record but those
    before its cut, each once."""
    after = collections.Counter(received_lines(records))
    expected = collections.Counter(source) - collections.Counter(before)
    assert after == expected, (
        f"{sum((after - expected).values())} records read again or unknown, "
        f"{sum((expected - after).values())} skipped")


@pytest.mark.parametrize("epochs,shuffled", [(1, ""), (2, "tasks"), (1, "records")],
                         ids=["one-epoch", "two-shuffled-epochs", "shuffled-records"])
def test_a_run_started_from_a_savepoint_reads_every_record_after_the_cut_and_none_before(
        primus_env, tmp_path, epochs, shuffled):
    # A task per file of 2.7 MB, read for seconds by slow trainers and checkpointed at each
    # 1 MiB block they consumed: the savepoint is taken once a task is done and one is
    # checkpointed.
    source = make_text_files(tmp_path / "data", files=6, lines=60000) * epochs
    # With two epochs, shuffled: the new run writes the tasks not written yet in the order
    # of the same seed. With a shuffle buffer, a task's checkpoints fall at the ends of its
    # windows of 5,000 lines: the cut is there, and the restored run reads from there.
    stream = STREAM.format(data=tmp_path / "data") + {
        "": "", "tasks": "\n    epochs: 2\n    shuffle: true\n    seed: 7",
        "records": "\n    shuffle_buffer: 5000"}[shuffled]
    first, first_records = submit_data_job(primus_env, tmp_path / "first", stream, workers=2,
                                           trainer_args="--delay 0.03 --read-size 16384")

    ref = savepoint_mid_stream(primus_env, first)

    assert ref == f"{first}/1"
    shown = json.loads(run_primus(primus_env, "savepoint", "show", ref, "--json").stdout)
    cut = shown["streams"][0]
    assert shown["state"] == "taken" and 1 <= cut["done"] < cut["tasks"], shown
    assert cut["reading"] >= 1, "a task being read is in the cut at its checkpoint"
    before = before_the_cut(primus_env, first, 1, line_starts(tmp_path / "data"))
    assert len(before) == cut["records"], "the savepoint counts what its cut holds"
    delivered = collections.Counter(received_lines(first_records))
    assert all(delivered[line] for line in before), "a record before the cut was delivered"
    if shuffled == "records":
        where = {line: i for i, line in enumerate(source)}
        first_lines = [where[line] for line in received_lines(first_records)[:100]]
        assert first_lines != sorted(first_lines), "a task's lines come shuffled"
    # The application archived and its keys deleted: the savepoint is read from the history.
    Path(primus_env["PRIMUS_CONF"]).write_text("history: {retention: 1s}\n")
    wait_until(lambda: "deleted the keys" in run_primus(
        primus_env, "history", "archive").stdout, 30, "the keys of the killed run deleted")
    assert not stream_keys(primus_env, first, f"savepoints/{1:06d}")
    listed = run_primus(primus_env, "savepoint", "list", first)
    assert listed.returncode == 0 and f"{first}/1  taken" in listed.stdout, listed.stderr

    restored, records = submit_data_job(primus_env, tmp_path / "restored", stream, workers=2,
                                        submit_args=("--from-savepoint", ref))
    status = wait_for_end(primus_env, restored)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_read_exactly_after_the_cut(records, source, before)
    stats = status["data"]["train"]
    assert (stats["done"], stats["records"]) == (stats["tasks"], len(source)), \
        "the restored stream counts the savepoint's done tasks as its own"


def test_a_job_of_another_shape_is_refused_before_anything_is_written(primus_env, tmp_path):
    make_text_files(tmp_path / "data", files=2, lines=600)  # tasks of whole files
    stream = STREAM.format(data=tmp_path / "data")
    first, _ = submit_data_job(primus_env, tmp_path / "first", stream, workers=1,
                               trainer_args="--delay 0.1 --read-size 2048")
    created = run_primus(primus_env, "savepoint", "create", first)
    assert created.returncode == 0, created.stderr
    run_primus(primus_env, "kill", first)
    apps_before = run_primus(primus_env, "list", "-o", "json").stdout

    other = (tmp_path / "other")
    other.mkdir()
    job = (tmp_path / "first" / "job.yaml").read_text().replace("chunk_size: 4Mi",
                                                                 "chunk_size: 8Ki")
    (other / "job.yaml").write_text(job)
    refused = run_primus(primus_env, "submit", str(other / "job.yaml"),
                         "--from-savepoint", created.stdout.strip())

    assert refused.returncode != 0
    assert "data[0].chunk_size" in refused.stderr and created.stdout.strip() in \
        refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert run_primus(primus_env, "list", "-o", "json").stdout.count('"app_id"') == \
        apps_before.count('"app_id"'), "no application was recorded"


@pytest.fixture
def token_server(primus_env: dict[str, str], tmp_path: Path) -> Iterator[RunningServer]:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"{socket.gethostname()} ansible_connection=local primus_slots=4\n")
    running = start_token_server({**primus_env, "PRIMUS_INVENTORY": str(inventory)}, tmp_path,
                                 ensure_pki(tmp_path / "pki"))
    yield running
    running.stop()


def test_through_the_server_only_the_owner_takes_a_savepoint_or_starts_from_it(
        primus_env, token_server, tmp_path):
    pki = ensure_pki(tmp_path / "pki")
    alice = through_server(primus_env, token_server, pki, tmp_path, "alice")
    bob = through_server(primus_env, token_server, pki, tmp_path, "bob")
    make_text_files(tmp_path / "data", files=2, lines=600)
    stream = STREAM.format(data=tmp_path / "data")
    first, _ = submit_data_job(alice, tmp_path / "first", stream, workers=1,
                               trainer_args="--delay 0.1 --read-size 2048")

    refused = run_primus(bob, "savepoint", "create", first)
    assert refused.returncode != 0 and "bob" in refused.stderr and first in refused.stderr, \
        refused.stderr
    created = run_primus(alice, "savepoint", "create", first)
    assert created.returncode == 0, created.stderr
    ref = created.stdout.strip()
    listed = run_primus(alice, "savepoint", "list", first, "--json")
    assert [json.loads(line)["by"] for line in listed.stdout.splitlines()] == ["alice"]
    hidden = run_primus(bob, "savepoint", "list", first, "--json")
    assert hidden.returncode != 0 and hidden.stdout == "", "a savepoint is its cut: the owner's"
    assert f"bob may not read the savepoints of application {first}" in hidden.stderr
    assert run_primus(alice, "kill", first).returncode == 0

    taken_by_bob = run_primus(bob, "submit", str(tmp_path / "first" / "job.yaml"),
                              "--from-savepoint", ref)
    assert taken_by_bob.returncode != 0
    assert "of an application of alice, not of bob" in taken_by_bob.stderr, taken_by_bob.stderr
    restored, _ = submit_data_job(alice, tmp_path / "restored", stream, workers=1,
                                  submit_args=("--from-savepoint", ref))
    assert wait_for_end(alice, restored)["status"]["state"] == "SUCCEEDED"


SAVING_TRAINER = """
import os, sys
from primus.data.reader import records, savepoint
out, count = sys.argv[1], int(sys.argv[2])
me = f"{os.environ['PRIMUS_ROLE']}-{os.environ['PRIMUS_INDEX']}.{os.environ['PRIMUS_ATTEMPT']}"
stream = records()  # kept open: leaving it would tell the executor the trainer reads no more
with open(os.path.join(out, me + ".before"), "wb", buffering=0) as before:
    for _ in range(count):
        before.write(next(stream))
ref = savepoint("step-1")  # at the model's checkpoint, every trainer at the same step
with open(os.path.join(out, me + ".savepoint"), "w") as saved:
    saved.write(ref)
import signal; signal.pause()  # trains on, reading nothing more, until stopped
"""


def test_trainers_savepoint_falls_exactly_after_the_last_record_each_was_given(
        primus_env, tmp_path):
    source = make_text_files(tmp_path / "data", files=4, lines=3000)
    trainer = tmp_path / "saving_trainer.py"
    trainer.write_text(SAVING_TRAINER)
    (tmp_path / "out").mkdir()
    # No checkpoint of their own while they read: the cut is the trainers' alone.
    stream = f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 64Ki
    checkpoint_records: 1000000
    checkpoint_interval: 1h
    delivery: shm"""
    job = write_job(tmp_path / "job.yaml", f"""
name: saving
roles:
  - name: worker
    num: 2
    command: {json.dumps([sys.executable, str(trainer), str(tmp_path / "out"), "1234"])}
data:
  - name: train
    roles: [worker]
{stream}
""")
    submitted = run_primus(primus_env, "submit", str(job))
    assert submitted.returncode == 0, submitted.stderr
    first = submitted.stdout.strip()
    refs = wait_until(lambda: (found := sorted((tmp_path / "out").glob("*.savepoint"))) and
                      len(found) == 2 and [p.read_text() for p in found], 60,
                      "both trainers' savepoint")
    assert refs[0] == refs[1] == f"{first}/1", "one savepoint, joined by both readers"
    assert run_primus(primus_env, "kill", first).returncode == 0
    wait_for_end(primus_env, first)
    before = [line for out in (tmp_path / "out").glob("*.before")
              for line in out.read_bytes().splitlines(keepends=True)]
    assert len(before) == 2 * 1234

    restored, records = submit_data_job(primus_env, tmp_path / "restored", stream, workers=2,
                                        trainer_args="--via-reader",
                                        submit_args=("--from-savepoint", refs[0]))
    status = wait_for_end(primus_env, restored)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert_read_exactly_after_the_cut(records, source, before)


def test_only_the_latest_savepoints_kept_remain(primus_env, tmp_path):
    make_text_files(tmp_path / "data", files=2, lines=600)
    stream = STREAM.format(data=tmp_path / "data")
    app_id, _ = submit_data_job(primus_env, tmp_path, stream, workers=1,
                                trainer_args="--delay 0.1 --read-size 2048",
                                policy="", submit_args=("--set", "savepoints_kept=2"))
    for _ in range(3):
        created = run_primus(primus_env, "savepoint", "create", app_id)
        assert created.returncode == 0, created.stderr

    wait_until(lambda: [json.loads(line)["number"] for line in run_primus(
        primus_env, "savepoint", "list", app_id, "--json").stdout.splitlines()] == [2, 3],
        10, "savepoint 1 deleted, 2 and 3 kept")
    assert not stream_keys(primus_env, app_id, f"savepoints/{1:06d}", raw=True), \
        "its cut went with it"
    assert stream_keys(primus_env, app_id, f"savepoints/{3:06d}", raw=True)
    run_primus(primus_env, "kill", app_id)


def test_the_savepoint_example_resumes_after_the_workers_checkpoint(primus_env):
    example = REPO / "examples" / "savepoint" / "job.yaml"
    env = {**primus_env,  # its trainers' python3 must have Primus: this venv's
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{primus_env['PATH']}"}
    total = sum(len(p.read_text().splitlines()) for p in
                (REPO / "examples" / "data-injection" / "data").glob("day-*.txt"))

    def records_read(app_id: str) -> int:
        logs = run_primus(env, "logs", app_id).stdout
        return sum(int(line.split(" read ")[1].split()[0]) for line in logs.splitlines()
                   if " read " in line and " records" in line)

    first = run_primus(env, "submit", str(example), "--wait")
    assert first.returncode == 0, first.stderr
    first_id = first.stdout.strip()
    assert records_read(first_id) == total
    second = run_primus(env, "submit", str(example), "--from-savepoint", f"{first_id}/1",
                        "--wait")

    assert second.returncode == 0, second.stderr
    assert records_read(second.stdout.strip()) == total - 2 * 1000, \
        "the second run reads exactly what came after both workers' 1,000th record"


def test_a_table_is_read_from_a_savepoint_at_the_version_its_application_pinned(
        primus_env, tmp_path):
    table = tmp_path / "events"
    write_deltalake(str(table), pa.table({"n": list(range(2000))}))
    stream = f"""
    sources: [{{table: {{format: delta, path: {table}}}}}]
    format: parquet"""
    first, _ = submit_data_job(primus_env, tmp_path / "first", stream, workers=1,
                               trainer_args="--wait-go")
    created = run_primus(primus_env, "savepoint", "create", first)
    assert created.returncode == 0, created.stderr
    run_primus(primus_env, "kill", first)
    write_deltalake(str(table), pa.table({"n": [9000]}), mode="append")  # version 1: later

    restored, records = submit_data_job(primus_env, tmp_path / "restored", stream, workers=1,
                                        submit_args=("--from-savepoint",
                                                     created.stdout.strip()))
    status = wait_for_end(primus_env, restored)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_rows(records)) == list(range(2000)), \
        "version 0, as the savepoint's application pinned it: not the row appended since"


async def test_a_savepoint_taken_while_its_watch_was_behind_a_compaction_is_seen_taken(
        store, prefix, monkeypatch):
    """The watch of ``wait_taken`` drops, the AM marks the savepoint taken and etcd compacts
    meanwhile: the watch resumes with a resync (a fresh read), and the savepoint is seen taken
    in it (the resync is no event of the key)."""
    keys = AppKeys(prefix, "app")
    await store.put(keys.savepoint(1), encode(Savepoint(number=1, by="alice")))
    watch_from = store._watch_from
    resumed, go = asyncio.Event(), asyncio.Event()
    compacted: list[CompactedError] = []

    async def dropped_once(key_prefix, start_revision, opened=None):
        if not resumed.is_set() and start_revision == 0:  # the watch from now: opened, dropped
            opened((await store.get_prefix(key_prefix)).revision)
            raise StoreUnavailableError("the connection dropped (injected)")
        resumed.set()
        await go.wait()
        try:
            async for event in watch_from(key_prefix, start_revision, opened):
                yield event
        except CompactedError as exc:
            compacted.append(exc)
            raise

    monkeypatch.setattr(store, "_watch_from", dropped_once)
    waiting = asyncio.ensure_future(wait_taken(store, keys, 1, timeout=30))
    async with asyncio.timeout(10):
        await resumed.wait()  # reading again, after the drop
    await store.put(keys.savepoint(1), encode(Savepoint(number=1, by="alice",
                                                        state=SavepointState.TAKEN)))
    await store.put(f"{prefix}/later", b"")  # the history from the taken savepoint on: gone
    await store.compact()
    go.set()

    taken = await waiting
    assert compacted, "the watch resumed from a revision etcd still had: no resync to read"
    assert taken.state is SavepointState.TAKEN
