"""The UI's pictures: worked out from the records (pure functions, no I/O) and drawn as SVG
on the server.

Each picture has two steps: a *figure* (dataclasses of what is drawn: bars, marks, points),
which ``/apps/<app>/charts.json`` and ``/hosts/charts.json`` also serve as the same facts in
JSON, and its SVG. Inline SVG needs no script and no library (the pages' Content-Security-
Policy allows none but the package's own) and is rendered with the rest of the page, so the
live feeds that replace a page's sections redraw the pictures with them.

Every text in a picture (names, hosts, reasons) is escaped; every picture has a title and a
description for screen readers, labelled axes, and the colours of Okabe and Ito's palette,
told apart by people with any common colour-vision deficiency. Figures are bounded: lanes per
role and in all, attempts per executor (the plan keeps the last 16), events (the log keeps
1,000), readers, hosts and waiting applications each have a limit, and a picture says what it
summarizes.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

from primus.client.queues import HostUsage
from primus.config.spec import HUNG, OOM_KILLED
from primus.state.records import AppEvent, ExecutorPlan, PastAttempt, StreamStats
from primus.state.states import AppState, ExecutorState
from primus.ui.pages import size
from primus.ui.samples import StreamPoint

# Okabe & Ito's colour-blind safe palette.
COLOURS = {
    "SUCCEEDED": "#009E73", "FAILED": "#D55E00", "LOST": "#CC79A7", "KILLED": "#999999",
    OOM_KILLED: "#E69F00", HUNG: "#56B4E9", "RUNNING": "#0072B2", "STARTING": "#F0E442",
}
"""Fill of a bar, by how its attempt ended (or goes on)."""
OUTCOMES = tuple(COLOURS)
LANES_PER_ROLE = 64
"""Executors of a role drawn as lanes; the others are counted by state in one line."""
LANES_SHOWN = 256
"""Lanes drawn in all."""
MARKS_SHOWN = 1000
"""Marks drawn on a timeline: the latest (the AM keeps 1,000 events; more are not its)."""
READERS_SHOWN = 64
HOSTS_SHOWN = 500
WAITING_SHOWN = 20
RUNS_SHOWN = 20
MARK_KINDS = {"app-state": "state", "am": "am", "cluster": "cluster", "submitted": "state"}
"""Event kinds drawn as marks on a timeline, and what the mark is (an ``am`` event that is no
take-over: ``state``)."""

WIDTH = 960
LABELS = 130
RIGHT = 20
LANE = 14
_STARTING = {ExecutorState.PLANNED, ExecutorState.LAUNCHED, ExecutorState.REGISTERED}


# ---- Executor timeline ----------------------------------------------------------------------

@dataclass(frozen=True)
class Bar:
    """One executor attempt, from launch to release (still running: to the figure's end)."""

    attempt: int
    host: str
    start: float
    end: float
    outcome: str
    """A key of :data:`COLOURS`."""
    exit_code: int | None = None
    skewed: bool = False
    """It ended before it started (the hosts' clocks disagree): drawn as an instant."""


@dataclass(frozen=True)
class Lane:
    role: str
    index: int
    bars: list[Bar]


@dataclass(frozen=True)
class Mark:
    time: float
    kind: str
    """``state`` (the application's), ``am`` (an AM took the lead), ``cluster`` (a cluster
    spec was published)."""
    label: str


@dataclass
class Timeline:
    start: float
    end: float
    lanes: list[Lane]
    marks: list[Mark]
    hidden: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per role, the executors not drawn, counted by their latest attempt's outcome."""
    notes: list[str] = field(default_factory=list)


def _outcome(state: ExecutorState, exit_class: str) -> str:
    if exit_class in (OOM_KILLED, HUNG):
        return exit_class
    if state in _STARTING:
        return "STARTING"
    return state.value


def _bar(attempt: PastAttempt | ExecutorPlan, now: float, running: bool) -> Bar | None:
    """The bar of an attempt; ``None`` before it was launched."""
    start = attempt.launch_time
    if start is None:
        return None
    end = attempt.release_time
    if end is None:
        end = now if running and not attempt.state.terminal else start
    return Bar(attempt.attempt, attempt.host, start, max(start, end),
               _outcome(attempt.state, attempt.exit_class), attempt.exit_code,
               skewed=end < start)


def timeline(plans: Mapping[str, Sequence[tuple[int, ExecutorPlan | None]]],
             events: Iterable[AppEvent], state: AppState, submitted: float,
             finished: float | None, now: float) -> Timeline:
    """The timeline of an application's executors (``plans``: per role, each index and its
    plan) with its ``events`` as marks, from its submission to its end (running: ``now``)."""
    running = not state.terminal
    end = now if running or finished is None else finished
    lanes: list[Lane] = []
    hidden: dict[str, collections.Counter[str]] = {}
    skewed = 0
    for role, executors in plans.items():
        for position, (index, plan) in enumerate(executors):
            if plan is None:
                continue
            attempts: list[PastAttempt | ExecutorPlan] = [*plan.past, plan]
            bars = [bar for attempt in attempts
                    if (bar := _bar(attempt, end, running)) is not None]
            skewed += sum(bar.skewed for bar in bars)
            if position >= LANES_PER_ROLE or len(lanes) >= LANES_SHOWN:
                outcome = bars[-1].outcome if bars else "STARTING"
                hidden.setdefault(role, collections.Counter())[outcome] += 1
                continue
            lanes.append(Lane(role, index, bars))
    marks = [Mark(event.time, _mark_kind(event), event.message[:80])
             for event in events if event.kind in MARK_KINDS]
    dropped = max(0, len(marks) - MARKS_SHOWN)
    marks = sorted(marks, key=lambda m: m.time)[dropped:]
    times = [submitted, *(b.start for lane in lanes for b in lane.bars)]
    start = min(times)
    end = max([end, *(b.end for lane in lanes for b in lane.bars)])
    notes = []
    for role, counts in hidden.items():
        notes.append(f"{role}: {sum(counts.values())} more executors not drawn ("
                     + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
                     + ")")
    if dropped:
        notes.append(f"{dropped} older marks not drawn (the latest {MARKS_SHOWN})")
    if skewed:
        notes.append(f"{skewed} attempt(s) ended before starting by the hosts' clocks "
                     f"(clock skew): drawn as instants")
    return Timeline(start, end, lanes, [m for m in marks if start <= m.time <= end],
                    {role: dict(counts) for role, counts in hidden.items()}, notes)


def _mark_kind(event: AppEvent) -> str:
    """The mark of an event: an AM's event is a take-over only when it took over (the first
    AM's lead is the application's start)."""
    kind = MARK_KINDS[event.kind]
    return "state" if kind == "am" and "took over" not in event.message else kind


def _offset(seconds: float) -> str:
    if 0 < seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f}s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s" if seconds % 60 else f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class _Scale:
    """Times to x: ``start``..``end`` onto ``left``..``right`` (a zero span: one point)."""

    def __init__(self, start: float, end: float, left: float, right: float) -> None:
        self.start, self.span = start, max(end - start, 1e-9)
        self.left, self.width = left, right - left

    def __call__(self, t: float) -> float:
        return round(self.left + (t - self.start) / self.span * self.width, 1)

    def ticks(self, count: int = 6) -> list[tuple[float, str]]:
        step = _nice(self.span / count)
        return [(self(self.start + i * step), _offset(i * step))
                for i in range(int(self.span / step) + 1)]


def _nice(raw: float) -> float:
    """A round step of at least ``raw`` seconds (tenths, seconds, minutes, hours)."""
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
                 10800, 21600, 43200, 86400):
        if step >= raw:
            return float(step)
    return float(math.ceil(raw / 86400) * 86400)


def _svg(ident: str, width: float, height: float, title: str, desc: str, body: list[str],
         css: str = "chart") -> Markup:
    return Markup(
        f'<svg class="{css}" id="{escape(ident)}" role="img" viewBox="0 0 {width:.0f} '
        f'{height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        f'aria-labelledby="{escape(ident)}-title {escape(ident)}-desc" '
        f'xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{escape(ident)}-title">{escape(title)}</title>'
        f'<desc id="{escape(ident)}-desc">{escape(desc)}</desc>' + "".join(body) + "</svg>")


def _text(x: float, y: float, text: str, css: str = "", anchor: str = "start") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"'
            + (f' class="{css}"' if css else "") + f">{escape(text)}</text>")


def _legend(y: float, outcomes: Iterable[str]) -> list[str]:
    body, x = [], float(LABELS)
    for outcome in outcomes:
        body.append(f'<rect class="legend" x="{x:.0f}" y="{y - 9:.0f}" width="10" height="10" '
                    f'fill="{COLOURS[outcome]}"/>')
        body.append(_text(x + 14, y, outcome.replace("_", "-").lower(), "axis"))
        x += 30 + 7 * len(outcome)
    return body


def timeline_svg(figure: Timeline, ident: str = "timeline") -> Markup:
    """The timeline as SVG: a lane per executor, grouped by role, a bar per attempt coloured
    by how it ended, a triangle where an attempt restarted the index; marks along the top for
    the application's states, AM take-overs and cluster specs."""
    roles = list(dict.fromkeys(lane.role for lane in figure.lanes))
    height = 40 + len(figure.lanes) * LANE + len(roles) * 16 + 76 + 16 * len(figure.notes)
    x = _Scale(figure.start, figure.end, LABELS, WIDTH - RIGHT)
    body: list[str] = []
    top, bottom = 34, height - 76 - 16 * len(figure.notes)
    for tick_x, label in x.ticks():
        body.append(f'<line class="grid" x1="{tick_x}" x2="{tick_x}" y1="{top}" y2="{bottom}"/>')
        body.append(_text(tick_x, bottom + 14, label, "axis", "middle"))
    body.append(_text((LABELS + WIDTH - RIGHT) / 2, bottom + 28, "time since the submission",
                      "axis", "middle"))
    for mark in figure.marks:
        mx = x(mark.time)
        body.append(f'<g class="mark mark-{mark.kind}" data-kind="{mark.kind}"><title>'
                    f'{escape(mark.label)}</title>'
                    f'<line x1="{mx}" x2="{mx}" y1="{top - 10}" y2="{bottom}"/>'
                    f'<path d="M{mx - 4},{top - 18} L{mx + 4},{top - 18} L{mx},{top - 10} Z"/>'
                    f'</g>')
    y = top + 4
    for role in roles:
        body.append(_text(4, y + 11, role, "role"))
        y += 16
        for lane in (lane for lane in figure.lanes if lane.role == role):
            body.append(f'<g class="lane" data-executor="{escape(role)}-{lane.index}">')
            body.append(_text(LABELS - 6, y + 10, f"{role}-{lane.index}", "label", "end"))
            for number, bar in enumerate(lane.bars):
                left, right = x(bar.start), x(bar.end)
                width = max(right - left, 2.0)
                exit_text = f", exit {bar.exit_code}" if bar.exit_code is not None else ""
                body.append(
                    f'<g class="bar" data-attempt="{bar.attempt}" data-outcome="{bar.outcome}" '
                    f'data-host="{escape(bar.host)}"'
                    + (' data-skewed="true"' if bar.skewed else "") + '>'
                    f'<title>{escape(role)}-{lane.index} attempt {bar.attempt} on '
                    f'{escape(bar.host)}: {bar.outcome}{exit_text}, '
                    f'{_offset(bar.start - figure.start)} to '
                    f'{_offset(bar.end - figure.start)}</title>'
                    f'<rect x="{left}" y="{y + 1}" width="{width:.1f}" height="{LANE - 3}" '
                    f'fill="{COLOURS[bar.outcome]}"/>')
                if width > 7 * len(bar.host) + 8:
                    body.append(_text(left + 4, y + 10, bar.host, "in-bar"))
                if number:
                    body.append(f'<path class="restart" d="M{left - 4},{y} L{left + 4},{y} '
                                f'L{left},{y + 6} Z"/>')
                body.append("</g>")
            body.append("</g>")
            y += LANE
    body += _legend(bottom + 48, OUTCOMES)
    body.append(_text(LABELS, bottom + 64, "▼ marks: application state (black), AM take-over "
                      "(red), cluster spec (blue); ▼ in a lane: a restart", "axis"))
    for n, note in enumerate(figure.notes):
        body.append(_text(4, bottom + 82 + 16 * n, note, "note"))
    lanes = len(figure.lanes)
    return _svg(ident, WIDTH, height,
                "Executor timeline",
                f"{lanes} executor lane{'s' if lanes != 1 else ''}, "
                f"{sum(len(lane.bars) for lane in figure.lanes)} attempts, "
                f"{len(figure.marks)} marks, over {_offset(figure.end - figure.start)}", body)


# ---- Data streams ---------------------------------------------------------------------------

@dataclass(frozen=True)
class RatePoint:
    time: float
    records_per_second: float
    done: int
    epoch: int
    lag: int | None


@dataclass
class StreamFigure:
    name: str
    points: list[RatePoint]
    epochs: list[tuple[float, int]]
    """Where each epoch after the first began to be done: (time, epoch)."""
    readers: list[tuple[str, int]]
    """Records per reader, the first :data:`READERS_SHOWN` by name."""
    lags: dict[str, int]
    notes: list[str] = field(default_factory=list)


def stream_figure(name: str, points: Sequence[StreamPoint], stats: StreamStats | None
                  ) -> StreamFigure:
    """A stream's figure from the server's samples of it and its latest stats."""
    rates: list[RatePoint] = []
    epochs: list[tuple[float, int]] = []
    before: StreamPoint | None = None
    for point in points:
        rate = 0.0
        if before is not None and point.time > before.time:
            rate = max(0, point.records - before.records) / (point.time - before.time)
            if point.epoch > before.epoch and before.epoch:
                epochs.append((point.time, point.epoch))
        rates.append(RatePoint(point.time, round(rate, 3), point.done, point.epoch, point.lag))
        before = point
    notes = []
    readers = sorted((stats.readers if stats else {}).items(), key=_reader_order)
    if len(readers) > READERS_SHOWN:
        notes.append(f"{len(readers) - READERS_SHOWN} more readers not drawn")
    if stats is not None and stats.readers_partial:
        notes.append("readers after the first 512 are not counted")
    if len(rates) < 2:
        notes.append("the rate is drawn once the server has seen the stream's stats change "
                     "twice")
    return StreamFigure(name, rates, epochs, readers[:READERS_SHOWN],
                        dict(stats.lags) if stats else {}, notes)


def _reader_order(item: tuple[str, int]) -> tuple[str, int]:
    role, _, index = item[0].rpartition("-")
    return role, int(index) if index.isdigit() else 0


def stream_svg(figure: StreamFigure, ident: str) -> Markup:
    """A stream as SVG: records per second (line) and tasks done (steps) over time with the
    epochs marked; then each reader's share of the records, a reader under half the mean
    marked slow; then the lag per partition of a Kafka stream."""
    body: list[str] = []
    plot_top, plot_bottom = 24, 164
    y = plot_bottom
    if figure.points:
        times = [p.time for p in figure.points]
        x = _Scale(times[0], times[-1], LABELS, WIDTH - RIGHT - 40)
        top_rate = max(1.0, *(p.records_per_second for p in figure.points))
        top_done = max(1, *(p.done for p in figure.points))
        for tick_x, label in x.ticks():
            body.append(f'<line class="grid" x1="{tick_x}" x2="{tick_x}" y1="{plot_top}" '
                        f'y2="{plot_bottom}"/>')
            body.append(_text(tick_x, plot_bottom + 14, label, "axis", "middle"))

        def rate_y(v: float) -> float:
            return round(plot_bottom - v / top_rate * (plot_bottom - plot_top), 1)

        def done_y(v: float) -> float:
            return round(plot_bottom - v / top_done * (plot_bottom - plot_top), 1)

        rate_line = " ".join(f"{x(p.time)},{rate_y(p.records_per_second)}"
                             for p in figure.points)
        done_line = " ".join(f"{x(p.time)},{done_y(p.done)}" for p in figure.points)
        body.append(f'<polyline class="series-done" points="{done_line}"/>')
        body.append(f'<polyline class="series-rate" points="{rate_line}"/>')
        for time, epoch in figure.epochs:
            ex = x(time)
            body.append(f'<g class="mark mark-epoch" data-epoch="{epoch}"><line x1="{ex}" '
                        f'x2="{ex}" y1="{plot_top}" y2="{plot_bottom}"/>'
                        f'{_text(ex + 3, plot_top + 10, f"epoch {epoch}", "axis")}</g>')
        body.append(_text(LABELS - 6, plot_top + 8, f"{top_rate:,.0f} rec/s", "axis rate",
                          "end"))
        body.append(_text(WIDTH - RIGHT, plot_top + 8, f"{top_done:,} tasks", "axis done",
                          "end"))
        body.append(_text(LABELS - 6, plot_bottom, "0", "axis", "end"))
        body.append(_text((LABELS + WIDTH) / 2, plot_bottom + 28,
                          "time since the server first saw the stream: records per second "
                          "(blue), tasks done (orange)", "axis", "middle"))
        y = plot_bottom + 44
    else:
        body.append(_text(LABELS, 40, "no figures over time yet", "note"))
        y = 60
    if figure.readers:
        body.append(_text(4, y + 10, "records per reader", "role"))
        y += 16
        mean = sum(n for _, n in figure.readers) / len(figure.readers)
        top = max(n for _, n in figure.readers) or 1
        for reader, records in figure.readers:
            slow = records < mean / 2
            width = max(1.0, records / top * (WIDTH - RIGHT - LABELS - 120))
            body.append(f'<g class="reader{" slow" if slow else ""}" '
                        f'data-reader="{escape(reader)}" data-records="{records}">'
                        f'<title>{escape(reader)}: {records:,} records'
                        f'{" (under half the mean)" if slow else ""}</title>'
                        + _text(LABELS - 6, y + 10, reader, "label", "end")
                        + f'<rect x="{LABELS}" y="{y + 1}" width="{width:.1f}" '
                        f'height="{LANE - 3}"/>'
                        + _text(LABELS + width + 4, y + 10, f"{records:,}"
                                + (" slow" if slow else ""), "axis") + "</g>")
            y += LANE
    if figure.lags:
        body.append(_text(4, y + 14, "lag per partition (messages not read)", "role"))
        y += 20
        top = max(figure.lags.values()) or 1
        for partition, lag in sorted(figure.lags.items()):
            width = max(1.0, lag / top * (WIDTH - RIGHT - LABELS - 120))
            body.append(f'<g class="lag" data-partition="{escape(partition)}" '
                        f'data-lag="{lag}">'
                        + _text(LABELS - 6, y + 10, partition, "label", "end")
                        + f'<rect x="{LABELS}" y="{y + 1}" width="{width:.1f}" '
                        f'height="{LANE - 3}"/>' + _text(LABELS + width + 4, y + 10,
                                                         f"{lag:,}", "axis") + "</g>")
            y += LANE
    for note in figure.notes:
        body.append(_text(4, y + 14, note, "note"))
        y += 16
    return _svg(ident, WIDTH, y + 8, f"Data stream {figure.name}",
                f"{len(figure.points)} samples of the read rate and tasks done, "
                f"{len(figure.epochs)} epoch changes, {len(figure.readers)} readers", body)


# ---- Hosts ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HostRow:
    name: str
    cpu: tuple[float, float] | None
    """(reserved, total); ``None``: unlimited."""
    memory: tuple[float, float] | None
    gpus: list[list[tuple[int, bool]]]
    """GPU devices in topology groups (NUMA nodes where known, else one group): (device,
    reserved)."""
    out: str
    """Why it takes nothing new (drained, quarantined: its reason); empty: in service."""


def host_rows(usages: Sequence[HostUsage]) -> tuple[list[HostRow], int]:
    """The usage grid's rows, the first :data:`HOSTS_SHOWN`; and how many hosts there are."""
    rows = []
    for usage in usages[:HOSTS_SHOWN]:
        host, free = usage.host, usage.free
        cpu = None if host.cpu is None else (max(0.0, host.cpu - free.cpu), float(host.cpu))
        memory = None if host.memory is None else (max(0.0, host.memory - free.memory),
                                                   float(host.memory))
        free_devices = set(free.devices or ())
        if host.gpu_tree is not None:
            groups = [[d for switch in node for d in switch] for node in host.gpu_tree]
        else:
            groups = [list(range(host.gpus))] if host.gpus else []
        gpus = [[(d, d not in free_devices) for d in group] for group in groups]
        condition = usage.condition
        out = f"{condition.state}: {condition.reason}" if condition is not None else ""
        rows.append(HostRow(host.name, cpu, memory, gpus, out))
    return rows, len(usages)


def _usage_bar(x: float, y: float, width: float, figure: tuple[float, float] | None,
               what: str, text: str) -> str:
    if figure is None:
        return _text(x, y + 11, f"{what}: unlimited", "axis")
    used, total = figure
    share = used / total if total else 0.0
    return (f'<g class="usage" data-what="{what}" data-used="{used:g}" data-total="{total:g}">'
            f'<title>{what}: {text} reserved</title>'
            f'<rect class="capacity" x="{x}" y="{y + 1}" width="{width}" height="{LANE - 3}"/>'
            f'<rect class="used" x="{x}" y="{y + 1}" width="{width * min(share, 1.0):.1f}" '
            f'height="{LANE - 3}"/>' + _text(x + width + 4, y + 10, f"{share:.0%}", "axis")
            + "</g>")


def hosts_svg(rows: Sequence[HostRow], total: int) -> Markup:
    """The usage grid: per host, reserved CPU and memory against what it has, and each GPU
    reserved or free, grouped by NUMA node; hosts out of service marked, and why."""
    body = [_text(LABELS, 14, "CPU", "role"), _text(LABELS + 190, 14, "memory", "role"),
            _text(LABELS + 380, 14, "GPUs (a gap between NUMA nodes)", "role")]
    y = 22.0
    for row in rows:
        body.append(f'<g class="host-row{" out" if row.out else ""}" '
                    f'data-host="{escape(row.name)}">')
        body.append(_text(LABELS - 6, y + 10, row.name, "label", "end"))
        cpu_text = f"{row.cpu[0]:g} of {row.cpu[1]:g}" if row.cpu else ""
        memory_text = f"{size(row.memory[0])} of {size(row.memory[1])}" if row.memory else ""
        body.append(_usage_bar(LABELS, y, 140, row.cpu, "cpu", cpu_text))
        body.append(_usage_bar(LABELS + 190, y, 140, row.memory, "memory", memory_text))
        gx = LABELS + 380.0
        for group in row.gpus:
            for device, reserved in group:
                body.append(f'<rect class="gpu {"reserved" if reserved else "free"}" '
                            f'data-device="{device}" x="{gx}" y="{y + 1}" width="10" '
                            f'height="{LANE - 3}"><title>GPU {device}: '
                            f'{"reserved" if reserved else "free"}</title></rect>')
                gx += 12
            gx += 8
        if row.out:
            body.append(_text(max(gx, LABELS + 440), y + 10, row.out[:120], "out"))
        body.append("</g>")
        y += LANE + 2
    if total > len(rows):
        body.append(_text(4, y + 12, f"{total - len(rows)} more hosts not drawn", "note"))
        y += 16
    legend = [f'<rect class="gpu reserved" x="{LABELS}" y="{y + 6}" width="10" height="10"/>',
              _text(LABELS + 14, y + 15, "reserved", "axis"),
              f'<rect class="gpu free" x="{LABELS + 90}" y="{y + 6}" width="10" height="10"/>',
              _text(LABELS + 104, y + 15, "free", "axis")]
    return _svg("hosts-usage", WIDTH, y + 24, "Host usage",
                f"{len(rows)} hosts: reserved CPU, memory and GPUs; "
                f"{sum(1 for r in rows if r.out)} out of service", body + legend)


# ---- Queue waits ----------------------------------------------------------------------------

WAIT_BINS = ((10.0, "<10s"), (60.0, "<1m"), (600.0, "<10m"), (3600.0, "<1h"),
             (21600.0, "<6h"), (math.inf, "6h+"))


@dataclass(frozen=True)
class QueueWaits:
    queue: str
    counts: list[int]
    """Waits per bin of :data:`WAIT_BINS`."""
    median: float
    p90: float


def queue_waits(waits: Mapping[str, Sequence[float]]) -> list[QueueWaits]:
    """Per queue, how the waits of the last day fall into :data:`WAIT_BINS`."""
    figures = []
    for queue, seconds in waits.items():
        if not seconds:
            continue
        ordered = sorted(seconds)
        counts = [0] * len(WAIT_BINS)
        for s in ordered:
            counts[next(i for i, (bound, _) in enumerate(WAIT_BINS) if s < bound)] += 1
        figures.append(QueueWaits(queue, counts, round(ordered[len(ordered) // 2], 3),
                                  round(ordered[min(len(ordered) - 1,
                                                    int(len(ordered) * 0.9))], 3)))
    return figures


def waits_svg(figures: Sequence[QueueWaits], waiting: Sequence[tuple[str, str, float]]
              ) -> Markup:
    """Per queue, a histogram of the waits of the last day; then who waits now and for how
    long (``waiting``: application, queue, seconds)."""
    body: list[str] = []
    y = 8.0
    column = 60
    for figure in figures:
        top = max(figure.counts) or 1
        body.append(f'<g class="queue-waits" data-queue="{escape(figure.queue)}" '
                    f'data-waits="{sum(figure.counts)}">')
        body.append(_text(4, y + 12, f"{figure.queue}: {sum(figure.counts)} admitted, median "
                                     f"{_offset(figure.median)}, 90% within "
                                     f"{_offset(figure.p90)}", "role"))
        base = y + 74
        for i, ((_, label), count) in enumerate(zip(WAIT_BINS, figure.counts, strict=True)):
            height = count / top * 48
            bx = LABELS + i * column
            body.append(f'<rect class="wait-bin" data-bin="{escape(label)}" '
                        f'data-count="{count}" x="{bx}" y="{base - height:.1f}" '
                        f'width="{column - 8}" height="{height:.1f}"><title>{count} waited '
                        f'{escape(label)}</title></rect>')
            body.append(_text(bx + (column - 8) / 2, base + 12, label, "axis", "middle"))
            if count:
                body.append(_text(bx + (column - 8) / 2, base - height - 2, str(count),
                                  "axis", "middle"))
        body.append("</g>")
        y = base + 22
    if not figures:
        body.append(_text(4, y + 12, "No application was admitted after waiting in the last "
                                     "day (since this server started).", "note"))
        y += 22
    if waiting:
        body.append(_text(4, y + 14, "waiting now", "role"))
        y += 20
        longest = max(s for _, _, s in waiting) or 1.0
        for app_id, queue, seconds in waiting:
            width = max(1.0, seconds / longest * (WIDTH - RIGHT - LABELS - 120))
            body.append(f'<g class="waiting" data-app="{escape(app_id)}">'
                        f'<title>{escape(app_id)} ({escape(queue)}) waits for '
                        f'{_offset(seconds)}</title>'
                        + _text(LABELS - 6, y + 10, app_id[-18:], "label", "end")
                        + f'<rect x="{LABELS}" y="{y + 1}" width="{width:.1f}" '
                        f'height="{LANE - 3}"/>'
                        + _text(LABELS + width + 4, y + 10, _offset(seconds), "axis")
                        + "</g>")
            y += LANE
    return _svg("queue-waits", WIDTH, y + 8, "Admission waits",
                f"per queue, how long the applications admitted in the last day waited; "
                f"{len(waiting)} applications waiting now", body)


# ---- Runs of one job ------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    app_id: str
    state: str
    submitted: float
    seconds: float
    current: bool


def runs_svg(runs: Sequence[Run]) -> Markup:
    """The runs of one job name, oldest first: a column per run, its height the run's
    duration, its colour its outcome, each a link to its page."""
    top = max((r.seconds for r in runs), default=1.0) or 1.0
    column, base = 26, 84
    body = [_text(4, 12, f"longest {_offset(top)}", "axis")]
    for i, run in enumerate(runs):
        height = max(2.0, run.seconds / top * 64)
        outcome = run.state if run.state in COLOURS else "STARTING"
        bx = 8 + i * column
        body.append(f'<a href="/apps/{escape(run.app_id)}" class="run'
                    f'{" current" if run.current else ""}" data-app="{escape(run.app_id)}" '
                    f'data-state="{escape(run.state)}"><title>{escape(run.app_id)}: '
                    f'{escape(run.state)} after {_offset(run.seconds)}</title>'
                    f'<rect x="{bx}" y="{base - height:.1f}" width="{column - 6}" '
                    f'height="{height:.1f}" fill="{COLOURS[outcome]}"/></a>')
    body.append(_text(8, base + 14, "runs of this job, oldest first (height: duration)",
                      "axis"))
    return _svg("job-runs", max(8 + len(runs) * column + 8, 320), base + 22,
                "Runs of this job", f"{len(runs)} runs: duration and outcome", body,
                "chart small-chart")
