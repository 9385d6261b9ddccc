"""A trainer for the data tests: copies every byte of its input, as soon as it is read, to
``RECORDS/<role>-<index>.<attempt>.out``; nothing sits in a userspace buffer, so what it was
fed before being killed is on disk.

    python data_trainer.py RECORDS [--delay SECONDS] [--read-size N] [--read-bytes N]
                                   [--early-index I] [--wait-go]
                                   [--hold-after N] [--slow-home PATH --slow-delay SECONDS]

``--delay``: sleep that long after each read of at most ``--read-size`` bytes (a slow
trainer); ``--read-bytes``: stop reading and exit 0 after about N bytes (a trainer that closes
its input early; with ``--early-index``, only the trainer of that index does); ``--wait-go``:
read nothing until ``RECORDS/GO`` exists (a trainer that lets its pipe fill while the test
changes the sources); ``--hold-after``: once N bytes are read, read
no more until ``RECORDS/GO`` exists (a stream that cannot end while the test changes it);
``--slow-home``: where ``PRIMUS_HOME`` is
that path (one host of the inventory), sleep ``--slow-delay`` instead (a straggler's host);
``--via-reader``: read through ``primus.data.reader`` (records or Arrow batches, whatever the
delivery) and write each record in its file's encoding (``--delay`` then paces every
``--read-size`` bytes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("records")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--read-bytes", type=int, default=-1)
    parser.add_argument("--early-index", type=int, default=-1)
    parser.add_argument("--read-size", type=int, default=16384)
    parser.add_argument("--wait-go", action="store_true")
    parser.add_argument("--hold-after", type=int, default=-1)
    parser.add_argument("--slow-home", default="")
    parser.add_argument("--slow-delay", type=float, default=0.0)
    parser.add_argument("--via-reader", action="store_true")
    args = parser.parse_args()
    if args.slow_home and os.environ.get("PRIMUS_HOME") == args.slow_home:
        args.delay = args.slow_delay
    go = os.path.join(args.records, "GO")

    def hold_until_go() -> None:
        while not os.path.exists(go):
            time.sleep(0.05)

    if args.wait_go:
        hold_until_go()
    env = os.environ
    if args.early_index >= 0 and int(env["PRIMUS_INDEX"]) != args.early_index:
        args.read_bytes = -1
    name = f"{env['PRIMUS_ROLE']}-{env['PRIMUS_INDEX']}.{env['PRIMUS_ATTEMPT']}"
    if args.via_reader:
        return read_through_the_library(args, name)
    fifo = env.get("PRIMUS_DATA_FIFO")
    source = os.open(fifo, os.O_RDONLY) if fifo else sys.stdin.fileno()
    out = os.open(os.path.join(args.records, f"{name}.out"),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    total = 0
    while chunk := os.read(source, args.read_size):
        os.write(out, chunk)
        total += len(chunk)
        if 0 <= args.read_bytes <= total:
            break
        if 0 <= args.hold_after <= total:
            hold_until_go()
        if args.delay:
            time.sleep(args.delay)
    with open(os.path.join(args.records, f"{name}.eof"), "w") as done:
        done.write(str(total))
    return 0


def read_through_the_library(args: argparse.Namespace, name: str) -> int:
    """Read with primus.data.reader (any delivery, shm included), writing each record as it
    comes in its file's encoding (a line, a TFRecord, an Arrow IPC stream of the batch), so
    the tests read it back as they read what a pipe delivered."""
    from primus.data.formats import encode_tfrecord
    from primus.data.reader import arrow_batches, records

    fmt = os.environ["PRIMUS_DATA_FORMAT"]
    out = os.open(os.path.join(args.records, f"{name}.out"),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    total = paced = 0
    if fmt in ("parquet", "arrow", "kafka"):
        import pyarrow as pa

        def encoded():
            for batch in arrow_batches():
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, batch.schema) as writer:
                    writer.write_batch(batch)
                yield sink.getvalue().to_pybytes()
        items = encoded()
    else:
        items = (encode_tfrecord(r) if fmt == "tfrecord" else r for r in records())
    for item in items:
        os.write(out, item)
        total += len(item)
        paced += len(item)
        if 0 <= args.read_bytes <= total:
            return 0
        if args.delay and paced >= args.read_size:
            paced = 0
            time.sleep(args.delay)
    with open(os.path.join(args.records, f"{name}.eof"), "w") as done:
        done.write(str(total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
