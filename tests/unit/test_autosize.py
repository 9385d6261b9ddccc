"""Autosize's policy (pure logic) and its spec's checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from primus.config.spec import AutosizeSpec, RoleSpec
from primus.scheduler.autosize import Window, measured_roles, observe, resize_for
from primus.state.records import ExecutorUsage

MI = 1 << 20


def role(**fields: object) -> RoleSpec:
    return RoleSpec.model_validate({"name": "worker", "command": "true", **fields})


def usage(time: float, cpu_seconds: float | None, memory: int | None = 100 * MI,
          peak: int | None = 100 * MI, attempt: int = 1, cpu: float = 2.0,
          reserved: int = 1024 * MI) -> ExecutorUsage:
    return ExecutorUsage(attempt=attempt, time=time, cpu_seconds=cpu_seconds, memory=memory,
                         memory_peak=peak, cpu_reserved=cpu, memory_reserved=reserved)


def window(*figures: ExecutorUsage) -> Window:
    """The window of ``figures``, each seen as it was written."""
    seen = None
    for figure in figures:
        seen = observe(seen, figure, figure.time)
    assert seen is not None
    return seen


def test_unset_bounds_are_written_in_from_the_roles_own_size():
    auto = role(cpu=4, memory="2Gi", autosize={"cpu": {}, "memory": {}}).autosize
    assert auto is not None and auto.cpu is not None and auto.memory is not None
    assert (auto.cpu.target, auto.cpu.min, auto.cpu.max) == (0.8, 0.1, 4)
    assert (auto.memory.headroom, auto.memory.min, auto.memory.max) == (0.25, 64 * MI,
                                                                        2048 * MI)
    small = role(cpu=0.05, memory="32Mi", autosize={"cpu": {}, "memory": {}}).autosize
    assert small is not None and small.cpu is not None and small.memory is not None
    assert (small.cpu.min, small.memory.min) == (0.05, 32 * MI), "never above the role"


@pytest.mark.parametrize(("autosize", "field", "words"), [
    ({"cpu": {"min": 4, "max": 2}}, ("autosize", "cpu"), "min 4 is above max 2"),
    ({"memory": {"min": "2Gi", "max": "1Gi"}}, ("autosize", "memory"),
     "min 2 GiB is above max 1 GiB"),
    ({"cpu": {"target": 0}}, ("autosize", "cpu", "target"), "greater than 0"),
    ({"cpu": {"target": 1.5}}, ("autosize", "cpu", "target"), "less than or equal to 1"),
    ({"cpu": {"max": 0.5}}, ("autosize",), "the role's cpu 1 is outside autosize.cpu's"),
    ({"memory": {"min": "2Gi"}}, ("autosize",), "the role's memory 1 GiB is outside"),
    ({"interval": 0}, ("autosize", "interval"), "greater than or equal to 1"),
    ({"cpu": {"aim": 0.5}}, ("autosize", "cpu", "aim"), "Extra inputs"),
])
def test_a_bad_autosize_is_refused_naming_the_field(autosize, field, words):
    with pytest.raises(ValidationError) as refused:
        role(cpu=1, memory="1Gi", autosize=autosize)
    (problem,) = refused.value.errors()
    assert problem["loc"] == field
    assert words in problem["msg"]


def auto(**fields: object) -> AutosizeSpec:
    spec = role(cpu=2, memory="1Gi", autosize={"interval": 10, **fields}).autosize
    assert spec is not None
    return spec


SIZE = (2.0, 1024 * MI)
NOW = 10.0


def test_cpu_goes_to_the_busiest_executors_use_over_the_target():
    busy = window(usage(0, 0.0), usage(10, 8.0))  # 0.8 cores
    idle = window(usage(0, 0.0), usage(10, 3.0))  # 0.3 cores
    decided = resize_for(auto(cpu={}), SIZE, [idle, busy], NOW)
    assert decided is not None
    assert (decided.cpu, decided.memory) == (1.0, 1024 * MI), "0.8 / 0.8, the ranks alike"
    assert "the busiest executor used 0.80 of 2 CPUs (target 0.8)" in decided.reason


def test_nothing_is_decided_before_every_executor_ran_for_the_interval_at_the_size():
    long = window(usage(0, 0.0), usage(10, 1.0))
    short = window(usage(5, 0.0), usage(10, 0.5))
    assert resize_for(auto(cpu={}), SIZE, [long, short], NOW) is None
    assert resize_for(auto(cpu={}), SIZE, [long, short], NOW + 5) is not None
    assert resize_for(auto(cpu={}), SIZE, [], NOW) is None
    other_size = window(usage(0, 0.0, cpu=1.0), usage(10, 1.0, cpu=1.0))
    assert resize_for(auto(cpu={}), SIZE, [long, other_size], NOW) is None, \
        "an executor not at the role's size yet (a resize applied, or waiting for room)"


def test_the_interval_is_the_keepers_clock_not_the_figures():
    forged = observe(None, usage(0, 0.0), NOW)  # says 1000 s, all seen at NOW
    forged = observe(forged, usage(1000, 1.0), NOW)
    assert forged is not None and forged.span == 1000
    assert resize_for(auto(cpu={}), SIZE, [forged], NOW) is None, "seen for 0 s here"


def test_the_size_decided_is_the_recorded_one_moved_within_bounds_never_a_figures():
    """A trainer writes its own figures: the sizes they say it reserves only tell whether it
    is at the recorded size; a value not autosized stays as recorded."""
    idle = window(usage(0, 0.0, memory=MI, peak=MI), usage(10, 0.0, memory=MI, peak=MI))
    decided = resize_for(auto(cpu={}), SIZE, [idle], NOW)
    assert decided is not None and (decided.cpu, decided.memory) == (0.1, 1024 * MI)
    forged = window(usage(0, 0.0, cpu=64.0, reserved=1 << 40),
                    usage(10, 0.0, cpu=64.0, reserved=1 << 40))
    assert resize_for(auto(cpu={}), SIZE, [forged], NOW) is None


@pytest.mark.parametrize("bad", [
    {"cpu_seconds": float("inf")}, {"cpu_seconds": float("nan")}, {"memory": -1},
    {"memory_peak": 1 << 62}, {"time": float("inf")}, {"cpu_reserved": float("nan")}])
def test_a_figure_no_trainer_could_write_is_left_out(bad):
    seen = observe(None, usage(0, 0.0), 0.0)
    forged = usage(5, 1.0).model_copy(update=bad)
    assert observe(seen, forged, 5.0) is seen
    assert observe(None, forged, 5.0) is None


def test_a_window_starts_again_at_a_new_size_or_attempt_and_ignores_an_old_figure():
    seen = window(usage(0, 0.0), usage(10, 5.0))
    assert observe(seen, usage(5, 2.0), 11) is seen
    resized = observe(seen, usage(12, 6.0, cpu=1.0), 12)
    assert resized is not None
    assert (resized.start, resized.opened, resized.cpu_reserved, resized.span) == (12, 12, 1.0, 0)
    again = observe(seen, usage(12, 0.5, attempt=2), 12)
    assert again is not None and (again.attempt, again.start) == (2, 12)


def test_the_roles_measured_are_those_whose_every_running_executor_has_a_window():
    windows = {("a", "w", 0): window(usage(0, 0.0)), ("a", "w", 1): window(usage(0, 0.0)),
               ("a", "ps", 0): window(usage(0, 0.0)), ("b", "w", 0): window(usage(0, 0.0))}
    running = [("a", "w", 0, 1), ("a", "w", 1, 1), ("a", "ps", 0, 1), ("a", "ps", 1, 1),
               ("b", "w", 0, 2), ("c", "w", 0, 1)]
    found = measured_roles({"a": frozenset({"w", "ps"}), "b": frozenset({"w"})}, running,
                           windows)
    assert list(found) == [("a", "w")], "ps-1 has none; b's is of another attempt"
    assert len(found[("a", "w")]) == 2


def test_hysteresis_keeps_a_size_close_to_the_wanted_one():
    near = window(usage(0, 0.0), usage(10, 15.0))  # 1.5 cores: wants 1.88 of 2
    assert resize_for(auto(cpu={}), SIZE, [near], NOW) is None
    assert resize_for(auto(cpu={}, hysteresis=0), SIZE, [near], NOW) is not None


def test_cpu_stays_within_its_bounds():
    idle = window(usage(0, 0.0), usage(10, 0.0))
    decided = resize_for(auto(cpu={"min": 0.5}), SIZE, [idle], NOW)
    assert decided is not None and decided.cpu == 0.5
    flat_out = window(usage(0, 0.0, cpu=1.0), usage(10, 10.0, cpu=1.0))
    grown = resize_for(auto(cpu={}), (1.0, 1024 * MI), [flat_out], NOW)
    assert grown is not None and grown.cpu == 1.25, "it grows when it uses all it has"
    capped = resize_for(auto(cpu={"max": 2}), SIZE, [window(usage(0, 0.0), usage(10, 20.0))],
                        NOW)
    assert capped is None, "at its max already"


def test_memory_goes_to_the_most_held_in_the_window_plus_headroom():
    held = window(usage(0, 0.0, memory=100 * MI, peak=900 * MI),
                  usage(5, 1.0, memory=300 * MI, peak=900 * MI),
                  usage(10, 2.0, memory=200 * MI, peak=900 * MI))
    decided = resize_for(auto(memory={}), SIZE, [held], NOW)
    assert decided is not None
    assert (decided.cpu, decided.memory) == (2.0, 375 * MI), \
        "300 MiB held at most in the window (the 900 MiB peak was before it), + 25 %"
    assert "the most held was 300 MiB of 1 GiB (headroom 0.25)" in decided.reason
    peaked = window(usage(0, 0.0, memory=100 * MI, peak=100 * MI),
                    usage(10, 2.0, memory=100 * MI, peak=600 * MI))
    decided = resize_for(auto(memory={"headroom": 0}), SIZE, [peaked], NOW)
    assert decided is not None and decided.memory == 600 * MI, "a peak reached in the window"


def test_memory_stays_within_its_bounds_and_unmeasured_figures_decide_nothing():
    tiny = window(usage(0, 0.0, memory=MI, peak=MI), usage(10, 1.0, memory=MI, peak=MI))
    decided = resize_for(auto(memory={}), SIZE, [tiny], NOW)
    assert decided is not None and decided.memory == 64 * MI
    unmeasured = window(usage(0, None, memory=None, peak=None),
                        usage(10, None, memory=None, peak=None))
    assert resize_for(auto(cpu={}, memory={}), SIZE, [unmeasured], NOW) is None
