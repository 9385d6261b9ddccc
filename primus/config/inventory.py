"""Hosts that executors can be placed on, and how to reach them.

The embedded default is the local host; an inventory file (Ansible INI or YAML, or a
DeepSpeed/Horovod hostfile) yields the same :class:`Host` values with SSH connection settings.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SshSettings:
    """How to reach a host over SSH; every field maps to one OpenSSH option.

    ``None`` leaves the option to the user's ``~/.ssh/config`` and OpenSSH's defaults.
    """

    port: int | None = None
    user: str | None = None
    key_file: str | None = None
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Host:
    """A host of the inventory, with the resources Primus may use on it.

    A resource left ``None`` is not limited by placement (the local host on the embedded
    default, where oversubscription is the user's choice).

    Attributes:
        name: The inventory name (Ansible's ``inventory_hostname``).
        address: Where other hosts and SSH reach it (``ansible_host``, else the name).
        launcher: ``local`` or ``ssh``.
        ssh: Connection settings when ``launcher`` is ``ssh``.
        python: The interpreter that has Primus installed on the host.
        home: ``PRIMUS_HOME`` on the host (logs and work directories); ``None``: the default.
        groups: Inventory groups the host belongs to (placement selects by them).
        labels: ``primus_labels`` (placement selects by them too).
    """

    name: str
    address: str
    launcher: str = "local"
    ssh: SshSettings = field(default_factory=SshSettings)
    python: str = "python3"
    home: str | None = None
    slots: int | None = None
    cpu: float | None = None
    memory: int | None = None
    gpus: int | None = None
    groups: frozenset[str] = field(default_factory=frozenset)
    labels: frozenset[str] = field(default_factory=frozenset)


def local_inventory() -> list[Host]:
    """The one-host inventory of the embedded default: this machine, reached on loopback."""
    return [Host(name=socket.gethostname(), address="127.0.0.1", python=sys.executable)]
