"""The client layer's contract: the values its operations return and the errors they raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from primus.config.inventory import Host
from primus.errors import PrimusError


class HostCheckError(PrimusError):
    """Hosts that cannot run an application; one line per host, naming it and the cause."""


@dataclass(frozen=True)
class HostReport:
    """What probing one host found: reachable with its facts, or why not."""

    host: Host
    ok: bool
    error: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
