"""What the Kafka format keeps between a claim's prepare and its read (primus.data.kafka): a
claim given back unread closes the consumer made for it. The consumers themselves, against a
real broker, are tests/integration/test_kafka.py's."""

from __future__ import annotations

from typing import cast

from confluent_kafka import Consumer

from primus.data.api import Claim
from primus.data.kafka import KafkaFormat
from primus.state.records import DataTask


class Closing:
    """Stands for a prepared consumer: whether it was closed."""

    closed = False

    def close(self) -> None:
        self.closed = True


def claim(seq: int, offset: int) -> Claim:
    task = DataTask(epoch=1, seq=seq, path="kafka://prod/clicks/0", start=0, end=100, size=100)
    return Claim(task=task, offset=offset)


def test_a_claim_given_back_unread_closes_its_prepared_consumer_and_no_other():
    fmt = KafkaFormat()
    kept, dropped = Closing(), Closing()
    fmt._ready[claim(1, 10).task.task_id, 10] = cast(Consumer, kept)
    fmt._ready[claim(2, 0).task.task_id, 0] = cast(Consumer, dropped)

    fmt.unprepare(claim(2, 0))
    fmt.unprepare(claim(3, 0))  # nothing was prepared for it

    assert dropped.closed and not kept.closed
    assert list(fmt._ready) == [(claim(1, 10).task.task_id, 10)]
