"""The stream as a PyTorch dataset, pickled for a spawned or forkserver DataLoader worker
(primus.data.torch_stream; the workers themselves, of a real trainer, in
tests/integration/test_data_shm.py)."""

from __future__ import annotations

import os
import pickle
from functools import partial

import pytest

from primus.data.reader import records
from primus.data.shm import RingWriter
from primus.data.torch_stream import PrimusStream


def test_a_dataset_whose_ring_is_not_open_here_says_so_when_pickled_for_a_worker():
    read, write = os.pipe()
    os.close(read)
    os.close(write)  # a descriptor number that is surely closed now
    dataset = PrimusStream(partial(records, "text"), ring=f"{read},{read},{read}")
    with pytest.raises(ValueError, match=f"PRIMUS_DATA_SHM: descriptor {read} of the data ring "
                                         f"is not open in process {os.getpid()}"):
        pickle.dumps(dataset)


def test_a_dataset_over_a_pipe_pickles_as_it_is():
    dataset = pickle.loads(pickle.dumps(PrimusStream(partial(records, "tfrecord"), ring=None)))
    assert (dataset.read.func, dataset.read.args, dataset.ring) == (records, ("tfrecord",), None)


def test_the_ring_travels_as_descriptors_and_arrives_as_the_numbers_it_got():
    """Outside a spawning, multiprocessing passes a descriptor over its resource sharer: the
    copy opens the same ring at a number of its own."""
    ring = RingWriter.create(1 << 16)
    try:
        dataset = PrimusStream(partial(records, "text"), ring=",".join(map(str, ring.fds)))
        copy = pickle.loads(pickle.dumps(dataset))
        numbers = [int(fd) for fd in copy.ring.split(",")]
        try:
            assert set(numbers).isdisjoint(ring.fds)
            assert [os.fstat(fd).st_ino for fd in numbers] == \
                [os.fstat(fd).st_ino for fd in ring.fds]
        finally:
            for fd in numbers:
                os.close(fd)
    finally:
        ring.close()
