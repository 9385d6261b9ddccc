"""Benchmark: data injection — feed throughput against ``cat``, task claims per second against raw
etcd transactions, and scanning 100,000 files into tasks.

Against a private etcd on free loopback ports, in a temporary directory removed afterwards.

* **feed**: one feeder (``primus.data.feeder.feed``, the code an executor runs) writes every
  record of 8 files into a pipe read by a trainer that reads 1 MiB at a time and discards;
  beside it, interleaved, ``cat FILES | the same reader``. For text lines (mixed lengths, about
  100 bytes on average) and TFRecords (1 KiB records, both checksums verified). Two feeders:
  *memory*, whose tasks (whole files) come from a list (the feeder alone: reading, record
  framing, pipe writes, tracking what the trainer consumed), and *etcd*, whose tasks (64 MiB
  ranges) are claimed, checkpointed (every 10,000 records) and completed through etcd
  transactions, as an executor does. The files are read once before (page cache warm). Each run
  checks that the reader consumed every byte (the tests check the bytes themselves).
* **claims**: 8 executor processes, each with its own etcd connection and lease, claim and
  complete 4,000 empty tasks through the real transactions while an AM side in this process
  writes them ahead (1,024 pending at most) and follows their keys; beside it, one client's
  sequential single-key transactions (a create-if-absent put each), the raw rate.
* **shm**: TFRecords (250 B, 1 KiB and 64 KiB records) and text lines (100 B on average) fed
  by the *memory* feeder to a trainer that iterates the records with
  ``primus.data.reader.records`` through the pipe (``delivery: stdin``), and with ``records``
  or ``record_batches`` (a list per block) through shared memory (``delivery: shm``): records
  a second, the ratio (issue 42's target for records of 250 B or less with
  ``record_batches``: ≥ 2× the pipe, and ≤ 0.5× its trainer CPU per GB) and each side's CPU.
* **parquet**: 8 Parquet files in row groups of 64 Ki rows, of two kinds (an int64, a float64
  and a string of about 60 bytes; an int64, a float64 and an int32), fed by the *memory*
  feeder into trainers that read the Arrow batches with ``primus.data.reader.arrow_batches``
  and count their rows: one trainer through the pipe, one through shared memory, and two
  through shared memory, each fed half the files by its own feeder. The peer reads the same
  files with pyarrow (``ParquetFile.iter_batches``, its default of decoding on every core) in
  the process that counts the rows. Both sides are timed from the start of their iteration,
  after their imports (a trainer says it is ready before its feeder starts; the peer reads a
  file once first). Rows a second, the ratio (issue 42's targets: shm ≥ 0.8× the peer with
  one trainer, ≥ 1.5× with two), the ratio to pyarrow decoding on one thread
  (``use_threads=False``, as a feeder decodes), and the trainers' CPU per GB of files.
* **scan**: 100,000 files of 10 bytes in 100 directories, one glob; a fresh process (an AM's
  part: store connection, ledger, task writer, watch of the stream's keys) scans them and writes
  every task to etcd (the window of pending tasks lifted, so that all are written). It reports
  when the first 1,024 tasks (the AM's default window) and all were written, and its peak RSS.

Usage: ``python bench/bench_data.py [--only feed|shm|claims|parquet|scan] [--repeat 3]
[--size-mib 512]``; ``--quick`` for a smoke run of seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_submit import parse_args, wait_for_quiet
from rich.console import Console
from rich.table import Table

from primus.config.etcd import EtcdConfig
from primus.config.spec import SourceSpec, StreamSpec
from primus.data.api import Claim, get_format
from primus.data.deliveries import DELIVERIES
from primus.data.feeder import feed
from primus.data.formats import encode_tfrecord
from primus.data.tasks import StreamBoard, StreamLedger, TaskWriter
from primus.state.keys import AppKeys, StreamKeys
from primus.state.records import DataTask, TaskOwner
from primus.store.api import Coordinator, Op, Put, WatchEvent, key_missing
from primus.store.embedded import find_etcd_binary, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator

console = Console(width=150)

READER = "import sys\nr = sys.stdin.buffer.raw.read\nwhile r(1 << 20):\n    pass\n"
"""The trainer: reads stdin 1 MiB at a time and discards it."""

FILES = 8
WINDOW = 1024
"""The AM's window of pending tasks."""


# --- Set-up -------------------------------------------------------------------------------------


@contextmanager
def private_etcd() -> Iterator[tuple[Path, str]]:
    root = Path(tempfile.mkdtemp(prefix="primus-bench-data-"))
    process, info = start_etcd(root / "etcd" / "data", root / "etcd" / "etcd.log",
                               extra_args=("--quota-backend-bytes", str(8 << 30)))
    try:
        yield root, info.client_url
    finally:
        stop_pid(process.pid)
        shutil.rmtree(root, ignore_errors=True)


async def connect(url: str) -> EtcdCoordinator:
    return await EtcdCoordinator.connect(EtcdConfig(endpoints=(url,)))


def write_text_files(directory: Path, total: int) -> list[Path]:
    rng = random.Random(7)
    paths = []
    for i in range(FILES):
        lines: list[bytes] = []
        size = 0
        while size < total // FILES:
            line = b"%d\t" % len(lines) + b"x" * rng.randint(0, 190) + b"\n"
            lines.append(line)
            size += len(line)
        path = directory / f"part-{i}.txt"
        path.write_bytes(b"".join(lines))
        paths.append(path)
    return paths


def write_tfrecord_files(directory: Path, total: int) -> list[Path]:
    paths = []
    for i in range(FILES):
        records = [encode_tfrecord(os.urandom(1024)) for _ in range(total // FILES // 1040)]
        path = directory / f"part-{i}.tfrecord"
        path.write_bytes(b"".join(records))
        paths.append(path)
    return paths


def reap(process: subprocess.Popen[bytes]) -> float:
    """Wait for ``process``; the CPU seconds it used. Raises if it failed."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- Feed ---------------------------------------------------------------------------------------


class ListSource:
    """Tasks from a list (whole files); progress discarded."""

    def __init__(self, paths: list[Path]) -> None:
        self.claims = deque(Claim(DataTask(epoch=1, seq=i, path=str(p), start=0,
                                           end=p.stat().st_size, size=p.stat().st_size), 0)
                            for i, p in enumerate(paths))

    async def next(self) -> Claim | None:
        return self.claims.popleft() if self.claims else None

    async def checkpoint(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        pass

    async def complete(self, claim: Claim, records: int, nbytes: int) -> None:
        pass

    async def fail(self, claim: Claim, error: str) -> None:
        raise RuntimeError(error)

    async def release(self, claim: Claim, offset: int, records: int, nbytes: int) -> None:
        raise RuntimeError("released: the reader stopped early")


class BoardSource:
    """An executor's board, until it has claimed every task (no AM writes ``end`` here)."""

    def __init__(self, board: StreamBoard, tasks: int) -> None:
        self.board, self.left = board, tasks

    async def next(self) -> Claim | None:
        if self.left == 0:
            return None
        self.left -= 1
        return await self.board.next()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.board, name)


async def write_all_tasks(store: Coordinator, keys: StreamKeys, stream: StreamSpec) -> int:
    async def write(ops: list[Op], compares: list[Any]) -> bool:
        return (await store.txn(compares, ops)).succeeded

    ledger = StreamLedger(store, keys, stream, write)
    await ledger.load()
    writer = asyncio.ensure_future(TaskWriter(ledger).run())
    while not (ledger.scan.complete and not ledger.unwritten_sources):  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # the writer signals nothing once it has written all
    writer.cancel()  # it waits for sources added at run time until cancelled
    with contextlib.suppress(asyncio.CancelledError):
        await writer
    return ledger.stats.tasks


async def feed_once(paths: list[Path], fmt: str, url: str | None,
                    run: int) -> tuple[float, float, float, int]:
    """One feeder run: seconds, CPU seconds of the feeder (this process) and of the reader,
    bytes the reader consumed."""
    store = board = None
    if url is None:
        source: Any = ListSource(paths)
    else:
        store = await connect(url)
        keys = AppKeys("/bench", f"feed-{fmt}-{run}").stream("train")
        stream = StreamSpec(name="train", roles=["worker"], format=fmt, chunk_size=64 << 20,
                            sources=[SourceSpec(path=str(paths[0].parent / f"*{paths[0].suffix}"))])
        tasks = await write_all_tasks(store, keys, stream)
        lease = await store.grant_lease(120)
        board = StreamBoard(store, keys, stream, TaskOwner(role="worker", index=0, attempt=1,
                                                            since=time.time()),
                            lease.id, asyncio.Event())
        source = BoardSource(board, tasks)
    read_end, write_end = os.pipe()
    trainer = subprocess.Popen([sys.executable, "-c", READER], stdin=read_end)
    os.close(read_end)
    started, cpu = time.perf_counter(), own_cpu()
    result = await feed(write_end, source, get_format(fmt), checkpoint_records=10_000,
                        checkpoint_interval=5.0, prefetch=1)
    reader_cpu = reap(trainer)
    seconds, cpu = time.perf_counter() - started, own_cpu() - cpu
    if store is not None:
        await store.close()
    return seconds, cpu, reader_cpu, result.bytes


def cat_once(paths: list[Path]) -> tuple[float, float, float]:
    """``cat PATHS | reader``: seconds, CPU seconds of cat and of the reader."""
    started = time.perf_counter()
    cat = subprocess.Popen(["cat", *map(str, paths)], stdout=subprocess.PIPE)
    reader = subprocess.Popen([sys.executable, "-c", READER], stdin=cat.stdout)
    assert cat.stdout is not None
    cat.stdout.close()
    cat_cpu, reader_cpu = reap(cat), reap(reader)
    return time.perf_counter() - started, cat_cpu, reader_cpu


def bench_feed(root: Path, url: str, size: int, repeat: int) -> Table:
    table = Table(title=f"Feed throughput: one feeder into a reader that discards, {FILES} files "
                        f"of {size // FILES >> 20} MiB each (page cache warm)")
    for column in ("format", "feeder", "primus MB/s", "cat MB/s", "primus / cat", "target",
                   "feeder CPU s", "cat CPU s", "reader CPU s", "reader CPU s / GB"):
        table.add_column(column, justify="left" if column in ("format", "feeder") else "right")
    for fmt, make in (("text", write_text_files), ("tfrecord", write_tfrecord_files)):
        directory = root / fmt
        directory.mkdir()
        paths = make(directory, size)
        total = sum(p.stat().st_size for p in paths)
        for path in paths:  # into the page cache
            path.read_bytes()
        for feeder in ("memory", "etcd"):
            primus, cat, primus_cpu, cat_cpu, primus_reader, cat_reader = ([] for _ in range(6))
            for run in range(repeat):
                wait_for_quiet()
                seconds, cpu, reader = cat_once(paths)
                cat.append(seconds)
                cat_cpu.append(cpu)
                cat_reader.append(reader)
                wait_for_quiet()
                seconds, cpu, reader, fed = asyncio.run(feed_once(
                    paths, fmt, None if feeder == "memory" else url, run))
                if fed != total:
                    raise RuntimeError(f"{fmt}/{feeder}: the trainer consumed {fed} bytes of "
                                       f"{total}")
                primus.append(seconds)
                primus_cpu.append(cpu)
                primus_reader.append(reader)
            p, c = statistics.median(primus), statistics.median(cat)
            med = statistics.median
            table.add_row(fmt, feeder, f"{total / p / 1e6:,.0f}", f"{total / c / 1e6:,.0f}",
                          f"{c / p:.2f}×", "≥ 0.8×", f"{med(primus_cpu):.2f}",
                          f"{med(cat_cpu):.2f}",
                          f"{med(primus_reader):.2f} / {med(cat_reader):.2f}",
                          f"{med(primus_reader) / total * 1e9:.2f}")
        shutil.rmtree(directory)
    return table


# --- Shared memory against the pipe -------------------------------------------------------------

RECORDS_READER = """
import os
from primus.data.reader import records
print(sum(1 for _ in records(os.environ["PRIMUS_DATA_FORMAT"])))
"""
"""The trainer of the shm part: iterates the records with the reader library (a bytes
stream's records are its blocks)."""

BATCHES_READER = """
import os
from primus.data.reader import record_batches
print(sum(len(batch) for batch in record_batches(os.environ["PRIMUS_DATA_FORMAT"])))
"""
"""The same, taking the records a block at a time (``record_batches``)."""

SHM_ROWS = (("tfrecord", 250, "records"), ("tfrecord", 250, "record_batches"),
            ("text", 100, "records"), ("text", 100, "record_batches"),
            ("tfrecord", 1024, "records"), ("tfrecord", 64 << 10, "records"),
            ("bytes", 64 << 10, "records"))
"""The shm part's rows: format, record size (a line's mean), the reader's function through
shared memory. Through the pipe the trainer always iterates ``records()``: the honest peer is
what a trainer reading a pipe record by record does."""


def write_sized_tfrecords(directory: Path, total: int, size: int) -> tuple[list[Path], int]:
    """TFRecord files of about ``total`` bytes of records of ``size`` bytes; the paths and
    the records in all."""
    paths, count = [], max(total // FILES // (size + 16), 1)
    for i in range(FILES):
        path = directory / f"part-{i}.tfrecord"
        with open(path, "wb") as f:
            for _ in range(count):
                f.write(encode_tfrecord(random.randbytes(size)))
        paths.append(path)
    return paths, count * FILES


def write_sized_lines(directory: Path, total: int, size: int) -> tuple[list[Path], int]:
    """Text files of about ``total`` bytes of lines of ``size`` bytes on average (from 2 to
    2 × size - 2); the paths and the lines in all."""
    rng = random.Random(5)
    paths, count = [], 0
    for i in range(FILES):
        lines, written = [], 0
        while written < total // FILES:
            line = b"x" * rng.randint(1, 2 * size - 3) + b"\n"
            lines.append(line)
            written += len(line)
        path = directory / f"part-{i}.txt"
        path.write_bytes(b"".join(lines))
        paths.append(path)
        count += len(lines)
    return paths, count


def bench_shm(root: Path, size: int, repeat: int) -> Table:
    table = Table(title=f"Shared memory against the pipe: {FILES} files of "
                        f"{size // FILES >> 20} MiB each, iterated by primus.data.reader "
                        "(page cache warm)")
    for column in ("files read as", "shm read with", "pipe records/s", "shm records/s",
                   "shm / pipe", "target", "trainer CPU s / GB: pipe, shm", "shm / pipe CPU",
                   "CPU s, pipe: feeder + trainer", "CPU s, shm: feeder + trainer"):
        table.add_column(column, justify="left" if column.endswith(("as", "with")) else "right")
    pipes: dict[tuple[str, int], tuple[list[float], list[float], list[float]]] = {}
    for fmt, record_size, reader in SHM_ROWS:
        directory = root / f"shm-{fmt}-{record_size}"
        if not directory.exists():  # the previous row's, when it read the same files
            directory.mkdir()
        paths, count = (write_sized_lines if fmt == "text" else write_sized_tfrecords)(
            directory, size, record_size)
        total = sum(p.stat().st_size for p in paths)
        for path in paths:  # into the page cache
            path.read_bytes()
        shm: tuple[list[float], list[float], list[float]] = ([], [], [])
        pipe = pipes.setdefault((fmt, record_size), ([], [], []))
        measured = [("shm", BATCHES_READER if reader == "record_batches" else RECORDS_READER,
                     shm)]
        if not pipe[0]:
            measured.insert(0, ("stdin", RECORDS_READER, pipe))
        for _ in range(repeat):
            for delivery, code, (seconds, feeder, trainer) in measured:
                wait_for_quiet()
                took, feeder_cpu, reader_cpu, read = asyncio.run(
                    feed_counted_once(paths, code, fmt, delivery))
                if fmt != "bytes" and read != count:
                    raise RuntimeError(f"{delivery}: the trainer read {read} records of {count}")
                seconds.append(took)
                feeder.append(feeder_cpu)
                trainer.append(reader_cpu)
        med = statistics.median
        piped, shared = med(pipe[0]), med(shm[0])
        records_in = count if fmt != "bytes" else total // (1 << 20)
        gigabytes = total / 1e9
        kind = {"tfrecord": f"{record_size:,} B TFRecords", "text": f"lines of {record_size} B",
                "bytes": f"{record_size >> 10} KiB TFRecords as format: bytes (blocks, no "
                         "record checks)"}[fmt]
        small = record_size <= 250 and reader == "record_batches"
        table.add_row(kind, f"{reader}()", f"{records_in / piped:,.0f}",
                      f"{records_in / shared:,.0f}", f"{piped / shared:.2f}×",
                      "≥ 2×" if small else "", f"{med(pipe[2]) / gigabytes:.2f}, "
                      f"{med(shm[2]) / gigabytes:.2f}",
                      f"{med(shm[2]) / med(pipe[2]):.2f}×" + (" (≤ 0.5×)" if small else ""),
                      f"{med(pipe[1]):.2f} + {med(pipe[2]):.2f}",
                      f"{med(shm[1]):.2f} + {med(shm[2]):.2f}")
        if reader == "record_batches" or (fmt, record_size, "record_batches") not in SHM_ROWS:
            shutil.rmtree(directory)
    return table


# --- Claims -------------------------------------------------------------------------------------


def claimer(url: str, root: str, index: int, ready: Any, go: Any, out: Any) -> None:
    async def main() -> None:
        store = await connect(url)
        keys = AppKeys("/bench", "claims").stream("train")
        stream = claims_stream(root)
        lease = await store.grant_lease(120)
        board = StreamBoard(store, keys, stream, TaskOwner(role="worker", index=index, attempt=1,
                                                            since=time.time()),
                            lease.id, asyncio.Event())
        ready.release()
        go.wait()
        done = 0
        started = time.perf_counter()
        while (claim := await board.next()) is not None:
            await board.complete(claim, 0, 0)
            done += 1
        out.put((index, done, time.perf_counter() - started))
        await store.revoke_lease(lease.id)
        await store.close()

    asyncio.run(main())


def claims_stream(root: str) -> StreamSpec:
    return StreamSpec(name="train", roles=["worker"], chunk_size=1,
                      sources=[SourceSpec(path=f"{root}/claims/tasks.bin")],
                      checkpoint_interval=60)


async def follow_and_write(url: str, root: str, started: Any) -> tuple[int, int]:
    """The AM side of the claims run: write the tasks ahead, follow the keys, write ``end``;
    returns (tasks, done)."""
    store = await connect(url)
    keys = AppKeys("/bench", "claims").stream("train")
    stream = claims_stream(root)

    async def write(ops: list[Op], compares: list[Any]) -> bool:
        return (await store.txn(compares, ops)).succeeded

    ledger = StreamLedger(store, keys, stream, write)
    await ledger.load()
    writer = asyncio.ensure_future(TaskWriter(ledger).run())
    await started  # the claimers begin once the first window is written
    async for event in store.watch_prefix(keys.root, ledger.revision + 1):
        if isinstance(event, WatchEvent):
            ledger.observe(event)
        if ledger.resolved:
            await write([Put(keys.end, b"")], [key_missing(keys.end)])
            break
    writer.cancel()  # it waits for sources added at run time until cancelled
    with contextlib.suppress(asyncio.CancelledError):
        await writer
    stats = ledger.stats
    await store.close()
    return stats.tasks, stats.done


async def raw_txns(url: str, count: int) -> float:
    store = await connect(url)
    started = time.perf_counter()
    for i in range(count):
        key = f"/bench/raw/{i:08d}"
        await store.txn([key_missing(key)], [Put(key, b"")])
    seconds = time.perf_counter() - started
    await store.close()
    return count / seconds


def bench_claims(root: Path, url: str, executors: int, count: int) -> Table:
    (root / "claims").mkdir()
    (root / "claims" / "tasks.bin").write_bytes(b"x" * count)
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=claimer, args=(url, str(root), i, ready, go, out))
               for i in range(executors)]
    for worker in workers:
        worker.start()
    for _ in workers:
        if not ready.acquire(timeout=60):
            raise RuntimeError("an executor process did not connect")
    wait_for_quiet()
    raw = asyncio.run(raw_txns(url, count // 2))

    async def run() -> tuple[int, int, float]:
        loop = asyncio.get_running_loop()
        started = loop.create_future()
        am = asyncio.ensure_future(follow_and_write(url, str(root), started))
        begin = time.perf_counter()
        started.set_result(None)
        go.set()
        tasks, done = await am
        return tasks, done, time.perf_counter() - begin

    wait_for_quiet()
    tasks, done, seconds = asyncio.run(run())
    results = [out.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    claimed = sum(r[1] for r in results)
    if not tasks == done == claimed == count:
        raise RuntimeError(f"tasks {tasks}, done {done}, claimed {claimed}: expected "
                           f"{count} each")
    table = Table(title=f"Task claims: {executors} executor processes, {count} tasks "
                        "claimed and completed through etcd")
    for column in ("figure", "value"):
        table.add_column(column)
    rate = count / seconds
    table.add_row("claims (+ completes) per second, all executors", f"{rate:,.0f}")
    table.add_row("per executor", ", ".join(f"{r[1]}" for r in sorted(results)) + " tasks")
    table.add_row("raw: one client's sequential single-key txns / s", f"{raw:,.0f}")
    table.add_row("claims / raw txn rate", f"{rate / raw:.2f}×")
    table.add_row("every task done exactly once", f"{done} done of {tasks}")
    return table


# --- Parquet ------------------------------------------------------------------------------------


PARQUET_READER = """
import sys, time
import pyarrow
from primus.data.reader import arrow_batches
print("ready", flush=True)
started = time.perf_counter()
rows = sum(batch.num_rows for batch in arrow_batches())
print(rows, time.perf_counter() - started, flush=True)
"""
"""The trainer of the Parquet part: once imported, says so and waits for the stream; counts
the rows of its Arrow batches and times its own iteration (the peer's way)."""

PYARROW_READER = """
import sys, time
import pyarrow.parquet as pq
threads, paths = sys.argv[1] == "threads", sys.argv[2:]
for batch in pq.ParquetFile(paths[0]).iter_batches(use_threads=threads):  # warmed
    pass
started = time.perf_counter()
rows = sum(batch.num_rows for path in paths
           for batch in pq.ParquetFile(path).iter_batches(use_threads=threads))
print(rows, time.perf_counter() - started)
"""
"""The peer: pyarrow reading the same files in the process that uses them, warmed, timed
from the start of its iteration: with its default of decoding on every core (the peer the
targets name) and on one thread (what one executor's feeder decodes with)."""


def write_parquet_files(directory: Path, total: int, kind: str = "strings"
                        ) -> tuple[list[Path], int]:
    """Parquet files of about ``total`` uncompressed bytes; the paths and the rows in all.
    ``strings``: an int64, a float64 and a string of about 60 bytes a row; ``numeric``: an
    int64, a float64 and an int32."""
    import pyarrow as pa  # noqa: PLC0415 - only this part needs it
    import pyarrow.parquet as pq  # noqa: PLC0415

    rows = max(total // FILES // (76 if kind == "strings" else 20), 1)
    rng = random.Random(11)
    paths = []
    for i in range(FILES):
        numbers = pa.array(range(i * rows, (i + 1) * rows), pa.int64())
        floats = pa.array([rng.random() for _ in range(rows)], pa.float64())
        third = [f"row {n} " + "y" * (n % 100) for n in range(rows)] if kind == "strings" \
            else pa.array([n % 1000 for n in range(rows)], pa.int32())
        path = directory / f"part-{i}.parquet"
        pq.write_table(pa.table({"n": numbers, "x": floats, "text" if kind == "strings"
                                 else "k": third}), path, row_group_size=64 << 10)
        paths.append(path)
    return paths, rows * FILES


def counted(process: subprocess.Popen[bytes]) -> tuple[float, int]:
    """Wait for a reader that prints its row count: its CPU seconds and the count."""
    assert process.stdout is not None
    count = int(process.stdout.read())
    return reap(process), count


def start_trainer(code: str, delivery: str, fmt: str,
                  stdout: int | None = None) -> tuple[subprocess.Popen[bytes], Any]:
    """A trainer running ``code``, its records delivered by ``delivery`` as the executor
    prepares it; the process and what the feeder writes into."""
    prepared = DELIVERIES[delivery].prepare(tempfile.gettempdir(), "bench")
    trainer = subprocess.Popen([sys.executable, "-c", code], stdin=prepared.stdin,
                               stdout=stdout, pass_fds=prepared.pass_fds,
                               env={**os.environ, **prepared.env, "PRIMUS_DATA_FORMAT": fmt})
    prepared.started()
    return trainer, prepared.target


async def feed_counted_once(paths: list[Path], trainer_code: str, fmt: str, delivery: str
                            ) -> tuple[float, float, float, int]:
    """The memory feeder into a trainer that prints what it counted (records, rows):
    seconds, feeder CPU, trainer CPU, the count."""
    trainer, target = start_trainer(trainer_code, delivery, fmt, subprocess.PIPE)
    started, cpu = time.perf_counter(), own_cpu()
    await feed(target, ListSource(paths), get_format(fmt), checkpoint_records=10_000,
               checkpoint_interval=5.0, prefetch=1)
    reader_cpu, count = counted(trainer)
    return time.perf_counter() - started, own_cpu() - cpu, reader_cpu, count


def pyarrow_once(paths: list[Path], threads: bool = True) -> tuple[float, float, int]:
    """pyarrow reading the files itself: its own seconds, its CPU, rows."""
    reader = subprocess.Popen([sys.executable, "-c", PYARROW_READER,
                               "threads" if threads else "one", *map(str, paths)],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout is not None
    rows, seconds = reader.stdout.read().split()
    return float(seconds), reap(reader), int(rows)  # type: ignore[arg-type]


async def parquet_trainers_once(shares: list[list[Path]], delivery: str
                                ) -> tuple[float, float, float, int]:
    """One trainer per share of the files, each fed by its own feeder (this process's
    threads: pyarrow decodes without the GIL), started once every trainer is imported: the
    seconds of the slowest trainer's own iteration, the feeders' CPU, the trainers', rows."""
    trainers = [start_trainer(PARQUET_READER, delivery, "parquet", subprocess.PIPE)
                for _ in shares]
    for trainer, _ in trainers:
        assert trainer.stdout is not None and trainer.stdout.readline().strip() == b"ready"
    cpu = own_cpu()
    await asyncio.gather(*(feed(target, ListSource(share), get_format("parquet"),
                                checkpoint_records=10_000, checkpoint_interval=5.0, prefetch=1)
                           for (_, target), share in zip(trainers, shares, strict=True)))
    feeder_cpu = own_cpu() - cpu
    seconds, trainer_cpu, rows = 0.0, 0.0, 0
    for trainer, _ in trainers:
        assert trainer.stdout is not None
        counted_rows, own = trainer.stdout.read().split()
        seconds, rows = max(seconds, float(own)), rows + int(counted_rows)
        trainer_cpu += reap(trainer)  # type: ignore[arg-type]
    return seconds, feeder_cpu, trainer_cpu, rows


PARQUET_RUNS = (("stdin", 1), ("shm", 1), ("shm", 2))
"""The Primus runs of the Parquet part: the delivery, and how many trainers share the files."""


def bench_parquet(root: Path, size: int, repeat: int) -> list[Table]:
    tables = []
    for kind in ("strings", "numeric"):
        directory = root / f"parquet-{kind}"
        directory.mkdir()
        paths, rows = write_parquet_files(directory, size, kind)
        for path in paths:  # into the page cache
            path.read_bytes()
        peers: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
        runs: dict[tuple[str, int], tuple[list[float], list[float], list[float]]] = {
            run: ([], [], []) for run in PARQUET_RUNS}
        for _ in range(repeat):
            for threads, (peer_seconds, peer_cpu) in peers.items():
                wait_for_quiet()
                seconds, cpu, rows_read = pyarrow_once(paths, threads)
                if rows_read != rows:
                    raise RuntimeError(f"pyarrow read {rows_read} rows of {rows}")
                peer_seconds.append(seconds)
                peer_cpu.append(cpu)
            for (delivery, trainers), (primus, feeder_cpu, reader_cpu) in runs.items():
                wait_for_quiet()
                shares = [paths[i::trainers] for i in range(trainers)]
                seconds, cpu, reader, rows_read = asyncio.run(
                    parquet_trainers_once(shares, delivery))
                if rows_read != rows:
                    raise RuntimeError(f"the trainers read {rows_read} rows of {rows} "
                                       f"({delivery}, {trainers})")
                primus.append(seconds)
                feeder_cpu.append(cpu)
                reader_cpu.append(reader)
        tables.append(parquet_table(kind, paths, rows, peers, runs))
        shutil.rmtree(directory)
    return tables


def parquet_table(kind: str, paths: list[Path], rows: int,
                  peers: dict[bool, tuple[list[float], list[float]]],
                  runs: dict[tuple[str, int], tuple[list[float], list[float], list[float]]]
                  ) -> Table:
    med = statistics.median
    q, one = med(peers[True][0]), med(peers[False][0])
    columns = "an int64, a float64, a string" if kind == "strings" else \
        "an int64, a float64, an int32"
    table = Table(title=f"Parquet: {rows:,} rows ({columns}) in {FILES} files of "
                        f"{sum(x.stat().st_size for x in paths) // FILES >> 20} MiB, as Arrow "
                        "batches, against pyarrow in the reading process (warmed; each timed "
                        "from the start of its iteration)")
    gigabytes = sum(x.stat().st_size for x in paths) / 1e9
    for column in ("reader", "rows/s", "÷ pyarrow", "target", "÷ pyarrow on one thread",
                   "CPU s (feeder + trainer)", "trainer CPU s / GB of files"):
        table.add_column(column, justify="left" if column == "reader" else "right")
    for (delivery, trainers), (primus, feeder_cpu, reader_cpu) in runs.items():
        p = med(primus)
        table.add_row(f"primus: {trainers} × feeder → {'pipe' if delivery == 'stdin' else 'shm'}"
                      f" → arrow_batches", f"{rows / p:,.0f}", f"{q / p:.2f}×",
                      "" if delivery == "stdin" else "≥ 0.8×" if trainers == 1 else "≥ 1.5×",
                      f"{one / p:.2f}×", f"{med(feeder_cpu):.2f} + {med(reader_cpu):.2f}",
                      f"{med(reader_cpu) / gigabytes:.2f}")
    table.add_row("pyarrow: ParquetFile.iter_batches, in process", f"{rows / q:,.0f}", "1.00×",
                  "", f"{one / q:.2f}×", f"{med(peers[True][1]):.2f} (the process)", "")
    table.add_row("pyarrow: the same, use_threads=False", f"{rows / one:,.0f}", f"{q / one:.2f}×",
                  "", "1.00×", f"{med(peers[False][1]):.2f} (the process)", "")
    return table


# --- Scan ---------------------------------------------------------------------------------------


SCANNER = r"""
import asyncio, json, sys, time
import primus.data.tasks as tasks_module
from primus.config.spec import SourceSpec, StreamSpec
from primus.data.tasks import StreamLedger, TaskWriter
from primus.state.keys import AppKeys
from primus.config.etcd import EtcdConfig
from primus.store.api import WatchEvent
from primus.store.etcd_store import EtcdCoordinator

def rss_mb():
    # The high-water mark of this process's own memory (ru_maxrss would carry the parent's
    # over the fork and exec).
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024

async def main(url, pattern):
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(url,)))
    keys = AppKeys("/bench", "scan").stream("train")
    stream = StreamSpec(name="train", roles=["worker"], sources=[SourceSpec(path=pattern)])
    async def write(ops, compares):
        return (await store.txn(compares, ops)).succeeded
    ledger = StreamLedger(store, keys, stream, write)
    await ledger.load()
    before = rss_mb()
    tasks_module.AHEAD = 10**9  # every task written at once
    first = None
    async def follow():
        async for event in store.watch_prefix(keys.root, ledger.revision + 1):
            if isinstance(event, WatchEvent):
                ledger.observe(event)
    watcher = asyncio.ensure_future(follow())
    started = time.perf_counter()
    writer = asyncio.ensure_future(TaskWriter(ledger).run())
    while True:
        if first is None and ledger.stats.tasks >= window:
            first = time.perf_counter() - started
        if ledger.scan.complete and not ledger.unwritten_sources:
            break
        await asyncio.sleep(0.01)
    writer.cancel()  # it waits for sources added at run time until cancelled
    try:
        await writer
    except asyncio.CancelledError:
        pass
    seconds = time.perf_counter() - started
    watcher.cancel()
    print(json.dumps({"tasks": ledger.stats.tasks, "first": first, "all": seconds,
                      "rss_before": before, "rss_peak": rss_mb()}))

window = int(sys.argv[3])
asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def bench_scan(root: Path, url: str, count: int) -> Table:
    """Scan ``count`` files in 100 directories (a multiple of 100) into tasks in etcd."""
    data = root / "scan"
    window = min(WINDOW, count)
    started = time.perf_counter()
    for d in range(100):
        directory = data / f"d{d:03d}"
        directory.mkdir(parents=True)
        for f in range(count // 100):
            (directory / f"f{f:05d}.txt").write_bytes(b"0123456789")
    created = time.perf_counter() - started
    wait_for_quiet()
    done = subprocess.run([sys.executable, "-c", SCANNER, url, f"{data}/*/*.txt", str(window)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the scan failed:\n{done.stderr}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["tasks"] != count:
        raise RuntimeError(f"{figures['tasks']} tasks written for {count} files")
    table = Table(title=f"Scanning {count:,} files ({created:.0f} s to create) into tasks "
                        "in etcd, in a fresh process")
    for column in ("figure", "value", "target"):
        table.add_column(column)
    table.add_row(f"first {window:,} tasks written (the AM's window: {WINDOW:,})",
                  f"{figures['first']:.2f} s", "")
    table.add_row(f"all {count:,} tasks written", f"{figures['all']:.1f} s", "≤ 60 s")
    table.add_row("RSS after imports and connecting", f"{figures['rss_before']:.0f} MB", "")
    table.add_row("peak RSS", f"{figures['rss_peak']:.0f} MB", "≤ 300 MB")
    return table


# --- Main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("feed", "shm", "claims", "parquet", "scan"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=512,
                        help="bytes of each format fed per run (default 512 MiB)")
    parser.add_argument("--claimers", type=int, default=8,
                        help="executor processes claiming tasks (default 8)")
    parser.add_argument("--claims", type=int, default=4000,
                        help="tasks claimed and completed (default 4000)")
    parser.add_argument("--scan-files", type=int, default=100_000,
                        help="files scanned into tasks, a multiple of 100 (default 100000)")
    args = parse_args(parser, argv, repeat=1, size_mib=8, claimers=2, claims=40,
                      scan_files=200)
    etcd_version = subprocess.run([str(find_etcd_binary()), "--version"], capture_output=True,
                                  text=True, check=False).stdout.splitlines()[0]
    console.print(f"{os.cpu_count()} cores, Python {platform.python_version()}, {etcd_version}")
    with private_etcd() as (root, url):
        if args.only in (None, "feed"):
            console.print(bench_feed(root, url, args.size_mib << 20, args.repeat))
        if args.only in (None, "shm"):
            console.print(bench_shm(root, args.size_mib << 20, args.repeat))
        if args.only in (None, "claims"):
            console.print(bench_claims(root, url, args.claimers, args.claims))
        if args.only in (None, "parquet"):
            for table in bench_parquet(root, args.size_mib << 20, args.repeat):
                console.print(table)
        if args.only in (None, "scan"):
            console.print(bench_scan(root, url, args.scan_files))


if __name__ == "__main__":
    main()
