"""The shared-memory ring of ``delivery: shm``: the executor's feeder writes frames of records
into it; the trainer reads them where they lie (:mod:`primus.data.reader`).

The ring is a ``memfd`` the trainer inherits, with two ``eventfd`` doorbells; the trainer finds
the three descriptors in ``PRIMUS_DATA_SHM`` (``RING,DATA,SPACE``). Layout (little-endian)::

    0    8s   magic     b"PRIMUSR1"
    8    u64  capacity  bytes of the data area, a multiple of 8
    16   u64  written   bytes of frames published so far (padding and wraps included)
    24   u64  flags     END: no frame comes after ``written``; CLOSED: the trainer stopped
    32   u64  consumed  bytes of frames the trainer is done with: their space may be reused
    40   u64  records   records the trainer took of the frame at ``consumed`` (one reader)
    48   u64  bytes     bytes of those records
    64        the data area

A frame at position ``p`` lies at ``p % capacity``: ``u32 length, u32 records, u64 number,
payload``, padded to 8 bytes. A frame never wraps: where the space left before the end is
smaller, a ``WRAP`` length fills it and the frame starts at 0.

One reader reads the frames where they lie and moves ``consumed`` past a frame once it asks
for the next: what it consumed is exact. Several readers (DataLoader workers, forked with the
ring's descriptors) take whole frames in turn, each under a POSIX record lock on the ring, and
copy a frame out as they take it: a frame is consumed once taken, as bytes a trainer read from
a pipe are, and a worker that DataLoader leaves waiting holds a copy, not the ring.

The feeder publishes a frame (its bytes, then ``written``) and rings the DATA doorbell; a
reader that finds nothing new waits on it. A reader done with a frame rings the SPACE doorbell;
the feeder, when the ring is full, waits on it. A doorbell is rung for every frame (frames are
about 1 MiB), and each side checks the positions again after it wakes, so no wake-up is
missed. Several readers share the DATA doorbell: each waits on it at most 2 ms at a time.

The positions are plain stores and loads through the mapping: their order relies on the
total store order of x86-64 (the ring is not for weakly ordered CPUs yet).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import select
import struct
from collections.abc import Generator, Iterator
from dataclasses import dataclass

MAGIC = b"PRIMUSR1"
DATA_OFFSET = 64
DEFAULT_CAPACITY = 32 << 20
"""Bytes of the ring's data area: room for the feeder to run ahead by many 1 MiB blocks."""

END = 1
CLOSED = 2
WRAP = 0xFFFFFFFF
_FRAME = struct.Struct("<IIQ")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_TAKEN_PAIR = struct.Struct("<QQ")
ENV = "PRIMUS_DATA_SHM"


class RingFullError(Exception):
    """A frame larger than half the ring (a single record that large)."""


def _pad(n: int) -> int:
    return (n + 7) & ~7


@dataclass
class Ring:
    """One side's view of a ring: its mapping and doorbells (non-blocking eventfds)."""

    memory: mmap.mmap
    capacity: int
    data_bell: int
    space_bell: int

    # ---- positions and flags --------------------------------------------------------------

    @property
    def written(self) -> int:
        return _U64.unpack_from(self.memory, 16)[0]

    @property
    def flags(self) -> int:
        return _U64.unpack_from(self.memory, 24)[0]

    def set_flag(self, flag: int) -> None:
        # One writer per flag (END: the feeder; CLOSED: the trainer), read by the other.
        _U64.pack_into(self.memory, 24, self.flags | flag)

    @property
    def consumed(self) -> int:
        """Bytes of frames the trainer is done with: the space before it may be reused."""
        return _U64.unpack_from(self.memory, 32)[0]

    def taken(self) -> tuple[int, int]:
        """Records and bytes the (one) reader took of the frame at ``consumed``."""
        return _TAKEN_PAIR.unpack_from(self.memory, 40)

    def close(self) -> None:
        self.memory.close()


class RingWriter(Ring):
    """The feeder's side: makes the ring, a memfd and two eventfds (:meth:`fds`, for the
    trainer to inherit; the executor closes its copies once the trainer started)."""

    ring_fd: int = -1
    frames: int = 0

    @classmethod
    def create(cls, capacity: int = DEFAULT_CAPACITY) -> RingWriter:
        capacity = _pad(capacity)
        fd = os.memfd_create("primus-data", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, DATA_OFFSET + capacity)
            memory = mmap.mmap(fd, DATA_OFFSET + capacity)
        except BaseException:
            os.close(fd)
            raise
        memory[0:8] = MAGIC
        _U64.pack_into(memory, 8, capacity)
        ring = cls(memory, capacity, os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK),
                   os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK))
        ring.ring_fd = fd
        return ring

    @property
    def fds(self) -> tuple[int, int, int]:
        """The ring's descriptors, for the trainer: the memfd and the two doorbells."""
        return self.ring_fd, self.data_bell, self.space_bell

    def trainer_env(self) -> dict[str, str]:
        """Where the trainer finds the ring (the descriptors it inherits)."""
        return {ENV: ",".join(map(str, self.fds))}

    def room(self, payload: int) -> int | None:
        """Bytes the next frame of ``payload`` bytes takes from ``written`` on (a wrap
        included), or ``None`` while the ring has not that much free.

        Raises:
            RingFullError: a frame that large never fits.
        """
        size = _pad(_FRAME.size + payload)
        if size > self.capacity // 2:
            raise RingFullError(f"a block of {payload} bytes does not fit the shared-memory "
                                f"ring of {self.capacity} bytes")
        written = self.written
        at = written % self.capacity
        taken = size + (self.capacity - at if at + size > self.capacity else 0)
        return taken if written + taken - self.consumed <= self.capacity else None

    def put(self, payload: bytes | memoryview, records: int, taken: int) -> int:
        """Write a frame (``taken`` as :meth:`room` said) and publish it; the new ``written``.
        """
        written = self.written
        at = written % self.capacity
        base = DATA_OFFSET
        if at + _pad(_FRAME.size + len(payload)) > self.capacity:
            _U32.pack_into(self.memory, base + at, WRAP)
            at = 0
        _FRAME.pack_into(self.memory, base + at, len(payload), records, self.frames)
        self.frames += 1
        start = base + at + _FRAME.size
        self.memory[start:start + len(payload)] = payload
        written += taken
        _U64.pack_into(self.memory, 16, written)
        os.eventfd_write(self.data_bell, 1)
        return written

    def end(self) -> None:
        """No frame follows: readers finish what is written, then stop."""
        self.set_flag(END)
        os.eventfd_write(self.data_bell, 1)

    def reset_space_bell(self) -> None:
        try:
            os.eventfd_read(self.space_bell)
        except BlockingIOError:
            pass

    def trainer_started(self) -> None:
        """The trainer has its own descriptor of the ring: this process needs only the
        mapping."""
        if self.ring_fd >= 0:
            os.close(self.ring_fd)
            self.ring_fd = -1

    def close(self) -> None:
        super().close()
        self.trainer_started()
        for fd in (self.data_bell, self.space_bell):
            os.close(fd)
        self.data_bell = self.space_bell = -1


@dataclass
class Frame:
    """A frame as a reader sees it: where it starts and ends (positions), its records and
    payload (a view into the ring, valid until the reader asks for the next frame; a copy
    when several readers take frames)."""

    start: int
    end: int
    records: int
    payload: memoryview | bytes


class RingReader(Ring):
    """A trainer's side of the ring: one reader, or one of ``workers`` readers (forked
    DataLoader workers) taking frames in turn."""

    ring_fd: int = -1
    workers: int = 1

    @classmethod
    def open(cls, spec: str | None = None, workers: int = 1) -> RingReader:
        """The ring ``spec`` names (``RING,DATA,SPACE`` descriptors; default
        ``$PRIMUS_DATA_SHM``), read by one of ``workers`` readers.

        Raises:
            ValueError: the descriptor is no ring of Primus's.
        """
        ring_fd, data_bell, space_bell = (int(x) for x in (spec or os.environ[ENV]).split(","))
        memory = mmap.mmap(ring_fd, os.fstat(ring_fd).st_size)
        if memory[0:8] != MAGIC:
            memory.close()
            raise ValueError(f"{ENV}: descriptor {ring_fd} is no Primus data ring")
        ring = cls(memory, _U64.unpack_from(memory, 8)[0], data_bell, space_bell)
        ring.ring_fd, ring.workers = ring_fd, workers
        return ring

    def frames(self) -> Generator[Frame, None, None]:
        """The frames, in order, until the stream ends (with several readers, those this one
        takes). Closed before the end, it tells the feeder the trainer reads no more."""
        ended = False
        try:
            if self.workers > 1:
                yield from self._taken_frames()
                ended = True
                return
            pos = self.consumed
            try:
                while (frame := self._frame_at(pos)) is not None:
                    if isinstance(frame, int):
                        pos = frame  # a wrap
                        continue
                    yield frame
                    frame.payload.release()  # type: ignore[union-attr]
                    pos = frame.end
                    self._consumed(pos)
                ended = True
            finally:
                self._consumed(pos)
        finally:
            if not ended:  # the trainer stopped reading before the end: its feeder stops
                self.stop()

    def _taken_frames(self) -> Iterator[Frame]:
        while True:
            fcntl.lockf(self.ring_fd, fcntl.LOCK_EX)
            try:
                pos = self.consumed
                frame = self._next_frame(pos)
                if isinstance(frame, Frame):
                    view = frame.payload
                    frame.payload = bytes(view)  # the worker's own copy
                    view.release()  # type: ignore[union-attr]
                    self._consumed(frame.end)
            finally:
                fcntl.lockf(self.ring_fd, fcntl.LOCK_UN)
            if frame is None:
                return
            if isinstance(frame, Frame):
                yield frame
            else:
                self._wait_for_data()

    def _frame_at(self, pos: int) -> Frame | int | None:
        """The frame at ``pos`` (waiting for it); the position after a wrap; ``None`` at the
        end of the stream."""
        while True:
            found = self._next_frame(pos)
            if found is not False:
                return found
            self._wait_for_data()

    def _next_frame(self, pos: int) -> Frame | int | bool | None:
        """The frame at ``pos``, the position after a wrap there, ``None`` at the end, or
        ``False`` when nothing is written there yet."""
        if pos >= self.written:
            return None if self.flags & END and pos >= self.written else False
        at = pos % self.capacity
        if _U32.unpack_from(self.memory, DATA_OFFSET + at)[0] == WRAP:
            if self.workers > 1:
                self._consumed(pos + self.capacity - at)
                return self._next_frame(pos + self.capacity - at)
            return pos + self.capacity - at
        length, records, _ = _FRAME.unpack_from(self.memory, DATA_OFFSET + at)
        start = DATA_OFFSET + at + _FRAME.size
        return Frame(pos, pos + _pad(_FRAME.size + length), records,
                     memoryview(self.memory)[start:start + length])

    def took(self, records: int, nbytes: int) -> None:
        """Say how much of the current frame the trainer took (one reader; for a
        savepoint's cut)."""
        _TAKEN_PAIR.pack_into(self.memory, 40, records, nbytes)

    def _consumed(self, pos: int) -> None:
        if pos != self.consumed:
            _TAKEN_PAIR.pack_into(self.memory, 40, 0, 0)
            _U64.pack_into(self.memory, 32, pos)
            os.eventfd_write(self.space_bell, 1)

    def _wait_for_data(self) -> None:
        poller = select.poll()
        poller.register(self.data_bell, select.POLLIN)
        if poller.poll(None if self.workers == 1 else 2):
            try:
                os.eventfd_read(self.data_bell)
            except BlockingIOError:
                pass  # another reader took it

    def stop(self) -> None:
        """The trainer reads no more (its feeder stops)."""
        self.set_flag(CLOSED)
        os.eventfd_write(self.space_bell, 1)
