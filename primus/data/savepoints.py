"""Savepoints: a cut of an application's data streams, taken by its AM, from which another
application's streams start (docs/data.md, "Savepoints").

A cut is every stream's task keys read at one etcd revision: the tasks written, which are
done or failed, the checkpoint of each task started and not done, and how far the scan got
(with an unbounded stream's done tasks folded out of etcd: their totals, in the scan).
The tasks being read at that revision are in it at their last checkpoint (their reader goes
on past it): every record before the cut was delivered, and starting from it reads every
record after it, at least once, none twice that came before it. A trainers' savepoint is
taken once each reader wrote where its trainer is (:func:`join`), so its cut is theirs.

Pure functions, but :func:`take` (the AM reads the streams and writes the cut) and
:func:`join` (an executor joins a trainers' savepoint).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from primus.config.spec import JobSpec, SourceSpec, StreamSpec
from primus.errors import PrimusError
from primus.state.keys import AppKeys, StreamKeys
from primus.state.records import (
    DataTask,
    FoldedTasks,
    Record,
    Savepoint,
    SavepointState,
    StreamCut,
    StreamScan,
    TaskDone,
    TaskProgress,
    UnreadableRecordError,
    decode,
    encode,
)
from primus.store.api import Coordinator, Get, Op, Put, key_missing, key_unchanged_since
from primus.store.recipes import key_values

if TYPE_CHECKING:
    from primus.data.tasks import WriteOps

CHUNK_BYTES = 512 * 1024
"""Entries of a cut per chunk, in bytes of JSON before compression (a chunk is one etcd value,
well inside etcd's request limit of 1.5 MiB)."""

CUT_KINDS = ("tasks", "progress", "pending", "owner", "done", "failed")
"""The kinds of task keys a cut reads; an ``owner`` is kept as ``pending`` (its reader is not
the restored application's)."""

OPS_PER_TXN = 120
"""Keys a restore writes per transaction (etcd allows 128 operations)."""

SHAPE_FIELDS = ("format", "chunk_size", "epochs", "shuffle", "seed", "columns", "filter")
"""A stream's settings that decide which tasks it has and what they deliver: a savepoint
starts only a stream with the same."""


class SavepointError(PrimusError):
    """A savepoint cannot be found, read, or used for the job: the message says which and
    why."""


@dataclass(frozen=True)
class Entry:
    """One key of a stream's cut: ``kind`` (one of :data:`CUT_KINDS` but ``owner``), the task,
    and its stored value."""

    kind: str
    task: str
    value: str


def parse_ref(ref: str) -> tuple[str, int]:
    """``(app_id, number)`` of a savepoint named ``APP/NUMBER``.

    Raises:
        SavepointError: ``ref`` is not of that form.
    """
    app_id, _, number = ref.rpartition("/")
    if not app_id or not number.isdigit():
        raise SavepointError(f"savepoint {ref!r}: must be APP/NUMBER, as `primus savepoint "
                             f"list APP` shows")
    return app_id, int(number)


def cut_entries(kvs_by_kind: dict[str, Sequence[tuple[str, bytes]]]) -> list[Entry]:
    """The entries of a stream's cut from its task keys as read (``(key, value)`` by kind):
    a task owned by a reader is pending in the cut."""
    entries = []
    for kind in CUT_KINDS:
        for key, value in kvs_by_kind.get(kind, ()):
            task = key.rsplit("/", 1)[1]
            entries.append(Entry("pending" if kind == "owner" else kind, task,
                                 "" if kind == "owner" else value.decode()))
    return entries


def summarize(stream: StreamSpec, scan: StreamScan, entries: Sequence[Entry]) -> StreamCut:
    """The stream's record in the savepoint, its chunks not counted yet."""
    done = {e.task: decode(TaskDone, e.value.encode()) for e in entries if e.kind == "done"}
    failed = {e.task for e in entries if e.kind == "failed"}
    progress = {e.task: decode(TaskProgress, e.value.encode())
                for e in entries if e.kind == "progress" and e.task not in done}
    reading = {task for task, p in progress.items() if task not in failed and p.records}
    folded = scan.folded or FoldedTasks()  # an unbounded stream's done tasks folded out
    return StreamCut(
        name=stream.name, format=stream.format, sources=list(stream.sources),
        chunk_size=stream.chunk_size, epochs=stream.epochs, shuffle=stream.shuffle,
        seed=stream.seed, columns=stream.columns,
        filter=[tuple(term) for term in stream.filter] if stream.filter else None,
        scan=scan, tasks=sum(1 for e in entries if e.kind == "tasks") + folded.tasks,
        done=len(done) + folded.tasks, failed=len(failed), reading=len(reading),
        records=folded.records + sum(d.records for d in done.values()) +
        sum(progress[task].records for task in reading))


def pack(entries: Iterable[Entry]) -> list[bytes]:
    """The entries as chunks: JSON lines of ``[kind, task, value]``, compressed, each at most
    :data:`CHUNK_BYTES` before compression (one entry more, if one alone is larger)."""
    chunks: list[bytes] = []
    lines: list[bytes] = []
    size = 0
    for entry in entries:
        line = json.dumps([entry.kind, entry.task, entry.value], separators=(",", ":")).encode()
        if lines and size + len(line) > CHUNK_BYTES:
            chunks.append(zlib.compress(b"\n".join(lines)))
            lines, size = [], 0
        lines.append(line)
        size += len(line) + 1
    if lines:
        chunks.append(zlib.compress(b"\n".join(lines)))
    return chunks


_RECORDS: dict[str, type[Record] | None] = {
    "tasks": DataTask, "progress": TaskProgress, "done": TaskDone, "failed": TaskDone,
    "pending": None}
"""The kinds of keys a cut holds, and the record each holds (``pending`` is empty)."""
_TASK_ID = re.compile(r"[0-9]{4,}-[0-9]{8,}")


def unpack(chunks: Iterable[bytes]) -> list[Entry]:
    """The entries of a stream's chunks, in order, each checked: a known kind, a task id,
    the record of its kind (a cut is written into a new application as it is).

    Raises:
        SavepointError: A chunk does not read as one :func:`pack` wrote.
    """
    entries = []
    try:
        for chunk in chunks:
            for line in zlib.decompress(chunk).splitlines():
                kind, task, value = json.loads(line)
                if kind not in _RECORDS or not isinstance(task, str) or \
                        not _TASK_ID.fullmatch(task) or not isinstance(value, str):
                    raise ValueError(f"an entry {kind!r} {task!r} is none of a cut's")
                record = _RECORDS[kind]
                if record is not None:
                    decode(record, value.encode())
                elif value:
                    raise ValueError(f"a pending entry of {task} holds a value")
                entries.append(Entry(kind, task, value))
    except (zlib.error, ValueError, TypeError, UnreadableRecordError) as exc:
        raise SavepointError(f"a chunk of the savepoint does not read: {exc}") from exc
    return entries


async def take(store: Coordinator, keys: AppKeys, streams: Sequence[StreamSpec],
               requested: Savepoint, write: WriteOps) -> Savepoint:
    """Take savepoint ``requested`` of the application's ``streams`` (as they are now, with
    the sources added at run time): read every stream's task keys at one revision, write each
    stream's cut in chunks, then the savepoint, ``taken``; return it. ``write`` is the AM's
    guarded write (``(ops, compares) -> bool``, false once it no longer leads).

    Raises:
        asyncio.CancelledError: The AM no longer leads (a write refused).
    """
    per_stream = 1 + len(CUT_KINDS)
    reads = []
    for stream in streams:
        stream_keys = keys.stream(stream.name)
        reads += [Get(stream_keys.scan),
                  *(Get(stream_keys.prefix(kind), prefix=True) for kind in CUT_KINDS)]
    result = await store.txn([], reads)
    cuts = []
    for i, stream in enumerate(streams):
        scan_kvs, *kinds = result.reads[i * per_stream:(i + 1) * per_stream]
        scan = decode(StreamScan, scan_kvs[0].value) if scan_kvs else StreamScan()
        entries = cut_entries({kind: [(kv.key, kv.value) for kv in kvs]
                               for kind, kvs in zip(CUT_KINDS, kinds, strict=True)})
        chunks = pack(entries)
        stream_keys = keys.stream(stream.name)
        for n, chunk in enumerate(chunks):
            if not await write([Put(chunk_key(stream_keys, requested.number, n), chunk)], []):
                raise asyncio.CancelledError  # no longer leads
        cuts.append(summarize(stream, scan, entries).model_copy(update={"chunks": len(chunks)}))
    taken = requested.model_copy(update={
        "state": SavepointState.TAKEN, "taken": time.time(), "revision": result.revision,
        "streams": cuts})
    if not await write([Put(keys.savepoint(requested.number), encode(taken))], []):
        raise asyncio.CancelledError
    return taken


JOIN_TIMEOUT = 60.0
"""Seconds the AM waits for every reader to join a trainers' savepoint before taking it."""


async def join(store: Coordinator, keys: AppKeys, name: str, reader: str,
               timeout: float = JOIN_TIMEOUT * 2) -> str:
    """For an executor whose trainer asked for savepoint ``name``, once it wrote where the
    trainer is: join the savepoint of that name being asked for (or ask for it), then wait
    until the AM took it; its id (``APP/NUMBER``).

    Raises:
        SavepointError: it failed, or was not taken within ``timeout`` seconds.
    """
    while True:
        found = await store.get_prefix(keys.savepoints)
        named = [(kv, decode(Savepoint, kv.value, kv.key)) for kv in found.kvs]
        mine = next(((kv, sp) for kv, sp in named if name and sp.name == name), None)
        if mine is not None and mine[1].state is not SavepointState.REQUESTED:
            raise SavepointError(
                f"savepoint {name!r} ({keys.app_id}/{mine[1].number}) was taken before this "
                f"reader asked for it: its trainer reached the step more than "
                f"{JOIN_TIMEOUT:g}s after the first; ask again with another name")
        if mine is not None:
            kv, asked = mine
            if reader in asked.readers:
                number = asked.number
                break
            joined = asked.model_copy(update={"readers": [*asked.readers, reader]})
            if (await store.txn([key_unchanged_since(kv.key, kv.mod_revision)],
                                [Put(kv.key, encode(joined))])).succeeded:
                number = asked.number
                break
            continue  # another reader joined meanwhile
        number = 1 + max((sp.number for _, sp in named), default=0)
        asked = Savepoint(number=number, by=reader, name=name, readers=[reader],
                          requested=time.time())
        if (await store.txn([key_missing(keys.savepoint(number))],
                            [Put(keys.savepoint(number), encode(asked))])).succeeded:
            break
    taken = await _wait_taken(store, keys, number, timeout)
    if taken.state is not SavepointState.TAKEN:
        raise SavepointError(f"savepoint {keys.app_id}/{number} failed: {taken.error}")
    return f"{keys.app_id}/{number}"


async def _wait_taken(store: Coordinator, keys: AppKeys, number: int, timeout: float
                      ) -> Savepoint:
    key = keys.savepoint(number)
    try:
        async with asyncio.timeout(timeout), \
                contextlib.aclosing(key_values(store, key)) as values:
            async for value in values:
                if value is not None:
                    found = decode(Savepoint, value, key)
                    if found.state is not SavepointState.REQUESTED:
                        return found
    except TimeoutError:
        pass
    raise SavepointError(f"savepoint {keys.app_id}/{number} was not taken within {timeout:g}s")


def chunk_key(stream_keys: StreamKeys, number: int, chunk: int) -> str:
    return f"{stream_keys.savepoint(number)}{chunk:06d}"


def unpinned(source: SourceSpec) -> SourceSpec:
    """``source`` without its table's version or snapshot, or its Kafka partitions' offsets
    resolved at submit: what a job names of it."""
    if source.kafka is not None and source.kafka.pinned is not None:
        return source.model_copy(update={"kafka": source.kafka.model_copy(
            update={"pinned": None})})
    if source.table is None or source.table.pinned is None:
        return source
    return source.model_copy(update={"table": source.table.model_copy(
        update={source.table.pin_field: None})})


def shape_problems(spec: JobSpec, savepoint: Savepoint, ref: str) -> list[tuple[str, str]]:
    """Why the job's streams cannot start from the savepoint, as ``(field, problem)``: each
    stream must be one the savepoint holds, with its settings (:data:`SHAPE_FIELDS`) and its
    sources (the savepoint's may go on with sources added at run time; a table's version is
    the savepoint's)."""
    problems = []
    cuts = {cut.name: cut for cut in savepoint.streams}
    names = [stream.name for stream in spec.data]
    for index, stream in enumerate(spec.data):
        cut = cuts.get(stream.name)
        if cut is None:
            problems.append((f"data[{index}].name",
                             f"{stream.name!r} is not a stream of savepoint {ref} (it holds "
                             f"{', '.join(sorted(cuts)) or 'none'})"))
            continue
        for name in SHAPE_FIELDS:
            mine, theirs = _comparable(getattr(stream, name)), _comparable(getattr(cut, name))
            if mine != theirs:
                problems.append((f"data[{index}].{name}",
                                 f"is {mine!r}; savepoint {ref} has {theirs!r}"))
        mine_sources = [unpinned(s) for s in stream.sources]
        theirs_sources = [unpinned(s) for s in cut.sources]
        if theirs_sources[:len(mine_sources)] != mine_sources:
            problems.append((f"data[{index}].sources",
                             f"are {', '.join(s.shown for s in stream.sources)}; savepoint "
                             f"{ref} read {', '.join(s.shown for s in cut.sources)}"))
    missing = sorted(set(cuts) - set(names))
    if missing:
        problems.append(("data", f"lacks stream{'s' if len(missing) > 1 else ''} "
                                 f"{', '.join(missing)} of savepoint {ref}"))
    return problems


def _comparable(value: object) -> object:
    """Lists and tuples alike (a filter term is a tuple in the spec, a list once stored)."""
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    return value


def restored_spec(spec: JobSpec, savepoint: Savepoint) -> JobSpec:
    """``spec`` with each stream's sources those of the savepoint (tables at its versions,
    sources added at run time after the job's)."""
    cuts = {cut.name: cut for cut in savepoint.streams}
    return spec.model_copy(update={"data": [
        stream.model_copy(update={"sources": list(cuts[stream.name].sources)})
        for stream in spec.data]})


def restore_ops(stream_keys: StreamKeys, cut: StreamCut, entries: Sequence[Entry]
                ) -> list[list[Op]]:
    """The transactions that write a stream's cut into a new application, its ``scan`` last
    (the stream then reads as its AM had left it, no task owned)."""
    ops: list[Op] = [Put(stream_keys.key(e.kind, e.task), e.value.encode()) for e in entries]
    batches = [ops[i:i + OPS_PER_TXN] for i in range(0, len(ops), OPS_PER_TXN)]
    return [*batches, [Put(stream_keys.scan, encode(cut.scan))]]


FirstOffsets = Callable[[Any, Sequence[tuple[str, int]]], dict[tuple[str, int], int | None]]
"""Each partition's first offset kept now, for a Kafka source's partitions (``None``: the
partition no longer exists): :func:`primus.data.kafka.first_offsets`."""


def retention_gaps(cut: StreamCut, entries: Sequence[Entry],
                   first_offsets: FirstOffsets | None = None) -> list[str]:
    """Why a Kafka stream cannot resume from the savepoint's cut: the offsets a task after the
    cut still has to read (from its checkpoint, or its start), or an unbounded stream's next
    slice, that the partition no longer holds (deleted by retention since), each naming topic,
    partition and the gap. Empty for other streams."""
    from primus.data import kafka  # noqa: PLC0415 - Kafka streams only

    sources = {source.kafka.client: source.kafka for source in cut.sources
               if source.kafka is not None}
    first_offsets = first_offsets or kafka.first_offsets
    if not sources:
        return []
    tasks = {e.task: decode(DataTask, e.value.encode()) for e in entries if e.kind == "tasks"}
    finished = {e.task for e in entries if e.kind in ("done", "failed")}
    resume = {e.task: decode(TaskProgress, e.value.encode()).offset
              for e in entries if e.kind == "progress"}
    needed: dict[str, dict[tuple[str, int], int]] = {}
    for name, task in tasks.items():
        if name not in finished:
            where = kafka.PartitionUrl.parse(task.path)
            at = resume.get(name, task.start)
            partitions = needed.setdefault(where.client, {})
            partitions[where.topic, where.partition] = min(
                partitions.get((where.topic, where.partition), at), at)
    for source in sources.values():
        for topic, parts in (cut.scan.slices or {}).items():
            if topic in source.topics:
                partitions = needed.setdefault(source.client, {})
                for partition, at in parts.items():
                    partitions[topic, partition] = min(partitions.get((topic, partition), at),
                                                       at)
    gaps = []
    for client, partitions in sorted(needed.items()):
        first = first_offsets(sources[client], sorted(partitions))
        for (topic, partition), at in sorted(partitions.items()):
            low = first.get((topic, partition))
            if low is None:
                gaps.append(f"topic {topic!r} partition {partition} no longer exists")
            elif low > at:
                gaps.append(f"topic {topic!r} partition {partition}: offsets {at} to {low} "
                            f"were deleted (retention) since the savepoint's cut")
    return gaps
