"""The AM keeper: every application that has not ended is led by an AM, also when its AM died
while etcd stayed up.

An AM that dies (a kill, an OOM, its host gone) leaves its leader key until the key's lease
expires; its executors go on, and nothing else would start an AM for the application. The
keeper is one process of a deployment (every ``primus server`` stands; one is elected at
:func:`~primus.state.keys.am_keeper_key`, as admission's leader is): it watches the
applications' leader keys and, when one expires on an application that is neither ended nor
suspended, starts an AM candidate on a host its ``am`` settings allow (the AM host first, then
its other hosts, the next one when a host cannot be reached). The candidate takes over as
``primus recover``'s does, adopting every executor whose lease is alive, and records in its
event who started it and why.

It also starts the AM of an application that waits for admission with no AM (``parked``: a
queued application is a record, docs/scheduling.md) once admission grants its request: it
watches the requests (``scheduler/apps/<app>/request``) for that. While the keeper's key
exists, submit and AMs park the queued applications.

Which applications want a candidate is :func:`orphans`, a pure decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping, Sequence

from primus.client.api import AppSummary
from primus.client.identities import stale_identities
from primus.client.service import ApplicationService
from primus.errors import PrimusError
from primus.launcher.api import LaunchError
from primus.scheduler.placement import am_hosts
from primus.state.keys import SchedulerKeys, am_keeper_key, apps_prefix, identity_start
from primus.state.records import (
    AdmissionRequest,
    ServiceLeader,
    UnreadableRecordError,
    decode,
    encode,
)
from primus.state.states import AppState
from primus.store.api import (
    EventType,
    Resync,
    StoreError,
)
from primus.store.recipes import Watch, lead_while_elected, watching

logger = logging.getLogger(__name__)

LEASE_TTL = 5
"""Seconds the keeper's leadership outlives its process."""
SUBMIT_GRACE = 30.0
"""Seconds the AM started at submit is given to lead before the keeper starts another."""
RETRY_AFTER = 30.0
"""Seconds a candidate the keeper started is given to lead before it starts another."""
RETRY_FAILED_START = 5.0
"""Seconds after an AM start that failed on every host (a host down, its interpreter gone)
before the keeper tries again: the application's grant, reservations held, waits for it."""
RECHECK = 5.0
"""Seconds at least between looks at every application (for an AM that never led, a
candidate that did not come); a leader key deleted and a request granted are acted on at
once, reading that application alone."""
LOOK_SHARE = 10
"""A look at every application is followed by at least this many times its own duration
without one: it takes at most a tenth of the keeper's time, however many applications."""


def orphans(summaries: Sequence[AppSummary], now: float, started: Mapping[str, float],
            granted: Collection[str] = ()) -> list[str]:
    """The applications that want an AM candidate now: not ended, not suspended, no leader
    key, past the grace of the AM started at submit and of any candidate started for them
    (``started``: when the keeper last started one for each); a parked application (waiting
    for admission with no AM) only once its request is ``granted``."""
    wanted = []
    for summary in summaries:
        status = summary.status
        if status.state.terminal or status.state is AppState.SUSPENDED or summary.archived \
                or summary.leader is not None:
            continue
        if status.parked and status.app_id not in granted:
            continue
        if status.state is AppState.SUBMITTED and now - status.submit_time < SUBMIT_GRACE:
            continue
        if now - started.get(status.app_id, -RETRY_AFTER) < RETRY_AFTER:
            continue
        wanted.append(status.app_id)
    return wanted


def granted_app(admission: SchedulerKeys, key: str, value: bytes) -> str:
    """The application whose granted request this key holds; empty for any other key. A
    request is its application's to write (the keeper only starts that application's own AM
    on it): one that does not read is left out, and logged."""
    app_id, kind, _ = admission.parse(key)
    if kind != "request":
        return ""
    try:
        return app_id if decode(AdmissionRequest, value, key).granted else ""
    except UnreadableRecordError as exc:
        logger.warning("[am-keeper] %s", exc)
        return ""


class AmKeeper:
    """One candidate for the keeper's leadership, over ``service``'s deployment."""

    def __init__(self, service: ApplicationService) -> None:
        self.service = service
        self.me = ServiceLeader.this_process()
        self._started: dict[str, float] = {}
        self._tries: dict[str, int] = {}
        self._unclaimed: set[str] = set()  # identities without a live application, last look

    async def run(self) -> None:
        """Stand, keep the applications led while elected, stand again after losing the
        lease; until cancelled."""
        await lead_while_elected(self.service.store, am_keeper_key(self.service.settings.prefix),
                                 encode(self.me), LEASE_TTL,
                                 lambda _leadership, _lost: self._lead(), "am-keeper")

    async def _lead(self) -> None:
        store, prefix = self.service.store, self.service.settings.prefix
        admission = SchedulerKeys(prefix)
        loop = asyncio.get_running_loop()
        while True:
            async with watching(store, apps_prefix(prefix)) as watch, \
                    watching(store, admission.apps) as requests:
                # What the events concern: (application, granted) for a request granted
                # (True) or an AM's leader key deleted (False); None when a watch resynced.
                wanting: asyncio.Queue[tuple[str, bool] | None] = asyncio.Queue()
                feeds = [asyncio.ensure_future(self._leaders_gone(watch, wanting)),
                         asyncio.ensure_future(self._grants(requests, admission, wanting))]
                try:
                    began = loop.time()
                    await self._look_at_all(admission)
                    # A look at every application is for what no event tells (an AM that
                    # never led, a candidate that did not come): with many applications it is
                    # long, so it takes at most a tenth of the time; events are acted on at
                    # once, reading their applications alone.
                    until = loop.time() + max(RECHECK, LOOK_SHARE * (loop.time() - began))
                    while (batch := await self._next_batch(wanting, until - loop.time())):
                        await self._look_at(batch)
                finally:
                    for feed in feeds:
                        feed.cancel()
                    await asyncio.gather(*feeds, return_exceptions=True)

    @staticmethod
    async def _next_batch(wanting: asyncio.Queue[tuple[str, bool] | None], timeout: float
                          ) -> dict[str, bool] | None:
        """The applications the events of the next ``timeout`` seconds concern, with whether
        each was granted, gathered with those already queued; ``None`` when none came in time
        or a watch resynced (then everything is looked at)."""
        if timeout <= 0:
            return None
        try:
            first = await asyncio.wait_for(wanting.get(), timeout)
        except TimeoutError:
            return None
        batch: dict[str, bool] = {}
        item = first
        while True:
            if item is None:
                return None
            batch[item[0]] = batch.get(item[0], False) or item[1]
            if wanting.empty():
                return batch
            item = wanting.get_nowait()

    async def _leaders_gone(self, watch: Watch,
                            wanting: asyncio.Queue[tuple[str, bool] | None]) -> None:
        """Queue each application whose AM's leader key is deleted. A leader key written is a
        candidate this keeper started that leads: it is forgotten (:attr:`_started`), to be
        replaced at once if it dies."""
        apps = apps_prefix(self.service.settings.prefix)
        async for event in watch.after(watch.revision):
            if isinstance(event, Resync):
                wanting.put_nowait(None)
                return
            if not event.key.endswith("/leader"):
                continue
            app_id = event.key[len(apps):].partition("/")[0]
            if event.type is EventType.DELETE:
                wanting.put_nowait((app_id, False))
            else:
                self._started.pop(app_id, None)
                self._tries.pop(app_id, None)

    @staticmethod
    async def _grants(requests: Watch, admission: SchedulerKeys,
                      wanting: asyncio.Queue[tuple[str, bool] | None]) -> None:
        """Queue each application whose admission request is granted."""
        async for event in requests.after(requests.revision):
            if isinstance(event, Resync):
                wanting.put_nowait(None)
                return
            if event.type is EventType.PUT and \
                    (app_id := granted_app(admission, event.key, event.value)):
                wanting.put_nowait((app_id, True))

    async def _look_at_all(self, admission: SchedulerKeys) -> None:
        granted = await self._granted(admission)
        # Status and AM alone: a look must stay cheap with thousands of applications (their
        # progress would read each one whole).
        summaries = await self.service.list_apps(progress=False)
        live = {s.status.app_id for s in summaries if not s.status.state.terminal}
        for tried in (self._started, self._tries):  # forget the applications gone
            for app_id in set(tried) - live:
                del tried[app_id]
        for app_id in orphans(summaries, time.time(), self._started, granted):
            await self._revive(app_id, admitted=app_id in granted)
        if self.service.settings.accounts is not None:
            await self._sweep_identities(summaries)

    async def _look_at(self, wanting: Mapping[str, bool]) -> None:
        """Start a candidate for those of ``wanting`` (application ids, each with whether its
        request was just granted) that want one, reading only theirs."""
        granted = {app_id for app_id, was_granted in wanting.items() if was_granted}
        summaries = await self.service.summaries(list(wanting))
        for app_id in orphans(summaries, time.time(), self._started, granted):
            await self._revive(app_id, admitted=app_id in granted)

    async def _granted(self, admission: SchedulerKeys) -> set[str]:
        """The applications whose admission request is granted now."""
        found = await self.service.store.get_prefix(admission.apps)
        return {app_id for kv in found.kvs
                if (app_id := granted_app(admission, kv.key, kv.value))}

    async def _sweep_identities(self, summaries: Sequence[AppSummary]) -> None:
        """Remove the etcd identities of the applications that have ended and whose AM has
        exited, and of those a crash left without an application (:func:`stale_identities`)."""
        store, prefix = self.service.store, self.service.settings.prefix
        apps = {s.status.app_id: not s.status.state.terminal or s.leader is not None
                for s in summaries}
        try:
            names = await store.list_identities(identity_start(prefix))
            stale, self._unclaimed = stale_identities(names, identity_start(prefix), apps,
                                                      self._unclaimed)
            for name in stale:
                await store.remove_identity(name)
                logger.info("[am-keeper] removed the etcd identity %s: its application has "
                            "ended", name)
        except StoreError as exc:
            logger.warning("[am-keeper] cannot sweep the applications' etcd identities: %s",
                           exc)

    async def _revive(self, app_id: str, admitted: bool = False) -> None:
        """Start an AM candidate for ``app_id`` on the first of its AM hosts that can be
        reached, beginning one further along at each try (``admitted``: a parked application
        whose request admission granted)."""
        self._started[app_id] = time.time()
        try:
            report = await self.service.get_app(app_id)
            hosts = list(dict.fromkeys(
                am_hosts(report.view.spec, report.hosts) + list(report.hosts)))
        except PrimusError as exc:
            logger.warning("[am-keeper] %s: %s", app_id, exc)
            return
        tries = self._tries.get(app_id, 0)
        self._tries[app_id] = tries + 1
        why = f"started by server {self.me.host}:{self.me.pid}: " + (
            "admitted while it waited with no AM" if admitted and report.view.status.parked
            else "no AM led the application")
        for host in hosts[tries % len(hosts):] + hosts[:tries % len(hosts)]:
            try:
                await self.service.start_candidate(report, host, why)
            except LaunchError as exc:
                logger.warning("[am-keeper] %s: no AM candidate on %s: %s", app_id, host.name,
                               exc)
                continue
            logger.info("[am-keeper] %s: no AM led it; started an AM candidate on %s", app_id,
                        host.name)
            return
        # None could be started: tried again soon (at the next look past this), not after a
        # candidate's whole grace.
        self._started[app_id] = time.time() - RETRY_AFTER + RETRY_FAILED_START
        logger.warning("[am-keeper] %s: no AM could be started on any of its hosts; trying "
                       "again within %gs", app_id, RETRY_FAILED_START + RECHECK)
