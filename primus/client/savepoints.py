"""The savepoints of an application's data streams, as a client (the CLI, the API server)
asks for, lists and restores them (docs/data.md, "Savepoints").

A savepoint is asked for by writing ``savepoints/<number>`` (``requested``); the application's
AM takes it (``primus/data/savepoints.take``). A new application starts from one by having its
cut written into its own stream keys before its AM starts (:func:`write_restore`). Savepoints
are read from etcd while the application's keys are there, then from the history, which
archives them with the application.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from primus.client.api import AppEndedError, AppNotFoundError
from primus.config.spec import JobSpec
from primus.data.savepoints import (
    Entry,
    SavepointError,
    parse_ref,
    restore_ops,
    restored_spec,
    retention_gaps,
    shape_problems,
    unpack,
)
from primus.history.api import History
from primus.state.keys import AppKeys
from primus.state.records import (
    AppOwner,
    AppStatus,
    Savepoint,
    SavepointState,
    StreamCut,
    decode,
    encode,
)
from primus.state.view import submitted_spec
from primus.store.api import Coordinator, Get, KeyValue, Put, key_exists, key_missing
from primus.store.recipes import key_values

TAKE_TIMEOUT = 60.0
"""Seconds :func:`create` waits for the AM to take a savepoint, by default."""


@dataclass(frozen=True)
class Loaded:
    """A savepoint read whole: its record, its application's owner and each stream's cut."""

    ref: str
    savepoint: Savepoint
    owner: str
    entries: dict[str, list[Entry]]


async def request(store: Coordinator, keys: AppKeys, by: str) -> Savepoint:
    """Ask the application's AM for a savepoint (numbered after the last one); return the
    request.

    Raises:
        AppNotFoundError: no such application in etcd.
        AppEndedError: it has ended.
        SavepointError: it has no data stream.
    """
    while True:
        found = await store.txn([], [Get(keys.status), Get(keys.spec),
                                     Get(keys.savepoints, prefix=True)])
        (status_kvs, spec_kvs, existing) = found.reads
        if not status_kvs or not spec_kvs:
            raise AppNotFoundError(f"no application {keys.app_id!r} in etcd")
        status = decode(AppStatus, status_kvs[0].value)
        if status.state.terminal:
            raise AppEndedError(f"{keys.app_id} has ended ({status.state.value}): a savepoint "
                                f"is taken of a running application")
        if not submitted_spec(keys.app_id, spec_kvs[0].value).data:
            raise SavepointError(f"{keys.app_id} has no data stream to take a savepoint of")
        number = 1 + max((int(kv.key.rsplit("/", 1)[1]) for kv in existing), default=0)
        asked = Savepoint(number=number, by=by, requested=time.time())
        written = await store.txn([key_missing(keys.savepoint(number)),
                                   key_exists(keys.status)],
                                  [Put(keys.savepoint(number), encode(asked))])
        if written.succeeded:
            return asked  # else another request took the number: the next one


async def wait_taken(store: Coordinator, keys: AppKeys, number: int,
                     timeout: float = TAKE_TIMEOUT) -> Savepoint:
    """Savepoint ``number`` once its AM took it (or failed to).

    Raises:
        SavepointError: it was not taken within ``timeout`` seconds (it may be still).
    """
    key = keys.savepoint(number)
    first = True
    try:
        async with asyncio.timeout(timeout), \
                contextlib.aclosing(key_values(store, key)) as values:
            async for value in values:  # its value now, then after each change or resync
                if value is None and first:
                    raise SavepointError(f"savepoint {keys.app_id}/{number} does not exist")
                first = False
                if value is not None:
                    savepoint = decode(Savepoint, value, key)
                    if savepoint.state is not SavepointState.REQUESTED:
                        return savepoint
    except TimeoutError:
        pass
    raise SavepointError(f"savepoint {keys.app_id}/{number} was not taken within {timeout:g}s"
                         f" (is the application's AM running? `primus savepoint list "
                         f"{keys.app_id}` shows when it is)")


async def listed(store: Coordinator, history: History | None, keys: AppKeys
                 ) -> list[Savepoint]:
    """The application's savepoints, oldest first, from etcd or else the history.

    Raises:
        AppNotFoundError: no such application.
    """
    found = await store.txn([], [Get(keys.status), Get(keys.savepoints, prefix=True)])
    status, kvs = found.reads
    if not status:
        archived = await history.get(keys.app_id) if history is not None else None
        if archived is None:
            raise AppNotFoundError(f"no application {keys.app_id!r}")
        kvs = tuple(kv for kv in archived.kvs if kv.key.startswith(keys.savepoints))
    return [decode(Savepoint, kv.value, kv.key) for kv in kvs]


async def load(store: Coordinator, history: History | None, prefix: str, ref: str
               ) -> Loaded:
    """Savepoint ``ref`` (``APP/NUMBER``) read whole, from etcd or else the history.

    Raises:
        SavepointError: it does not exist, was not taken, or does not read.
    """
    app_id, number = parse_ref(ref)
    keys = AppKeys(prefix, app_id)
    reads = await store.txn([], [Get(keys.status), Get(keys.owner), Get(keys.savepoint(number))])
    status_kvs, owner_kvs, savepoint_kvs = reads.reads
    kvs: list[KeyValue] = [*status_kvs, *owner_kvs, *savepoint_kvs]
    if status_kvs and savepoint_kvs:  # its chunks, which do not change once written
        streams = decode(Savepoint, savepoint_kvs[0].value).streams
        chunk_reads = await store.txn([], [Get(keys.stream(cut.name).savepoint(number),
                                               prefix=True) for cut in streams])
        kvs += [kv for read in chunk_reads.reads for kv in read]
    if not status_kvs and history is not None:
        archived = await history.get(app_id)
        kvs = list(archived.kvs) if archived is not None else []
    by_key = {kv.key: kv for kv in kvs}
    if keys.status not in by_key:
        raise SavepointError(f"savepoint {ref}: there is no application {app_id!r}")
    if keys.savepoint(number) not in by_key:
        raise SavepointError(f"savepoint {ref}: {app_id} has no savepoint {number} (`primus "
                             f"savepoint list {app_id}`)")
    savepoint = decode(Savepoint, by_key[keys.savepoint(number)].value)
    if savepoint.state is not SavepointState.TAKEN:
        raise SavepointError(f"savepoint {ref} was not taken ({savepoint.state.value}"
                             f"{': ' + savepoint.error if savepoint.error else ''})")
    entries = {}
    for cut in savepoint.streams:
        stream_prefix = keys.stream(cut.name).savepoint(number)
        chunks = sorted((kv.key, kv.value) for kv in kvs if kv.key.startswith(stream_prefix))
        if len(chunks) != cut.chunks:
            raise SavepointError(f"savepoint {ref}: stream {cut.name} has {len(chunks)} of its "
                                 f"{cut.chunks} chunks")
        entries[cut.name] = unpack(value for _, value in chunks)
    # Whose it is, from the server's record: the application's own status could say anyone.
    # One recorded before that record existed is nobody's, and restores for nobody.
    owner = decode(AppOwner, by_key[keys.owner].value, keys.owner).user \
        if keys.owner in by_key else ""
    return Loaded(ref, savepoint, owner, entries)


def restore_spec(spec: JobSpec, loaded: Loaded, user: str) -> JobSpec:
    """``spec`` as it starts from the savepoint (its streams' sources the savepoint's).

    Raises:
        SavepointError: the savepoint is another user's, or of another shape than the job's
            streams (naming each field and what the savepoint has).
    """
    if loaded.owner != user:
        raise SavepointError(f"savepoint {loaded.ref} is of an application of {loaded.owner}, "
                             f"not of {user}")
    problems = shape_problems(spec, loaded.savepoint, loaded.ref)
    if problems:
        raise SavepointError("the job cannot start from savepoint " + loaded.ref + ": " +
                             "; ".join(f"{field} {problem}" for field, problem in problems))
    gaps = [f"data stream {cut.name}: {gap}" for cut in loaded.savepoint.streams
            for gap in _gaps(cut, loaded)]
    if gaps:
        raise SavepointError(f"the job cannot start from savepoint {loaded.ref}: what is left "
                             f"to read after its cut is no longer all there: " + "; ".join(gaps))
    return restored_spec(spec, loaded.savepoint)


def _gaps(cut: StreamCut, loaded: Loaded) -> list[str]:
    """:func:`~primus.data.savepoints.retention_gaps` of a stream of the savepoint; a Kafka
    cluster that cannot be reached is a reason too."""
    from primus.data.kafka import KafkaSourceError  # noqa: PLC0415 - Kafka streams only

    try:
        return retention_gaps(cut, loaded.entries.get(cut.name, []))
    except KafkaSourceError as exc:
        return [exc.reason]


async def write_restore(store: Coordinator, keys: AppKeys, loaded: Loaded) -> None:
    """Write the savepoint's cut of every stream into the application (before its AM starts:
    it then reads its streams as the savepoint's AM had left them)."""
    for cut in loaded.savepoint.streams:
        for ops in restore_ops(keys.stream(cut.name), cut, loaded.entries[cut.name]):
            await store.txn([], ops)
