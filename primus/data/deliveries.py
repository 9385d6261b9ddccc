"""How a stream's records reach its trainer (``delivery:``): a registry of deliveries, each
preparing, before the trainer starts, what the trainer inherits and what the feeder writes
into (:func:`primus.data.feeder.feed`).

- ``stdin``: a pipe, the trainer's stdin.
- ``fifo``: a named pipe in the executor's directory, its path in ``PRIMUS_DATA_FIFO``.
- ``shm``: a shared-memory ring (:mod:`primus.data.shm`), its descriptors in
  ``PRIMUS_DATA_SHM``; the trainer reads it with :mod:`primus.data.reader`.

Every delivery gives the same guarantees (the contract suite, ``tests/unit/
test_delivery_contract.py``): every record once and in order, the trainer's pace held to
(backpressure), checkpoints never ahead of what the trainer consumed, the end of the stream
seen as such, a trainer that stops reading noticed.
"""

from __future__ import annotations

import abc
import contextlib
import os
import socket
from dataclasses import dataclass, field
from typing import ClassVar

from primus.data.shm import RingWriter


@dataclass
class Prepared:
    """A delivery prepared for one trainer: ``env`` and ``stdin`` (a descriptor, or ``None``)
    for it, ``pass_fds`` it inherits, and ``target`` for the feeder (a pipe's write end, a
    FIFO's path, a ring)."""

    env: dict[str, str]
    target: int | str | RingWriter
    stdin: int | None = None
    pass_fds: tuple[int, ...] = ()
    _trainer_side: list[int] = field(default_factory=list)
    _sockets: list[socket.socket] = field(default_factory=list)
    _own: list[socket.socket] = field(default_factory=list)

    def keep(self, trainer_end: socket.socket, own_end: socket.socket) -> None:
        """A socket pair between the trainer and this process: ``trainer_end`` is closed
        here once the trainer started (it inherits it); ``own_end`` too if it never does."""
        self._sockets.append(trainer_end)
        self._own.append(own_end)

    def started(self) -> None:
        """The trainer started (or will not): this process closes its copies of the
        trainer's descriptors."""
        for fd in self._trainer_side:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._trainer_side = []
        for kept in self._sockets:
            kept.close()
        self._sockets = []
        if isinstance(self.target, RingWriter):
            self.target.trainer_started()

    def abandon(self) -> None:
        """No trainer reads it: close what was made."""
        self.started()
        for own in self._own:
            own.close()
        if isinstance(self.target, RingWriter):
            self.target.close()
        elif isinstance(self.target, int):
            with contextlib.suppress(OSError):
                os.close(self.target)


class Delivery(abc.ABC):
    """One way records reach a trainer."""

    name: ClassVar[str]
    held_trainer: ClassVar[bool] = False
    """Whether a trainer started ahead of its attempt (held, told its environment later) can
    take it: only a delivery made of environment variables alone."""

    @abc.abstractmethod
    def prepare(self, directory: str, name: str) -> Prepared:
        """Make what trainer ``name`` (``role-index.attempt``) reads, in ``directory`` (the
        executor's private directory) where it is a file."""


class StdinDelivery(Delivery):
    name = "stdin"

    def prepare(self, directory: str, name: str) -> Prepared:
        read, write = os.pipe()
        return Prepared({}, write, stdin=read, _trainer_side=[read])


class FifoDelivery(Delivery):
    name = "fifo"
    held_trainer = True

    def prepare(self, directory: str, name: str) -> Prepared:
        fifo = os.path.join(directory, f"{name}.fifo")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(fifo)
        os.mkfifo(fifo, 0o600)
        return Prepared({"PRIMUS_DATA_FIFO": fifo}, fifo)


class ShmDelivery(Delivery):
    name = "shm"

    def prepare(self, directory: str, name: str) -> Prepared:
        ring = RingWriter.create()
        return Prepared(ring.trainer_env(), ring, pass_fds=ring.fds)


DELIVERIES: dict[str, Delivery] = {d.name: d for d in (StdinDelivery(), FifoDelivery(),
                                                        ShmDelivery())}
"""Every delivery, by the name a stream's ``delivery`` gives."""
