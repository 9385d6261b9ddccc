"""How the admission leader checks hosts (the site file's ``health:``; docs/scheduling.md,
"Host health").

Every ``interval`` the leader checks each host admission knows (``primus.scheduler.health``):
free space where applications write (``min_free_space``), with GPUs ``nvidia-smi`` and
uncorrectable ECC errors, and the inventory's ``primus_health_check`` command, each bounded by
``timeout``. A host that fails is quarantined; it is readmitted after it passed
``readmit_after`` checks in a row. ``interval: 0`` turns the checks off.
``out_of_service`` says what becomes of the executors that run on a host drained or
quarantined: ``finish`` (the default) leaves them to end as they would, ``move`` stops them and
places them on other hosts, as a lost host's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from primus.config.spec import BYTES, LONG_DURATION

_KEYS = {"interval": "a duration (60s, 5m); 0 turns the checks off",
         "timeout": "a duration from 1s: how long one check may take",
         "readmit_after": "how many checks in a row a quarantined host must pass (1 to 100)",
         "min_free_space": "a size (1Gi): the least free space where applications write",
         "out_of_service": "finish or move: what becomes of the executors running on a host "
                           "drained or quarantined"}


@dataclass(frozen=True)
class HealthPolicy:
    """The site's ``health:``."""

    interval: float = 60.0
    timeout: float = 10.0
    readmit_after: int = 3
    min_free_space: int = 1 << 30
    out_of_service: str = "finish"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> HealthPolicy:
        return cls(**json.loads(text))


def read_health(data: Any, refuse: Callable[[str, object, str], NoReturn]) -> HealthPolicy:
    """The site file's ``health:``; ``refuse(field, value, allowed)`` raises the error naming
    the file, for the first key that is wrong."""
    if not isinstance(data, Mapping):
        refuse("health", data, "must be a mapping with " + ", ".join(_KEYS))
    found: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _KEYS:
            refuse(f"health.{key}", value, "unknown key; allowed: " + ", ".join(_KEYS))
        try:
            if key in ("interval", "timeout"):
                found[key] = float(LONG_DURATION.parse(value))
            elif key == "min_free_space":
                found[key] = BYTES.parse(value)
            else:
                found[key] = value
        except ValueError:
            refuse(f"health.{key}", value, f"must be {_KEYS[key]}")
    policy = HealthPolicy(**found)
    if policy.timeout < 1:
        refuse("health.timeout", data.get("timeout"), f"must be {_KEYS['timeout']}")
    if policy.out_of_service not in ("finish", "move"):
        refuse("health.out_of_service", policy.out_of_service,
               f"must be {_KEYS['out_of_service']}")
    readmit = policy.readmit_after
    if isinstance(readmit, bool) or not isinstance(readmit, int) or not 1 <= readmit <= 100:
        refuse("health.readmit_after", readmit, f"must be {_KEYS['readmit_after']}")
    return policy
