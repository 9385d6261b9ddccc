"""Feeding a trainer its records: claimed tasks are read and written into the trainer's pipe.

:func:`feed` writes the records of every task it claims from a :class:`TaskSource` into a pipe
(the trainer's stdin, or a FIFO), in claim order, until the source says the stream has ended;
then it closes the pipe so the trainer sees end-of-file.

Progress counts what the trainer *consumed*, not what was written: bytes still in the pipe
buffer are lost if the trainer dies, so a checkpoint must not count them. Linux reports the
bytes queued in a pipe on either of its ends (``FIONREAD``), so ``written - queued`` is how far
the trainer has read. Every block written leaves a mark (its end in the pipe, the file offset
and record count it reaches); a mark is consumed once the trainer has read past it, and
checkpoints, completions and releases use the last consumed mark. A task is completed once the
trainer has consumed its last block, while later tasks are already being written, so the pipe
does not run dry between tasks (given a ``prefetch`` of at least one).

The work is shared so that the event loop never waits for a file or for the trainer: one
coroutine claims tasks ahead (``prefetch``); a thread of the feeder's own reads the blocks of one
task after the other and writes them into the pipe without blocking (waiting in ``poll`` while
the pipe is full: a trainer that does not read stops the reading, and only the block being
written is held); and one coroutine watches the pipe and reports progress to the source. Only
that one calls the source's ``checkpoint``, ``complete``, ``fail`` and ``release``, so the calls
for a task reach it in order. Reading, checking and writing a block in one thread costs the
least: handing each block from a reading thread to writes in the event loop made feeding a
third slower (GIL hand-overs and wake-ups per block).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import select
import stat
import struct
import termios
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, NamedTuple

import fsspec
from fsspec.implementations.local import LocalFileSystem

from primus.data.api import (
    DEFAULT_BLOCK_SIZE,
    Block,
    Claim,
    CorruptRecordError,
    RecordFormat,
    TaskBlocks,
    TaskSource,
)
from primus.data.preprocess import PreprocessError, Preprocessor
from primus.data.shm import CLOSED, RingWriter
from primus.data.shuffle import Chunk, ShuffleBuffer

logger = logging.getLogger(__name__)

PIPE_SIZE = 1 << 20
"""Pipe buffer the feeder asks for (``F_SETPIPE_SZ``; Linux's default is 64 KiB): the trainer
reads on while the feeder waits for the next block or task. Not an error if refused."""

POLL_INTERVAL = 0.02
"""Seconds between looks at how far the trainer has read."""


@dataclass(frozen=True)
class FeedResult:
    """What one :func:`feed` delivered.

    Attributes:
        tasks: tasks completed.
        failed: tasks whose reading failed.
        released: tasks given back unfinished.
        records: records the trainer consumed (of every task, this call only).
        bytes: bytes the trainer consumed.
        closed_by_trainer: the trainer closed its input before the stream ended.
        elapsed: seconds the call took.
    """

    tasks: int
    failed: int
    released: int
    records: int
    bytes: int
    closed_by_trainer: bool
    elapsed: float


class FeedControl:
    """What the executor may ask of a feeder while it runs (a trainer's savepoint)."""

    def __init__(self) -> None:
        self._feeder: _Feeder | None = None

    async def checkpoint_now(self) -> None:
        """Write where the trainer is now: each task it has read part of checkpointed at
        what it consumed (through shared memory, to the record it asked for last), those it
        consumed whole completed, and every completion written."""
        if self._feeder is not None:
            await self._feeder.checkpoint_now()


async def feed(target: int | RingWriter, source: TaskSource, fmt: RecordFormat, *,
               checkpoint_records: int, checkpoint_interval: float, prefetch: int = 1,
               clock: Callable[[], float] = time.monotonic,
               block_size: int = DEFAULT_BLOCK_SIZE,
               control: FeedControl | None = None,
               preprocess: Preprocessor | None = None,
               shuffle: ShuffleBuffer | None = None) -> FeedResult:
    """Write the records of every task claimed from ``source`` into ``target``: a pipe, or
    the shared-memory ring of ``delivery: shm`` (:mod:`primus.data.shm`).

    Returns once ``source.next()`` returned ``None`` and the trainer consumed everything (the
    pipe is then closed: the trainer sees end-of-file; the ring is marked ended), or once the
    trainer closed its input (the tasks not consumed whole are released where it got to). On
    cancellation, claimed tasks are released where the trainer got to before
    ``CancelledError`` propagates. ``target`` is closed in every case.

    Args:
        target: the write end of a pipe or FIFO whose other end the trainer reads (it is made
            non-blocking), or a ring the trainer reads.
        source: where tasks come from and where progress goes.
        fmt: the record format of the files.
        checkpoint_records: checkpoint a task after the trainer consumed this many more
            records...
        checkpoint_interval: ...or after this many seconds, whichever comes first.
        prefetch: tasks claimed ahead of the one the trainer is reading.
        clock: the time in seconds (for the checkpoint interval and ``elapsed``).
        block_size: bytes read at a time; checkpoints fall on block boundaries.
        control: a handle through which the executor asks for a checkpoint now.
        preprocess: the stream's ``preprocess:`` step, applied to every block before it is
            written (:mod:`primus.data.preprocess`).
        shuffle: the stream's ``shuffle_buffer``: each task's records are written a shuffled
            window at a time, and a task is consumed only as far as its last whole window
            (:mod:`primus.data.shuffle`).

    Raises:
        ValueError: ``target`` is not a pipe, or an argument is out of range.
    """
    try:
        if checkpoint_records < 1 or checkpoint_interval <= 0 or prefetch < 0:
            raise ValueError(f"checkpoint_records must be at least 1 (got {checkpoint_records}), "
                             f"checkpoint_interval positive (got {checkpoint_interval}) and "
                             f"prefetch at least 0 (got {prefetch})")
        sink: _Sink = _RingSink(target) if isinstance(target, RingWriter) else _PipeSink(target)
    except BaseException:
        if isinstance(target, RingWriter):
            target.close()
        else:
            os.close(target)
        raise
    feeder = _Feeder(sink, source, fmt, checkpoint_records, checkpoint_interval, prefetch,
                     clock, block_size, preprocess, shuffle)
    if control is not None:
        control._feeder = feeder
    try:
        return await feeder.run()
    finally:
        if control is not None:
            control._feeder = None


class _Sink:
    """Where the feeder writes blocks (its thread) and how far the trainer consumed them
    (positions in bytes written)."""

    written: int = 0

    def write(self, data: bytes | memoryview, records: int, halt_fd: int,
              halted: Callable[[], bool], mark: Callable[[int], None]) -> bool:
        """Write one block, waiting while there is no room; ``False`` if halted first.
        ``mark`` is told the position after the block before the trainer can have read past
        it.

        Raises:
            BrokenPipeError: the trainer stopped reading.
        """
        raise NotImplementedError

    def consumed(self) -> int:
        raise NotImplementedError

    def taken(self) -> tuple[int, int]:
        """Records and bytes the trainer said it took of the block after :meth:`consumed`
        (shared memory; a pipe cannot tell)."""
        return 0, 0

    def reader_gone(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _PipeSink(_Sink):
    """A pipe: Linux reports the bytes queued in it (``FIONREAD``)."""

    def __init__(self, fd: int) -> None:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise ValueError(f"fd {fd} is not a pipe or FIFO: the feeder needs FIONREAD to know "
                             "what the trainer consumed")
        os.set_blocking(fd, False)
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except OSError as exc:  # EPERM beyond the user's pipe quota (pipe-user-pages-soft)
            logger.info("the trainer's pipe stays at %s bytes (%s): feeding may be slower",
                        fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ), exc.strerror)
        self.fd = fd
        self.poller = select.poll()
        self.poller.register(fd, 0)  # POLLERR alone: the trainer closed its end

    def write(self, data: bytes | memoryview, records: int, halt_fd: int,
              halted: Callable[[], bool], mark: Callable[[int], None]) -> bool:
        # The trainer may read the block's first bytes before it is marked, never past it:
        # marks are applied once it read up to them.
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        poller.register(halt_fd, select.POLLIN)
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                poller.poll()  # writable, closed by the trainer (POLLERR), or halted
                if halted():
                    return False
                continue
            self.written += n
            view = view[n:]
        mark(self.written)
        return True

    def consumed(self) -> int:
        written = self.written  # before the queue: see _Feeder._pump
        return written - _queued(self.fd)

    def reader_gone(self) -> bool:
        return bool(self.poller.poll(0))

    def close(self) -> None:
        os.close(self.fd)


class _RingSink(_Sink):
    """The shared-memory ring: one frame per block; the readers' positions say what they
    consumed."""

    def __init__(self, ring: RingWriter) -> None:
        self.ring = ring

    def write(self, data: bytes | memoryview, records: int, halt_fd: int,
              halted: Callable[[], bool], mark: Callable[[int], None]) -> bool:
        ring = self.ring
        poller = select.poll()
        poller.register(ring.space_bell, select.POLLIN)
        poller.register(halt_fd, select.POLLIN)
        while (taken := ring.room(len(data))) is None:
            if self.reader_gone():
                raise BrokenPipeError("the trainer stopped reading the ring")
            poller.poll()
            if halted():
                return False
            ring.reset_space_bell()
        # Marked before it is published: a trainer in the block has it marked (a savepoint's
        # position inside the block is found from its mark).
        mark(ring.written + taken)
        self.written = ring.put(data, records, taken)
        return True

    def consumed(self) -> int:
        return self.ring.consumed

    def taken(self) -> tuple[int, int]:
        return self.ring.taken()

    def reader_gone(self) -> bool:
        return bool(self.ring.flags & CLOSED)

    def close(self) -> None:
        self.ring.end()
        self.ring.close()


class _Task:
    """A claimed task, as far as the trainer consumed it and as far as it was checkpointed."""

    __slots__ = ("claim", "offset", "records", "bytes", "ended", "error", "saved_offset",
                 "saved_records", "saved_at")

    def __init__(self, claim: Claim, now: float) -> None:
        self.claim = claim
        self.offset = claim.offset
        self.records = claim.records
        self.bytes = claim.bytes
        self.ended = False  # the trainer consumed the last record written of the task
        self.error: str | None = None  # why reading it stopped early, once ended
        self.saved_offset = claim.offset
        self.saved_records = claim.records
        self.saved_at = now

    @property
    def name(self) -> str:
        return self.claim.task.task_id


class _Mark(NamedTuple):
    """A position in the pipe (bytes written in total): once the trainer read up to it, ``task``
    is consumed up to ``offset`` with ``records`` and ``nbytes`` more; or, with ``end``, whole
    (as far as it could be read: ``error`` says why not further)."""

    pos: int
    task: _Task
    offset: int = 0
    records: int = 0
    nbytes: int = 0
    end: bool = False
    error: str | None = None


@dataclass(eq=False)
class _Feeder:
    sink: _Sink
    source: TaskSource
    fmt: RecordFormat
    checkpoint_records: int
    checkpoint_interval: float
    prefetch: int
    clock: Callable[[], float]
    block_size: int
    preprocess: Preprocessor | None = None
    shuffle: ShuffleBuffer | None = None
    marks: deque[_Mark] = field(default_factory=deque)
    active: list[_Task] = field(default_factory=list)  # claimed, not yet reported finished
    claims: asyncio.Queue[_Task | None] = field(default_factory=asyncio.Queue)
    writing_done: bool = False
    reader_gone: bool = False
    stopping: bool = False
    completed: int = 0
    failed: int = 0
    released: int = 0
    consumed_records: int = 0
    consumed_bytes: int = 0

    def __post_init__(self) -> None:
        # A claim slot is taken before asking for a task and given back once the trainer
        # consumed the task to its end: the task being read plus `prefetch` ahead, whatever
        # their size (the pipe bounds bytes, not tasks: a trainer that does not read would
        # otherwise let small tasks be claimed until the pipe is full, starving other readers).
        self.slots = asyncio.Semaphore(self.prefetch + 1)
        self.wake_tracker = asyncio.Event()
        self.reporting = asyncio.Lock()  # the tracker's reports and checkpoint_now, one at a time
        # The thread that reads and writes; its own, as it spends long waits in poll().
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="primus-feeder")
        self.halted = False  # set (and halt_fd signalled) to stop the thread
        self.halt_fd = os.eventfd(0, os.EFD_CLOEXEC)

    async def run(self) -> FeedResult:
        started = self.clock()
        helpers = [asyncio.create_task(self._claim_ahead()),
                   asyncio.create_task(self._write_tasks())]
        tracker = asyncio.create_task(self._track())
        closed = False
        try:
            closed = await self._supervise(helpers, tracker)
        finally:
            await self._stop(helpers, tracker)
        result = FeedResult(tasks=self.completed, failed=self.failed, released=self.released,
                            records=self.consumed_records, bytes=self.consumed_bytes,
                            closed_by_trainer=closed,
                            elapsed=self.clock() - started)
        logger.info("fed %s tasks (%s failed, %s released): %s records, %s bytes in %.1f s%s",
                    result.tasks, result.failed, result.released, result.records, result.bytes,
                    result.elapsed, "; the trainer closed its input" if closed else "")
        return result

    async def _supervise(self, helpers: list[asyncio.Task[None]],
                         tracker: asyncio.Task[None]) -> bool:
        """Until the tracker saw everything consumed, or the trainer closed its input (then
        ``True``). An error in any of the coroutines is raised here."""
        running: set[asyncio.Task[None]] = {tracker, *helpers}
        while not tracker.done():
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if isinstance(error, BrokenPipeError):
                    return True
                if error is not None:
                    raise error
        return self.reader_gone

    async def _stop(self, helpers: list[asyncio.Task[None]], tracker: asyncio.Task[None]) -> None:
        """Stop claiming and writing, close the pipe, then settle every claimed task: complete
        or fail what the trainer consumed to its end, release the rest where it got to."""
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        self.stopping = True  # the tracker finishes the source call it is in, then returns
        self.wake_tracker.set()
        await asyncio.gather(tracker, return_exceptions=True)
        try:
            self._observe()  # a last look: nothing can be consumed once the pipe is closed
        finally:
            self.sink.close()
            os.close(self.halt_fd)
            self.thread.shutdown(wait=False)  # idle: the writer waited for it
        await self._report(final=True)

    # Claiming

    async def _claim_ahead(self) -> None:
        while True:
            await self.slots.acquire()
            claim = await self.source.next()
            if claim is None:
                self.claims.put_nowait(None)
                return
            task = _Task(claim, self.clock())
            self.fmt.prepare(claim)  # a format that reads tasks itself may start on it now
            self.active.append(task)
            self.claims.put_nowait(task)

    # Writing

    async def _write_tasks(self) -> None:
        while (task := await self.claims.get()) is not None:
            error = await self._write_task(task)
            self.marks.append(_Mark(self.sink.written, task, end=True, error=error))
        self.writing_done = True
        self.wake_tracker.set()

    async def _write_task(self, task: _Task) -> str | None:
        """Write the task's records; the error that stopped reading it early, if one did."""
        reader: TaskBlocks = self.fmt.open_task(task.claim, self.block_size) or \
            _TaskReader(task.claim, self.fmt, self.block_size)
        loop = asyncio.get_running_loop()
        pumping = loop.run_in_executor(self.thread, self._pump, task, reader)
        try:
            await asyncio.shield(pumping)
        finally:
            if not pumping.done():
                # Cancelled: the thread must be done with the file and the pipe before they
                # are closed (a closed descriptor's number is soon reused).
                self.halted = True
                os.eventfd_write(self.halt_fd, 1)
                await asyncio.wait([pumping])
                pumping.exception()  # retrieved: a broken pipe no longer matters
            await loop.run_in_executor(self.thread, reader.close)
        return reader.error

    def _pump(self, task: _Task, reader: TaskBlocks) -> None:
        """In a worker thread: write the task's blocks into the pipe, waiting while it is
        full, until the task ends or the feeder halts.

        ``written`` and the marks are updated after the bytes entered the pipe, and the tracker
        reads ``written`` before the pipe's queue, so it may count too little consumed, never
        too much.

        Raises:
            BrokenPipeError: the trainer closed its input.
        """
        sink = self.sink
        for chunk in self._chunks(task, reader):
            if self.halted:
                return
            data = chunk.data
            if self.preprocess is not None:
                start = chunk.offset - len(data) if self.fmt.transparent and \
                    self.shuffle is None else None
                try:
                    data = self.preprocess.apply(data, start or 0)
                except PreprocessError as exc:  # the task fails with it, where it failed
                    where = (f"byte {exc.offset}" if start is not None and exc.offset is not None
                             else f"the batch before byte {chunk.offset}")
                    reader.error = f"{exc} (a record of {task.claim.task.path} at {where})"
                    return
            size = len(data) if self.shuffle is None else chunk.done_bytes

            def mark(position: int, chunk: Chunk = chunk, size: int = size) -> None:
                self.marks.append(_Mark(position, task, chunk.offset, chunk.done_records, size))
            if not len(data):  # a shuffled window of no rows: its progress alone
                mark(sink.written)
                continue
            if not sink.write(data, chunk.records, self.halt_fd, lambda: self.halted, mark):
                return

    def _chunks(self, task: _Task, reader: TaskBlocks) -> Iterator[Chunk]:
        """What to write of a task: its blocks as read, or shuffled a window at a time."""
        if self.shuffle is not None:
            yield from self.shuffle.chunks(task.claim.task, task.claim.offset, reader.next)
            return
        while (block := reader.next()) is not None:
            yield Chunk(block.data, block.records, block.end_offset, block.records,
                        len(block.data))

    # Tracking what the trainer consumed

    async def _track(self) -> None:
        """Watch the pipe and report progress until everything written was consumed and the
        stream ended, the trainer closed its input, or the feeder stops."""
        while not self.stopping:
            self._observe()
            await self._report()
            if self.reader_gone or (self.writing_done and not self.active):
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_INTERVAL):
                    await self.wake_tracker.wait()
            self.wake_tracker.clear()

    def _observe(self) -> None:
        """Apply the marks the trainer has read past."""
        consumed = self.sink.consumed()
        while self.marks and self.marks[0].pos <= consumed:
            mark = self.marks.popleft()
            task = mark.task
            if mark.end:
                task.ended, task.error = True, mark.error
                self.slots.release()
            else:
                task.offset = mark.offset
                task.records += mark.records
                task.bytes += mark.nbytes
                self.consumed_records += mark.records
                self.consumed_bytes += mark.nbytes
        if self.sink.reader_gone():
            self.reader_gone = True

    async def checkpoint_now(self) -> None:
        """:meth:`FeedControl.checkpoint_now`."""
        async with self.reporting:
            self._observe()
            now = self.clock()
            records, nbytes = self.sink.taken()
            block = self.marks[0] if self.marks and nbytes and self.fmt.transparent and \
                self.preprocess is None and self.shuffle is None else None  # else the
            # trainer's bytes are not the file's, in its order
            partial = block.task if block is not None and not block.end else None
            for task in list(self.active):
                if task.ended:
                    await self._finish(task, now)
                elif task is partial and block is not None:
                    # Inside the block: the bytes of its records are the file's, from the
                    # block's first record on (a range's first block starts where a record
                    # does, after the range's start).
                    offset = block.offset - block.nbytes + nbytes
                    await self.source.checkpoint(task.claim, offset, task.records + records,
                                                 task.bytes + nbytes)
                    # Later checkpoints move on from there, never back to the block's start.
                    task.saved_offset, task.saved_records, task.saved_at = (
                        offset, task.records + records, now)
                elif task.offset != task.saved_offset:
                    await self._checkpoint(task, now)
            flush = getattr(self.source, "flush", None)
            if flush is not None:
                await flush()

    async def _report(self, final: bool = False) -> None:
        async with self.reporting:
            await self._report_now(final)

    async def _report_now(self, final: bool = False) -> None:
        """Tell the source what became of each task: complete or fail those the trainer
        consumed to their end, checkpoint those due; when ``final``, release the rest."""
        now = self.clock()
        for task in list(self.active):
            if final:
                await self._settle(task, now)
            elif self.stopping:
                return
            elif task.ended:
                await self._finish(task, now)
            elif task.offset > task.saved_offset and (
                    task.records - task.saved_records >= self.checkpoint_records or
                    now - task.saved_at >= self.checkpoint_interval):
                await self._checkpoint(task, now)

    async def _finish(self, task: _Task, now: float) -> None:
        if task.error is None:
            await self.source.complete(task.claim, task.records, task.bytes)
            self.completed += 1
            logger.debug("task %s done: %s records", task.name, task.records)
        else:
            if task.offset != task.saved_offset:  # so that a retry starts at the damage
                await self._checkpoint(task, now)
            await self.source.fail(task.claim, task.error)
            self.failed += 1
        self.active.remove(task)

    async def _checkpoint(self, task: _Task, now: float) -> None:
        await self.source.checkpoint(task.claim, task.offset, task.records, task.bytes)
        task.saved_offset, task.saved_records, task.saved_at = task.offset, task.records, now

    async def _unprepare(self, task: _Task) -> None:
        """Drop what the format prepared for a task given back (Kafka's consumer); a failure
        loses only that."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.fmt.unprepare,
                                                             task.claim)
        except Exception:
            logger.warning("task %s: what was prepared to read it could not be closed",
                           task.name, exc_info=True)

    async def _settle(self, task: _Task, now: float) -> None:
        """Finish the task if the trainer consumed it to its end, else give it back where
        the trainer got to. A failure is logged, not raised (this runs while stopping): the
        task returns to pending anyway when this executor's lease ends, at its last
        checkpoint, which is never ahead of what the trainer consumed."""
        try:
            if task.ended:
                await self._finish(task, now)
                return
            await self._unprepare(task)
            await self.source.release(task.claim, task.offset, task.records, task.bytes)
        except Exception:
            logger.exception("task %s: could not report where reading it stopped (byte %s)",
                             task.name, task.offset)
        else:
            self.released += 1
            logger.info("task %s released at byte %s (%s records)", task.name, task.offset,
                        task.records)
        finally:
            if task in self.active:
                self.active.remove(task)


class _TaskReader:
    """The blocks of one claimed task, read from its file; blocking: call it from a thread.

    A task is read only from a regular file at least as long as when it was listed: a file
    that became shorter (rewritten, truncated) would otherwise end the task early with its
    last records skipped, and anything else (a FIFO, a device) could block forever.
    """

    def __init__(self, claim: Claim, fmt: RecordFormat, block_size: int) -> None:
        self.claim = claim
        self.fmt = fmt.for_task(claim.task)
        self.block_size = block_size
        self.pos = claim.offset  # where the next record starts
        self.error: str | None = None
        self._close: Callable[[], None] | None = None
        self._blocks: Iterator[Block] | None = None

    def next(self) -> Block | None:
        """The next block; ``None`` at the end of the task, or when reading failed (then
        :attr:`error` says why)."""
        path = self.claim.task.path
        try:
            if self._blocks is None:
                file, self._close = _open_data_file(path)
                self._blocks = self._read(file)
            return next(self._blocks, None)
        except CorruptRecordError as exc:
            self.error = str(exc)
        except _UnreadableError as exc:
            self.error = f"cannot read {path}: {exc}"
        except OSError as exc:
            self.error = f"cannot read {path}: {exc.strerror or exc}"
        return None

    def _read(self, file: IO[bytes]) -> Iterator[Block]:
        claim = self.claim
        self._check_size(file)
        try:
            yield from self._tracked(self.fmt.blocks(file, claim.offset, claim.task.end,
                                                     self.block_size,
                                                     aligned=claim.offset != claim.task.start))
        except CorruptRecordError as exc:
            # A format that finds damage in a read may drop the good records read with it:
            # read up to the damaged record, to deliver them before reporting it.
            try:
                yield from self._tracked(self.fmt.blocks(file, self.pos, exc.offset,
                                                         self.block_size, aligned=True))
            except (CorruptRecordError, OSError):
                pass  # the same damage, checked again just past the range
            raise
        self._check_size(file)  # it may have been cut while it was read

    def _check_size(self, file: IO[bytes]) -> None:
        size = file.seek(0, os.SEEK_END)
        if size < self.claim.task.size:
            raise _UnreadableError(f"it holds {size} bytes, {self.claim.task.size} when it was "
                                   "listed: it was cut or replaced since")

    def _tracked(self, blocks: Iterator[Block]) -> Iterator[Block]:
        for block in blocks:
            self.pos = block.end_offset
            yield block

    def close(self) -> None:
        if self._close is not None:
            self._close()


class _UnreadableError(Exception):
    """A data file that cannot be read as it was listed; the message says why."""


def _open_data_file(path: str) -> tuple[IO[bytes], Callable[[], None]]:
    """``path`` opened for reading, and what closes it: a local path directly, a URL through
    fsspec.

    A local file is opened without blocking, so that a FIFO is refused instead of waiting
    for a writer.

    Raises:
        OSError: it cannot be opened (missing, a directory, no permission...).
        _UnreadableError: it is not a regular file.
    """
    fs, fs_path = fsspec.core.url_to_fs(path)
    if not isinstance(fs, LocalFileSystem):
        # The OpenFile holds what the file is read through (the archive of a zip:// URL, the
        # cache of a simplecache:: one): it must live as long as the file, and close it all.
        opened = fsspec.open(path, "rb")
        return opened.open(), opened.close
    file = open(fs_path, "rb", opener=_open_nonblocking)  # noqa: SIM115 (closed by the reader)
    try:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise _UnreadableError("not a regular file")
        os.set_blocking(file.fileno(), True)
    except BaseException:
        file.close()
        raise
    return file, file.close


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)


def _queued(fd: int) -> int:
    """Bytes written into the pipe ``fd`` and not yet read from it."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
