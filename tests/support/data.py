"""Applications with data streams: source files, the job that reads them, and what reached the
trainers (``tests/integration/data_trainer.py`` writes every byte it reads, as soon as it reads
it, so a test can compare what reached the trainers with the source files)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from primus.store.embedded import find_etcd_binary
from tests.support.apps import status_json, write_job
from tests.support.primus import REPO, run_primus
from tests.support.waiting import wait_until

TRAINER = REPO / "tests" / "integration" / "data_trainer.py"


def make_text_files(directory: Path, files: int = 6, lines: int = 1500,
                    tag: str = "file") -> list[bytes]:
    """Files of numbered lines, each starting with ``tag``; every line of every file, in
    order."""
    directory.mkdir(parents=True, exist_ok=True)
    every = []
    for f in range(files):
        rows = [f"{tag}{f}-line{i:05d} {'x' * (i % 50)}\n".encode() for i in range(lines)]
        (directory / f"part-{f:02d}.txt").write_bytes(b"".join(rows))
        every += rows
    return every


def received_lines(records: Path) -> list[bytes]:
    """Every complete line the trainers read, over all their attempts (a killed trainer's last
    partial line is not a record it received)."""
    lines = []
    for out in sorted(records.glob("*.out")):
        data = out.read_bytes()
        complete = data[:data.rfind(b"\n") + 1]
        lines += complete.splitlines(keepends=True)
    return lines


def submit_data_job(env: dict[str, str], tmp_path: Path, stream: str, roles: str = "",
                    policy: str = "", trainer_args: str = "", workers: int = 3,
                    submit_args: tuple[str, ...] = ()) -> tuple[str, Path]:
    """Submit a job of ``workers`` workers (extra role fields in ``roles``) reading the stream
    ``train`` (its fields in ``stream``), with ``submit_args`` given to ``primus submit``;
    return the application's id and the directory where its trainers write what they
    read."""
    records = tmp_path / "records"
    records.mkdir(parents=True)
    command = json.dumps([sys.executable, str(TRAINER), str(records), *trainer_args.split()])
    job = write_job(tmp_path / "job.yaml", f"""
name: data
policy: {{heartbeat_ttl: 3s, stop_grace: 1s, {policy}}}
roles:
  - name: worker
    num: {workers}
    command: {command}
    {roles}
data:
  - name: train
    roles: [worker]
    {stream}
""")
    result = run_primus(env, "submit", str(job), *submit_args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip(), records


def wait_for_end(env: dict[str, str], app_id: str, timeout: float = 120) -> dict:
    """The final status once the application ended and its AM exited; on timeout, fail showing
    where it stood."""
    last: list[dict] = []

    def ended() -> dict | None:
        last[:] = [status_json(env, app_id)]
        status = last[0]
        if status["status"]["state"] in ("SUCCEEDED", "FAILED", "KILLED") and status["am"] is None:
            return status
        return None

    try:
        return wait_until(ended, timeout, f"{app_id} to end")
    except pytest.fail.Exception:
        status = last[0] if last else {}
        executors = {f"{role}-{e['index']}": (e["plan"] or {}).get("state")
                     for role, members in status.get("executors", {}).items() for e in members}
        pytest.fail(f"{app_id} did not end within {timeout}s: {status.get('status')}, "
                    f"executors {executors}, data {status.get('data')}, "
                    f"last events {[e['message'] for e in status.get('events', [])[-5:]]}")


def stream_keys(env: dict[str, str], app_id: str, kind: str, raw: bool = False
                ) -> dict[str, Any]:
    """The records under ``data/train/<kind>/`` (``tasks``, ``done``, ``failed``...), by task
    id, read with etcdctl (with ``raw``, the values as stored, not parsed)."""
    root = f"{env['PRIMUS_PREFIX']}/apps/{app_id}/data/train/{kind}/"
    listing = subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", env["PRIMUS_ETCD"], "get", "--prefix",
         root, "-w", "json"], capture_output=True, text=True, check=True,
        env={**os.environ, "ETCDCTL_API": "3"})
    return {base64.b64decode(kv["key"]).decode()[len(root):]: (
        base64.b64decode(kv["value"]) if raw else json.loads(base64.b64decode(kv["value"])))
        for kv in json.loads(listing.stdout).get("kvs", [])}


def stream_record(env: dict[str, str], app_id: str, name: str) -> dict[str, Any] | None:
    """The record ``data/train/<name>`` (``scan``, ``stats``), read with etcdctl; ``None``
    where there is none."""
    key = f"{env['PRIMUS_PREFIX']}/apps/{app_id}/data/train/{name}"
    listing = subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", env["PRIMUS_ETCD"], "get", key,
         "--print-value-only"], capture_output=True, text=True, check=True,
        env={**os.environ, "ETCDCTL_API": "3"})
    return json.loads(listing.stdout) if listing.stdout.strip() else None


def make_parquet_files(directory: Path, files: int = 4, rows: int = 5000,
                       row_group_size: int = 1000) -> list[int]:
    """Parquet files whose column ``n`` numbers every row of every file uniquely (``text``: a
    string of it, ``pad``: filler); every ``n``, in order."""
    import pyarrow as pa  # noqa: PLC0415 - only the Parquet tests need it
    import pyarrow.parquet as pq  # noqa: PLC0415

    directory.mkdir(parents=True, exist_ok=True)
    every = []
    for f in range(files):
        numbers = list(range(f * rows, (f + 1) * rows))
        pq.write_table(pa.table({"n": pa.array(numbers, pa.int64()),
                                 "text": [f"row {n}" for n in numbers],
                                 "pad": ["x" * (n % 40) for n in numbers]}),
                       directory / f"part-{f:02d}.parquet", row_group_size=row_group_size)
        every += numbers
    return every


def received_rows(records: Path, column: str = "n") -> list[object]:
    """The values of ``column`` in every Arrow batch the trainers read whole, over all their
    attempts (a killed trainer's last, partly read batch is not one it received)."""
    import pyarrow as pa  # noqa: PLC0415

    from primus.data.reader import arrow_batches  # noqa: PLC0415

    values: list[object] = []
    for out in sorted(records.glob("*.out")):
        with open(out, "rb") as stream:
            try:
                for batch in arrow_batches(stream):
                    values += batch.column(column).to_pylist()
            except (pa.ArrowInvalid, OSError, EOFError):
                pass  # the trainer was killed inside this batch
    return values


def kill_executors_at_random_points(env: dict[str, str], app_id: str, seed: int,
                                    kills: int = 3) -> int:
    """Once two of the stream's tasks are done, SIGKILL ``kills`` running executors of role
    ``worker`` one after the other, at random points 0.5 to 1.5 s apart (``seed``); the kills
    made before the application ended."""
    import random  # noqa: PLC0415 - these tests' alone
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415

    wait_until(lambda: status_json(env, app_id)["data"].get("train", {}).get("done", 0) >= 2,
               60, "some tasks done")
    rng = random.Random(seed)
    made = 0
    while made < kills:
        status = status_json(env, app_id)
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
        made += 1
        time.sleep(rng.uniform(0.5, 1.5))  # a random point of the run, not a synchronisation
    return made


def early_checkpoint(env: dict[str, str], app_id: str) -> bool:
    """A task of stream ``train`` is checkpointed in the first half of its range: it is still
    being read for as long again, whatever the machine's load between a look and a savepoint
    (one checkpointed near its end may be done by the time the savepoint is taken)."""
    progress = stream_keys(env, app_id, "progress")
    if not progress:
        return False
    tasks = stream_keys(env, app_id, "tasks")
    return any(name in tasks and (checkpoint["offset"] - tasks[name]["start"]) * 2
               < tasks[name]["end"] - tasks[name]["start"]
               for name, checkpoint in progress.items())


def savepoint_mid_stream(env: dict[str, str], app_id: str) -> str:
    """Once a task of stream ``train`` is done and another checkpointed early in its range,
    take a savepoint of the application, then kill it and wait until it ended; the
    savepoint's reference."""
    wait_until(lambda: status_json(env, app_id)["data"].get("train", {}).get(
        "done", 0) >= 1 and early_checkpoint(env, app_id), 90,
        "a task done and one checkpointed in the first half of its range")
    created = run_primus(env, "savepoint", "create", app_id)
    assert created.returncode == 0, created.stderr
    assert run_primus(env, "kill", app_id).returncode == 0
    assert wait_for_end(env, app_id)["status"]["state"] == "KILLED"
    return created.stdout.strip()


def cut_tasks(env: dict[str, str], app_id: str, number: int) -> list[tuple[Any, int]]:
    """Each task of stream ``train`` in savepoint ``number`` of the application, with where
    its delivery stopped at the cut: its end if it was done, else its checkpoint (or its start),
    from the savepoint's chunks as etcd holds them."""
    from primus.data.savepoints import unpack  # noqa: PLC0415 - the savepoint tests' alone
    from primus.state.records import DataTask, TaskProgress, decode  # noqa: PLC0415

    chunks = stream_keys(env, app_id, f"savepoints/{number:06d}", raw=True)
    entries = unpack(value for _, value in sorted(chunks.items()))
    tasks = {e.task: decode(DataTask, e.value.encode()) for e in entries if e.kind == "tasks"}
    done = {e.task for e in entries if e.kind == "done"}
    checkpoints = {e.task: decode(TaskProgress, e.value.encode()).offset
                   for e in entries if e.kind == "progress"}
    return [(task, task.end if name in done else checkpoints.get(name, task.start))
            for name, task in tasks.items()]
