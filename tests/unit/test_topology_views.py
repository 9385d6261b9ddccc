"""How a running application's topology changes are shown: the API's Application message, the
role changes a watch folds from the topology keys, and what the CLI prints (pure functions)."""

from __future__ import annotations

import io

from primus.api import convert
from primus.cli import output
from primus.client.api import AppReport
from primus.client.topology import Changed
from primus.client.watch import RoleChanged, _Folder
from primus.config.spec import JobSpec, RoleSpec
from primus.state.keys import AppKeys
from primus.state.records import AppStatus, ExecutorPlan, encode
from primus.state.states import AppState, ExecutorState
from primus.state.topology import RoleAdded, RoleRemoved, TopologyChange
from primus.state.view import AppView
from primus.store.api import EventType, WatchEvent

KEYS = AppKeys("/primus", "train-1")
JOB = JobSpec.model_validate({"name": "train", "roles": [
    {"name": "ps", "command": "ps"}, {"name": "worker", "num": 2, "command": "train"}]})
EVALUATOR = RoleSpec.model_validate({"name": "evaluator", "num": 1, "command": "eval"})
STATUS = AppStatus(app_id="train-1", name="train", state=AppState.RUNNING, user="alice",
                   submit_host="h1", submit_time=1_800_000_000.0)


def view_with(*puts: tuple[str, bytes]) -> AppView:
    view = AppView(KEYS, JOB, STATUS)
    view.observe_put(KEYS.status, encode(STATUS))
    for key, value in puts:
        view.observe_put(key, value)
    return view


ADDED = (KEYS.role_spec("evaluator"), encode(RoleAdded(change=2, role=EVALUATOR)))
EVALUATOR_DESIRED = (KEYS.desired("evaluator"), b"1")
WORKER_SCALED = (KEYS.desired("worker"), b"3")
PS_REMOVED = (KEYS.role_removed("ps"), encode(RoleRemoved(change=3)))


def test_application_sends_the_submitted_spec_and_the_roles_as_they_are_now():
    view = view_with(WORKER_SCALED, ADDED, EVALUATOR_DESIRED, PS_REMOVED)

    message = convert.application_to_message(view, None, [], 7)

    assert JobSpec.model_validate_json(message.spec_json) == JOB
    assert [(r.name, r.desired_executors, r.removed) for r in message.roles] == [
        ("worker", 3, False), ("evaluator", 1, False)]
    assert RoleSpec.model_validate_json(message.roles[1].spec_json) == EVALUATOR


def fold(folder: _Folder, revision: int, *puts: tuple[str, bytes]) -> list:
    return folder.fold([WatchEvent(EventType.PUT, key, value, revision)
                        for key, value in puts]).changes


def test_a_watch_sends_an_added_role_scaled_roles_and_a_removed_role_once():
    report = AppReport(view_with(), None, [], 1, [], "")
    folder = _Folder(KEYS, report, {})
    log = (KEYS.change(1), encode(TopologyChange(seq=1, time=1.0, user="alice",
                                                 kind="add-role", message="added")))

    added = fold(folder, 2, ADDED, EVALUATOR_DESIRED, log)
    scaled = fold(folder, 3, WORKER_SCALED)
    removed = fold(folder, 4, PS_REMOVED)
    after_removal = fold(folder, 5, (KEYS.desired("ps"), b"4"))

    assert added == [RoleChanged(EVALUATOR, 1)]
    assert scaled == [RoleChanged(JOB.role("worker").model_copy(update={"num": 3}), 3)]
    assert removed == [RoleChanged(JOB.role("ps"), 0, removed=True)]
    assert after_removal == []


def test_a_watch_message_of_a_removed_role_says_so():
    message = convert.role_to_message(JOB.role("ps"), 0, removed=True)
    assert message.removed and message.desired_executors == 0
    assert convert.role_from_message(message) == (JOB.role("ps"), 0)


def render(renderable: object) -> str:
    console = output.make_console(file=io.StringIO(), width=300)
    console.print(renderable)
    return console.file.getvalue()


def change(seq: int, kind: str, message: str) -> TopologyChange:
    return TopologyChange(seq=seq, time=1_800_000_000.0, user="alice", kind=kind,
                          message=message, role="worker")


def test_a_scale_prints_the_old_and_new_count_and_other_changes_their_message():
    scaled = Changed(9, change(3, "scale", "role worker scaled from 2 to 4 executors"),
                     role=JOB.role("worker").model_copy(update={"num": 4}), previous=2)
    removed = Changed(10, change(4, "remove-role", "role ps removed (1 executor stopped)"))

    assert output.change_text(scaled) == "worker: 2 → 4 executors (change 3); the AM applies it"
    assert output.change_text(removed) == ("role ps removed (1 executor stopped) (change 4); "
                                           "the AM applies it")


def test_status_shows_desired_and_running_counts_and_the_changes_not_applied_yet():
    view = view_with(WORKER_SCALED, (KEYS.change(1), encode(change(
        1, "scale", "role worker scaled from 2 to 3 executors"))))
    view.executors[("worker", 0)].plan = ExecutorPlan(
        role="worker", index=0, attempt=1, host="h1", address="10.0.0.1",
        state=ExecutorState.RUNNING)

    text = render(output.status_renderable(AppReport(view, None, [], 1, [], "")))

    assert "worker ×3: 3 desired, 1 running" in text
    assert "ps ×1: 1 desired, 0 running" in text
    assert "changes the AM has yet to apply" in text
    assert "alice" in text and "role worker scaled from 2 to 3 executors" in text


def test_a_resized_role_has_its_new_cpu_and_memory_in_the_effective_spec():
    from primus.state.topology import RoleResources, effective_spec

    keys = AppKeys("/p", "a")
    spec = JobSpec.model_validate({"name": "a", "roles": [
        {"name": "worker", "command": "x", "num": 2, "cpu": 1, "memory": "1Gi"},
        {"name": "ps", "command": "x"}]})
    values = {keys.role_resources("worker"): encode(RoleResources(change=3, cpu=4,
                                                                  memory=2 << 30))}
    worker, ps = effective_spec(spec, keys, values).roles
    assert (worker.num, worker.cpu, worker.memory) == (2, 4.0, 2 << 30)
    assert (ps.cpu, ps.memory) == (spec.roles[1].cpu, spec.roles[1].memory)
