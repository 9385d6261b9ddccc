"""Autosize: the size a role should reserve, from what its trainers used (pure logic).

A role with ``autosize`` in its spec is sized from its executors' usage figures
(:class:`~primus.state.records.ExecutorUsage`, written by each executor every
``resources.usage_interval``). Each executor's figures at its current size make a
:class:`Window`; once every running executor of the role has run at the role's size for the
role's ``autosize.interval``, :func:`resize_for` says the new size, if any: the whole role
together (the busiest executor decides, so ranks stay alike), CPU to the busiest's use divided
by the target share, memory to the most any held plus headroom, within the bounds, and only
where it differs from the size by more than the hysteresis. The server's autosizer
(``primus/server/autosize.py``) keeps the windows and asks for the resize as ``primus resize``
would.

The figures are the application's own processes' writes, so a trainer can forge them: the
size decided is the server's record moved within the bounds the job set (each value), figures
no trainer could write are left out, and admission grants a grow only where it fits the
hosts and the queue's CPU quota (docs/scheduling.md, "Autosize").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from primus.config.spec import AutosizeSpec, size_text
from primus.state.records import ExecutorUsage

CPU_STEP = 0.01
"""Cores: a CPU size autosize chooses is a multiple of this (rounded up)."""
MEMORY_STEP = 1 << 20
"""Bytes: a memory size autosize chooses is a multiple of this (rounded up)."""


LARGEST = float(1 << 60)
"""A figure above this (bytes, CPU seconds) is no trainer's: the figure is left out."""


@dataclass(frozen=True)
class Window:
    """One executor attempt's use while it ran at one size: from the first figures seen at
    that size to the latest."""

    attempt: int
    cpu_reserved: float
    memory_reserved: int
    opened: float
    """When the window began, by the clock of whoever keeps it (its ``start`` and ``end``
    are the executor's, which the application writes)."""
    start: float
    end: float
    cpu_start: float | None
    """CPU seconds its trainer had used at ``start``."""
    cpu_end: float | None
    peak_start: int | None
    """The attempt's memory peak at ``start`` (one it reached before the window)."""
    peak_end: int | None
    held: int | None
    """The most memory any figure in the window saw it hold."""

    @property
    def span(self) -> float:
        return self.end - self.start

    @property
    def cpu(self) -> float | None:
        """Cores it used over the window, on average (``None``: not counted, or no span)."""
        if self.cpu_start is None or self.cpu_end is None or self.span <= 0:
            return None
        return max(0.0, self.cpu_end - self.cpu_start) / self.span

    @property
    def memory(self) -> int | None:
        """The most memory it held within the window: the most a figure saw, and the attempt's
        peak where that peak was reached within the window (it grew)."""
        seen = [self.held] if self.held is not None else []
        if self.peak_end is not None and (self.peak_start is None
                                          or self.peak_end > self.peak_start):
            seen.append(self.peak_end)
        return max(seen) if seen else None


def observe(window: Window | None, usage: ExecutorUsage, now: float) -> Window | None:
    """``window`` with the figures ``usage`` added (seen at ``now``); a new window where
    ``usage`` is of another attempt or size. An older figure than the window's end, or one no
    trainer could have written (not a finite number, below zero, past :data:`LARGEST`), is
    left out: the figures are the application's writes."""
    if not _sane(usage):
        return window
    if window is not None and (window.attempt, window.cpu_reserved,
                               window.memory_reserved) == (usage.attempt, usage.cpu_reserved,
                                                           usage.memory_reserved):
        if usage.time <= window.end:
            return window
        held = max((m for m in (window.held, usage.memory) if m is not None), default=None)
        return replace(window, end=usage.time, cpu_end=usage.cpu_seconds,
                       peak_end=usage.memory_peak, held=held)
    return Window(attempt=usage.attempt, cpu_reserved=usage.cpu_reserved,
                  memory_reserved=usage.memory_reserved, opened=now, start=usage.time,
                  end=usage.time, cpu_start=usage.cpu_seconds, cpu_end=usage.cpu_seconds,
                  peak_start=usage.memory_peak, peak_end=usage.memory_peak, held=usage.memory)


def _sane(usage: ExecutorUsage) -> bool:
    figures = [usage.time, usage.cpu_reserved, usage.memory_reserved,
               *(f for f in (usage.cpu_seconds, usage.memory, usage.memory_peak)
                 if f is not None)]
    return all(math.isfinite(f) and 0 <= f <= LARGEST for f in figures)


def measured_roles(autosized: Mapping[str, frozenset[str]],
                   running: Iterable[tuple[str, str, int, int]],
                   windows: Mapping[tuple[str, str, int], Window]
                   ) -> dict[tuple[str, str], list[Window]]:
    """The autosized roles (``autosized``: by application) whose every running executor
    (``running``: application, role, index and attempt of each) has a window of its attempt,
    with those windows."""
    found: dict[tuple[str, str], list[Window]] = {}
    missing: set[tuple[str, str]] = set()
    for app_id, role, index, attempt in running:
        if role not in autosized.get(app_id, ()):
            continue
        window = windows.get((app_id, role, index))
        if window is None or window.attempt != attempt:
            missing.add((app_id, role))
        else:
            found.setdefault((app_id, role), []).append(window)
    return {key: found[key] for key in sorted(found.keys() - missing)}


def ripe(windows: Sequence[Window], interval: float, now: float) -> bool:
    """Whether every one of ``windows`` (at least one) has been open for ``interval`` by
    ``now`` (the keeper's clock)."""
    return bool(windows) and min(now - w.opened for w in windows) >= interval


@dataclass(frozen=True)
class Resize:
    """A new size for a role, and why."""

    cpu: float
    memory: int
    reason: str


def resize_for(auto: AutosizeSpec, asked: tuple[float, int], windows: Sequence[Window],
               now: float) -> Resize | None:
    """The resize a role of size ``asked`` (CPUs and memory, as the server recorded it)
    with ``auto`` wants, from the windows of its running executors; ``None`` while one of them
    is not at that size (a resize being applied, or waiting for room), or has not run at it
    for the interval by ``now`` (the keeper's clock), or where no value moves beyond the
    hysteresis. What the executors say they reserve only tells whether they are there yet:
    the size is the server's record, each value within its bounds."""
    if not ripe(windows, auto.interval, now) or \
            any((w.cpu_reserved, w.memory_reserved) != asked for w in windows):
        return None
    cpu, memory = asked
    said = []
    used = [w.cpu for w in windows]
    if auto.cpu is not None and auto.cpu.min is not None and auto.cpu.max is not None and \
            all(u is not None for u in used):
        busiest = max(u for u in used if u is not None)
        wanted = _clamp(_step_up(busiest / auto.cpu.target, CPU_STEP), auto.cpu.min,
                        auto.cpu.max)
        if abs(wanted - cpu) > auto.hysteresis * cpu:
            said.append(f"the busiest executor used {busiest:.2f} of {cpu:g} CPUs "
                        f"(target {auto.cpu.target:g})")
            cpu = wanted
    held = [w.memory for w in windows]
    if auto.memory is not None and auto.memory.min is not None and \
            auto.memory.max is not None and all(h is not None for h in held):
        most = max(h for h in held if h is not None)
        wanted_bytes = int(_clamp(_step_up(most * (1 + auto.memory.headroom), MEMORY_STEP),
                                  auto.memory.min, auto.memory.max))
        if abs(wanted_bytes - memory) > auto.hysteresis * memory:
            said.append(f"the most held was {size_text(most)} of {size_text(memory)} "
                        f"(headroom {auto.memory.headroom:g})")
            memory = wanted_bytes
    if not said:
        return None
    return Resize(cpu, memory, "autosize: " + "; ".join(said) + f" over "
                  f"{min(w.span for w in windows):.0f} s")


def _step_up(value: float, step: float) -> float:
    """``value`` rounded up to a multiple of ``step`` (a hair's float error is not a step)."""
    return math.ceil(value / step - 1e-9) * step


def _clamp(value: float, low: float, high: float) -> float:
    return round(min(max(value, low), high), 6)
