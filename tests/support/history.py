"""Finished applications recorded in etcd directly, as ``primus submit`` and an AM would have
left them, for the tests of the history; and the history databases the tests use."""

from __future__ import annotations

import pytest

from primus.config.spec import JobSpec
from primus.state.keys import AppKeys
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppStatus,
    ExecutorPlan,
    ExecutorResult,
    StreamStats,
    Waiting,
    encode,
)
from primus.state.states import AppState, ExecutorState
from primus.store.api import Coordinator, Put
from tests.support.postgres import PostgresServer

DATABASES = ["sqlite", "postgresql"]
"""The kinds of history database every contract test runs against."""


def database_url(kind: str, request: pytest.FixtureRequest, tmp_path_name: str) -> str:
    """A new, empty history database of ``kind``: a SQLite file, or a database of the
    session's PostgreSQL server."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path_name}/history.db"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


async def record_app(store: Coordinator, prefix: str, app_id: str, *, submitted: float,
                     state: AppState = AppState.SUCCEEDED, user: str = "alice",
                     queue: str | None = None, name: str = "train", led: bool = False,
                     finished: float | None = None) -> AppKeys:
    """Record an application with two executors, events and a data stream's stats; with
    ``led``, an AM (on another host) leads it, its record on a lease. A terminal one finished
    at ``finished`` (default: a minute after its submission)."""
    keys = AppKeys(prefix, app_id)
    spec = JobSpec.model_validate({
        "name": name, "queue": queue,
        "roles": [{"name": "worker", "num": 2, "command": "true"}],
        "data": [{"name": "train", "roles": ["worker"],
                  "sources": [{"path": "/data/*.txt"}]}]})
    terminal = state.terminal
    status = AppStatus(app_id=app_id, name=name, state=state, user=user, submit_host="here",
                       submit_time=submitted, start_time=submitted + 1,
                       finish_time=(finished or submitted + 60) if terminal else None,
                       exit_code=(0 if state is AppState.SUCCEEDED else 1) if terminal else None,
                       diagnosis="" if state is AppState.SUCCEEDED else "worker-1 failed")
    ops = [Put(keys.spec, spec.model_dump_json().encode()), Put(keys.status, encode(status)),
           Put(keys.desired("worker"), b"2"),
           Put(keys.stream("train").stats, encode(StreamStats(tasks=4, done=4, records=10))),
           Put(keys.stream("train").key("done", "0-1"), b"\x00\xff not text")]
    for seq in range(3):
        ops.append(Put(keys.event(seq), encode(AppEvent(seq=seq, time=submitted + seq,
                                                        kind="note", message=f"event {seq}"))))
    for index in range(2):
        ops.append(Put(keys.executor("worker", index, "plan"), encode(ExecutorPlan(
            role="worker", index=index, attempt=1, host="localhost", address="127.0.0.1",
            state=ExecutorState.SUCCEEDED if terminal else ExecutorState.RUNNING))))
        if terminal:
            ops.append(Put(keys.executor("worker", index, "result"), encode(ExecutorResult(
                attempt=1, exit_code=0, finish_time=submitted + 50))))
    ops.append(Put(keys.scheduler.waiting(app_id), encode(Waiting(reason="left", since=0))))
    if led:  # on a lease, as an AM's record always is
        lease = await store.grant_lease(600)
        ops.append(Put(keys.leader, encode(AmLeader(am_id="elsewhere-1", host="elsewhere",
                                                     pid=1, since=submitted)), lease=lease.id))
    await store.txn([], ops)
    return keys
