"""Series over time the UI draws and etcd does not keep: each data stream's stats as the
server saw them change, and how long admission requests waited, per queue.

``primus server`` feeds them from the watch its metrics already fold
(``primus/server/metrics.py``): nothing here reads etcd. They are bounded rings, kept in the
server's memory only (a restarted server starts them anew; an application's go when its keys
leave etcd):

* a stream: at most :data:`STREAM_POINTS` points of (time, tasks done, records, bytes, epoch,
  lag), six floats each in an ``array`` (6 KiB a stream, about 6 MiB for 1,000 applications of
  one stream). A point closer than the series' gap to the one before replaces it; a full
  series drops every other point and doubles its gap, so it spans the whole run, coarser as it
  grows;
* a queue: the waits that ended in the last :data:`WAIT_WINDOW` seconds, at most
  :data:`WAITS_KEPT` (about 0.5 MiB a queue).
"""

from __future__ import annotations

import collections
from array import array
from dataclasses import dataclass, field

from primus.state.records import StreamStats

STREAM_POINTS = 120
FIRST_GAP = 1.0
"""Seconds between two points of a new stream series (the AM writes stats at most once a
second)."""
WAIT_WINDOW = 24 * 3600.0
WAITS_KEPT = 5000
_FIELDS = 6


@dataclass(frozen=True)
class StreamPoint:
    time: float
    done: int
    records: int
    bytes: int
    epoch: int
    lag: int | None


class StreamSeries:
    """One stream's stats over time (see the module's docstring)."""

    def __init__(self) -> None:
        self.values = array("d")
        self.gap = FIRST_GAP

    def add(self, now: float, stats: StreamStats) -> None:
        point = (now, stats.done, stats.records, stats.bytes, stats.epoch,
                 -1.0 if stats.lag is None else stats.lag)
        if self.values and now - self.values[-_FIELDS] < self.gap and len(self.values) > _FIELDS:
            self.values[-_FIELDS:] = array("d", point)  # the newest point moves on
            return
        self.values.extend(point)
        if len(self.values) >= STREAM_POINTS * _FIELDS:
            kept = array("d")
            count = len(self.values) // _FIELDS
            for i in [*range(0, count - 1, 2), count - 1]:  # every other one, and the newest
                kept.extend(self.values[i * _FIELDS:(i + 1) * _FIELDS])
            self.values, self.gap = kept, self.gap * 2

    def points(self) -> list[StreamPoint]:
        v = self.values
        return [StreamPoint(v[i], int(v[i + 1]), int(v[i + 2]), int(v[i + 3]), int(v[i + 4]),
                            None if v[i + 5] < 0 else int(v[i + 5]))
                for i in range(0, len(v), _FIELDS)]


@dataclass
class Samples:
    """The series of one server (see the module's docstring)."""

    streams: dict[tuple[str, str], StreamSeries] = field(default_factory=dict)
    waits: dict[str, collections.deque[tuple[float, float]]] = field(default_factory=dict)

    def stream_stats(self, app_id: str, stream: str, stats: StreamStats, now: float) -> None:
        """A stream's stats as they are at ``now``."""
        self.streams.setdefault((app_id, stream), StreamSeries()).add(now, stats)

    def stream(self, app_id: str, stream: str) -> list[StreamPoint]:
        series = self.streams.get((app_id, stream))
        return series.points() if series is not None else []

    def forget(self, app_id: str) -> None:
        """The application's keys left etcd: its series go."""
        for key in [k for k in self.streams if k[0] == app_id]:
            del self.streams[key]

    def waited(self, queue: str, seconds: float, now: float) -> None:
        """An admission request of ``queue`` waited ``seconds``, until ``now``."""
        waits = self.waits.setdefault(queue, collections.deque(maxlen=WAITS_KEPT))
        waits.append((now, seconds))
        while waits and waits[0][0] < now - WAIT_WINDOW:
            waits.popleft()

    def waits_of(self, now: float) -> dict[str, list[float]]:
        """Per queue, the seconds of the waits that ended in the last day."""
        return {queue: [seconds for at, seconds in waits if at >= now - WAIT_WINDOW]
                for queue, waits in sorted(self.waits.items())}
