"""Queues: how applications sharing the hosts of a deployment are admitted (docs/scheduling.md).

Defined under ``queues:`` in the site defaults file; the admission leader works from the copy in
etcd (``scheduler/config``), which ``primus submit`` and ``primus server`` keep equal to the
site file they read.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

from primus.config.spec import MAX_EXECUTORS, QUEUE_NAME_PATTERN

DEFAULT_QUEUE = "default"


class Quota(BaseModel):
    """Upper bounds of what a queue (or one user in it) holds at once; unset: no bound."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus: int | None = Field(default=None, ge=0, le=1_000_000, strict=True,
                             description="GPU devices held at once.")
    cpu: float | None = Field(default=None, ge=0, le=1e9,
                              description="CPU cores reserved at once.")
    executors: int | None = Field(default=None, ge=0, le=MAX_EXECUTORS * 100, strict=True,
                                  description="Executors placed at once.")
    applications: int | None = Field(default=None, ge=0, le=1_000_000, strict=True,
                                     description="Applications admitted (holding hosts) at"
                                     " once.")


class Budget(BaseModel):
    """How much of etcd one application may hold at once: its live keys under ``apps/<app>/``
    and ``scheduler/apps/<app>/``, counted by the server (``primus.client.budgets``). Past
    either bound, the application loses its write permission and fails, naming the budget.
    Unset in a queue: the site's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    keys: int | None = Field(default=None, ge=1, le=100_000_000, strict=True,
                             description="Keys held at once.")
    bytes: int | None = Field(default=None, ge=1, le=1 << 40, strict=True,
                              description="Bytes of keys and values held at once.")


DEFAULT_BUDGET = Budget(keys=1_000_000, bytes=256 << 20)
"""The site's budget unless its site file sets ``budget:``: an eighth of the playbook's etcd
quota (2 GiB) in bytes, and room for a data stream of a few hundred thousand files."""


class QueueSpec(BaseModel):
    """One queue: its priority (higher is admitted first) and its quotas."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    priority: int = Field(default=0, ge=-1000, le=1000, strict=True,
                          description="Admission order between queues: higher first; within"
                          " a priority, users take turns, then earlier submissions first.")
    quota: Quota = Field(default=Quota(), description="What the whole queue holds at once.")
    budget: Budget = Field(default=Budget(),
                           description="The etcd budget of each application of the queue, "
                           "field by field over the site's.")
    user_quota: Quota = Field(default=Quota(),
                              description="What each user holds at once in this queue.")
    max_array: int | None = Field(default=None, ge=1, le=10_000, strict=True,
                                  description="The most members a job array submitted to this"
                                  " queue may have (unset: 10,000).")


class QueuesConfig(BaseModel):
    """Every queue of the deployment; ``default`` exists unless the site file defines
    queues without it, and then ``default_queue`` names one that exists."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    queues: dict[str, QueueSpec] = Field(default_factory=lambda: {DEFAULT_QUEUE: QueueSpec()})
    default_queue: str = DEFAULT_QUEUE
    budget: Budget = DEFAULT_BUDGET
    """The site's budget of one application (``budget:``)."""

    def budget_of(self, queue: str) -> Budget:
        """The budget of an application of ``queue`` (empty: the default queue): the queue's
        own bounds where it sets them, the site's elsewhere."""
        spec = self.queues.get(queue or self.default_queue)
        own = spec.budget if spec is not None else Budget()
        return Budget(keys=own.keys if own.keys is not None else self.budget.keys,
                      bytes=own.bytes if own.bytes is not None else self.budget.bytes)

    @model_validator(mode="after")
    def _default_queue_exists(self) -> QueuesConfig:
        for name in self.queues:
            if not re.fullmatch(QUEUE_NAME_PATTERN, name):
                raise ValueError(f"queue name {name!r} must match {QUEUE_NAME_PATTERN}")
        if self.default_queue not in self.queues:
            raise ValueError(f"default_queue {self.default_queue!r} is not a queue; queues: "
                             f"{', '.join(sorted(self.queues))}")
        return self

    def resolve(self, name: str | None) -> str:
        """The queue ``name`` means: itself, or the default queue when empty."""
        return name or self.default_queue

    def queue(self, name: str | None) -> QueueSpec:
        """The queue called ``name`` (empty: the default one); an unknown one (removed from
        the site file since) is treated as a queue of priority 0 with no quota."""
        found = self.queues.get(self.resolve(name))
        return found if found is not None else QueueSpec()
