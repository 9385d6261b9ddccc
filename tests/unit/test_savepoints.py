"""Savepoints' pure parts (:mod:`primus.data.savepoints`, :mod:`primus.client.savepoints`):
the cut's entries and summary, its chunks, the job shape a savepoint starts, the restore's
writes. A savepoint taken and restored over a real run is in
``tests/integration/test_savepoints.py``."""

from __future__ import annotations

import json
import zlib

import pytest

from primus.am.savepoints import waits_for
from primus.client.savepoints import Loaded, restore_spec
from primus.config.spec import JobSpec, SourceSpec
from primus.data import savepoints
from primus.data.savepoints import (
    Entry,
    SavepointError,
    cut_entries,
    pack,
    parse_ref,
    restore_ops,
    shape_problems,
    summarize,
    unpack,
)
from primus.state.keys import StreamKeys
from primus.state.records import (
    DataTask,
    FoldedTasks,
    Savepoint,
    SavepointState,
    StreamCut,
    StreamScan,
    TaskDone,
    TaskProgress,
    encode,
)
from primus.store.api import Put

APP = "train-20261127-180000-ab12"


def job(**stream: object) -> JobSpec:
    return JobSpec.model_validate({
        "name": "train", "roles": [{"name": "worker", "num": 1, "command": "true"}],
        "data": [{"name": "train", "roles": ["worker"], "sources": [{"path": "/d/*.txt"}],
                  "chunk_size": "1Mi", **stream}]})


def taken(spec: JobSpec, **cut: object) -> Savepoint:
    stream = spec.data[0]
    return Savepoint(number=1, state=SavepointState.TAKEN, streams=[
        summarize(stream, StreamScan(), []).model_copy(update=cut)])


def done(records: int) -> str:
    return encode(TaskDone(records=records, bytes=records * 10, role="worker", index=0,
                           time=1.0)).decode()


def progress(records: int, offset: int = 100) -> str:
    return encode(TaskProgress(offset=offset, records=records, bytes=records * 10)).decode()


def test_a_task_owned_when_the_cut_is_read_is_pending_in_it_and_keeps_its_checkpoint():
    entries = cut_entries({
        "tasks": [("/p/tasks/0001-0", b"{}"), ("/p/tasks/0001-1", b"{}")],
        "progress": [("/p/progress/0001-1", progress(7).encode())],
        "owner": [("/p/owner/0001-1", b'{"role": "worker"}')],
        "done": [("/p/done/0001-0", done(5).encode())]})

    assert Entry("pending", "0001-1", "") in entries
    assert not any(e.kind == "owner" for e in entries), "no reader of the old run is kept"
    assert Entry("progress", "0001-1", progress(7)) in entries


def test_the_summary_counts_records_before_the_cut_from_done_tasks_and_checkpoints():
    entries = [Entry("tasks", t, "{}") for t in ("a", "b", "c", "d")] + [
        Entry("done", "a", done(5)), Entry("progress", "b", progress(7)),
        Entry("pending", "b", ""), Entry("pending", "c", ""), Entry("failed", "d", done(0))]

    cut = summarize(job().data[0], StreamScan(created=4), entries)

    assert (cut.tasks, cut.done, cut.failed, cut.reading, cut.records) == (4, 1, 1, 1, 12)
    assert cut.scan.created == 4 and cut.sources == job().data[0].sources


def test_the_summary_counts_the_done_tasks_an_unbounded_stream_folded_out_of_etcd():
    entries = [Entry("tasks", "a", "{}"), Entry("done", "a", done(5))]
    scan = StreamScan(created=40, folded=FoldedTasks(tasks=30, records=900, bytes=9000,
                                                     below={"clicks": {0: 120}}))

    cut = summarize(job().data[0], scan, entries)

    assert (cut.tasks, cut.done, cut.failed, cut.records) == (31, 31, 0, 905)
    assert cut.scan.folded == scan.folded, "restored with the scan"


def test_chunks_hold_every_entry_in_order_and_stay_within_their_size(monkeypatch):
    monkeypatch.setattr(savepoints, "CHUNK_BYTES", 2000)
    entries = [Entry("progress", f"0001-{i:08d}", progress(i)) for i in range(200)]

    chunks = pack(entries)

    assert len(chunks) > 5, "split"
    assert unpack(chunks) == entries


@pytest.mark.parametrize("entry", [
    ["owner", "0001-00000000", ""],  # a kind a cut does not hold
    ["tasks", "../../scheduler", "{}"],  # no task id
    ["done", "0001-00000000", '{"records": "many"}'],  # not the record of its kind
    ["pending", "0001-00000000", "x"],
])
def test_a_damaged_or_forged_chunk_is_refused_before_anything_is_written(entry):
    with pytest.raises(SavepointError, match="does not read"):
        unpack([b"not zlib"])
    with pytest.raises(SavepointError, match="does not read"):
        unpack([zlib.compress(json.dumps(entry).encode())])


def test_a_savepoint_is_named_app_slash_number():
    assert parse_ref(f"{APP}/12") == (APP, 12)
    for bad in (APP, f"{APP}/x", "/3"):
        with pytest.raises(SavepointError, match="APP/NUMBER"):
            parse_ref(bad)


def test_the_same_job_starts_from_its_savepoint_with_the_tables_at_its_versions():
    spec = job()
    savepoint = taken(spec, sources=[*spec.data[0].sources, SourceSpec(path="/added/*.txt")])

    assert shape_problems(spec, savepoint, "r") == []
    restored = restore_spec(spec.model_copy(update={"from_savepoint": f"{APP}/1"}),
                            Loaded(f"{APP}/1", savepoint, "ann", {}), "ann")
    assert [s.path for s in restored.data[0].sources] == ["/d/*.txt", "/added/*.txt"], \
        "the sources added at run time follow the job's"


@pytest.mark.parametrize(("change", "field"), [
    ({"chunk_size": "2Mi"}, "data[0].chunk_size"),
    ({"shuffle": True}, "data[0].shuffle"),
    ({"seed": 7}, "data[0].seed"),
    ({"epochs": 2}, "data[0].epochs"),
    ({"sources": [{"path": "/other/*.txt"}]}, "data[0].sources"),
    ({"name": "eval"}, "data[0].name"),
])
def test_a_job_of_another_shape_is_refused_naming_the_field(change, field):
    savepoint = taken(job())

    problems = shape_problems(job(**change), savepoint, f"{APP}/1")

    assert field in [where for where, _ in problems], problems
    assert all(f"{APP}/1" in why for _, why in problems)


def test_a_job_lacking_a_stream_of_the_savepoint_is_refused():
    spec = job()
    savepoint = taken(spec)
    bare = spec.model_copy(update={"data": []})

    assert [field for field, _ in shape_problems(bare, savepoint, "r")] == ["data"]


def test_another_users_savepoint_is_refused():
    spec = job()
    with pytest.raises(SavepointError, match="of an application of ann, not of bob"):
        restore_spec(spec, Loaded(f"{APP}/1", taken(spec), "ann", {}), "bob")


def test_the_restore_writes_the_scan_last_in_transactions_within_etcds_limit():
    keys = StreamKeys("/p/apps/x/data/train/")
    entries = [Entry("tasks", f"t{i}", "{}") for i in range(300)]
    cut = summarize(job().data[0], StreamScan(created=300), entries)

    batches = restore_ops(keys, cut, entries)

    assert all(len(ops) <= 128 for ops in batches)
    assert sum(len(ops) for ops in batches) == 301
    assert batches[-1] == [Put(keys.scan, encode(StreamScan(created=300)))]


def test_a_users_savepoint_is_taken_at_once_a_trainers_once_every_reader_joined():
    asked = Savepoint(number=1, requested=100.0)
    named = Savepoint(number=2, name="step-9", readers=["worker-0"], requested=100.0)
    readers = {"worker-0", "worker-1"}

    assert waits_for(asked, readers, now=100.0, timeout=60) == 0
    assert waits_for(named, readers, now=110.0, timeout=60) == 50, "until the deadline"
    assert waits_for(named, readers, now=170.0, timeout=60) == 0, "the deadline passed"
    joined = named.model_copy(update={"readers": ["worker-1", "worker-0"]})
    assert waits_for(joined, readers, now=110.0, timeout=60) == 0


def kafka_cut(slices: dict | None = None) -> StreamCut:
    source = SourceSpec.model_validate({"kafka": {
        "client": "prod", "topics": ["clicks"], "end": "none" if slices else "submit",
        "pinned": {"clicks": {"0": [0, 300], "1": [0, 300]}}}})
    return StreamCut(name="train", format="kafka", sources=[source],
                     scan=StreamScan(created=4, slices=slices))


def kafka_entries() -> list[Entry]:
    """Partition 0: [0, 150) done, [150, 300) read up to 220; partition 1: [0, 150) pending,
    [150, 300) failed."""
    def task(seq: int, partition: int, start: int, end: int) -> Entry:
        return Entry("tasks", f"0001-{seq:08d}", encode(DataTask(
            epoch=1, seq=seq, path=f"kafka://prod/clicks/{partition}", start=start, end=end,
            size=end)).decode())
    done = TaskDone(records=150, bytes=1, role="worker", index=0, time=0).model_dump_json()
    return [task(0, 0, 0, 150), task(1, 0, 150, 300), task(2, 1, 0, 150),
            task(3, 1, 150, 300), Entry("done", "0001-00000000", done),
            Entry("progress", "0001-00000001", TaskProgress(offset=220).model_dump_json()),
            Entry("pending", "0001-00000002", ""), Entry("failed", "0001-00000003", done)]


def test_a_kafka_stream_resumes_only_where_retention_left_what_it_still_reads():
    asked = []

    def first(kafka, partitions):
        asked.append(list(partitions))
        return {("clicks", 0): 200, ("clicks", 1): 0}

    assert savepoints.retention_gaps(kafka_cut(), kafka_entries(), first) == []
    assert asked == [[("clicks", 0), ("clicks", 1)]], "what is left: 0 from 220, 1 from 0"

    def later(kafka, partitions):
        return {("clicks", 0): 250, ("clicks", 1): None}

    assert savepoints.retention_gaps(kafka_cut(), kafka_entries(), later) == [
        "topic 'clicks' partition 0: offsets 220 to 250 were deleted (retention) since the "
        "savepoint's cut", "topic 'clicks' partition 1 no longer exists"]


def test_an_unbounded_streams_next_slice_must_still_be_there():
    cut = kafka_cut(slices={"clicks": {0: 300, 1: 300}})
    entries = [e for e in kafka_entries() if e.task in ("0001-00000000", "0001-00000003")]

    gaps = savepoints.retention_gaps(cut, entries, lambda kafka, partitions: {
        ("clicks", 0): 310, ("clicks", 1): 300})

    assert gaps == ["topic 'clicks' partition 0: offsets 300 to 310 were deleted (retention) "
                    "since the savepoint's cut"]


def test_a_file_stream_has_no_retention_to_check():
    cut = StreamCut(name="train", format="text", sources=[SourceSpec(path="/data/*.txt")])

    assert savepoints.retention_gaps(cut, [], lambda *_: pytest.fail("asked")) == []
