"""Archiving finished applications, and deleting their keys from etcd after the retention.

A pass (:func:`archive_pass`) observes every application of the deployment (its status, whether
an AM leads it, what the history holds of it), decides for each (:func:`decide`, pure) and acts:
an application that has ended and whose AM has exited is archived, unless it is already archived
as it is now; once it is archived and ``finish_time + retention`` has passed, its keys are
deleted in one transaction guarded by the status key's revision as archived (and by the absence
of an AM). A crash between the two leaves an archived application whose keys are still there:
the next pass finds it archived and deletes them; nothing is lost, nothing doubled.

:class:`Archiver` runs passes in ``primus server``: one at start, one after every change of an
application's status or AM (coalesced), and one every minute (or ``retention / 10``) for the
retention. Several servers may run it at once: every step is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from primus.config.site import Settings
from primus.history.api import ArchivedApp, History, HistoryError, stored_queue
from primus.state.keys import AppKeys, apps_prefix
from primus.state.records import AppStatus, UnreadableRecordError, decode
from primus.state.refusals import record_refusal
from primus.state.view import read_app_keys
from primus.store.api import (
    Coordinator,
    Delete,
    EventType,
    Get,
    Resync,
    StoreError,
    WatchEvent,
    key_missing,
    key_unchanged_since,
)
from primus.store.recipes import watching

logger = logging.getLogger(__name__)

MAX_PASS_INTERVAL = 60.0
"""Seconds between two passes at most (the retention's check)."""
_BATCH = 60
"""Applications read per transaction (two reads each; etcd caps a transaction at 128)."""


@dataclass(frozen=True)
class AppFacts:
    """What a pass observes of one application: its status and the revision that wrote it,
    whether an AM leads it, and the status revision the history holds (``None``: not
    archived)."""

    app_id: str
    status: AppStatus
    status_revision: int
    led: bool
    archived_status_revision: int | None
    leaseless_leader: int = 0
    """The mod revision of a leader record attached to no lease (0: none). An AM's record
    always is; the application's identity may write one that is not, which would otherwise
    keep its keys in etcd for ever: it does not count as an AM leading."""


@dataclass(frozen=True)
class Archive:
    """Archive the application as it is now."""

    app_id: str


@dataclass(frozen=True)
class DeleteKeys:
    """Delete the application's keys (after it is archived: once its archive is current)."""

    app_id: str


Action = Archive | DeleteKeys


def decide(facts: AppFacts, now: float, retention: float) -> list[Action]:
    """What to do with one application: nothing while it runs or an AM leads it; archive it
    when the history lacks it as it is; delete its keys once its retention has passed."""
    status = facts.status
    if not status.state.terminal or facts.led:
        return []
    actions: list[Action] = []
    if facts.archived_status_revision != facts.status_revision:
        actions.append(Archive(facts.app_id))
    if (status.finish_time or status.submit_time) + retention <= now:
        actions.append(DeleteKeys(facts.app_id))
    return actions


@dataclass
class PassReport:
    """What one pass did: the applications it archived and those whose keys it deleted; and
    when the application that ended first of those it left unarchived ended (``None``: it
    left none)."""

    archived: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unarchived_since: float | None = None

    def left(self, facts: AppFacts) -> None:
        """Note that ``facts``'s application has ended and is not archived as it is."""
        ended = facts.status.finish_time or facts.status.submit_time
        self.unarchived_since = min(ended, self.unarchived_since or ended)


@dataclass
class Unended:
    """The applications a pass saw not ended, and the revision it looked at: the next pass
    reads the status of those alone whose status was written since (with thousands queued, a
    pass read two keys of each of them every minute)."""

    revision: int = 0
    apps: set[str] = field(default_factory=set)


async def observe(store: Coordinator, settings: Settings, history: History,
                  unended: Unended | None = None) -> list[AppFacts]:
    """The facts of every application of the deployment that has a status key; with
    ``unended`` (updated), of every one but those it holds whose status is as it was."""
    prefix = settings.prefix
    depth = prefix.count("/") + 3  # of apps/<app>/status

    def apps_of(keys: list[str]) -> list[str]:
        return [key.split("/")[-2] for key in keys
                if key.endswith("/status") and key.count("/") == depth]
    revision = (await store.get_prefix(apps_prefix(prefix), limit=1)).revision
    app_ids = every = apps_of(await store.list_keys(apps_prefix(prefix)))
    if unended is not None:
        changed = set(apps_of(await store.list_keys(
            apps_prefix(prefix), modified_after=unended.revision))) if unended.revision \
            else set(app_ids)
        still = unended.apps - changed
        app_ids = [app_id for app_id in app_ids if app_id not in still]
    facts: list[tuple[str, AppStatus, int, bool, int]] = []
    for start in range(0, len(app_ids), _BATCH):
        batch = [AppKeys(prefix, app_id) for app_id in app_ids[start:start + _BATCH]]
        result = await store.txn([], [get for keys in batch
                                      for get in (Get(keys.status), Get(keys.leader))])
        for keys, status, leader in zip(batch, result.reads[::2], result.reads[1::2],
                                        strict=True):
            if not status:
                continue  # deleted since it was listed
            try:
                record = decode(AppStatus, status[0].value, keys.status)
            except UnreadableRecordError as exc:
                logger.warning("[%s] not archived: %s", keys.app_id, exc)
                continue
            leaseless = leader[0].mod_revision if leader and not leader[0].lease else 0
            facts.append((keys.app_id, record, status[0].mod_revision,
                          bool(leader) and not leaseless, leaseless))
    if unended is not None:
        listed = set(every)
        unended.apps = {app_id for app_id in still if app_id in listed} | {
            app_id for app_id, status, _, _, _ in facts if not status.state.terminal}
        unended.revision = revision
    ended = [app_id for app_id, status, _, led, _ in facts if status.state.terminal and not led]
    archived = await history.status_revisions(ended)
    return [AppFacts(app_id, status, revision, led, archived.get(app_id), leaseless)
            for app_id, status, revision, led, leaseless in facts]


async def archive_app(store: Coordinator, settings: Settings, history: History,
                      app_id: str) -> ArchivedApp | None:
    """Read the application's keys (:func:`read_app_keys`) and archive them; ``None`` when
    its keys are gone."""
    keys = AppKeys(settings.prefix, app_id)
    snapshot = await read_app_keys(store, keys, stacks=True, savepoints=True)
    spec = next((kv for kv in snapshot.kvs if kv.key == keys.spec), None)
    if spec is None or not any(kv.key == keys.status for kv in snapshot.kvs):
        return None
    app = ArchivedApp.from_snapshot(
        keys, snapshot, stored_queue(spec.value, settings.queues.default_queue))
    await history.archive(app)
    return app


async def delete_keys(store: Coordinator, settings: Settings, app_id: str,
                      status_revision: int, leaseless_leader: int = 0) -> bool:
    """Delete the application's keys (``apps/<app>/``, its data tasks included, and
    ``scheduler/apps/<app>/``) if its status is still the one written at ``status_revision``
    and no AM leads it (no leader record, or still the one without a lease written at
    ``leaseless_leader``); return whether they were deleted."""
    keys = AppKeys(settings.prefix, app_id)
    no_am = key_unchanged_since(keys.leader, leaseless_leader) if leaseless_leader else \
        key_missing(keys.leader)
    result = await store.txn(
        [key_unchanged_since(keys.status, status_revision), no_am],
        [Delete(keys.root, prefix=True), Delete(keys.scheduler.app(app_id), prefix=True)])
    return result.succeeded


async def archive_pass(store: Coordinator, settings: Settings, history: History,
                       now: float, unended: Unended | None = None) -> PassReport:
    """Archive every application that has ended and whose AM has exited, unless archived as
    it is; delete the keys of those archived whose retention has passed at ``now``.

    Raises:
        HistoryUnavailableError: the history database cannot be used; nothing was deleted of
            an application not archived.
        StoreError: etcd did not answer.
    """
    report = PassReport()
    for facts in await observe(store, settings, history, unended):
        status_revision = facts.archived_status_revision
        if facts.status.state.terminal and status_revision != facts.status_revision \
                and facts.led:
            report.left(facts)  # archived once its AM has exited
        for action in decide(facts, now, settings.history_retention):
            if isinstance(action, Archive):
                try:
                    app = await archive_app(store, settings, history, action.app_id)
                except UnreadableRecordError as exc:
                    # A value its own processes wrote does not read: that application waits
                    # (an operator can read its keys with etcdctl), the others are archived.
                    keys = AppKeys(settings.prefix, action.app_id)
                    await record_refusal(store, keys, exc.key or keys.root,
                                         f"not archived: {exc}", "archiver")
                    report.left(facts)
                    break
                if app is None:
                    break
                report.archived.append(action.app_id)
                status_revision = app.status_revision
                logger.info("[%s] archived (%s)", action.app_id, app.state.value)
            elif status_revision is not None and await delete_keys(
                    store, settings, action.app_id, status_revision, facts.leaseless_leader):
                report.deleted.append(action.app_id)
                logger.info("[%s] keys deleted from etcd: its retention has passed",
                            action.app_id)
    return report


class Archiver:
    """Archive passes for as long as :meth:`run` runs (``primus server``).

    A pass runs at start, after every change of an application's status or AM (changes that
    arrive during a pass make one more pass), and every ``interval`` seconds: a minute, or a
    tenth of the retention when that is shorter. A pass that fails (the history database
    missing, read-only or locked; etcd unreachable) is logged and tried again at the next
    one; the server goes on serving.
    """

    def __init__(self, store: Coordinator, settings: Settings, history: History,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.history = history
        self.clock = clock
        self.interval = min(MAX_PASS_INTERVAL, settings.history_retention / 10)
        self.passes = 0
        """Passes finished, failed or not (tests await them)."""
        self.unended = Unended()
        self.unarchived_since: float | None = None
        """When the application that ended first of those not archived at the last pass
        that finished ended (``None``: none waited)."""

    def lag(self) -> float:
        """Seconds the oldest ended application not yet archived has waited (0: none)."""
        since = self.unarchived_since
        return 0.0 if since is None else max(0.0, self.clock() - since)

    async def run(self) -> None:
        """Run passes until cancelled."""
        changed = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch(changed))
        try:
            while True:
                changed.clear()
                await self._pass()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval):
                        await changed.wait()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _pass(self) -> None:
        try:
            report = await archive_pass(self.store, self.settings, self.history, self.clock(),
                                        self.unended)
            self.unarchived_since = report.unarchived_since
        except HistoryError as exc:
            logger.error("history: %s; archiving is tried again within %gs (the server "
                         "goes on serving)", exc, self.interval)
        except StoreError as exc:
            logger.warning("archiving: etcd did not answer (%s); tried again within %gs",
                           exc, self.interval)
        finally:
            self.passes += 1

    async def _watch(self, changed: asyncio.Event) -> None:
        """Set ``changed`` when an application ends or its AM exits: what a pass acts on
        (a queued application's status written at submit is not: a pass after each of
        thousands of submits made them cost the square of their number)."""
        prefix = apps_prefix(self.settings.prefix)
        depth = self.settings.prefix.count("/") + 3  # of apps/<app>/status
        while True:
            try:
                async with watching(self.store, prefix) as events:
                    async for event in events:
                        if isinstance(event, Resync) or _ends(event, depth) or (
                                event.key.endswith("/am/leader")
                                and event.type is EventType.DELETE):
                            changed.set()
            except StoreError as exc:
                logger.warning("archiving: watch of %s failed (%s); watching again", prefix,
                               exc)
                await asyncio.sleep(self.interval)


def _ends(event: WatchEvent, depth: int) -> bool:
    """Whether ``event`` writes an application's status (a key ``depth`` slashes deep) that
    has ended, or one that does not read (the pass says so)."""
    if event.type is not EventType.PUT or not event.key.endswith("/status") or \
            event.key.count("/") != depth:
        return False
    try:
        return decode(AppStatus, event.value, event.key).state.terminal
    except UnreadableRecordError:
        return True
