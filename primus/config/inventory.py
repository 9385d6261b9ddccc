"""Hosts that executors can be placed on.

For now the inventory is the local host; the Ansible-style inventory loader plugs in here and
produces the same :class:`Host` values.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Host:
    """A host of the inventory, with the resources Primus may use on it.

    A resource left ``None`` is not limited by placement (the local host on the embedded
    default, where oversubscription is the user's choice).
    """

    name: str
    address: str
    launcher: str = "local"
    slots: int | None = None
    cpu: float | None = None
    memory: int | None = None
    gpus: int | None = None
    labels: frozenset[str] = field(default_factory=frozenset)


def local_inventory() -> list[Host]:
    """The one-host inventory of the embedded default: this machine, reached on loopback."""
    return [Host(name=socket.gethostname(), address="127.0.0.1")]
