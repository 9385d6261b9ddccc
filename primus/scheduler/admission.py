"""Admission: which waiting applications get hosts now. A pure function, no I/O.

The admission leader (``leader.py``) observes the requests (``scheduler/queue/``), every
reservation (``scheduler/reservations/``), the hosts and the queues' configuration, asks
:func:`admit` what to do, and applies the answer. Rules (docs/scheduling.md):

- A request is a gang: every executor it names is given a slot at once, or none is.
- Order: the queue's priority (higher first), then submission time, then the id.
- Quotas of the queue and of each user in it bound what is held at once; a request over its
  quota waits without holding back the others.
- A request that does not fit blocks the hosts it could use: a later one is admitted only on
  other hosts (backfill), so it can never delay the head of the queue.
- A request naming a host admission does not know yet waits (blocking the hosts it could
  use): its AM registers its hosts with its first request, and deciding before they are all
  seen would place the gang on some of them only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from primus.config.inventory import Host
from primus.config.queues import QueuesConfig, QueueSpec, Quota
from primus.config.spec import JobSpec, RoleSpec, size_text
from primus.scheduler.placement import HostFree, PlacementError, Slot, place_executors
from primus.state.records import AdmissionRequest, AppOwner, Reservation

ExecutorId = tuple[str, int]


@dataclass(frozen=True)
class Admit:
    """Reserve ``slots`` for ``request``'s executors, all at once. With ``rest``, they are part
    of what the application asked for (an elastic role's minimum, or as many more as fit), and
    ``rest`` says why the others wait."""

    request: AdmissionRequest
    slots: dict[ExecutorId, Slot]
    rest: str | None = None


@dataclass(frozen=True)
class Wait:
    """``request`` waits: ``position`` among the waiting (0: next), and why."""

    request: AdmissionRequest
    position: int
    reason: str
    hosts: tuple[str, ...] = ()
    """A resize: the hosts without room for it."""


@dataclass(frozen=True)
class Preempt:
    """Stop the preemptible applications ``victims`` (they queue again) so that ``request``,
    of a higher priority, fits."""

    request: AdmissionRequest
    victims: tuple[str, ...]


@dataclass
class _Held:
    """What a queue, or a user in a queue, holds."""

    gpus: int = 0
    cpu: float = 0.0
    executors: int = 0
    applications: set[str] = field(default_factory=set)

    def add(self, app_id: str, cpu: float, gpus: int) -> None:
        self.gpus += gpus
        self.cpu += cpu
        self.executors += 1
        self.applications.add(app_id)

    def over(self, quota: Quota, app_id: str, cpu: float, gpus: int, executors: int
             ) -> str | None:
        """What of ``quota`` adding a gang of ``executors`` would exceed, if anything."""
        if quota.gpus is None and quota.cpu is None and quota.executors is None and \
                quota.applications is None:
            return None
        applications = len(self.applications) + (app_id not in self.applications)
        for name, limit, total in (("gpus", quota.gpus, self.gpus + gpus),
                                   ("cpu", quota.cpu, self.cpu + cpu),
                                   ("executors", quota.executors, self.executors + executors),
                                   ("applications", quota.applications, applications)):
            if limit is not None and total > limit + 1e-9:  # CPUs add up in floats
                return f"{name} quota {limit:g}, would hold {total:g}"
        return None


def order(requests: Iterable[AdmissionRequest], config: QueuesConfig,
          reservations: Iterable[Reservation] = ()) -> list[AdmissionRequest]:
    """The requests in admission order: by their queue's priority; within a queue's priority,
    users take turns (fair share): a user's n-th waiting request in submission order comes in
    turn n plus the applications that user holds hosts for in that queue (``reservations``:
    every one held), and requests of one turn go by submission. So one user's thousand-member
    array keeps another user's job waiting for at most one of its members."""
    listed = sorted(requests, key=attrgetter("submit_time", "app_id"))
    resolved = {name: config.resolve(name) for name in {r.queue for r in listed}}
    priority = {name: config.queue(name).priority for name in resolved}
    holding: dict[tuple[str, str], set[str]] = {}
    for held in reservations:
        holding.setdefault((config.resolve(held.queue), held.user), set()).add(held.app_id)
    turn: dict[str, int] = {}
    taken: dict[tuple[str, str], int] = {}
    for r in listed:  # in submission order
        user = (resolved[r.queue], r.user)
        mine = taken.get(user)
        taken[user] = mine = (len(holding.get(user, ())) if mine is None else mine) + 1
        turn[r.app_id] = mine
    # Stable: requests of one priority and turn stay in submission order.
    listed.sort(key=lambda r: (-priority[r.queue], turn[r.app_id]))
    return listed


def free_hosts(hosts: Mapping[str, Host], reservations: Iterable[Reservation]
               ) -> dict[str, HostFree]:
    """What is left on each host once every reservation is taken."""
    free = {name: HostFree.of(host) for name, host in hosts.items()}
    for held in reservations:
        host = free.get(held.host)
        if host is not None:
            host.slots -= 1
            host.cpu -= held.cpu
            host.memory -= held.memory
            if host.devices is not None:
                host.devices = [d for d in host.devices if d not in held.gpus]
            host.used += 1
    return free


def admit(requests: Sequence[AdmissionRequest], reservations: Sequence[Reservation],
          hosts: Mapping[str, Host], config: QueuesConfig,
          preempting: Iterable[str] = (), out_of_service: Mapping[str, str] | None = None,
          mismatches: Mapping[str, str] | None = None) -> list[Admit | Wait | Preempt]:
    """What to do with each request: admit it now, or let it wait, and why; and which
    preemptible applications to stop for the first one that does not fit.

    Args:
        requests: Every waiting request.
        reservations: Every reservation held, of every application.
        hosts: Every host known, by name.
        config: The queues.
        preempting: Applications asked to stop already: no other is chosen while they do.
        out_of_service: Hosts that take no new executor (drained, quarantined), and why.
        mismatches: Hosts whose GPUs are linked otherwise than their inventory declares, and
            how: they take no executor of a request whose roles ask for locality.
    """
    out_always = dict(out_of_service or {})
    # Where the topology is wrong, a request that asks for locality is not placed.
    out_topology = out_always | {name: why for name, why in (mismatches or {}).items()
                                 if name not in out_always}
    free = free_hosts(hosts, reservations)
    # Executors per host, application and role: max_per_host counts an application's own.
    placed: dict[tuple[str, str], dict[str, int]] = {}
    for reservation in reservations:
        on_host = placed.setdefault((reservation.host, reservation.app_id), {})
        on_host[reservation.role] = on_host.get(reservation.role, 0) + 1
    held: dict[str, _Held] = {}
    held_by_user: dict[tuple[str, str], _Held] = {}
    for reservation in reservations:
        for bucket in (held.setdefault(reservation.queue, _Held()),
                       held_by_user.setdefault((reservation.queue, reservation.user), _Held())):
            bucket.add(reservation.app_id, reservation.cpu, len(reservation.gpus))
    # Executors each application holds per role: an elastic role's minimum counts them.
    held_roles: dict[tuple[str, str], int] = {}
    # The hosts each application holds: its new executors join its placement_domain there.
    holding: dict[str, set[str]] = {}
    # The members of each job array holding hosts: its max_running counts them.
    running: dict[str, set[str]] = {}
    for reservation in reservations:
        key = (reservation.app_id, reservation.role)
        held_roles[key] = held_roles.get(key, 0) + 1
        holding.setdefault(reservation.app_id, set()).add(reservation.host)
        if reservation.array:
            running.setdefault(reservation.array, set()).add(reservation.app_id)
    blocked: set[str] = set()  # hosts a request ahead in the order waits for
    decisions: list[Admit | Wait | Preempt] = []
    admitted: list[Reservation] = []
    head: AdmissionRequest | None = None  # the first request that does not fit
    waiting = 0
    queues: dict[str, QueueSpec] = {}
    unlimited: dict[str, bool] = {}  # whether a queue has no quota at all, by name
    held_by_key: dict[tuple[str, str, int], Reservation] | None = None  # for resizes alone
    for request in order(requests, config, reservations):
        if request.resize:
            if held_by_key is None:
                held_by_key = {(r.app_id, r.role, r.index): r for r in reservations}
            queue_name, queue = _queue_of(request, config, queues)
            decisions.append(_resized(request, held_by_key, free, waiting, (
                held.setdefault(queue_name, _Held()),
                held_by_user.setdefault((queue_name, request.user), _Held())),
                queue_name, queue))
            if isinstance(decisions[-1], Wait):
                waiting += 1
            continue
        # A request naming no queue is in the default one: copied so only where it is admitted
        # (a copy of each of ten thousand waiting ones, each pass, cost a third of it).
        queue_name, queue = _queue_of(request, config, queues)
        out = out_topology if mismatches and _asks_locality(request) else out_always
        if queue_name not in unlimited:
            unlimited[queue_name] = _no_quota(queue)
        if request.hosts and request.executors and not request.array_max_running and \
                unlimited[queue_name] and \
                all(name in blocked and name not in out for name in request.hosts) and \
                all(role.min_num is None for role in request.roles):
            # The common case of a long queue, taken first for its cost: every host it may
            # use is kept for a request ahead, and no quota or array holds it back before
            # that (the same words as below, without placing it).
            decisions.append(Wait(request, waiting, _all_kept(sorted(request.hosts))))
            waiting += 1
            head = head or request
            continue
        roles = {role.name: role for role in request.roles}
        over_quota = functools.partial(_over_quota, held, held_by_user, request, queue_name,
                                       queue, roles)
        least = list(request.executors) if all(
            role.min_num is None for role in roles.values()) else \
            _least(request, roles, held_roles)
        # A request that is all beyond its elastic roles' minimum (they hold it already) is
        # taken as far as hosts are free: it keeps no host from the others and stops none.
        growing = not least
        members = running.get(request.array, set()) if request.array else set()
        if request.array_max_running is not None and request.app_id not in members and \
                len(members) >= request.array_max_running:
            # A member past its array's max_running waits as a record: it keeps no host from
            # anyone and stops none.
            decisions.append(Wait(request, waiting, f"array {request.array}: "
                                  f"{len(members)} of its members run, max_running "
                                  f"{request.array_max_running}"))
            waiting += 1
            continue
        unknown = [name for name in request.hosts if name not in free]
        over = over_quota(request.executors)
        if unknown:
            # The AM registers its hosts in the transaction that writes its first request; a
            # view holding the request without them is part of that transaction (the watch
            # delivers its events one at a time), and a gang placed on it would never use
            # the hosts missing from it.
            decisions.append(Wait(request, waiting, f"host{'s' if len(unknown) > 1 else ''} "
                                  f"{', '.join(unknown)} not registered with admission yet"))
            waiting += 1
            if not growing:
                blocked |= _wanted(request, [n for n in request.hosts
                                             if n in free and n not in blocked], hosts)
            continue
        usable = list(request.hosts)
        if usable and not over and not growing and len(least) == len(request.executors) and \
                all(name in blocked and name not in out for name in usable):
            # The common case of a long queue, taken first for its cost: every host it may
            # use is kept for a request ahead (the same words as below, without placing it).
            decisions.append(Wait(request, waiting, _all_kept(sorted(usable))))
            waiting += 1
            head = head or request
            continue
        for name in usable:
            free[name].per_role = dict(placed.get((name, request.app_id), {}))
        held_hosts = [hosts[name] for name in sorted(holding.get(request.app_id, ()))
                      if name in hosts] if request.domain or request.domain_preferred else []
        kept = sorted(blocked & set(usable))
        closed = sorted(set(usable) & out.keys())
        open_hosts = [free[name] for name in usable if name not in blocked and name not in out]
        slots: dict[ExecutorId, Slot] | None = None
        rest: str | None = None
        try:
            if over:
                raise PlacementError(over)
            if usable and set(usable) <= set(kept) | set(closed) and closed:
                raise PlacementError(f"every host it may use is out of service or kept for "
                                     f"applications ahead: {_out(closed, out)}")
            if usable and len(kept) == len(usable):
                raise PlacementError(_all_kept(kept))
            slots = _place(request, roles, open_hosts, held_hosts)
        except PlacementError as exc:
            reason = str(exc) + (f" (hosts kept for applications ahead: {', '.join(kept)})"
                                 if kept and len(kept) < len(usable) and not over else "") + (
                f" (out of service: {_out(closed, out)})" if closed and not over
                and not str(exc).startswith("every host") else "")
            part = None if len(least) == len(request.executors) else _elastic_part(
                request, roles, least, open_hosts, over_quota, held_hosts)
            if part is None:
                decisions.append(Wait(request, waiting, _beyond_minimum(
                    len(request.executors), reason) if growing else reason))
                waiting += 1
                if not over and not growing:
                    blocked |= _wanted(request, [n for n in usable if n not in blocked], hosts)
                    head = head or request
                continue
            slots = part
            rest = _beyond_minimum(len(request.executors) - len(slots), reason)
        decisions.append(Admit(request.model_copy(update={"executors": list(slots),
                                                          "queue": queue_name}), slots, rest))
        admitted += [Reservation(app_id=request.app_id, user=request.user, queue=queue_name,
                                 role=key[0], index=key[1], host=slot.host.name,
                                 cpu=roles[key[0]].cpu, memory=roles[key[0]].memory,
                                 gpus=list(slot.gpus), since=0.0, array=request.array)
                     for key, slot in slots.items()]
        if request.array and slots:
            running.setdefault(request.array, set()).add(request.app_id)
        for (role_name, _), slot in slots.items():
            role = roles[role_name]
            on_host = placed.setdefault((slot.host.name, request.app_id), {})
            on_host[role.name] = on_host.get(role.name, 0) + 1
            held_roles[(request.app_id, role.name)] = \
                held_roles.get((request.app_id, role.name), 0) + 1
            for bucket in (held[queue_name], held_by_user[(queue_name, request.user)]):
                bucket.add(request.app_id, role.cpu, len(slot.gpus))
    if head is not None and not set(preempting):
        victims = _victims(head, [*reservations, *admitted],
                           {n: h for n, h in hosts.items()
                            if n not in (out_topology if _asks_locality(head) else out_always)},
                           config)
        if victims:
            decisions.append(Preempt(head.model_copy(update={
                "queue": config.resolve(head.queue)}), victims))
    return decisions


def _queue_of(request: AdmissionRequest, config: QueuesConfig, queues: dict[str, QueueSpec]
              ) -> tuple[str, QueueSpec]:
    """The name and spec of ``request``'s queue, the spec looked up once a pass (``queues``)."""
    name = config.resolve(request.queue)
    return name, queues.get(name) or queues.setdefault(name, config.queue(name))


def _resized(request: AdmissionRequest,
             held: Mapping[tuple[str, str, int], Reservation],
             free: dict[str, HostFree], position: int, buckets: tuple[_Held, _Held],
             queue_name: str, queue: QueueSpec) -> Admit | Wait:
    """A resize (``request.resize``): each executor's reservation at its role's size, on the
    host it holds, where every host has room for the difference (``free`` is taken from) and
    more CPU stays within the queue's quota and its user's there (``buckets``: what they hold,
    added to); else it waits, naming a host without room or the quota. Executors holding no
    reservation are left out (the request is the AM's: admission resizes only what it
    granted)."""
    roles = {role.name: role for role in request.roles}
    slots: dict[ExecutorId, Slot] = {}
    more: dict[str, list[float]] = {}
    for role, index in request.executors:
        reservation = held.get((request.app_id, role, index))
        if reservation is None or role not in roles or reservation.host not in free:
            continue
        slots[(role, index)] = Slot(free[reservation.host].host, tuple(reservation.gpus))
        grow = more.setdefault(reservation.host, [0.0, 0.0])
        grow[0] += roles[role].cpu - reservation.cpu
        grow[1] += roles[role].memory - reservation.memory
    short = {}
    for host, (cpu, memory) in sorted(more.items()):
        left = free[host]  # a host over-full already (its inventory cut) takes any shrink
        if cpu > 1e-9 and cpu > left.cpu + 1e-9:
            short[host] = f"{left.cpu:g} CPUs free, {cpu:g} more needed"
        elif memory > 0 and memory > left.memory:
            short[host] = (f"{size_text(int(left.memory))} free, {size_text(int(memory))} "
                           f"more needed")
    if short:
        return Wait(request, position, "resize: " + "; ".join(
            f"host {host} has {why}" for host, why in short.items()), tuple(short))
    if not slots:
        return Wait(request, position, "resize: none of its executors holds a reservation")
    grown = sum(cpu for cpu, _ in more.values())
    if grown > 1e-9:  # only CPU changes: the queue's other quotas are not the resize's
        for quota, bucket, whose in ((queue.quota, buckets[0], ""),
                                     (queue.user_quota, buckets[1], f", user {request.user}")):
            over = bucket.over(Quota(cpu=quota.cpu), request.app_id, grown, 0, 0)
            if over:
                return Wait(request, position, f"resize: queue {queue_name}{whose}: {over}")
    for bucket in buckets:
        bucket.cpu += grown
    for host, (cpu, memory) in more.items():
        free[host].cpu -= cpu
        free[host].memory -= memory
    return Admit(request, slots)


def _asks_locality(request: AdmissionRequest) -> bool:
    """Whether a role of ``request`` asks how its GPUs are linked (a locality, a binding)."""
    return any(role.gpu and (role.gpu_locality != "any" or role.cpu_binding == "numa")
               for role in request.roles)


def _no_quota(queue: QueueSpec) -> bool:
    """Whether ``queue`` limits neither itself nor its users."""
    return all(getattr(quota, name) is None for quota in (queue.quota, queue.user_quota)
               for name in ("gpus", "cpu", "executors", "applications"))


def _over_quota(held: dict[str, _Held], held_by_user: dict[tuple[str, str], _Held],
                request: AdmissionRequest, queue_name: str, queue: QueueSpec,
                roles: Mapping[str, RoleSpec], executors: Sequence[ExecutorId]) -> str | None:
    """What quota of ``request``'s queue, or of its user there, its gang of ``executors``
    would exceed beside what ``held`` and ``held_by_user`` hold, if any."""
    gang = [roles[role] for role, _ in executors]
    cpu, gpus = sum(r.cpu for r in gang), sum(r.gpu for r in gang)
    by_user = (queue_name, request.user)
    # get first: setdefault would make a _Held for every request, to throw it away
    over = (held.get(queue_name) or held.setdefault(queue_name, _Held())).over(
        queue.quota, request.app_id, cpu, gpus, len(gang))
    over_user = (held_by_user.get(by_user) or held_by_user.setdefault(by_user, _Held())
                 ).over(queue.user_quota, request.app_id, cpu, gpus, len(gang))
    return (f"queue {queue_name}: {over}" if over else
            f"queue {queue_name}, user {request.user}: {over_user}" if over_user else None)


def _victims(head: AdmissionRequest, reservations: Sequence[Reservation],
             hosts: Mapping[str, Host], config: QueuesConfig) -> tuple[str, ...]:
    """The preemptible applications of a lower priority than ``head``'s to stop so that it
    fits, as few and as low as can be: candidates are taken the lowest priority first, then the
    latest admitted, until it fits; then each taken one it does not need (its hosts do not
    help) is given back, the most protected first. None when even stopping them all would not
    do."""
    priority = config.queue(head.queue).priority
    candidates: dict[str, tuple[int, float]] = {}
    for held in reservations:
        held_priority = config.queue(held.queue).priority
        if held.preemptible and held_priority < priority and held.app_id != head.app_id:
            since = max(candidates.get(held.app_id, (0, 0.0))[1], held.since)
            candidates[held.app_id] = (held_priority, since)
    ranked = sorted(candidates, key=lambda app: (candidates[app][0], -candidates[app][1]))
    roles = {role.name: role for role in head.roles}

    def fits(stopped: Sequence[str]) -> bool:
        free = free_hosts(hosts, [r for r in reservations if r.app_id not in stopped])
        try:
            place_executors(head.executors, roles,
                            [free[name] for name in head.hosts if name in free], head.placement)
        except PlacementError:
            return False
        return True

    chosen = next((ranked[:n] for n in range(1, len(ranked) + 1) if fits(ranked[:n])), [])
    for victim in reversed(chosen[:-1]):  # the last taken made it fit: it is needed
        if fits([other for other in chosen if other != victim]):
            chosen.remove(victim)
    return tuple(chosen)


def _out(names: Sequence[str], out: Mapping[str, str]) -> str:
    """``h1 (drained by alice: new disks), h2 (…)``."""
    return ", ".join(f"{name} ({out[name]})" for name in names)


def _beyond_minimum(count: int, reason: str) -> str:
    """Why ``count`` executors of elastic roles, beyond their minimum, wait."""
    return (f"{count} executor{'s' if count > 1 else ''} beyond the elastic minimum "
            f"wait{'' if count > 1 else 's'} for hosts: {reason}")


def _all_kept(hosts: Sequence[str]) -> str:
    """Why a request waits whose every host is kept for requests ahead of it."""
    return f"every host it may use ({', '.join(hosts)}) is kept for applications ahead in " \
        "the queue"


def _least(request: AdmissionRequest, roles: Mapping[str, RoleSpec],
           held_roles: Mapping[tuple[str, str], int]) -> list[ExecutorId]:
    """What ``request`` needs at once: every executor of a fixed role, and of an elastic role
    (``min_num``) the lowest indices up to its minimum, counting what the application holds."""
    least: list[ExecutorId] = []
    for name, role in roles.items():
        asked = sorted(e for e in request.executors if e[0] == name)
        if role.min_num is None:
            least += asked
        else:
            least += asked[:max(0, role.min_num - held_roles.get((request.app_id, name), 0))]
    return least


def _elastic_part(request: AdmissionRequest, roles: Mapping[str, RoleSpec],
                  least: list[ExecutorId], usable: list[HostFree],
                  over_quota: Callable[[Sequence[ExecutorId]], str | None],
                  held: Sequence[Host] = ()) -> dict[ExecutorId, Slot] | None:
    """Slots for the most of ``request`` that fits within its quotas, at least ``least`` and
    then the elastic roles' other executors, taken in turn from each role; ``None`` when
    nothing beyond what it holds fits. ``usable`` is updated with what they take."""
    extra = [e for e in request.executors if e not in least]
    by_role = [sorted(e for e in extra if e[0] == name) for name in roles]
    turns = [e for group in itertools.zip_longest(*by_role) for e in group if e is not None]

    def placed(count: int) -> dict[ExecutorId, Slot] | None:
        gang = least + turns[:count]
        if not gang or over_quota(gang):
            return None
        trial = [dataclasses.replace(h, devices=None if h.devices is None else list(h.devices),
                                     per_role=dict(h.per_role)) for h in usable]
        try:
            return _place(request.model_copy(update={"executors": gang}), roles, trial, held)
        except PlacementError:
            return None

    if placed(0) is None and least:
        return None
    low, high = 0, len(turns)  # placed(low) fits (or is empty); find the largest that does
    while low < high:
        middle = (low + high + 1) // 2
        if placed(middle) is not None:
            low = middle
        else:
            high = middle - 1
    if not least + turns[:low]:
        return None
    return _place(request.model_copy(update={"executors": least + turns[:low]}), roles, usable,
                  held)


def _place(request: AdmissionRequest, roles: Mapping[str, RoleSpec], usable: list[HostFree],
           held: Sequence[Host] = ()) -> dict[ExecutorId, Slot]:
    """Slots for the request's gang on ``usable``: inside one domain of its ``domain`` level
    (the one of the hosts it ``held`` already, where it holds some; where one of its
    ``domain_preferred`` level takes it all, there), and away from its ``avoid`` hosts if it
    can."""
    def same(level: str, groups: list[list[HostFree]]) -> list[list[HostFree]]:
        """Only the domain of what the application holds, where it holds anything."""
        mine = {host.domain(level) for host in held}
        return groups if not held else [g for g in groups if {g[0].host.domain(level)} == mine]

    if request.domain_preferred:
        for hosts in same(request.domain_preferred,
                          _domains(usable, request.domain_preferred, request.domain)):
            with contextlib.suppress(PlacementError):
                return _place_avoiding(request, roles, hosts)
    if not request.domain:
        return _place_avoiding(request, roles, usable)
    found = same(request.domain, _domains(usable, request.domain))
    why = []
    for hosts in found:
        try:
            return _place_avoiding(request, roles, hosts)
        except PlacementError as exc:
            why.append(f"{request.domain} {hosts[0].host.domain(request.domain)}: {exc}")
    raise PlacementError(
        f"no {request.domain} can take all {len(request.executors)} executors "
        f"(placement_domain {request.domain})" + (": " + "; ".join(why[:3]) + (
            f"; and {len(why) - 3} more" if len(why) > 3 else "") if why else
            f": none of its free hosts names its {request.domain} (primus_domains)"))


def _domains(usable: list[HostFree], level: str, within: str = "") -> list[list[HostFree]]:
    """``usable`` by their domain at ``level`` (hosts naming none left out), those whose
    hosts do not all share one domain at level ``within`` (when given) left out too; the
    domains with the least free first (best fit: the roomiest stay whole)."""
    groups: dict[str, list[HostFree]] = {}
    for host in usable:
        name = host.host.domain(level)
        if name is not None:
            groups.setdefault(name, []).append(host)
    kept = [hosts for hosts in groups.values()
            if not within or len({h.host.domain(within) for h in hosts} - {None}) == 1 and
            all(h.host.domain(within) is not None for h in hosts)]
    return sorted(kept, key=lambda hosts: (sum(len(h.devices or ()) for h in hosts),
                                           sum(min(h.slots, 1e9) for h in hosts),
                                           hosts[0].host.domain(level) or ""))


def _place_avoiding(request: AdmissionRequest, roles: Mapping[str, RoleSpec],
                    usable: list[HostFree]) -> dict[ExecutorId, Slot]:
    """Slots for the request's gang on ``usable``: away from its ``avoid`` hosts if it can."""
    preferred = [host for host in usable if host.host.name not in request.avoid]
    if preferred and len(preferred) < len(usable):
        try:
            return place_executors(request.executors, roles, preferred, request.placement)
        except PlacementError:
            pass
    return place_executors(request.executors, roles, usable, request.placement)


def _wanted(request: AdmissionRequest, names: Iterable[str], hosts: Mapping[str, Host]
            ) -> set[str]:
    """The hosts of ``names`` that, empty, could take an executor of one of ``request``'s
    roles (its selector, its GPU devices, its capacity): those kept for it while it waits; a
    host it could never use is not."""
    return {name for name in names
            if any(HostFree.of(hosts[name]).shortfall(role) is None for role in request.roles)}


def request_of(app_id: str, user: str, spec: JobSpec, submit_time: float,
               hosts: Sequence[str], executors: Iterable[tuple[str, int]],
               avoid: Iterable[str] = ()) -> AdmissionRequest:
    """The request of application ``app_id`` for ``executors`` (of the roles of ``spec``), on
    ``hosts``, away from ``avoid`` unless no other fits: what an AM asks for, and what a
    submit that starts no AM writes for every executor of the job."""
    wanted = sorted(executors)
    names = {role for role, _ in wanted}
    return AdmissionRequest(
        app_id=app_id, user=user, queue=spec.queue or "", submit_time=submit_time,
        preemptible=spec.preemptible, placement=spec.placement, hosts=list(hosts),
        roles=[role for role in spec.roles if role.name in names], executors=wanted,
        avoid=sorted(avoid), domain=spec.placement_domain or "",
        domain_preferred=spec.placement_domain_preferred or "")


@dataclass(frozen=True)
class Vetted:
    """A request as admission believes it (:func:`vet`): ``request``, with ``refused`` saying
    what of the AM's request was left out and why (empty: nothing)."""

    request: AdmissionRequest | None
    refused: str = ""


def vet(app_id: str, request: AdmissionRequest, owner: AppOwner | None, spec: JobSpec | None,
        hosts: Sequence[str]) -> Vetted:
    """The request of application ``app_id`` (read at ``scheduler/apps/<app>/request``,
    written by its AM, so by anything its identity holds) with every fact admission acts on
    taken from the server's records: the user, queue, submission time and preemptibility
    from ``owner``, the roles (with their resources) and placement from ``spec`` (as it
    should be now: people's scale and role changes applied), the hosts from ``hosts`` (as
    checked at submit). The AM's request only says which executors wait and which hosts to
    avoid; an executor of a role the spec lacks, or past its role's count, is left out. No
    record (an application recorded before they existed, or half-deleted): refused whole.
    """
    if owner is None or spec is None:
        return Vetted(None, f"{app_id} has no owner record or spec: its request is not "
                            "admitted")
    roles = {role.name: role for role in spec.roles}
    wanted = [(role, index) for role, index in request.executors
              if role in roles and 0 <= index < roles[role].num]
    refused = sorted(set(request.executors) - set(wanted))
    why = "" if not refused else (
        f"{app_id}: executors its spec does not have left out of its request: " +
        ", ".join(f"{role}-{index}" for role, index in refused[:10]) +
        (f" and {len(refused) - 10} more" if len(refused) > 10 else ""))
    if not wanted:
        return Vetted(None, why or f"{app_id}: its request names no executor")
    names = {role for role, _ in wanted}
    return Vetted(request.model_copy(update={
        "app_id": app_id, "user": owner.user, "queue": owner.queue,
        "submit_time": owner.submit_time, "preemptible": owner.preemptible,
        "array": owner.array, "array_max_running": owner.array_max_running,
        "placement": spec.placement, "hosts": list(hosts),
        "domain": spec.placement_domain or "",
        "domain_preferred": spec.placement_domain_preferred or "",
        "roles": [role for role in spec.roles if role.name in names],
        "executors": wanted}), why)
