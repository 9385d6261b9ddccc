"""The stream as a PyTorch ``IterableDataset`` (:func:`primus.data.reader.torch_dataset`).

A DataLoader with workers gives each worker the dataset: forked, a worker inherits the ring's
descriptors; spawned or started by a forkserver (Python 3.14's default on Linux), it gets a
pickled copy, and a pickle cannot carry a descriptor. So the dataset pickles each of the ring's
descriptors as :func:`multiprocessing.reduction.DupFd`, which multiprocessing passes to the new
process itself (in the spawned process's inherited descriptors, or over the forkserver's socket),
and the worker opens the ring at the numbers it got. The workers then take whole blocks in
turn, as forked ones do (:class:`~primus.data.shm.RingReader`): every record reaches one
worker, whatever the start method.

Importing this module imports torch: the reader imports it only when a trainer asks for a
dataset, and gives it the function that reads the stream (so that this module needs nothing of
the reader's).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from multiprocessing import reduction
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info


class PrimusStream(IterableDataset):  # type: ignore[misc]
    """The records of this trainer's stream (Arrow batches for a columnar format).

    Args:
        read: What reads the stream, called with ``workers`` and ``ring`` (a module-level
            function of the reader, or a ``functools.partial`` of one: it is pickled by name).
        ring: The ring's descriptors (``RING,DATA,SPACE``); ``None`` over a pipe.
    """

    def __init__(self, read: Callable[..., Iterator[Any]], ring: str | None) -> None:
        super().__init__()
        self.read = read
        self.ring = ring

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        return self.read(workers=info.num_workers if info is not None else 1, ring=self.ring)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.ring is not None:
            state["ring"] = [reduction.DupFd(_open_descriptor(fd))
                             for fd in self.ring.split(",")]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        ring = state["ring"]
        if isinstance(ring, list):  # unpickled in a new process: the descriptors it was given
            state["ring"] = ",".join(str(passed.detach()) for passed in ring)
        self.__dict__.update(state)


def _open_descriptor(spec: str) -> int:
    """Descriptor ``spec`` of the ring, checked to be open in this process.

    Raises:
        ValueError: it is not: the process that pickles the dataset has no ring.
    """
    fd = int(spec)
    try:
        os.fstat(fd)
    except OSError as exc:
        raise ValueError(f"PRIMUS_DATA_SHM: descriptor {fd} of the data ring is not open in "
                         f"process {os.getpid()} ({exc.strerror}): make the dataset in the "
                         f"trainer Primus started, which inherits the ring") from None
    return fd
