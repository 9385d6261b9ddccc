"""Each application's budget of etcd, enforced by the server (site ``budget:``, a queue's
``budget:``; docs/operations.md, "Each application's budget of etcd").

An application's identity may write without bound under its run-time keys, and etcd has no
quota per prefix: one trainer holding it (or a runaway application) could fill the site's
etcd to its space quota, after which etcd refuses every write of every application. So one
server (elected, as the AM keeper is) counts the live keys and bytes of each application of
an owner, from one read of the deployment and its watch, and the moment one is past its
budget the application loses its write permission and fails, its diagnosis naming the
budget (:meth:`~primus.client.service.ApplicationService.fail_over_budget`). What is
counted: every key under ``apps/<app>/`` and ``scheduler/apps/<app>/``, its key and value
bytes (the history etcd keeps until compaction is not: the site's auto-compaction bounds it).

The decisions are pure (:class:`BudgetFold`, :func:`over_budget`); :class:`BudgetKeeper`
applies them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from primus.client.service import ApplicationService
from primus.config.queues import Budget
from primus.state.records import AppOwner, ServiceLeader, UnreadableRecordError, decode, encode
from primus.store.api import EventType, Resync, Snapshot, StoreError
from primus.store.recipes import lead_while_elected, watching

logger = logging.getLogger(__name__)

LEASE_TTL = 10
"""Seconds the keeper's leadership outlives it."""


def keeper_key(prefix: str) -> str:
    """Leased by the server that counts the budgets."""
    return f"{prefix}/server/budget-keeper"


@dataclass
class Usage:
    """What one application holds in etcd now."""

    keys: int = 0
    bytes: int = 0


def over_budget(usage: Usage, budget: Budget) -> str:
    """Why ``usage`` is past ``budget`` (empty: it is not)."""
    past = []
    if budget.keys is not None and usage.keys > budget.keys:
        past.append(f"{usage.keys:,} keys, over its budget of {budget.keys:,}")
    if budget.bytes is not None and usage.bytes > budget.bytes:
        past.append(f"{usage.bytes:,} bytes, over its budget of {budget.bytes:,}")
    return "; ".join(past)


@dataclass
class BudgetFold:
    """Every application's usage, folded from the deployment's keys one change at a time;
    and each owner record seen (the queue, and whether the application has an identity of its
    own, come from there)."""

    prefix: str
    sizes: dict[str, int] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    owners: dict[str, AppOwner] = field(default_factory=dict)

    def app_of(self, key: str) -> str:
        """The application a key is counted to; empty for the deployment's own keys."""
        for start in (f"{self.prefix}/apps/", f"{self.prefix}/scheduler/apps/"):
            if key.startswith(start):
                return key[len(start):].partition("/")[0]
        return ""

    def put(self, key: str, value: bytes) -> str:
        """Count ``key`` as holding ``value``; return its application (or empty)."""
        app_id = self.app_of(key)
        if not app_id:
            return ""
        usage = self.usage.setdefault(app_id, Usage())
        size = len(key.encode()) + len(value)
        before = self.sizes.get(key)
        if before is None:
            usage.keys += 1
            usage.bytes += size
        else:
            usage.bytes += size - before
        self.sizes[key] = size
        if key == f"{self.prefix}/apps/{app_id}/owner":
            try:
                self.owners[app_id] = decode(AppOwner, value, key)
            except UnreadableRecordError as exc:  # written by the server: never, but bounded
                logger.warning("[%s] budget: %s", app_id, exc)
        return app_id

    def delete(self, key: str) -> str:
        """Count ``key`` as gone; return its application (or empty)."""
        app_id = self.app_of(key)
        size = self.sizes.pop(key, None)
        if not app_id or size is None:
            return app_id
        usage = self.usage[app_id]
        usage.keys -= 1
        usage.bytes -= size
        if not usage.keys:
            del self.usage[app_id]
            self.owners.pop(app_id, None)
        return app_id


class BudgetKeeper:
    """One candidate for counting the budgets of the deployment of ``service``; while it
    leads, an application of an owner past its budget is failed (once per application and
    leadership: failing it again finds it ended)."""

    def __init__(self, service: ApplicationService) -> None:
        self.service = service
        self.me = ServiceLeader.this_process()
        self.failed: set[str] = set()
        """Applications this process failed for their budget (tests await them)."""

    async def run(self) -> None:
        """Stand, count while elected, stand again after losing the lease; until cancelled."""
        settings = self.service.settings
        await lead_while_elected(self.service.store, keeper_key(settings.prefix), encode(self.me),
                                 LEASE_TTL, lambda _leadership, _lost: self._lead(), "budgets")

    async def _lead(self) -> None:
        store, prefix = self.service.store, self.service.settings.prefix
        async with watching(store, f"{prefix}/") as watch:
            fold = self._folded(await store.get_prefix(f"{prefix}/"))
            await self._judge(fold, set(fold.usage))
            async for item in watch.after(watch.revision):
                if isinstance(item, Resync):
                    fold = self._folded(item.snapshot)
                    await self._judge(fold, set(fold.usage))
                    continue
                app_id = fold.delete(item.key) if item.type is EventType.DELETE else \
                    fold.put(item.key, item.value)
                if app_id and app_id not in self.failed:
                    await self._judge(fold, {app_id})

    def _folded(self, snapshot: Snapshot) -> BudgetFold:
        fold = BudgetFold(self.service.settings.prefix)
        for kv in snapshot.kvs:
            fold.put(kv.key, kv.value)
        return fold

    async def _judge(self, fold: BudgetFold, app_ids: set[str]) -> None:
        queues = self.service.settings.queues
        for app_id in sorted(app_ids - self.failed):
            owner = fold.owners.get(app_id)
            usage = fold.usage.get(app_id)
            if owner is None or usage is None or not owner.account:
                continue  # no identity of its own: nothing it writes is not Primus's
            why = over_budget(usage, queues.budget_of(owner.queue))
            if not why:
                continue
            budget = "the budget of queue " + (owner.queue or queues.default_queue)
            try:
                await self.service.fail_over_budget(
                    app_id, f"over its etcd budget ({budget}): it holds {why}")
            except (StoreError, TimeoutError) as exc:
                logger.warning("[%s] budget: could not fail it yet: %s", app_id, exc)
                continue
            self.failed.add(app_id)

