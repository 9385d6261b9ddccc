"""Archiving and retention (issue 13): a finished application is archived, its keys are deleted
from etcd once its retention has passed, and every read still finds it; a crash between the
archive and the deletion loses nothing and doubles nothing; an unusable history database is a
clear error that deletes nothing, and the server goes on serving."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import grpc
import pytest

from primus.api.client import ApiError, Client
from primus.client.api import AppNotFoundError
from primus.client.service import ApplicationService
from primus.config.etcd import EtcdConfig
from primus.config.site import Settings
from primus.history.api import AppQuery, HistoryUnavailableError
from primus.history.archiver import Unended, archive_app, archive_pass, delete_keys, observe
from primus.history.sql_history import SqlHistory
from primus.state.keys import AppKeys
from primus.state.records import AmLeader, AppStatus, advance, decode, encode
from primus.state.states import AppState
from primus.state.view import AppView, read_app_keys
from primus.store.api import Coordinator
from primus.store.etcd_store import EtcdCoordinator
from tests.support.apps import cli_status_json
from tests.support.history import record_app
from tests.support.primus import REPO, run_primus
from tests.support.server import start_server
from tests.support.waiting import wait_until

HELLO = REPO / "examples" / "hello" / "job.yaml"
LONG_AGO = 1_000_000.0
"""A submit time whose retention (a minute in these tests) passed long ago."""


def settings_of(prefix: str, tmp_path: Path, retention: float = 60) -> Settings:
    return Settings(home=tmp_path / "home", prefix=prefix, history_retention=retention)


async def keys_left(store: Coordinator, keys: AppKeys) -> int:
    """How many keys of the application etcd holds, its admission keys included."""
    return (await store.count_prefix(keys.root)
            + await store.count_prefix(keys.scheduler.app(keys.app_id)))


def count_keys(etcd_url: str, keys: AppKeys) -> int:
    async def run() -> int:
        store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(etcd_url,)))
        try:
            return await keys_left(store, keys)
        finally:
            await store.close()
    return asyncio.run(run())


# ---- A real application, through the command line -------------------------------------------

def test_an_ended_app_is_archived_and_after_its_retention_only_the_history_holds_it(
        primus_env, etcd_server, prefix):
    submitted = run_primus(primus_env, "submit", str(HELLO), "--wait")
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip()
    keys = AppKeys(prefix, app_id)

    first = run_primus(primus_env, "history", "archive")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [f"archived {app_id}"]
    assert count_keys(etcd_server.client_url, keys) > 0, "deleted before its retention"
    assert run_primus(primus_env, "history", "archive").stdout == "", "archived twice"

    Path(primus_env["PRIMUS_CONF"]).write_text("history: {retention: 1s}\n")
    finished = cli_status_json(primus_env, app_id)["status"]["finish_time"]
    wait_until(lambda: time.time() > finished + 1, 5, "the retention of 1s to pass")
    second = run_primus(primus_env, "history", "archive")
    assert second.stdout.splitlines() == [f"deleted the keys of {app_id} from etcd"]
    assert count_keys(etcd_server.client_url, keys) == 0

    shown = cli_status_json(primus_env, app_id)
    assert shown["archived"] is True and shown["status"]["state"] == "SUCCEEDED"
    assert sum(len(executors) for executors in shown["executors"].values()) == 4
    table = run_primus(primus_env, "status", app_id)
    assert table.returncode == 0 and "read from the history" in table.stdout
    everything = json.loads(run_primus(primus_env, "list", "--all", "-o", "json").stdout)
    assert [(a["app_id"], a["archived"], a["queue"]) for a in everything] == [
        (app_id, True, "default")]
    assert json.loads(run_primus(primus_env, "list", "-o", "json").stdout) == []


def test_history_prune_deletes_what_finished_before_the_date_given(primus_env, prefix,
                                                                   tmp_path):
    async def archive_two() -> None:
        store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(primus_env["PRIMUS_ETCD"],)))
        history = SqlHistory(f"sqlite:///{tmp_path}/home/history/history.db", prefix)
        try:
            for app_id, submitted in (("old-1", LONG_AGO), ("new-1", time.time())):
                await record_app(store, prefix, app_id, submitted=submitted)
                await archive_app(store, settings_of(prefix, tmp_path), history, app_id)
        finally:
            await history.close()
            await store.close()
    (tmp_path / "home" / "history").mkdir(parents=True)
    asyncio.run(archive_two())
    bad = run_primus(primus_env, "history", "prune", "--before", "last tuesday")
    assert bad.returncode == 2 and "--before" in bad.stderr and "30d" in bad.stderr
    pruned = run_primus(primus_env, "history", "prune", "--before", "30d")
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith("pruned 1 application(s) that finished before ")
    assert run_primus(primus_env, "history", "prune", "--before", "1970-01-31").stdout \
        .startswith("pruned 0 application(s)")


# ---- Archive passes ----------------------------------------------------------------------------

async def test_a_crash_between_archive_and_delete_loses_nothing_and_doubles_nothing(
        store, prefix, tmp_path):
    settings = settings_of(prefix, tmp_path)
    history = SqlHistory(f"sqlite:///{tmp_path}/history.db", prefix)
    try:
        keys = await record_app(store, prefix, "crash-1", submitted=LONG_AGO)
        live = AppView.from_snapshot(keys, await read_app_keys(store, keys))
        # The archive step alone: the process dies before it deletes.
        assert await archive_app(store, settings, history, "crash-1") is not None
        assert await keys_left(store, keys) > 0

        report = await archive_pass(store, settings, history, time.time())
        assert (report.archived, report.deleted) == ([], ["crash-1"])
        assert await keys_left(store, keys) == 0
        assert (await history.query(AppQuery()))[1] == 1
        record = await history.get("crash-1")
        assert record is not None and AppView.from_snapshot(keys, record.snapshot) == live
        report = await archive_pass(store, settings, history, time.time())
        assert (report.archived, report.deleted) == ([], [])
    finally:
        await history.close()


async def test_keys_are_kept_when_the_status_changed_after_it_was_archived(store, prefix,
                                                                          tmp_path):
    settings = settings_of(prefix, tmp_path)
    history = SqlHistory(f"sqlite:///{tmp_path}/history.db", prefix)
    try:
        keys = await record_app(store, prefix, "changed-1", submitted=LONG_AGO)
        archived = await archive_app(store, settings, history, "changed-1")
        assert archived is not None
        status = decode(AppStatus, (await store.get(keys.status)).value)
        await store.put(keys.status, encode(advance(status, status.state,
                                                    diagnosis="rewritten")))
        assert not await delete_keys(store, settings, "changed-1", archived.status_revision)
        assert await keys_left(store, keys) > 0
        report = await archive_pass(store, settings, history, time.time())
        assert (report.archived, report.deleted) == (["changed-1"], ["changed-1"])
        record = await history.get("changed-1")
        assert record is not None and record.diagnosis == "rewritten"
    finally:
        await history.close()


async def test_running_apps_and_apps_an_am_still_leads_are_not_archived(store, prefix,
                                                                         tmp_path):
    history = SqlHistory(f"sqlite:///{tmp_path}/history.db", prefix)
    try:
        await record_app(store, prefix, "running-1", submitted=LONG_AGO,
                         state=AppState.RUNNING, led=True)
        await record_app(store, prefix, "ending-1", submitted=LONG_AGO, led=True)
        report = await archive_pass(store, settings_of(prefix, tmp_path), history, time.time())
        assert (report.archived, report.deleted) == ([], [])
        assert await history.query(AppQuery()) == ([], 0)
    finally:
        await history.close()


async def test_a_pass_reads_again_only_the_running_apps_whose_status_changed(store, prefix,
                                                                             tmp_path):
    """The archiver keeps the applications it saw running: a pass reads the status of those
    alone that were written since (thousands queued cost a pass nothing), and archives one
    that has ended since."""
    history = SqlHistory(f"sqlite:///{tmp_path}/history.db", prefix)
    settings = settings_of(prefix, tmp_path)
    unended = Unended()
    try:
        for app_id in ("waits-1", "waits-2", "ends-1"):
            await record_app(store, prefix, app_id, submitted=time.time(),
                             state=AppState.QUEUED)
        first = await observe(store, settings, history, unended)
        assert sorted(f.app_id for f in first) == ["ends-1", "waits-1", "waits-2"]
        assert unended.apps == {"ends-1", "waits-1", "waits-2"}
        assert await observe(store, settings, history, unended) == [], "read again unchanged"

        keys = AppKeys(prefix, "ends-1")
        status = decode(AppStatus, (await store.get(keys.status)).value)
        await store.put(keys.status, encode(advance(status, AppState.KILLED)))
        report = await archive_pass(store, settings, history, time.time(), unended)
        assert report.archived == ["ends-1"]
        assert unended.apps == {"waits-1", "waits-2"}
        # One that has ended is read at every pass, until its retention deletes its keys.
        assert [f.app_id for f in await observe(store, settings, history, unended)] == [
            "ends-1"]
    finally:
        await history.close()


async def test_a_leader_record_on_no_lease_holds_neither_archiving_nor_deletion_back(
        store, prefix, tmp_path):
    """An AM's record is always on its lease; one on none was written by the application's
    own identity, and would otherwise keep its keys in etcd for ever."""
    history = SqlHistory(f"sqlite:///{tmp_path}/history.db", prefix)
    try:
        keys = await record_app(store, prefix, "ended-1", submitted=LONG_AGO)
        await store.put(keys.leader, encode(AmLeader(am_id="forged", host="x", pid=1,
                                                     since=LONG_AGO)))
        report = await archive_pass(store, settings_of(prefix, tmp_path, retention=1), history,
                                    time.time())
        assert (report.archived, report.deleted) == (["ended-1"], ["ended-1"])
        assert await keys_left(store, keys) == 0
    finally:
        await history.close()


async def _unusable(kind: str, path: Path, prefix: str) -> tuple[SqlHistory, object]:
    """A history whose database is missing, read-only or locked, and what holds the lock."""
    if kind == "missing":
        return SqlHistory(f"sqlite:///{path.parent}/gone/history.db", prefix), None
    created = SqlHistory(f"sqlite:///{path}", prefix)
    await created.query(AppQuery())  # the database and its table exist
    await created.close()
    if kind == "read-only":
        return SqlHistory(f"sqlite:///file:{path}?mode=ro&uri=true", prefix), None
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    return SqlHistory(f"sqlite:///{path}", prefix, busy_timeout=0.2), holder


@pytest.mark.parametrize(("kind", "says"), [("missing", "does not exist"),
                                            ("read-only", "read-only"),
                                            ("locked", "locked")])
async def test_an_unusable_history_is_a_clear_error_and_nothing_is_deleted(store, prefix,
                                                                          tmp_path, kind, says):
    keys = await record_app(store, prefix, "kept-1", submitted=LONG_AGO)
    history, holder = await _unusable(kind, tmp_path / "history.db", prefix)
    try:
        with pytest.raises(HistoryUnavailableError) as raised:
            await archive_pass(store, settings_of(prefix, tmp_path), history, time.time())
        message = str(raised.value)
        assert message.startswith("history database sqlite:///") and says in message
        assert "history.db" in message
        assert await keys_left(store, keys) > 0
    finally:
        if isinstance(holder, sqlite3.Connection):
            holder.close()
        await history.close()


# ---- Reads through the history ------------------------------------------------------------------

async def test_find_apps_merges_live_and_archived_apps_and_pages_exactly(store, prefix,
                                                                         tmp_path):
    settings = settings_of(prefix, tmp_path)
    history = SqlHistory(f"sqlite:///{tmp_path}/history.db", prefix)
    service = ApplicationService(store, settings, history)
    where = {}  # app id -> archived
    try:
        for number in range(14):
            app_id, kind = f"app{number % 3}-{number:02d}", number % 4
            submitted = LONG_AGO + (number // 2)  # pairs submitted at once: ties by id
            state = AppState.RUNNING if kind == 0 else (
                AppState.FAILED if number % 5 == 0 else AppState.SUCCEEDED)
            await record_app(store, prefix, app_id, submitted=submitted, state=state,
                             led=kind == 0, user="bob" if number % 2 else "alice",
                             name=f"app{number % 3}", queue="gpu" if number % 3 else None)
            if kind >= 2:  # archived; kind 3: its keys deleted too
                archived = await archive_app(store, settings, history, app_id)
                if kind == 3:
                    assert await delete_keys(store, settings, app_id, archived.status_revision)
            where[app_id] = kind >= 2
        ordered = sorted(where, key=lambda a: (LONG_AGO + int(a[-2:]) // 2, a), reverse=True)
        for query in (AppQuery(limit=3), AppQuery(user="bob", limit=2),
                      AppQuery(state=AppState.SUCCEEDED, limit=4), AppQuery(queue="gpu"),
                      AppQuery(name="app1", limit=1)):
            listed = {s.status.app_id: s for s in await service.list_apps(include_history=True)}
            expected = []
            for app_id in ordered:
                summary = listed[app_id]
                if query.matches(summary.status.state, summary.status.user, summary.queue,
                                 summary.status.name):
                    expected.append(app_id)
            for offset in range(len(expected) + 2):
                page = await service.find_apps(AppQuery(**{**query.__dict__,
                                                           "offset": offset}))
                assert page.total == len(expected), query
                assert [s.status.app_id for s in page.items] == \
                    expected[offset:offset + query.limit], (query, offset)
                assert all(s.archived == where[s.status.app_id] for s in page.items)
        everything = await service.list_apps(include_history=True)
        assert [s.status.app_id for s in everything] == ordered
        assert {s.queue for s in everything} == {"default", "gpu"}

        gone = "app0-03"  # number 3: archived, then its keys deleted
        assert await keys_left(store, AppKeys(prefix, gone)) == 0
        report = await service.get_app(gone)
        assert report.archived and report.leader is None
        assert report.view.status.state.terminal and len(report.events) == 3
        with pytest.raises(AppNotFoundError):
            await service.get_app("nowhere-1")
    finally:
        await history.close()


# ---- The server ---------------------------------------------------------------------------------

def _write(etcd_url: str, body) -> None:
    async def run() -> None:
        store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(etcd_url,)))
        try:
            await body(store)
        finally:
            await store.close()
    asyncio.run(run())


def _archived_ids(path: Path, prefix: str) -> set[str]:
    async def run() -> set[str]:
        history = SqlHistory(f"sqlite:///{path}", prefix)
        try:
            return await history.contains(["served-1"]) if path.exists() else set()
        finally:
            await history.close()
    return asyncio.run(run())


def test_the_server_archives_an_application_when_it_ends(primus_env, prefix, tmp_path):
    etcd_url = primus_env["PRIMUS_ETCD"]
    _write(etcd_url, lambda store: record_app(store, prefix, "served-1", submitted=time.time(),
                                              state=AppState.RUNNING, led=True))
    server = start_server(primus_env, tmp_path)
    try:
        keys = AppKeys(prefix, "served-1")

        async def end(store: Coordinator) -> None:
            status = decode(AppStatus, (await store.get(keys.status)).value)
            await store.put(keys.status, encode(advance(status, AppState.SUCCEEDED,
                                                        finish_time=time.time(), exit_code=0)))
            await store.delete(keys.leader)
        database = tmp_path / "home" / "history" / "history.db"
        assert _archived_ids(database, prefix) == set()
        _write(etcd_url, end)
        wait_until(lambda: _archived_ids(database, prefix), 15,
                   "the server to archive the application that ended")
    finally:
        server.stop()


def test_the_server_keeps_serving_when_its_history_is_unusable(primus_env, prefix, tmp_path):
    missing = tmp_path / "nowhere" / "history.db"
    Path(primus_env["PRIMUS_CONF"]).write_text(f"history: {{url: 'sqlite:///{missing}'}}\n")
    _write(primus_env["PRIMUS_ETCD"], lambda store: record_app(store, prefix, "ended-1",
                                                               submitted=LONG_AGO))
    server = start_server(primus_env, tmp_path)
    try:
        with Client(server.address, plaintext=True) as client:
            assert [app.status.app_id for app in client.list_apps()] == ["ended-1"]
            with pytest.raises(ApiError) as raised:
                list(client.list_apps(include_history=True))
            assert raised.value.code is grpc.StatusCode.UNAVAILABLE
            assert f"history database sqlite:///{missing}" in str(raised.value)
            with pytest.raises(ApiError) as raised:
                client.get_app("gone-1")
            assert raised.value.code is grpc.StatusCode.UNAVAILABLE
        wait_until(lambda: "does not exist" in server.log.read_text(), 10,
                   "the server to log that its history database is missing")
        with Client(server.address, plaintext=True) as client:
            assert [app.status.app_id for app in client.list_apps()] == ["ended-1"]
        assert count_keys(primus_env["PRIMUS_ETCD"], AppKeys(prefix, "ended-1")) > 0
    finally:
        server.stop()
