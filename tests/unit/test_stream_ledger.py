"""The AM's ledger of a stream, without etcd: which sources its tasks are written for, and when
the stream is resolved (its end may be written)."""

from __future__ import annotations

from primus.config.spec import SourceSpec, StreamSpec
from primus.data.tasks import StreamLedger
from primus.state.keys import AppKeys
from primus.state.records import ScanPart, StreamScan, StreamStats
from primus.store.api import Compare, Op


async def never_written(ops: list[Op], compares: list[Compare]) -> bool:
    raise AssertionError("the ledger wrote to etcd")


def stream(*paths: str) -> StreamSpec:
    return StreamSpec(name="train", roles=["worker"],
                      sources=[SourceSpec(path=path) for path in paths])


def resolved_ledger() -> StreamLedger:
    """A ledger of a one-source stream whose 3 tasks are all written and done."""
    ledger = StreamLedger(None, AppKeys("/p", "app").stream("train"),  # type: ignore[arg-type]
                          stream("/d/a/*"), never_written)
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
