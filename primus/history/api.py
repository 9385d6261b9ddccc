"""The history contract: what is archived of a finished application, and how it is read back.

An application that has ended and whose AM has exited is archived (:class:`ArchivedApp`): its
status, in columns the queries filter and sort on, and every key :func:`~primus.state.view.
read_app_keys` read of it, so that :meth:`~primus.state.view.AppView.from_snapshot` rebuilds the
very view a live read gives. :class:`History` is the store of these records; ``sql_history.py``
implements it with SQLAlchemy (SQLite by default, PostgreSQL by URL).
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterable
from dataclasses import dataclass

from primus.errors import PrimusError
from primus.state.keys import AppKeys
from primus.state.records import AppOwner, AppStatus, decode, owned_status
from primus.state.states import AppState
from primus.state.view import AppView
from primus.store.api import KeyValue, Snapshot

MAX_PAGE = 500
"""The most rows one :class:`AppQuery` asks for."""


def stored_queue(spec: bytes, default: str) -> str:
    """The queue of an application from its stored spec (``apps/<app>/spec``) without decoding
    the whole spec: its ``queue``, else ``default`` (the site's default queue)."""
    try:
        queue = json.loads(spec).get("queue")
    except (ValueError, AttributeError):
        queue = None
    return queue if isinstance(queue, str) and queue else default


class HistoryError(PrimusError):
    """Base of the history store's errors."""


class HistoryUnavailableError(HistoryError):
    """The history database cannot be used (missing, unreachable, read-only, locked); the
    message names the database (its URL without a password) and what to do."""


@dataclass(frozen=True)
class ArchivedApp:
    """One finished application as archived.

    ``kvs`` are the application's keys exactly as :func:`~primus.state.view.read_app_keys`
    read them (full keys, with the deployment prefix); ``archived_revision`` is the etcd
    revision of that read.
    """

    app_id: str
    name: str
    user: str
    queue: str
    state: AppState
    submit_time: float
    start_time: float | None
    finish_time: float | None
    exit_code: int | None
    diagnosis: str
    archived_revision: int
    kvs: tuple[KeyValue, ...]
    progress: float | None = None
    """How far it got when it ended (:meth:`~primus.state.view.AppView.progress`), kept
    beside the keys so that a list of archived applications shows it without decoding them."""

    @classmethod
    def from_snapshot(cls, keys: AppKeys, snapshot: Snapshot, queue: str) -> ArchivedApp:
        """The record of the application ``keys`` names, from its keys read at one revision.

        Raises:
            HistoryError: the snapshot holds no status key of the application.
            UnreadableRecordError: its status does not parse.
        """
        status_kv = next((kv for kv in snapshot.kvs if kv.key == keys.status), None)
        if status_kv is None:
            raise HistoryError(f"{keys.app_id}: no status key {keys.status} to archive")
        owner_kv = next((kv for kv in snapshot.kvs if kv.key == keys.owner), None)
        # The user and times recorded are the server's, not what the application's status says.
        status = owned_status(decode(AppStatus, status_kv.value, keys.status),
                              decode(AppOwner, owner_kv.value, keys.owner) if owner_kv else None)
        has_spec = any(kv.key == keys.spec for kv in snapshot.kvs)
        progress = AppView.from_snapshot(keys, snapshot).progress() if has_spec else None
        return cls(app_id=keys.app_id, name=status.name, user=status.user, queue=queue,
                   state=status.state, submit_time=status.submit_time,
                   start_time=status.start_time, finish_time=status.finish_time,
                   exit_code=status.exit_code, diagnosis=status.diagnosis,
                   archived_revision=snapshot.revision, kvs=tuple(snapshot.kvs),
                   progress=progress)

    @property
    def _status_kv(self) -> KeyValue:
        return next(kv for kv in self.kvs if kv.key.endswith(f"/apps/{self.app_id}/status"))

    @property
    def status_revision(self) -> int:
        """The revision the status key had been last written at when it was archived: its
        keys are deleted after the retention period only if it still is."""
        return self._status_kv.mod_revision

    @property
    def status_value(self) -> bytes:
        """The status key's value as archived (an :class:`AppStatus`)."""
        return self._status_kv.value

    @property
    def snapshot(self) -> Snapshot:
        """The keys as they were read, for :meth:`~primus.state.view.AppView.from_snapshot`."""
        return Snapshot(self.archived_revision, self.kvs)


@dataclass(frozen=True)
class ArchivedSummary:
    """What a list of archived applications shows of one: its status, queue and final
    progress (read without its keys, which only :meth:`History.get` decodes)."""

    status: AppStatus
    queue: str
    progress: float | None

    @property
    def app_id(self) -> str:
        return self.status.app_id


@dataclass(frozen=True)
class AppQuery:
    """Which applications to list: each filter optional (``None`` or empty: any), combined
    with AND; rows ``offset`` to ``offset + limit``, newest submission first.

    Raises:
        HistoryError: ``limit`` is not within 1 to :data:`MAX_PAGE`, or ``offset`` is
            negative.
    """

    state: AppState | None = None
    user: str = ""
    queue: str = ""
    name: str = ""
    """A part of the application's name, in any case."""
    offset: int = 0
    limit: int = 50
    newer_than: tuple[float, str] | None = None
    """Only applications listed before this one (its submit time and id): submitted later,
    or at the same time with a greater id."""

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or \
                not 1 <= self.limit <= MAX_PAGE:
            raise HistoryError(f"limit: got {self.limit!r}; must be an integer >= 1 and "
                               f"<= {MAX_PAGE}")
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise HistoryError(f"offset: got {self.offset!r}; must be an integer >= 0")

    def matches(self, state: AppState, user: str, queue: str, name: str) -> bool:
        """Whether an application with these fields passes the filters."""
        return ((self.state is None or state is self.state)
                and (not self.user or user == self.user)
                and (not self.queue or queue == self.queue)
                and self.name.lower() in name.lower())


class History(abc.ABC):
    """The archive of one deployment's finished applications.

    Every method may raise :class:`HistoryUnavailableError` when the database cannot be used.
    """

    @abc.abstractmethod
    async def archive(self, app: ArchivedApp) -> None:
        """Store ``app``, replacing the row of the same application: archiving twice leaves
        one row (the later)."""

    @abc.abstractmethod
    async def get(self, app_id: str) -> ArchivedApp | None:
        """The archived application, or ``None`` when it is not archived."""

    @abc.abstractmethod
    async def query(self, query: AppQuery) -> tuple[list[ArchivedSummary], int]:
        """The page of archived applications ``query`` asks for, newest submission first
        (ties by id), and how many match it in all."""

    async def contains(self, app_ids: Iterable[str]) -> set[str]:
        """Those of ``app_ids`` that are archived."""
        return set(await self.status_revisions(app_ids))

    @abc.abstractmethod
    async def status_revisions(self, app_ids: Iterable[str]) -> dict[str, int]:
        """For each of ``app_ids`` that is archived, :attr:`ArchivedApp.status_revision`."""

    @abc.abstractmethod
    async def prune(self, before: float) -> int:
        """Delete the applications that finished before ``before`` (seconds since the epoch;
        those that never finished: submitted before it); return how many."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the database's connections."""
