"""Tables as a stream's sources (``sources: [{table: {format: delta, path: ...}}]``).

A table is read as the Parquet data files of one version: :func:`pin` resolves the version a
submission reads (the latest unless the job names one) and :func:`table_files` lists that
version's files, leaving out those whose partition values fail the stream's ``filter``. The
rows are then read as any Parquet file is (``primus/data/parquet.py``), the filter applied to
them there.

Delta Lake tables are read through the ``deltalake`` package (delta-rs, the Delta project's
Rust implementation): it reads the transaction log, so Primus does not. Tables whose readers
must apply deletion vectors or column mapping are refused: their data files alone do not hold
the table's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from primus.config.spec import TableSpec
from primus.data.formats import DataError

UNSUPPORTED_READER_FEATURES = frozenset({"deletionVectors", "columnMapping"})
"""Delta reader features whose tables are not their data files' rows."""


class TableError(DataError):
    """A table that cannot be read: missing, no such version, or of a kind Primus cannot read.

    Attributes:
        reason: what is wrong, without naming the table.
    """

    def __init__(self, table: TableSpec, reason: str) -> None:
        super().__init__(f"delta table {table.path!r}: {reason}")
        self.reason = reason


def pin(table: TableSpec, base_dir: Path = Path("/")) -> TableSpec:
    """``table`` with its version set: the one it names, checked to exist, else the latest.

    Raises:
        TableError: the table or the version does not exist, or it cannot be read.
    """
    delta = _open(table, base_dir)
    return table.model_copy(update={"version": delta.version()})


def table_files(table: TableSpec, filters: Sequence[Sequence[Any]] | None = None,
                base_dir: Path = Path("/")) -> list[tuple[str, int]]:
    """The data files of ``table`` at its version, as (path or URL, size in bytes), sorted by
    path; a file whose partition values fail a term of ``filters`` is left out.

    Raises:
        TableError: as :func:`pin`; or ``table`` has no version (it was never pinned).
    """
    if table.version is None:
        raise TableError(table, "no version: a table is pinned when the job is submitted")
    delta = _open(table, base_dir)
    partitions = set(delta.metadata().partition_columns)
    pruning = [tuple(term) for term in filters or () if term[0] in partitions]
    actions = pa.table(delta.get_add_actions(flatten=True)).to_pylist()
    root = delta.table_uri.rstrip("/")
    files = []
    for action in actions:
        values = {name: action.get(f"partition.{name}") for name in partitions}
        if all(_holds(values[column], op, value) for column, op, value in pruning):
            files.append((_joined(root, action["path"]), int(action["size_bytes"])))
    return sorted(files)


def _open(table: TableSpec, base_dir: Path) -> Any:
    from deltalake import DeltaTable  # noqa: PLC0415 - only table sources need it

    location = table.path if "://" in table.path else str(base_dir / table.path)
    try:
        delta = DeltaTable(location, version=table.version)
    except Exception as exc:  # deltalake raises its own kinds, from Rust
        text = " ".join(str(exc).split())
        if any(sign in text for sign in ("not exist", "No such file", "not a Delta table",
                                         "No files in log segment")):
            raise TableError(table, "no Delta table there") from exc
        if table.version is not None and "version" in text.lower():
            raise TableError(table, f"has no version {table.version}") from exc
        raise TableError(table, text) from exc
    features = set(delta.protocol().reader_features or ())
    unsupported = sorted(features & UNSUPPORTED_READER_FEATURES)
    if unsupported:
        raise TableError(table, f"its readers must apply {', '.join(unsupported)}, which "
                         "Primus does not: its data files alone are not its rows")
    return delta


def _joined(root: str, path: str) -> str:
    """A data file's path in the log (relative to the table, or absolute) as fsspec opens it."""
    if "://" in path or path.startswith("/"):
        return path
    joined = f"{root}/{path}"
    return joined.removeprefix("file://") if root.startswith("file://") else joined


def _holds(actual: Any, op: str, expected: Any) -> bool:
    """Whether a partition value (text in the log, ``None`` for null) satisfies ``op
    expected``; values compare as text unless both read as numbers."""
    if op in ("in", "not in"):
        found = any(_equal(actual, item) for item in (expected if isinstance(expected, list)
                                                      else [expected]))
        return found if op == "in" else not found
    if op in ("=", "!="):
        return _equal(actual, expected) == (op == "=")
    if actual is None:
        return False
    left, right = _comparable(actual, expected)
    return {"<": left < right, "<=": left <= right, ">": left > right,
            ">=": left >= right}[op]


def _equal(actual: Any, expected: Any) -> bool:
    if actual is None:
        return False
    left, right = _comparable(actual, expected)
    return left == right


def _comparable(actual: Any, expected: Any) -> tuple[Any, Any]:
    if isinstance(expected, bool):
        return str(actual).lower(), str(expected).lower()
    if isinstance(expected, int | float):
        try:
            return float(actual), float(expected)
        except ValueError:
            pass
    return str(actual), str(expected)
