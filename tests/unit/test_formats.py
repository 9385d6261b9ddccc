"""Record formats beyond their shared contract (``test_format_contract.py``): record boundaries
of text and TFRecord, look-alike framing, damaged and truncated files, the registry."""

from __future__ import annotations

import itertools
import random
import struct
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import fsspec
import pytest

import primus.data.api as data_api
from primus.data._framing import masked_crc32c
from primus.data.api import (
    DEFAULT_BLOCK_SIZE,
    FORMATS,
    Block,
    CorruptRecordError,
    DataError,
    RecordFormat,
    UnknownFormatError,
    get_format,
    register,
)
from primus.data.formats import (
    BytesFormat,
    TFRecordFormat,
    encode_tfrecord,
    split_ranges,
    write_tfrecords,
)
from tests.support.formats import tfrecord_file, tricky_payloads

TEXT = get_format("text")
TFRECORD = get_format("tfrecord")
BYTES = get_format("bytes")


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def _boundaries(records: Sequence[bytes]) -> list[int]:
    return list(itertools.accumulate(map(len, records), initial=0))


def _read(fmt: RecordFormat, f, start: int, end: int, block_size: int = DEFAULT_BLOCK_SIZE,
          **kwargs) -> list[Block]:
    return [Block(bytes(b.data), b.records, b.end_offset)
            for b in fmt.blocks(f, start, end, block_size, **kwargs)]


def _assert_ranges_deliver_each_record_once(fmt: RecordFormat, path: Path, records: list[bytes],
                                            ranges: list[tuple[int, int]],
                                            block_size: int) -> None:
    boundaries = set(_boundaries(records))
    delivered, count = [], 0
    with fsspec.open(str(path), "rb") as f:
        for start, end in ranges:
            blocks = _read(fmt, f, start, end, block_size)
            for block, following in itertools.pairwise(blocks):
                assert following.end_offset - len(following.data) == block.end_offset
            for block in blocks:
                assert block.end_offset in boundaries
                assert block.end_offset - len(block.data) in boundaries
                if fmt is TEXT:
                    lines = block.data.count(b"\n") + (not block.data.endswith(b"\n"))
                    assert block.records == lines
                delivered.append(block.data)
                count += block.records
    assert b"".join(delivered) == b"".join(records)
    assert count == len(records)


def _corrupted(tmp_path: Path, records: list[bytes], index: int, at: int) -> tuple[Path, int]:
    """The file with byte ``at`` of record ``index`` flipped, and where that record starts."""
    content = bytearray(b"".join(records))
    start = _boundaries(records)[index]
    content[start + at] ^= 0x40
    return _write(tmp_path / "corrupt.tfrecord", bytes(content)), start


def _errors_over_every_cut(fmt: RecordFormat, path: Path) -> Iterator[list[CorruptRecordError]]:
    """For each offset, the errors of reading the file as two ranges cut there."""
    size = path.stat().st_size
    with fsspec.open(str(path), "rb") as f:
        for cut in range(size + 1):
            errors = []
            for start, end in ((0, cut), (cut, size)):
                try:
                    _read(fmt, f, start, end, 64)
                except CorruptRecordError as exc:
                    errors.append(exc)
            yield errors


@pytest.mark.parametrize("chunk_size", [1, 5, 4096, None])
def test_bytes_ranges_deliver_the_file_in_blocks_no_larger_than_asked(tmp_path, chunk_size):
    content = random.Random(3).randbytes(10_000)
    path = _write(tmp_path / "raw.bin", content)
    delivered = []
    with fsspec.open(str(path), "rb") as f:
        for start, end in split_ranges(len(content), chunk_size):
            blocks = _read(BYTES, f, start, end, 1000)
            assert all(b.records == 1 and 0 < len(b.data) <= 1000 for b in blocks)
            assert blocks[-1].end_offset == end
            delivered += [b.data for b in blocks]
    assert b"".join(delivered) == content


def test_text_last_line_without_newline_is_a_record(tmp_path):
    path = _write(tmp_path / "lines.txt", b"a\nbb\nccc")
    with fsspec.open(str(path), "rb") as f:
        assert _read(TEXT, f, 0, 8) == [Block(b"a\nbb\nccc", 3, 8)]
        assert _read(TEXT, f, 3, 8) == [Block(b"ccc", 1, 8)]


def test_text_line_longer_than_the_block_size_arrives_whole(tmp_path):
    path = _write(tmp_path / "lines.txt", b"short\n" + b"y" * 5000 + b"\nend\n")
    with fsspec.open(str(path), "rb") as f:
        blocks = _read(TEXT, f, 0, 6000, 100)
    assert blocks == [Block(b"short\n", 1, 6), Block(b"y" * 5000 + b"\nend\n", 2, 5011)]


def test_tfrecord_record_longer_than_the_block_size_arrives_whole(tmp_path):
    path = tmp_path / "big.tfrecord"
    write_tfrecords(path, [b"a", b"b" * 5000, b"c"])
    with fsspec.open(str(path), "rb") as f:
        blocks = _read(TFRECORD, f, 0, path.stat().st_size, 100)
    assert [b.records for b in blocks] == [1, 1, 1]
    assert blocks[1].data == encode_tfrecord(b"b" * 5000)


@pytest.mark.parametrize("scan_size", [13, 16, 29, 64, DEFAULT_BLOCK_SIZE])
def test_tfrecord_align_finds_the_next_boundary_despite_record_data_that_looks_like_records(
        tmp_path, scan_size):
    path, records = tfrecord_file(tmp_path, 30, seed=5)
    boundaries = _boundaries(records)
    fmt = TFRecordFormat(scan_size=scan_size)
    with fsspec.open(str(path), "rb") as f:
        for offset in range(boundaries[-1] + 2):
            expected = min((b for b in boundaries if b >= offset), default=offset)
            assert fmt.align(f, offset) == expected, f"from byte {offset}"


def test_tfrecord_payloads_embedding_whole_records_are_not_taken_for_records(tmp_path):
    framed = [encode_tfrecord(p) for p in tricky_payloads()]
    path = _write(tmp_path / "tricky.tfrecord", b"".join(framed))
    size = path.stat().st_size
    _assert_ranges_deliver_each_record_once(TFRECORD, path, framed, split_ranges(size, 1), 64)


def test_text_align_skips_to_the_line_after_the_offset(tmp_path):
    path = _write(tmp_path / "lines.txt", b"ab\n\ncd\nef")
    with fsspec.open(str(path), "rb") as f:
        assert [TEXT.align(f, o) for o in range(11)] == [0, 3, 3, 3, 4, 7, 7, 7, 9, 9, 10]


def test_tfrecord_damaged_data_is_reported_with_the_record_offset(tmp_path):
    _, records = tfrecord_file(tmp_path, 12)
    path, start = _corrupted(tmp_path, records, 5, at=len(records[5]) - 5)
    with fsspec.open(str(path), "rb") as f, pytest.raises(CorruptRecordError) as caught:
        _read(TFRECORD, f, 0, path.stat().st_size)
    assert caught.value.offset == start
    assert str(caught.value) == f"{path}: data checksum mismatch at byte {start}"


@pytest.mark.parametrize(("what", "at"), [("data checksum", -5), ("header checksum", 2)])
def test_tfrecord_damage_is_reported_wherever_the_file_is_cut(tmp_path, what, at):
    _, records = tfrecord_file(tmp_path, 8)
    index = max(range(len(records)), key=lambda i: len(records[i]))
    path, start = _corrupted(tmp_path, records, index, at=at % len(records[index]))
    for errors in _errors_over_every_cut(TFRECORD, path):
        assert errors, "damage passed over silently"
        assert {(e.offset, e.what) for e in errors} == {(start, f"{what} mismatch at byte {start}")}


def test_tfrecord_resuming_at_a_damaged_record_reports_it(tmp_path):
    _, records = tfrecord_file(tmp_path, 12)
    path, start = _corrupted(tmp_path, records, 5, at=len(records[5]) - 5)
    with fsspec.open(str(path), "rb") as f, pytest.raises(CorruptRecordError, match="data checks"):
        _read(TFRECORD, f, start, path.stat().st_size, aligned=True)


@pytest.mark.parametrize(("kept", "detail"), [
    (5, "the file ends after 5 bytes, a record header takes 12"),
    (20, "header says 100 bytes (116 with framing), file ends after 20"),
    (115, "header says 100 bytes (116 with framing), file ends after 115"),
])
def test_tfrecord_truncated_file_is_reported_wherever_it_is_cut(tmp_path, kept, detail):
    records = [encode_tfrecord(bytes([i]) * 30) for i in range(4)]
    last = sum(map(len, records))
    content = b"".join(records) + encode_tfrecord(b"z" * 100)[:kept]
    path = _write(tmp_path / "truncated.tfrecord", content)
    expected = f"truncated record at byte {last}: {detail}"
    with fsspec.open(str(path), "rb") as f, pytest.raises(CorruptRecordError) as caught:
        _read(TFRECORD, f, 0, len(content))
    assert (caught.value.offset, caught.value.what) == (last, expected)
    for errors in _errors_over_every_cut(TFRECORD, path):
        assert errors, "truncation passed over silently"
        assert {(e.offset, e.what) for e in errors} == {(last, expected)}


def test_records_round_trip_through_another_fsspec_filesystem():
    url = f"memory://primus-test/{uuid.uuid4().hex}.tfrecord"
    assert write_tfrecords(url, [b"one", b"two", b"three"]) == 3
    try:
        with fsspec.open(url, "rb") as f:
            blocks = _read(TFRECORD, f, 4, 10**6)
    finally:
        fsspec.filesystem("memory").rm(url)
    assert blocks == [Block(encode_tfrecord(b"two") + encode_tfrecord(b"three"), 2, 59)]


def test_tfrecord_framing_uses_masked_crc32c():
    framed = encode_tfrecord(b"123456789")
    crc = 0xE3069283  # the published crc32c check value of b"123456789"
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) % 2**32
    assert framed[:8] == struct.pack("<Q", 9)
    assert framed[12:] == b"123456789" + struct.pack("<I", masked)


def test_split_ranges_covers_the_file_in_consecutive_chunks():
    assert split_ranges(10, None) == [(0, 10)]
    assert split_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert split_ranges(8, 4) == [(0, 4), (4, 8)]
    with pytest.raises(ValueError, match="chunk_size must be a positive number of bytes, got 0"):
        split_ranges(10, 0)


def test_unknown_format_name_lists_the_registered_ones():
    with pytest.raises(UnknownFormatError,
                       match=r"unknown record format 'avro'; registered formats: "
                             r"arrow, bytes, kafka, parquet, text, tfrecord, webdataset"):
        get_format("avro")


def test_registering_a_taken_name_is_refused():
    assert {"text", "bytes", "tfrecord"} <= set(FORMATS)
    with pytest.raises(ValueError, match="'bytes' is already registered"):
        register(BytesFormat())


# --- Formats offered by installed packages ------------------------------------------------------


def install_format_package(root: Path, entry: str, module: str) -> None:
    """An installed distribution (a dist-info directory on ``sys.path``) whose entry point
    ``entry`` in group ``primus.formats`` names something in ``pipe_rows.py``."""
    (root / "pipe_rows.py").write_text(module)
    info = root / "primus_pipe_rows-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: primus-pipe-rows\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text(f"[primus.formats]\n{entry}\n")


PIPE_ROWS = '''
from primus.data.formats import TextFormat

class PipeRows(TextFormat):
    """Lines, under another name: enough to show where a format comes from."""
    name = "pipe-rows"
'''


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The built-in formats only, and ``tmp_path`` on ``sys.path`` to install packages in."""
    monkeypatch.setattr(data_api, "FORMATS", dict(data_api.FORMATS))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("pipe_rows", None)  # each test installs its own


def test_a_format_offered_by_an_installed_package_is_found_by_name(fresh_registry: Path) -> None:
    install_format_package(fresh_registry, "pipe-rows = pipe_rows:PipeRows", PIPE_ROWS)

    fmt = get_format("pipe-rows")

    assert fmt.name == "pipe-rows" and get_format("pipe-rows") is fmt
    data = fresh_registry / "rows.txt"
    data.write_bytes(b"a|1\nb|2\n")
    with open(data, "rb") as f:
        assert [block.records for block in fmt.blocks(f, 0, 8)] == [2]


def test_an_unknown_format_is_refused_listing_the_installed_ones_too(
        fresh_registry: Path) -> None:
    install_format_package(fresh_registry, "pipe-rows = pipe_rows:PipeRows", PIPE_ROWS)

    with pytest.raises(UnknownFormatError) as caught:
        get_format("avro")

    assert str(caught.value) == ("unknown record format 'avro'; registered formats: arrow, "
                                 "bytes, kafka, parquet, pipe-rows, text, tfrecord, webdataset")


def test_an_entry_point_that_is_no_record_format_is_refused_naming_it(
        fresh_registry: Path) -> None:
    install_format_package(fresh_registry, "pipe-rows = pipe_rows:NOT_A_FORMAT",
                           "NOT_A_FORMAT = 42\n")

    with pytest.raises(DataError, match=r"entry point 'pipe_rows:NOT_A_FORMAT' \(group "
                                        r"primus.formats\) offers 42 as record format "
                                        r"'pipe-rows': expected a RecordFormat"):
        get_format("pipe-rows")


def test_a_tfrecord_length_past_the_end_of_the_file_is_a_truncated_record(tmp_path):
    length = struct.pack("<Q", 2**40)
    header = length + struct.pack("<I", masked_crc32c(length))
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(encode_tfrecord(b"one") + header + b"x" * 100)
    with fsspec.open(str(path), "rb") as f, pytest.raises(CorruptRecordError) as caught:
        _read(TFRECORD, f, 0, path.stat().st_size)
    assert caught.value.what == (f"truncated record at byte 19: header says {2**40} bytes "
                                 f"({2**40 + 16} with framing), file ends after 112")
