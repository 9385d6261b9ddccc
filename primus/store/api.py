"""The coordination store contract: what AM, executors and CLI may ask of etcd.

Everything above this module talks to :class:`Coordinator`; only ``etcd_store.py`` knows the etcd
client. The value types here are plain data so that decision logic can be unit-tested without a
store.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_when_event_set,
    wait_exponential,
)

from primus.errors import PrimusError

T = TypeVar("T")

logger = logging.getLogger(__name__)


class StoreError(PrimusError):
    """Base of errors from the coordination store."""


class StoreUnavailableError(StoreError):
    """The store did not answer (connection refused, timeout, unreachable endpoint)."""


class StoreAuthError(StoreError):
    """The store refused the credentials or the TLS handshake."""


class CompactedError(StoreError):
    """A watch asked for a revision that etcd has already compacted."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted up to {compact_revision}")
        self.compact_revision = compact_revision


class LeaseLostError(StoreError):
    """A lease expired or was revoked while its holder still needed it."""


class StoreSpaceExceededError(StoreError):
    """The store refused a write because its database reached its space quota (etcd's NOSPACE
    alarm): every write of every client fails until an operator recovers the space
    (``primus etcd recover-space``, docs/operations.md)."""


@dataclass(frozen=True)
class KeyValue:
    """One key as read from the store, with the revisions etcd keeps for it."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True)
class Snapshot:
    """Every key under a prefix, read at one revision."""

    revision: int
    kvs: tuple[KeyValue, ...]


class EventType(str, enum.Enum):
    """What happened to a key in a watch event."""

    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True)
class WatchEvent:
    """A change to one key; ``revision`` is the store revision of the change."""

    type: EventType
    key: str
    value: bytes
    revision: int


@dataclass(frozen=True)
class Resync:
    """Emitted by a prefix watch that lost history (compaction): a fresh full listing.

    Consumers must replace their view of the prefix with ``snapshot``; events continue from
    ``snapshot.revision + 1``.
    """

    snapshot: Snapshot


# --- Transactions -----------------------------------------------------------------------------


class CompareTarget(str, enum.Enum):
    """Which attribute of a key a transaction compares."""

    VALUE = "value"
    VERSION = "version"
    CREATE = "create"
    MOD = "mod"


@dataclass(frozen=True)
class Compare:
    """One guard of a transaction: ``target(key) op operand``."""

    key: str
    target: CompareTarget
    op: str
    operand: int | bytes

    def __post_init__(self) -> None:
        if self.op not in ("==", "!=", "<", ">"):
            raise ValueError(f"compare operator must be one of == != < >, got {self.op!r}")


def key_missing(key: str) -> Compare:
    """Guard: ``key`` does not exist."""
    return Compare(key, CompareTarget.VERSION, "==", 0)


def key_exists(key: str) -> Compare:
    """Guard: ``key`` exists."""
    return Compare(key, CompareTarget.VERSION, ">", 0)


def key_created_at(key: str, create_revision: int) -> Compare:
    """Guard: ``key`` is still the incarnation created at ``create_revision``."""
    return Compare(key, CompareTarget.CREATE, "==", create_revision)


def key_unchanged_since(key: str, mod_revision: int) -> Compare:
    """Guard: ``key`` was last modified at ``mod_revision`` (0 means: it does not exist)."""
    return Compare(key, CompareTarget.MOD, "==", mod_revision)


@dataclass(frozen=True)
class Put:
    """Transaction operation: write ``value`` at ``key``, attached to ``lease`` if non-zero."""

    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True)
class Delete:
    """Transaction operation: delete ``key``, or every key under it when ``prefix``."""

    key: str
    prefix: bool = False


@dataclass(frozen=True)
class Get:
    """Transaction operation: read ``key``, or every key under it when ``prefix`` (the first
    ``limit`` of them in key order, with ``last`` the last ``limit``; 0: all). Keys come in
    key order either way."""

    key: str
    prefix: bool = False
    limit: int = 0
    last: bool = False


Op = Put | Delete | Get


@dataclass(frozen=True)
class Grant:
    """One permission of an identity: read (or, with ``write``, read and write) ``key``, or
    every key under it when ``prefix``. Grants add up; none takes a permission away."""

    key: str
    prefix: bool = False
    write: bool = False


@dataclass(frozen=True)
class TxnResult:
    """Outcome of a transaction: which branch ran, at which revision, and what its reads got."""

    succeeded: bool
    revision: int
    reads: tuple[tuple[KeyValue, ...], ...] = ()


@dataclass(frozen=True)
class Lease:
    """A granted lease: keys attached to it vanish when it expires."""

    id: int
    ttl: int


class Alarm(str, enum.Enum):
    """An alarm a store member raises; while any is raised the store refuses writes.

    - ``NOSPACE``: the member's database reached its space quota (etcd's
      ``--quota-backend-bytes``). Compacting the history, defragmenting each member and then
      disarming it brings writes back, unless the live data itself fills the quota.
    - ``CORRUPT``: the member's data differs from the others'. Not Primus's to clear: see
      etcd's documentation on data corruption.
    """

    NOSPACE = "NOSPACE"
    CORRUPT = "CORRUPT"


@dataclass(frozen=True)
class MemberSpace:
    """How full one member's database is, as the member reports it.

    ``size`` is the database file, which is what the quota limits; ``in_use`` the part of it
    holding data (the rest is free pages, which only defragmenting gives back); ``quota`` the
    member's space quota in bytes (``None``: it did not say). ``error`` says why the member did
    not answer (its sizes are then 0); its raised alarms are known all the same, as the whole
    store keeps them.
    """

    member: str
    """Its name (its id in hex when it has none)."""
    endpoint: str
    size: int = 0
    in_use: int = 0
    quota: int | None = None
    alarms: tuple[Alarm, ...] = ()
    error: str = ""


# --- The interface ----------------------------------------------------------------------------


class Coordinator(abc.ABC):
    """Key-value store with revisions, transactions, leases and prefix watches.

    Keys are ``str`` paths (``/primus/apps/<app>/...``); values are ``bytes``. Every method may
    raise :class:`StoreUnavailableError` when the store does not answer within the client's
    request timeout.
    """

    @abc.abstractmethod
    async def get(self, key: str) -> KeyValue | None:
        """Read one key, or ``None`` when it does not exist."""

    @abc.abstractmethod
    async def get_prefix(self, prefix: str, limit: int = 0, after: str | None = None,
                         revision: int = 0) -> Snapshot:
        """Read the keys under ``prefix`` at one revision, in key order: all of them, or the
        first ``limit`` (0: no limit) of those that sort after the key ``after``.

        ``revision`` > 0 reads them as they were at that past revision (the snapshot's
        revision is then the current one); :class:`CompactedError` when it was compacted."""

    @abc.abstractmethod
    async def count_prefix(self, prefix: str) -> int:
        """How many keys there are under ``prefix``, without reading them."""

    @abc.abstractmethod
    async def list_keys(self, prefix: str, modified_after: int = 0) -> list[str]:
        """The keys under ``prefix`` (no values), in key order; with ``modified_after``, only
        those written after that revision."""

    @abc.abstractmethod
    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        """Write ``value`` at ``key`` and return the new revision."""

    @abc.abstractmethod
    async def delete(self, key: str, prefix: bool = False) -> int:
        """Delete ``key`` (or every key under it) and return how many keys went."""

    @abc.abstractmethod
    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """Run ``success`` if every compare holds, else ``failure``, atomically."""

    @abc.abstractmethod
    async def add_identity(self, name: str, password: str, grants: Sequence[Grant]) -> None:
        """Make the user ``name`` (with ``password``) and a role of the same name that has
        ``grants`` and nothing else. Needs a store identity that manages users (etcd's root
        role).

        Raises:
            StoreAuthError: this identity may not manage users.
            StoreError: the user or the role exists already, or auth is not enabled.
        """

    @abc.abstractmethod
    async def grant(self, name: str, grants: Sequence[Grant]) -> None:
        """Give the role ``name`` each of ``grants``; one for a key or range it has already
        replaces what it may do there (a write grant made a read grant takes the write back,
        at once, with no moment in which the identity may not read).

        Raises:
            StoreAuthError: this identity may not manage roles.
            StoreError: there is no such role, or auth is not enabled.
        """

    @abc.abstractmethod
    async def remove_identity(self, name: str) -> bool:
        """Delete the user ``name`` and its role; ``False`` when neither existed."""

    @abc.abstractmethod
    async def list_identities(self, start: str) -> list[str]:
        """The names of the users that start with ``start``."""

    @abc.abstractmethod
    async def check_maintainer(self) -> None:
        """Return if this identity may maintain the store (compact, defragment, disarm): in
        etcd, the root role when auth is on.

        Raises:
            StoreAuthError: it may not.
        """

    @abc.abstractmethod
    async def space(self) -> tuple[MemberSpace, ...]:
        """How full each member's database is, and the alarms raised; a member that does not
        answer is listed with its ``error``. Any identity may ask."""

    @abc.abstractmethod
    async def compact(self) -> int:
        """Drop the history older than the current revision and return that revision, once
        the member answering has freed it (the others follow on their own). Watches behind
        that revision re-list (:class:`Resync`). A revision already compacted is no error."""

    @abc.abstractmethod
    async def defragment(self, member: str) -> None:
        """Give the free pages of ``member``'s database back (its file shrinks to what is in
        use). The member serves nothing while it runs; do one member at a time."""

    @abc.abstractmethod
    async def disarm(self, member: str, alarm: Alarm) -> None:
        """Clear ``alarm`` raised on ``member``; a member that has not raised it is left
        alone."""

    @abc.abstractmethod
    async def grant_lease(self, ttl: int) -> Lease:
        """Grant a lease of ``ttl`` seconds."""

    @abc.abstractmethod
    async def refresh_lease(self, lease_id: int) -> int:
        """Renew a lease; return its new TTL in seconds, 0 when it no longer exists."""

    @abc.abstractmethod
    async def revoke_lease(self, lease_id: int) -> None:
        """Revoke a lease, deleting every key attached to it. Unknown leases are ignored."""

    @abc.abstractmethod
    def _watch_from(self, prefix: str, start_revision: int,
                    opened: Callable[[int], None] | None = None) -> AsyncIterator[WatchEvent]:
        """Stream events under ``prefix`` from ``start_revision`` until the stream breaks.

        ``start_revision`` 0 watches from after the current revision. Once the store has
        created the watch (and before any event), ``opened`` is called with the store's
        revision then.

        Raises :class:`CompactedError` when the revision is compacted, and
        :class:`StoreUnavailableError` when the connection drops.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and background tasks."""

    async def watch_prefix(
        self,
        prefix: str,
        start_revision: int,
        *,
        retry_interval: float = 0.5,
        opened: Callable[[int], None] | None = None,
    ) -> AsyncGenerator[WatchEvent | Resync, None]:
        """Watch ``prefix`` forever from ``start_revision`` (inclusive).

        A dropped connection is resumed from the last seen revision + 1, so no event is missed or
        repeated. When etcd has compacted the revision to resume from, the prefix is re-listed
        and a :class:`Resync` is yielded before events continue.

        ``start_revision`` 0 watches from now: from after the store's revision when the watch
        is created, which ``opened`` is then called with (before any event; see
        :func:`primus.store.recipes.watching`). Such a watch that cannot be opened raises
        :class:`StoreUnavailableError` at once, as a read would, instead of retrying.
        """
        next_revision = start_revision

        def started(revision: int) -> None:
            nonlocal next_revision, opened
            if next_revision == 0:  # a watch from now: resumed from where it started
                next_revision = revision + 1
            if opened is not None:
                opened(revision)
                opened = None  # once: a resumed watch is the same watch

        while True:
            try:
                async for event in self._watch_from(prefix, next_revision, started):
                    next_revision = event.revision + 1
                    yield event
                # A stream that ends without error was cut by the server; resume.
            except CompactedError:
                snapshot = await self.get_prefix(prefix)
                next_revision = snapshot.revision + 1
                logger.info("watch on %s re-listed after compaction at %s", prefix,
                            snapshot.revision)
                yield Resync(snapshot)
                continue
            except StoreUnavailableError as exc:
                if next_revision == 0:  # never opened: there is no "now" to resume from
                    raise
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # Cancelled while a watch was being opened, and the cancellation was
                    # swallowed (aetcd waits with asyncio.wait_for, CPython gh-86296) where
                    # the connection failed: retrying would outlive the reader's cancel (an
                    # executor fenced with etcd gone then never stopped its trainer).
                    raise asyncio.CancelledError from exc
                logger.warning("watch on %s interrupted (%s); resuming from revision %s",
                               prefix, exc, next_revision)
            await asyncio.sleep(retry_interval)


# --- Recipes built on the interface ------------------------------------------------------------


class LeaseState(str, enum.Enum):
    """Health of a kept lease, as its keeper sees it.

    - ``HEALTHY``: the last renewal succeeded within the TTL.
    - ``SUSPENDED``: renewals are failing but the lease may still be alive in etcd.
    - ``LOST``: the lease is gone or cannot have survived; everything attached to it is gone.
    """

    HEALTHY = "healthy"
    SUSPENDED = "suspended"
    LOST = "lost"


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait for it to end, whatever it ends with; a cancellation of the
    caller meanwhile is not swallowed with the task's own (a task that went on after its
    cancel would never end: a server that never stops)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:  # noqa: BLE001, S110 - its outcome is no one's any more
        pass



class LeaseHolder:
    """What every holder of a kept lease has (:class:`LeaseKeeper`, and the host's lease as
    one executor holds it, ``executor/host_lease.py``), and the one way it declares the
    lease lost."""

    lease: Lease
    state: LeaseState
    lost: asyncio.Event
    on_lost: list[Callable[[str], None]]

    def _declare_lost(self, reason: str) -> None:
        """Once only: the state LOST, the event set, the loss logged, the callbacks run."""
        if self.state is LeaseState.LOST:
            return
        self.state = LeaseState.LOST
        self.lost.set()
        logger.error("lease %x lost: %s", self.lease.id, reason)
        for callback in self.on_lost:
            callback(reason)


@dataclass
class LeaseKeeper(LeaseHolder):
    """Keeps a lease alive in the background and reports when it is lost.

    Renewals run every ``ttl / 3`` seconds. The deadline is measured on the monotonic clock from
    when the last *successful* renewal was sent: if no renewal succeeds before
    ``ttl - margin`` seconds after that point, the lease is declared LOST, because etcd may
    already have expired it. ``on_lost`` callbacks run once, in the event loop, and must not block.
    """

    store: Coordinator
    lease: Lease
    margin: float = 1.0
    on_lost: list[Callable[[str], None]] = field(default_factory=list)
    on_renewed: list[Callable[[float], None]] = field(default_factory=list)
    """Called after each renewal with the monotonic time it was sent (the lease then lasts
    its TTL from that moment at least)."""
    renewed: float | None = None
    """When the lease was last known renewed (monotonic), if before :meth:`start`: a lease
    taken over from another holder; else it counts from the start."""
    state: LeaseState = LeaseState.HEALTHY
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start renewing in the background."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, revoke: bool = True) -> None:
        """Stop renewing; revoke the lease (deleting its keys) unless told not to, also when
        the caller is being cancelled (a leader stopped by a cancel: its keys must go at once,
        not when the lease expires, or the next candidate waits out the TTL); a cancel goes on
        after the revoke."""
        try:
            if self._task is not None:
                task, self._task = self._task, None
                await cancel_and_wait(task)  # how its last renewal ended is no one's concern
        finally:
            if revoke and self.state is not LeaseState.LOST:
                try:
                    await self.store.revoke_lease(self.lease.id)
                except StoreError as exc:
                    logger.warning("could not revoke lease %x: %s", self.lease.id, exc)

    async def _run(self) -> None:
        interval = max(self.lease.ttl / 3.0, 0.2)
        last_ok = time.monotonic() if self.renewed is None else self.renewed
        while self.state is not LeaseState.LOST:
            deadline = last_ok + self.lease.ttl - self.margin
            sent = time.monotonic()
            try:
                async with asyncio.timeout(max(deadline - sent, 0.05)):
                    ttl = await self.store.refresh_lease(self.lease.id)
            except (StoreError, TimeoutError) as exc:
                if time.monotonic() >= deadline:
                    window = self.lease.ttl - self.margin
                    cause = str(exc) or ("renewal timed out" if isinstance(
                        exc, asyncio.TimeoutError) else type(exc).__name__)
                    self._declare_lost(f"no renewal for {window:.1f}s ({cause})")
                    return
                self.state = LeaseState.SUSPENDED
                await asyncio.sleep(min(interval, max(deadline - time.monotonic(), 0.05)))
                continue
            if ttl <= 0:
                self._declare_lost("etcd no longer knows the lease")
                return
            last_ok = self.renewed = sent
            self.state = LeaseState.HEALTHY
            for callback in self.on_renewed:
                callback(sent)
            await asyncio.sleep(interval)


class KeptLease(Protocol):
    """A lease kept alive for a holder: :class:`LeaseKeeper`, or the host's lease as one
    executor holds it (``executor/host_lease.py``). ``lease`` is the one to attach keys to
    now; it may change while kept."""

    lease: Lease
    lost: asyncio.Event
    on_lost: list[Callable[[str], None]]

    def start(self) -> None: ...

    async def stop(self, revoke: bool = True) -> None: ...


@dataclass(frozen=True)
class Leadership:
    """Proof of leadership: the leader key exists as the incarnation this candidate created."""

    key: str
    create_revision: int
    lease_id: int

    def guard(self) -> Compare:
        """The compare every leader write must carry, so a deposed leader can write nothing."""
        return key_created_at(self.key, self.create_revision)


async def while_leased(lost: asyncio.Event, call: Callable[[], Awaitable[T]]) -> T:
    """Await ``call()``, trying again while etcd is unreachable, until ``lost`` is set.

    For the writes of a lease holder (the AM, an executor): a restart of etcd or a short network
    cut must not lose a decision or a result while the lease may still be valid; once the holder
    has declared its lease lost, retrying is pointless and the last error is raised. Every such
    write is a guarded transaction of idempotent operations, so applying it twice (when a reply
    was lost) changes nothing more.
    """
    # The first try goes without the retrying machinery, which costs more CPU than the write
    # itself takes a client (tasks completed by the thousand per second).
    try:
        return await call()
    except StoreUnavailableError:
        if lost.is_set():
            raise
    await asyncio.sleep(0.1)  # then 0.2 s, 0.4 s... up to 1 s between tries
    retrying = AsyncRetrying(retry=retry_if_exception_type(StoreUnavailableError),
                             wait=wait_exponential(multiplier=0.2, max=1.0),
                             stop=stop_when_event_set(lost),  # type: ignore[arg-type]
                             reraise=True)
    async for attempt in retrying:
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity re-raises the last error")
