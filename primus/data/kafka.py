"""Kafka topics as a stream's source: connection profiles, offsets pinned at submit, and the
reader of one task (an offset range of one partition).

- **Profiles** (:func:`load_profile`): how a client reaches a cluster (``bootstrap.servers``,
  TLS, SASL and their secrets) is kept in a YAML file where the job is submitted and where its
  executors run, as pyiceberg keeps its catalogs: ``$PRIMUS_KAFKA_CLIENTS``, else
  ``~/.config/primus/kafka.yaml``. A job names a profile (``kafka.client``) and may add tuning
  settings from an allow-list (:data:`~primus.config.spec.KAFKA_TUNING`); nothing of a profile
  is written to etcd, a command line, a log or a trainer's environment.
- **Pinning** (:func:`pin`): ``primus submit`` resolves every partition's start and end offsets
  once and records them in the spec (``kafka.pinned``), as it pins a table's version: an AM
  take-over, a restart and a savepoint restore read exactly the same ranges.
- **Tasks**: each partition's range is cut into tasks of ``task_size`` offsets (one per
  partition by default). A task's ``path`` is ``kafka://CLIENT/TOPIC/PARTITION``, its ``start``
  and ``end`` offsets; its checkpoint is the next offset the trainer has not consumed.
- **Reading** (:class:`KafkaTaskReader`): the reader ``assign``\\ s the partition at the
  task's checkpoint (no consumer group: no rebalance when a trainer applies back-pressure),
  commits nothing, and ends the task when the consumer's position reaches its end (offsets are
  not dense: compaction, transaction markers). A partition that vanished, an offset that
  retention deleted or that lies past a partition's end fails the task with a message naming
  topic, partition and offsets.

Messages reach the trainer as Arrow IPC record batches (:data:`SCHEMA`: topic, partition,
offset, timestamp, key, value, headers); ``primus.data.reader.records()`` yields their values.
confluent-kafka (librdkafka) and pyarrow are imported only by streams that read Kafka.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

import yaml

from primus.config.spec import KafkaSourceSpec, StreamSpec
from primus.data.api import Block, Claim, DataError, RecordFormat, register

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer

PROFILES_ENV = "PRIMUS_KAFKA_CLIENTS"
"""The Kafka profiles file, where set; else :data:`DEFAULT_PROFILES` under the home."""
DEFAULT_PROFILES = Path(".config") / "primus" / "kafka.yaml"

SECRET_SETTINGS = ("password", "secret", "ssl.key.pem", "sasl.jaas.config", "token")
"""Words in a setting's name that make it a secret: a profile holding one must be in a file
no other account can read."""

URL_SCHEME = "kafka://"
METADATA_TIMEOUT = 10.0
"""Seconds to wait for the cluster's metadata and offsets at submit."""
POLL_TIMEOUT = 0.2
"""Seconds one consume call waits for messages."""
BLOCK_MESSAGES = 10_000
"""Messages a block holds at most (fewer when they reach the block size first)."""
STALL_SECONDS = 2.0
"""Seconds without a message after which a reader looks at the partition's offsets (and again
each time as long): if what is left of the task no longer exists there, the task fails instead
of waiting forever."""


READER_DEFAULTS: dict[str, object] = {"max.partition.fetch.bytes": 8 << 20,
                                      "queued.max.messages.kbytes": 32 << 10}
"""librdkafka settings a reader starts from (a profile's and a job's win): a reader fetches one
partition, so a fetch may bring what librdkafka's default brings from eight (1 MiB each); and
it queues at most 32 MiB ahead (default 64 MiB), the next task's consumer as well."""


class KafkaSourceError(DataError):
    """A Kafka source that cannot be read: an unknown profile, an unreachable cluster, a topic
    or partition that does not exist, offsets outside a partition.

    Attributes:
        field: the source's field at fault (``client``, ``topics[0]``, ``start``, ``end``).
        reason: what is wrong, without naming the source.
        value: the field's value, as a message shows it.
    """

    def __init__(self, field: str, reason: str, value: object = "") -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
        self.value = str(value)


# --- Profiles ------------------------------------------------------------------------------------


def profiles_file() -> Path:
    """Where this process's Kafka profiles are: ``$PRIMUS_KAFKA_CLIENTS``, else
    ``~/.config/primus/kafka.yaml``."""
    return Path(os.environ.get(PROFILES_ENV) or Path.home() / DEFAULT_PROFILES)


def load_profile(name: str) -> dict[str, str]:
    """The librdkafka settings of the profile ``name`` (``clients: {name: {setting: value}}``
    in :func:`profiles_file`).

    Raises:
        KafkaSourceError: (field ``client``) no such file or profile, or the file holds a
            secret and another account may read it.
    """
    path = profiles_file()
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            text = file.read()
    except OSError as exc:
        raise KafkaSourceError("client", f"profile {name!r}: cannot read the Kafka profiles "
                                         f"file {path}: {exc.strerror or exc}") from exc
    try:
        document = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        # Where, not what: PyYAML's own message quotes the line, which may hold a secret.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise KafkaSourceError("client", f"the Kafka profiles file {path} is no valid YAML"
                                         f"{where}") from None
    clients = document.get("clients") if isinstance(document, dict) else None
    if not isinstance(clients, dict) or name not in clients:
        known = ", ".join(sorted(map(str, clients))) if isinstance(clients, dict) else "none"
        raise KafkaSourceError("client", f"no profile {name!r} in the Kafka profiles file "
                                         f"{path} (profiles there: {known})")
    profile = clients[name]
    if not isinstance(profile, dict) or "bootstrap.servers" not in profile:
        raise KafkaSourceError("client", f"profile {name!r} in {path} must be a mapping of "
                                         f"librdkafka settings with bootstrap.servers")
    settings = {str(key): str(value) for key, value in profile.items()}
    secret = [key for key in settings if is_secret(key)]
    if secret and stat.S_IMODE(mode) & 0o077:
        raise KafkaSourceError("client", f"the Kafka profiles file {path} holds secrets "
                                         f"({', '.join(secret)}) and other accounts may read it: "
                                         f"chmod 600 it")
    return settings


def is_secret(setting: str) -> bool:
    """Whether a librdkafka setting holds a secret (a password, a key, a token)."""
    return any(word in setting for word in SECRET_SETTINGS)


def _consumer(client: str, settings: Mapping[str, object], group: str = "primus") -> Consumer:
    """A consumer of the profile ``client`` with the job's tuning ``settings``: no group
    membership (``group`` is only where explicit commits go), no commits of its own, errors for
    offsets out of range instead of a silent reset."""
    from confluent_kafka import Consumer  # noqa: PLC0415 - only Kafka streams need it

    config: dict[str, object] = {**READER_DEFAULTS, **load_profile(client), **settings,
                                 "group.id": group, "enable.auto.commit": False,
                                 "enable.auto.offset.store": False,
                                 "auto.offset.reset": "error"}
    return Consumer(config)


def _assigned(where: PartitionUrl, settings: Mapping[str, object], offset: int) -> Consumer:
    """A consumer (:func:`_consumer`) of the partition ``where``, assigned at ``offset``."""
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    consumer = _consumer(where.client, settings)
    consumer.assign([TopicPartition(where.topic, where.partition, offset)])
    return consumer


def _metadata(consumer: Consumer, kafka: KafkaSourceSpec, timeout: float) -> Any:
    """The cluster's metadata, as ``consumer`` reads it.

    Raises:
        KafkaSourceError: (field ``client``) the cluster cannot be reached.
    """
    from confluent_kafka import KafkaException  # noqa: PLC0415

    try:
        return consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        servers = load_profile(kafka.client)["bootstrap.servers"]
        raise KafkaSourceError("client", f"cannot reach the cluster of profile "
                                         f"{kafka.client!r} ({servers}): {exc}") from exc


def _partitions(metadata: Any, kafka: KafkaSourceSpec, gone: str) -> list[tuple[str, int]]:
    """Every partition of the source's topics in ``metadata``, in topic and partition order.

    Raises:
        KafkaSourceError: (field ``topics[i]``) a topic is not there: it ``gone``.
    """
    partitions: list[tuple[str, int]] = []
    for i, topic in enumerate(kafka.topics):
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise KafkaSourceError(f"topics[{i}]", f"topic {topic!r} {gone}", topic)
        partitions += [(topic, p) for p in sorted(found.partitions)]
    return partitions


# --- Pinning at submit ---------------------------------------------------------------------------


def pin(kafka: KafkaSourceSpec, timeout: float = METADATA_TIMEOUT) -> KafkaSourceSpec:
    """``kafka`` with every partition's ``[start, end)`` resolved now (``pinned``).

    Raises:
        KafkaSourceError: the profile, the cluster, a topic or an offset is wrong (its field).
    """
    consumer = _consumer(kafka.client, kafka.settings)
    try:
        partitions = _partitions(_metadata(consumer, kafka, timeout), kafka,
                                 f"does not exist on the cluster of profile {kafka.client!r}")
        ranges = _watermarks(consumer, partitions, timeout)
        starts = _offsets(consumer, kafka.start, "start", ranges, timeout)
        ends = _offsets(consumer, kafka.end, "end", ranges, timeout)
        pinned: dict[str, dict[int, tuple[int, int]]] = {}
        for (topic, partition), start in starts.items():
            end = ends[topic, partition]
            if start > end:
                raise KafkaSourceError("start", f"start offset {start} of topic {topic!r} "
                                                f"partition {partition} is after its end {end}")
            pinned.setdefault(topic, {})[partition] = (start, end)
        return kafka.model_copy(update={"pinned": pinned})
    finally:
        consumer.close()


def _watermarks(consumer: Consumer, partitions: list[tuple[str, int]],
                timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's first offset kept and its end (the offset the next message will get).

    The end is taken from a fetch response as well as from ListOffsets, the larger one: some
    Kafka-compatible brokers (tansu 0.6) answer ListOffsets with less than a partition holds,
    where a fetch's high watermark is right; on Apache Kafka both agree."""
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    listed = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=timeout,
                                                 cached=False) for tp in partitions}
    consumer.assign([TopicPartition(topic, partition, max(listed[topic, partition][1] - 1,
                                                          listed[topic, partition][0]))
                     for topic, partition in partitions])
    deadline = time.monotonic() + timeout
    fetched: dict[tuple[str, int], int] = {}
    while len(fetched) < len(partitions) and time.monotonic() < deadline:
        consumer.consume(num_messages=len(partitions), timeout=POLL_TIMEOUT)
        for tp in partitions:
            high = consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)[1]
            if high >= 0:
                fetched[tp] = high
    consumer.unassign()
    return {tp: (low, max(high, fetched.get(tp, high))) for tp, (low, high) in listed.items()}


def _offsets(consumer: Consumer, given: object, field: str,
             ranges: dict[tuple[str, int], tuple[int, int]],
             timeout: float) -> dict[tuple[str, int], int]:
    """Each partition's offset for ``start`` or ``end`` as the job gives it."""
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    if given == "earliest":
        return {tp: low for tp, (low, _) in ranges.items()}
    if given in ("latest", "submit", "none"):  # none: the first slice ends here
        return {tp: high for tp, (_, high) in ranges.items()}
    if isinstance(given, datetime):
        moment = given if given.tzinfo is not None else given.replace(tzinfo=UTC)
        millis = int(moment.timestamp() * 1000)
        found = consumer.offsets_for_times([TopicPartition(t, p, millis) for t, p in ranges],
                                           timeout=timeout)
        # No message at or after the time: the partition's end.
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0
                else ranges[tp.topic, tp.partition][1] for tp in found}
    assert isinstance(given, dict)
    offsets = {}
    for (topic, partition), (low, high) in ranges.items():
        offset = given.get(topic, {}).get(partition)
        if offset is None:  # a partition the job does not name: the whole of it
            offset = low if field == "start" else high
        elif not low <= offset <= high:
            raise KafkaSourceError(field, f"offset {offset} of topic {topic!r} partition "
                                          f"{partition} is outside the partition, which holds "
                                          f"offsets {low} to {high} (exclusive)")
        offsets[topic, partition] = offset
    unknown = [(topic, partition) for topic, parts in given.items() for partition in parts
               if (topic, partition) not in ranges]
    if unknown:
        topic, partition = unknown[0]
        raise KafkaSourceError(field, f"topic {topic!r} has no partition {partition}")
    return offsets


class PartitionWatch:
    """The partitions of an unbounded source's topics as they grow (the AM's side): each
    one's first offset kept and end, partitions added since included. One consumer, kept
    open; blocking: call it from a thread."""

    def __init__(self, kafka: KafkaSourceSpec) -> None:
        self.kafka = kafka
        self._consumer: Consumer | None = None

    def ends(self, timeout: float = METADATA_TIMEOUT) -> dict[tuple[str, int], tuple[int, int]]:
        """Every partition now, ``(topic, partition) → (first offset kept, end)``.

        Raises:
            KafkaSourceError: a topic no longer exists, or the cluster cannot be reached.
        """
        if self._consumer is None:
            self._consumer = _consumer(self.kafka.client, self.kafka.settings)
        partitions = _partitions(_metadata(self._consumer, self.kafka, timeout), self.kafka,
                                 "no longer exists")
        return _watermarks(self._consumer, partitions, timeout)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def first_offsets(kafka: KafkaSourceSpec, partitions: Sequence[tuple[str, int]],
                  timeout: float = METADATA_TIMEOUT) -> dict[tuple[str, int], int | None]:
    """Each of ``partitions``' first offset kept now (``None``: it no longer exists).

    Raises:
        KafkaSourceError: the profile or the cluster cannot be reached.
    """
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    consumer = _consumer(kafka.client, kafka.settings)
    try:
        metadata = _metadata(consumer, kafka, timeout)
        found: dict[tuple[str, int], int | None] = {}
        for topic, partition in partitions:
            known = metadata.topics.get(topic)
            if known is None or known.error is not None or partition not in known.partitions:
                found[topic, partition] = None
                continue
            found[topic, partition] = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False)[0]
        return found
    finally:
        consumer.close()


class GroupMirror:
    """Commits offsets to a consumer group (``commit_group``) without joining it: what Kafka's
    lag tools read. One consumer, kept open; blocking: call it from a thread."""

    def __init__(self, kafka: KafkaSourceSpec) -> None:
        assert kafka.commit_group is not None
        self.kafka = kafka
        self._consumer: Consumer | None = None

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit each partition's next offset to read, ``(topic, partition) → offset``.

        Raises:
            KafkaException: the commit failed.
        """
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        if self._consumer is None:
            assert self.kafka.commit_group is not None
            self._consumer = _consumer(self.kafka.client, self.kafka.settings,
                                       self.kafka.commit_group)
        self._consumer.commit(offsets=[TopicPartition(topic, partition, offset)
                                       for (topic, partition), offset in offsets.items()],
                              asynchronous=False)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def partition_url(client: str, topic: str, partition: int) -> str:
    """A task's ``path``: the partition it reads and the profile it reads it with."""
    return f"{URL_SCHEME}{client}/{topic}/{partition}"


@dataclass(frozen=True)
class PartitionUrl:
    client: str
    topic: str
    partition: int

    @classmethod
    def parse(cls, url: str) -> PartitionUrl:
        client, topic, partition = url.removeprefix(URL_SCHEME).split("/")
        return cls(client, topic, int(partition))

    @property
    def shown(self) -> str:
        return f"topic {self.topic!r} partition {self.partition}"


# --- Reading -------------------------------------------------------------------------------------


def schema() -> pa.Schema:
    """The columns of the batches a Kafka stream delivers."""
    import pyarrow as pa  # noqa: PLC0415 - only Kafka streams need it

    return pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")), ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])


class KafkaFormat(RecordFormat):
    """Messages of Kafka partitions, delivered as Arrow IPC record batches (:func:`schema`).
    Not a format of files: it reads tasks itself (:meth:`open_task`)."""

    name: ClassVar[str] = "kafka"
    reads_files: ClassVar[bool] = False
    transparent: ClassVar[bool] = False  # batches, not the broker's bytes
    arrow_blocks: ClassVar[bool] = True

    def __init__(self, settings: Mapping[str, Mapping[str, object]] | None = None) -> None:
        """``settings``: the tuning settings of each profile's sources (by profile name)."""
        self.settings = dict(settings or {})
        self._ready: dict[tuple[str, int], Consumer] = {}  # (task, offset) → prepared
        self._lock = threading.Lock()

    def for_stream(self, stream: StreamSpec) -> KafkaFormat:
        settings: dict[str, dict[str, object]] = {}
        for source in stream.sources:
            if source.kafka is not None:
                settings.setdefault(source.kafka.client, {}).update(source.kafka.settings)
        return KafkaFormat(settings)

    def prepare(self, claim: Claim) -> None:
        """A consumer of the task's partition, assigned at its offset, made now: it connects
        and fetches in librdkafka's threads while the task before is read. A failure is left
        to :meth:`open_task`'s reader, which makes its own and says why."""
        where = PartitionUrl.parse(claim.task.path)
        try:
            consumer = _assigned(where, self.settings.get(where.client, {}), claim.offset)
        except Exception:  # noqa: BLE001 - the reader tries again, and reports it
            return
        with self._lock:
            self._ready[claim.task.task_id, claim.offset] = consumer

    def unprepare(self, claim: Claim) -> None:
        """Close the consumer prepared for ``claim``, if one was: it would otherwise hold its
        connections and fetched messages until the executor exits."""
        with self._lock:
            consumer = self._ready.pop((claim.task.task_id, claim.offset), None)
        if consumer is not None:
            consumer.close()

    def open_task(self, claim: Claim, block_size: int) -> KafkaTaskReader:
        with self._lock:
            consumer = self._ready.pop((claim.task.task_id, claim.offset), None)
        return KafkaTaskReader(claim, self.settings, block_size, consumer)

    def align(self, f: IO[bytes], offset: int) -> int:
        raise AssertionError("a Kafka stream reads no file")  # pragma: no cover

    def _blocks_from(self, f: IO[bytes], pos: int, end: int, block_size: int) -> Iterator[Block]:
        raise AssertionError("a Kafka stream reads no file")  # pragma: no cover


register(KafkaFormat())


class KafkaTaskReader:
    """The blocks of one claimed task, read from its partition; blocking: call it from a
    thread. Each block's ``end_offset`` is the next offset to read (the task's checkpoint)."""

    def __init__(self, claim: Claim, settings: Mapping[str, Mapping[str, object]],
                 block_size: int, consumer: Consumer | None = None) -> None:
        """``consumer``: one prepared for the task (assigned at its offset), if one was."""
        self.claim = claim
        self.where = PartitionUrl.parse(claim.task.path)
        self.settings = settings.get(self.where.client, {})
        self.block_size = block_size
        self.pos = claim.offset
        self.end = claim.task.end
        self.error: str | None = None
        self._consumer = consumer
        self._quiet_since = time.monotonic()
        self._message_size = 16 << 10
        """Bytes of a message (key and value), on average over the block being read; large
        until known, so that the first call takes few."""

    def next(self) -> Block | None:
        """The next block; ``None`` at the end of the task, or when reading failed (then
        :attr:`error` says why)."""
        try:
            return self._next()
        except KafkaSourceError as exc:
            self.error = f"{self.where.shown}: {exc.reason}"
        except Exception as exc:  # noqa: BLE001 - librdkafka's errors, told as the task's
            self.error = f"{self.where.shown}: {exc}"
        return None

    def _next(self) -> Block | None:
        if self.pos >= self.end:
            return None
        if self._consumer is None:
            self._consumer = _assigned(self.where, self.settings, self.pos)
        messages: list[Any] = []
        size = 0
        while self.pos < self.end and size < self.block_size and len(messages) < BLOCK_MESSAGES:
            # As many as fill the block at the size the messages had so far.
            room = (self.block_size - size) // self._message_size + 1
            got = self._consumer.consume(num_messages=min(BLOCK_MESSAGES - len(messages),
                                                          self.end - self.pos, room),
                                         timeout=POLL_TIMEOUT)
            for message in got:
                if message.error() is not None:
                    raise KafkaSourceError("", self._failure(message.error()))
                offset = message.offset() or 0  # a message without an error has one
                if offset >= self.end:
                    self.pos = self.end
                    break
                messages.append(message)
                size += len(message.value() or b"") + len(message.key() or b"")
                self.pos = offset + 1
            if got:
                self._quiet_since = time.monotonic()
                self._message_size = max(size // max(len(messages), 1), 1)
                continue
            if self._position() >= self.end:  # the rest were markers or compacted away
                self.pos = self.end
            elif messages:
                break  # deliver what came; the rest may take a while
            else:
                self._check_stalled()
        if not messages:
            return None
        return Block(_encode(self.where, messages), len(messages), self.pos)

    def _position(self) -> int:
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        assert self._consumer is not None
        [where] = self._consumer.position([TopicPartition(self.where.topic,
                                                          self.where.partition)])
        return max(where.offset, self.pos)

    def _check_stalled(self) -> None:
        """After :data:`STALL_SECONDS` without a message, fail if what the task has left to
        read is no longer in the partition (its end now before the task's next offset, or
        its start after it; or the partition is gone); else go on waiting. The end is the
        larger of ListOffsets' and the last fetch response's (see :func:`_watermarks`)."""
        from confluent_kafka import KafkaException, TopicPartition  # noqa: PLC0415

        if time.monotonic() - self._quiet_since < STALL_SECONDS:
            return
        assert self._consumer is not None
        self._quiet_since = time.monotonic()
        partition = TopicPartition(self.where.topic, self.where.partition)
        try:
            low, listed = self._consumer.get_watermark_offsets(
                partition, timeout=METADATA_TIMEOUT, cached=False)
        except KafkaException as exc:
            raise KafkaSourceError("", f"offsets {self.pos} to {self.end} cannot be read: "
                                       f"{self._failure(exc.args[0])}") from exc
        high = max(listed, self._consumer.get_watermark_offsets(partition, cached=True)[1])
        if high <= self.pos:
            raise KafkaSourceError("", f"offsets {self.pos} to {self.end} are beyond the "
                                       f"partition's end {high}: the broker lost them, or the "
                                       f"topic was made again")
        if low > self.pos:
            raise KafkaSourceError("", f"offsets {self.pos} to {low} were deleted (retention) "
                                       f"before they were read")

    def _failure(self, error: Any) -> str:
        from confluent_kafka import KafkaError  # noqa: PLC0415

        code = error.code()
        if code == KafkaError.OFFSET_OUT_OF_RANGE or code == KafkaError._AUTO_OFFSET_RESET:
            return (f"offset {self.pos} is no longer in the partition (deleted by retention, "
                    f"or the topic was recreated): {error.str()}")
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                    KafkaError._UNKNOWN_TOPIC):
            return (f"the partition no longer exists on the broker (it lost it, or the topic "
                    f"was deleted): {error.str()}")
        return error.str()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _encode(where: PartitionUrl, messages: list[Any]) -> memoryview:
    """``messages`` (all of the partition ``where``) as one self-contained Arrow IPC stream of
    one batch. Per message, only what differs is asked of it (offset, time, key, value,
    headers): this is the feeder's loop over every message."""
    import pyarrow as pa  # noqa: PLC0415

    columns = schema()
    count = len(messages)
    headers = [m.headers() for m in messages]
    batch = pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(where.topic, pa.string()), count),
        pa.repeat(pa.scalar(where.partition, pa.int32()), count),
        pa.array([m.offset() for m in messages], pa.int64()),
        pa.array([m.timestamp()[1] for m in messages], pa.int64()).cast(
            columns.field("timestamp").type),
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.array([[{"key": k, "value": v} for k, v in pairs] if pairs else None
                  for pairs in headers] if any(headers) else pa.nulls(count),
                 columns.field("headers").type),
    ], schema=columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, columns) as writer:
        writer.write_batch(batch)
    return memoryview(sink.getvalue())
