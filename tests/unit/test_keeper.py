"""Which applications the AM keeper starts an AM candidate for (primus/client/keeper.py)."""

from __future__ import annotations

import pytest

from primus.client.api import AppSummary
from primus.client.keeper import RETRY_AFTER, SUBMIT_GRACE, granted_app, orphans
from primus.state.keys import SchedulerKeys
from primus.state.records import AdmissionRequest, AmLeader, AppStatus, encode
from primus.state.states import AppState

NOW = 1_795_700_000.0
LEADER = AmLeader(am_id="vm:1", host="vm", pid=1, since=NOW - 60)


def app(state: AppState, leader: AmLeader | None = None, submitted: float = NOW - 600,
        archived: bool = False, parked: bool = False) -> AppSummary:
    return AppSummary(AppStatus(app_id=f"a-{state.value}", name="a", state=state,
                                submit_time=submitted, parked=parked), leader,
                      archived=archived)


@pytest.mark.parametrize("state", [AppState.QUEUED, AppState.STARTING, AppState.RUNNING,
                                   AppState.RESTARTING, AppState.SUBMITTED])
def test_an_application_running_without_a_leader_gets_a_candidate(state):
    assert orphans([app(state)], NOW, {}) == [f"a-{state.value}"]


@pytest.mark.parametrize("summary", [
    app(AppState.RUNNING, LEADER),
    app(AppState.SUCCEEDED), app(AppState.FAILED), app(AppState.KILLED),
    app(AppState.SUSPENDED),
    app(AppState.RUNNING, archived=True),
    app(AppState.SUBMITTED, submitted=NOW - SUBMIT_GRACE + 1),
], ids=["led", "succeeded", "failed", "killed", "suspended", "archived", "just-submitted"])
def test_an_application_led_ended_suspended_or_just_submitted_gets_none(summary):
    assert orphans([summary], NOW, {}) == []


def test_a_candidate_started_is_given_its_time_before_another():
    running = app(AppState.RUNNING)
    assert orphans([running], NOW, {"a-RUNNING": NOW - RETRY_AFTER + 1}) == []
    assert orphans([running], NOW, {"a-RUNNING": NOW - RETRY_AFTER}) == ["a-RUNNING"]


def test_a_parked_application_gets_its_am_once_admission_granted_its_request():
    parked = app(AppState.QUEUED, parked=True, submitted=NOW - 1)
    assert orphans([parked], NOW, {}) == [], "its request waits as a record"
    assert orphans([parked], NOW, {}, granted={"a-QUEUED"}) == ["a-QUEUED"]
    assert orphans([app(AppState.QUEUED, LEADER, parked=True)], NOW, {},
                   granted={"a-QUEUED"}) == [], "led already"


def test_a_request_that_does_not_read_is_not_a_grant_and_stops_nothing():
    """A request is its application's to write: garbage there is left out (and logged), never
    raised into the keeper's loop, which serves every application."""
    admission = SchedulerKeys("/p")
    key = admission.request("a-1")
    granted = AdmissionRequest(app_id="a-1", user="alice", queue="", submit_time=NOW,
                               roles=[], executors=[("worker", 0)], granted=True)
    assert granted_app(admission, key, encode(granted)) == "a-1"
    assert granted_app(admission, key, encode(granted.model_copy(
        update={"granted": False}))) == ""
    assert granted_app(admission, key, b"{not json") == ""
    assert granted_app(admission, admission.waiting("a-1"), b"{}") == ""
