"""What a person at the terminal sees: tables, summaries and progress, rendered with rich.

Machine-readable output (``-o json``) is built here too, from the same records.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from primus.apps import AppReport
from primus.state.records import AppStatus
from primus.state.states import AppState, ExecutorState

STATE_STYLES = {
    AppState.SUCCEEDED: "green", ExecutorState.SUCCEEDED: "green",
    AppState.FAILED: "red", ExecutorState.FAILED: "red", ExecutorState.LOST: "red",
    AppState.KILLED: "yellow", ExecutorState.KILLED: "yellow",
    AppState.RUNNING: "cyan", ExecutorState.RUNNING: "cyan",
}


def _time(value: float | None) -> str:
    """Local time of day; the date too when it is not today."""
    if value is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(value)
    if moment.date() == datetime.date.today():
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _state(state: AppState | ExecutorState) -> Text:
    return Text(state.value, style=STATE_STYLES.get(state, ""))


def apps_table(statuses: list[AppStatus]) -> Table:
    """``primus list``: one row per application."""
    table = Table(box=None, header_style="bold")
    table.add_column("APP", no_wrap=True)
    for column in ("NAME", "STATE", "USER", "SUBMITTED", "FINISHED", "EXIT"):
        table.add_column(column)
    for s in statuses:
        table.add_row(s.app_id, s.name, _state(s.state), s.user, _time(s.submit_time),
                      _time(s.finish_time), "-" if s.exit_code is None else str(s.exit_code))
    return table


def status_renderable(report: AppReport) -> Group:
    """``primus status``: the application summary, then a table of executors per role."""
    status = report.view.status
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    leader = report.leader
    for label, value in (
        ("app", status.app_id), ("name", status.name), ("state", _state(status.state)),
        ("user", f"{status.user}@{status.submit_host}"),
        ("submitted", _time(status.submit_time)), ("started", _time(status.start_time)),
        ("finished", _time(status.finish_time)),
        ("exit code", "-" if status.exit_code is None else str(status.exit_code)),
        ("diagnosis", status.diagnosis or "-"),
        ("am", f"{leader.host} pid {leader.pid}" if leader else "-"),
    ):
        summary.add_row(label, value)
    parts: list[Any] = [summary]
    for role in report.view.spec.roles:
        table = Table(title=f"{role.name} ×{role.num}", title_justify="left", box=None,
                      header_style="bold")
        for column in ("INDEX", "HOST", "LAUNCHED", "RELEASED", "STATE", "EXIT", "DIAGNOSIS"):
            table.add_column(column)
        for index in range(role.num):
            plan = report.view.executors[(role.name, index)].plan
            if plan is None:
                table.add_row(str(index), "-", "-", "-", "PENDING", "-", "")
                continue
            table.add_row(str(index), plan.host, _time(plan.launch_time),
                          _time(plan.release_time), _state(plan.state),
                          "-" if plan.exit_code is None else str(plan.exit_code),
                          plan.diagnosis)
        parts.append(Text(""))
        parts.append(table)
    return Group(*parts)


def progress_line(report: AppReport) -> Text:
    """One line for ``submit --wait``: the app state and its executors counted by state."""
    counts = Counter(ex.plan.state if ex.plan else None
                     for ex in report.view.executors.values())
    text = Text(f"{report.view.status.app_id} ")
    text.append_text(_state(report.view.status.state))
    for state, count in sorted(counts.items(), key=lambda kv: kv[0].value if kv[0] else ""):
        text.append(f"  {state.value.lower() if state else 'pending'}:{count}")
    return text


def status_json(report: AppReport) -> dict[str, Any]:
    """``primus status -o json``: the stored records, as stored."""
    view = report.view
    return {
        "status": view.status.model_dump(mode="json"),
        "am": report.leader.model_dump(mode="json") if report.leader else None,
        "executors": {
            role.name: [
                {
                    "index": index,
                    "plan": ex.plan.model_dump(mode="json") if ex.plan else None,
                    "live": ex.live.model_dump(mode="json") if ex.live else None,
                    "result": ex.result.model_dump(mode="json") if ex.result else None,
                }
                for index in range(role.num)
                for ex in [view.executors[(role.name, index)]]
            ]
            for role in view.spec.roles
        },
        "cluster": view.cluster.model_dump(mode="json") if view.cluster else None,
        "events": [e.model_dump(mode="json") for e in report.events],
    }


def print_json(console: Console, data: Any) -> None:
    """Print ``data`` as JSON, unstyled, so scripts can parse it."""
    console.file.write(json.dumps(data, indent=2) + "\n")
