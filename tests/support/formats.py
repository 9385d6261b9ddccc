"""Sample files of every record format, and how to read back the records a trainer received:
what the formats' contract suite (``tests/unit/test_format_contract.py``) runs against.

A new format adds its :class:`Sample` to :data:`SAMPLES`; the contract suite fails for a
registered format that has none.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from primus.data.formats import encode_tfrecord


def text_lines(count: int, seed: int) -> list[bytes]:
    """Lines of mixed lengths (empty ones, long ones), the last without its newline."""
    rng = random.Random(seed)
    lines = [b"x" * rng.choice([0, 0, 1, 5, 20, 80, 300]) + b"\n" for _ in range(count)]
    return [*lines, b"no newline at the end"] if count else []


def tricky_payloads() -> list[bytes]:
    """Record data that looks like framing: whole embedded records, fake headers, zero runs."""
    fake_header = struct.pack("<Q", 7) + encode_tfrecord(b"")[8:12]  # length 7, wrong crc
    valid_fake_header = encode_tfrecord(b"1234567")[:12] + b"not the data"
    return [
        b"",
        b"plain record",
        encode_tfrecord(b"embedded"),
        encode_tfrecord(b"one") + encode_tfrecord(b"two"),
        fake_header + b"junk",
        valid_fake_header,
        b"\x00" * 40,
        b"\x00\x00\x00\x00" + encode_tfrecord(b"\x00" * 9) + b"\x00" * 13,
        encode_tfrecord(b""),
        bytes(range(256)),
    ]


def tfrecord_payloads(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    tricky = tricky_payloads()
    return [rng.choice(tricky) if rng.random() < 0.4 else rng.randbytes(rng.randint(0, 200))
            for _ in range(count)]


def text_file(directory: Path, count: int = 60, seed: int = 1) -> tuple[Path, list[bytes]]:
    """A text file of ``count`` lines (and one without newline); its lines."""
    lines = text_lines(count, seed)
    path = directory / "lines.txt"
    path.write_bytes(b"".join(lines))
    return path, lines


def tfrecord_file(directory: Path, count: int = 40, seed: int = 2) -> tuple[Path, list[bytes]]:
    """A TFRecord file of ``count`` records; the records, framed as stored."""
    framed = [encode_tfrecord(p) for p in tfrecord_payloads(count, seed)]
    path = directory / "data.tfrecord"
    path.write_bytes(b"".join(framed))
    return path, framed


def bytes_file(directory: Path, count: int = 40) -> tuple[Path, list[object]]:
    """Raw bytes (a TFRecord file's); its content as one record, none when empty."""
    path, framed = tfrecord_file(directory, count)
    return path, [b"".join(framed)] if framed else []


def parquet_file(directory: Path, count: int = 40) -> tuple[Path, list[object]]:
    """A Parquet file of ``count`` rows (``n``, and a string of 300 bytes) in row groups of
    20; its ``n``."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    path = directory / "rows.parquet"
    pq.write_table(pa.table({"n": pa.array(range(count), pa.int64()),
                             "s": [f"{i:04d}" + "v" * 296 for i in range(count)]}),
                   path, row_group_size=20)
    return path, list(range(count))


def small_parquet_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of about 2 KiB: a row group of the sample comes in several, so that positions
    fall inside row groups."""
    monkeypatch.setattr("primus.data.parquet.BATCH_BYTES", 2048)


def arrow_file(directory: Path, count: int = 40) -> tuple[Path, list[object]]:
    """An Arrow IPC file in the stream form, as Hugging Face ``datasets`` keeps its tables:
    ``count`` rows (``n``, and a string of 300 bytes) in batches of 7 and an empty one; its
    ``n``."""
    import pyarrow as pa  # noqa: PLC0415

    path = directory / "rows.arrow"
    table = pa.table({"n": pa.array(range(count), pa.int64()),
                      "s": [f"{i:04d}" + "v" * 296 for i in range(count)]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=7):
            writer.write_batch(batch)
        writer.write_batch(pa.RecordBatch.from_pylist([], schema=table.schema))
    return path, list(range(count))


def small_arrow_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of about 1 KiB: a batch of the sample comes in several."""
    monkeypatch.setattr("primus.data.arrow.PIECE_BYTES", 1024)


def webdataset_file(directory: Path, count: int = 40, seed: int = 4
                    ) -> tuple[Path, list[object]]:
    """A WebDataset shard of ``count`` samples of one to three files each (of 0 to 1,500 bytes;
    one sample's names longer than a plain tar header holds, a directory entry between two
    samples); its samples as the reader gives them."""
    import tarfile  # noqa: PLC0415

    rng = random.Random(seed)
    samples: list[object] = []
    path = directory / "shard-000.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(count):
            key = f"train/{'long-' * 30 if i == 3 else ''}{i:06d}"
            sample: dict[str, object] = {"__key__": key}
            for extension in rng.sample(["jpg", "cls", "json", "seg.png"], rng.randint(1, 3)):
                data = rng.randbytes(rng.choice([0, 1, 511, 512, 513, 1500]))
                member = tarfile.TarInfo(f"{key}.{extension}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
                sample[extension] = data
            samples.append(sample)
            if i == 5:
                folder = tarfile.TarInfo("train/sub")
                folder.type = tarfile.DIRTYPE
                tar.addfile(folder)
    return path, samples


def webdataset_samples(data: bytes) -> list[object]:
    from primus.data.reader import _SPLIT_ALL  # noqa: PLC0415

    return _SPLIT_ALL["webdataset"](data)


def split_text(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def split_tfrecords(data: bytes) -> list[bytes]:
    """The framed records of TFRecord data (its framing trusted: the format checked it)."""
    records, pos = [], 0
    while pos < len(data):
        length = struct.unpack_from("<Q", data, pos)[0]
        records.append(data[pos:pos + 16 + length])
        pos += 16 + length
    return records


def parquet_rows(data: bytes) -> list[object]:
    from primus.data.reader import arrow_batches  # noqa: PLC0415

    return [value for batch in arrow_batches(io.BufferedReader(io.BytesIO(data)))  # type: ignore[arg-type]
            for value in batch.column("n").to_pylist()]


@dataclass(frozen=True)
class Sample:
    """How to make a file of a format and read back what a trainer of it receives.

    Attributes:
        make: a file of about ``count`` records in a directory; the file and its records.
        decode: the records in the bytes delivered (the blocks' data, joined).
        delimited: whether a block's ``records`` counts records (``bytes`` has none: a block
            is one record).
        small: makes the format's blocks small, where the reader's ``block_size`` does not
            (the contract wants many blocks from a small file).
    """

    make: Callable[[Path, int], tuple[Path, list[object]]]
    decode: Callable[[bytes], list[object]]
    delimited: bool = True
    small: Callable[[pytest.MonkeyPatch], None] | None = None


SAMPLES: dict[str, Sample] = {
    "text": Sample(text_file, split_text),  # type: ignore[arg-type]
    "tfrecord": Sample(tfrecord_file, split_tfrecords),  # type: ignore[arg-type]
    "bytes": Sample(bytes_file, lambda data: [data] if data else [], delimited=False),
    "parquet": Sample(parquet_file, parquet_rows, small=small_parquet_batches),
    "arrow": Sample(arrow_file, parquet_rows, small=small_arrow_pieces),
    "webdataset": Sample(webdataset_file, webdataset_samples),  # type: ignore[arg-type]
}
"""The sample of each format, by its registered name."""
