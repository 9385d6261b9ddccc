"""The contract every record format keeps, run against every registered format: ranges cut
anywhere deliver every record once and in order; reading resumes at any block's end with
exactly the rest; an empty file and a range past the end hold no record.

Each format's sample file, and how to read back what a trainer received, is in
``tests/support/formats.py``.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import fsspec
import pytest

from primus.data.api import ENTRY_POINT_GROUP, FORMATS, Block, RecordFormat, get_format
from primus.data.formats import split_ranges
from tests.support.formats import SAMPLES, Sample

NAMES = sorted(name for name in {*FORMATS, *(ep.name for ep in importlib.metadata.entry_points(
    group=ENTRY_POINT_GROUP) if ep.value.startswith("primus."))} if get_format(name).reads_files)
"""Primus's own formats of files: built in, or offered through its entry point (``kafka``
reads no file: tests/integration/test_kafka.py)."""


def read(fmt: RecordFormat, path: Path, start: int, end: int, *, block_size: int = 64,
         aligned: bool = False) -> list[Block]:
    with fsspec.open(str(path), "rb") as f:
        return [Block(bytes(b.data), b.records, b.end_offset)
                for b in fmt.blocks(f, start, end, block_size, aligned=aligned)]


def delivered(sample: Sample, blocks: list[Block]) -> list[object]:
    return sample.decode(b"".join(bytes(b.data) for b in blocks))


def check_ranges(name: str, path: Path, records: list[object],
                 ranges: list[tuple[int, int]]) -> None:
    fmt, sample = get_format(name), SAMPLES[name]
    every: list[Block] = []
    for start, end in ranges:
        blocks = read(fmt, path, start, end)
        offsets = [b.end_offset for b in blocks]
        assert offsets == sorted(set(offsets)), f"{name} [{start}, {end}): offsets must grow"
        if sample.delimited:
            assert all(b.records == len(sample.decode(bytes(b.data))) for b in blocks)
        every += blocks
    assert delivered(sample, every) == records, f"{name}: ranges {ranges[:4]}..."
    if sample.delimited:
        assert sum(b.records for b in every) == len(records)


@pytest.fixture(autouse=True)
def small_blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each format's blocks made small (its sample's ``small``), so that a small file gives
    many."""
    name = getattr(request.node, "callspec", None) and request.node.callspec.params.get("name")
    if name in SAMPLES and SAMPLES[name].small is not None:
        SAMPLES[name].small(monkeypatch)


def test_every_registered_format_has_a_sample_to_run_the_contract_against():
    assert set(NAMES) <= set(SAMPLES), "add a Sample to tests/support/formats.py"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("chunk_size", [7, 100, 1000, None])
def test_ranges_of_any_chunk_size_deliver_every_record_once_in_order(tmp_path, name,
                                                                      chunk_size):
    path, records = SAMPLES[name].make(tmp_path, 40)
    check_ranges(name, path, records, split_ranges(path.stat().st_size, chunk_size))


@pytest.mark.parametrize("name", NAMES)
def test_two_ranges_cut_anywhere_deliver_every_record_once(tmp_path, name):
    path, records = SAMPLES[name].make(tmp_path, 12)
    size = path.stat().st_size
    for cut in range(0, size + 1, max(1, size // 300)):
        check_ranges(name, path, records, [(0, cut), (cut, size)])


@pytest.mark.parametrize("name", NAMES)
def test_resuming_at_any_block_end_delivers_exactly_the_rest(tmp_path, name):
    fmt, sample = get_format(name), SAMPLES[name]
    path, _ = sample.make(tmp_path, 200)
    size = path.stat().st_size
    with open(path, "rb") as f:  # a format read a file at a time has no range inside one
        whole_files = fmt.least_chunk(f) == (size, "file")
    for start, end in [(0, size)] + ([] if whole_files else [(size // 3, 2 * size // 3)]):
        blocks = read(fmt, path, start, end)
        assert len(blocks) > 2, f"{name}: the sample should come in several blocks"
        for done, checkpoint in enumerate(blocks, 1):
            rest = read(fmt, path, checkpoint.end_offset, end, aligned=True)
            assert delivered(sample, rest) == delivered(sample, blocks[done:])


@pytest.mark.parametrize("name", NAMES)
def test_a_file_without_records_and_a_range_past_the_end_deliver_nothing(tmp_path, name):
    fmt, sample = get_format(name), SAMPLES[name]
    (tmp_path / "empty").mkdir()
    empty, none = sample.make(tmp_path / "empty", 0)
    path, _ = sample.make(tmp_path, 5)
    size = path.stat().st_size

    assert none == []
    assert read(fmt, empty, 0, empty.stat().st_size) == []
    assert read(fmt, path, size, size + 10) == read(fmt, path, size + 3, size + 10) == []
