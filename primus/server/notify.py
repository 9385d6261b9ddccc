"""Webhook notifications, delivered by the server (docs/observability.md, "Notifications").

One server of a deployment leads them (elected at ``server/notifier``). It runs passes: after
each change of an application's status, hang or admission wait or of a host's condition, and
every :data:`PASS_INTERVAL` (an admission wait grows without a change). A pass reads those
facts and what the webhooks were told of already (``notify/seen/``), decides what is new
(:func:`decide`, pure) and writes every new notification of an application (or a host) to the
outbox (``notify/outbox/<id>``) in one transaction with its new ``seen`` value: a fact is in
the outbox once, or not yet (a state change, a hang and an admission wait seen by one pass go
together).

The sender posts each delivery's body to each of its webhooks that has not answered 2xx,
signed with HMAC-SHA256 (``X-Primus-Signature-256: sha256=<hex>``), waiting ``backoff`` × 2ⁿ
between attempts (at most 5 minutes), each bounded by ``timeout`` and by :data:`MAX_ANSWER`
bytes of answer read. Once every webhook answered, or the attempts ran out, the delivery
leaves the outbox and its outcome is recorded with its application
(``apps/<app>/notifications/<id>``). A leader that dies leaves the outbox to the next one:
every notification is delivered at least once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from primus.client.webhooks import app_key, ensure_job_key, signature
from primus.config.notify import NotifyPolicy
from primus.config.site import Settings
from primus.history.api import stored_queue
from primus.state.keys import AppKeys, SchedulerKeys, apps_prefix
from primus.state.records import (
    AppOwner,
    AppStatus,
    Delivery,
    DeliveryOutcome,
    DeliveryTarget,
    HangReport,
    HostCondition,
    NotifySeen,
    ServiceLeader,
    UnreadableRecordError,
    Waiting,
    decode,
    encode,
    owned_status,
)
from primus.state.states import AppState
from primus.store.api import (
    Coordinator,
    Delete,
    EventType,
    Get,
    Put,
    Resync,
    StoreError,
    key_unchanged_since,
)
from primus.store.recipes import lead_while_elected, watching

logger = logging.getLogger(__name__)

PASS_INTERVAL = 5.0
"""Seconds between passes when nothing changes (admission waits grow by themselves)."""
PASS_SHARE = 0.1
"""The share of the time passes may take at most, from :data:`PACED_FROM` applications on: a
pass looks at every application, and while thousands are submitted each submission is a change
(bench/bench_queue.py), so the next pass starts no sooner than the last one took divided by
this share. Fewer applications are looked at on each change, as it comes."""
PACED_FROM = 1000
MAX_BACKOFF = 300.0
MAX_ANSWER = 64 * 1024
"""Bytes of a webhook's answer read at most; the rest is not read."""
LEASE_TTL = 5
SIGNATURE = "X-Primus-Signature-256"
OLD_ENDS = 300.0
"""An application that ended this long before the notifier first saw it is not notified
(turning notifications on does not tell of every past application)."""
READ_BATCH = 25


def notify_prefix(prefix: str) -> str:
    return f"{prefix}/notify/"


@dataclass(frozen=True)
class AppFacts:
    """What a pass reads of one application."""

    status: AppStatus
    name: str
    queue: str
    webhooks: tuple[tuple[str, tuple[str, ...]], ...]
    """Its job's webhooks: URL and events."""
    hang: HangReport | None
    waiting: Waiting | None
    seen: NotifySeen | None
    seen_revision: int


@dataclass(frozen=True)
class HostFacts:
    name: str
    condition: HostCondition | None
    seen: NotifySeen | None
    seen_revision: int


@dataclass(frozen=True)
class Notice:
    """A notification to write to the outbox."""

    kind: str
    app_id: str
    body: dict[str, object]
    targets: tuple[DeliveryTarget, ...]


@dataclass(frozen=True)
class Told:
    """What one application (or host) is told in a pass, written in one transaction guarded
    by its ``seen`` key's revision: the new ``seen`` value and every notification that goes
    with it (none: nobody wants the news, it is only recorded as told)."""

    seen_key: str
    seen: NotifySeen
    seen_revision: int
    notices: tuple[Notice, ...]


def _targets(policy: NotifyPolicy, kind: str, job_hooks: Sequence[tuple[str, Sequence[str]]]
             ) -> tuple[DeliveryTarget, ...]:
    site = [DeliveryTarget(url=hook.url, key=f"site:{n}")
            for n, hook in enumerate(policy.webhooks) if kind in hook.events]
    # Checked again here: an application's own identity may write its spec key.
    job = [DeliveryTarget(url=url, key="app") for url, events in job_hooks
           if kind in events and policy.job_url_problem(url) is None]
    return tuple(site + job)


def _app_body(facts: AppFacts) -> dict[str, object]:
    status = facts.status
    return {"id": status.app_id, "name": facts.name, "user": status.user,
            "queue": facts.queue, "state": status.state.value, "attempt": status.attempt,
            "exit_code": status.exit_code, "diagnosis": status.diagnosis}


def decide(apps: Sequence[AppFacts], hosts: Sequence[HostFacts], policy: NotifyPolicy,
           prefix: str, now: float, started: float,
           arrays_seen: Mapping[str, tuple[NotifySeen, int]] | None = None) -> list[Told]:
    """What to notify now, one :class:`Told` per application or host with news: each
    application's new state, new hang and admission wait past ``policy.admission_wait``
    together, each host newly quarantined, each job array whose members have all ended (its
    ``seen`` record in ``arrays_seen``, with its revision, once told); a ``Told`` without
    notices where nothing is to be sent (no webhook wants it, or it is past news from before
    ``started``)."""
    told = _arrays_ended(apps, policy, prefix, now, started, arrays_seen or {})
    for facts in apps:
        if not policy.webhooks and not facts.webhooks:
            continue  # nobody to tell: nothing is written either
        status = facts.status
        seen = facts.seen or NotifySeen()
        updated = seen
        found: list[tuple[str, dict[str, object]]] = []
        if status.state.value != seen.state:
            ended_long_ago = facts.seen is None and status.state.terminal and \
                (status.finish_time or status.submit_time) < started - OLD_ENDS
            if not ended_long_ago:
                found.append(("app_state", {"previous": seen.state or None}))
            updated = updated.model_copy(update={"state": status.state.value})
        hang = facts.hang
        if hang is not None and hang.handled and hang.id > seen.hang:
            found.append(("hang", {"hang": {"id": hang.id, "role": hang.role,
                                            "index": hang.index, "host": hang.host,
                                            "idle": hang.idle, "summary": hang.summary,
                                            "restart": hang.restart}}))
            updated = updated.model_copy(update={"hang": hang.id})
        waiting = facts.waiting
        if waiting is not None and status.state in (AppState.SUBMITTED, AppState.QUEUED) and \
                now - waiting.since >= policy.admission_wait and \
                waiting.since != seen.waiting_since:
            found.append(("admission_wait", {"waiting": {
                "since": waiting.since, "seconds": round(now - waiting.since, 1),
                "reason": waiting.reason}}))
            updated = updated.model_copy(update={"waiting_since": waiting.since})
        if updated == seen and facts.seen is not None:
            continue
        notices = []
        for kind, extra in found:
            targets = _targets(policy, kind, facts.webhooks)
            if targets:
                notices.append(Notice(kind, status.app_id, {
                    "kind": kind, "time": now, "deployment": prefix,
                    "app": _app_body(facts), **extra}, targets))
        told.append(Told(f"{notify_prefix(prefix)}seen/apps/{status.app_id}", updated,
                         facts.seen_revision, tuple(notices)))
    for host in hosts if policy.webhooks else ():
        condition = host.condition
        if condition is None or condition.state != "quarantined":
            continue
        seen = host.seen or NotifySeen()
        if condition.since == seen.quarantined_since:
            continue
        updated = seen.model_copy(update={"quarantined_since": condition.since})
        targets = _targets(policy, "host_quarantined", ())
        body: dict[str, object] = {"kind": "host_quarantined", "time": now,
                                   "deployment": prefix, "host": {
                                       "name": host.name, "reason": condition.reason,
                                       "since": condition.since}}
        told.append(Told(f"{notify_prefix(prefix)}seen/hosts/{host.name}", updated,
                         host.seen_revision,
                         (Notice("host_quarantined", "", body, targets),) if targets else ()))
    return told


def _arrays_ended(apps: Sequence[AppFacts], policy: NotifyPolicy, prefix: str, now: float,
                  started: float, seen: Mapping[str, tuple[NotifySeen, int]]) -> list[Told]:
    """A :class:`Told` for each job array not told of yet whose every member (as many as
    its size) is among ``apps`` and has ended: one ``array_end`` notice with how many ended
    in each state."""
    members: dict[str, list[AppFacts]] = {}
    for app in apps:
        if app.status.array:
            members.setdefault(app.status.array, []).append(app)
    told = []
    for array, unordered in sorted(members.items()):
        facts = sorted(unordered, key=lambda f: f.status.array_index or 0)
        size = facts[0].status.array_size
        if array in seen or len(facts) != size or \
                not all(f.status.state.terminal for f in facts):
            continue
        ended = max((f.status.finish_time or f.status.submit_time) for f in facts)
        states: dict[str, int] = {}
        for f in facts:
            states[f.status.state.value] = states.get(f.status.state.value, 0) + 1
        targets = _targets(policy, "array_end", facts[0].webhooks) \
            if ended >= started - OLD_ENDS else ()
        first = facts[0].status
        # Signed for a job's webhooks with the key of the array's first member (index order).
        notices = (Notice("array_end", first.app_id, {
            "kind": "array_end", "time": now, "deployment": prefix,
            "array": {"id": array, "name": facts[0].name, "user": first.user,
                      "queue": facts[0].queue, "members": size, "states": dict(sorted(
                          states.items()))}}, targets),) if targets else ()
        told.append(Told(f"{notify_prefix(prefix)}seen/arrays/{array}",
                         NotifySeen(state="ENDED"), 0, notices))
    return told


def _spec_facts(spec: bytes, default_queue: str
                ) -> tuple[str, str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """An application's name, queue and webhooks (URL and events), from its stored spec."""
    try:
        stored = json.loads(spec)
    except ValueError:
        stored = {}
    hooks = tuple((hook["url"], tuple(hook.get("events") or ())) for hook in
                  stored.get("notify") or () if isinstance(hook, dict) and "url" in hook)
    return str(stored.get("name", "")), stored_queue(spec, default_queue), hooks


class Notifier:
    """One candidate for the notifier's leadership (:meth:`run`), over ``settings``'s
    deployment."""

    def __init__(self, store: Coordinator, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.policy = settings.notify
        self.prefix = settings.prefix
        self.me = ServiceLeader.this_process()
        self.started = time.time()
        self.wake = asyncio.Event()
        self.sent = 0
        """Deliveries that left the outbox (tests await them)."""
        self._hooks: dict[str, tuple[str, str, tuple[tuple[str, tuple[str, ...]], ...]]] = {}
        self._owners: dict[str, AppOwner | None] = {}  # the server's record of each
        """Each application's name, queue and webhooks, from its spec (written once)."""
        self._hooked: set[str] = set()
        """The applications whose jobs name webhooks of their own."""
        self._app_ids: set[str] | None = None
        """The applications in etcd (``None``: to be listed); kept by the watch."""

    def use(self, policy: NotifyPolicy) -> None:
        """Notify by ``policy`` (a changed site file's ``notify:``) from the next pass on. Like
        turning notifications on, it tells nothing of an application that ended
        :data:`OLD_ENDS` before and that no webhook heard of."""
        self.policy = policy
        self.started = time.time()

    async def run(self) -> None:
        await lead_while_elected(self.store, f"{self.prefix}/server/notifier", encode(self.me),
                                 LEASE_TTL, lambda _leadership, _lost: self._lead(), "notify")

    async def _lead(self) -> None:
        self._app_ids = None  # listed again: what changed while another server led is unknown
        changed = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch(changed))
        sender = asyncio.ensure_future(self._send_loop())
        try:
            while True:
                changed.clear()
                began = asyncio.get_running_loop().time()
                await self._pass()
                took = asyncio.get_running_loop().time() - began
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(PASS_INTERVAL):
                        await changed.wait()
                if len(self._app_ids or ()) >= PACED_FROM:
                    await asyncio.sleep(began + took / PASS_SHARE -
                                        asyncio.get_running_loop().time())
        finally:
            for task in (watcher, sender):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _watch(self, changed: asyncio.Event) -> None:
        """Set ``changed`` on each change a pass may turn into a notification."""
        watched = ("/status", "/hang", "/waiting")
        conditions = SchedulerKeys(self.prefix).conditions
        apps = apps_prefix(self.prefix)
        while True:
            try:
                async with watching(self.store, f"{self.prefix}/") as events:
                    async for event in events:
                        if isinstance(event, Resync):
                            self._app_ids = None
                            changed.set()
                            continue
                        key = event.key
                        app_id, _, rest = key[len(apps):].partition("/") \
                            if key.startswith(apps) else ("", "", "")
                        if rest == "status" and self._app_ids is not None:
                            if event.type is EventType.PUT:
                                self._app_ids.add(app_id)
                            else:
                                self._app_ids.discard(app_id)
                        if key.endswith(watched) or key.startswith(conditions):
                            changed.set()
            except StoreError as exc:
                logger.warning("[notify] watch failed (%s); watching again", exc)
                await asyncio.sleep(1.0)

    async def _pass(self) -> None:
        try:
            apps, hosts = await self._read()
            seen_arrays = {kv.key.rsplit("/", 1)[1]: (decode(NotifySeen, kv.value),
                                                      kv.mod_revision)
                           for kv in (await self.store.get_prefix(
                               f"{notify_prefix(self.prefix)}seen/arrays/")).kvs}
            for told in decide(apps, hosts, self.policy, self.prefix, time.time(),
                               self.started, seen_arrays):
                await self._enqueue(told)
        except StoreError as exc:
            logger.warning("[notify] etcd did not answer (%s); tried again within %gs", exc,
                           PASS_INTERVAL)

    async def _read(self) -> tuple[list[AppFacts], list[HostFacts]]:
        prefix = self.prefix
        seen_root = f"{notify_prefix(prefix)}seen/"
        if self._app_ids is None:
            self._app_ids = {
                key.split("/")[-2] for key in await self.store.list_keys(apps_prefix(prefix))
                if key.endswith("/status") and key.count("/") == prefix.count("/") + 3}
        app_ids = self._app_ids
        scheduler = SchedulerKeys(prefix)
        default_queue = self.settings.queues.default_queue
        unknown = [AppKeys(prefix, a) for a in sorted(app_ids - self._hooks.keys())]
        for start in range(0, len(unknown), READ_BATCH):
            batch = unknown[start:start + READ_BATCH]
            specs = await self.store.txn([], [get for keys in batch
                                              for get in (Get(keys.spec), Get(keys.owner))])
            for keys, spec, owner in zip(batch, specs.reads[::2], specs.reads[1::2],
                                         strict=True):
                if spec:
                    self._hooks[keys.app_id] = _spec_facts(spec[0].value, default_queue)
                    if self._hooks[keys.app_id][2]:
                        self._hooked.add(keys.app_id)
                    self._owners[keys.app_id] = decode(AppOwner, owner[0].value, keys.owner) \
                        if owner else None
        # Only the applications someone listens to are read further.
        heard = sorted(app_ids & (self._hooks.keys() if self.policy.webhooks else
                                  self._hooked))
        apps: list[AppFacts] = []
        for start in range(0, len(heard), READ_BATCH):
            batch = [AppKeys(prefix, app_id) for app_id in heard[start:start + READ_BATCH]]
            read = await self.store.txn([], [get for keys in batch for get in (
                Get(keys.status), Get(keys.hang), Get(scheduler.waiting(keys.app_id)),
                Get(f"{seen_root}apps/{keys.app_id}"))])
            for n, keys in enumerate(batch):
                status, hang, waiting, app_seen = read.reads[4 * n:4 * n + 4]
                if not status or keys.app_id not in self._hooks:
                    continue
                name, queue, hooks = self._hooks[keys.app_id]
                try:
                    apps.append(AppFacts(
                        owned_status(decode(AppStatus, status[0].value, keys.status),
                                     self._owners.get(keys.app_id)), name, queue, hooks,
                        decode(HangReport, hang[0].value, keys.hang) if hang else None,
                        decode(Waiting, waiting[0].value) if waiting else None,
                        decode(NotifySeen, app_seen[0].value) if app_seen else None,
                        app_seen[0].mod_revision if app_seen else 0))
                except UnreadableRecordError as exc:
                    logger.warning("[notify] %s: %s", keys.app_id, exc)
        for gone in self._hooks.keys() - app_ids:
            del self._hooks[gone]
            self._hooked.discard(gone)
            self._owners.pop(gone, None)
        if not self.policy.webhooks:
            return apps, []
        conditions = await self.store.get_prefix(scheduler.conditions)
        seen_hosts = {kv.key.rsplit("/", 1)[1]: kv for kv in
                      (await self.store.get_prefix(f"{seen_root}hosts/")).kvs}
        hosts = []
        for kv in conditions.kvs:
            name = kv.key.rsplit("/", 1)[1]
            seen = seen_hosts.get(name)
            hosts.append(HostFacts(name, decode(HostCondition, kv.value, kv.key),
                                   decode(NotifySeen, seen.value) if seen else None,
                                   seen.mod_revision if seen else 0))
        return apps, hosts

    async def _enqueue(self, told: Told) -> None:
        """Write ``told``'s notifications to the outbox with its ``seen`` value, in one
        transaction, unless another pass wrote that ``seen`` first (then the next pass
        decides again from what it wrote)."""
        guard = key_unchanged_since(told.seen_key, told.seen_revision)  # 0: still absent
        ops: list[Put] = [Put(told.seen_key, encode(told.seen))]
        for notice in told.notices:
            now = time.time()
            delivery_id = f"{int(now * 1000):013d}-{secrets.token_hex(4)}"
            body = json.dumps({**notice.body, "delivery": delivery_id}, sort_keys=True)
            ops.append(Put(f"{notify_prefix(self.prefix)}outbox/{delivery_id}", encode(Delivery(
                id=delivery_id, kind=notice.kind, app_id=notice.app_id, body=body,
                targets=list(notice.targets), next_at=now, created=now))))
        written = await self.store.txn([guard], ops)
        if not written.succeeded:
            logger.info("[notify] %s was written since this pass read it: what it would "
                        "tell (%s) is decided again at the next pass", told.seen_key,
                        ", ".join(n.kind for n in told.notices) or "nothing")
        elif told.notices:
            self.wake.set()

    # ---- Sending ------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                self.wake.clear()
                due = await self._send_due(session)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.05, min(due - time.time(), 1.0))):
                        await self.wake.wait()

    async def _send_due(self, session: aiohttp.ClientSession) -> float:
        """Send every delivery that is due; return when the next one is."""
        try:
            outbox = await self.store.get_prefix(f"{notify_prefix(self.prefix)}outbox/")
        except StoreError as exc:
            logger.warning("[notify] cannot read the outbox: %s", exc)
            return time.time() + 1.0
        now = time.time()
        pending = [(kv, decode(Delivery, kv.value, kv.key)) for kv in outbox.kvs]
        due = [(kv, d) for kv, d in pending if d.next_at <= now]
        await asyncio.gather(*(self._attempt(session, kv.key, kv.mod_revision, delivery)
                               for kv, delivery in due[:16]))
        later = [d.next_at for _, d in pending if d.next_at > now]
        return min(later) if later else now + PASS_INTERVAL

    async def _attempt(self, session: aiohttp.ClientSession, key: str, revision: int,
                       delivery: Delivery) -> None:
        body = delivery.body.encode()
        targets = []
        for target in delivery.targets:
            if not target.delivered:
                error = await self._post(session, target, delivery, body)
                target = target.model_copy(update={"delivered": error is None,
                                                   "error": error or ""})
            targets.append(target)
        attempts = delivery.attempts + 1
        done = all(t.delivered for t in targets) or attempts >= self.policy.attempts
        guard = key_unchanged_since(key, revision)
        try:
            if done:
                outcome = DeliveryOutcome(kind=delivery.kind, time=time.time(),
                                          attempts=attempts, targets=targets)
                ops: list = [Delete(key)]
                record = f"{AppKeys(self.prefix, delivery.app_id).root}notifications/" \
                         f"{delivery.id}" if delivery.app_id else ""
                status = AppKeys(self.prefix, delivery.app_id).status if record else ""
                result = await self.store.txn(
                    [guard], [*ops, *([Put(record, encode(outcome))] if record else [])])
                if result.succeeded and record:
                    # the application's keys may be gone (its retention passed): no record
                    if await self.store.get(status) is None:
                        await self.store.txn([], [Delete(record)])
                if result.succeeded:
                    self.sent += 1
                    logger.info("[notify] %s %s: %s after %d attempt(s)", delivery.kind,
                                delivery.id, "delivered" if all(t.delivered for t in targets)
                                else "given up", attempts)
            else:
                wait = min(self.policy.backoff * 2 ** (attempts - 1), MAX_BACKOFF)
                await self.store.txn([guard], [Put(key, encode(delivery.model_copy(update={
                    "targets": targets, "attempts": attempts,
                    "next_at": time.time() + wait})))])
        except StoreError as exc:
            logger.warning("[notify] %s: cannot record the attempt: %s", delivery.id, exc)

    async def _post(self, session: aiohttp.ClientSession, target: DeliveryTarget,
                    delivery: Delivery, body: bytes) -> str | None:
        """Post ``body`` to the webhook; ``None`` once it answered 2xx, else why not."""
        try:
            key = self._key(target, delivery.app_id)
        except OSError as exc:
            return f"its key cannot be read: {exc.strerror}"
        except LookupError:
            return "the site's notify: no longer names it"
        headers = {"Content-Type": "application/json", "User-Agent": "primus-notify",
                   "X-Primus-Event": delivery.kind, "X-Primus-Delivery": delivery.id,
                   SIGNATURE: signature(key, body)}
        try:
            async with session.post(
                    target.url, data=body, headers=headers, allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=self.policy.timeout)) as answer:
                await answer.content.read(MAX_ANSWER)
                if 200 <= answer.status < 300:
                    return None
                return f"answered HTTP {answer.status}"
        except TimeoutError:
            return f"no answer within {self.policy.timeout:g}s"
        except aiohttp.ClientError as exc:
            return f"{type(exc).__name__}: {exc}"[:300]

    def _key(self, target: DeliveryTarget, app_id: str) -> bytes:
        """The key that signs a delivery to ``target``: a site webhook's is its secret file's
        in the policy in use, which a changed site file may have reordered or left out
        (``LookupError``)."""
        if target.key == "app":
            return app_key(ensure_job_key(self.settings), app_id)
        hooks = self.policy.webhooks
        index = int(target.key.split(":", 1)[1])
        same = [n for n, hook in enumerate(hooks) if hook.url == target.url]
        hook = hooks[index if index in same else same[0]]  # IndexError when none is left
        return Path(hook.secret_file).read_bytes().strip()

