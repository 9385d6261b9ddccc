"""Placement: which host each executor runs on, and where the AM candidates run.

Pure functions of the job and the inventory, no I/O: the AM places executors with them, and
``primus submit`` checks with the same functions, before anything is written, that the
application fits its hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from primus.config.inventory import Host, local_inventory
from primus.config.spec import JobSpec, RoleSpec
from primus.errors import PrimusError


class PlacementError(PrimusError):
    """No host of the inventory can take an executor (the message names role and resource), or
    ``am.host`` is not in the inventory."""


@dataclass
class _Free:
    """What is left on a host while placing."""

    host: Host
    slots: float
    cpu: float
    memory: float
    gpus: float
    used: int = 0
    per_role: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, host: Host) -> _Free:
        inf = float("inf")
        return cls(host, inf if host.slots is None else host.slots,
                   inf if host.cpu is None else host.cpu,
                   inf if host.memory is None else host.memory,
                   inf if host.gpus is None else host.gpus)

    def shortfall(self, role: RoleSpec) -> str | None:
        """Why this host cannot take one more executor of ``role``, if it cannot."""
        if role.hosts and not set(role.hosts) & (self.host.groups | self.host.labels):
            return f"{self.host.name} is not in {', '.join(role.hosts)}"
        if role.max_per_host is not None and self.per_role.get(role.name, 0) >= role.max_per_host:
            return f"{self.host.name} already runs max_per_host={role.max_per_host}"
        for name, left, need in (("slots", self.slots, 1), ("cpu", self.cpu, role.cpu),
                                 ("memory", self.memory, role.memory),
                                 ("gpus", self.gpus, role.gpu)):
            if need > left:
                return f"not enough {name} on {self.host.name} (needs {need:g}, {left:g} left)"
        return None

    def take(self, role: RoleSpec) -> None:
        self.slots -= 1
        self.cpu -= role.cpu
        self.memory -= role.memory
        self.gpus -= role.gpu
        self.used += 1
        self.per_role[role.name] = self.per_role.get(role.name, 0) + 1


def place(spec: JobSpec, hosts: Sequence[Host],
          existing: Mapping[tuple[str, int], str] | None = None) -> dict[tuple[str, int], Host]:
    """Assign a host to every executor of ``spec`` that ``existing`` does not already place.

    ``existing`` maps ``(role, index)`` to the host name of executors already placed; their
    resources are taken first, so an application never oversubscribes a host it placed on.
    ``spec.placement`` chooses the strategy: ``spread`` puts each executor on the host with the
    fewest executors so far, ``pack`` on the first host that fits. A role's ``hosts`` selector
    and ``max_per_host`` limit where it may go.

    Raises:
        PlacementError: an executor fits on no host; says, for each host, what falls short.
    """
    if not hosts:
        raise PlacementError("the inventory has no hosts")
    free = {host.name: _Free.of(host) for host in hosts}
    existing = existing or {}
    for (role_name, _), host_name in existing.items():
        if host_name in free:
            free[host_name].take(spec.role(role_name))
    result: dict[tuple[str, int], Host] = {}
    for role in spec.roles:
        for index in range(role.num):
            if (role.name, index) in existing:
                continue
            fitting = [f for f in free.values() if f.shortfall(role) is None]
            if not fitting:
                reasons = "; ".join(str(f.shortfall(role)) for f in free.values())
                raise PlacementError(f"cannot place {role.name}-{index} (role {role.name}): "
                                     f"{reasons}")
            chosen = (min(fitting, key=lambda f: f.used) if spec.placement == "spread"
                      else fitting[0])
            chosen.take(role)
            result[(role.name, index)] = chosen.host
    return result


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
