"""How a site holds trainers to what they reserved (the site file's ``resources:``).

Each trainer runs in a cgroup of its own (``primus.executor.cgroups``): its role's memory plus
``memory_margin`` as its memory limit, its cpu as a CFS quota, ``pids`` processes and threads
(by default an eighth of its host's ``kernel.pid_max``, read on that host), and on a host with
GPUs none of the others' devices. ``enforce`` says what happens on a host
where that cannot be done (no cgroup hierarchy with the memory controller, or none this
account may write): ``best_effort`` (the default) runs the trainer unenforced there and says
so at submit and in the executor's log, ``required`` refuses (at submit, naming the host, and
an executor that finds it so fails its attempt), ``off`` never uses cgroups.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, NoReturn

ENFORCE = ("best_effort", "required", "off")
DEFAULT_MEMORY_MARGIN = 0.1
DEFAULT_USAGE_INTERVAL = 15.0
"""Seconds between two usage figures of a trainer (``executors/<role>/<i>/usage``): at
10,000 executors, 667 small writes a second to etcd."""
PIDS_AUTO: Literal["auto"] = "auto"
"""``pids: auto`` (the default): a share of the host's ``kernel.pid_max``."""
PIDS_SHARE = 8
"""With ``pids: auto`` a trainer may hold an eighth of its host's ``kernel.pid_max`` (4096 of
a host's 32768, 524288 of 4194304): one runaway trainer leaves the host seven eighths of its
processes and threads."""
_KEYS = {"enforce": "one of " + ", ".join(ENFORCE),
         "memory_margin": "a fraction of the role's memory added to its limit, 0 to 10 "
                          "(0.1: 10 %)",
         "pids": "the most processes and threads of one trainer: an integer >= 16, auto (the "
                 "default: an eighth of the host's kernel.pid_max), or null for no limit",
         "cgroup_parent": "the cgroup trainers' cgroups are made under, a path in the "
                          "hierarchy starting with / (default: the executor's own)",
         "usage_interval": "seconds between two of a trainer's usage figures its executor "
                           "writes, 1 to 3600 (default 15)"}


@dataclass(frozen=True)
class ResourcePolicy:
    """The site's ``resources:``."""

    enforce: str = "best_effort"
    memory_margin: float = DEFAULT_MEMORY_MARGIN
    pids: int | Literal["auto"] | None = PIDS_AUTO
    cgroup_parent: str | None = None
    usage_interval: float = DEFAULT_USAGE_INTERVAL

    def memory_limit(self, reserved: int) -> int:
        """The memory limit of a trainer that reserved ``reserved`` bytes."""
        return int(reserved * (1 + self.memory_margin))

    def pids_limit(self, pid_max: int) -> int | None:
        """The most processes and threads of a trainer on a host whose ``kernel.pid_max`` is
        ``pid_max`` (``None``: no limit). Resolved on the trainer's host, which the site's
        policy reaches as it was written (:meth:`to_json`)."""
        return pid_max // PIDS_SHARE if self.pids == PIDS_AUTO else self.pids

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ResourcePolicy:
        return cls(**json.loads(text))


def read_resources(data: Any, refuse: Callable[[str, object, str], NoReturn]
                   ) -> ResourcePolicy:
    """The site file's ``resources:``; ``refuse(field, value, allowed)`` raises the error
    naming the file, for the first key that is wrong."""
    if not isinstance(data, Mapping):
        refuse("resources", data, "must be a mapping with " + ", ".join(_KEYS))
    for key, value in data.items():
        if key not in _KEYS:
            refuse(f"resources.{key}", value, "unknown key; allowed: " + ", ".join(_KEYS))
    policy = ResourcePolicy(**data)
    margin, pids, parent = policy.memory_margin, policy.pids, policy.cgroup_parent
    interval = policy.usage_interval
    if policy.enforce not in ENFORCE:
        refuse("resources.enforce", policy.enforce, f"must be {_KEYS['enforce']}")
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin <= 10:
        refuse("resources.memory_margin", margin, f"must be {_KEYS['memory_margin']}")
    if pids is not None and pids != PIDS_AUTO and (
            isinstance(pids, bool) or not isinstance(pids, int) or pids < 16):
        refuse("resources.pids", pids, f"must be {_KEYS['pids']}")
    if parent is not None and (not isinstance(parent, str) or not parent.startswith("/")
                               or ".." in parent.split("/")):
        refuse("resources.cgroup_parent", parent, f"must be {_KEYS['cgroup_parent']}")
    if isinstance(interval, bool) or not isinstance(interval, int | float) or \
            not 1 <= interval <= 3600:
        refuse("resources.usage_interval", interval, f"must be {_KEYS['usage_interval']}")
    return ResourcePolicy(policy.enforce, float(margin), pids, parent, float(interval))
