"""When a data stream fails its application (``am/reconcile.py``'s ``stream_verdict``), and the
diagnosis it gives: the stream, the counts against the setting, and the first failed task with
its error, whichever setting it failed."""

from __future__ import annotations

from primus.am.reconcile import stream_verdict
from primus.config.spec import SourceSpec, StreamSpec
from primus.state.records import StreamStats
from primus.state.view import StreamFacts

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
