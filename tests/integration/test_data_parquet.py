"""``format: parquet`` end to end: real etcd, executors and trainers; rows checked one by one.

The trainers (``data_trainer.py``) write every byte they read; the rows are read back from the
Arrow IPC streams they received (``tests/support/data.received_rows``).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake
from pyiceberg.catalog import load_catalog

from primus.data.parquet import _layout
from primus.data.reader import arrow_batches
from primus.store.embedded import find_etcd_binary
from tests.support.apps import assert_nothing_left, status_json
from tests.support.data import (
    kill_executors_at_random_points,
    make_parquet_files,
    received_rows,
    submit_data_job,
    wait_for_end,
)
from tests.support.primus import run_primus


def submit_refused(env: dict[str, str], job: Path, stream: str) -> subprocess.CompletedProcess:
    """``primus submit`` of a one-worker job reading the stream ``train`` (its fields in
    ``stream``), expected to be refused: its result."""
    job.write_text(textwrap.dedent("""
        name: data
        roles: [{name: worker, num: 1, command: "true"}]
        data:
          - name: train
            roles: [worker]
        """) + textwrap.indent(textwrap.dedent(stream).strip("\n"), "    ") + "\n")
    return run_primus(env, "submit", str(job))


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
    schemas = set()
    for out in records.glob("*.out"):  # a trainer may have got no task at all
        with open(out, "rb") as stream:
            schemas |= {tuple(b.schema.names) for b in arrow_batches(stream)}
    assert schemas == {("text", "n")}
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
    kills = kill_executors_at_random_points(primus_env, app_id, seed=7)
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
    stats = status["data"]["train"]
    assert (stats["records"], stats["failed_records"]) == (3000, 2000), \
        "status counts every row the trainer was given: of the task done, and of the failed " \
        "task before the damage"
    shown = run_primus(primus_env, "status", app_id)
    assert "3000 (+2000 of failed tasks)" in shown.stdout, shown.stdout
    assert_nothing_left(app_id)


def test_a_parquet_stream_that_names_columns_of_a_format_without_them_is_refused(
        primus_env, tmp_path):
    make_parquet_files(tmp_path / "data", files=1, rows=10)
    job = tmp_path / "job.yaml"
    result = submit_refused(primus_env, job, f"""
    sources: [{{path: {tmp_path}/data/*.parquet}}]
    format: tfrecord
    columns: [n]""")

    assert result.returncode == 2
    assert "data[0].columns: got 'n'; format tfrecord has no columns" in result.stderr
    assert not (Path(primus_env["PRIMUS_HOME"]) / "apps").exists(), "nothing may be launched"


def test_a_chunk_size_smaller_than_a_row_group_is_refused_at_submit_with_the_size_to_use(
        primus_env, tmp_path):
    make_parquet_files(tmp_path / "data", files=2, rows=4000, row_group_size=2000)
    job = tmp_path / "job.yaml"
    result = submit_refused(primus_env, job, f"""
    sources: [{{path: {tmp_path}/data/*.parquet}}]
    format: parquet
    chunk_size: 1Ki""")

    assert result.returncode == 2, result.stderr
    assert "data[0].chunk_size: got '1024'; is smaller than a row group of " \
           f"{tmp_path}/data/part-00.parquet (" in result.stderr, result.stderr
    assert "use a chunk_size of at least " in result.stderr
    assert not (Path(primus_env["PRIMUS_HOME"]) / "apps").exists(), "nothing may be launched"


def etcd_value(env: dict[str, str], key: str) -> dict:
    """The JSON value of ``key``, read with etcdctl."""
    listing = subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", env["PRIMUS_ETCD"], "get", key,
         "--print-value-only"], capture_output=True, text=True, check=True,
        env={**os.environ, "ETCDCTL_API": "3"})
    return json.loads(listing.stdout)


def test_a_delta_table_is_read_at_the_version_pinned_at_submit_with_its_filter(
        primus_env, tmp_path):
    table = tmp_path / "events"
    write_deltalake(str(table), pa.table({"n": list(range(3000)),
                                          "day": ["a", "b", "c"] * 1000}), partition_by=["day"])
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{table: {{format: delta, path: {table}}}}}]
    format: parquet
    filter: [[day, in, [a, c]], [n, ">=", 1500]]""", trainer_args="--wait-go", workers=2)
    spec = etcd_value(primus_env, f"{primus_env['PRIMUS_PREFIX']}/apps/{app_id}/spec")
    assert spec["data"][0]["sources"][0]["table"]["version"] == 0, "pinned at submit"
    write_deltalake(str(table), pa.table({"n": [9000, 9001], "day": ["a", "c"]}),
                    partition_by=["day"], mode="append")  # version 1: after the submit
    (records / "GO").touch()

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    expected = [n for n in range(1500, 3000) if n % 3 != 1]  # days a and c from 1500 on
    assert sorted(received_rows(records)) == expected
    days = dict(zip(received_rows(records), received_rows(records, "day"), strict=True))
    assert all(days[n] == "ac"[n % 3 // 2] for n in expected), \
        "each row has its partition's day, which Delta keeps out of the data files"
    stats = status["data"]["train"]
    assert (stats["tasks"], stats["done"], stats["records"]) == (2, 2, len(expected)), \
        "day b's file is never read: its partition fails the filter"
    assert_nothing_left(app_id)


def test_a_table_that_is_not_there_or_a_version_it_lacks_is_refused_at_submit(
        primus_env, tmp_path):
    table = tmp_path / "events"
    write_deltalake(str(table), pa.table({"n": [1, 2]}))
    job = tmp_path / "job.yaml"
    refused = []
    for source in (f"{{format: delta, path: {tmp_path}/nothing}}",
                   f"{{format: delta, path: {table}, version: 4}}"):
        refused.append(submit_refused(primus_env, job, f"""
    format: parquet
    sources: [{{table: {source}}}]"""))

    assert [r.returncode for r in refused] == [2, 2]
    assert refused[0].stderr.count("no Delta table there") == 1, refused[0].stderr
    assert "data[0].sources[0].table.path: got '" in refused[0].stderr
    assert refused[1].stderr.count("has no version 4") == 1, refused[1].stderr
    assert "data[0].sources[0].table.version: got 4; has no version 4" in refused[1].stderr
    assert not (Path(primus_env["PRIMUS_HOME"]) / "apps").exists(), "nothing may be launched"


def test_a_delta_table_added_to_a_running_stream_is_read_at_the_version_it_had_then(
        primus_env, tmp_path):
    numbers = make_parquet_files(tmp_path / "data", files=2, rows=1000)
    table = tmp_path / "events"
    write_deltalake(str(table), pa.table({"n": list(range(5000, 5600))}))
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.parquet}}]
    format: parquet""", trainer_args="--wait-go", workers=2)

    added = run_primus(primus_env, "data", "add", app_id, "train", str(table), "--table",
                       "delta")
    write_deltalake(str(table), pa.table({"n": [9000]}), mode="append")  # version 1: later
    (records / "GO").touch()

    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith(f"data source delta table {table} version 0 (1 file) added "
                                   "to stream train"), added.stdout
    status = wait_for_end(primus_env, app_id)
    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_rows(records)) == numbers + list(range(5000, 5600))
    assert_nothing_left(app_id)


def test_an_iceberg_table_on_a_postgresql_catalog_is_read_at_the_snapshot_pinned_at_submit(
        primus_env, postgres_server, tmp_path):
    settings = {"type": "sql", "uri": postgres_server.new_database(),
                "warehouse": f"file://{tmp_path}/warehouse"}
    env = {**primus_env, **{f"PYICEBERG_CATALOG__LAKE__{key.upper()}": value
                            for key, value in settings.items()}}
    catalog = load_catalog("lake", **settings)
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=pa.schema([("n", pa.int64()),
                                                                 ("kind", pa.string())]))
    for start in (0, 1000):  # two snapshots, a file each
        table.append(pa.table({"n": pa.array(range(start, start + 1000), pa.int64()),
                               "kind": ["odd" if n % 2 else "even"
                                        for n in range(start, start + 1000)]}))
    app_id, records = submit_data_job(env, tmp_path, """
    sources: [{table: {format: iceberg, catalog: lake, name: db.events}}]
    format: parquet
    columns: [n]
    filter: [[kind, "=", even], [n, ">=", 1000]]""", trainer_args="--wait-go", workers=2)
    spec = etcd_value(primus_env, f"{primus_env['PRIMUS_PREFIX']}/apps/{app_id}/spec")
    pinned = spec["data"][0]["sources"][0]["table"]["snapshot"]
    assert pinned == table.current_snapshot().snapshot_id, "pinned at submit"
    table.append(pa.table({"n": pa.array([5000], pa.int64()), "kind": ["even"]}))  # later
    (records / "GO").touch()

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_rows(records)) == list(range(1000, 2000, 2))
    assert status["data"]["train"]["tasks"] == 1, "the file of n < 1000 is pruned by its statistics"
    assert_nothing_left(app_id)


def test_an_iceberg_table_added_to_a_running_stream_is_read_at_its_snapshot_then(
        primus_env, tmp_path):
    settings = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": f"file://{tmp_path}/warehouse"}
    env = {**primus_env, **{f"PYICEBERG_CATALOG__LAKE__{key.upper()}": value
                            for key, value in settings.items()}}
    catalog = load_catalog("lake", **settings)
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": pa.array(range(7000, 7300), pa.int64())}))
    numbers = make_parquet_files(tmp_path / "data", files=2, rows=1000)
    app_id, records = submit_data_job(env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.parquet}}]
    format: parquet
    columns: [n]""", trainer_args="--wait-go", workers=2)

    added = run_primus(env, "data", "add", app_id, "train", "db.events", "--table", "iceberg",
                       "--catalog", "lake")
    snapshot = table.current_snapshot().snapshot_id
    table.append(pa.table({"n": pa.array([9000], pa.int64())}))  # a later snapshot
    (records / "GO").touch()

    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith(
        f"data source iceberg table db.events (catalog lake) snapshot {snapshot} (1 file) "
        "added to stream train"), added.stdout
    status = wait_for_end(primus_env, app_id)
    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    assert sorted(received_rows(records)) == numbers + list(range(7000, 7300))
    assert_nothing_left(app_id)


def test_the_lake_example_trains_on_the_days_its_filter_keeps(primus_env):
    example = Path(__file__).parents[2] / "examples" / "lake"
    env = {**primus_env,  # its trainers' python3 must have pyarrow and Primus: this venv's
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{primus_env['PATH']}"}

    result = run_primus(env, "submit", str(example / "job.yaml"), "--wait")

    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    stats = status_json(primus_env, app_id)["data"]["train"]
    assert (stats["tasks"], stats["records"], stats["failed"]) == (2, 600, 0), \
        "two days of 300 rows; the first day's file is never read"
    logs = run_primus(primus_env, "logs", app_id).stdout
    trained = [line.split(" trained on ")[1] for line in logs.splitlines()
               if " trained on " in line]
    assert len(trained) == 2, logs
    assert sum(int(line.split()[0]) for line in trained) == 600
    assert sum(int(line.split(", ")[1].split()[0]) for line in trained) == 300
    assert_nothing_left(app_id)
