"""Launchers by name: the registry of kinds (``local``, ``ssh``) and one launcher per kind."""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import pwd

from primus.config.inventory import Host
from primus.config.site import Settings
from primus.launcher.api import Launcher, LaunchError

# Built-in launchers by name, imported only when a host uses them.
LAUNCHERS: dict[str, str] = {
    "local": "primus.launcher.local_launcher:LocalLauncher",
    "ssh": "primus.launcher.ssh_launcher:SshLauncher",
}


def get_launcher(name: str, settings: Settings) -> Launcher:
    """A new launcher of the kind registered as ``name``, configured from ``settings``."""
    if name not in LAUNCHERS:
        raise LaunchError(f"unknown launcher {name!r}; known: {', '.join(sorted(LAUNCHERS))}")
    module_name, _, class_name = LAUNCHERS[name].partition(":")
    launcher_class: type[Launcher] = getattr(importlib.import_module(module_name), class_name)
    return launcher_class.from_settings(settings)


@functools.cache
def this_account() -> str:
    """The name of the account this process runs as."""
    return pwd.getpwuid(os.getuid()).pw_name


class Launchers:
    """One launcher per kind, created on first use, configured from the settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._by_kind: dict[tuple[str, str], Launcher] = {}

    def for_host(self, host: Host, account: str = "") -> Launcher:
        """The launcher of the host's kind (its inventory ``launcher``), acting as ``account``
        when it names another account than this process's (an application's owner)."""
        as_other = account if account and account != this_account() else ""
        key = (host.launcher, as_other)
        if key not in self._by_kind:
            launcher = get_launcher(host.launcher, self.settings)
            self._by_kind[key] = launcher.as_account(as_other) if as_other else launcher
        return self._by_kind[key]

    async def close(self) -> None:
        """Close every launcher's connections (see :meth:`Launcher.close`)."""
        await asyncio.gather(*(launcher.close() for launcher in self._by_kind.values()))
