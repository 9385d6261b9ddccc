"""Admission as the client sees it: the site's queues published to etcd, the applications that
wait in admission order, what each host holds for whom, and the hosts out of service (drained
by an operator, quarantined by the health check; docs/scheduling.md).

Everything is read from ``scheduler/`` at one revision; nothing here decides admission (the
admission leader does, ``primus.scheduler.leader``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from primus.client.api import HostNotFoundError
from primus.config.inventory import Host
from primus.config.site import Settings
from primus.scheduler.admission import free_hosts, order
from primus.scheduler.leader import AdmissionState, following, read_state, vet_requests
from primus.scheduler.placement import HostFree
from primus.state.keys import SchedulerKeys
from primus.state.records import (
    AdmissionRequest,
    HostCondition,
    Reservation,
    Waiting,
    decode,
    encode,
)
from primus.store.api import Compare, CompareTarget, Coordinator, Put, StoreError

logger = logging.getLogger(__name__)

QUEUE_SHOWN = 100
"""Waiting applications ``primus queue`` and the UI's hosts page list unless asked for more:
the head of the queue (at ten thousand waiting, all of them take seconds to show)."""

NO_LEADER_YET = "waiting for the admission leader"
"""Why an application waits before the admission leader has recorded a reason."""


async def publish_queues(store: Coordinator, settings: Settings) -> bool:
    """Make ``scheduler/config`` hold the site's queues (``settings.queues``), which the
    admission leader works from; return whether it had to be written.

    One transaction compares and writes, so concurrent submitters never write a stale copy
    over a newer one: the key is written only when it holds something else (or nothing).
    """
    key = SchedulerKeys(settings.prefix).config
    # Keys sorted: two site files defining the same queues in another order hold the same copy.
    value = json.dumps(settings.queues.model_dump(mode="json"), sort_keys=True).encode()
    result = await store.txn([Compare(key, CompareTarget.VALUE, "==", value)], [],
                             [Put(key, value)])
    return not result.succeeded


async def read_admission(store: Coordinator, prefix: str,
                         view: AdmissionView | None = None) -> AdmissionState:
    """Every key of admission (queues, hosts, requests, reservations, reasons), at one
    revision, its requests vetted as the leader believes them: from ``view`` once it follows
    them, else read now."""
    if view is not None and (state := await view.state()) is not None:
        return state
    keys = SchedulerKeys(prefix)
    snapshot = await store.get_prefix(keys.root)
    state = read_state(keys, None, snapshot.kvs, snapshot.revision)
    await vet_requests(store, state)
    return state


class AdmissionView:
    """A server's own copy of admission's keys, followed by one watch
    (:func:`~primus.scheduler.leader.following`): ``primus queue``, the hosts' usage and the
    UI's queue page then read none of admission's keys, only the records of requests changed
    since the last look (each request is vetted once per revision), where a look read every
    key and vetted every request again (20 s at 10,000 queued applications).

    A look is never older than what was written before it began: it first asks etcd which of
    admission's keys changed after the revision the copy has followed to, and how many there
    are, and waits (at most :data:`CATCH_UP` seconds) until the watch has brought those;
    otherwise (a watch that lags, or none yet) the look reads etcd itself."""

    def __init__(self, store: Coordinator, prefix: str, seal_key: bytes | None = None) -> None:
        """``seal_key``: the admission leader's (``primus.scheduler.seals``), where
        applications have identities of their own: a reservation or preemption without its
        seal is left out, as the leader leaves it out (an application's identity may write
        under its own ``scheduler/apps/<app>/``)."""
        self.store = store
        self.keys = SchedulerKeys(prefix)
        self.seal_key = seal_key
        self._state: AdmissionState | None = None
        self.followed = asyncio.Event()
        """Set while the copy follows etcd (looks are answered from it)."""
        self._changed = asyncio.Event()
        self._vetting = asyncio.Lock()

    async def run(self) -> None:
        """Follow admission's keys until cancelled; after a failure (etcd unreachable), read
        them again a second later, looks meanwhile reading etcd themselves."""
        while True:
            try:
                async with following(self.store, self.keys, self.seal_key,
                                     self._changed) as state:
                    self._state = state
                    await self.state()  # every request vetted before the first look
                    self.followed.set()
                    await asyncio.Event().wait()
            except StoreError as exc:
                logger.warning("following admission's keys: %s; again in 1 s", exc)
            finally:
                self._state = None
                self.followed.clear()
            await asyncio.sleep(1.0)

    async def state(self) -> AdmissionState | None:
        """The followed state, caught up with etcd and every request vetted; ``None`` while
        not following or when the watch does not catch up in time."""
        state = self._state
        if state is None:
            return None
        deadline = asyncio.get_running_loop().time() + CATCH_UP
        while True:
            self._changed.clear()  # a change folded from now on wakes the wait below
            if await self._caught_up(state):
                break
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                logger.warning("admission's keys: the watch is behind etcd after %gs; this look "
                               "reads them", CATCH_UP)
                return None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._changed.wait()
        async with self._vetting:
            await vet_requests(self.store, state)
            state.refused.clear()  # the leader records refusals; a view only leaves them out
        return state

    async def _caught_up(self, state: AdmissionState) -> bool:
        """Whether the copy has every write and every delete etcd had when this was asked."""
        if await self.store.list_keys(self.keys.root, modified_after=state.revision):
            return False
        return await self.store.count_prefix(self.keys.root) == len(state.present)


CATCH_UP = 2.0
"""Seconds a look at :class:`AdmissionView` waits for its watch to bring what etcd has."""


@dataclass(frozen=True)
class QueuedApp:
    """An application waiting for admission: its place in the order, its request, and why it
    waits (``None`` before the admission leader has said)."""

    position: int
    """1: the next to be admitted, once it fits."""
    request: AdmissionRequest
    queue: str
    """The request's queue, the default one when it names none."""
    priority: int
    waiting: Waiting | None

    @property
    def reason(self) -> str:
        """Why it waits, in words."""
        return self.waiting.reason if self.waiting is not None else NO_LEADER_YET


async def waiting_apps(store: Coordinator, prefix: str, view: AdmissionView | None = None,
                       limit: int = 0) -> tuple[list[QueuedApp], int]:
    """The first ``limit`` applications waiting for admission (0: every one), in admission
    order (:func:`primus.scheduler.admission.order` with the queues as etcd holds them), and
    how many wait in all."""
    state = await read_admission(store, prefix, view)
    config = state.config
    ordered = order(state.pending(), config, state.reservations.values())
    return [QueuedApp(position, request, request.queue or config.default_queue,
                      config.queue(request.queue).priority, state.waiting.get(request.app_id))
            for position, request in enumerate(ordered[:limit] if limit else ordered,
                                               start=1)], len(ordered)


@dataclass(frozen=True)
class HeldBy:
    """What one application's reservations hold on one host."""

    app_id: str
    user: str
    queue: str
    reservations: list[Reservation]
    """One per executor, by role and index."""

    @property
    def cpu(self) -> float:
        """CPU cores held."""
        return sum(r.cpu for r in self.reservations)

    @property
    def memory(self) -> int:
        """Bytes of memory held."""
        return sum(r.memory for r in self.reservations)

    @property
    def gpus(self) -> list[int]:
        """The GPU devices held, by index."""
        return sorted(device for r in self.reservations for device in r.gpus)


@dataclass(frozen=True)
class HostUsage:
    """One host: what it has, what each application holds on it, what is left."""

    host: Host
    """As admission knows it (``scheduler/hosts/<name>``), else as the inventory declares it."""
    held: list[HeldBy]
    """By application id."""
    free: HostFree
    """What is left; an unlimited resource is infinite, ``devices`` ``None`` when the host
    declares no GPU."""
    condition: HostCondition | None = None
    """Why it takes no new executor (drained, quarantined); ``None``: it takes them."""


async def host_usage(store: Coordinator, prefix: str, inventory: Sequence[Host] = (),
                     view: AdmissionView | None = None) -> list[HostUsage]:
    """Every host admission knows, and those of ``inventory``: the inventory's first, in its
    order, then the others by name."""
    state = await read_admission(store, prefix, view)
    hosts = {host.name: host for host in inventory}
    hosts |= {name: host for name, (host, _) in sorted(state.hosts.items())}
    free = free_hosts(hosts, state.reservations.values())
    held: dict[str, dict[str, HeldBy]] = {name: {} for name in hosts}
    for r in sorted(state.reservations.values(), key=lambda r: (r.app_id, r.role, r.index)):
        if r.host in held:
            held[r.host].setdefault(r.app_id, HeldBy(r.app_id, r.user, r.queue, [])
                                    ).reservations.append(r)
    return [HostUsage(host, list(held[name].values()), free[name],
                      state.conditions.get(name, (None, 0))[0]) for name, host in hosts.items()]


async def drain(store: Coordinator, prefix: str, name: str, reason: str, by: str,
                inventory: Sequence[Host] = ()) -> HostCondition:
    """Take host ``name`` out of service: admission places nothing new there until
    :func:`resume` (what runs there goes on). Draining it again replaces the reason.

    Raises:
        HostNotFoundError: no application registered it and ``inventory`` does not name it.
    """
    keys = SchedulerKeys(prefix)
    if name not in {host.name for host in inventory} and \
            await store.get(keys.host(name)) is None:
        raise HostNotFoundError(f"host {name!r}: unknown to admission (not used by any "
                                f"application yet) and not in the inventory")
    condition = HostCondition(state="drained", reason=reason, since=time.time(), by=by)
    await store.put(keys.condition(name), encode(condition))
    return condition


async def resume(store: Coordinator, prefix: str, name: str) -> HostCondition | None:
    """Put host ``name`` back in service, drained or quarantined; what it was out for
    (``None``: it was in service)."""
    key = SchedulerKeys(prefix).condition(name)
    found = await store.get(key)
    if found is None:
        return None
    await store.delete(key)
    return decode(HostCondition, found.value, key)
