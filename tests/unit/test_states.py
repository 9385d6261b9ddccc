"""States and their transitions, the stored records, and the etcd key layout."""

from __future__ import annotations

import pytest

from primus.state.keys import AppKeys, ExecutorKey
from primus.state.records import ExecutorLive, ProcessRef, UnreadableRecordError, decode, encode
from primus.state.states import (
    APP_TRANSITIONS,
    EXECUTOR_TRANSITIONS,
    AppState,
    ExecutorState,
    IllegalTransitionError,
    check_transition,
)

KEYS = AppKeys("/primus", "app-1")

# Sorted: the tables hold sets, whose order differs between processes, and every test worker
# must collect the same tests in the same order.
LISTED = [(current, target)
          for table in (APP_TRANSITIONS, EXECUTOR_TRANSITIONS)
          for current, targets in table.items() for target in sorted(targets)]


@pytest.mark.parametrize(("current", "target"), LISTED, ids=lambda s: s.value)
def test_every_listed_transition_is_allowed(current, target):
    check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), [
    (AppState.SUCCEEDED, AppState.RUNNING),
    (AppState.RUNNING, AppState.STARTING),
    (ExecutorState.RUNNING, ExecutorState.PLANNED),
    (ExecutorState.LOST, ExecutorState.RUNNING),
], ids=lambda s: s.value)
def test_unlisted_transition_is_rejected_naming_both_states(current, target):
    with pytest.raises(IllegalTransitionError, match=f"from {current.value} to {target.value}"):
        check_transition(current, target)


@pytest.mark.parametrize("state", [*AppState, *ExecutorState], ids=lambda s: s.value)
def test_staying_in_a_state_is_allowed(state):
    check_transition(state, state)


def test_terminal_app_states_are_succeeded_failed_and_killed():
    assert {s for s in AppState if s.terminal} == {
        AppState.SUCCEEDED, AppState.FAILED, AppState.KILLED}


def test_terminal_executor_states_are_succeeded_failed_lost_and_killed():
    assert {s for s in ExecutorState if s.terminal} == {
        ExecutorState.SUCCEEDED, ExecutorState.FAILED, ExecutorState.LOST, ExecutorState.KILLED}


def test_terminal_app_states_allow_no_transition():
    assert [state for state in APP_TRANSITIONS
            if state.terminal and APP_TRANSITIONS[state]] == []


def test_ended_executor_attempts_only_allow_a_new_attempt():
    assert {state: EXECUTOR_TRANSITIONS[state] for state in EXECUTOR_TRANSITIONS
            if state.terminal} == {state: {ExecutorState.PLANNED, ExecutorState.LAUNCHED}
                                   for state in ExecutorState if state.terminal}


# --- Records ----------------------------------------------------------------------------------


LIVE = ExecutorLive(attempt=2, host="h1", address="10.0.0.1", pid=42, ports=[9000, 9001],
                    state=ExecutorState.RUNNING, registered_time=1.5,
                    trainer=ProcessRef(host="h1", pid=43, start_time=2.5))


def test_record_decodes_to_what_was_encoded():
    assert decode(ExecutorLive, encode(LIVE)) == LIVE


def test_decode_rejects_an_unknown_field():
    stored = encode(LIVE)[:-1] + b', "colour": "red"}'

    with pytest.raises(UnreadableRecordError, match="/k is stored in a form .* cannot read "
                       r"\(colour: Extra inputs are not permitted\)"):
        decode(ExecutorLive, stored, "/k")


# --- Keys -------------------------------------------------------------------------------------


def test_parse_executor_reads_role_index_and_kind():
    assert KEYS.parse_executor("/primus/apps/app-1/executors/worker/3/live") == ExecutorKey(
        "worker", 3, "live")


@pytest.mark.parametrize("key", [
    "/primus/apps/app-1/status",
    "/primus/apps/app-2/executors/worker/3/live",
    "/primus/apps/app-1/executors/worker/x/live",
    "/primus/apps/app-1/executors/worker/3",
    "/primus/apps/app-1/executors/worker/3/live/extra",
])
def test_parse_executor_rejects_other_keys(key):
    assert KEYS.parse_executor(key) is None


def test_event_keys_sort_in_sequence_order():
    seqs = [10, 9, 100, 0, 1000]

    assert sorted(KEYS.event(seq) for seq in seqs) == [KEYS.event(seq) for seq in sorted(seqs)]
