"""What every fuzzed input must end in: a result or a clear error, within time and memory bounds.

The checks here state the properties of issue 17: no other exception than the loader's own error,
an error that names its source on each line and keeps each problem on one line, a job that reads
back from its stored JSON as it was, and a bounded cost.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from hypothesis import event

from primus.config.inventory import InventoryError
from primus.config.loader import SpecError
from primus.config.spec import JobSpec
from tests.fuzz.strategies import DIR

SECONDS = 2.0
"""CPU time one input may take to be loaded or refused (the calling thread's, so that the other
test workers busy on the same cores do not count)."""
MEMORY = 64 << 20
"""Peak memory (traced Python allocations) one input may take to be loaded or refused."""

T = TypeVar("T")


def run_bounded(call: Callable[[], T], refused: type[Exception] | tuple[()] = ()
                ) -> T | Exception:
    """Run ``call``: its result, or the ``refused`` error it raised; any other exception goes
    on to fail the test. Fails unless it ended within :data:`SECONDS` and :data:`MEMORY`.

    Memory is traced with :mod:`tracemalloc`, which makes code that allocates much (PyYAML's
    scanner) several times slower: a call that took longer while traced is timed again untraced.
    """
    outcome, elapsed, peak = _run(call, refused, trace=True)
    assert peak < MEMORY, f"peak memory {peak / 2**20:.1f} MiB; the bound is {MEMORY >> 20} MiB"
    if elapsed >= SECONDS:
        outcome, elapsed, _ = _run(call, refused, trace=False)
    assert elapsed < SECONDS, f"took {elapsed:.2f} s; the bound is {SECONDS} s"
    return outcome


def _run(call: Callable[[], T], refused: type[Exception] | tuple[()], trace: bool
         ) -> tuple[T | Exception, float, int]:
    """``call``'s outcome, the CPU seconds it took and, when traced, its peak memory in bytes."""
    if trace:
        tracemalloc.start()
    started = time.thread_time()
    try:
        outcome: T | Exception = call()
    except refused as exc:
        outcome = exc
    finally:
        elapsed = time.thread_time() - started
        peak = tracemalloc.get_traced_memory()[1] if trace else 0
        tracemalloc.stop()
    return outcome, elapsed, peak


@contextmanager
def example_dir() -> Iterator[Path]:
    """A fresh directory for one example, holding the files that ``@DIR@/<name>`` paths name:
    a FIFO, a directory, a file of bytes that are no UTF-8 text, an empty file."""
    with tempfile.TemporaryDirectory(prefix="primus-fuzz-") as name:
        directory = Path(name)
        os.mkfifo(directory / "fifo")
        (directory / "directory").mkdir()
        (directory / "binary").write_bytes(b"\xff\xfe\0\x80secret\n")
        (directory / "empty").write_bytes(b"")
        yield directory


def write(directory: Path, name: str, content: str | bytes) -> Path:
    """Write ``content`` to ``directory/name``, ``@DIR@`` in text replaced by ``directory``."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_bytes(content.replace(DIR, str(directory)).encode("utf-8", "surrogatepass"))
    else:
        path.write_bytes(content)
    return path


def assert_clear_spec_error(error: SpecError, sources: Collection[str]) -> None:
    """One line per problem, each starting with its source, which is one of ``sources``."""
    text = str(error)
    assert text, "the error says nothing"
    lines = text.splitlines()
    assert len(lines) == len(error.problems), f"a problem is printed on several lines: {text!r}"
    for line, problem in zip(lines, error.problems, strict=True):
        assert problem.source in sources, f"{problem.source!r} is none of {sorted(sources)}"
        assert line.startswith(f"{problem.source}:"), f"{line!r} does not name its source"


def assert_clear_inventory_error(error: InventoryError, directory: Path) -> None:
    """One line, starting with the file it is about: the inventory or a vars file beside it."""
    text = str(error)
    assert text, "the error says nothing"
    assert len(text.splitlines()) == 1, f"one problem is printed on several lines: {text!r}"
    assert error.source.startswith(str(directory)), f"{error.source!r} is not a file we wrote"
    assert text.startswith(error.source), f"{text!r} does not name its file first"


def assert_standard_json(text: str) -> None:
    """``text`` is JSON as other programs read it: no ``NaN`` or ``Infinity``."""
    def refuse(name: str) -> None:
        raise AssertionError(f"the JSON holds {name}, which JSON has no number for")

    json.loads(text, parse_constant=refuse)


def assert_round_trips(spec: JobSpec) -> None:
    """The spec as stored in etcd (JSON) is standard JSON and reads back as the same spec."""
    stored = spec.model_dump_json()
    assert_standard_json(stored)
    assert JobSpec.model_validate_json(stored) == spec


def assert_loaded_or_refused(outcome: JobSpec | Exception, sources: Collection[str]) -> None:
    """A job that loaded round-trips; a job that did not was refused with a clear error."""
    event(f"outcome: {type(outcome).__name__}")  # --hypothesis-show-statistics counts them
    if isinstance(outcome, JobSpec):
        assert_round_trips(outcome)
    else:
        assert isinstance(outcome, SpecError)
        assert_clear_spec_error(outcome, sources)
