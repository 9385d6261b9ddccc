"""The hosts of an inventory as the client checks them: probed over their launchers, and made
ready for an application (reachable, the same Primus, each with its ``PRIMUS_HOME`` resolved)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import time
from collections.abc import Sequence
from typing import Any

from primus import __version__
from primus.client.api import HostCheckError, HostReport
from primus.config.accounts import AccountFacts, name_refusal, refusal
from primus.config.inventory import (
    Host,
    format_gpu_groups,
    format_gpu_tree,
    load_inventory,
    local_inventory,
    parse_gpu_topology,
)
from primus.config.site import Settings
from primus.executor.cgroups import probe
from primus.launcher.api import LaunchError
from primus.launcher.registry import Launchers
from primus.processes import describe_account
from primus.scheduler.gpu_topology import TopologyError, parse_nvidia_smi_topo
from primus.scheduler.health import topology_mismatch


def load_hosts(inventory: str | None, settings: Settings) -> list[Host]:
    """The hosts of ``inventory`` (a file), else of the site defaults' ``inventory``, else this
    host alone."""
    path = inventory or settings.inventory
    if not path:
        return local_inventory()
    return list(load_inventory(path).hosts)


async def probe_hosts(settings: Settings, hosts: Sequence[Host], account: str = ""
                      ) -> list[HostReport]:
    """Probe every host in parallel (bounded by each launcher's own limit), as ``account``
    when it names one."""
    launchers = Launchers(settings)

    async def probe(host: Host) -> HostReport:
        try:
            facts = await launchers.for_host(host, account).probe(
                host, settings.resources.cgroup_parent)
        except LaunchError as exc:
            return HostReport(host, False, str(exc))
        # A fact the probe does not know (no account of its uid) is left out, as the API
        # leaves it unset: `hosts check -o json` prints the same both ways.
        facts = {name: value for name, value in facts.items() if value is not None}
        version = facts.get("primus_version")
        if version != __version__:
            return HostReport(host, False, f"{host.name}: Primus {version} on the host, "
                                           f"{__version__} here", facts)
        contradiction = _read_gpu_topology(host, facts)
        if contradiction:
            return HostReport(host, False, f"{host.name}: {contradiction}", facts)
        return HostReport(host, True, "", facts)

    try:
        return list(await asyncio.gather(*(probe(host) for host in hosts)))
    finally:
        await launchers.close()


def _read_gpu_topology(host: Host, facts: dict[str, Any]) -> str:
    """The probe's ``nvidia-smi topo -m`` (``gpu_topology_matrix``) read into the facts as
    the inventory would declare it (``gpu_topology``, ``gpu_nvlink``), and each GPU's index,
    UUID, PCI bus id, NUMA node and CPU affinity (``gpu_devices``); what it contradicts
    of the host's inventory entry, or why it does not read, where the entry declares a
    topology (:func:`~primus.scheduler.health.topology_mismatch`, as the admission leader's
    health check finds it)."""
    matrix = facts.pop("gpu_topology_matrix", None)
    listed = facts.pop("gpu_devices", None)
    devices = {d["index"]: dict(d) for d in listed if isinstance(d, dict) and "index" in d} \
        if isinstance(listed, list) else {}
    if isinstance(matrix, str):
        with contextlib.suppress(TopologyError):
            found = parse_nvidia_smi_topo(matrix)
            tree, nvlink = found.as_tree()
            facts["gpu_topology"] = format_gpu_tree(tree)
            facts["gpu_nvlink"] = format_gpu_groups(nvlink)
            for index in range(found.gpus):
                devices.setdefault(index, {"index": index}).update(
                    numa_node=found.numa[index] if found.numa else None,
                    cpu_affinity=found.cpus[index] if found.cpus else None)
    if devices:  # each GPU: index, uuid, pci_bus_id, numa_node, cpu_affinity, where known
        facts["gpu_devices"] = [devices[index] for index in sorted(devices)]
    return topology_mismatch(host, {"gpu_topology_matrix": matrix}) or ""


async def discover_gpus(settings: Settings, hosts: Sequence[Host]) -> list[Host]:
    """``hosts``, with the GPU devices ``nvidia-smi`` lists on each host whose inventory entry
    declares none (``primus_gpus`` unset), and how they are linked (``nvidia-smi topo -m``),
    probed in parallel. A host that cannot be probed, or lists no GPU, is left as it was
    (submit's host check reports an unreachable one)."""
    undeclared = [host for host in hosts if host.gpus is None]
    if not undeclared:
        return list(hosts)
    found: dict[str, Host] = {}
    for report in await probe_hosts(settings, undeclared):
        gpus = report.facts.get("gpus") if report.ok else None
        if isinstance(gpus, int) and gpus > 0:
            tree, nvlink = parse_gpu_topology(report.facts["gpu_topology"],
                                              report.facts["gpu_nvlink"]) \
                if "gpu_topology" in report.facts else (None, ())
            found[report.host.name] = dataclasses.replace(report.host, gpus=gpus,
                                                          gpu_tree=tree, gpu_nvlink=nvlink)
    return [found.get(host.name, host) for host in hosts]


def is_loopback(address: str) -> bool:
    """Whether ``address`` (``HOST:PORT`` or ``SCHEME://HOST:PORT``) is on loopback only:
    ``localhost`` or a loopback address (``127.0.0.0/8``, ``[::1]``); not all interfaces (an
    empty host, ``0.0.0.0``), nor a name that may resolve elsewhere."""
    host = address.split("://", 1)[-1].rpartition(":")[0].removeprefix("[").removesuffix("]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def owner_account(settings: Settings, user: str) -> str:
    """The account ``user``'s applications run as on a shared deployment (site
    ``accounts:``); empty without one: they run as whoever submits them."""
    return "" if settings.accounts is None else settings.accounts.account_of(user)


async def ready_hosts(settings: Settings, hosts: Sequence[Host], user: str = "",
                      account: str = "", unenforced: dict[str, str] | None = None
                      ) -> list[Host]:
    """Check that every remote host can run executors; return them with their home resolved.
    With ``account`` (``user``'s, on a shared deployment) every host, this one too, is checked
    as that account, and its home there is the application's. ``unenforced`` is given the
    hosts where trainers cannot be held to their reservations, and why (the site's
    ``resources.enforce: best_effort``); with ``required`` such a host fails the check.

    Raises:
        HostCheckError: the etcd endpoint is loopback-only while hosts are remote, or hosts are
            unreachable, refuse the key, fail host-key checking, or lack (this version of)
            Primus; or Primus may not act as ``account`` on a host (naming the user, the host
            and the rule); or resources cannot be enforced where the site requires it. Every
            failing host is named, with its cause.
    """
    remote = [host for host in hosts if host.launcher != "local"]
    if remote:
        endpoints = settings.etcd.endpoints if settings.etcd else ()
        if not endpoints or all(is_loopback(e) for e in endpoints):
            raise HostCheckError(
                f"etcd is reachable only on this host "
                f"({', '.join(endpoints) or 'embedded etcd'}), so executors on "
                f"{', '.join(h.name for h in remote)} could not reach it; configure etcd "
                f"endpoints the hosts can reach (--etcd, $PRIMUS_ETCD or the site defaults)")
    found: dict[str, str] = {}
    if account:
        checked = await _owners_hosts(settings, hosts, user, account, found)
        _check_enforcement(settings, found, unenforced)
        return checked
    if settings.resources.enforce != "off" and any(h.launcher == "local" for h in hosts):
        why = _local_cgroups(settings.resources.cgroup_parent)
        found |= {host.name: why for host in hosts if host.launcher == "local" and why}
    if not remote:
        _check_enforcement(settings, found, unenforced)
        return list(hosts)
    reports = await probe_hosts(settings, remote)
    failures = [report.error for report in reports if not report.ok]
    if failures:
        raise HostCheckError("hosts not ready:\n  " + "\n  ".join(failures))
    found |= _cgroup_facts(reports)
    _check_enforcement(settings, found, unenforced)
    user_homes = {r.host.name: str(r.facts["home"]) for r in reports}

    def resolved_home(host: Host) -> str | None:
        if host.name not in user_homes:
            return host.home
        if host.home is None:
            return f"{user_homes[host.name]}/.primus"
        return user_homes[host.name] + host.home[1:] if host.home.startswith("~") else host.home

    return [dataclasses.replace(host, home=resolved_home(host)) for host in hosts]


_LOCAL_CGROUPS: dict[str | None, tuple[float, str | None]] = {}
LOCAL_CGROUPS_KEPT = 5.0
"""Seconds a look at this host's cgroups is taken again for (a server submitting thousands
looked at them for each)."""


def _local_cgroups(parent: str | None) -> str | None:
    """Why trainers on this host cannot be held to their reservations under ``parent``
    (:func:`~primus.executor.cgroups.probe`), looked at most every
    :data:`LOCAL_CGROUPS_KEPT` seconds."""
    now = time.monotonic()
    looked = _LOCAL_CGROUPS.get(parent)
    if looked is None or now - looked[0] > LOCAL_CGROUPS_KEPT:
        looked = _LOCAL_CGROUPS[parent] = (now, probe(parent))
    return looked[1]


def _cgroup_facts(reports: Sequence[HostReport]) -> dict[str, str]:
    """The probed hosts whose trainers cannot be held to their reservations, and why."""
    return {r.host.name: str(r.facts["cgroups"]) for r in reports
            if r.ok and isinstance(r.facts.get("cgroups"), str)}


def _check_enforcement(settings: Settings, found: dict[str, str],
                       unenforced: dict[str, str] | None) -> None:
    """Refuse the hosts of ``found`` when the site requires enforcement; else hand them on."""
    policy = settings.resources
    if policy.enforce == "off" or not found:
        return
    if policy.enforce == "required":
        raise HostCheckError("hosts not ready (resources.enforce: required):\n  " + "\n  ".join(
            f"{name}: trainers cannot be held to their reservations: {why}"
            for name, why in sorted(found.items())))
    if unenforced is not None:
        unenforced.update(found)


async def _owners_hosts(settings: Settings, hosts: Sequence[Host], user: str, account: str,
                        unenforced: dict[str, str]) -> list[Host]:
    """``hosts`` checked as ``account`` (:func:`primus.config.accounts.refusal` on each), with
    the account's home on each; ``unenforced`` is given the remote hosts where its trainers
    cannot be held to their reservations (this host's are known only where they run)."""
    policy = settings.accounts
    assert policy is not None  # an account is given only with accounts:
    named = name_refusal(user, account, policy)
    if named is not None:
        raise HostCheckError(named)
    failures, homes = [], {}
    # This host's accounts are read here (as sudo would read them); the others' by a probe
    # run as the account, which also proves Primus may enter it there.
    local = [HostReport(host, True, "", {"account": describe_account(account)})
             for host in hosts if host.launcher == "local"]
    remote = [host for host in hosts if host.launcher != "local"]
    probed = await probe_hosts(settings, remote, account)
    unenforced.update(_cgroup_facts(probed))
    for report in [*local, *probed]:
        facts = report.facts.get("account") if report.ok else None
        if not report.ok and "unknown user" not in report.error:
            failures.append(report.error + (
                f" (is {account!r} in group {policy.group!r} there? Primus may act only as "
                f"its members)" if "password is required" in report.error else ""))
            continue
        found = None if facts is None else AccountFacts(
            uid=int(facts["uid"]), groups=tuple(facts["groups"]), home=str(facts["home"]))
        why = refusal(user, account, policy, found, report.host.name)
        if why is not None:
            failures.append(why)
        elif found is not None:
            homes[report.host.name] = found.home
    if failures:
        raise HostCheckError("hosts not ready:\n  " + "\n  ".join(failures))
    return [dataclasses.replace(host, home=f"{homes[host.name]}/.primus") for host in hosts]
