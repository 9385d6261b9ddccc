"""A trainer's usage figures, from its cgroup's counters (:meth:`~primus.executor.cgroups.
TrainerCgroup.usage`): pure logic; the executor samples and writes them."""

from __future__ import annotations

from primus.executor.cgroups import Usage
from primus.state.records import ExecutorUsage


class UsageSampler:
    """One attempt's figures: the CPU it used over each interval (the counter's growth over
    the time between two samples), the memory it holds, and the most it held (the kernel's
    peak where it counts one, else the most any sample saw)."""

    def __init__(self, attempt: int, cpu_reserved: float, memory_reserved: int) -> None:
        self.attempt = attempt
        self.cpu_reserved = cpu_reserved
        self.memory_reserved = memory_reserved
        self._last: tuple[float, float] | None = None
        self._peak: int | None = None

    def figures(self, now: float, usage: Usage) -> ExecutorUsage:
        """The figures at ``now`` from the counters ``usage`` read then."""
        cpu = None
        if usage.cpu_seconds is not None:
            if self._last is not None and now > self._last[0]:
                cpu = round(max(0.0, usage.cpu_seconds - self._last[1]) / (now - self._last[0]),
                            3)
            self._last = (now, usage.cpu_seconds)
        seen = [m for m in (usage.memory_peak, usage.memory, self._peak) if m is not None]
        self._peak = max(seen) if seen else None
        return ExecutorUsage(attempt=self.attempt, time=now, cpu=cpu,
                             cpu_seconds=None if usage.cpu_seconds is None
                             else round(usage.cpu_seconds, 3),
                             memory=usage.memory, memory_peak=self._peak,
                             cpu_reserved=self.cpu_reserved,
                             memory_reserved=self.memory_reserved)
