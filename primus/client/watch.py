"""Following an application: a snapshot, then every change of its keys, one revision at a time.

:func:`watch_app` is what ``WatchApplication`` serves and what any other follower of an
application can use. It watches the application's keys in etcd and turns each revision's writes
into typed changes (:data:`AppChange`), each carrying the whole new value of what changed. A
follower that lost the stream resumes it from the last revision it received and misses nothing:
changes are grouped by revision, and one revision is never split across two updates.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace

from primus.client.api import AppReport
from primus.client.service import ApplicationService
from primus.config.spec import RoleSpec
from primus.errors import PrimusError
from primus.state.keys import AppKeys
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppStatus,
    ClusterSpec,
    KillRequest,
    StreamStats,
    decode,
    owned_status,
)
from primus.state.topology import effective_spec
from primus.state.view import (
    EXECUTOR_KINDS,
    ExecutorId,
    ExecutorView,
    KeyKind,
    app_key,
    observe_executor,
)
from primus.store.api import CompactedError, EventType, Resync, WatchEvent
from primus.store.recipes import watching

DEFAULT_PROGRESS_INTERVAL = 60.0
"""Seconds without a change after which :func:`watch_app` reports progress."""


_REVISION_GAP = 0.01
_REPLAY_IDLE = 1.0


class RevisionAheadError(PrimusError):
    """A revision to resume from that etcd has not reached: it comes from another etcd."""


@dataclass(frozen=True)
class StatusChanged:
    status: AppStatus


@dataclass(frozen=True)
class LeaderChanged:
    """``leader`` is ``None`` when no AM leads any more."""

    leader: AmLeader | None


@dataclass(frozen=True)
class RoleChanged:
    """A role was added, scaled or removed: ``role`` as it should be now (its ``num`` is
    ``desired``); a removed role is sent once, as it was, with ``desired`` 0."""

    role: RoleSpec
    desired: int
    removed: bool = False


@dataclass(frozen=True)
class ExecutorChanged:
    """The executor's plan, live and result as of the change (``None``: no such key)."""

    executor: ExecutorId
    view: ExecutorView


@dataclass(frozen=True)
class StreamChanged:
    name: str
    stats: StreamStats | None


@dataclass(frozen=True)
class ClusterChanged:
    """``cluster`` is ``None`` when the spec was dropped."""

    cluster: ClusterSpec | None


@dataclass(frozen=True)
class KillRequested:
    kill: KillRequest


@dataclass(frozen=True)
class EventAdded:
    event: AppEvent


AppChange = (StatusChanged | LeaderChanged | RoleChanged | ExecutorChanged | StreamChanged
             | ClusterChanged | KillRequested | EventAdded)


@dataclass(frozen=True)
class WatchUpdate:
    """One step of a watch: the application as a whole (``snapshot``, on the first update of a
    watch that does not resume, or could not), every change of one revision, or progress
    (neither: nothing changed up to ``revision``)."""

    revision: int
    snapshot: AppReport | None = None
    changes: list[AppChange] = field(default_factory=list)


async def watch_app(service: ApplicationService, app_id: str, after_revision: int = 0,
                    progress_interval: float = DEFAULT_PROGRESS_INTERVAL
                    ) -> AsyncGenerator[WatchUpdate, None]:
    """Follow the application until it has ended and no AM leads it.

    Args:
        service: The application service of the deployment.
        app_id: The application.
        after_revision: 0: start with a snapshot. N > 0: the changes written after revision
            N; a snapshot instead when etcd no longer holds that history.
        progress_interval: Seconds without a change after which a progress update carries
            the latest revision the watch has passed.

    Raises:
        AppNotFoundError: There is no such application.
        RevisionAheadError: ``after_revision`` is ahead of etcd's current revision.
    """
    report = await service.get_app(app_id)
    keys = report.view.keys
    if after_revision > report.revision:
        raise RevisionAheadError(f"after_revision: {after_revision} is ahead of etcd's current "
                                 f"revision {report.revision}; it comes from another etcd")
    executors: dict[ExecutorId, ExecutorView] | None = None
    if after_revision > 0:
        try:
            past = await service.store.get_prefix(keys.executors, revision=after_revision)
        except CompactedError:
            executors = None  # the history is gone: start again from a snapshot
        else:
            executors = {}
            for kv in past.kvs:
                found = app_key(keys, kv.key)
                if found is not None and found.kind in EXECUTOR_KINDS:
                    observe_executor(executors, found, kv.key, kv.value)
    if executors is None:
        yield WatchUpdate(report.revision, snapshot=report)
        after_revision = report.revision
        executors = {executor: replace(view) for executor, view in
                     report.view.executors.items()}
    if _over(report) and after_revision >= report.revision:
        return
    # Resuming after the application ended replays its last changes; nothing is written after
    # them, so the replay is over once the watch falls idle.
    replaying_end = _over(report)
    folder = _Folder(keys, report, executors)
    seen = after_revision
    async with watching(service.store, keys.root, after=after_revision) as watch:
        batch: list[WatchEvent] = []
        while True:
            # The writes of one revision arrive together: a batch is complete once the next
            # write is of another revision, or none follows at once.
            idle = _REPLAY_IDLE if replaying_end else progress_interval
            item = await watch.next_within(_REVISION_GAP if batch else idle)
            if item is None:
                if batch:  # nothing more of this revision is waiting: hand it over
                    update = folder.fold(batch)
                    batch = []
                    yield update
                    if folder.over and not replaying_end:
                        return
                elif replaying_end:
                    return
                else:
                    yield WatchUpdate(seen)
                continue
            if isinstance(item, Resync):
                report = await service.get_app(app_id)
                folder = _Folder(keys, report, {e: replace(v) for e, v in
                                                report.view.executors.items()})
                batch = []
                seen = report.revision
                yield WatchUpdate(report.revision, snapshot=report)
                if _over(report):
                    return
                continue
            if batch and item.revision != batch[0].revision:
                update = folder.fold(batch)
                batch = []
                yield update
                if folder.over and not replaying_end:
                    return
            seen = item.revision
            if folder.relevant(item.key):
                batch.append(item)


def _over(report: AppReport) -> bool:
    return report.view.status.state.terminal and report.leader is None


class _Folder:
    """Turns the writes of one revision into changes, keeping what a change must carry whole
    (executors, the leader, whether the application is over)."""

    def __init__(self, keys: AppKeys, report: AppReport,
                 executors: dict[ExecutorId, ExecutorView]) -> None:
        self.keys = keys
        self.submitted = report.view.submitted
        self.topology = dict(report.view.topology)
        self.roles = {role.name: role for role in report.view.spec.roles}
        self.streams = {stream.name for stream in report.view.spec.data}
        self.executors = executors
        self.terminal = report.view.status.state.terminal
        self.owner = report.view.owner
        self.led = report.leader is not None
        self.over = False

    def relevant(self, key: str) -> bool:
        """Whether a write of ``key`` is a change of the application a follower sees (a data
        stream's task keys change many times a second and show only through its stats)."""
        return not self.keys.is_task_key(key)

    def fold(self, batch: list[WatchEvent]) -> WatchUpdate:
        keys = self.keys
        changes: list[AppChange] = []
        touched: list[str] = []  # roles whose keys were written, in the order written
        for event in batch:
            key = event.key
            value = event.value if event.type is EventType.PUT else None
            found = app_key(keys, key)
            if found is None:
                continue
            match found.kind:
                case KeyKind.STATUS if value is not None:
                    status = owned_status(decode(AppStatus, value, key), self.owner)
                    self.terminal = status.state.terminal
                    changes.append(StatusChanged(status))
                case KeyKind.LEADER:
                    self.led = value is not None
                    changes.append(LeaderChanged(None if value is None
                                                 else decode(AmLeader, value, key)))
                case KeyKind.CLUSTER:
                    changes.append(ClusterChanged(None if value is None
                                                  else decode(ClusterSpec, value, key)))
                case KeyKind.KILL if value is not None:
                    changes.append(KillRequested(decode(KillRequest, value, key)))
                case KeyKind.EVENT if value is not None:
                    changes.append(EventAdded(decode(AppEvent, value, key)))
                case KeyKind.STREAM if value is not None and found.stream in self.streams:
                    changes.append(StreamChanged(found.stream, decode(StreamStats, value, key)))
                case KeyKind.ROLE | KeyKind.SOURCE:
                    if value is None:
                        self.topology.pop(key, None)
                    else:
                        self.topology[key] = value
                    if found.kind is KeyKind.ROLE:
                        touched.append(found.role)
                case _ if found.kind in EXECUTOR_KINDS:
                    observe_executor(self.executors, found, key, value)
                    changes = [c for c in changes if not (isinstance(c, ExecutorChanged)
                                                          and c.executor == found.executor)]
                    changes.append(ExecutorChanged(found.executor,
                                                   replace(self.executors[found.executor])))
        if touched:  # a change's keys are written together: one RoleChanged for them all
            changes += self._role_changes(touched)
        self.over = self.terminal and not self.led
        return WatchUpdate(batch[0].revision, changes=changes)

    def _role_changes(self, touched: list[str]) -> list[AppChange]:
        """The roles among ``touched`` as the topology has them now: each role that is in it,
        and once each role that has just left it (removed)."""
        now = {role.name: role for role in
               effective_spec(self.submitted, self.keys, self.topology).roles}
        changes: list[AppChange] = []
        for name in dict.fromkeys(touched):
            if name in now:
                changes.append(RoleChanged(now[name], now[name].num))
            elif name in self.roles:
                changes.append(RoleChanged(self.roles[name], 0, removed=True))
        self.roles = now
        return changes


__all__ = ["AppChange", "ClusterChanged", "EventAdded", "ExecutorChanged",
           "KillRequested", "LeaderChanged", "RevisionAheadError", "RoleChanged",
           "StatusChanged", "StreamChanged", "WatchUpdate", "watch_app"]
