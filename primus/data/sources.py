"""From a stream's sources to the ordered tasks of an epoch.

A source is a glob pattern, read through fsspec, optionally over time partitions
(``{{YYYY}}{{MM}}{{DD}}{{HH}}`` from ``start`` to ``end``) that may have to carry a success marker
before they are read. :func:`scan_stream` lists the files, partition after partition in time
order and each partition in path order, so that every scan of the same data gives the same
list; :func:`file_ranges` cuts the files into byte ranges and :func:`shuffled` orders an
epoch's tasks, shuffled from the seed and the epoch. :func:`check_sources` is the quick check
``primus submit`` runs before anything is launched, :func:`count_source_files` the one of a
source added to a running stream.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import fsspec
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from primus.config.loader import SpecError, SpecProblem
from primus.config.spec import PARTITION_FIELDS, SourceSpec, StreamSpec
from primus.data.api import DataError, UnknownFormatError, get_format
from primus.data.formats import split_ranges
from primus.data.kafka import URL_SCHEME, partition_url
from primus.state.records import DataTask

logger = logging.getLogger(__name__)

MARKER_POLL_INTERVAL = 1.0
"""Seconds between two looks for a partition's success marker."""

_GLOB_CHARS = frozenset("*?[")


T = TypeVar("T")
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class DataSourceError(DataError):
    """A stream's source cannot be read: its pattern matches no file, it cannot be listed, or a
    partition's success marker did not appear in time. The message names the stream (or the
    spec field) and the source path.

    Attributes:
        reason: What is wrong, without naming the source; empty when only the message says.
    """

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


def _source_error(where: str, reason: str) -> DataSourceError:
    """The error ``reason`` about the source ``where`` names."""
    return DataSourceError(f"{where}: {reason}", reason)


@dataclass(frozen=True)
class SourceProblem:
    """Something :func:`check_sources` refuses: the job's field (``data[0].sources[1].path``),
    its value, and why."""

    field: str
    value: str
    why: str


@dataclass(frozen=True, slots=True)
class DataFile:
    """One file to read.

    Attributes:
        path: the file as fsspec opens it: an absolute path for a local file, else a URL.
        size: its size in bytes when it was listed.
        partition: label of its time partition (such as ``"2026112203"``), empty for a source
            without time fields.
    """

    path: str
    size: int
    partition: str = ""
    constants: tuple[tuple[str, str, Any], ...] = ()
    """A table's file: the columns its rows have that it does not hold."""
    start: int = 0
    """Where reading begins: 0 for a file; a Kafka partition's first offset to read (its
    ``size`` is then the offset where reading ends)."""
    step: int | None = None
    """A Kafka partition's offsets per task (``None``: one task, or the stream's
    ``chunk_size`` for a file)."""


def expand_partitions(source: SourceSpec) -> list[tuple[str, str]]:
    """The time partitions of ``source``, in time order, as (label, glob pattern) pairs.

    The pattern steps from ``start`` to ``end`` inclusive by the finest time field the path
    uses: an hour if it has ``{{HH}}``, else a day, a month or a year; ``start`` and ``end`` are
    first truncated to that step. The label holds the values of every field from the year down
    to the finest one used (``"2026112203"`` for an hourly path), so labels sort in time order
    even when the path leaves out coarser fields. A path without time fields is one partition
    with an empty label.

    Raises:
        DataSourceError: the path has time fields but ``start`` or ``end`` is unset.
    """
    path = source.path or ""  # a table's source has none: one partition, all its files
    used = _time_fields(path)
    if not used:
        return [("", path)]
    if source.start is None or source.end is None:
        raise DataSourceError(f"source path {source.path!r} has time fields: set start and end")
    finest = PARTITION_FIELDS.index(used[-1])
    moment, last = _truncate(source.start, finest), _truncate(source.end, finest)
    partitions = []
    while moment <= last:
        values = dict(zip(PARTITION_FIELDS, _field_values(moment), strict=True))
        label = "".join(values[name] for name in PARTITION_FIELDS[:finest + 1])
        pattern = path
        for name in used:
            pattern = pattern.replace("{{" + name + "}}", values[name])
        partitions.append((label, pattern))
        moment = _advance(moment, finest)
    return partitions


def _time_fields(path: str | None) -> list[str]:
    """The time fields in ``path`` (none in a table source's ``None``), coarsest first."""
    return [name for name in PARTITION_FIELDS if "{{" + name + "}}" in (path or "")]


def _field_values(moment: datetime) -> tuple[str, str, str, str]:
    return (f"{moment.year:04d}", f"{moment.month:02d}", f"{moment.day:02d}",
            f"{moment.hour:02d}")


def _truncate(moment: datetime, finest: int) -> datetime:
    """``moment`` at the start of its partition, ``finest`` indexing :data:`PARTITION_FIELDS`."""
    start = moment.replace(minute=0, second=0, microsecond=0)
    if finest < 3:
        start = start.replace(hour=0)
    if finest < 2:
        start = start.replace(day=1)
    if finest < 1:
        start = start.replace(month=1)
    return start


def _advance(moment: datetime, finest: int) -> datetime:
    """The start of the partition after the one starting at ``moment``."""
    if finest == 3:
        return moment + timedelta(hours=1)
    if finest == 2:
        return moment + timedelta(days=1)
    if finest == 1:
        return moment.replace(year=moment.year + moment.month // 12, month=moment.month % 12 + 1)
    return moment.replace(year=moment.year + 1)


async def scan_source(source: SourceSpec, base_dir: Path, *, clock: Clock = time.monotonic,
                      sleep: Sleep = asyncio.sleep, origin: str | None = None,
                      filters: Sequence[Sequence[object]] | None = None
                      ) -> AsyncIterator[list[DataFile]]:
    """The files of ``source``: one list per partition in time order (one list for a source
    without time fields), each sorted by path and possibly empty.

    Directories, the success marker and files whose name (or any directory below the
    pattern's fixed part) starts with ``.`` or ``_`` are left out. With a ``success_marker``,
    a partition is listed only once ``<partition dir>/<marker>`` exists, where the partition
    dir is the pattern's directory up to its first glob character.

    Args:
        source: the source.
        base_dir: the directory relative patterns are taken from.
        clock: seconds, monotonic; injectable for tests.
        sleep: waits between looks for a marker; injectable for tests.
        origin: how messages name the source; default: its path.

    Raises:
        DataSourceError: a partition cannot be listed, or its marker did not appear within
            ``marker_timeout``.
    """
    origin = origin or f"source path {source.path!r}"
    if source.kafka is not None:  # one list: the partitions pinned at submit
        yield _kafka_partitions(source, origin)
        return
    if source.table is not None:  # one list: the table's files at its version
        yield await asyncio.to_thread(_table_files, source, filters, base_dir, origin)
        return
    marker = source.success_marker
    for label, pattern in expand_partitions(source):
        where = f"{origin}, partition {label}" if label else origin
        loc, fs_pattern = await asyncio.to_thread(_filesystem, _resolve(pattern, base_dir),
                                                  where)
        if marker:
            marker_path = f"{_fixed_dir(fs_pattern)}/{marker}"
            await _await_marker(loc, marker_path, source.marker_timeout, where, clock, sleep)
        yield await asyncio.to_thread(_list_files, loc, fs_pattern, label, marker, where)


async def scan_stream(stream: StreamSpec, base_dir: Path, *, clock: Clock = time.monotonic,
                      sleep: Sleep = asyncio.sleep,
                      part: range | None = None) -> AsyncIterator[list[DataFile]]:
    """The files of ``stream``: its sources in the order listed (those indexed by ``part``,
    default all), each as :func:`scan_source` yields it, leaving out empty partitions (every
    list yielded holds files).

    Raises:
        DataSourceError: as :func:`scan_source`, or when a source matches no file at all
            (over all its partitions).
    """
    for j in part if part is not None else range(len(stream.sources)):
        source = stream.sources[j]
        origin = f"data stream {stream.name!r}: sources[{j}]" + (
            f".path {source.path!r}" if source.path is not None else f" ({source.shown})")
        found = False
        async for files in scan_source(source, base_dir, clock=clock, sleep=sleep,
                                       origin=origin, filters=stream.filter):
            if files:
                found = True
                yield files
        if source.kafka is not None:
            continue  # an empty range reads nothing (submit refused a source with none)
        if not found and source.table is not None:
            raise DataSourceError(f"{origin} has no data file" + (
                " whose partition values pass the stream's filter" if stream.filter else ""))
        if not found:
            partitions = expand_partitions(source)
            span = (f" in partitions {partitions[0][0]} to {partitions[-1][0]}"
                    if partitions[0][0] else "")
            raise DataSourceError(f"{origin} matches no file{span}")


@dataclass(frozen=True, slots=True)
class FileRange:
    """A byte range of a file to read: a task before it has an epoch and a number.

    An AM holds a whole epoch of these to shuffle it; they take a tenth of the memory of the
    task records, which are made only as they are written.
    """

    file: DataFile
    start: int
    end: int

    def task(self, epoch: int, seq: int) -> DataTask:
        """The task reading this range; its ``size`` is the size of the whole file."""
        return DataTask(epoch=epoch, seq=seq, path=self.file.path, start=self.start,
                        end=self.end, size=self.file.size, partition=self.file.partition,
                        constants=list(self.file.constants) or None)


def file_ranges(files: Sequence[DataFile], chunk_size: int | None) -> list[FileRange]:
    """The ranges reading ``files`` in order: one per file, or byte ranges of ``chunk_size``
    (:func:`~primus.data.formats.split_ranges`); a Kafka partition's offsets from its
    ``start``, ``step`` at a time (one range without a step; none when it is empty)."""
    return [FileRange(file, start, end) for file in files for start, end in (
        split_ranges(file.size, chunk_size) if not file.path.startswith(URL_SCHEME)
        else _offset_ranges(file))]


def _offset_ranges(file: DataFile) -> list[tuple[int, int]]:
    step = file.step or max(file.size - file.start, 1)
    return [(start, min(start + step, file.size)) for start in range(file.start, file.size, step)]


def _kafka_partitions(source: SourceSpec, origin: str) -> list[DataFile]:
    """A Kafka source's partitions, as pinned at submit, each a "file" of offsets."""
    kafka = source.kafka
    assert kafka is not None
    if kafka.pinned is None:
        raise DataSourceError(f"{origin}: its offsets were not pinned at submit")
    return [DataFile(partition_url(kafka.client, topic, partition), end, start=start,
                     step=kafka.task_size)
            for topic in kafka.topics
            for partition, (start, end) in sorted(kafka.pinned.get(topic, {}).items())]


def make_tasks(files: Sequence[DataFile], chunk_size: int | None, epoch: int,
               first_seq: int) -> list[DataTask]:
    """Tasks reading ``files`` in order (:func:`file_ranges`), numbered from ``first_seq``."""
    return [piece.task(epoch, first_seq + i)
            for i, piece in enumerate(file_ranges(files, chunk_size))]


def shuffled(items: Sequence[T], epoch: int, seed: int) -> list[T]:
    """``items`` in an order that depends only on their number, ``seed`` and ``epoch`` (the
    same in every run and on every host), so a run can be reproduced while each epoch reads in
    a different order."""
    order = list(items)
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def epoch_order(tasks: list[DataTask], epoch: int, shuffle: bool, seed: int) -> list[DataTask]:
    """The tasks of ``epoch`` in reading order, numbered 0, 1, ... in that order: the order
    given, or with ``shuffle`` the order of :func:`shuffled`."""
    order = shuffled(tasks, epoch, seed) if shuffle else tasks
    return [task.model_copy(update={"epoch": epoch, "seq": seq})
            for seq, task in enumerate(order)]


def check_sources(stream: StreamSpec, base_dir: Path, index: int) -> list[SourceProblem]:
    """Problems with the sources of ``stream`` (``data[index]`` of the job) found before launch.

    Each source without time fields must match a file, unless it has a success marker that is
    not there yet (its files may still be on their way). Sources with time fields are not
    listed: their partitions may not exist yet.

    Returns:
        One problem per source refused (``data[0].sources[1].path``).
    """
    problems = []
    for j, source in enumerate(stream.sources):
        if source.kafka is not None:
            continue  # its offsets were resolved when the job was submitted
        if source.path is None:  # a table's source (a source has a path, a table or kafka)
            problems += _check_table(stream, source, base_dir, index, j)
            continue
        if _time_fields(source.path):
            continue
        field = f"data[{index}].sources[{j}].path"
        try:
            files = _ready_files(_resolve(source.path, base_dir), source.success_marker, "",
                                 f"{field}: {source.path!r}")
        except DataSourceError as exc:
            problems.append(SourceProblem(field, source.path, exc.reason))
            continue
        if files == []:
            problems.append(SourceProblem(field, source.path, "matches no file"))
        elif files:
            problems += _chunk_problems(stream, files, index)
    return problems


CHUNK_CHECKED_FILES = 16
"""Files of a stream whose layout :func:`_chunk_problems` reads (their footers, for Parquet)."""


def _chunk_problems(stream: StreamSpec, files: Sequence[DataFile], index: int
                    ) -> list[SourceProblem]:
    """A ``chunk_size`` smaller than what the stream's format reads whole (a Parquet row
    group) in one of the first :data:`CHUNK_CHECKED_FILES` files: most of its tasks would hold
    nothing, and the application would count them as read."""
    if stream.chunk_size is None:
        return []
    try:
        fmt = get_format(stream.format).for_stream(stream)
    except UnknownFormatError:  # the job's check names it
        return []
    for file in files[:CHUNK_CHECKED_FILES]:
        try:
            with fsspec.open(file.path, "rb") as f:
                least = fmt.least_chunk(f)
        except Exception:  # noqa: BLE001 - unreadable here: the executor says so, per task
            logger.debug("%s: its layout could not be read at submit", file.path, exc_info=True)
            continue
        if least is not None and stream.chunk_size < least[0]:
            size, unit = least
            return [SourceProblem(
                f"data[{index}].chunk_size", str(stream.chunk_size),
                f"is smaller than a {unit} of {file.path} ({size:,} bytes): a task reads whole "
                f"{unit}s, those that start in it, so most tasks would read nothing; use a "
                f"chunk_size of at least {size:,} bytes, or unset it (a task per file)")]
    return []


def _check_table(stream: StreamSpec, source: SourceSpec, base_dir: Path, index: int,
                 j: int) -> list[SourceProblem]:
    from primus.data.tables import TableError, pin, table_files  # noqa: PLC0415

    assert source.table is not None
    field = f"data[{index}].sources[{j}]"
    try:
        # Pinned at submit already (preflight), the table is read once here: listing the files
        # of a named version fails as pinning would when the version does not exist.
        table = source.table if source.table.pinned is not None else pin(source.table,
                                                                         base_dir)
        files = table_files(table, stream.filter, base_dir)
        if not files:
            return [SourceProblem(f"{field}.table", source.shown, "has no data file" + (
                " whose partition values pass the stream's filter" if stream.filter else ""))]
    except TableError as exc:
        table = source.table
        if exc.about_pin:
            return [SourceProblem(f"{field}.table.{table.pin_field}", str(table.pinned),
                                  exc.reason)]
        return [SourceProblem(f"{field}.table.{table.location_field}", table.location,
                              exc.reason)]
    return _chunk_problems(stream, [DataFile(file.path, file.size) for file in files], index)


def _table_files(source: SourceSpec, filters: Sequence[Sequence[object]] | None,
                 base_dir: Path, origin: str) -> list[DataFile]:
    from primus.data.tables import TableError, table_files  # noqa: PLC0415

    assert source.table is not None
    try:
        return [DataFile(file.path, file.size, constants=file.constants)
                for file in table_files(source.table, filters, base_dir)]
    except TableError as exc:
        raise _source_error(origin, exc.reason) from exc


def check_streams_here(streams: Sequence[tuple[int, dict]]) -> list[SourceProblem]:
    """:func:`check_sources` of each ``(index, stream)`` (a stream as its JSON form, its paths
    absolute or URLs), on this host: what a launcher's ``check_data`` runs where the files
    are listed."""
    return [problem for index, stream in streams
            for problem in check_sources(StreamSpec.model_validate(stream), Path("/"), index)]


def count_source_files(source: SourceSpec) -> int:
    """How many files ``source`` (a source added to a running stream, its path absolute or a
    URL) matches now; with time fields, over the partitions from ``start`` to ``end`` that
    exist now. A partition (or a source without time fields) whose success marker is not
    there yet counts none: its files may still be on their way.

    Raises:
        SpecError: The source cannot be listed (field ``path`` of source ``source``).
    """
    if source.kafka is not None:
        raise SpecError(SpecProblem("source", "kafka", source.kafka.shown,
                                    "a Kafka source cannot be added to a running stream"))
    if source.table is not None:
        from primus.data.tables import TableError, table_files  # noqa: PLC0415
        try:
            return len(table_files(source.table))
        except TableError as exc:
            raise SpecError(SpecProblem("source", "table", source.table.location,
                                        exc.reason)) from exc
    try:
        return sum(len(_ready_files(_resolve(pattern, Path("/")), source.success_marker,
                                    label, f"source path {source.path!r}") or ())
                   for label, pattern in expand_partitions(source))
    except DataSourceError as exc:
        raise SpecError(SpecProblem("source", "path", source.path,
                                    exc.reason or str(exc))) from exc


def _ready_files(pattern: str, marker: str | None, partition: str,
                 where: str) -> list[DataFile] | None:
    """The files matching ``pattern`` now (:func:`_list_files`), or ``None`` while the success
    ``marker`` is not in its directory."""
    loc, fs_pattern = _filesystem(pattern, where)
    if marker and not _exists(loc, f"{_fixed_dir(fs_pattern)}/{marker}", where):
        return None
    return _list_files(loc, fs_pattern, partition, marker, where)


def _resolve(pattern: str, base_dir: Path) -> str:
    """``pattern`` taken from ``base_dir`` when it is a relative local path."""
    protocol, _ = fsspec.core.split_protocol(pattern)
    if protocol is None and not os.path.isabs(pattern):
        return os.path.join(base_dir, pattern)
    return pattern


@dataclass(frozen=True)
class _Location:
    """The filesystem of a pattern, and how its paths are named so that fsspec opens them from
    any process: ``chain`` is the rest of a chained URL (``"::/data/logs.zip"`` for
    ``zip://*.txt::/data/logs.zip``), empty for a plain one."""

    fs: AbstractFileSystem
    chain: str = ""

    def url(self, fs_path: str) -> str:
        """``fs_path`` as fsspec opens it from anywhere: local paths stay plain paths."""
        if isinstance(self.fs, LocalFileSystem) and not self.chain:
            return fs_path
        return self.fs.unstrip_protocol(fs_path) + self.chain


def _filesystem(pattern: str, where: str) -> tuple[_Location, str]:
    """Where ``pattern`` lives, and the pattern as its filesystem takes it."""
    try:
        fs, fs_pattern = fsspec.core.url_to_fs(pattern)
    except (ImportError, ValueError, OSError) as exc:  # unknown protocol, backend not installed
        raise _source_error(where, f"cannot open {pattern!r}: {exc}") from exc
    _, separator, rest = pattern.partition("::")
    return _Location(fs, separator + rest), fs_pattern


def _fixed_dir(fs_pattern: str) -> str:
    """The directory part of ``fs_pattern`` before its first glob character."""
    magic = next((i for i, char in enumerate(fs_pattern) if char in _GLOB_CHARS),
                 len(fs_pattern))
    return fs_pattern[:magic].rpartition("/")[0]


def _exists(loc: _Location, fs_path: str, where: str) -> bool:
    try:
        return bool(loc.fs.exists(fs_path))
    except OSError as exc:
        raise _source_error(where, f"cannot look for {loc.url(fs_path)!r}: {exc}") from exc


def _list_files(loc: _Location, fs_pattern: str, partition: str, marker: str | None,
                where: str) -> list[DataFile]:
    """The files matching ``fs_pattern``, sorted by path, without the ones to leave out."""
    try:
        found = loc.fs.glob(fs_pattern, detail=True)
    except (OSError, ValueError) as exc:
        raise _source_error(where, f"cannot list {loc.url(fs_pattern)!r}: {exc}") from exc
    root = _fixed_dir(fs_pattern) + "/"
    files = [DataFile(loc.url(name), int(info["size"]), partition)
             for name, info in found.items()
             if info.get("type") != "directory" and not _left_out(name, root, marker)]
    files.sort(key=lambda file: file.path)
    return files


def _left_out(fs_path: str, root: str, marker: str | None) -> bool:
    """Whether a matched file is not data: the marker, or hidden (``.``) or in-progress
    (``_``, as Hadoop's ``_temporary``) in its name or a directory below ``root``."""
    below = fs_path[len(root):] if fs_path.startswith(root) else fs_path.rpartition("/")[2]
    parts = below.split("/")
    return parts[-1] == marker or any(part.startswith((".", "_")) for part in parts)


async def _await_marker(loc: _Location, marker_path: str, timeout: float, where: str,
                        clock: Clock, sleep: Sleep) -> None:
    """Return once ``marker_path`` exists; look every :data:`MARKER_POLL_INTERVAL` seconds.

    Raises:
        DataSourceError: it still does not exist after ``timeout`` seconds.
    """
    deadline = clock() + timeout
    shown = loc.url(marker_path)
    waiting = False
    while not await asyncio.to_thread(_exists, loc, marker_path, where):
        remaining = deadline - clock()
        if remaining <= 0:
            raise _source_error(where, f"success marker {shown!r} did not appear within "
                                       f"marker_timeout {timeout:g} s")
        if not waiting:
            logger.info("%s: waiting up to %g s for success marker %s", where, timeout, shown)
            waiting = True
        await sleep(min(MARKER_POLL_INTERVAL, remaining))
