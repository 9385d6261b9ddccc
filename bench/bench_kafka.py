"""Benchmark: reading a Kafka topic through Primus's feeder against a raw confluent-kafka
consumer of the same partitions (issue 41).

A tansu broker (``tests/support/kafka.py``; no Apache Kafka runs here) on a free loopback
port holds a topic of 8 partitions, filled once per value size (100 B and 1 KiB values, about
``--size-mib`` of values each). Then, interleaved, ``--repeat`` times:

* **raw**: a process that ``assign``\\ s the 8 partitions from their first offset and
  consumes them with ``Consumer.consume`` in batches of 10,000 until every partition's end,
  touching each message's value (its length) and counting them: the floor.
* **primus**: the feeder an executor runs (``primus.data.feeder.feed``) with one task per
  partition (``KafkaTaskReader``: assign, consume, Arrow batches), into a trainer that counts
  the values with ``primus.data.reader.records()``, through the pipe and through shared memory.
  The tasks come from a list (no etcd): what is measured is the data plane.

Records/s and MB/s of values, the ratio to the raw consumer (issue 41's target: ≥ 0.8×) and the
CPU of each side. Every run checks that every message was counted.

Usage: ``python bench/bench_kafka.py [--repeat 3] [--size-mib 256]``; ``--quick`` for a smoke
run of seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the test broker lives in tests/support/kafka.py

from bench_data import ListSource  # noqa: E402
from bench_submit import parse_args, wait_for_quiet  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from primus.data.api import Claim, get_format  # noqa: E402
from primus.data.deliveries import DELIVERIES  # noqa: E402
from primus.data.feeder import feed  # noqa: E402
from primus.data.kafka import PROFILES_ENV, partition_url  # noqa: E402
from primus.state.records import DataTask  # noqa: E402
from tests.support.kafka import Broker, start_broker, tansu_binary, write_profiles  # noqa: E402

console = Console(width=150)

PARTITIONS = 8

RAW = r"""
import sys, time
from confluent_kafka import Consumer, TopicPartition
servers, topic, partitions, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
started = time.perf_counter()
consumer = Consumer({"bootstrap.servers": servers, "group.id": "raw", "enable.auto.commit": False,
                     "auto.offset.reset": "error"})
consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
count = size = 0
while count < total:
    for message in consumer.consume(num_messages=min(10000, total - count), timeout=1.0):
        if message.error() is not None:
            raise SystemExit(str(message.error()))
        size += len(message.value())
        count += 1
consumer.close()
print(count, size, time.perf_counter() - started)
"""
"""The raw consumer: every message of the partitions, each value's length taken; it prints
the count, the bytes and its seconds from making its consumer to its last message (its Python's
start and imports left out, as the feeder's are)."""

COUNTER = r"""
from primus.data.reader import records
count = size = 0
for value in records():
    count += 1
    size += len(value)
print(count, size)
"""
"""The trainer: counts the values ``records()`` yields."""


class PartitionSource(ListSource):
    """One task per partition, from a list (no etcd); progress discarded."""

    def __init__(self, topic: str, ends: dict[int, int]) -> None:
        self.claims = deque(Claim(DataTask(epoch=1, seq=p, path=partition_url("bench", topic, p),
                                           start=0, end=end, size=end), 0)
                            for p, end in sorted(ends.items()))


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def reaped_cpu(process: subprocess.Popen[bytes]) -> tuple[float, int, int]:
    """Wait for a counting process: its CPU seconds, the messages and value bytes it counted."""
    assert process.stdout is not None
    count, size = map(int, process.stdout.read().split())
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, count, size


def fill(broker: Broker, topic: str, value_size: int, total_bytes: int) -> dict[int, int]:
    """``topic`` made and filled with about ``total_bytes`` of values of ``value_size``; each
    partition's end."""
    broker.create_topic(topic, PARTITIONS)
    messages = max(total_bytes // value_size // PARTITIONS, 1) * PARTITIONS
    value = b"v" * value_size
    broker.produce(topic, ((i % PARTITIONS, value, None) for i in range(messages)))
    return {p: messages // PARTITIONS for p in range(PARTITIONS)}


def raw_once(broker: Broker, topic: str, total: int) -> tuple[float, float, int, int]:
    process = subprocess.Popen([sys.executable, "-c", RAW, broker.servers, topic,
                                str(PARTITIONS), str(total)], stdout=subprocess.PIPE)
    assert process.stdout is not None
    count, size, seconds = process.stdout.read().split()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return float(seconds), usage.ru_utime + usage.ru_stime, int(count), int(size)


async def primus_once(topic: str, ends: dict[int, int],
                      delivery: str) -> tuple[float, float, float, int, int]:
    prepared = DELIVERIES[delivery].prepare(tempfile.gettempdir(), "bench-kafka")
    trainer = subprocess.Popen([sys.executable, "-c", COUNTER], stdin=prepared.stdin,
                               stdout=subprocess.PIPE, pass_fds=prepared.pass_fds,
                               env={**os.environ, **prepared.env,
                                    "PRIMUS_DATA_FORMAT": "kafka"})
    prepared.started()
    started, cpu = time.perf_counter(), own_cpu()
    await feed(prepared.target, PartitionSource(topic, ends), get_format("kafka"),
               checkpoint_records=10_000, checkpoint_interval=5.0, prefetch=1)
    trainer_cpu, count, size = reaped_cpu(trainer)
    return time.perf_counter() - started, own_cpu() - cpu, trainer_cpu, count, size


def bench(broker: Broker, value_size: int, total_bytes: int, repeat: int) -> Table:
    topic = f"bench-{value_size}"
    ends = fill(broker, topic, value_size, total_bytes)
    total = sum(ends.values())
    raw: list[tuple[float, float]] = []
    runs: dict[str, list[tuple[float, float, float]]] = {"stdin": [], "shm": []}
    for _ in range(repeat):
        wait_for_quiet()
        seconds, cpu, count, _ = raw_once(broker, topic, total)
        if count != total:
            raise RuntimeError(f"the raw consumer counted {count} of {total}")
        raw.append((seconds, cpu))
        for delivery, measured in runs.items():
            wait_for_quiet()
            seconds, feeder, trainer, count, _ = asyncio.run(primus_once(topic, ends,
                                                                         delivery))
            if count != total:
                raise RuntimeError(f"the trainer counted {count} of {total} ({delivery})")
            measured.append((seconds, feeder, trainer))
    med = statistics.median
    floor = med(s for s, _ in raw)
    megabytes = total * value_size / 1e6
    table = Table(title=f"Kafka, {value_size} B values: {total:,} messages ({megabytes:.0f} MB "
                        f"of values) in {PARTITIONS} partitions, through Primus against a raw "
                        f"consumer", title_justify="left")
    for column in ("reader", "records/s", "MB/s", "÷ raw", "target", "CPU s"):
        table.add_column(column, justify="left" if column == "reader" else "right")
    for delivery, measured in runs.items():
        seconds = med(s for s, _, _ in measured)
        table.add_row(f"primus: feeder → {'pipe' if delivery == 'stdin' else 'shm'} → records()",
                      f"{total / seconds:,.0f}", f"{megabytes / seconds:.0f}",
                      f"{floor / seconds:.2f}×", "≥ 0.8×",
                      f"{med(f for _, f, _ in measured):.2f} + "
                      f"{med(t for _, _, t in measured):.2f}")
    table.add_row("raw: Consumer.consume, 8 partitions assigned", f"{total / floor:,.0f}",
                  f"{megabytes / floor:.0f}", "1.00×", "", f"{med(c for _, c in raw):.2f}")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (default: 3)")
    parser.add_argument("--size-mib", type=int, default=256,
                        help="MiB of values per value size (default: 256)")
    args = parse_args(parser, argv, repeat=1, size_mib=2)
    root = Path(tempfile.mkdtemp(prefix="primus-bench-kafka-"))
    try:
        with start_broker(root) as broker:
            os.environ[PROFILES_ENV] = str(write_profiles(
                root / "kafka.yaml", bench={"bootstrap.servers": broker.servers}))
            version = subprocess.run([str(tansu_binary()), "--version"], capture_output=True,
                                     text=True, check=False).stdout.strip()
            console.print(f"{os.cpu_count()} cores, Python {platform.python_version()}, "
                          f"{version or 'tansu'} (memory://)")
            tables = [bench(broker, size, args.size_mib << 20, args.repeat)
                      for size in (100, 1024)]
            for table in tables:
                console.print(table)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
