"""What the CLI prints: every string from input or from stored records is shown exactly as it is,
never read as rich markup or emoji codes, never restyled, and no stored time crashes a table."""

from __future__ import annotations

import io
import os
import pty

import pytest
from rich.console import Console, RenderableType
from rich.table import Table

from primus.cli import output
from primus.client.api import AppReport, AppSummary, HostReport
from primus.client.queues import HeldBy, HostUsage
from primus.config.inventory import Host, SshSettings
from primus.config.spec import JobSpec
from primus.scheduler.admission import free_hosts
from primus.state.keys import AppKeys
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppStatus,
    ExecutorPlan,
    Reservation,
    StreamStats,
)
from primus.state.states import AppState, ExecutorState
from primus.state.view import AppView, ExecutorView

HOSTILE = ["[/x]", "[/]", "[bold red]w[/bold red]", "[a-z]{0,31}", ":smile:", "\\[b]"]
"""Text rich would read as markup (``[/x]`` and ``[/]`` even raise), an emoji code, and an
escaped tag (rich would drop the backslash)."""

NOW = 1_800_000_000.0
ESC = "\x1b["


def console(**options: object) -> Console:
    """The console the CLI prints with, writing to a string, wide enough for every table."""
    return output.make_console(file=io.StringIO(), width=400, **options)


def render(renderable: RenderableType, **options: object) -> str:
    out = console(**options)
    out.print(renderable)
    return out.file.getvalue()


def report(text: str, *, times: float = NOW) -> AppReport:
    """An application with ``text`` in every field that holds free text, labelled by field, and
    every stored time set to ``times``."""
    spec = JobSpec.model_validate({
        "name": "job", "roles": [{"name": "worker", "num": 2, "command": "train"}],
        "data": [{"name": "train", "roles": ["worker"], "sources": [{"path": "in/*"}]}]})
    status = AppStatus(app_id=f"app={text}", name=f"name={text}", state=AppState.RUNNING,
                       user=f"user={text}", submit_host=f"submit_host={text}", submit_time=times,
                       start_time=times, finish_time=times, diagnosis=f"diagnosis={text}")
    plan = ExecutorPlan(role="worker", index=0, attempt=1, host=f"host={text}", address="10.0.0.1",
                        state=ExecutorState.FAILED, launch_time=times, release_time=times,
                        exit_code=3, diagnosis=f"executor_diagnosis={text}", restart_at=times)
    view = AppView(keys=AppKeys("/p", status.app_id), submitted=spec, status=status,
                   executors={("worker", 0): ExecutorView(plan=plan),
                              ("worker", 1): ExecutorView()},
                   streams={"train": StreamStats(tasks=4, done=1, records=10, bytes=2048)})
    leader = AmLeader(am_id="am", host=f"am_host={text}", pid=7, since=times)
    events = [AppEvent(seq=0, time=times, kind=f"kind={text}", message=f"message={text}")]
    return AppReport(view, leader, events, revision=1, hosts=[], am_log="")


def summary(app: AppReport) -> AppSummary:
    """The application as ``primus list`` reads it."""
    return AppSummary(app.view.status, app.leader)


def host(text: str) -> Host:
    return Host(name=f"name={text}", address=f"address={text}", launcher="ssh",
                ssh=SshSettings(user=f"user={text}"), python=f"python={text}",
                groups=frozenset({f"group={text}"}), labels=frozenset({f"label={text}"}))


@pytest.mark.parametrize("text", HOSTILE)
def test_status_shows_every_stored_string_exactly(text):
    shown = render(output.status_renderable(report(text), events=10))
    for field in ("app", "name", "user", "submit_host", "diagnosis", "host",
                  "executor_diagnosis", "am_host", "kind", "message"):
        assert f"{field}={text}" in shown, f"{field} not shown as stored:\n{shown}"


@pytest.mark.parametrize("text", HOSTILE)
def test_list_shows_every_stored_string_exactly(text):
    shown = render(output.apps_table([summary(report(text))]))
    for field in ("app", "name", "user"):
        assert f"{field}={text}" in shown, f"{field} not shown as stored:\n{shown}"


@pytest.mark.parametrize("text", HOSTILE)
def test_hosts_list_shows_every_inventory_string_exactly(text):
    shown = render(output.hosts_table([host(text)]))
    for field in ("name", "address", "user", "python", "group", "label"):
        assert f"{field}={text}" in shown, f"{field} not shown as given:\n{shown}"


@pytest.mark.parametrize("text", HOSTILE)
def test_hosts_check_shows_hosts_and_errors_exactly(text):
    shown = render(output.reports_table([HostReport(host(text), ok=False,
                                                    error=f"error={text}")]))
    for field in ("name", "address", "error"):
        assert f"{field}={text}" in shown, f"{field} not shown as given:\n{shown}"


@pytest.mark.parametrize("text", HOSTILE)
def test_submit_wait_progress_shows_the_app_id_exactly(text):
    shown = render(output.progress(report(text)))
    assert f"app={text} RUNNING" in shown
    assert "data train" in shown and "1/4+ tasks, 10 records, 2.0KiB" in shown


@pytest.mark.parametrize("text", HOSTILE)
def test_an_error_prints_its_message_exactly(text):
    out = console()
    output.print_line(out, output.error_text(f"job.yaml: name: got {text!r}; must match "
                                             "^[a-z0-9][a-z0-9_.-]{0,62}$"))
    assert out.file.getvalue() == (f"error: job.yaml: name: got {text!r}; must match "
                                   "^[a-z0-9][a-z0-9_.-]{0,62}$\n")


def test_a_plain_line_is_printed_exactly():
    out = console()
    output.print_line(out, "[/x] KILLED :smile:")
    assert out.file.getvalue() == "[/x] KILLED :smile:\n"


def test_each_problem_of_an_error_stays_on_its_line_on_a_narrow_console():
    problems = [f"job.yaml: roles[{i}].command: got '{'x' * 120}'; must not be empty"
                for i in range(3)]
    out = output.make_console(file=io.StringIO(), width=40)
    output.print_line(out, output.error_text("\n".join(problems)))
    assert out.file.getvalue().splitlines() == ["error: " + problems[0], *problems[1:]]


def _why(text: str) -> RenderableType:
    table = Table(box=None)
    table.add_column("APP")
    table.add_column("WHY")
    table.add_row("app-1", text)
    return table


def test_a_console_on_a_terminal_wraps_a_long_cell_at_its_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    main, tty = pty.openpty()
    with os.fdopen(tty, "w") as terminal:
        out = output.make_console(file=terminal)
        assert out.width < output.UNWRAPPED
        with out.capture() as captured:
            out.print(_why("word " * out.width))
    os.close(main)
    assert len(captured.get().splitlines()) > 2


def test_a_piped_console_wraps_nothing_unless_columns_says_a_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = output.make_console(file=io.StringIO())
    out.print(_why("word " * 100))
    assert out.file.getvalue().split() == ["APP", "WHY", "app-1", *["word"] * 100]
    assert len(out.file.getvalue().splitlines()) == 2
    monkeypatch.setenv("COLUMNS", "50")
    assert output.make_console(file=io.StringIO()).width == 50


def test_error_prefix_is_styled_and_the_message_is_not():
    shown = render(output.error_text("got 'True', 12 and 10.0.0.1 'x'"),
                   force_terminal=True, color_system="standard")
    prefix, _, message = shown.partition("error:")
    assert ESC in prefix, "the error: prefix is bold red on a terminal"
    assert ESC not in message.removeprefix(f"{ESC}0m"), f"the message was restyled: {message!r}"


def test_printed_values_are_not_highlighted_on_a_terminal():
    out = console(force_terminal=True, color_system="standard")
    output.print_line(out, "app-1 KILLED 12 10.0.0.1 'x' True None /a/b")
    assert out.file.getvalue() == "app-1 KILLED 12 10.0.0.1 'x' True None /a/b\n"
    rows = render(output.hosts_table([Host("h1", "10.0.0.1", slots=4, cpu=2.5)]),
                  force_terminal=True, color_system="standard").splitlines()
    assert ESC not in rows[1], f"a host row was restyled: {rows[1]!r}"


@pytest.mark.parametrize(("stored", "shown"), [
    (1e20, "1e+20"), (-1e20, "-1e+20"), (float("inf"), "inf"), (float("nan"), "nan"),
    (1e15, "1000000000000000.0"), (253402300800.0, "253402300800.0"),
])
def test_a_time_no_calendar_holds_is_shown_as_its_number(stored, shown):
    rendered = render(output.status_renderable(report("x", times=stored), events=10))
    assert rendered.count(shown) >= 7, rendered  # submitted, started, finished, 2 executor, event
    assert shown in render(output.apps_table([summary(report("x", times=stored))]))


def test_hosts_usage_shortens_runs_of_executors_and_gpu_devices():
    host = Host("h1", "10.0.0.1", gpus=8)
    held = [Reservation(app_id="a", user="u", queue="default", role=role, index=index,
                        host="h1", cpu=1, memory=1, gpus=gpus, since=NOW)
            for role, index, gpus in (("worker", 0, [0]), ("worker", 1, [1]), ("worker", 2, [2]),
                                      ("worker", 5, [6]), ("worker", 6, [7]), ("ps", 0, []))]
    free = free_hosts({"h1": host}, held)["h1"]

    shown = render(output.usage_table([HostUsage(host, [HeldBy("a", "u", "default", held)],
                                                 free)]))

    assert "worker[0-2,5,6],ps[0]" in shown
    assert "0-2,6,7" in shown.splitlines()[2]
    assert shown.splitlines()[3].split()[-1] == "3-5"
