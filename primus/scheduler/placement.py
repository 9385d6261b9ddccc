"""Placement: which host each executor runs on, and where the AM candidates run.

Pure functions of the job and the inventory, no I/O: the AM places executors with them, and
``primus submit`` checks with the same functions, before anything is written, that the
application fits its hosts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from primus.config.inventory import Host, local_inventory
from primus.config.spec import JobSpec, RoleSpec
from primus.errors import PrimusError
from primus.scheduler.gpu_topology import GpuTopology, Link, choose_devices, topology_of

MAX_EXECUTORS_PER_HOST = 256
"""Executors of one application on one host, at most: each is a child of the host's agent and
a connection to the application's lease keeper there, which checks each one's beat every
round (see docs/architecture.md, "Leases and self-fencing"). A job needing more on one host is
refused when it is checked, naming this limit."""


class PlacementError(PrimusError):
    """No host of the inventory can take an executor (the message names role and resource), or
    ``am.host`` is not in the inventory."""


@dataclass(frozen=True)
class Slot:
    """Where one executor goes: its host, and the GPU devices it gets there (indices)."""

    host: Host
    gpus: tuple[int, ...] = ()


@dataclass
class HostFree:
    """What is left on a host while placing: ``None`` resources are unlimited; ``devices``
    are the GPU device indices still free (``None``: the host declares no GPU)."""

    host: Host
    slots: float
    cpu: float
    memory: float
    devices: list[int] | None
    used: int = 0
    per_role: dict[str, int] = field(default_factory=dict)
    topology: GpuTopology | None = None
    """How its GPUs are linked, where the inventory says (``primus_gpu_topology``)."""

    @classmethod
    def of(cls, host: Host) -> HostFree:
        """Everything the host has: devices ``0`` to ``gpus - 1``."""
        inf = float("inf")
        return cls(host, inf if host.slots is None else host.slots,
                   inf if host.cpu is None else host.cpu,
                   inf if host.memory is None else host.memory,
                   None if host.gpus is None else list(range(host.gpus)),
                   topology=topology_of(host))

    def shortfall(self, role: RoleSpec) -> str | None:
        """Why this host cannot take one more executor of ``role``, if it cannot."""
        if role.hosts and not set(role.hosts) & (self.host.groups | self.host.labels):
            return f"{self.host.name} is not in {', '.join(role.hosts)}"
        if role.max_per_host is not None and self.per_role.get(role.name, 0) >= role.max_per_host:
            return f"{self.host.name} already runs max_per_host={role.max_per_host}"
        if sum(self.per_role.values()) >= MAX_EXECUTORS_PER_HOST:
            return (f"{self.host.name} already runs {MAX_EXECUTORS_PER_HOST} executors of this "
                    f"application, the most one host agent supervises")
        if role.gpu and self.devices is None:
            return f"{self.host.name} declares no GPU devices (primus_gpus)"
        for name, left, need in (("slots", self.slots, 1), ("cpu", self.cpu, role.cpu),
                                 ("memory", self.memory, role.memory),
                                 ("gpus", len(self.devices or ()), role.gpu)):
            if need > left:
                return f"not enough {name} on {self.host.name} (needs {need:g}, {left:g} left)"
        if role.gpu and role.gpu_locality != "any":
            if self.topology is None:
                return (f"{self.host.name}'s GPU topology is unknown (primus_gpu_topology), and "
                        f"role {role.name} asks gpu_locality {role.gpu_locality}")
            if self._devices_within(role, role.gpu_locality) is None:
                return (f"no {role.gpu} free GPUs linked at {role.gpu_locality} or closer on "
                        f"{self.host.name} (free: {_listed(self.devices or [])})")
        return None

    def prefers(self, role: RoleSpec) -> bool:
        """Whether this host meets ``role``'s ``gpu_locality_preferred`` now (a role without
        one: every host does)."""
        preferred = role.gpu_locality_preferred
        return not role.gpu or preferred is None or preferred == role.gpu_locality or \
            self._devices_within(role, preferred) is not None

    def _devices_within(self, role: RoleSpec, locality: str) -> tuple[int, ...] | None:
        if self.topology is None or self.devices is None:
            return None
        return choose_devices(self.topology, self.devices, role.gpu, Link[locality.upper()])

    def _choose(self, role: RoleSpec) -> tuple[int, ...]:
        """The devices for one executor of ``role``: where the topology is known, the set
        :func:`~primus.scheduler.gpu_topology.choose_devices` picks, as close as preferred,
        else as asked; else the lowest free ones."""
        assert self.devices is not None
        for locality in (role.gpu_locality_preferred, role.gpu_locality, "any"):
            if locality is not None and (found := self._devices_within(role, locality)):
                return found
        return tuple(self.devices[:role.gpu])

    def take(self, role: RoleSpec, gpus: Sequence[int] = ()) -> tuple[int, ...]:
        """Take one executor of ``role``: its GPU devices are ``gpus`` when given (an
        existing reservation), else the lowest free ones; return them."""
        self.slots -= 1
        self.cpu -= role.cpu
        self.memory -= role.memory
        taken: tuple[int, ...] = ()
        if self.devices is not None and role.gpu:
            taken = tuple(gpus) or self._choose(role)
            self.devices = [d for d in self.devices if d not in taken]
        self.used += 1
        self.per_role[role.name] = self.per_role.get(role.name, 0) + 1
        return taken


def _listed(devices: Sequence[int]) -> str:
    return ", ".join(map(str, devices)) or "none"


def place_executors(executors: Sequence[tuple[str, int]], roles: Mapping[str, RoleSpec],
                    free: Sequence[HostFree], strategy: str) -> dict[tuple[str, int], Slot]:
    """A slot for each of ``executors`` on the ``free`` hosts, all or none; ``free`` is
    updated with what they take.

    ``strategy`` ``spread`` puts each executor on the host with the fewest executors so far,
    ``pack`` on the first host that fits. A role's ``hosts`` selector and ``max_per_host``
    limit where it may go, and its ``gpu_locality`` to hosts with that many GPUs free that
    close; hosts that meet its ``gpu_locality_preferred`` go first. Where a host's GPU
    topology is known, the devices are chosen on it to leave the largest well-linked blocks
    free (:func:`~primus.scheduler.gpu_topology.choose_devices`).

    Raises:
        PlacementError: an executor fits on no host; says, for each host, what falls short.
            ``free`` is then left as it was.
    """
    if not free:
        raise PlacementError("the inventory has no hosts")
    saved = [dataclasses.replace(f, devices=None if f.devices is None else list(f.devices),
                                 per_role=dict(f.per_role)) for f in free]
    result: dict[tuple[str, int], Slot] = {}
    for role_name, index in executors:
        role = roles[role_name]
        fitting = [f for f in free if f.shortfall(role) is None]
        if not fitting:
            reasons = "; ".join(str(f.shortfall(role)) for f in free)
            for f, before in zip(free, saved, strict=True):
                f.__dict__.update(before.__dict__)
            raise PlacementError(f"cannot place {role_name}-{index} (role {role_name}): "
                                 f"{reasons}")
        fitting = [f for f in fitting if f.prefers(role)] or fitting
        chosen = min(fitting, key=lambda f: f.used) if strategy == "spread" else fitting[0]
        result[(role_name, index)] = Slot(chosen.host, chosen.take(role))
    return result


def place(spec: JobSpec, hosts: Sequence[Host],
          existing: Mapping[tuple[str, int], str] | None = None) -> dict[tuple[str, int], Host]:
    """Assign a host to every executor of ``spec`` that ``existing`` does not already place.

    ``existing`` maps ``(role, index)`` to the host name of executors already placed; their
    resources are taken first, so an application never oversubscribes a host it placed on.
    See :func:`place_executors` for the strategy.

    Raises:
        PlacementError: an executor fits on no host; says, for each host, what falls short.
    """
    free = {host.name: HostFree.of(host) for host in hosts}
    existing = existing or {}
    for (role_name, _), host_name in existing.items():
        if host_name in free:
            free[host_name].take(spec.role(role_name))
    wanted = [(role.name, index) for role in spec.roles for index in range(role.num)
              if (role.name, index) not in existing]
    slots = place_executors(wanted, {role.name: role for role in spec.roles},
                            list(free.values()), spec.placement)
    return {key: slot.host for key, slot in slots.items()}


def am_host(spec: JobSpec, hosts: Sequence[Host]) -> Host:
    """The host the AM runs on: the spec's ``am.host``, else the submitting host.

    Raises:
        PlacementError: ``am.host`` names no host of ``hosts``.
    """
    if spec.am.host is None:
        return local_inventory()[0]
    for host in hosts:
        if host.name == spec.am.host:
            return host
    raise PlacementError(f"am.host {spec.am.host!r} is not in the inventory; hosts: "
                         f"{', '.join(h.name for h in hosts)}")


def am_hosts(spec: JobSpec, hosts: Sequence[Host]) -> list[Host]:
    """Where the ``am.replicas`` AM candidates run: the AM host first, then other hosts.

    Candidates go to different hosts while the inventory has them, then wrap around.
    """
    first = am_host(spec, hosts)
    others = [h for h in hosts if h.name != first.name] or [first]
    return [first, *(others[i % len(others)] for i in range(spec.am.replicas - 1))]
