"""When a data stream fails its application (``am/reconcile.py``'s ``stream_verdict``), and the
diagnosis it gives: the stream, the counts against the setting, and the first failed task with
its error, whichever setting it failed; and what an application whose trainers all succeeded
before a stream was read to its end says, or fails of (``on_unread``)."""

from __future__ import annotations

from primus.am.reconcile import SetAppState, decide, stream_verdict
from primus.config.spec import JobSpec, SourceSpec, StreamSpec
from primus.state.records import StreamStats
from primus.state.states import AppState, ExecutorState
from primus.state.view import StreamFacts
from tests.support.views import HOSTS, NOW, of_type, running, set_all

FIRST = "0001-00000003: /data/c.parquet: row group 2, rows from 62151: checksum mismatch"


def stream(**settings: float) -> StreamSpec:
    return StreamSpec(name="train", roles=["worker"], sources=[SourceSpec(path="/data")],
                      **settings)


def test_failed_tasks_over_task_failed_percent_fail_it_naming_the_first():
    facts = StreamFacts(StreamStats(tasks=4, done=2, failed=2), resolved=True,
                        first_failure=FIRST)

    assert stream_verdict(stream(task_failed_percent=25), facts) == (
        "data stream train: 2 of 4 tasks failed (50.0%, task_failed_percent 25); "
        f"first: {FIRST}")


def test_too_few_done_under_task_success_percent_fail_it_naming_the_first_failed_too():
    facts = StreamFacts(StreamStats(tasks=4, done=3, failed=1), resolved=True,
                        first_failure=FIRST)

    assert stream_verdict(stream(task_success_percent=100, task_failed_percent=50),
                          facts) == (
        "data stream train: 3 of 4 tasks done (75.0%, task_success_percent 100); "
        f"first: {FIRST}")


def test_a_stream_within_both_settings_or_not_yet_resolved_fails_nothing():
    facts = StreamFacts(StreamStats(tasks=4, done=3, failed=1), resolved=False,
                        first_failure=FIRST)

    assert stream_verdict(stream(task_success_percent=100, task_failed_percent=50),
                          facts) is None
    assert stream_verdict(stream(task_success_percent=75, task_failed_percent=50),
                          StreamFacts(facts.stats, resolved=True, first_failure=FIRST)) is None


def ended(stats: StreamStats, resolved: bool, **stream_fields: object) -> list[SetAppState]:
    """What the AM decides once the one role's executors all succeeded, the stream as given."""
    spec = JobSpec.model_validate({
        "name": "job", "roles": [{"name": "worker", "command": "train"}],
        "data": [{"name": "train", "roles": ["worker"], "sources": [{"path": "/data/*"}],
                  **stream_fields}]})
    view = set_all(running(spec), ExecutorState.SUCCEEDED)
    view.stream_facts["train"] = StreamFacts(stats, resolved=resolved)
    return of_type(decide(view, NOW, HOSTS), SetAppState)


def test_trainers_that_succeed_before_their_stream_is_read_succeed_saying_so():
    assert ended(StreamStats(tasks=2, exhausted=True), resolved=False) == [SetAppState(
        AppState.SUCCEEDED, exit_code=0,
        diagnosis="data stream train: 0 of 2 tasks read when its trainers ended")]


def test_on_unread_fail_fails_them():
    assert ended(StreamStats(tasks=5, done=1), resolved=False, on_unread="fail") == [
        SetAppState(AppState.FAILED, exit_code=1, diagnosis=(
            "data stream train: 1 of 5 tasks read when its trainers ended "
            "(on_unread: fail)"))]


def test_trainers_that_end_before_any_task_was_listed_say_that():
    assert ended(StreamStats(), resolved=False) == [SetAppState(
        AppState.SUCCEEDED, exit_code=0,
        diagnosis="data stream train: its trainers ended before any of its tasks was listed")]


def test_a_stream_read_to_its_end_lets_them_succeed_with_nothing_to_say():
    assert ended(StreamStats(tasks=2, done=2, exhausted=True), resolved=True,
                 on_unread="fail") == [SetAppState(AppState.SUCCEEDED, exit_code=0)]


def test_a_failed_share_alone_means_the_rest_must_be_done():
    said = {"name": "train", "roles": ["worker"], "sources": [{"path": "/data"}]}

    assert StreamSpec.model_validate({**said, "task_failed_percent": 25}
                                     ).task_success_percent == 75
    assert StreamSpec.model_validate({**said, "task_failed_percent": 25,
                                      "task_success_percent": 50}).task_success_percent == 50
    assert StreamSpec.model_validate(said).task_success_percent == 100
    # One task of four failed, as allowed: the stream succeeds (it failed at 100 before).
    facts = StreamFacts(StreamStats(tasks=4, done=3, failed=1), resolved=True,
                        first_failure=FIRST)
    assert stream_verdict(StreamSpec.model_validate({**said, "task_failed_percent": 25}),
                          facts) is None
