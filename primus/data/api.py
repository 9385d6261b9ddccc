"""The contracts of Primus's data side, each with its registry where it has one.

- **Record formats** (:class:`RecordFormat`): how records lie in a file, found by the name a
  stream's ``format`` gives (:func:`get_format`): the built-in ones, which ``formats.py``
  registers when it is imported (this module imports none of its implementations: whoever
  looks formats up imports ``formats.py`` first), and any an installed package offers through
  the entry point group :data:`ENTRY_POINT_GROUP` (Primus's own ``parquet`` is offered that
  way). ``tests/unit/test_format_contract.py`` runs the
  contract against every format Primus registers.
- **Task sources** (:class:`TaskSource`): where a feeder gets its tasks and records their
  progress: an executor's board in etcd (``tasks.py``), or a list in the benchmarks.
- **Table formats** (:class:`TableFormat`): how a table's version and data files are read;
  the registry is ``tables.TABLE_FORMATS``.
"""

from __future__ import annotations

import abc
import importlib.metadata
import io
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from primus.errors import PrimusError

if TYPE_CHECKING:
    from primus.config.spec import StreamSpec, TableSpec
    from primus.state.records import DataTask

DEFAULT_BLOCK_SIZE = 1 << 20
"""Bytes read at a time; blocks hold about this much, unless a single record is larger."""


class DataError(PrimusError):
    """Base of errors from reading training data."""


class UnknownFormatError(DataError):
    """A record format name that is not registered."""

    def __init__(self, name: str, registered: Iterable[str]) -> None:
        super().__init__(f"unknown record format {name!r}; registered formats: "
                         f"{', '.join(sorted(registered))}")
        self.name = name


class CorruptRecordError(DataError):
    """A record is damaged: a checksum does not match, or the file ends inside it.

    Attributes:
        path: the file.
        offset: the byte where the damaged record (or record header) starts.
        what: what is wrong, naming the offset.
    """

    def __init__(self, path: str, offset: int, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path
        self.offset = offset
        self.what = what


@dataclass(frozen=True, slots=True)
class Block:
    """Consecutive whole records of a file.

    Attributes:
        data: the records as stored in the file, framing included.
        records: how many records ``data`` holds.
        end_offset: the file offset just after the last record: a record boundary, and the
            checkpoint from which reading resumes.
    """

    data: bytes | memoryview
    records: int
    end_offset: int


class RecordFormat(abc.ABC):
    """How records are laid out in a file: where they start, and how they are checked.

    Subclasses define :attr:`name`, :meth:`align` and :meth:`_blocks_from`; formats are
    stateless, so one instance serves every reader.
    """

    name: ClassVar[str]
    columnar: ClassVar[bool] = False
    """Whether the format has columns a stream's ``columns`` can project."""
    arrow_blocks: ClassVar[bool] = False
    """Whether each block is an Arrow IPC stream of record batches (Parquet, Arrow, Kafka): its
    records are the batches' rows."""
    reads_files: ClassVar[bool] = True
    """Whether the format's tasks are byte ranges of files, read with :meth:`blocks` (and kept
    to the file formats' contract, ``tests/unit/test_format_contract.py``); else it reads its
    tasks itself (:meth:`open_task`: Kafka's offset ranges)."""
    transparent: ClassVar[bool] = True
    """Whether a block's data are the file's bytes as stored (its records' sizes add up to
    offsets in the file), so that a position inside a block is one in the file."""

    def for_stream(self, stream: StreamSpec) -> RecordFormat:
        """The format as ``stream`` reads it (its options applied, such as ``columns``)."""
        return self

    def for_task(self, task: DataTask) -> RecordFormat:
        """The format as it reads ``task``'s file (a table's partition columns added)."""
        return self

    def records_of(self, data: bytes) -> list[bytes]:
        """The records of a block, each as stored (framing included), so that they can be
        written in another order (a stream's ``shuffle_buffer``, :mod:`primus.data.shuffle`).

        Raises:
            NotImplementedError: the format cannot tell its records apart (``bytes``); a
                ``shuffle_buffer`` is refused at submit for it.
        """
        raise NotImplementedError(f"format {self.name} cannot tell its records apart")

    @property
    def shuffles(self) -> bool:
        """Whether a ``shuffle_buffer`` can shuffle the format's records: it tells them apart
        (:meth:`records_of`), or they are the rows of Arrow batches (:attr:`arrow_blocks`)."""
        return self.arrow_blocks or type(self).records_of is not RecordFormat.records_of

    def least_chunk(self, f: IO[bytes]) -> tuple[int, str] | None:
        """The fewest bytes a task of ``f`` must span to hold anything, and what the format
        reads whole (``"row group"``), where that is more than a record; ``None``: a range of
        any size starts at a record. A stream's ``chunk_size`` below it is refused at submit:
        most of its tasks would be empty."""
        return None

    def prepare(self, claim: Claim) -> None:
        """``claim``'s task is next but one: a format that reads its tasks itself may start
        connecting to where it reads it (Kafka's consumer of its partition), so that reading
        it begins without a wait. Must not block; a file format does nothing."""
        return None

    def unprepare(self, claim: Claim) -> None:
        """``claim``'s task will not be read here after all (given back unread, or the feeder
        stops): drop what :meth:`prepare` made for it. Blocking (a connection is closed):
        called from a thread."""
        return None

    def open_task(self, claim: Claim, block_size: int) -> TaskBlocks | None:
        """A reader of ``claim``'s task for a format that reads its tasks itself (Kafka's
        partitions); ``None``: a file format, whose task's file the feeder reads with
        :meth:`blocks`."""
        return None

    def blocks(self, f: IO[bytes], start: int, end: int, block_size: int = DEFAULT_BLOCK_SIZE,
               *, aligned: bool = False) -> Iterator[Block]:
        """The records that start in ``[start, end)`` of ``f``, in blocks of about ``block_size``.

        Every block ends on a record boundary; the last record may extend beyond ``end``.

        Args:
            f: a seekable binary file; its position is moved.
            start: where the range begins. Unless it is 0 or ``aligned`` is set, reading begins
                at the first record boundary at or after it (:meth:`align`).
            end: where the range ends; records starting at or after it belong to the next range.
            block_size: bytes read at a time.
            aligned: ``start`` is known to be a record boundary (the ``end_offset`` of an
                earlier block, when resuming), so it is not searched for. This matters for
                formats whose boundaries can only be recognised by their checksums: searching
                from a damaged record would pass over it, where reading from it reports it.

        Raises:
            CorruptRecordError: a record in the range, or the one just after it, is damaged.
        """
        if block_size < 1:
            raise ValueError(f"block_size must be a positive number of bytes, got {block_size}")
        pos = start if aligned or start == 0 else self.align(f, start)
        yield from self._blocks_from(f, pos, end, block_size)

    @abc.abstractmethod
    def align(self, f: IO[bytes], offset: int) -> int:
        """The first record boundary at or after ``offset``.

        Returns the end of the file (or ``offset`` if it lies beyond) when no record starts at
        or after ``offset``.
        """

    @abc.abstractmethod
    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        """The blocks of records starting in ``[pos, end)``, ``pos`` being a record boundary."""


def file_path(f: IO[bytes]) -> str:
    """How messages name the file ``f``: its path, else its name."""
    return str(getattr(f, "path", None) or getattr(f, "name", None) or "<stream>")


def file_size(f: IO[bytes]) -> int:
    """The size of the seekable file ``f`` (its position is moved)."""
    f.seek(0, io.SEEK_END)
    return f.tell()



# --- The record formats' registry ----------------------------------------------------------------


FORMATS: dict[str, RecordFormat] = {}
"""Record formats by name: the built-in ones once :mod:`primus.data.formats` is imported, and
those of entry points once looked up."""

ENTRY_POINT_GROUP = "primus.formats"
"""Where installed packages offer more formats: an entry point named after the format, pointing
at a :class:`RecordFormat` subclass (or instance). Every process that reads the format (the
submitting host checks the name, executors read with it) finds it there once the package is
installed, with nothing to import by hand."""


def register(fmt: RecordFormat) -> RecordFormat:
    """Make ``fmt`` available under its name; returns it."""
    if fmt.name in FORMATS:
        raise ValueError(f"a record format named {fmt.name!r} is already registered")
    FORMATS[fmt.name] = fmt
    return fmt


def get_format(name: str) -> RecordFormat:
    """The record format registered as ``name`` (the built-in ones are, once
    :mod:`primus.data.formats` is imported), or offered as ``name`` by an entry point.

    Raises:
        UnknownFormatError: no format has that name; the message lists those that do.
    """
    if name not in FORMATS:
        _load_entry_point(name)
    try:
        return FORMATS[name]
    except KeyError:
        offered = {ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
        raise UnknownFormatError(name, {*FORMATS, *offered}) from None


def _load_entry_point(name: str) -> None:
    """Register the format an installed package offers as ``name``, if one does.

    Raises:
        DataError: the entry point cannot be loaded or is not a record format of that name.
    """
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            offered = ep.load()
            fmt = offered() if isinstance(offered, type) else offered
        except Exception as exc:
            raise DataError(f"record format {name!r} from entry point {ep.value!r} cannot be "
                            f"loaded: {exc}") from exc
        if not isinstance(fmt, RecordFormat) or fmt.name != name:
            raise DataError(f"entry point {ep.value!r} (group {ENTRY_POINT_GROUP}) offers "
                            f"{fmt!r} as record format {name!r}: expected a RecordFormat "
                            f"named {name!r}")
        register(fmt)
        return


# --- Task sources ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A task claimed from a :class:`TaskSource`, and where its reading resumes.

    Attributes:
        task: the task (file, byte range).
        offset: where to resume: a record boundary; ``task.start`` when nothing was read yet.
        records: records delivered before ``offset`` (by earlier attempts).
        bytes: bytes delivered before ``offset``.
    """

    task: DataTask
    offset: int
    records: int = 0
    bytes: int = 0


class TaskBlocks(Protocol):
    """The blocks of one claimed task, read by a format that reads its tasks itself
    (:meth:`RecordFormat.open_task`); blocking: called from the feeder's thread."""

    error: str | None
    """Why reading failed, once :meth:`next` returned ``None`` for it."""

    def next(self) -> Block | None:
        """The next block; ``None`` at the end of the task, or when reading failed."""

    def close(self) -> None:
        """Release what reading held (a connection)."""


class TaskSource(Protocol):
    """Where a feeder gets its tasks, and where it records their progress.

    ``records`` and ``nbytes`` always count the whole task, earlier attempts included (they
    start from :attr:`Claim.records` and :attr:`Claim.bytes`).
    """

    async def next(self) -> Claim | None:
        """Claim the next task, waiting while there is none; ``None`` once the stream ended."""

    async def checkpoint(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        """Record that the trainer has consumed the task up to ``offset``, a record boundary."""

    async def complete(self, claim: Claim, records: int, nbytes: int) -> None:
        """The trainer has consumed every record of the task."""

    async def fail(self, claim: Claim, error: str) -> None:
        """Reading the task failed (a corrupt record, an unreadable file); ``error`` says why.
        The records before the failure were consumed and checkpointed."""

    async def release(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        """Give the task back, to be resumed at ``offset`` (the trainer consumed up to it)."""


# --- Table formats --------------------------------------------------------------------------------


Terms = Sequence[Sequence[Any]]
"""A stream's ``filter``: terms (column, op, value), all of which a row must satisfy."""


class TableFile(NamedTuple):
    """A table's data file: where it is, its size, and the columns its rows have that the
    file does not hold (a Delta table's partition columns): ``(name, Arrow type, value)``,
    the value as JSON has it (a date as ISO text) and the type as ``str(pyarrow type)``."""

    path: str
    size: int
    constants: tuple[tuple[str, str, Any], ...] = ()


class TableFormat(Protocol):
    def pinned(self, table: TableSpec, base_dir: Path) -> int:
        """The version the table is read at: the one it names (checked), else the latest."""

    def files(self, table: TableSpec, filters: Terms, base_dir: Path) -> list[TableFile]:
        """The data files of the pinned version that ``filters`` may match."""
