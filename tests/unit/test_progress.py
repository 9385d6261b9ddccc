"""An application's progress figure (AppView.progress), as the UI and status show it."""

from __future__ import annotations

from primus.config.spec import JobSpec
from primus.state.records import StreamStats
from primus.state.states import AppState, ExecutorState
from tests.support.views import app, job, set_executor


def test_progress_without_data_is_the_share_of_executors_that_succeeded():
    view = app(job([{"name": "worker", "num": 4}]))
    assert view.progress() == 0.0
    set_executor(view, ("worker", 0), ExecutorState.SUCCEEDED)
    set_executor(view, ("worker", 1), ExecutorState.FAILED)
    assert view.progress() == 0.25


def test_a_succeeded_application_is_complete():
    view = app(job([{"name": "worker", "num": 2}]), state=AppState.SUCCEEDED)
    assert view.progress() == 1.0


def _with_stream() -> JobSpec:
    return JobSpec.model_validate({
        "name": "job", "roles": [{"name": "worker", "command": "train"}],
        "data": [{"name": "train", "roles": ["worker"], "format": "text",
                  "sources": [{"path": "/data/*.txt"}]}]})


def test_progress_with_data_is_the_share_of_tasks_ended_once_the_stream_is_exhausted():
    view = app(_with_stream())
    assert view.progress() is None, "a stream still scanning has no figure yet"
    view.streams["train"] = StreamStats(tasks=10, done=3, failed=1, exhausted=True)
    assert view.progress() == 0.4


def test_a_stream_still_finding_files_is_never_shown_complete():
    view = app(_with_stream())
    view.streams["train"] = StreamStats(tasks=10, done=10, exhausted=False)
    assert view.progress() == 0.99
