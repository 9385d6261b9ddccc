"""The AM's half of savepoints (:mod:`primus.data.savepoints` holds the cut itself).

:class:`SavepointTaker` takes each savepoint asked for: one a user asked for at once; one
trainers asked for once every executor of the roles reading the streams has joined it (its
executor wrote where its trainer is), or a minute after it was asked for. Once one is taken,
those older than the application's ``savepoints_kept`` latest are deleted. :func:`waits_for`
is the decision, pure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from primus.am.background import Background
from primus.config.spec import JobSpec
from primus.state.keys import AppKeys
from primus.state.records import Savepoint, SavepointState, decode, encode
from primus.store.api import Coordinator, Delete, Op, Put, StoreError

if TYPE_CHECKING:
    from primus.config.spec import RoleSpec
    from primus.data.tasks import StreamLedger, WriteOps

logger = logging.getLogger(__name__)

SAVEPOINTS_KEPT: int = JobSpec.model_fields["savepoints_kept"].default
"""Savepoints kept until the AM reads the job's ``savepoints_kept`` (its default)."""


def waits_for(savepoint: Savepoint, readers: set[str], now: float, timeout: float) -> float:
    """Seconds the AM waits before taking ``savepoint`` (0: take it now). A user's is taken at
    once; trainers' once every reader of ``readers`` (``role-index``) joined it, or once
    ``timeout`` passed since it was asked for."""
    if not savepoint.name or readers <= set(savepoint.readers):
        return 0.0
    return max(savepoint.requested + timeout - now, 0.0)


class SavepointTaker:
    """Takes the savepoints of one application's streams (``ledgers``) asked for, in the
    background; ``write`` is the AM's guarded write."""

    def __init__(self, store: Coordinator, keys: AppKeys,
                 ledgers: Mapping[str, StreamLedger], write: WriteOps,
                 background: Background) -> None:
        self.store = store
        self.keys = keys
        self.ledgers = ledgers
        self.kept = SAVEPOINTS_KEPT
        self._write = write
        self._background = background
        self._readers: set[str] = set()  # role-index of every executor reading a stream
        self._taking: set[int] = set()
        self._deadlines: set[int] = set()  # trainers' savepoints with a deadline set

    def resize(self, roles: Sequence[RoleSpec]) -> None:
        """The roles as the application has them now: who reads the streams."""
        reading = {role for ledger in self.ledgers.values() for role in ledger.stream.roles}
        self._readers = {f"{role.name}-{index}" for role in roles if role.name in reading
                         for index in range(role.num)}

    def observe(self, key: str, value: bytes, waited: bool = False) -> None:
        """A savepoint written: take it if it is asked for and may be taken now (or once its
        deadline passed: ``waited``)."""
        from primus.data.savepoints import JOIN_TIMEOUT  # noqa: PLC0415

        savepoint = decode(Savepoint, value, key)
        if savepoint.state is not SavepointState.REQUESTED or savepoint.number in self._taking:
            return
        wait = 0.0 if waited else waits_for(savepoint, self._readers, time.time(), JOIN_TIMEOUT)
        if wait > 0:
            if savepoint.number not in self._deadlines:  # take it then, whoever joined
                self._deadlines.add(savepoint.number)
                self._background.spawn(self._observe_after(key, wait))
            return
        self._taking.add(savepoint.number)
        self._background.spawn(self._take(savepoint))

    async def take_requested(self) -> None:
        """Take the savepoints asked for while no AM led (or before this one took them)."""
        for kv in (await self.store.get_prefix(self.keys.savepoints)).kvs:
            self.observe(kv.key, kv.value)

    async def _observe_after(self, key: str, delay: float) -> None:
        await asyncio.sleep(delay)  # the time readers have to join: a deadline, not a sync
        found = await self.store.get(key)
        if found is not None:
            self.observe(key, found.value, waited=True)

    async def _take(self, savepoint: Savepoint) -> None:
        from primus.data.savepoints import take  # noqa: PLC0415

        streams = [ledger.stream for ledger in self.ledgers.values()]
        try:
            taken = await take(self.store, self.keys, streams, savepoint, self._write)
        except StoreError as exc:  # etcd out of reach past the retries: the caller says so
            failed = savepoint.model_copy(update={"state": SavepointState.FAILED,
                                                  "error": str(exc)})
            await self._write([Put(self.keys.savepoint(savepoint.number), encode(failed))], [])
            raise
        finally:
            self._taking.discard(savepoint.number)
        logger.info("[%s/am] savepoint %d taken at revision %d: %s", self.keys.app_id,
                    taken.number, taken.revision, "; ".join(
                        f"{cut.name} {cut.done}/{cut.tasks} tasks done, {cut.reading} resume "
                        f"at their checkpoint, {cut.records} records before the cut"
                        for cut in taken.streams))
        await self._forget_old(taken.number)

    async def _forget_old(self, newest: int) -> None:
        """Delete the savepoints older than the ``kept`` latest (each holds a cut of every
        stream: kept all, a trainer saving every few minutes fills etcd)."""
        numbers = sorted(int(key.rsplit("/", 1)[1])
                         for key in await self.store.list_keys(self.keys.savepoints))
        for number in [n for n in numbers if n <= newest][:-self.kept]:
            ops: list[Op] = [Delete(self.keys.savepoint(number))]
            ops += [Delete(ledger.keys.savepoint(number), prefix=True)
                    for ledger in self.ledgers.values()]
            if await self._write(ops, []):
                logger.info("[%s/am] savepoint %d deleted: only the %d latest are kept",
                            self.keys.app_id, number, self.kept)
