"""WebDataset tar shards as a record format (``format: webdataset``): samples, as WebDataset's
own loader groups them.

A shard is a tar file whose members are named ``KEY.EXTENSION`` (``train/000017.jpg``,
``train/000017.cls``); the members that follow one another with the same key are one sample
(the key is the path up to the first dot of the file's name). The tar format is read by the
standard library's :mod:`tarfile`, extended headers (long names) included.

**Tasks and positions.** A file is cut into byte ranges like a text file, and a sample belongs
to the range in which its first member's header starts: the members' headers say where each
one ends, so walking them from the start of the file finds every sample's boundary exactly
(no search, no guess). A position is a byte offset, a block is whole samples as stored (tar
bytes: over a pipe the trainer gets a tar stream, which ``tarfile`` or WebDataset's own
``tariterators`` read), and a checkpoint falls between two samples.

**What cannot be checked.** Tar has a checksum for each header and none for the data: a
damaged header fails its task naming the file and the byte, damaged data is delivered as it is.
"""

from __future__ import annotations

import bisect
import io
import os
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, ClassVar

from primus.data.api import Block, CorruptRecordError, RecordFormat, file_path, file_size
from primus.data.reader import SAMPLE_KEY, samples_of


@dataclass
class _Sample:
    """A sample as the walk finds it: where it starts and ends, its key and files."""

    start: int
    end: int
    key: str
    extensions: list[str] = field(default_factory=list)


WALKED_FILES = 16
"""Shards whose sample starts a format keeps (a list of offsets each)."""


class WebDatasetFormat(RecordFormat):
    """Samples of WebDataset tar shards: the members of one key, a record."""

    name: ClassVar[str] = "webdataset"

    def __init__(self) -> None:
        self._walked: dict[tuple[int, ...], list[int]] = {}
        self._lock = threading.Lock()  # the feeders' threads share the registered format

    def align(self, f: IO[bytes], offset: int) -> int:
        """The start of the first sample at or after ``offset``, found by walking the
        members' headers from the start of the file (once per local file and version: the
        starts are kept for the next range of the same shard)."""
        if offset <= 0:
            return 0
        starts = self._starts(f)
        found = bisect.bisect_left(starts, offset)
        return starts[found] if found < len(starts) else max(offset, file_size(f))

    def _starts(self, f: IO[bytes]) -> list[int]:
        """Where each sample of ``f`` starts. A local file's are kept, by device, inode, size
        and time of change (a rewritten shard is walked again); others are walked each time."""
        try:
            found = os.fstat(f.fileno())
            key: tuple[int, ...] | None = (found.st_dev, found.st_ino, found.st_size,
                                           found.st_mtime_ns, found.st_ctime_ns)
        except (AttributeError, OSError, io.UnsupportedOperation):
            key = None
        starts = self._walked.get(key) if key is not None else None
        if starts is None:
            starts = [sample.start for sample in self._samples(f, 0)]
            if key is not None:
                with self._lock:
                    while len(self._walked) >= WALKED_FILES:
                        self._walked.pop(next(iter(self._walked)))
                    self._walked[key] = starts
        return starts

    def records_of(self, data: bytes) -> list[bytes]:
        """Each sample's tar bytes (its files' headers and data, as stored)."""
        records, start = [], 0
        for _, size in samples_of(data):
            records.append(data[start:start + size])
            start += size
        return records

    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        first, last, count = pos, pos, 0
        for sample in self._samples(f, pos):
            if sample.start >= end:
                break
            last, count = sample.end, count + 1
            if last - first >= block_size:
                yield Block(_read(f, first, last), count, last)
                first, count = last, 0
        if count:
            yield Block(_read(f, first, last), count, last)

    def _samples(self, f: IO[bytes], pos: int) -> Iterator[_Sample]:
        """The samples from ``pos`` (a sample's start, or the file's) to the end of the archive;
        each ends where the next begins (members that are no file, such as directories, lie
        in the sample before them)."""
        path = file_path(f)
        if file_size(f) == 0:
            return
        tar = _reader(f, path)
        current: _Sample | None = None
        at = pos
        while True:
            f.seek(at)
            if not f.read(tarfile.BLOCKSIZE).strip(b"\0"):
                break  # the end of the archive (a block of zeros), or of the file
            f.seek(at)
            try:
                member = tarfile.TarInfo.fromtarfile(tar)
            except tarfile.HeaderError as exc:
                raise CorruptRecordError(path, at, f"the tar header at byte {at}: {exc}") from exc
            following = tar.offset  # after its data (and padding)
            if member.isreg():
                key, extension = _key(path, member)
                if current is not None and key == current.key:
                    if extension in current.extensions:
                        raise CorruptRecordError(path, member.offset, (
                            f"member {member.name!r} (byte {member.offset}): sample "
                            f"{key!r} has two files with extension {extension!r}"))
                    current.extensions.append(extension)
                else:
                    if current is not None:
                        current.end = member.offset
                        yield current
                    current = _Sample(member.offset, following, key, [extension])
            if current is not None:
                current.end = following
            at = following
        if current is not None:
            yield current


def _reader(f: IO[bytes], path: str) -> tarfile.TarFile:
    """A tar reader of ``f``, for :meth:`tarfile.TarInfo.fromtarfile` at any member.

    Raises:
        CorruptRecordError: the file does not start as a tar archive.
    """
    f.seek(0)
    try:
        return tarfile.TarFile(fileobj=f, mode="r")  # type: ignore[call-arg]
    except tarfile.TarError as exc:
        raise CorruptRecordError(path, 0, f"not a tar archive: {exc}") from exc


def _key(path: str, member: tarfile.TarInfo) -> tuple[str, str]:
    found = SAMPLE_KEY.match(member.name)
    if found is None:
        raise CorruptRecordError(path, member.offset, (
            f"member {member.name!r} (byte {member.offset}) has no key: a WebDataset "
            f"sample's files are named KEY.EXTENSION"))
    return found.group(1), found.group(2)


def _read(f: IO[bytes], start: int, end: int) -> bytes:
    f.seek(start)
    return f.read(end - start)
