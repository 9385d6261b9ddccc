"""The store's own space: how full each member's database is, and the way back from a full one.

etcd limits its database file to a quota (``--quota-backend-bytes``; 2 GiB in the playbook).
History grows it with every write until compacted, and compacting frees pages without
shrinking the file: only defragmenting a member gives them back. A member whose file reaches the
quota raises the ``NOSPACE`` alarm, and then the whole store refuses every write until an
operator compacts, defragments each member and disarms the alarm (etcd's "maintenance" guide).

:func:`space_warnings` and :func:`decide_disarm` decide; :func:`recover_space` applies the
procedure through the :class:`~primus.store.api.Coordinator`; :class:`SpaceMonitor` keeps the
last reading for the server's ``/metrics`` and the UI.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from primus.store.api import Alarm, Coordinator, MemberSpace, StoreError

logger = logging.getLogger(__name__)

WARN_FRACTION = 0.8
"""A member whose database is above this fraction of its quota is warned about."""
READ_INTERVAL = 15.0
"""Seconds between two readings of the store's space by the server."""


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


@dataclass(frozen=True)
class SpaceWarning:
    """What an operator must know of one member's space: ``what`` is an alarm's name, or
    ``FULL`` for a database above the warning fraction of its quota; ``text`` says it."""

    member: str
    what: str
    text: str


FULL = "FULL"


def space_warnings(members: Sequence[MemberSpace], fraction: float = WARN_FRACTION
                   ) -> list[SpaceWarning]:
    """What an operator must know of ``members``' space: each raised alarm, and each member
    whose database is above ``fraction`` of its quota."""
    warnings = []
    for member in members:
        for alarm in member.alarms:
            if alarm is Alarm.NOSPACE:
                text = (f"etcd member {member.member} raised its NOSPACE alarm: etcd refuses "
                        f"every write until it is recovered (`primus etcd recover-space`)")
            else:
                text = (f"etcd member {member.member} raised its {alarm.value} alarm: etcd "
                        f"refuses every write; see etcd's documentation")
            warnings.append(SpaceWarning(member.member, alarm.value, text))
        if member.quota and member.size > fraction * member.quota:
            # "In use" counts the history as well as the live keys: compacting frees the
            # former, which only the procedure can tell apart.
            warnings.append(SpaceWarning(member.member, FULL, (
                f"etcd member {member.member}: database {_mib(member.size)} of its "
                f"{_mib(member.quota)} quota ({100 * member.size / member.quota:.0f}%), "
                f"{_mib(member.in_use)} in use; `primus etcd recover-space` gives back what "
                f"old revisions and free pages hold")))
    return warnings


@dataclass(frozen=True)
class Disarm:
    """Clear ``alarm`` of ``member``."""

    member: str
    alarm: Alarm


def decide_disarm(members: Sequence[MemberSpace]) -> tuple[list[Disarm], list[str]]:
    """After compacting and defragmenting: which alarms to clear, and why others stay.

    A ``NOSPACE`` alarm is cleared where the member's database is now below its quota (or the
    quota is unknown: etcd raises it again at the next write if it is still full); where it is
    not, the live data fills the quota, and clearing it would only let one more write raise it
    again. A ``CORRUPT`` alarm is never Primus's to clear.
    """
    disarms, kept = [], []
    for member in members:
        for alarm in member.alarms:
            if alarm is not Alarm.NOSPACE:
                kept.append(f"{member.member}: its {alarm.value} alarm is left raised (see "
                            f"etcd's documentation)")
            elif member.error:
                kept.append(f"{member.member}: its NOSPACE alarm is left raised, as the member "
                            f"did not answer ({member.error})")
            elif member.quota is not None and member.size >= member.quota:
                kept.append(f"{member.member}: its NOSPACE alarm is left raised: its data "
                            f"alone is {_mib(member.size)} of its {_mib(member.quota)} quota; "
                            f"delete keys or raise --quota-backend-bytes")
            else:
                disarms.append(Disarm(member.member, alarm))
    return disarms, kept


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover_space` did, and what it could not."""

    revision: int
    defragmented: tuple[str, ...]
    disarmed: tuple[Disarm, ...]
    problems: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Whether writes are served again, as far as this procedure can tell."""
        return not self.problems


async def recover_space(store: Coordinator, say: Callable[[str], None] = lambda _: None
                        ) -> Recovery:
    """Give the store its space back: compact the history to the current revision,
    defragment each member in turn, and disarm the NOSPACE alarms that no longer hold.

    Idempotent, and harmless on a store with no alarm (it gives space back all the same).
    ``say`` is told each step as it is done. Watches behind the compacted revision re-list.

    Raises:
        StoreAuthError: the store's identity may not maintain it (before anything is done).
    """
    await store.check_maintainer()
    before = await store.space()
    problems = [f"{m.member}: not defragmented, it did not answer ({m.error})"
                for m in before if m.error]
    revision = await store.compact()
    say(f"compacted the history up to revision {revision}")
    defragmented = []
    for member in before:
        if member.error:
            continue
        try:
            await store.defragment(member.member)
        except StoreError as exc:
            problems.append(f"{member.member}: defragmenting failed ({exc})")
            continue
        defragmented.append(member.member)
        say(f"defragmented {member.member} (database was {_mib(member.size)}, "
            f"{_mib(member.in_use)} in use)")
    after = await store.space()
    disarms, kept = decide_disarm(after)
    for disarm in disarms:
        await store.disarm(disarm.member, disarm.alarm)
        say(f"disarmed the {disarm.alarm.value} alarm of {disarm.member}")
    for member in after:
        if not member.error:
            quota = f" of a {_mib(member.quota)} quota" if member.quota else ""
            say(f"{member.member}: database {_mib(member.size)}{quota}, "
                f"{_mib(member.in_use)} in use")
    return Recovery(revision, tuple(defragmented), tuple(disarms), tuple(problems + kept))


@dataclass
class SpaceMonitor:
    """Reads every member's space every ``interval`` seconds, each reading bounded by
    ``timeout``, and keeps the last one for scrapes and pages (which never wait on etcd)."""

    store: Coordinator
    interval: float = READ_INTERVAL
    timeout: float = 10.0
    clock: Callable[[], float] = time.time
    members: tuple[MemberSpace, ...] = ()
    read_at: float | None = None
    """When :attr:`members` was read; ``None``: never yet."""
    failure: str = ""
    """Why the last reading failed (empty: it did not)."""
    _warned: set[tuple[str, str]] = field(default_factory=set)

    def warnings(self) -> list[SpaceWarning]:
        """:func:`space_warnings` of the last reading."""
        return space_warnings(self.members)

    async def read(self) -> None:
        """Take one reading; a failed one keeps the previous and records why."""
        try:
            async with asyncio.timeout(self.timeout):
                self.members = await self.store.space()
        except (StoreError, TimeoutError) as exc:
            self.failure = str(exc) or f"no answer in {self.timeout:g}s"
            logger.warning("could not read etcd's space: %s", self.failure)
            return
        self.read_at, self.failure = self.clock(), ""
        warnings = self.warnings()
        for warning in warnings:  # once when it appears: sizes change at every reading
            if (warning.member, warning.what) not in self._warned:
                logger.warning("%s", warning.text)
        self._warned = {(warning.member, warning.what) for warning in warnings}

    async def run(self) -> None:
        """Read until cancelled."""
        while True:
            await self.read()
            await asyncio.sleep(self.interval)
