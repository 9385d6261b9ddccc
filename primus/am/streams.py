"""The AM's half of the data protocol (``primus/data/tasks.py`` holds the executor's).

:class:`DataStreams` keeps one :class:`~primus.data.tasks.StreamLedger` per data stream of the
application and does with them what the AM does: it folds the watch events under ``data/`` into
them and re-queues the tasks of lost readers; it reloads them after a resync; it hands them the
sources added at run time; it runs each stream's :class:`~primus.data.tasks.TaskWriter`, writes
each stream's stats and ends a stream once every task is resolved; and it tells the AM's view
what the ledgers know (how fast each reader reads, each stream's facts), for ``decide``.

Imported by the AM whatever its application: fsspec and the readers (``primus.data``) are
imported only once an application has a data stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from primus.am.background import Background
from primus.am.savepoints import SavepointTaker
from primus.state.keys import AppKeys
from primus.state.records import StreamStats, encode
from primus.state.view import AppView
from primus.store.api import Compare, Coordinator, EventType, Op, Put, WatchEvent, key_missing

if TYPE_CHECKING:
    from primus.config.spec import RoleSpec, StreamSpec
    from primus.data.tasks import OffsetMirror, StreamLedger, WriteOps

logger = logging.getLogger(__name__)

STATS_INTERVAL = 1.0
"""Seconds between writes of a stream's stats (when they changed)."""
LAST_COMMIT_WAIT = 5.0
"""Seconds the AM waits, once the application ended, for its streams' offset mirrors to
commit where they ended (``kafka.commit_group``)."""


class DataStreams:
    """The AM's side of every data stream of one application.

    ``write`` is the AM's guarded write (:data:`~primus.data.tasks.WriteOps`: applied only if
    its compares hold and the AM still leads); ``wake`` wakes the AM's loop when what the view
    holds of a stream changed in a way ``decide`` acts on. Background work (re-queues, reloads)
    lasts until :meth:`cancel`.
    """

    def __init__(self, store: Coordinator, keys: AppKeys, streams: Sequence[StreamSpec],
                 write: WriteOps, wake: Callable[[], None]) -> None:
        self.keys = keys
        self.ledgers: dict[str, StreamLedger] = {}
        if streams:  # fsspec and the readers are imported only when needed
            from primus.data.tasks import StreamLedger  # noqa: PLC0415
            self.ledgers = {stream.name: StreamLedger(store, keys.stream(stream.name), stream,
                                                      write) for stream in streams}
        self._write = write
        self._wake = wake
        self._resolving = asyncio.Event()  # a folded event left a ledger resolved, not ended
        self._background = Background(self._failed)
        self.savepoints = SavepointTaker(store, keys, self.ledgers, write, self._background)

    def observe(self, event: WatchEvent) -> bool:
        """Fold a watch event of the application's keys; whether it was one under ``data/``,
        which is the ledgers' alone. A reader lost is its tasks re-queued (in the
        background); a savepoint asked for is taken (:class:`~primus.am.savepoints.
        SavepointTaker`)."""
        if event.key.startswith(self.keys.savepoints):
            if event.type is EventType.PUT:
                self.savepoints.observe(event.key, event.value)
            return False
        if not event.key.startswith(self.keys.data):
            return False
        ledger = self.ledgers.get(event.key[len(self.keys.data):].split("/", 1)[0])
        if ledger is None:
            return True
        lost = ledger.observe(event)
        if lost is not None:
            self._background.spawn(ledger.requeue(lost))
        if ledger.resolved and not ledger.ended:
            self._resolving.set()
        return True

    def reload(self) -> None:
        """The watch lost history (a resync): every ledger reads its stream again (in the
        background)."""
        for ledger in self.ledgers.values():
            self._background.spawn(ledger.load())

    def resize(self, roles: Sequence[RoleSpec]) -> None:
        """The roles as the application has them now (a scale changes how many executors
        read a stream)."""
        self.savepoints.resize(roles)

    def extend(self, streams: Sequence[StreamSpec]) -> None:
        """Hand each stream's sources, as the application has them now (``streams``, the
        effective spec's), to its ledger: sources added at run time (``primus data add``) get
        their tasks like the others."""
        for stream in streams:
            ledger = self.ledgers.get(stream.name)
            if ledger is not None:
                ledger.extend(stream)

    def observe_facts(self, view: AppView) -> None:
        """Each loaded stream's facts into the view as its ledger has them now, after every
        event folded so far: ``decide`` reads them beside the executors' results, which came
        on the same watch, so that a stream is never judged unread at the end of an
        application when its last task's completion was folded before the results."""
        for name, ledger in self.ledgers.items():
            if ledger.revision:  # loaded
                known = view.stream_facts.get(name)
                view.stream_facts[name] = ledger.facts(known.error if known else "")

    def observe_read_rates(self, view: AppView, now: float) -> None:
        """How fast each running reader of a role with straggler rescheduling reads, from its
        stream's ledger, into the view."""
        view.read_rates = {}
        for role in view.spec.roles:
            stream = view.spec.stream_of(role.name)
            ledger = self.ledgers.get(stream.name) if stream else None
            if role.straggler is None or ledger is None:
                continue
            for index in range(role.num):
                plan = view.executors[(role.name, index)].plan
                rate = ledger.rates.rate((role.name, index, plan.attempt), now,
                                         role.straggler.window) if plan else None
                if rate is not None:
                    view.read_rates[(role.name, index)] = rate

    async def load(self) -> None:
        """Read every stream at one revision (its ledger; events folded meanwhile are held and
        folded in after the read)."""
        for ledger in self.ledgers.values():
            await ledger.load()

    async def run(self, view: AppView) -> None:
        """Until the application has ended: load every stream, write its tasks, keep its
        stats, end it once every task is resolved, and tell the view what its ledger knows
        (``decide`` fails the application when a stream cannot succeed)."""
        from primus.data.tasks import OffsetMirror, TaskWriter  # noqa: PLC0415

        self.savepoints.kept = view.spec.savepoints_kept
        await self.load()
        await self.savepoints.take_requested()
        writers = {name: asyncio.ensure_future(TaskWriter(ledger).run())
                   for name, ledger in self.ledgers.items()}
        mirrors = {mirror: asyncio.ensure_future(mirror.run())
                   for ledger in self.ledgers.values()
                   if (mirror := OffsetMirror(ledger)).sources}
        written: dict[str, StreamStats] = {}
        try:
            while not view.status.state.terminal:
                for name, ledger in self.ledgers.items():
                    writer = writers[name]
                    error = str(writer.exception()) if writer.done() and \
                        not writer.cancelled() and writer.exception() else ""
                    self._tell(view, ledger, error)
                    recorded = await self._record(view, ledger, written.get(name))
                    if recorded is not None:
                        written[name] = recorded
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STATS_INTERVAL):
                        await self._resolving.wait()
                self._resolving.clear()
        finally:
            for writer in writers.values():
                writer.cancel()
            await self._last_commits(mirrors)

    @staticmethod
    async def _last_commits(mirrors: Mapping[OffsetMirror, asyncio.Future[None]]) -> None:
        """Let each stream's offset mirror commit where the stream ended (a few seconds at
        most: a mirror, it must not hold the AM up), then stop it."""
        for mirror in mirrors:
            mirror.finishing.set()
        if mirrors:
            _, late = await asyncio.wait(mirrors.values(), timeout=LAST_COMMIT_WAIT)
            for future in late:
                future.cancel()
        for future in mirrors.values():
            if future.done() and not future.cancelled() and future.exception() is not None:
                logger.warning("offset mirror: %r", future.exception())

    def _tell(self, view: AppView, ledger: StreamLedger, error: str) -> None:
        """Put the ledger's facts into the view (an observation: ``decide`` says whether the
        stream fails the application); wake the AM when they changed what it decides on."""
        facts = ledger.facts(error)
        known = view.stream_facts.get(ledger.stream.name)
        view.stream_facts[ledger.stream.name] = facts
        if known is None or (known.stats.failed, known.resolved, known.error) != (
                facts.stats.failed, facts.resolved, facts.error):
            self._wake()

    async def _record(self, view: AppView, ledger: StreamLedger,
                      written: StreamStats | None) -> StreamStats | None:
        """Write the stream's stats if they differ from those ``written`` last, and its
        ``end`` once every task is resolved; the stats written, if a write went through."""
        ops: list[Op] = []
        compares: list[Compare] = []
        ending = ledger.resolved and not ledger.ended
        # What is written, as it is now: the ledger's stats move on during the write.
        stats = ledger.readers.of(ledger.stats).model_copy(
            update={"exhausted": True} if ending else {})
        if ending:
            # Not over a change this AM has not seen yet: it may add a source.
            ops.append(Put(ledger.keys.end, b""))
            compares.append(key_missing(self.keys.change(
                max([view.status.changes_recorded, *view.changes]) + 1)))
        if written != stats:
            ops.append(Put(ledger.keys.stats, encode(stats)))
        if not ops or not await self._write(ops, compares):
            return None
        if ending:
            ledger.stats = ledger.stats.model_copy(update={"exhausted": True})
            ledger.ended = True
            logger.info("[%s/am] data stream %s: every task resolved, its end written",
                        self.keys.app_id, ledger.stream.name)
        return stats

    def _failed(self, error: BaseException) -> None:
        # Leadership lost, most likely: the AM's loop stops on its own.
        logger.warning("[%s/am] data streams: %r", self.keys.app_id, error)

    def cancel(self) -> None:
        """Stop the re-queues and reloads under way (the AM stops leading)."""
        self._background.cancel()
