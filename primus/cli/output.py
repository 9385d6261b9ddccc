"""What a person at the terminal sees: tables, summaries and progress, rendered with rich.

Machine-readable output (``-o json``) is built here too, from the same records.

Every string printed comes from input a user wrote or from stored records (names, commands,
diagnoses, patterns such as ``[a-z]``), so the consoles made by :func:`make_console` show strings
exactly as they are: rich's markup, emoji codes and highlighting are off, and only Primus's own
code adds style, with :class:`~rich.text.Text` objects.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import shlex
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console, Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from primus.client.api import AppReport, AppSummary, HangStacks, HostReport, LogLine, Revived
from primus.client.queues import HostUsage, QueuedApp
from primus.client.topology import Changed
from primus.config.inventory import Host, format_gpu_groups, format_gpu_tree
from primus.state.records import Reservation, Savepoint, StreamStats, usage_texts
from primus.state.states import AppState, ExecutorState
from primus.store.api import MemberSpace
from primus.store.pki import EtcdPki

STATE_STYLES = {
    AppState.SUCCEEDED: "green", ExecutorState.SUCCEEDED: "green",
    AppState.FAILED: "red", ExecutorState.FAILED: "red", ExecutorState.LOST: "red",
    AppState.KILLED: "yellow", ExecutorState.KILLED: "yellow",
    AppState.RUNNING: "cyan", ExecutorState.RUNNING: "cyan",
    AppState.RESTARTING: "yellow",
}


UNWRAPPED = sys.maxsize
"""The width of a console whose output is no terminal: tables and lines are as wide as what
they hold, never wrapped (rich measures each table; nothing is padded to this width)."""


def make_console(**options: Any) -> Console:
    """A console that prints every string as it is: no markup (``[/x]`` would raise, and
    ``[a-z]`` would vanish), no emoji codes (``:smile:``) and no highlighting of values.

    This holds for strings inside tables and grids too: rich renders a str cell with the
    console's settings.

    When its output is no terminal (a pipe, a file) and ``$COLUMNS`` does not set a width, it
    wraps nothing, as kubectl does: rich would otherwise take 80 columns (or the width of a
    terminal on another of the process's streams) and break a table's long cells one word a
    line, unreadable in a log. On a terminal, its width.

    Args:
        **options: Other arguments of :class:`~rich.console.Console` (``stderr``, ``file``...).
    """
    console = Console(markup=False, emoji=False, highlight=False, **options)
    if "width" not in options and not os.environ.get("COLUMNS", "").isdigit() and \
            not _is_terminal(options.get("file") or
                             (sys.stderr if options.get("stderr") else sys.stdout)):
        console.width = UNWRAPPED
    return console


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False


def print_line(console: Console, line: str | Text) -> None:
    """Print ``line`` without wrapping it at the console's width: a line of output (one problem
    of an error) stays one line on a narrow terminal and when piped, where rich assumes 80
    columns."""
    console.print(line, soft_wrap=True)


def error_text(message: str) -> Text:
    """An error as printed on stderr: a red ``error:`` and the message, unstyled."""
    return Text.assemble(("error:", "bold red"), " ", message)


def _time(value: float | None) -> str:
    """Local time of day; the date too when it is not today; the raw number when it is no time
    the platform can represent (a stored record is printed, never refused)."""
    if value is None:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(value)
    except (OverflowError, ValueError, OSError):
        return str(value)
    if moment.date() == datetime.date.today():
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _state(state: AppState | ExecutorState) -> Text:
    return Text(state.value, style=STATE_STYLES.get(state, ""))


def _app_state(state: AppState, leaderless: bool) -> Text:
    """An application's state, saying so when no AM leads it: then nothing runs it on."""
    text = _state(state)
    if leaderless:
        text.append(" (no AM leads)", style="bold yellow")
    return text


def apps_table(summaries: list[AppSummary]) -> Table:
    """``primus list``: one row per application."""
    table = Table(box=None, header_style="bold")
    table.add_column("APP", no_wrap=True)
    for column in ("NAME", "STATE", "PROGRESS", "USER", "SUBMITTED", "FINISHED", "EXIT"):
        table.add_column(column, justify="right" if column == "PROGRESS" else "left")
    for summary in summaries:
        s = summary.status
        state = _app_state(s.state, summary.leaderless)
        if s.state is AppState.QUEUED:
            state.append(f" ({summary.waiting or 'waiting for the admission leader'})")
        name = Text(f"{s.name}[{s.array_index}]" if s.array else s.name)
        table.add_row(s.app_id, name, state, percent(summary.progress), s.user,
                      _time(s.submit_time), _time(s.finish_time),
                      "-" if s.exit_code is None else str(s.exit_code))
    return table


def apps_json(summaries: list[AppSummary]) -> list[dict[str, Any]]:
    """``primus list -o json``: each application's status as stored, and its AM's record."""
    return [{**s.status.model_dump(mode="json"),
             "am": s.leader.model_dump(mode="json") if s.leader else None,
             "waiting": s.waiting or None, "queue": s.queue, "archived": s.archived,
             "progress": s.progress}
            for s in summaries]


def array_json(array: str, members: list[AppSummary]) -> dict[str, Any]:
    """``primus status ARRAY -o json``: how many members are in each state, and each one."""
    return {"array": array, "members": len(members),
            "states": _state_counts(members), "applications": apps_json(members)}


def array_renderable(array: str, members: list[AppSummary]) -> Group:
    """``primus status ARRAY``: a line of counts by state, then the members' table."""
    counts = ", ".join(f"{count} {state}" for state, count in _state_counts(members).items())
    return Group(Text(f"array {array}: {len(members)} members: {counts}"),
                 apps_table(members))


def _state_counts(members: list[AppSummary]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for member in members:
        counts[member.status.state.value] = counts.get(member.status.state.value, 0) + 1
    return dict(sorted(counts.items()))


def percent(fraction: float | None) -> str:
    """A progress figure as people read it: ``42%``; ``-`` when not known."""
    return "-" if fraction is None else f"{math.floor(fraction * 100)}%"


def warning_text(message: str) -> Text:
    """A warning as printed on stderr: a yellow ``warning:`` and the message, unstyled."""
    return Text.assemble(("warning:", "bold yellow"), " ", message)


def revived_text(revived: Revived) -> Text:
    """What a command that started the embedded etcd did for an application no AM led."""
    if revived.problem:
        return warning_text(f"no AM leads {revived.app_id} and none could be started: "
                            f"{revived.problem}")
    return Text(f"no AM led {revived.app_id} when etcd came back: started an AM candidate")


def _am(report: AppReport) -> str:
    """Which AM leads; when none does, what brings one."""
    leader = report.leader
    if leader is None and report.view.status.parked:
        return "none while it waits: one starts once it is admitted"
    if not report.leaderless:
        return f"{leader.host} pid {leader.pid}" if leader else "-"
    app_id = report.view.status.app_id
    remedy = f"`primus recover {app_id}` starts one, `primus kill {app_id}` ends the app"
    if leader is None:
        return f"none: {remedy}"
    return f"none ({leader.host} pid {leader.pid} no longer runs): {remedy}"


def status_renderable(report: AppReport, events: int = 0) -> Group:
    """``primus status``: the application summary, a table of executors per role, then the
    latest ``events`` of the event log: what the AM decided, and why."""
    status = report.view.status
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    waiting = report.view.waiting.reason if report.view.waiting else \
        "for the admission leader to look at it"
    rows: list[tuple[str, str | Text]] = [
        ("app", status.app_id), ("name", status.name),
        ("state", _app_state(status.state, report.leaderless)),
        ("user", f"{status.user}@{status.submit_host}"),
        ("submitted", _time(status.submit_time)), ("started", _time(status.start_time)),
        ("finished", _time(status.finish_time)),
        ("attempt", str(status.attempt)),
        ("progress", percent(report.view.progress())),
        ("exit code", "-" if status.exit_code is None else str(status.exit_code)),
        ("diagnosis", status.diagnosis or "-"),
        ("am", _am(report)),
        *([("waiting", waiting)] if status.state is AppState.QUEUED else []),
        *([("archived", "read from the history: its keys are gone from etcd")]
          if report.archived else []),
    ]
    for label, value in rows:
        summary.add_row(label, value)
    parts: list[Any] = [summary]
    wanted = {role.name: role.num for role in report.view.spec.roles}
    for name, executors in report.view.executors_by_role().items():
        running = sum(1 for index, executor in executors if executor.plan is not None
                      and executor.plan.state is ExecutorState.RUNNING
                      and report.view.is_current((name, index)))
        title = (f"{name} ×{wanted[name]}: {wanted[name]} desired, {running} running"
                 if name in wanted else f"{name} (removed)")
        if used := report.view.role_usage(name):
            title += f"; {used}"
        table = Table(title=title, title_justify="left", box=None, header_style="bold")
        for column in ("INDEX", "HOST", "ATTEMPT", "RESTARTS", "LAUNCHED", "RELEASED", "STATE",
                       "EXIT", "CPU USED", "MEMORY USED", "DIAGNOSIS"):
            table.add_column(column)
        for index, executor in executors:
            plan = executor.plan
            if plan is None:
                table.add_row(str(index), "-", "-", "-", "-", "-", "PENDING", "-", "-", "-", "")
                continue
            state = _state(plan.state)
            if plan.retired:
                state.append(" (retired)")
            if plan.restart_at is not None and not status.state.terminal:
                state.append(f" → restart {_time(plan.restart_at)}")
            table.add_row(str(index), plan.host, str(plan.attempt), str(plan.restarts),
                          _time(plan.launch_time), _time(plan.release_time), state,
                          "-" if plan.exit_code is None else str(plan.exit_code),
                          *usage_texts(executor.usage, plan.attempt), plan.diagnosis)
        parts.append(Text(""))
        parts.append(table)
    if report.view.changes:
        pending = Table(title="changes the AM has yet to apply", title_justify="left",
                        box=None, header_style="bold")
        for column in ("TIME", "CHANGE", "BY", "WHAT"):
            pending.add_column(column)
        for seq, change in sorted(report.view.changes.items()):
            pending.add_row(_time(change.time), str(seq), change.user, change.message)
        parts.append(Text(""))
        parts.append(pending)
    if report.view.spec.data:
        data = Table(title="data", title_justify="left", box=None, header_style="bold")
        for column in ("STREAM", "TASKS DONE", "FAILED", "RECORDS", "BYTES", "STATE"):
            data.add_column(column)
        for stream in report.view.spec.data:
            stats = report.view.streams.get(stream.name)
            if stats is None:
                data.add_row(stream.name, "-", "-", "-", "-", "scanning")
                continue
            data.add_row(stream.name, f"{stats.done}/{stats.tasks}", str(stats.failed),
                         _records(stats), _size(stats.bytes),
                         "exhausted" if stats.exhausted else "reading" if stats.lag is None
                         else f"reading, lag {stats.lag}")
        parts.append(Text(""))
        parts.append(data)
    if events and report.events:
        log = Table(title="events", title_justify="left", box=None, header_style="bold")
        for column in ("TIME", "KIND", "MESSAGE"):
            log.add_column(column)
        for event in report.events[-events:]:
            log.add_row(_time(event.time), event.kind, event.message)
        parts.append(Text(""))
        parts.append(log)
    return Group(*parts)


def change_text(changed: Changed) -> str:
    """``primus scale``, ``role add|remove``, ``data add``: what changed, as recorded."""
    change = changed.change
    if change.kind == "scale" and changed.role is not None:
        num = changed.role.num
        what = (f"{changed.role.name}: {changed.previous} → {num} "
                f"executor{'' if num == 1 else 's'}")
    else:
        what = change.message
    return f"{what} (change {change.seq}); the AM applies it"


def progress(report: AppReport) -> Group:
    """What ``submit --wait`` shows while it waits: the app state and its executors counted by
    state, then a progress bar per data stream (tasks done of those created so far; the total
    is final once the stream's sources are exhausted)."""
    counts = Counter(ex.plan.state if ex.plan else None
                     for ex in report.view.executors.values())
    line = Text(f"{report.view.status.app_id} ")
    line.append_text(_state(report.view.status.state))
    line.append(f"  {percent(report.view.progress())}")
    for state, count in sorted(counts.items(), key=lambda kv: kv[0].value if kv[0] else ""):
        line.append(f"  {state.value.lower() if state else 'pending'}:{count}")
    bars = Table.grid(padding=(0, 1))
    for stream in report.view.spec.data:
        stats = report.view.streams.get(stream.name)
        if stats is None:
            bars.add_row(f"data {stream.name}", ProgressBar(total=None, width=30), "scanning")
            continue
        of = f"{stats.tasks}" if stats.exhausted else f"{stats.tasks}+"
        failed = f", {stats.failed} failed" if stats.failed else ""
        bar = ProgressBar(total=stats.tasks or None, completed=stats.done + stats.failed,
                          width=30)
        bars.add_row(f"data {stream.name}", bar,
                     f"{stats.done}/{of} tasks{failed}, {_records(stats)} records, "
                     f"{_size(stats.bytes)}")
    return Group(line, bars) if report.view.spec.data else Group(line)


def status_json(report: AppReport) -> dict[str, Any]:
    """``primus status -o json``: the stored records, as stored."""
    view = report.view
    return {
        "status": view.status.model_dump(mode="json"),
        "archived": report.archived,
        "progress": view.progress(),
        "am": report.leader.model_dump(mode="json") if report.leader else None,
        "kill": view.kill.model_dump(mode="json") if view.kill else None,
        "executors": {
            name: [
                {
                    "index": index,
                    "plan": ex.plan.model_dump(mode="json") if ex.plan else None,
                    "live": ex.live.model_dump(mode="json") if ex.live else None,
                    "result": ex.result.model_dump(mode="json") if ex.result else None,
                    "usage": ex.usage.model_dump(mode="json") if ex.usage else None,
                }
                for index, ex in executors
            ]
            for name, executors in view.executors_by_role().items()
        },
        "desired": {role.name: role.num for role in view.spec.roles},
        "pending_changes": [change.model_dump(mode="json")
                            for _, change in sorted(view.changes.items())],
        "cluster": view.cluster.model_dump(mode="json") if view.cluster else None,
        "admission": {
            "waiting": view.waiting.model_dump(mode="json") if view.waiting else None,
            "reservations": [r.model_dump(mode="json") for _, r in
                             sorted(view.reservations.items())],
            "preemption": view.preemption.model_dump(mode="json") if view.preemption
            else None},
        "data": {name: stats.model_dump(mode="json") for name, stats in view.streams.items()},
        "events": [e.model_dump(mode="json") for e in report.events],
    }


def log_line(line: LogLine, prefixed: bool) -> str:
    """``primus logs``: a line as the log holds it, after ``[role-index]`` when several logs are
    printed together."""
    return f"[{line.source}] {line.text}" if prefixed else line.text


def savepoint_text(app_id: str, savepoint: Savepoint, detail: bool = False) -> str:
    """``primus savepoint list|show|create``: one savepoint, its streams one line each; with
    ``detail``, each stream's sources, settings and scan too."""
    when = _time_of_day(savepoint.taken) if savepoint.taken else "-"
    head = (f"{app_id}/{savepoint.number}  {savepoint.state.value}  taken {when}  "
            f"by {savepoint.by or '-'}" +
            (f"  revision {savepoint.revision}" if savepoint.revision else "") +
            (f"  error: {savepoint.error}" if savepoint.error else ""))
    lines = [head]
    for cut in savepoint.streams:
        lines.append(f"  {cut.name}: {cut.done}/{cut.tasks} tasks done, {cut.failed} failed, "
                     f"{cut.reading} resume at their checkpoint; {cut.records:,} records "
                     f"before the cut; epoch {cut.scan.epoch} of {cut.epochs}")
        if detail:
            lines += [f"    source: {source.shown}" for source in cut.sources]
            lines.append(f"    format {cut.format}, chunk_size {cut.chunk_size}, shuffle "
                         f"{cut.shuffle} (seed {cut.seed})")
            if cut.scan.folded is not None:
                lines.append(f"    {cut.scan.folded.tasks:,} of the done tasks folded out of "
                             f"etcd ({cut.scan.folded.records:,} records)")
    return "\n".join(lines) + "\n"


def stacks_text(app_id: str, found: HangStacks, executor: str | None = None) -> str:
    """``primus logs APP --stacks``: the hang and where each rank stood, then each trainer's
    stacks (only ``executor``'s, a ``role-index``, when given)."""
    if found.hang is None and not found.stacks:
        return f"{app_id}: no hang recorded\n"
    lines = []
    if found.hang is not None:
        hang = found.hang
        lines.append(f"hang {hang.id} at {_time_of_day(hang.time)}: "
                     f"{hang.summary or 'stacks still being taken'}")
    if len(found.hangs) > 1:
        lines.append("hangs kept: " + ", ".join(map(str, found.hangs)) + " (--hang N)")
    shown = [s for s in found.stacks if executor is None or f"{s.role}-{s.index}" == executor]
    for stacks in shown:
        how = "py-spy" if stacks.python else "not Python: the kernel's view"
        lines += ["", f"=== {stacks.role}-{stacks.index} on {stacks.host} (attempt "
                      f"{stacks.attempt}, idle {stacks.idle:.0f}s, {how}): {stacks.where}",
                  stacks.text.rstrip("\n")]
    if executor is not None and not shown:
        lines.append(f"no stacks of {executor} at this hang")
    return "\n".join(lines) + "\n"


def _time_of_day(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds).strftime("%H:%M:%S")


def etcdctl_exports(client_url: str, pki: EtcdPki) -> str:
    """``primus etcd status``: a shell line that lets etcdctl into the embedded etcd, which
    admits only holders of its client certificate."""
    environment = {"ETCDCTL_API": "3", "ETCDCTL_ENDPOINTS": client_url,
                   "ETCDCTL_CACERT": pki.ca_cert, "ETCDCTL_CERT": pki.client_cert,
                   "ETCDCTL_KEY": pki.client_key}
    return "export " + " ".join(f"{name}={shlex.quote(str(value))}"
                                for name, value in environment.items())


def print_json(console: Console, data: Any) -> None:
    """Print ``data`` as JSON, unstyled, so scripts can parse it."""
    console.file.write(json.dumps(data, indent=2) + "\n")


def _records(stats: StreamStats) -> str:
    """A stream's records: those of its tasks done, and those its failed tasks delivered
    before they failed."""
    if not stats.failed_records:
        return str(stats.records)
    return f"{stats.records} (+{stats.failed_records} of failed tasks)"


def _size(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return str(value)


def space_json(members: Sequence[MemberSpace]) -> list[dict[str, Any]]:
    """``primus etcd space -o json``: each member's database, in bytes, and its alarms."""
    return [dataclasses.asdict(m) | {"alarms": [a.value for a in m.alarms]} for m in members]


def space_table(members: Sequence[MemberSpace]) -> Table:
    """``primus etcd space``: each member's database against its quota, and its alarms."""
    table = Table(box=None, header_style="bold")
    for column in ("MEMBER", "ENDPOINT", "SIZE", "IN USE", "QUOTA", "USED", "ALARMS"):
        table.add_column(column, no_wrap=True)
    for m in members:
        if m.error:
            table.add_row(m.member, m.endpoint or "-", "-", "-", "-", "-",
                          Text(" ".join(a.value for a in m.alarms) or "-", "bold red"))
            table.add_row("", Text(f"did not answer: {m.error}", "red"))
            continue
        table.add_row(m.member, m.endpoint, _size(m.size), _size(m.in_use), _size(m.quota),
                      percent(m.size / m.quota if m.quota else None),
                      Text(" ".join(a.value for a in m.alarms), "bold red") if m.alarms
                      else "-")
    return table


def hosts_json(hosts: Sequence[Host]) -> list[dict[str, Any]]:
    """``primus hosts list -o json``: the resolved hosts as stored with an application."""
    return [dataclasses.asdict(host) | {"groups": sorted(host.groups),
                                        "labels": sorted(host.labels)} | _topology_json(host)
            for host in hosts]


def _topology_json(host: Host) -> dict[str, Any]:
    """Beside the tree and the NVLink groups as lists: the tree in the inventory's text form
    (``null`` where not known); the domains as a mapping of level to domain."""
    return {"gpu_topology": None if host.gpu_tree is None else format_gpu_tree(host.gpu_tree),
            "domains": dict(host.domains)}


def _gpus_shown(gpus: int | None, tree: str | None, nvlink: str | None) -> str:
    """A host's GPUs with their topology where known: ``8 (0-1|2-3;4-5|6-7 nvlink 0-7)``."""
    if gpus is None:
        return "-"
    if not tree:
        return str(gpus)
    return f"{gpus} ({tree}" + (f" nvlink {nvlink})" if nvlink else ")")


def hosts_table(hosts: Sequence[Host]) -> Table:
    """``primus hosts list``: connection settings and resources of each host."""
    table = Table(box=None, header_style="bold")
    for column in ("HOST", "ADDRESS", "VIA", "USER", "PORT", "PYTHON", "SLOTS", "CPU", "MEMORY",
                   "GPUS", "GROUPS", "LABELS"):
        table.add_column(column, no_wrap=column in ("HOST", "ADDRESS"))
    for h in hosts:
        table.add_row(h.name, h.address, h.launcher, h.ssh.user or "-",
                      str(h.ssh.port or "-"), h.python,
                      *("-" if v is None else f"{v:g}" for v in (h.slots, h.cpu)),
                      _size(h.memory), _gpus_shown(
                          h.gpus, format_gpu_tree(h.gpu_tree) if h.gpu_tree else None,
                          format_gpu_groups(h.gpu_nvlink)),
                      ",".join(sorted(h.groups - {"all"})),
                      ",".join([*sorted(h.labels), *(f"{k}={v}" for k, v in h.domains)]))
    return table


def reports_json(reports: Sequence[HostReport]) -> list[dict[str, Any]]:
    """``primus hosts check -o json``."""
    return [{"host": r.host.name, "address": r.host.address, "ok": r.ok, "error": r.error,
             **r.facts} for r in reports]


def reports_table(reports: Sequence[HostReport]) -> Table:
    """``primus hosts check``: reachable or why not, and what each host has."""
    table = Table(box=None, header_style="bold")
    for column in ("HOST", "ADDRESS", "STATUS", "CPU", "MEMORY", "GPUS", "LOAD", "LIMITS"):
        table.add_column(column, no_wrap=column in ("HOST", "ADDRESS"))
    for r in reports:
        facts = r.facts
        status = Text("ready", style="green") if r.ok else Text(r.error, style="red")
        limits = "-" if not r.ok else Text(f"not enforced: {facts['cgroups']}", style="yellow") \
            if facts.get("cgroups") else Text("enforced", style="green")
        table.add_row(r.host.name, r.host.address, status, str(facts.get("cpu", "-")),
                      _size(facts.get("memory")),
                      _gpus_shown(facts.get("gpus"), facts.get("gpu_topology"),
                                  facts.get("gpu_nvlink")),
                      f"{facts['load']:.2f}" if "load" in facts else "-", limits)
    return table


def queue_renderable(apps: Sequence[QueuedApp], total: int | None = None
                     ) -> Table | Text | Group:
    """``primus queue``: the waiting applications in admission order, and why each waits
    (``total``: how many wait in all, when only the first are shown)."""
    if not apps:
        return Text("no application waits for admission")
    if total is not None and total > len(apps):
        return Group(queue_renderable(apps),
                     Text(f"and {total - len(apps)} more wait (--limit 0 shows every one)"))
    table = Table(box=None, header_style="bold")
    for column in ("POS", "QUEUE", "PRIORITY", "USER", "APP", "EXECUTORS", "SUBMITTED", "SINCE",
                   "WHY"):
        table.add_column(column, no_wrap=column == "APP")
    for app in apps:
        table.add_row(str(app.position), app.queue, str(app.priority), app.request.user,
                      app.request.app_id, str(len(app.request.executors)),
                      _time(app.request.submit_time),
                      _time(app.waiting.since if app.waiting else None), app.reason)
    return table


def queue_json(apps: Sequence[QueuedApp]) -> list[dict[str, Any]]:
    """``primus queue -o json``: one entry per waiting application, in admission order."""
    return [{"position": app.position, "queue": app.queue, "priority": app.priority,
             "user": app.request.user, "app_id": app.request.app_id,
             "executors": [f"{role}-{index}" for role, index in app.request.executors],
             "submit_time": app.request.submit_time, "reason": app.reason,
             "reason_since": app.waiting.since if app.waiting else None} for app in apps]


def _indices(indices: Iterable[int]) -> str:
    """Indices in order, runs of three or more shortened: ``0-3,6,7``."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run))
                    for run in runs)


def _devices(devices: Iterable[int] | None) -> str:
    """GPU device indices; ``-`` when the host declares none, ``none`` when none is left."""
    if devices is None:
        return "-"
    return _indices(devices) or "none"


def _executors(reservations: Sequence[Reservation]) -> str:
    """Executors by role: ``worker[0-7],ps[0]``."""
    by_role: dict[str, list[int]] = {}
    for reservation in reservations:
        by_role.setdefault(reservation.role, []).append(reservation.index)
    return ",".join(f"{role}[{_indices(indices)}]" for role, indices in by_role.items())


def _amount(value: float | None, size: bool = False) -> str:
    """A capacity or what is left of it; ``None`` and infinity are unlimited."""
    if value is None or value == float("inf"):
        return "unlimited"
    return _size(value) if size else f"{value:g}"


def usage_table(usages: Sequence[HostUsage]) -> Table | Text:
    """``primus hosts usage``: per host, its capacity, what each application holds, what is
    left."""
    if not usages:
        return Text("no host is known to admission yet (give -i to see an inventory's)")
    table = Table(box=None, header_style="bold")
    for column in ("HOST", "HELD BY", "EXECUTORS", "SLOTS", "CPU", "MEMORY", "GPU DEVICES"):
        table.add_column(column, no_wrap=column in ("HOST", "HELD BY"))
    for usage in usages:
        host, free = usage.host, usage.free
        table.add_row(host.name, Text("capacity", style="bold"), "", _amount(host.slots),
                      _amount(host.cpu), _amount(host.memory, size=True),
                      _devices(None if host.gpus is None else range(host.gpus)))
        for held in usage.held:
            table.add_row("", f"{held.app_id} ({held.user}, {held.queue})",
                          _executors(held.reservations),
                          str(len(held.reservations)), f"{held.cpu:g}", _size(held.memory),
                          _devices(held.gpus) if host.gpus is not None else "-")
        table.add_row("", Text("free", style="green"), "", _amount(free.slots),
                      _amount(free.cpu), _amount(free.memory, size=True),
                      _devices(free.devices))
        if usage.condition is not None:  # text from people: never markup
            table.add_row("", Text(f"{usage.condition.state} since "
                                   f"{_time(usage.condition.since)}", style="red"),
                          Text(f"by {usage.condition.by}: {usage.condition.reason}"))
    return table


def _limit(value: float) -> float | None:
    """What is left of a resource, for JSON: ``None`` when it is unlimited, whole numbers as
    integers."""
    if value == float("inf"):
        return None
    return int(value) if float(value).is_integer() else value


def usage_json(usages: Sequence[HostUsage]) -> list[dict[str, Any]]:
    """``primus hosts usage -o json``: per host, capacity (``null``: unlimited; ``gpus`` the
    device indices, ``null`` when none is declared), what each application holds, and what is
    free."""
    return [{
        "host": usage.host.name,
        "capacity": {"slots": usage.host.slots, "cpu": usage.host.cpu,
                     "memory": usage.host.memory,
                     "gpus": None if usage.host.gpus is None else list(range(usage.host.gpus))},
        "held": [{"app_id": held.app_id, "user": held.user, "queue": held.queue,
                  "executors": [f"{r.role}-{r.index}" for r in held.reservations],
                  "cpu": held.cpu, "memory": held.memory, "gpus": held.gpus}
                 for held in usage.held],
        "free": {"slots": _limit(usage.free.slots), "cpu": _limit(usage.free.cpu),
                 "memory": _limit(usage.free.memory), "gpus": usage.free.devices},
        "condition": None if usage.condition is None else usage.condition.model_dump(),
    } for usage in usages]
