"""The AM's ledger of a stream, without etcd: which sources its tasks are written for, when
the stream is resolved (its end may be written), and which tasks of a lost reader count an
attempt."""

from __future__ import annotations

from primus.config.spec import SourceSpec, StreamSpec
from primus.data.tasks import Holding, LostTask, StreamLedger, was_reading
from primus.state.keys import AppKeys
from primus.state.records import (
    ScanPart,
    StreamScan,
    StreamStats,
    TaskDone,
    TaskOwner,
    TaskProgress,
    encode,
)
from primus.store.api import Compare, EventType, Op, WatchEvent

KEYS = AppKeys("/p", "app").stream("train")


async def never_written(ops: list[Op], compares: list[Compare]) -> bool:
    raise AssertionError("the ledger wrote to etcd")


def stream(*paths: str) -> StreamSpec:
    return StreamSpec(name="train", roles=["worker"],
                      sources=[SourceSpec(path=path) for path in paths])


def resolved_ledger() -> StreamLedger:
    """A ledger of a one-source stream whose 3 tasks are all written and done."""
    ledger = StreamLedger(None, KEYS, stream("/d/a/*"), never_written)  # type: ignore[arg-type]
    ledger.scan = StreamScan(epoch=1, created=3, epoch_tasks=3, complete=True,
                             parts=[ScanPart(sources=1, first_task=0)])
    ledger.stats = StreamStats(tasks=3, done=3)
    return ledger


def test_an_added_source_leaves_the_stream_unresolved_until_its_tasks_are_written():
    ledger = resolved_ledger()
    assert ledger.resolved and ledger.unwritten_sources == 0

    ledger.extend(stream("/d/a/*", "/d/b/*"))

    assert ledger.stream.sources[-1].path == "/d/b/*"
    assert ledger.unwritten_sources == 1 and not ledger.resolved
    assert ledger.changed.is_set(), "the task writer is woken"


def test_extending_with_the_sources_known_already_changes_nothing():
    ledger = resolved_ledger()
    known = ledger.stream

    ledger.extend(stream("/d/a/*"))

    assert ledger.stream is known and ledger.resolved and not ledger.changed.is_set()


# --- Which tasks of a lost reader count an attempt --------------------------------------------

READER = ("worker", 0, 1, 100)
OTHER = ("worker", 1, 1, 101)


def test_a_lost_reader_was_reading_the_first_task_it_claimed_of_those_it_held():
    lost = Holding(READER, "1-00000007", claimed=20)
    others = [Holding(READER, "1-00000009", claimed=20), Holding(READER, "1-00000003", claimed=20),
              Holding(READER, "1-00000001", claimed=30), Holding(OTHER, "1-00000000", claimed=5)]

    assert was_reading(lost, others) == "1-00000003", \
        "the earliest batch, and of it the first key; another reader's tasks do not count"


class Events:
    """Watch events of the stream, one revision each unless told."""

    def __init__(self, ledger: StreamLedger) -> None:
        self.ledger = ledger
        self.revision = 0

    def put(self, kind: str, task: str, value: bytes = b"", *,
            same_revision: bool = False) -> LostTask | None:
        self.revision += 0 if same_revision else 1
        return self.ledger.observe(WatchEvent(EventType.PUT, KEYS.key(kind, task), value,
                                              self.revision))

    def delete(self, kind: str, task: str) -> LostTask | None:
        self.revision += 1
        return self.ledger.observe(WatchEvent(EventType.DELETE, KEYS.key(kind, task), b"",
                                              self.revision))

    def claim(self, reader: tuple[str, int, int, int], *tasks: str) -> None:
        """One claim of ``tasks`` (one transaction): pending deleted, owner put."""
        role, index, attempt, pid = reader
        owner = encode(TaskOwner(role=role, index=index, attempt=attempt, since=0.0, pid=pid))
        self.revision += 1
        for task in tasks:
            self.ledger.observe(WatchEvent(EventType.DELETE, KEYS.key("pending", task), b"",
                                           self.revision))
            self.put("owner", task, owner, same_revision=True)


def written_ledger(*tasks: str) -> tuple[StreamLedger, Events]:
    ledger = StreamLedger(None, KEYS, stream("/d/a/*"), never_written)  # type: ignore[arg-type]
    events = Events(ledger)
    for task in tasks:
        events.put("pending", task)
    return ledger, events


def test_of_a_lost_readers_batch_only_the_task_it_was_reading_counts_an_attempt_in_any_order():
    ledger, events = written_ledger("a", "b", "c", "d", "e")
    events.claim(OTHER, "a")
    events.claim(READER, "b")
    events.put("done", "b", encode(TaskDone(records=1, bytes=10, role="worker", index=0,
                                            time=0.0)))
    events.delete("owner", "b")
    events.claim(READER, "c", "d", "e")  # it reads c, then d, then e

    # A host's lease keeper deletes the owner keys one by one, and the AM may re-queue the
    # first before the next is deleted.
    lost_d = events.delete("owner", "d")
    events.put("pending", "d")
    lost_c = events.delete("owner", "c")
    lost_e = events.delete("owner", "e")

    assert (lost_c, lost_d, lost_e) == (LostTask("c", read=True), LostTask("d", read=False),
                                        LostTask("e", read=False))
    assert set(ledger.holdings) == {"a"}, "the other reader's task is still held"


def test_a_task_a_lost_reader_checkpointed_counts_an_attempt_though_it_claimed_it_ahead():
    ledger, events = written_ledger("a", "b")
    events.claim(READER, "a", "b")
    events.put("progress", "b", encode(TaskProgress(offset=40, records=4, bytes=40)))

    assert events.delete("owner", "b") == LostTask("b", read=True)
    assert events.delete("owner", "a") == LostTask("a", read=True)

