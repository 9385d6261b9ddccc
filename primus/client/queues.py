"""Admission as the client sees it: the site's queues published to etcd, the applications that
wait in admission order, what each host holds for whom, and the hosts out of service (drained
by an operator, quarantined by the health check; docs/scheduling.md).

Everything is read from ``scheduler/`` at one revision; nothing here decides admission (the
admission leader does, ``primus.scheduler.leader``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from primus.client.api import HostNotFoundError
from primus.config.inventory import Host
from primus.config.site import Settings
from primus.scheduler.admission import free_hosts, order
from primus.scheduler.leader import AdmissionState, vet_requests
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
from primus.store.api import Compare, CompareTarget, Coordinator, Put

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


async def read_admission(store: Coordinator, prefix: str) -> AdmissionState:
    """Every key of admission (queues, hosts, requests, reservations, reasons), at one
    revision."""
    keys = SchedulerKeys(prefix)
    snapshot = await store.get_prefix(keys.root)
    state = AdmissionState(keys)
    for kv in snapshot.kvs:
        state.fold(kv)
    await vet_requests(store, state)  # as the leader believes them
    return state


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


async def waiting_apps(store: Coordinator, prefix: str) -> list[QueuedApp]:
    """The applications waiting for admission, in admission order
    (:func:`primus.scheduler.admission.order` with the queues as etcd holds them)."""
    state = await read_admission(store, prefix)
    config = state.config
    return [QueuedApp(position, request, request.queue or config.default_queue,
                      config.queue(request.queue).priority, state.waiting.get(request.app_id))
            for position, request in enumerate(order(state.pending(), config), start=1)]


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


async def host_usage(store: Coordinator, prefix: str, inventory: Sequence[Host] = ()
                     ) -> list[HostUsage]:
    """Every host admission knows, and those of ``inventory``: the inventory's first, in its
    order, then the others by name."""
    state = await read_admission(store, prefix)
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
