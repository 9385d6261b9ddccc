"""The C framing module (primus/data/_framing.c) against the reference CRC32C (google-crc32c)
and hand-made TFRecord blocks: each case where its walk stops, and why."""

import random
import struct

import google_crc32c
import pytest

from primus.data import _framing
from primus.data.formats import encode_tfrecord

IMPLEMENTATIONS = ["table"] + (["sse4.2"] if _framing.crc_implementation() == "sse4.2" else [])


@pytest.fixture(params=IMPLEMENTATIONS)
def crc_implementation(request):
    chosen = _framing.crc_implementation()
    _framing.set_crc_implementation(request.param)
    yield request.param
    _framing.set_crc_implementation(chosen)


def reference_masked_crc(data: bytes) -> int:
    crc = int.from_bytes(google_crc32c.Checksum(data).digest(), "big")
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) % 2**32


def test_masked_crc32c_matches_the_reference_at_every_length_and_alignment(crc_implementation):
    rng = random.Random(7)
    buffer = rng.randbytes(4096)
    for start in range(8):
        for length in [*range(0, 70), 255, 256, 1000, 4000]:
            data = buffer[start:start + length]
            assert _framing.masked_crc32c(memoryview(buffer)[start:start + length]) == \
                reference_masked_crc(data), (crc_implementation, start, length)


def test_an_unknown_crc_implementation_is_refused_naming_the_one_always_there():
    with pytest.raises(ValueError, match="CRC32C implementation 'neon' is not available here; "
                                         "'table' always is"):
        _framing.set_crc_implementation("neon")


def _block(*records: bytes) -> bytes:
    return b"".join(encode_tfrecord(r) for r in records)


def test_a_block_of_whole_records_is_checked_to_its_end(crc_implementation):
    data = _block(b"a" * 250, b"", b"b" * 3)
    assert _framing.check_tfrecords(bytearray(data), len(data)) == (len(data), 3, 12, 0)


def test_the_walk_stops_at_the_first_record_starting_at_or_after_the_limit():
    data = _block(b"one", b"two", b"three")
    assert _framing.check_tfrecords(data, 19) == (19, 1, 12, 0)
    assert _framing.check_tfrecords(data, 20) == (38, 2, 12, 0)
    assert _framing.check_tfrecords(data, 0) == (0, 0, 12, 0)


def test_a_record_cut_by_the_end_of_the_buffer_says_what_it_needs():
    data = _block(b"one", b"x" * 100)
    assert _framing.check_tfrecords(data[:-1], len(data)) == (19, 1, 116, 0)
    assert _framing.check_tfrecords(data[:25], len(data)) == (19, 1, 12, 0)
    assert _framing.check_tfrecords(b"", 10) == (0, 0, 12, 0)


def test_a_damaged_header_or_data_stops_the_walk_at_its_record(crc_implementation):
    data = bytearray(_block(b"one", b"two", b"three"))
    data[19 + 13] ^= 0x01  # the second record's data
    assert _framing.check_tfrecords(data, len(data)) == (19, 1, 12, _framing.DATA_MISMATCH)
    data = bytearray(_block(b"one", b"two"))
    data[19 + 2] ^= 0x01  # the second record's length
    assert _framing.check_tfrecords(data, len(data)) == (19, 1, 12, _framing.HEADER_MISMATCH)


def test_a_huge_length_with_a_matching_checksum_asks_for_more_and_does_not_overflow():
    length = struct.pack("<Q", 2**64 - 1)
    header = length + struct.pack("<I", reference_masked_crc(length))
    assert _framing.check_tfrecords(header + b"x" * 20, 100) == (0, 0, 2**64 - 1, 0)


def test_split_gives_the_data_of_the_whole_records_at_the_start():
    records = [random.Random(i).randbytes(i * 37) for i in range(20)]
    data = _block(*records)
    assert _framing.split_tfrecords(memoryview(data)) == (records, len(data))
    assert _framing.split_tfrecords(data[:-1]) == (records[:-1], len(data) - 16 - 19 * 37)
    assert _framing.split_tfrecords(b"") == ([], 0)
