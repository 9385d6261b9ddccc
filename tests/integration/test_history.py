"""The history store's contract (issue 13), against a real SQLite file and a real PostgreSQL
server: archiving is an upsert, an archived application rebuilds the view a live read gives,
queries filter, sort, page and count, prune deletes what finished before a date."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import create_engine, event, insert

from primus.config.site import Settings
from primus.history.api import AppQuery, History, HistoryError, HistoryUnavailableError
from primus.history.archiver import archive_app
from primus.history.sql_history import SqlHistory, apps
from primus.state.keys import AppKeys
from primus.state.records import AppStatus
from primus.state.states import AppState
from primus.state.view import AppView, read_app_keys
from primus.store.api import Coordinator
from primus.store.embedded import free_port
from tests.support.history import DATABASES, database_url, record_app


@pytest.fixture(params=DATABASES)
async def history(request: pytest.FixtureRequest, tmp_path, prefix) -> AsyncIterator[SqlHistory]:
    """An empty history of the test's deployment, in SQLite or PostgreSQL."""
    archive = SqlHistory(database_url(request.param, request, str(tmp_path)), prefix)
    yield archive
    await archive.close()


def settings_of(prefix: str, tmp_path) -> Settings:
    return Settings(home=tmp_path / "home", prefix=prefix)


async def archived(store: Coordinator, history: History, prefix: str, tmp_path,
                   app_id: str, **fields) -> AppKeys:
    keys = await record_app(store, prefix, app_id, **fields)
    assert await archive_app(store, settings_of(prefix, tmp_path), history, app_id)
    return keys


async def test_archiving_an_application_twice_leaves_one_row(store, prefix, history,
                                                              tmp_path):
    await archived(store, history, prefix, tmp_path, "twice-1", submitted=100.0)
    await archive_app(store, settings_of(prefix, tmp_path), history, "twice-1")
    rows, total = await history.query(AppQuery())
    assert total == 1 and [row.app_id for row in rows] == ["twice-1"]
    assert await history.contains(["twice-1", "other-1"]) == {"twice-1"}


async def test_an_archived_application_rebuilds_the_view_a_live_read_gives(store, prefix,
                                                                            history, tmp_path):
    keys = await archived(store, history, prefix, tmp_path, "view-1", submitted=100.0,
                          state=AppState.FAILED, queue="gpu")
    live = AppView.from_snapshot(keys, await read_app_keys(store, keys))
    record = await history.get("view-1")
    assert record is not None
    assert AppView.from_snapshot(keys, record.snapshot) == live
    # The keys as archived, those in etcd now (the revision is the store's, which other
    # writers move on)
    assert record.snapshot.kvs == (await read_app_keys(store, keys)).kvs
    assert (record.state, record.queue, record.exit_code, record.diagnosis) == (
        AppState.FAILED, "gpu", 1, "worker-1 failed")
    assert await history.get("view-2") is None


async def test_a_query_filters_sorts_newest_first_pages_and_counts(store, prefix, history,
                                                                    tmp_path):
    for number, (user, state, queue, name) in enumerate([
            ("alice", AppState.SUCCEEDED, "default", "train"),
            ("bob", AppState.FAILED, "gpu", "train_big"),
            ("alice", AppState.KILLED, "gpu", "eval"),
            ("carol", AppState.SUCCEEDED, "default", "trainxbig"),
            ("alice", AppState.SUCCEEDED, "gpu", "train")]):
        await archived(store, history, prefix, tmp_path, f"{name}-{number}",
                       submitted=1000.0 + number, user=user, state=state,
                       queue=None if queue == "default" else queue, name=name)

    async def ids(**fields) -> tuple[list[str], int]:
        rows, total = await history.query(AppQuery(**fields))
        return [row.app_id for row in rows], total

    assert await ids() == (["train-4", "trainxbig-3", "eval-2", "train_big-1", "train-0"], 5)
    assert await ids(offset=1, limit=2) == (["trainxbig-3", "eval-2"], 5)
    assert await ids(offset=5) == ([], 5)
    assert await ids(user="alice") == (["train-4", "eval-2", "train-0"], 3)
    assert await ids(state=AppState.SUCCEEDED, queue="default") == (
        ["trainxbig-3", "train-0"], 2)
    assert await ids(name="train") == (["train-4", "trainxbig-3", "train_big-1", "train-0"], 4)
    assert await ids(name="%") == ([], 0), "% is a character, not a wildcard"
    assert await ids(name="n_b") == (["train_big-1"], 1), "_ is a character, not a wildcard"
    assert await ids(name="EVAL") == (["eval-2"], 1)
    assert await ids(user="alice", queue="gpu", limit=1) == (["train-4"], 2)
    assert await ids(newer_than=(1002.0, "eval-2")) == (["train-4", "trainxbig-3"], 2)


async def test_prune_deletes_the_applications_that_finished_before_a_date(store, prefix,
                                                                         history, tmp_path):
    for number in range(4):
        await archived(store, history, prefix, tmp_path, f"old-{number}",
                       submitted=1000.0 * number, finished=1000.0 * number + 10)
    assert await history.prune(2000.0) == 2
    assert (await history.contains([f"old-{n}" for n in range(4)])) == {"old-2", "old-3"}
    assert await history.prune(2000.0) == 0


async def test_histories_of_two_deployments_in_one_database_do_not_mix(store, prefix, history,
                                                                       tmp_path):
    await archived(store, history, prefix, tmp_path, "mine-1", submitted=1.0)
    other = SqlHistory(history.url.render_as_string(hide_password=False), prefix + "-other")
    try:
        assert await other.query(AppQuery()) == ([], 0)
        assert await other.get("mine-1") is None and await other.prune(time.time()) == 0
    finally:
        await other.close()
    assert await history.contains(["mine-1"]) == {"mine-1"}


@pytest.mark.parametrize("kind", DATABASES)
async def test_a_page_of_50_among_10000_applications_holds_exactly_its_rows(
        request, tmp_path, kind):
    """How fast is for bench/bench_ui.py to measure; here, that deep and filtered pages of a
    long history hold the right rows and totals."""
    url = database_url(kind, request, str(tmp_path))
    history = SqlHistory(url, "/bench")
    try:
        await history.query(AppQuery())  # creates the table
        row = {"prefix": "/bench", "queue": "default", "diagnosis": "", "start_time": None,
               "exit_code": 0, "archived_revision": 1, "status_revision": 1, "kvs": "[]"}
        rows = [{**row, "app_id": f"app-{n:05d}", "name": f"job{n % 7}",
                 "user": f"user{n % 13}", "state": "SUCCEEDED" if n % 3 else "FAILED",
                 "submit_time": float(n), "finish_time": float(n + 5)} for n in range(10_000)]
        for r in rows:
            r["status"] = AppStatus(app_id=r["app_id"], name=r["name"], user=r["user"],
                                    state=AppState(r["state"]), submit_time=r["submit_time"],
                                    finish_time=r["finish_time"]).model_dump_json()
        engine = create_engine(history.url)
        with engine.begin() as connection:
            connection.execute(insert(apps), rows)
        engine.dispose()
        newest_first = sorted(rows, key=lambda r: r["submit_time"], reverse=True)
        for query in (AppQuery(offset=5000, limit=50), AppQuery(user="user3", limit=50),
                      AppQuery(state=AppState.FAILED, name="job1", offset=100, limit=50)):
            matching = [r["app_id"] for r in newest_first
                        if query.matches(AppState(r["state"]), r["user"], r["queue"],
                                         r["name"])]
            page, total = await history.query(query)
            assert [a.app_id for a in page] == matching[query.offset:query.offset + 50]
            assert total == len(matching)
    finally:
        await history.close()


@pytest.mark.parametrize("fields", [{"limit": 0}, {"limit": 501}, {"offset": -1},
                                    {"limit": True}])
def test_a_query_out_of_range_is_refused_naming_the_field(fields):
    with pytest.raises(HistoryError, match=next(iter(fields))):
        AppQuery(**fields)


async def test_an_unreachable_postgresql_is_unavailable_naming_it_without_its_password(
        prefix):
    port = free_port()
    history = SqlHistory(f"postgresql://primus:hunter2@127.0.0.1:{port}/primus", prefix)
    try:
        with pytest.raises(HistoryUnavailableError) as raised:
            await history.query(AppQuery())
    finally:
        await history.close()
    message = str(raised.value)
    assert message.startswith(f"history database postgresql+psycopg://primus:***@127.0.0.1:"
                              f"{port}/primus: cannot list applications (")
    assert "hunter2" not in message and "history.url" in message


def test_a_url_of_another_database_is_refused_naming_history_url():
    with pytest.raises(HistoryError, match="history.url: scheme 'mysql"):
        SqlHistory("mysql://root:secret@db/primus", "/p")



async def test_a_table_another_process_created_between_the_check_and_the_create_is_used(
        tmp_path, prefix):
    path = tmp_path / "history.db"
    url = f"sqlite:///{path}"
    other = create_engine(url)

    created: list[str] = []

    def the_other_process_first(target, connection, **_) -> None:  # type: ignore[no-untyped-def]
        if not created:  # once: the other's create comes through here too
            created.append("asked")
            apps.create(other, checkfirst=True)  # the table appears after this one checked
            created.append("created by the other")

    event.listen(apps, "before_create", the_other_process_first)
    history = SqlHistory(url, prefix)
    try:
        assert await history.contains(["nothing"]) == set()
        assert created == ["asked", "created by the other"]
    finally:
        event.remove(apps, "before_create", the_other_process_first)
        await history.close()
        other.dispose()
