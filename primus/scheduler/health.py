"""Host health: the admission leader checks every host admission knows, quarantines the sick and
readmits them once they pass again (docs/scheduling.md, "Host health").

:func:`next_condition` decides, a pure function of what a host's condition is and what its
check found; :class:`HealthChecks` runs the checks (``primus.launcher.health`` on each host,
over its launcher) every ``health.interval`` while its process leads admission, and writes
``scheduler/conditions/<host>`` only where the decision changes it. A drained host is the
operator's: the checks never touch its condition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from primus.config.health import HealthPolicy
from primus.config.inventory import Host
from primus.config.site import Settings
from primus.launcher.api import LaunchError
from primus.launcher.registry import Launchers
from primus.scheduler.gpu_topology import TopologyError, parse_nvidia_smi_topo, topology_of
from primus.state.keys import SchedulerKeys
from primus.state.records import HostCondition, Record, TopologyCheck, encode
from primus.store.api import Compare, Delete, Op, Put, key_missing, key_unchanged_since

logger = logging.getLogger(__name__)

HEALTH_CHECK = "the health check"
"""Who quarantines a host (``HostCondition.by``)."""


def next_condition(current: HostCondition | None, failure: str | None, now: float,
                   readmit_after: int) -> HostCondition | None:
    """A host's condition after a check that found ``failure`` (``None``: it passed): the
    same object when nothing changes, ``None`` when it takes executors."""
    if current is not None and current.state == "drained":
        return current
    if failure is not None:
        if current is not None and current.reason == failure and current.passes == 0:
            return current
        return HostCondition(state="quarantined", reason=failure, by=HEALTH_CHECK,
                             since=now if current is None else current.since)
    if current is None or current.passes + 1 >= readmit_after:
        return None
    return current.model_copy(update={"passes": current.passes + 1})


def topology_mismatch(host: Host, facts: Mapping[str, Any]) -> str | None:
    """How ``host``'s GPUs, as its probe's ``nvidia-smi topo -m`` shows them (``facts``),
    are linked otherwise than its inventory declares; ``None`` when they agree (or it declares
    nothing)."""
    declared = topology_of(host)
    if declared is None:
        return None
    matrix = facts.get("gpu_topology_matrix")
    if not isinstance(matrix, str):
        return ("nvidia-smi topo -m did not answer; the inventory declares a GPU topology "
                "(primus_gpu_topology)")
    try:
        differences = declared.differences(parse_nvidia_smi_topo(matrix))
    except TopologyError as exc:
        return f"nvidia-smi topo -m does not read: {exc}"
    if not differences:
        return None
    return ("its GPUs are linked otherwise than the inventory declares (here: the inventory, "
            "there: nvidia-smi topo -m): " + "; ".join(differences[:8]) +
            (f" and {len(differences) - 8} more" if len(differences) > 8 else ""))


class HealthChecks:
    """The checks of one admission leader's term; :meth:`run` until cancelled."""

    def __init__(self, settings: Settings,
                 write: Callable[[list[Compare], list[Op]], Awaitable[bool]]) -> None:
        """``write(compares, ops)``: apply ``ops`` if this process still leads and the
        compares hold."""
        self.settings = settings
        self.policy: HealthPolicy = settings.health
        self.keys = SchedulerKeys(settings.prefix)
        self._write = write

    async def run(self, hosts: Callable[[], Sequence[Host]],
                  conditions: Callable[[], dict[str, tuple[HostCondition, int]]],
                  mismatches: Callable[[], dict[str, tuple[TopologyCheck, int]]] = dict
                  ) -> None:
        """Every interval (the first after one), check ``hosts()`` and write what changed of
        ``conditions()`` and, for the hosts that declare how their GPUs are linked, of
        ``mismatches()`` (each with its key's revision)."""
        if self.policy.interval <= 0:
            return
        launchers = Launchers(self.settings)
        try:
            while True:
                await asyncio.sleep(self.policy.interval)
                checked = list(hosts())
                await self.check(launchers, checked, conditions())
                await self.check_topology(launchers, checked, mismatches())
        finally:
            await launchers.close()

    async def check_topology(self, launchers: Launchers, hosts: Sequence[Host],
                             mismatches: dict[str, tuple[TopologyCheck, int]]) -> None:
        """Probe each of ``hosts`` that declares a GPU topology (as ``primus hosts check``
        does) and record where its GPUs are linked otherwise (:func:`topology_mismatch`), or
        no longer; an unreachable host is the other checks' business."""
        declared = [host for host in hosts if host.gpu_tree is not None]
        facts = await asyncio.gather(*(self._probe(launchers, host) for host in declared))
        now = time.time()
        for host, found in zip(declared, facts, strict=True):
            if found is None:
                continue
            why = topology_mismatch(host, found)
            current, revision = mismatches.get(host.name, (None, 0))
            if (current.reason if current else None) == why:
                continue
            after = None if why is None else TopologyCheck(reason=why, since=now)
            if await self._replace(self.keys.topology_check(host.name), current is not None,
                                   revision, after):
                logger.info("[health] %s: %s", host.name, "GPU topology as declared"
                            if after is None else f"takes no executor asking for locality: "
                                                  f"{why}")

    async def _probe(self, launchers: Launchers, host: Host) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(launchers.for_host(host).probe(
                host, self.settings.resources.cgroup_parent), self._limit)
        except (LaunchError, TimeoutError):
            return None

    @property
    def _limit(self) -> float:
        """Seconds a host's check or probe may take: each check on the host is bounded by the
        timeout; the rest is the way there."""
        return 3 * self.policy.timeout + 30

    async def _replace(self, key: str, present: bool, revision: int,
                       after: Record | None) -> bool:
        """Write ``after`` to ``key`` (``None``: delete it), if the key is still as it was
        read (``present``, at ``revision``); whether it was written."""
        guard = key_unchanged_since(key, revision) if present else key_missing(key)
        return await self._write([guard], [Delete(key) if after is None
                                           else Put(key, encode(after))])

    async def check(self, launchers: Launchers, hosts: Sequence[Host],
                    conditions: dict[str, tuple[HostCondition, int]]) -> None:
        failures = await asyncio.gather(*(self._failure(launchers, h) for h in hosts))
        now = time.time()
        for host, failure in zip(hosts, failures, strict=True):
            current, revision = conditions.get(host.name, (None, 0))
            after = next_condition(current, failure, now, self.policy.readmit_after)
            if after is current:
                continue
            if await self._replace(self.keys.condition(host.name), current is not None,
                                   revision, after):
                logger.info("[health] %s: %s", host.name, "back in service" if after is None
                            else after.describe() + (f" ({after.passes} passed)"
                                                     if after.passes else ""))

    async def _failure(self, launchers: Launchers, host: Host) -> str | None:
        """Why ``host`` is not healthy, or ``None``; an unreachable host is not."""
        policy = self.policy
        request = {"home": host.home, "min_free": policy.min_free_space, "gpus": host.gpus or 0,
                   "command": host.health_check or "", "timeout": policy.timeout}
        try:
            return await asyncio.wait_for(launchers.for_host(host).check_health(host, request),
                                          self._limit)
        except LaunchError as exc:
            return f"unreachable: {exc}"
        except TimeoutError:
            return f"no answer to the health check within {self._limit:g}s"
