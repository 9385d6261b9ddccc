"""The admission leader: one process of the deployment, elected in etcd, admits applications.

Any long-running Primus process may stand (AM processes and ``primus server``); one leads at a
time (``scheduler/leader``, attached to its lease). The leader reads everything admission
depends on at one revision — requests, reservations, hosts, queues — keeps it current with one
watch of ``scheduler/``, asks :func:`~primus.scheduler.admission.admit` what to do and applies
it. Its state is all in etcd: a leader killed at any point is replaced by the next candidate,
which reads the same keys and goes on; every write carries the leadership guard, and a
reservation is written only if the hosts it uses have not changed since they were read, so
nothing is admitted twice and no host is oversubscribed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from primus.config.inventory import Host
from primus.config.queues import QueuesConfig
from primus.config.site import Settings
from primus.scheduler.admission import Admit, Preempt, Wait, admit, vet
from primus.scheduler.health import HealthChecks
from primus.scheduler.seals import seal, sealed
from primus.state.keys import AppKeys, SchedulerKeys
from primus.state.records import (
    AdmissionRequest,
    AppOwner,
    Eviction,
    HostCondition,
    Preemption,
    Reservation,
    ServiceLeader,
    TopologyCheck,
    UnreadableRecordError,
    Waiting,
    decode,
    decode_host,
    decode_hosts,
    encode,
    encode_host,
)
from primus.state.refusals import record_refusal
from primus.state.topology import effective_spec
from primus.state.view import submitted_spec
from primus.store.api import (
    Compare,
    Coordinator,
    Delete,
    EventType,
    Get,
    KeyValue,
    Op,
    Put,
    Resync,
    WatchEvent,
    key_unchanged_since,
    while_leased,
)
from primus.store.recipes import lead_while_elected, watching

logger = logging.getLogger(__name__)

LEASE_TTL = 5
"""Seconds the leader's lease outlives it: how long admission pauses when it dies."""
MAX_TXN_OPS = 100
"""Operations per transaction, under etcd's default limit of 128."""
MAX_PASS_PAUSE = 0.5
"""After a pass, the leader waits as long as the pass took, up to this many seconds, before
the next: passes take at most half a core however many requests wait (20 ms at 2,000)."""


@dataclass
class AdmissionState:
    """What admission depends on, as last read: keys with their values and revisions."""

    keys: SchedulerKeys
    revision: int = 0
    """The revision of etcd the state was read at, or followed to."""
    requests: dict[str, tuple[AdmissionRequest, int]] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    hosts: dict[str, tuple[Host, int]] = field(default_factory=dict)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    preempting: dict[str, Preemption] = field(default_factory=dict)
    evictions: dict[str, Eviction] = field(default_factory=dict)
    conditions: dict[str, tuple[HostCondition, int]] = field(default_factory=dict)
    """Hosts that take no new executor (drained, quarantined), by name, with the revision of
    their key."""
    mismatches: dict[str, tuple[TopologyCheck, int]] = field(default_factory=dict)
    """Hosts whose GPUs are linked otherwise than their inventory declares, by name, with the
    revision of their key: they take no executor that asks for locality."""
    config: QueuesConfig = field(default_factory=QueuesConfig)
    seal_key: bytes | None = None
    """The key of the leader's seals (``primus.scheduler.seals``); ``None``: a site of one
    account, where no application has an identity of its own."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """Keys of applications not believed since the leader last recorded them, and why."""
    vetted: dict[str, int] = field(default_factory=dict)
    """The revision of each request in :attr:`requests` that was vetted against the server's
    records (:func:`~primus.scheduler.admission.vet`): only those are decided on."""
    present: set[str] = field(default_factory=set)
    """Every key folded and not deleted since, read or not (how a follower tells that it has
    seen every delete: :class:`~primus.client.queues.AdmissionView`)."""

    def fold(self, kv: KeyValue | WatchEvent) -> None:
        """Fold one key's current value (a read, or a watch event) into the state. A value
        that does not read, or a reservation or a preemption without the leader's seal, is
        left out and noted in :attr:`refused` (the leader logs it and records it as its
        application's): admission goes on for everyone else."""
        if isinstance(kv, WatchEvent) and kv.type is EventType.DELETE:
            self.present.discard(kv.key)
        else:
            self.present.add(kv.key)
        try:
            self._fold(kv)
        except (UnreadableRecordError, ValueError) as exc:
            self.refused.append((kv.key, str(exc)))

    def _fold(self, kv: KeyValue | WatchEvent) -> None:
        keys = self.keys
        deleted = isinstance(kv, WatchEvent) and kv.type is EventType.DELETE
        key = kv.key
        revision = kv.mod_revision if isinstance(kv, KeyValue) else kv.revision
        app_id, kind, _ = keys.parse(key)
        if kind == "request":
            if deleted:
                self.requests.pop(app_id, None)
            else:
                self.requests[app_id] = (decode(AdmissionRequest, kv.value, key), revision)
        elif kind == "reservations":
            if deleted:
                self.reservations.pop(key, None)
            else:
                reservation = decode(Reservation, kv.value, key)
                if not sealed(self.seal_key, key, reservation):
                    self.reservations.pop(key, None)
                    raise ValueError("a reservation the admission leader did not write")
                self.reservations[key] = reservation
        elif kind == "waiting":
            if deleted:
                self.waiting.pop(app_id, None)
            else:
                self.waiting[app_id] = decode(Waiting, kv.value, key)
        elif kind == "preempt":
            if deleted:
                self.preempting.pop(app_id, None)
            else:
                preemption = decode(Preemption, kv.value, key)
                if not sealed(self.seal_key, key, preemption):
                    self.preempting.pop(app_id, None)
                    raise ValueError("a preemption the admission leader did not write")
                self.preempting[app_id] = preemption
        elif kind == "evict":
            if deleted:
                self.evictions.pop(app_id, None)
            else:
                self.evictions[app_id] = decode(Eviction, kv.value, key)
        elif key.startswith(keys.hosts):
            if deleted:
                self.hosts.pop(key[len(keys.hosts):], None)
            else:
                self.hosts[key[len(keys.hosts):]] = (decode_host(kv.value), revision)
        elif key.startswith(keys.conditions):
            name = key[len(keys.conditions):]
            if deleted:
                self.conditions.pop(name, None)
            else:
                self.conditions[name] = (decode(HostCondition, kv.value, key), revision)
        elif key.startswith(keys.topology_checks):
            name = key[len(keys.topology_checks):]
            if deleted:
                self.mismatches.pop(name, None)
            else:
                self.mismatches[name] = (decode(TopologyCheck, kv.value, key), revision)
        elif key == keys.config and not deleted:
            self.config = QueuesConfig.model_validate_json(kv.value)

    def out_of_service(self) -> dict[str, str]:
        """The hosts that take no new executor, and why."""
        return {name: condition.describe() for name, (condition, _) in self.conditions.items()}

    def to_evict(self) -> dict[str, dict[str, str]]:
        """Per application, the hosts out of service where it holds reservations, and why."""
        out = self.out_of_service()
        found: dict[str, dict[str, str]] = {}
        for reservation in self.reservations.values():
            if reservation.host in out:
                found.setdefault(reservation.app_id, {})[reservation.host] = out[reservation.host]
        return found

    def pending(self) -> list[AdmissionRequest]:
        """Requests not granted yet, without the executors already reserved (a request the
        AM wrote before it saw a grant must not be granted twice); a resize asks for executors
        that are reserved, and keeps them."""
        held = {(r.app_id, r.role, r.index) for r in self.reservations.values()}
        pending = []
        for app_id, (request, revision) in self.requests.items():
            if request.granted or self.vetted.get(app_id) != revision:
                continue
            if request.resize:
                pending.append(request)
                continue
            wanted = [e for e in request.executors if (request.app_id, *e) not in held]
            pending.append(request if len(wanted) == len(request.executors) else
                           request.model_copy(update={"executors": wanted}))
        return pending


VET_BATCH = 25
"""Applications whose records one transaction reads (five reads each, under etcd's 128)."""


async def vet_requests(store: Coordinator, state: AdmissionState) -> None:
    """Vet each request of ``state`` not vetted at its revision yet against its application's
    records of the server (its owner record, its spec as it should be now, its hosts): the
    AM's request says which executors wait, nothing about who, where or how much
    (:func:`~primus.scheduler.admission.vet`). A request refused whole is left out. The
    records of :data:`VET_BATCH` applications are read in one transaction: a burst of
    requests costs a few round trips, not three each."""
    unvetted = [(app_id, request, revision)
                for app_id, (request, revision) in state.requests.items()
                if state.vetted.get(app_id) != revision and not request.granted]
    for start in range(0, len(unvetted), VET_BATCH):
        batch = unvetted[start:start + VET_BATCH]
        apps = [AppKeys(state.keys.prefix, app_id) for app_id, _, _ in batch]
        read = await store.txn([], [get for keys in apps for get in (
            Get(keys.owner), Get(keys.hosts), Get(keys.spec), Get(keys.roles, prefix=True),
            Get(keys.sources, prefix=True))])
        for n, (keys, (app_id, request, revision)) in enumerate(zip(apps, batch, strict=True)):
            owner_kvs, hosts_kvs, spec_kvs, *topology = read.reads[5 * n:5 * n + 5]
            try:
                owner = decode(AppOwner, owner_kvs[0].value, keys.owner) if owner_kvs else None
                spec = effective_spec(submitted_spec(app_id, spec_kvs[0].value), keys, {
                    kv.key: kv.value for kvs in topology for kv in kvs}) if spec_kvs else None
                hosts = [h.name for h in decode_hosts(hosts_kvs[0].value)] if hosts_kvs else []
            except (UnreadableRecordError, ValueError) as exc:
                owner, spec, hosts = None, None, []
                logger.warning("[admission] %s: its records do not read: %s", app_id, exc)
            vetted = vet(app_id, request, owner, spec, hosts)
            if vetted.refused:
                state.refused.append((state.keys.request(app_id), vetted.refused))
            if state.requests.get(app_id, (None, 0))[1] != revision:
                continue  # changed while its records were read: vetted again next round
            if vetted.request is None:
                state.requests.pop(app_id)
                state.vetted.pop(app_id, None)
            else:
                state.requests[app_id] = (vetted.request, revision)
                state.vetted[app_id] = revision


@contextlib.asynccontextmanager
async def following(store: Coordinator, keys: SchedulerKeys, seal_key: bytes | None = None,
                    changed: asyncio.Event | None = None) -> AsyncIterator[AdmissionState]:
    """Admission's keys read at one revision, then kept current by one watch of
    ``scheduler/`` for as long as the context lasts (a resync reads them again whole);
    ``changed`` is set after each change folded. The state's requests are vetted by whoever
    uses them (:func:`vet_requests`), each once per revision; ``revision`` says how far
    it has followed."""
    async with watching(store, keys.root) as watch:
        snapshot = await store.get_prefix(keys.root)
        state = read_state(keys, seal_key, snapshot.kvs, snapshot.revision)

        async def follow() -> None:
            async for event in watch.after(snapshot.revision):
                if isinstance(event, Resync):
                    state.__dict__.update(read_state(keys, seal_key, event.snapshot.kvs,
                                                      event.snapshot.revision).__dict__)
                else:
                    state.fold(event)
                    state.revision = event.revision
                if changed is not None:
                    changed.set()

        watcher = asyncio.ensure_future(follow())
        try:
            yield state
        finally:
            watcher.cancel()


def read_state(keys: SchedulerKeys, seal_key: bytes | None, kvs: Sequence[KeyValue],
               revision: int) -> AdmissionState:
    """Admission's keys ``kvs``, read at ``revision``, folded into a state."""
    state = AdmissionState(keys, seal_key=seal_key, revision=revision)
    for kv in kvs:
        state.fold(kv)
    return state


class AdmissionLeader:
    """One candidate for admission leadership; see the module docstring."""

    def __init__(self, store: Coordinator, prefix: str, settings: Settings | None = None,
                 seal_key: bytes | None = None) -> None:
        """With ``settings``, the leader also checks the hosts' health (its ``health:``).
        ``seal_key``: the servers' key it seals what it writes with, on a site where
        applications have identities of their own (``primus.scheduler.seals``)."""
        self.store = store
        self.keys = SchedulerKeys(prefix)
        self.me = ServiceLeader.this_process()
        self.settings = settings
        self.seal_key = seal_key

    async def run(self) -> None:
        """Stand, lead when elected, stand again after losing the lease; until cancelled."""
        await lead_while_elected(self.store, self.keys.leader, encode(self.me), LEASE_TTL,
                                 lambda leadership, lost: self._lead(leadership.guard(), lost),
                                 "admission")

    async def _lead(self, guard: Compare, lost: asyncio.Event) -> None:
        changed = asyncio.Event()
        async with following(self.store, self.keys, self.seal_key, changed) as state:
            changed.set()
            checks = None if self.settings is None else asyncio.ensure_future(HealthChecks(
                self.settings, lambda compares, ops: self._write(guard, compares, ops, lost)
            ).run(lambda: [host for host, _ in state.hosts.values()],
                  lambda: dict(state.conditions), lambda: dict(state.mismatches)))
            loop = asyncio.get_running_loop()
            try:
                while True:
                    await changed.wait()
                    changed.clear()
                    began = loop.time()
                    await self._decide(state, guard, lost)
                    # A pass decides on every waiting request: with thousands waiting and a
                    # change after every pass (a burst of submits), back-to-back passes would
                    # take a core. The changes meanwhile are taken together by the next one.
                    await asyncio.sleep(min(loop.time() - began, MAX_PASS_PAUSE))
            finally:
                if checks is not None:
                    checks.cancel()

    async def _decide(self, state: AdmissionState, guard: Compare, lost: asyncio.Event) -> None:
        await vet_requests(self.store, state)
        refused, state.refused = state.refused, []
        for key, why in refused:
            app_id, _, _ = self.keys.parse(key)
            if not app_id:  # a key of the deployment's, which only Primus writes: no owner
                logger.warning("[admission] %s: not believed: %s", key, why)
                continue
            await record_refusal(self.store, AppKeys(self.keys.prefix, app_id), key, why,
                                 "admission leader")
        hosts = {name: host for name, (host, _) in state.hosts.items()}
        decisions = admit(state.pending(), list(state.reservations.values()), hosts,
                          state.config, preempting=state.preempting,
                          out_of_service=state.out_of_service(),
                          mismatches={name: check.reason
                                      for name, (check, _) in state.mismatches.items()})
        for decision in decisions:
            if isinstance(decision, Admit):
                await self._admit(state, decision, guard, lost)
            elif isinstance(decision, Preempt):
                await self._preempt(state, decision, guard, lost)
            else:
                await self._wait(state, decision, guard, lost)
        if self.settings is not None:
            await self._evict(state, guard, lost, self.settings.health.out_of_service == "move")

    async def _evict(self, state: AdmissionState, guard: Compare, lost: asyncio.Event,
                     move: bool) -> None:
        """Tell each application the hosts out of service where it holds reservations, and
        whether its executors there must leave (``move``); stop telling it once it holds
        nothing there."""
        wanted = state.to_evict()
        for app_id in sorted(wanted.keys() | state.evictions.keys()):
            hosts = wanted.get(app_id)
            eviction = None if hosts is None else Eviction(hosts=hosts, move=move)
            if state.evictions.get(app_id) == eviction:
                continue
            key = self.keys.evict(app_id)
            if await self._write(guard, [], [Delete(key) if eviction is None
                                             else Put(key, encode(eviction))], lost):
                if eviction is None:
                    state.evictions.pop(app_id, None)
                else:
                    state.evictions[app_id] = eviction
                    logger.info("[admission] %s: holds hosts out of service: %s%s", app_id,
                                ", ".join(sorted(hosts or {})), " (to move off)" if move else "")

    async def _preempt(self, state: AdmissionState, decision: Preempt, guard: Compare,
                       lost: asyncio.Event) -> None:
        """Ask each victim's AM to stop and queue again; admission goes on once they have
        given their reservations up."""
        head = decision.request
        reason = (f"preempted to admit {head.app_id} (queue {head.queue}, higher priority) by "
                  f"the admission leader")
        for victim in decision.victims:
            preemption = seal(self.seal_key, self.keys.preempt(victim),
                              Preemption(by=head.app_id, time=time.time(), reason=reason))
            if await self._write(guard, [], [Put(self.keys.preempt(victim),
                                                  encode(preemption))], lost):
                state.preempting[victim] = preemption
                logger.info("[admission] preempting %s to admit %s", victim, head.app_id)

    async def _admit(self, state: AdmissionState, decision: Admit, guard: Compare,
                     lost: asyncio.Event) -> None:
        """Write the gang's reservations, each batch only if its hosts are as read, then mark
        the request granted (when the decision is part of it, say why the rest waits). A batch
        refused (a host changed) leaves the rest to the next decision, which sees what was
        written."""
        request = decision.request
        if request.app_id not in state.requests:
            return  # withdrawn (its AM saw it granted) while earlier decisions were written
        _, revision = state.requests[request.app_id]
        now = time.time()
        roles = {role.name: role for role in request.roles}
        reservations = [seal(self.seal_key, self.keys.reservation(request.app_id, role, index),
                             Reservation(
            app_id=request.app_id, user=request.user, queue=request.queue, role=role, index=index,
            host=slot.host.name, cpu=roles[role].cpu, memory=roles[role].memory,
            gpus=list(slot.gpus), since=now, preemptible=request.preemptible,
            array=request.array))
            for (role, index), slot in decision.slots.items()]
        by_host: dict[str, list[Reservation]] = {}
        for reservation in reservations:
            by_host.setdefault(reservation.host, []).append(reservation)
        batch: list[Op] = []
        compares: list[Compare] = []
        in_batch: list[str] = []
        for host, held in by_host.items():
            host_record, host_revision = state.hosts[host]
            ops: list[Op] = [Put(self.keys.reservation(r.app_id, r.role, r.index), encode(r))
                             for r in held]
            ops.append(Put(self.keys.host(host), encode_host(host_record)))
            if batch and len(batch) + len(ops) > MAX_TXN_OPS:
                if not await self._write(guard, compares, batch, lost, state, in_batch):
                    return
                batch, compares, in_batch = [], [], []
            batch += ops
            compares.append(key_unchanged_since(self.keys.host(host), host_revision))
            in_batch.append(host)
        granted = request.model_copy(update={"granted": True})
        waiting = None if decision.rest is None else Waiting(reason=decision.rest,
                                                              since=time.time())
        if waiting is None:  # all it asked for
            batch += [Put(self.keys.request(request.app_id), encode(granted)),
                      Delete(self.keys.waiting(request.app_id))]
        else:  # part of it: the request stays, for the rest
            batch.append(Put(self.keys.waiting(request.app_id), encode(waiting)))
        compares.append(key_unchanged_since(self.keys.request(request.app_id), revision))
        if await self._write(guard, compares, batch, lost, state, in_batch):
            if waiting is None:
                state.requests[request.app_id] = (granted, state.requests[request.app_id][1])
            else:
                state.waiting[request.app_id] = waiting
            for made in reservations:
                state.reservations[self.keys.reservation(made.app_id, made.role,
                                                         made.index)] = made
            logger.info("[admission] admitted %s: %s", request.app_id, ", ".join(
                f"{r.role}-{r.index} on {r.host}" for r in reservations))

    async def _wait(self, state: AdmissionState, decision: Wait, guard: Compare,
                    lost: asyncio.Event) -> None:
        app_id = decision.request.app_id
        known = state.waiting.get(app_id)
        if known is not None and known.reason == decision.reason:
            return
        waiting = Waiting(reason=decision.reason, since=time.time(), hosts=list(decision.hosts))
        await self._write(guard, [], [Put(self.keys.waiting(app_id), encode(waiting))], lost)
        state.waiting[app_id] = waiting

    async def _write(self, guard: Compare, compares: list[Compare], ops: list[Op],
                     lost: asyncio.Event, state: AdmissionState | None = None,
                     hosts: Sequence[str] = ()) -> bool:
        """Apply ``ops`` if this process leads and ``compares`` hold; the ``hosts`` records
        rewritten by them are then known at the new revision (the next admission on them in
        this round compares that, not the one read before)."""
        result = await while_leased(lost, lambda: self.store.txn([guard, *compares], ops))
        if not result.succeeded:
            logger.info("[admission] a write was refused (leadership or a host changed); "
                        "deciding again on what is new")
        elif state is not None:
            for host in hosts:
                state.hosts[host] = (state.hosts[host][0], result.revision)
        return result.succeeded

