"""The UI's pictures (``primus/ui/charts.py``) and the series the server keeps for them
(``primus/ui/samples.py``): pure logic, no server."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from primus.am.reconcile import past_attempts
from primus.client.queues import HostUsage
from primus.config.inventory import Host
from primus.data.tasks import ReaderCounts
from primus.scheduler.placement import HostFree
from primus.state.records import (
    PAST_ATTEMPTS,
    READERS_KEPT,
    AppEvent,
    ExecutorPlan,
    HostCondition,
    PastAttempt,
    StreamStats,
    TaskDone,
)
from primus.state.states import AppState, ExecutorState
from primus.ui import charts
from primus.ui.samples import STREAM_POINTS, Samples, StreamSeries

SVG = "{http://www.w3.org/2000/svg}"


def plan(index: int, attempt: int, state: ExecutorState, launch: float | None,
         release: float | None, host: str = "host-a", past: list[PastAttempt] | None = None,
         exit_class: str = "", exit_code: int | None = None) -> ExecutorPlan:
    return ExecutorPlan(role="worker", index=index, attempt=attempt, host=host,
                        address="10.0.0.1", state=state, launch_time=launch,
                        release_time=release, exit_class=exit_class, exit_code=exit_code,
                        past=past or [])


def parsed(svg: str) -> ET.Element:
    """The SVG as XML: it must be well formed, whatever text went into it."""
    return ET.fromstring(svg)


def bars(root: ET.Element) -> list[dict[str, str]]:
    return [dict(g.attrib) for g in root.iter(f"{SVG}g") if g.get("class") == "bar"]


def test_a_lane_has_a_bar_per_attempt_coloured_by_how_it_ended_and_restarts_marked():
    past = [PastAttempt(attempt=1, host="host-a", state=ExecutorState.FAILED, launch_time=10,
                        release_time=20, exit_code=3),
            PastAttempt(attempt=2, host="host-b", state=ExecutorState.FAILED, launch_time=21,
                        release_time=30, exit_class="OOM_KILLED", exit_code=137)]
    plans = {"worker": [(0, plan(0, 3, ExecutorState.RUNNING, 31, None, "host-c", past)),
                        (1, plan(1, 1, ExecutorState.SUCCEEDED, 10, 40)),
                        (2, plan(2, 1, ExecutorState.PLANNED, None, None))]}
    events = [AppEvent(seq=0, time=5, kind="submitted", message="submitted by alice"),
              AppEvent(seq=1, time=12, kind="cluster", message="cluster spec version 1"),
              AppEvent(seq=2, time=25, kind="am", message="AM am-2 leads (took over)"),
              AppEvent(seq=3, time=26, kind="placed", message="worker-0 placed")]
    figure = charts.timeline(plans, events, AppState.RUNNING, 5.0, None, now=50.0)
    assert (figure.start, figure.end) == (5.0, 50.0)
    assert [(lane.index, [(b.attempt, b.host, b.outcome) for b in lane.bars])
            for lane in figure.lanes] == [
        (0, [(1, "host-a", "FAILED"), (2, "host-b", "OOM_KILLED"), (3, "host-c", "RUNNING")]),
        (1, [(1, "host-a", "SUCCEEDED")]),
        (2, [])]
    assert figure.lanes[0].bars[2].end == 50.0  # running: up to now
    assert [(m.kind, m.time) for m in figure.marks] == [("state", 5), ("cluster", 12),
                                                         ("am", 25)]
    root = parsed(charts.timeline_svg(figure))
    assert root.find(f"{SVG}title").text == "Executor timeline"
    drawn = bars(root)
    assert [(b["data-outcome"], b["data-host"]) for b in drawn] == [
        ("FAILED", "host-a"), ("OOM_KILLED", "host-b"), ("RUNNING", "host-c"),
        ("SUCCEEDED", "host-a")]
    fills = [g.find(f"{SVG}rect").get("fill") for g in root.iter(f"{SVG}g")
             if g.get("class") == "bar"]
    assert fills == [charts.COLOURS[o] for o in ("FAILED", "OOM_KILLED", "RUNNING",
                                                   "SUCCEEDED")]
    restarts = [p for p in root.iter(f"{SVG}path") if p.get("class") == "restart"]
    assert len(restarts) == 2  # attempts 2 and 3 of worker-0


def test_an_attempt_that_ends_before_it_starts_is_an_instant_with_a_note():
    plans = {"worker": [(0, plan(0, 1, ExecutorState.FAILED, 100, 90))]}
    figure = charts.timeline(plans, [], AppState.FAILED, 95.0, 101.0, now=200.0)
    (bar,) = figure.lanes[0].bars
    assert bar.skewed and bar.start == bar.end == 100
    assert any("clock skew" in note for note in figure.notes)
    assert bars(parsed(charts.timeline_svg(figure)))[0]["data-skewed"] == "true"


def test_ten_thousand_executors_draw_a_bounded_picture_that_counts_the_rest():
    plans = {"worker": [(i, plan(i, 1, ExecutorState.RUNNING if i % 10 else
                                 ExecutorState.FAILED, 10, None if i % 10 else 20))
                        for i in range(10_000)],
             "ps": [(i, plan(i, 1, ExecutorState.RUNNING, 10, None)) for i in range(4)]}
    events = [AppEvent(seq=i, time=10 + i / 100, kind="cluster", message=f"v{i}")
              for i in range(1000)]
    figure = charts.timeline(plans, events, AppState.RUNNING, 1.0, None, now=30.0)
    assert len(figure.lanes) == charts.LANES_PER_ROLE + 4
    assert figure.hidden == {"worker": {"FAILED": 993, "RUNNING": 8943}}
    assert any("9936 more executors" in note for note in figure.notes)
    svg = charts.timeline_svg(figure)
    assert len(svg) < 400_000
    parsed(svg)


def test_text_with_markup_stays_text_in_every_picture():
    evil = '<script>alert(1)</script>&"'
    plans = {"worker": [(0, plan(0, 1, ExecutorState.RUNNING, 10, None, host=evil))]}
    events = [AppEvent(seq=0, time=11, kind="app-state", message=evil)]
    figure = charts.timeline(plans, events, AppState.RUNNING, 10.0, None, now=20.0)
    svg = charts.timeline_svg(figure)
    assert "<script>" not in svg
    root = parsed(svg)
    assert bars(root)[0]["data-host"] == evil
    usage = HostUsage(Host(name="h1", address="h1", cpu=8, memory=2**30, gpus=2),
                      [], HostFree(Host(name="h1", address="h1"), 1, 8, 2**30, [0, 1]),
                      HostCondition(state="drained", reason=evil, since=1.0, by="root"))
    rows, total = charts.host_rows([usage])
    hosts = charts.hosts_svg(rows, total)
    assert "<script>" not in hosts and evil in "".join(parsed(hosts).itertext())
    waits = charts.waits_svg([], [(evil, evil, 3.0)])
    assert "<script>" not in waits
    parsed(waits)
    runs = charts.runs_svg([charts.Run(evil, "FAILED", 1.0, 2.0, True)])
    assert "<script>" not in runs
    parsed(runs)


def test_a_stream_figure_has_rates_epochs_and_each_readers_share_with_slow_ones_marked():
    samples = Samples()
    for t, done, records, epoch in ((0, 0, 0, 0), (10, 5, 1000, 1), (20, 10, 3000, 1),
                                    (30, 15, 4000, 2)):
        samples.stream_stats("app", "train", StreamStats(done=done, records=records,
                                                         epoch=epoch), float(t))
    stats = StreamStats(done=15, records=4000, epoch=2,
                        readers={"worker-0": 1900, "worker-1": 1800, "worker-10": 300})
    figure = charts.stream_figure("train", samples.stream("app", "train"), stats)
    assert [p.records_per_second for p in figure.points] == [0.0, 100.0, 200.0, 100.0]
    assert figure.epochs == [(30.0, 2)]
    assert figure.readers == [("worker-0", 1900), ("worker-1", 1800), ("worker-10", 300)]
    root = parsed(charts.stream_svg(figure, "s"))
    slow = [g.get("data-reader") for g in root.iter(f"{SVG}g")
            if (g.get("class") or "").startswith("reader") and "slow" in g.get("class")]
    assert slow == ["worker-10"]
    assert [g.get("data-epoch") for g in root.iter(f"{SVG}g")
            if g.get("class") == "mark mark-epoch"] == ["2"]


def test_a_kafka_stream_draws_its_lag_per_partition():
    stats = StreamStats(lag=30, lags={"clicks[0]": 10, "clicks[1]": 20})
    figure = charts.stream_figure("clicks", [], stats)
    root = parsed(charts.stream_svg(figure, "k"))
    assert {g.get("data-partition"): g.get("data-lag") for g in root.iter(f"{SVG}g")
            if g.get("class") == "lag"} == {"clicks[0]": "10", "clicks[1]": "20"}


def test_a_stream_series_stays_bounded_and_spans_the_whole_run():
    series = StreamSeries()
    for t in range(100_000):
        series.add(float(t), StreamStats(done=t, records=t * 10))
    points = series.points()
    assert len(points) <= STREAM_POINTS
    assert points[0].time == 0.0 and points[-1].time == 99_999.0
    times = [p.time for p in points]
    assert times == sorted(times)


def test_samples_of_an_application_go_with_it_and_waits_older_than_a_day_are_dropped():
    samples = Samples()
    samples.stream_stats("a", "s", StreamStats(), 1.0)
    samples.forget("a")
    assert samples.stream("a", "s") == []
    samples.waited("urgent", 5.0, now=0.0)
    samples.waited("urgent", 7.0, now=90_000.0)
    assert samples.waits_of(90_000.0) == {"urgent": [7.0]}


def test_queue_waits_fall_into_bins_with_median_and_ninetieth_percentile():
    (figure,) = charts.queue_waits({"batch": [1.0] * 5 + [30.0] * 4 + [7200.0]})
    assert figure.counts == [5, 4, 0, 0, 1, 0]
    assert (figure.median, figure.p90) == (30.0, 7200.0)
    root = parsed(charts.waits_svg([figure], [("app-1", "batch", 65.0)]))
    assert [r.get("data-count") for r in root.iter(f"{SVG}rect")
            if r.get("class") == "wait-bin"] == ["5", "4", "0", "0", "1", "0"]


def test_host_rows_group_gpus_by_numa_node_and_mark_reserved_ones():
    host = Host(name="dgx", address="dgx", cpu=64, memory=2**40, gpus=8,
                gpu_tree=(((0, 1), (2, 3)), ((4, 5), (6, 7))))
    usage = HostUsage(host, [], HostFree(host, 1, 48, 2**39, [2, 3, 4, 5, 6, 7]), None)
    (row,), total = charts.host_rows([usage])
    assert total == 1 and row.cpu == (16.0, 64.0) and row.out == ""
    assert row.gpus == [[(0, True), (1, True), (2, False), (3, False)],
                        [(4, False), (5, False), (6, False), (7, False)]]
    root = parsed(charts.hosts_svg([row], 1))
    assert [r.get("data-device") for r in root.iter(f"{SVG}rect")
            if r.get("class") == "gpu reserved" and r.get("data-device")] == ["0", "1"]


def test_a_plan_keeps_its_ended_attempts_the_last_sixteen():
    first = plan(0, 1, ExecutorState.FAILED, 1.0, 2.0)
    assert past_attempts(None, 1) == []
    assert [p.attempt for p in past_attempts(first, 2)] == [1]
    assert past_attempts(first, 1) == []  # planned again: the same attempt
    running = plan(0, 2, ExecutorState.RUNNING, 3.0, None, past=past_attempts(first, 2))
    assert [p.attempt for p in past_attempts(running, 2)] == [1]
    long = plan(0, 40, ExecutorState.FAILED, 1.0, 2.0,
                past=[PastAttempt(attempt=i, host="h", state=ExecutorState.FAILED)
                      for i in range(24, 40)])
    kept = past_attempts(long, 41)
    assert len(kept) == PAST_ATTEMPTS and kept[-1].attempt == 40 and kept[0].attempt == 25


def test_reader_counts_keep_the_latest_epoch_and_at_most_the_first_readers():
    counts = ReaderCounts()
    for i in range(READERS_KEPT + 3):
        counts.done(f"0002-{i:08d}", TaskDone(records=2, bytes=1, role="w", index=i, time=1.0))
    counts.done("0001-00000000", TaskDone(records=5, bytes=1, role="w", index=0, time=1.0))
    stats = counts.of(StreamStats())
    assert stats.epoch == 2 and stats.readers_partial
    assert len(stats.readers) == READERS_KEPT and stats.readers["w-0"] == 7
    counts.done("0002-99999999", TaskDone(records=1, bytes=1, role="w", index=0, time=1.0))
    assert stats.readers["w-0"] == 7, "the stats are a copy"


def test_a_run_chart_links_each_run_and_marks_this_one():
    runs = [charts.Run(f"job-{i}", state, float(i), 10.0 * (i + 1), i == 2)
            for i, state in enumerate(("SUCCEEDED", "FAILED", "RUNNING"))]
    root = parsed(charts.runs_svg(runs))
    links = [a for a in root.iter(f"{SVG}a")]
    assert [a.get("href") for a in links] == ["/apps/job-0", "/apps/job-1", "/apps/job-2"]
    assert [a.get("class") for a in links] == ["run", "run", "run current"]
    assert re.fullmatch(r"Runs of this job", root.find(f"{SVG}title").text)


def test_a_hundred_thousand_events_draw_the_latest_marks_with_a_note():
    events = [AppEvent(seq=i, time=float(i), kind="cluster", message=f"<b>v{i}</b>")
              for i in range(100_000)]
    figure = charts.timeline({}, events, AppState.RUNNING, 0.0, None, now=100_000.0)
    assert len(figure.marks) == charts.MARKS_SHOWN
    assert figure.marks[0].time == 100_000 - charts.MARKS_SHOWN
    assert any("99000 older marks not drawn" in note for note in figure.notes)
    parsed(charts.timeline_svg(figure))
