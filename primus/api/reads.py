"""``GetApplication``'s reads: the requests for one application that arrive together share one
read of etcd, and an application none of whose keys changed is neither decoded nor converted
again.

**Consistency: every reply is linearizable.** A reply reflects a read of etcd
(:meth:`~primus.client.service.ApplicationService.get_app`, etcd's linearizable read) that
started after its request arrived: it holds every write acknowledged before the request was
sent, whoever made it (this server, another one, the CLI, an AM), and nothing a client could
have observed before asking is missing from it. Its ``revision`` is that read's. Requests that
arrive while a read is under way wait for the next one, which starts as soon as it ends and
serves them all, the way etcd itself batches linearizable reads (ReadIndex): one read in
flight per application, however many callers.

What is kept per application is the last report read (:class:`~primus.client.api.AppReport`)
and its replies. The next read compares the revision each key was last written at
(:attr:`AppReport.versions`): unchanged, the kept report and replies are given the new revision
and nothing else is done; changed, the application is decoded and converted again. Nothing is
watched, so nothing outlives its use: an application not read for ``idle`` seconds is
forgotten, the least recently read first beyond ``kept`` applications; one that no longer
exists is forgotten at once. An ended application is kept like any other (its reads are as
cheap, and just as current).

Why not serve from a watch: a watch alone cannot say that it has delivered everything up to
the revision a request must reflect (etcd 3.5.1's progress notifications may run ahead of
their events, etcd issue 15220), so a reply served from it could miss a write its caller had
seen acknowledged; a read per request (batched) is needed anyway, and it suffices.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from primus.api import convert
from primus.api.v1 import primus_pb2 as pb
from primus.client.api import AppNotFoundError, AppReport
from primus.client.service import ApplicationService

DEFAULT_IDLE = 60.0
"""Seconds after its last read that an application is forgotten."""
DEFAULT_KEPT = 1000
"""Applications kept at most; the least recently read go first."""
REPLIES_KEPT = 8
"""Replies kept per application, one per number of events asked for."""


@dataclass
class _Entry:
    """What is kept of one application."""

    report: AppReport | None = None
    """The last report read."""
    replied: AppReport | None = None
    """The report the last request was answered from."""
    replies: dict[int, pb.Application] = field(default_factory=dict)
    """Replies made of ``replied``, by number of events (the servicer never changes one)."""
    converted: dict[int, pb.Application] = field(default_factory=dict)
    """Replies converted from a report of the same versions as ``replied``, perhaps at an
    earlier revision, by number of events."""
    next_read: asyncio.Future[AppReport] | None = None
    """The read the requests that arrived since the one under way started wait for."""
    reader: asyncio.Task[None] | None = None
    used: float = 0.0


class ApplicationReads:
    """The applications' reads for one server.

    Args:
        service: The client layer the reads go through.
        idle: Seconds after its last read that an application is forgotten.
        kept: Applications kept at most (at least 1).
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, service: ApplicationService, idle: float = DEFAULT_IDLE,
                 kept: int = DEFAULT_KEPT, clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.idle = idle
        self.kept = kept
        self.clock = clock
        self._entries: dict[str, _Entry] = {}  # least recently read first

    def __contains__(self, app_id: str) -> bool:
        """Whether the application is kept."""
        return app_id in self._entries

    async def get(self, app_id: str, events: int) -> pb.Application:
        """The application, read after this call began, with its latest ``events`` events.

        Raises:
            AppNotFoundError: There is no such application.
            StoreError: etcd did not answer.
        """
        now = self.clock()
        entry = self._entries.pop(app_id, None) or _Entry()
        self._entries[app_id] = entry
        entry.used = now
        self._forget_unused(now)
        if entry.next_read is None:
            entry.next_read = asyncio.get_running_loop().create_future()
        if entry.reader is None:
            entry.reader = asyncio.ensure_future(self._read(app_id, entry))
        # Shielded: a caller that gives up must not cancel the read the others wait for.
        report = await asyncio.shield(entry.next_read)
        return self._reply(entry, report, events)

    async def _read(self, app_id: str, entry: _Entry) -> None:
        """Read for the waiting requests, again while more arrived during a read."""
        try:
            while True:
                # One turn of the loop first: requests already received join this read.
                await asyncio.sleep(0)
                waiting = entry.next_read
                if waiting is None:
                    break
                entry.next_read = None
                try:
                    report = await self.service.get_app(app_id, entry.report)
                except asyncio.CancelledError:
                    waiting.cancel()
                    raise
                except Exception as exc:  # noqa: BLE001 - every waiting request raises it
                    waiting.set_exception(exc)
                    waiting.exception()  # retrieved: its callers may all have given up
                    entry.report = None
                    if isinstance(exc, AppNotFoundError) and \
                            self._entries.get(app_id) is entry:
                        del self._entries[app_id]
                else:
                    entry.report = report
                    waiting.set_result(report)
        except asyncio.CancelledError:
            if entry.next_read is not None:  # the server stops: no read will come
                entry.next_read.cancel()
                entry.next_read = None
            raise
        finally:
            entry.reader = None

    def _reply(self, entry: _Entry, report: AppReport, events: int) -> pb.Application:
        """The reply of ``report`` with its latest ``events`` events: made once per read, and
        converted once per change of the application."""
        if entry.replied is not report:
            if entry.replied is None or entry.replied.versions != report.versions:
                entry.converted = {}  # a key changed: convert again
            entry.replies = {}
            entry.replied = report
        reply = entry.replies.get(events)
        if reply is None:
            converted = entry.converted.get(events)
            if converted is None:
                if len(entry.converted) >= REPLIES_KEPT:
                    del entry.converted[next(iter(entry.converted))]
                reply = entry.converted[events] = convert.report_to_message(report, events)
            else:
                reply = _at_revision(converted, report.revision)
            entry.replies[events] = reply
        return reply

    def _forget_unused(self, now: float) -> None:
        while self._entries:
            app_id, entry = next(iter(self._entries.items()))
            if len(self._entries) <= self.kept and now - entry.used < self.idle:
                return
            del self._entries[app_id]


def _at_revision(reply: pb.Application, revision: int) -> pb.Application:
    """A copy of ``reply`` at ``revision`` (the original may still be being sent)."""
    copy = pb.Application()
    copy.CopyFrom(reply)
    copy.revision = revision
    return copy
