"""Whether an AM leads an application, and how status and list show one that no AM leads."""

from __future__ import annotations

import io
import os
import socket
import subprocess

import pytest
from rich.console import RenderableType

from primus.cli import output
from primus.client.api import AppReport, AppSummary, Revived, leaderless
from primus.config.spec import JobSpec
from primus.processes import start_time_of
from primus.state.keys import AppKeys
from primus.state.records import AmLeader, AppStatus
from primus.state.states import AppState
from primus.state.view import AppView, ExecutorView

HERE = socket.gethostname()


def status(state: AppState = AppState.RUNNING) -> AppStatus:
    return AppStatus(app_id="app-1", name="app", state=state, submit_time=1.0)


def leader(pid: int, start_time: float, host: str = HERE) -> AmLeader:
    return AmLeader(am_id=f"{host}:{pid}", host=host, pid=pid, since=1.0, start_time=start_time)


@pytest.fixture
def exited() -> AmLeader:
    """The leader record of an AM process of this host that has exited."""
    process = subprocess.Popen(["sleep", "60"])
    started = start_time_of(process.pid)
    process.kill()
    process.wait()
    return leader(process.pid, started)


def test_an_app_that_has_not_ended_and_has_no_leader_key_is_leaderless():
    assert leaderless(status(AppState.RUNNING), None)
    assert leaderless(status(AppState.SUBMITTED), None)


@pytest.mark.parametrize("state", [AppState.SUCCEEDED, AppState.FAILED, AppState.KILLED])
def test_an_ended_app_is_never_leaderless(state, exited):
    assert not leaderless(status(state), None)
    assert not leaderless(status(state), exited)


def test_a_leader_key_naming_a_running_am_process_of_this_host_leads():
    assert not leaderless(status(), leader(os.getpid(), start_time_of(os.getpid())))


def test_a_leader_key_naming_an_exited_process_of_this_host_leads_nothing(exited):
    assert leaderless(status(), exited)


def test_a_leader_key_naming_a_recycled_pid_leads_nothing():
    assert leaderless(status(), leader(os.getpid(), start_time_of(os.getpid()) - 100))


def test_a_leader_on_another_host_or_without_a_start_time_is_taken_at_its_word(exited):
    assert not leaderless(status(), leader(exited.pid, exited.start_time, host="elsewhere"))
    assert not leaderless(status(), leader(exited.pid, 0.0))


def render(renderable: RenderableType) -> str:
    console = output.make_console(file=io.StringIO(), width=300)
    console.print(renderable)
    return console.file.getvalue()


def report(am: AmLeader | None) -> AppReport:
    spec = JobSpec.model_validate({"name": "app", "roles": [{"name": "w", "command": "x"}]})
    view = AppView(keys=AppKeys("/p", "app-1"), submitted=spec, status=status(),
                   executors={("w", 0): ExecutorView()})
    return AppReport(view, am, [], revision=1, hosts=[], am_log="")


def test_status_of_an_app_no_am_leads_says_so_and_how_to_recover_or_end_it(exited):
    for am, gone in ((None, "none: "), (exited, f"none ({HERE} pid {exited.pid} no longer runs)")):
        shown = render(output.status_renderable(report(am)))
        assert "RUNNING (no AM leads)" in shown
        assert gone in shown
        assert "`primus recover app-1` starts one, `primus kill app-1` ends the app" in shown


def test_status_of_an_app_an_am_leads_shows_the_am_and_no_note():
    shown = render(output.status_renderable(report(leader(os.getpid(),
                                                          start_time_of(os.getpid())))))
    assert f"{HERE} pid {os.getpid()}" in shown
    assert "no AM leads" not in shown


def test_list_marks_the_apps_no_am_leads(exited):
    shown = render(output.apps_table([AppSummary(status(), exited),
                                      AppSummary(status(AppState.FAILED), None)]))
    running, failed = (line for line in shown.splitlines() if "app-1" in line)
    assert "RUNNING (no AM leads)" in running
    assert "FAILED" in failed and "no AM leads" not in failed


def test_a_revived_app_is_reported_with_what_was_done():
    assert render(output.revived_text(Revived("app-1"))) == \
        "no AM led app-1 when etcd came back: started an AM candidate\n"
    assert render(output.revived_text(Revived("app-1", "host down"))) == \
        "warning: no AM leads app-1 and none could be started: host down\n"
