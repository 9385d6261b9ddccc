"""What each key of an application holds (``state/view.app_key``), the one dispatch that the
AM's view and a watch's changes both fold keys by; and how both read the same write."""

from __future__ import annotations

import pytest

from primus.client.api import AppReport
from primus.client.watch import ExecutorChanged, StreamChanged, _Folder
from primus.config.spec import JobSpec
from primus.state.keys import AppKeys
from primus.state.records import AppStatus, ExecutorPlan, StreamStats, encode
from primus.state.states import AppState, ExecutorState
from primus.state.view import AppKey, AppView, KeyKind, app_key
from primus.store.api import EventType, WatchEvent

KEYS = AppKeys("/primus", "train-1")
SCHEDULER = KEYS.scheduler
JOB = JobSpec.model_validate({"name": "train", "roles": [
    {"name": "worker", "num": 2, "command": "train"}],
    "data": [{"name": "clicks", "roles": ["worker"], "sources": [{"path": "/d/clicks*"}]}]})
STATUS = AppStatus(app_id="train-1", name="train", state=AppState.RUNNING, user="alice",
                   submit_host="h1", submit_time=1_800_000_000.0)


@pytest.mark.parametrize(("key", "expected"), [
    (KEYS.status, AppKey(KeyKind.STATUS)),
    (KEYS.leader, AppKey(KeyKind.LEADER)),
    (KEYS.cluster, AppKey(KeyKind.CLUSTER)),
    (KEYS.kill, AppKey(KeyKind.KILL)),
    (KEYS.suspend, AppKey(KeyKind.SUSPEND)),
    (KEYS.blacklist, AppKey(KeyKind.BLACKLIST)),
    (KEYS.hang, AppKey(KeyKind.HANG)),
    (KEYS.event(7), AppKey(KeyKind.EVENT)),
    (KEYS.stream("clicks").stats, AppKey(KeyKind.STREAM, stream="clicks")),
    (KEYS.stack(3, "worker", 1), AppKey(KeyKind.STACK, "worker", 1, hang=3)),
    (KEYS.desired("worker"), AppKey(KeyKind.ROLE, "worker")),
    (KEYS.role_removed("ps"), AppKey(KeyKind.ROLE, "ps")),
    (KEYS.added_source("clicks", 2), AppKey(KeyKind.SOURCE)),
    (KEYS.change(2), AppKey(KeyKind.CHANGE)),
    (KEYS.executor("worker", 1, "plan"), AppKey(KeyKind.PLAN, "worker", 1)),
    (KEYS.executor("worker", 1, "live"), AppKey(KeyKind.LIVE, "worker", 1)),
    (KEYS.executor("worker", 1, "result"), AppKey(KeyKind.RESULT, "worker", 1)),
    (SCHEDULER.request("train-1"), AppKey(KeyKind.REQUEST)),
    (SCHEDULER.waiting("train-1"), AppKey(KeyKind.WAITING)),
    (SCHEDULER.preempt("train-1"), AppKey(KeyKind.PREEMPT)),
    (SCHEDULER.evict("train-1"), AppKey(KeyKind.EVICT)),
    (SCHEDULER.reservation("train-1", "worker", 1), AppKey(KeyKind.RESERVATION, "worker", 1)),
])
def test_each_key_of_an_application_is_recognised_with_what_it_names(key, expected):
    assert app_key(KEYS, key) == expected


@pytest.mark.parametrize("key", [
    KEYS.spec, KEYS.hosts, KEYS.notifications + "slack",
    KEYS.stream("clicks").key("tasks", "0-1"), KEYS.stream("clicks").scan,
    KEYS.executors + "worker/1/unknown",
    SCHEDULER.request("train-2"), SCHEDULER.reservation("train-2", "worker", 1),
    SCHEDULER.host("h1"),
])
def test_keys_no_view_reads_and_other_applications_keys_are_not_recognised(key):
    assert app_key(KEYS, key) is None


def test_the_view_and_a_watch_fold_the_same_writes_into_the_same_records():
    plan = ExecutorPlan(role="worker", index=1, attempt=0, host="h1", address="h1:7000",
                        state=ExecutorState.PLANNED)
    stats = StreamStats(tasks=10, done=4)
    writes = [(KEYS.executor("worker", 1, "plan"), encode(plan)),
              (KEYS.stream("clicks").stats, encode(stats))]
    view = AppView(KEYS, JOB, STATUS)
    for key, value in writes:
        view.observe_put(key, value)
    folder = _Folder(KEYS, AppReport(AppView(KEYS, JOB, STATUS), None, [], 1, [], ""), {})
    update = folder.fold([WatchEvent(EventType.PUT, key, value, 2) for key, value in writes])
    assert update.changes == [ExecutorChanged(("worker", 1), view.executors[("worker", 1)]),
                              StreamChanged("clicks", view.streams["clicks"])]
