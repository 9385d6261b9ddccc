"""The history in an SQL database, through SQLAlchemy Core: SQLite (the default, one file under
``$PRIMUS_HOME/history``) or PostgreSQL (``postgresql+psycopg://`` URL).

One table, ``primus_apps``: one row per application of a deployment (key: prefix and id), its
status in indexed columns that the queries filter and sort on, and its keys as JSON text (values
base64). SQLAlchemy's engine is synchronous: each call runs in a worker thread
(:func:`asyncio.to_thread`). Library errors become :class:`HistoryUnavailableError` here, naming
the database by its URL without a password.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    create_engine,
    event,
    func,
    or_,
    select,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.sql.elements import ColumnElement

from primus.config.site import Settings
from primus.history.api import (
    AppQuery,
    ArchivedApp,
    ArchivedSummary,
    History,
    HistoryError,
    HistoryUnavailableError,
)
from primus.state.records import AppStatus, decode
from primus.state.states import AppState
from primus.store.api import KeyValue

logger = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT = 5.0
"""Seconds a SQLite write waits for another writer's lock before it fails."""
CONNECT_TIMEOUT = 5
"""Seconds a PostgreSQL connection may take."""
_SCHEMES = ("sqlite", "postgresql+psycopg")

metadata = MetaData()
apps = Table(
    "primus_apps", metadata,
    Column("prefix", String(255), primary_key=True),
    Column("app_id", String(255), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("user", String(255), nullable=False),
    Column("queue", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("submit_time", Float, nullable=False),
    Column("start_time", Float),
    Column("finish_time", Float),
    Column("exit_code", Integer),
    Column("diagnosis", Text, nullable=False),
    Column("progress", Float),
    Column("status", Text, nullable=False),
    Column("archived_revision", BigInteger, nullable=False),
    Column("status_revision", BigInteger, nullable=False),
    Column("kvs", Text, nullable=False),
    Index("primus_apps_submitted", "prefix", "submit_time", "app_id"),
    Index("primus_apps_state", "prefix", "state", "submit_time"),
    Index("primus_apps_user", "prefix", "user", "submit_time"),
    Index("primus_apps_queue", "prefix", "queue", "submit_time"),
    Index("primus_apps_finished", "prefix", "finish_time"),
)


def history_url(url: str) -> URL:
    """``url`` parsed; ``postgresql://`` means ``postgresql+psycopg://`` (the driver Primus
    depends on).

    Raises:
        HistoryError: it is no URL of a database Primus can use.
    """
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as exc:
        raise HistoryError(f"history.url: {url.split('@')[-1]!r} is not a database URL; "
                           f"allowed: sqlite:///PATH or postgresql+psycopg://...") from exc
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername not in _SCHEMES:
        raise HistoryError(f"history.url: scheme {parsed.drivername!r} is not supported; "
                           f"allowed: sqlite:///PATH or postgresql+psycopg://...")
    return parsed


def shown_url(url: URL) -> str:
    """The URL to name in messages and logs: without its password."""
    return url.render_as_string(hide_password=True)


def _encode_kvs(kvs: Sequence[KeyValue]) -> str:
    return json.dumps([[kv.key, base64.b64encode(kv.value).decode(), kv.create_revision,
                        kv.mod_revision, kv.version, kv.lease] for kv in kvs],
                      separators=(",", ":"))


def _decode_kvs(text: str) -> tuple[KeyValue, ...]:
    return tuple(KeyValue(key, base64.b64decode(value), create, mod, version, lease)
                 for key, value, create, mod, version, lease in json.loads(text))


class SqlHistory(History):
    """The history of the deployment ``prefix`` in the database at ``url``.

    The table is created on first use. Several processes (servers, commands) may use one
    database at once: an archive is an upsert, a prune a plain delete.

    Args:
        url: ``sqlite:///PATH`` (the file is created 0600 when its directory exists) or
            ``postgresql+psycopg://USER:PASSWORD@HOST/DB``.
        prefix: The deployment whose applications this history holds.
        busy_timeout: SQLite: seconds a write waits for another's lock.

    Raises:
        HistoryError: ``url`` is no URL of a supported database.
    """

    def __init__(self, url: str, prefix: str, busy_timeout: float = BUSY_TIMEOUT) -> None:
        self.url = history_url(url)
        self.prefix = prefix
        self.name = shown_url(self.url)
        self._sqlite = self.url.drivername == "sqlite"
        options: dict[str, Any] = {}
        if self._sqlite:
            options["connect_args"] = {"check_same_thread": False, "timeout": busy_timeout}
        else:
            options["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT}
            options["pool_pre_ping"] = True
        self._engine: Engine = create_engine(self.url, **options)
        if self._sqlite:
            event.listen(self._engine, "connect", _sqlite_pragmas(busy_timeout))
        self._ready = False
        self._lock = threading.Lock()

    def _prepare(self) -> None:
        """Create the SQLite file (0600) and the table, once."""
        with self._lock:
            if self._ready:
                return
            database = self.url.database or ""
            if self._sqlite and database and database != ":memory:" and \
                    not self.url.query.get("mode") and not os.path.exists(database):
                directory = Path(database).parent
                if not directory.is_dir():
                    raise HistoryUnavailableError(
                        f"history database {self.name}: its directory {directory} does not "
                        f"exist; create it, or set history.url in the site settings")
                os.close(os.open(database, os.O_CREAT | os.O_WRONLY, 0o600))
            try:
                metadata.create_all(self._engine, checkfirst=True)
            except sa_exc.DatabaseError:
                # Another process (a second server, a command) created the table between the
                # check and the create: checking again finds it; any other error comes back.
                metadata.create_all(self._engine, checkfirst=True)
            self._ready = True

    def _call(self, what: str, body: Callable[[Connection], T]) -> T:
        try:
            self._prepare()
            with self._engine.begin() as connection:
                return body(connection)
        except sa_exc.SQLAlchemyError as exc:
            raise HistoryUnavailableError(self._explain(what, exc)) from exc

    async def _run(self, what: str, body: Callable[[Connection], T]) -> T:
        return await asyncio.to_thread(self._call, what, body)

    def _explain(self, what: str, exc: sa_exc.SQLAlchemyError) -> str:
        """What went wrong with the database and what to do, without the SQL statement or its
        parameters (they hold the application's keys)."""
        cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
        lowered = cause.lower()
        if "locked" in lowered:
            advice = "another process holds it locked; it is tried again later"
        elif "readonly" in lowered or "read-only" in lowered or "read only" in lowered:
            advice = ("it is read-only: make it writable by this account, or set history.url "
                      "in the site settings to a writable database")
        else:
            advice = ("check history.url in the site settings, and that the database exists, "
                      "is reachable and writable by this account")
        return f"history database {self.name}: cannot {what} ({cause}); {advice}"

    def _mine(self) -> ColumnElement[bool]:
        return apps.c.prefix == self.prefix

    async def archive(self, app: ArchivedApp) -> None:
        row = {"prefix": self.prefix, "app_id": app.app_id, "name": app.name,
               "user": app.user, "queue": app.queue, "state": app.state.value,
               "submit_time": app.submit_time, "start_time": app.start_time,
               "finish_time": app.finish_time, "exit_code": app.exit_code,
               "diagnosis": app.diagnosis, "progress": app.progress,
               "status": app.status_value.decode(),
               "archived_revision": app.archived_revision,
               "status_revision": app.status_revision, "kvs": _encode_kvs(app.kvs)}
        insert = (sqlite.insert if self._sqlite else postgresql.insert)(apps).values(row)
        upsert = insert.on_conflict_do_update(
            index_elements=[apps.c.prefix, apps.c.app_id],
            set_={name: insert.excluded[name] for name in row
                  if name not in ("prefix", "app_id")})
        await self._run(f"archive {app.app_id}", lambda c: c.execute(upsert))

    async def get(self, app_id: str) -> ArchivedApp | None:
        query = select(apps).where(self._mine(), apps.c.app_id == app_id)
        row = await self._run(f"read {app_id}", lambda c: c.execute(query).first())
        return None if row is None else _archived(row._mapping)

    async def query(self, query: AppQuery) -> tuple[list[ArchivedSummary], int]:
        where = [self._mine()]
        if query.state is not None:
            where.append(apps.c.state == query.state.value)
        if query.user:
            where.append(apps.c.user == query.user)
        if query.queue:
            where.append(apps.c.queue == query.queue)
        if query.name:
            where.append(apps.c.name.icontains(query.name, autoescape=True))
        if query.newer_than is not None:
            submitted, app_id = query.newer_than
            where.append(or_(apps.c.submit_time > submitted,
                             and_(apps.c.submit_time == submitted, apps.c.app_id > app_id)))
        # The columns a list shows, not the keys: decoding those would cost most of a page.
        page = (select(apps.c.status, apps.c.queue, apps.c.progress).where(*where)
                .order_by(apps.c.submit_time.desc(), apps.c.app_id.desc())
                .offset(query.offset).limit(query.limit))
        count = select(func.count()).select_from(apps).where(*where)

        def read(connection: Connection) -> tuple[list[ArchivedSummary], int]:
            rows = [ArchivedSummary(decode(AppStatus, row.status.encode()), row.queue,
                                    row.progress) for row in connection.execute(page)]
            return rows, int(connection.execute(count).scalar_one())
        return await self._run("list applications", read)

    async def status_revisions(self, app_ids: Iterable[str]) -> dict[str, int]:
        wanted = list(app_ids)
        found: dict[str, int] = {}

        def read(connection: Connection) -> dict[str, int]:
            for start in range(0, len(wanted), 500):  # bound the statement's parameters
                query = select(apps.c.app_id, apps.c.status_revision).where(
                    self._mine(), apps.c.app_id.in_(wanted[start:start + 500]))
                found.update({row.app_id: row.status_revision
                              for row in connection.execute(query)})
            return found
        return await self._run("look applications up", read) if wanted else found

    async def prune(self, before: float) -> int:
        delete = apps.delete().where(
            self._mine(), func.coalesce(apps.c.finish_time, apps.c.submit_time) < before)
        return await self._run("prune", lambda c: c.execute(delete).rowcount)

    async def close(self) -> None:
        await asyncio.to_thread(self._engine.dispose)


def open_history(settings: Settings, busy_timeout: float = BUSY_TIMEOUT) -> SqlHistory:
    """The history of the deployment ``settings`` name: at ``history.url``, else in the SQLite
    file under ``$PRIMUS_HOME/history`` (the directory created 0700).

    Raises:
        HistoryError: ``history.url`` is no URL of a supported database.
        HistoryUnavailableError: the default directory cannot be created.
    """
    if settings.history_url:
        return SqlHistory(settings.history_url, settings.prefix, busy_timeout)
    file = settings.default_history_file
    try:
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise HistoryUnavailableError(f"history database sqlite:///{file}: cannot create "
                                      f"{file.parent} ({exc.strerror}); make $PRIMUS_HOME "
                                      f"writable, or set history.url in the site "
                                      f"settings") from exc
    return SqlHistory(f"sqlite:///{file}", settings.prefix, busy_timeout)


def server_history(settings: Settings) -> SqlHistory | None:
    """The history a server archives to and reads from: :func:`open_history`, or ``None``
    (logged) when it cannot be opened; the server then serves etcd's applications alone."""
    try:
        return open_history(settings)
    except HistoryError as exc:
        logger.error("history: %s; serving without it (nothing is archived, and no keys "
                     "are deleted from etcd)", exc)
        return None


def _sqlite_pragmas(busy_timeout: float) -> Callable[[Any, Any], None]:
    """Set on every new SQLite connection: WAL (readers do not wait for the writer) and the
    busy timeout."""
    def on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
        finally:
            cursor.close()
    return on_connect


def _archived(row: Any) -> ArchivedApp:
    return ArchivedApp(app_id=row["app_id"], name=row["name"], user=row["user"],
                       queue=row["queue"], state=AppState(row["state"]),
                       submit_time=row["submit_time"], start_time=row["start_time"],
                       finish_time=row["finish_time"], exit_code=row["exit_code"],
                       diagnosis=row["diagnosis"],
                       archived_revision=row["archived_revision"], kvs=_decode_kvs(row["kvs"]),
                       progress=row["progress"])
