"""Hangs: when the AM handles one and how it says where the ranks stand
(``primus/am/hangs.py``), what a job may ask for (``hang_timeout``, ``on_hang``), when a
trainer counts as active (``primus/executor/hang.py``), and where a trainer stands by its stacks:
its own frame that called into a library, or, in a process that is not Python, what its threads
wait in (``primus/executor/stacks.py``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from primus.am.hangs import HANGS_KEPT, STACKS_WAIT, hang_action, summarize
from primus.am.reconcile import SetAppState, decide
from primus.config.loader import SpecError, load_job_text
from primus.config.spec import JobSpec
from primus.executor import stacks
from primus.executor.hang import HangWatch, check_interval
from primus.state.keys import AppKeys
from primus.state.records import (
    AppStatus,
    ExecutorPlan,
    HangReport,
    TrainerStacks,
    encode,
)
from primus.state.states import AppState, ExecutorState
from primus.state.view import AppView

NOW = 1_000_000.0
KEYS = AppKeys("/p", "app")


def job(on_hang: str = "report", num: int = 3) -> JobSpec:
    return load_job_text(f"""
name: hangs
roles:
  - name: worker
    num: {num}
    command: python3 train.py
    hang_timeout: 30s
    on_hang: {on_hang}
""", "job.yaml", None)


def running_view(spec: JobSpec) -> AppView:
    view = AppView(KEYS, spec, AppStatus(app_id="app", name="hangs", state=AppState.RUNNING,
                                         submit_time=NOW - 100))
    view._topology_changed()
    for index in range(spec.roles[0].num):
        view.observe_put(KEYS.executor("worker", index, "plan"), encode(ExecutorPlan(
            role="worker", index=index, attempt=1, host=f"h{index}", address=f"h{index}",
            state=ExecutorState.RUNNING)))
    return view


def report(hang: int = 1, handled: bool = False) -> HangReport:
    return HangReport(id=hang, role="worker", index=1, host="h1", idle=31, time=NOW,
                      handled=handled)


def stack(index: int, where: str, host: str = "") -> TrainerStacks:
    return TrainerStacks(role="worker", index=index, attempt=1, host=host or f"h{index}",
                         idle=31, where=where, text=f"Thread 1\n    {where}\n")


def give(view: AppView, hang: int, index: int, where: str) -> None:
    view.observe_put(KEYS.stack(hang, "worker", index), encode(stack(index, where)))


def test_the_rank_outside_the_collective_is_named_first_and_the_rest_counted():
    given = {("worker", i): stack(i, "all_reduce (distributed_c10d.py:2501)") for i in (0, 2)}
    given[("worker", 1)] = stack(1, "load_batch (train.py:40)")
    assert summarize(report(), given, []) == (
        "worker-1 on h1 idle for 31s; worker-1 on h1 in `load_batch (train.py:40)`; the other "
        "2 in `all_reduce (distributed_c10d.py:2501)`")


def test_ranks_that_agree_are_said_together_and_those_without_stacks_named():
    given = {("worker", i): stack(i, "barrier (c10d.py:9)") for i in range(2)}
    summary = summarize(report(), given, [("worker", 2)])
    assert summary.endswith("all 2 in `barrier (c10d.py:9)`; no stacks from worker-2")


def test_among_collectives_the_fewest_come_first():
    given = {("worker", i): stack(i, "barrier (c10d.py:9)") for i in range(7)}
    given[("worker", 7)] = stack(7, "all_reduce (c10d.py:20)", host="h2")
    assert "worker-7 on h2 in `all_reduce (c10d.py:20)`; the other 7 in `barrier" in \
        summarize(report(), given, [])


def test_the_am_waits_for_every_ranks_stacks_then_reports_once():
    view = running_view(job())
    view.observe_put(KEYS.hang, encode(report()))
    give(view, 1, 0, "a (t.py:1)")
    give(view, 1, 1, "b (t.py:2)")
    assert hang_action(view, NOW + 1) is None, "worker-2's stacks are not in yet"
    give(view, 1, 2, "a (t.py:1)")
    action = hang_action(view, NOW + 1)
    assert action is not None and not action.restart and not action.fail
    assert "worker-1 on h1 in `b (t.py:2)`; the other 2 in `a (t.py:1)`" in action.summary
    view.observe_put(KEYS.hang, encode(report(handled=True)))
    assert hang_action(view, NOW + 2) is None


def test_stacks_still_missing_after_the_wait_are_named_missing():
    view = running_view(job(num=2))
    view.observe_put(KEYS.hang, encode(report()))
    give(view, 1, 0, "a (t.py:1)")
    action = hang_action(view, NOW + STACKS_WAIT)
    assert action is not None and action.summary.endswith("no stacks from worker-1")


def test_on_hang_fail_fails_the_application_saying_where_the_ranks_stood():
    view = running_view(job("fail", num=1))
    view.observe_put(KEYS.hang, encode(report()))
    give(view, 1, 0, "step (t.py:5)")
    failed = [a for a in decide(view, NOW + 1, []) if isinstance(a, SetAppState)]
    assert failed and failed[0].state is AppState.FAILED
    assert failed[0].diagnosis.startswith("HUNG: worker-1 on h1 idle for 31s; worker-0 on h0 "
                                          "in `step (t.py:5)`")


def test_on_hang_restart_asks_for_the_restart_and_old_hangs_are_forgotten():
    view = running_view(job("restart", num=1))
    latest = HANGS_KEPT + 2
    for hang in range(1, latest + 1):
        give(view, hang, 0, "x (t.py:1)")
    view.observe_put(KEYS.hang, encode(report(latest)))
    action = hang_action(view, NOW + 1)
    assert action is not None and action.restart
    assert action.forget == (1, 2)


@pytest.mark.parametrize(("field", "value", "words"), [
    ("hang_timeout", "2s", "must be at least policy.heartbeat_ttl (10s)"),
    ("on_hang", "ignore", "report"),
])
def test_bad_hang_settings_are_refused_naming_the_field(field, value, words):
    with pytest.raises(SpecError) as refused:
        load_job_text(f"name: j\nroles:\n  - name: w\n    command: x\n    {field}: {value}\n",
                      "job.yaml", None)
    assert f"roles[0].{field}" in str(refused.value) and words in str(refused.value)


def test_a_watch_looks_a_few_times_per_timeout_within_bounds():
    assert check_interval(2) == 0.5 and check_interval(10) == 2.5 and check_interval(600) == 5


def test_output_data_and_progress_reports_each_count_as_activity(tmp_path):
    log, progress = tmp_path / "trainer.log", tmp_path / "progress"
    log.write_text("")
    progress.write_text("")
    old = time.time() - 100
    for path in (log, progress):
        os.utime(path, (old, old))
    watch = HangWatch(None, KEYS, job().roles[0], 0, 1, "h0", 1, str(log), str(progress))
    watch.started = old
    assert watch.last_active() == pytest.approx(old)
    watch.note_data()
    assert watch.last_active() > old + 99
    watch.data_at = 0.0
    os.utime(progress)
    assert watch.last_active() > old + 99
    os.utime(progress, (old, old))
    with log.open("a") as out:
        out.write("step 10\n")
    assert watch.last_active() > old + 99


def test_a_process_that_is_not_python_shows_where_its_threads_wait_in_the_kernel():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while open(f"/proc/{sleeper.pid}/wchan").read() in ("", "0") and \
                time.monotonic() < deadline:
            time.sleep(0.01)  # the kernel's own state: no event says it went to sleep
        taken = asyncio.run(stacks.take(sleeper.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not taken.python
    assert taken.where.startswith("sleep waiting in ") and "nanosleep" in taken.where
    assert f"Process {sleeper.pid}: sleep 60 (not Python: the kernel's view)" in taken.text


def frame(name: str, filename: str, line: int) -> dict[str, object]:
    """A frame as py-spy's JSON dump gives it."""
    return {"name": name, "filename": filename, "short_filename": os.path.basename(filename),
            "line": line}


def test_where_names_the_trainers_own_frame_then_the_library_frame_it_waits_in():
    lib = "/usr/lib/python3.11"
    event_wait = [frame("wait", f"{lib}/threading.py", 327),
                  frame("wait", f"{lib}/threading.py", 629),
                  frame("wait_for_ever", "/home/alice/job/ddp_hang.py", 6),
                  frame("<module>", "/home/alice/job/ddp_hang.py", 9)]
    assert stacks.where_in({"frames": event_wait}) == \
        "wait_for_ever (ddp_hang.py:6) → wait (threading.py:327)"
    in_torch = [frame("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/"
                                    "distributed_c10d.py", 2501),
                frame("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241),
                frame("main", "/work/train.py", 40)]
    assert stacks.where_in({"frames": in_torch}) == \
        "main (train.py:40) → all_reduce (distributed_c10d.py:2501)"
    own = [frame("wait_for_ever", "/home/alice/job/ddp_hang.py", 6)]
    assert stacks.where_in({"frames": own}) == "wait_for_ever (ddp_hang.py:6)"
    only_library = [frame("run", "/usr/lib/python3/dist-packages/torch/run.py", 7)]
    assert stacks.where_in({"frames": only_library}) == "run (run.py:7)"
    assert stacks.where_in({"frames": []}) == ""


WAITS_IN_A_CONDITION = """
import threading
condition = threading.Condition()
def announce():
    with condition:  # taken once the main thread waits (and so gave it up)
        print("waiting", flush=True)
def wait_for_ever():
    with condition:
        threading.Thread(target=announce).start()
        condition.wait()
wait_for_ever()
"""


def test_a_python_trainer_waiting_on_a_condition_stands_in_its_own_frame_that_waits(
        tmp_path):
    script = tmp_path / "waits.py"
    script.write_text(WAITS_IN_A_CONDITION)
    waiter = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert waiter.stdout is not None and waiter.stdout.readline() == "waiting\n"
        taken = asyncio.run(stacks.take(waiter.pid))
    finally:
        waiter.kill()
        waiter.wait()
    assert taken.python
    assert taken.where.startswith("wait_for_ever (waits.py:10) → "), taken.where
    assert taken.where.endswith(")") and "(threading.py:" in taken.where, taken.where
