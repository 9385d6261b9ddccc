"""TFRecord framing a block at a time, in C (``_framing.c``): the per-record work of the
executor's reading and the trainer's splitting, without the interpreter's per-record cost.

A record is ``uint64 length | uint32 masked crc32c of the length | data | uint32 masked crc32c
of the data`` (little-endian), as TensorFlow writes it."""

from typing_extensions import Buffer

HEADER_MISMATCH: int
DATA_MISMATCH: int

def check_tfrecords(data: Buffer, limit: int, /) -> tuple[int, int, int, int]:
    """Walk the records of ``data`` that start before index ``limit``, checking both checksums
    of each, and stop at the first that is not whole in ``data`` or does not check.

    Returns ``(end, records, need, error)``: the index after the last whole record that
    checked, how many there were, the bytes from ``end`` that the record there needs (12, its
    header, when fewer are there), and 0, or :data:`HEADER_MISMATCH` or :data:`DATA_MISMATCH`
    for the record at ``end``."""

def split_tfrecords(data: Buffer, /) -> tuple[list[bytes], int]:
    """The data of each whole record at the start of ``data`` (its framing is not checked:
    the executor checked it), and the bytes those records take."""

def masked_crc32c(data: Buffer, /) -> int:
    """The masked CRC32C of ``data``, as TFRecord framing stores it."""

def crc_implementation() -> str:
    """``"sse4.2"`` where the CPU's CRC32C instruction is used, ``"table"`` otherwise."""

def set_crc_implementation(name: str, /) -> None:
    """Use ``"table"`` (always there) or ``"sse4.2"`` (where the CPU has it) from now on, in
    this process: for tests and comparisons; the fastest one is chosen at import."""
