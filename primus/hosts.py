"""Inventory hosts as Primus uses them: checked before launch, with their paths and environment."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from primus import __version__
from primus.config.inventory import Host, local_inventory
from primus.config.site import Settings
from primus.config.spec import JobSpec
from primus.errors import PrimusError
from primus.launcher.api import Launcher, LaunchError, get_launcher


class HostCheckError(PrimusError):
    """Hosts that cannot run an application; one line per host, naming it and the cause."""


@dataclass(frozen=True)
class HostReport:
    """What probing one host found: reachable with its facts, or why not."""

    host: Host
    ok: bool
    error: str = ""
    facts: dict[str, Any] = field(default_factory=dict)


class Launchers:
    """One launcher per kind, created on first use, configured from the settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._by_kind: dict[str, Launcher] = {}

    def for_host(self, host: Host) -> Launcher:
        if host.launcher not in self._by_kind:
            self._by_kind[host.launcher] = get_launcher(host.launcher, self.settings)
        return self._by_kind[host.launcher]


def host_home(host: Host, settings: Settings) -> str:
    """``PRIMUS_HOME`` on the host: its inventory ``primus_home``, else this process's home."""
    return host.home or str(settings.home)


def app_dir(home: str | PurePosixPath, app_id: str) -> PurePosixPath:
    """The application's directory under a ``PRIMUS_HOME``: logs, copied files, trainer cwd."""
    return PurePosixPath(home) / "apps" / app_id


def host_app_dir(host: Host, settings: Settings, app_id: str) -> PurePosixPath:
    """The application's directory on ``host``."""
    return app_dir(host_home(host, settings), app_id)


def host_env(host: Host, settings: Settings, spec: JobSpec) -> dict[str, str]:
    """The environment of a Primus process of the application on ``host``.

    It resolves these settings, and carries the job's ``secret_env`` from this process's own
    environment: secrets go from process to process, never through etcd or a command line.
    """
    secrets = {name: os.environ[name] for name in spec.secret_env if name in os.environ}
    return {**settings.to_env(), "PRIMUS_HOME": host_home(host, settings), **secrets}


def am_hosts(spec: JobSpec, hosts: Sequence[Host]) -> list[Host]:
    """Where the ``am.replicas`` AM candidates run: the AM host first, then other hosts.

    Candidates go to different hosts while the inventory has them, then wrap around.
    """
    first = am_host(spec, hosts)
    others = [h for h in hosts if h.name != first.name] or [first]
    return [first, *(others[i % len(others)] for i in range(spec.am.replicas - 1))]


def am_host(spec: JobSpec, hosts: Sequence[Host]) -> Host:
    """The host the AM runs on: the spec's ``am.host``, else the submitting host."""
    if spec.am.host is None:
        return local_inventory()[0]
    for host in hosts:
        if host.name == spec.am.host:
            return host
    raise HostCheckError(f"am.host {spec.am.host!r} is not in the inventory; hosts: "
                         f"{', '.join(h.name for h in hosts)}")


async def probe_hosts(launchers: Launchers, hosts: Sequence[Host]) -> list[HostReport]:
    """Probe every host in parallel (bounded by each launcher's own limit)."""
    async def probe(host: Host) -> HostReport:
        try:
            facts = await launchers.for_host(host).probe(host)
        except LaunchError as exc:
            return HostReport(host, False, str(exc))
        version = facts.get("primus_version")
        if version != __version__:
            return HostReport(host, False, f"{host.name}: Primus {version} on the host, "
                                           f"{__version__} here", facts)
        return HostReport(host, True, "", facts)

    return list(await asyncio.gather(*(probe(host) for host in hosts)))


def _is_loopback(endpoint: str) -> bool:
    host = endpoint.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def ready_hosts(settings: Settings, hosts: Sequence[Host]) -> list[Host]:
    """Check that every remote host can run executors; return them with their home resolved.

    Raises:
        HostCheckError: the etcd endpoint is loopback-only while hosts are remote, or hosts are
            unreachable, refuse the key, fail host-key checking, or lack (this version of)
            Primus. Every failing host is named, with its cause.
    """
    remote = [host for host in hosts if host.launcher != "local"]
    if not remote:
        return list(hosts)
    endpoints = settings.etcd.endpoints if settings.etcd else ()
    if not endpoints or all(_is_loopback(e) for e in endpoints):
        raise HostCheckError(
            f"etcd is reachable only on this host ({', '.join(endpoints) or 'embedded etcd'}), "
            f"so executors on {', '.join(h.name for h in remote)} could not reach it; configure "
            f"etcd endpoints the hosts can reach (--etcd, $PRIMUS_ETCD or the site defaults)")
    reports = await probe_hosts(Launchers(settings), remote)
    failures = [report.error for report in reports if not report.ok]
    if failures:
        raise HostCheckError("hosts not ready:\n  " + "\n  ".join(failures))
    user_homes = {r.host.name: str(r.facts["home"]) for r in reports}

    def resolved_home(host: Host) -> str | None:
        if host.name not in user_homes:
            return host.home
        if host.home is None:
            return f"{user_homes[host.name]}/.primus"
        return user_homes[host.name] + host.home[1:] if host.home.startswith("~") else host.home

    return [dataclasses.replace(host, home=resolved_home(host)) for host in hosts]
