"""Data sources added to a running stream (``ApplicationService.add_data_source``, what
``primus data add`` and the API call): real etcd, real AM, executors, trainers and files.

Trainers write every byte they read, so the test compares what reached them with the files of
the submitted and the added sources, whose lines differ.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from primus.client.api import AppEndedError
from primus.client.service import ApplicationService
from primus.client.topology import Changed
from primus.config.loader import SpecError
from primus.config.site import load_settings
from primus.state.keys import AppKeys
from primus.state.records import StreamScan, decode
from primus.store.connect import open_store
from tests.support.apps import assert_nothing_left, gone, status_json, write_job
from tests.support.data import TRAINER, make_text_files, received_lines, wait_for_end
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SLOW = ["--delay", "0.15", "--read-size", "4096"]
"""A trainer reading about 27 KB/s: a stream of a few hundred KB lasts seconds."""


def submit(env: dict[str, str], tmp_path: Path, command: list[str], workers: int = 2) -> str:
    """Submit a job whose ``worker`` role reads stream ``train`` from ``tmp_path/data``."""
    job = write_job(tmp_path / "job.yaml", f"""
name: data-add
policy: {{heartbeat_ttl: 3s, stop_grace: 1s}}
roles:
  - name: worker
    num: {workers}
    command: {json.dumps(command)}
data:
  - name: train
    roles: [worker]
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki
""")
    result = run_primus(env, "submit", str(job))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def add_source(env: dict[str, str], app_id: str, source: Any) -> Changed:
    """``ApplicationService.add_data_source`` to stream ``train``, as alice, as the CLI calls
    it."""
    async def call() -> Changed:
        store, settings = await open_store(load_settings(env=env))
        try:
            return await ApplicationService(store, settings).add_data_source(
                app_id, "train", source, user="alice")
        finally:
            await store.close()
    return asyncio.run(call())


def stored(env: dict[str, str], app_id: str) -> dict[str, bytes]:
    """Every key of the application but its event log and executors (what a change could
    write), with its value."""
    async def read() -> dict[str, bytes]:
        store, settings = await open_store(load_settings(env=env))
        try:
            keys = AppKeys(settings.prefix, app_id)
            return {kv.key: kv.value for kv in (await store.get_prefix(keys.root)).kvs
                    if not kv.key.startswith((keys.root + "events/", keys.root + "executors/",
                                              keys.root + "data/", keys.root + "am/"))}
        finally:
            await store.close()
    return asyncio.run(read())


def scan_of(env: dict[str, str], app_id: str) -> StreamScan:
    """Stream ``train``'s ``scan`` record."""
    async def read() -> StreamScan:
        store, settings = await open_store(load_settings(env=env))
        try:
            kv = await store.get(AppKeys(settings.prefix, app_id).stream("train").scan)
            assert kv is not None, "stream train has no scan record"
            return decode(StreamScan, kv.value)
        finally:
            await store.close()
    return asyncio.run(read())


def stats(env: dict[str, str], app_id: str) -> dict:
    return status_json(env, app_id)["data"].get("train", {})


def assert_delivered(status: dict, records: Path, every: list[bytes]) -> None:
    """The application succeeded; every record reached a trainer at least once; each task was
    done, and counted, once (the records counted are exactly the sources' records)."""
    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    got = collections.Counter(received_lines(records))
    missing = [line for line in every if not got[line]]
    assert missing == [], f"{len(missing)} records never reached a trainer, first {missing[0]!r}"
    train = status["data"]["train"]
    assert (train["done"], train["failed"], train["records"], train["exhausted"]) == (
        train["tasks"], 0, len(every), True)


def reading_slowly(env: dict[str, str], tmp_path: Path, files_to_add: int
                   ) -> tuple[str, Path, list[bytes]]:
    """A running application whose 2 trainers read 4 files slowly, once a task is done; where
    its trainers' records are; every line of those files and of ``files_to_add`` more in
    ``tmp_path/added`` (not added yet). Each trainer holds after 16 KiB until ``records/GO``
    exists (:func:`go_on`): with its pipe full it has taken 80 of the 240 KiB, so a task is
    done and the stream cannot end before the test has added to it, however slow the
    machine."""
    every = make_text_files(tmp_path / "data", files=4, tag="first") + \
        make_text_files(tmp_path / "added", files=files_to_add, tag="added")
    records = tmp_path / "records"
    records.mkdir()
    app_id = submit(env, tmp_path, [sys.executable, str(TRAINER), str(records), *SLOW,
                                    "--hold-after", str(16 * 1024)])
    wait_until(lambda: stats(env, app_id).get("done", 0) >= 1, 60, "a task done")
    return app_id, records, every


def go_on(records: Path) -> None:
    """Let the trainers of :func:`reading_slowly` read on."""
    (records / "GO").touch()


def test_source_added_mid_stream_is_delivered_and_each_task_done_once(primus_env, tmp_path):
    app_id, records, every = reading_slowly(primus_env, tmp_path, files_to_add=2)

    changed = add_source(primus_env, app_id, {"path": f"{tmp_path}/added/*.txt"})
    go_on(records)

    assert (changed.files, changed.change.kind, changed.change.user) == (2, "add-source",
                                                                         "alice")
    status = wait_for_end(primus_env, app_id)
    assert_delivered(status, records, every)
    assert any(f"data source {tmp_path}/added/*.txt (2 files) added to stream train" in
               event["message"] for event in status["events"]), status["events"]
    scan = scan_of(primus_env, app_id)
    assert scan.complete and [part.sources for part in scan.parts] == [1, 2]
    assert scan.created == status["data"]["train"]["tasks"]
    assert_nothing_left(app_id)


def test_refused_sources_change_nothing_one_matching_nothing_and_one_for_an_ended_stream(
        primus_env, tmp_path):
    submitted = make_text_files(tmp_path / "data", files=2, lines=200, tag="first")
    make_text_files(tmp_path / "added", files=1, lines=10, tag="added")
    records = tmp_path / "records"
    records.mkdir()
    # Reads once GO exists, everything; exits once `finish` exists: the application runs on
    # after its stream ended.
    script = (f"while [ ! -e {records}/GO ]; do sleep 0.1; done; "
              f"cat > {records}/$PRIMUS_ROLE-$PRIMUS_INDEX.out; "
              f"while [ ! -e {records}/finish ]; do sleep 0.1; done")
    app_id = submit(primus_env, tmp_path, ["sh", "-c", script], workers=1)
    wait_until(lambda: status_json(primus_env, app_id)["status"]["state"] == "RUNNING", 60,
               "the application running")
    before = stored(primus_env, app_id)

    with pytest.raises(SpecError) as nothing:
        add_source(primus_env, app_id, {"path": f"{tmp_path}/none/*.txt"})

    assert [(p.source, p.field, p.value, p.allowed) for p in nothing.value.problems] == [
        ("source", "path", f"{tmp_path}/none/*.txt", "matches no file")]
    assert stored(primus_env, app_id) == before
    (records / "GO").touch()
    wait_until(lambda: stats(primus_env, app_id).get("exhausted"), 60, "the stream's end")

    with pytest.raises(AppEndedError, match="data stream train of .* has ended"):
        add_source(primus_env, app_id, {"path": f"{tmp_path}/added/*.txt"})

    assert stored(primus_env, app_id) == before
    assert status_json(primus_env, app_id)["status"]["state"] == "RUNNING"
    (records / "finish").touch()
    status = wait_for_end(primus_env, app_id)
    assert_delivered(status, records, submitted)
    assert_nothing_left(app_id)


def test_am_killed_right_after_an_add_the_next_am_delivers_the_added_files(primus_env,
                                                                          tmp_path):
    app_id, records, every = reading_slowly(primus_env, tmp_path, files_to_add=3)
    am = status_json(primus_env, app_id)["am"]
    assert am is not None, "no AM leads the running application"

    add_source(primus_env, app_id, {"path": f"{tmp_path}/added/*.txt"})
    os.kill(am["pid"], signal.SIGKILL)
    go_on(records)

    wait_until(lambda: gone(am["pid"]), 10, "the AM to die")
    assert run_primus(primus_env, "recover", app_id).returncode == 0
    status = wait_for_end(primus_env, app_id, timeout=180)
    assert_delivered(status, records, every)
    assert [part.sources for part in scan_of(primus_env, app_id).parts] == [1, 2]
    assert_nothing_left(app_id)  # the AM records the end, then gives up leadership and exits
    assert status_json(primus_env, app_id)["am"] is None



def test_primus_data_add_adds_a_source_whose_records_reach_the_trainers(primus_env, tmp_path):
    app_id, records, every = reading_slowly(primus_env, tmp_path, files_to_add=2)

    result = run_primus(primus_env, "data", "add", app_id, "train", "added/*.txt",
                        cwd=tmp_path)
    go_on(records)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"data source {tmp_path}/added/*.txt (2 files) added to "
                                    f"stream train (change 1)"), result.stdout
    status = wait_for_end(primus_env, app_id)
    assert_delivered(status, records, every)
    assert_nothing_left(app_id)
