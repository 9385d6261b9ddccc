"""Tables as a stream's sources (``sources: [{table: {format: delta|iceberg, ...}}]``).

A table is read as the Parquet data files of one version: :func:`pin` resolves the version a
submission reads (the latest unless the job names one) and :func:`table_files` lists that
version's files, leaving out those the stream's ``filter`` rules out by their partition values
(and, for Iceberg, by their column statistics). The rows are then read as any Parquet file is
(``primus/data/parquet.py``), the filter applied to them there.

Each table format is a :class:`TableFormat` in :data:`TABLE_FORMATS`, read through the format
project's own library, which reads the table's metadata so that Primus does not:

- **delta**: the ``deltalake`` package (delta-rs). A *version* is pinned.
- **iceberg**: ``pyiceberg``, with a catalog named in the job and configured where the job is
  submitted and its AM runs (``~/.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__<NAME>__*``
  variables), so its credentials never pass through the job or etcd. A *snapshot* is pinned.

Tables whose rows are not their data files' rows alone (Delta deletion vectors or column
mapping, Iceberg delete files) are refused: Primus reads data files, it does not merge deletes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from primus.config.spec import TableSpec
from primus.data.api import DataError, TableFile, TableFormat, Terms


class TableError(DataError):
    """A table that cannot be read: missing, no such version, or of a kind Primus cannot read.

    Attributes:
        reason: what is wrong, without naming the table.
        about_pin: whether it is the version (snapshot) the job names that is wrong.
    """

    def __init__(self, table: TableSpec, reason: str, about_pin: bool = False) -> None:
        super().__init__(f"{table.format} table {table.location!r}: {reason}")
        self.reason = reason
        self.about_pin = about_pin


def pin(table: TableSpec, base_dir: Path = Path("/")) -> TableSpec:
    """``table`` with its version (snapshot) set: the one it names, checked, else the latest.

    Raises:
        TableError: the table or the version does not exist, or it cannot be read.
    """
    return table.at(TABLE_FORMATS[table.format].pinned(table, base_dir))


def table_files(table: TableSpec, filters: Terms | None = None,
                base_dir: Path = Path("/")) -> list[TableFile]:
    """The data files of ``table`` at its version, sorted by path, without those ``filters``
    rule out.

    Raises:
        TableError: as :func:`pin`; or ``table`` has no version (it was never pinned).
    """
    if table.pinned is None:
        raise TableError(table, f"no {table.pin_field}: a table is pinned when the job is "
                         "submitted")
    return sorted(TABLE_FORMATS[table.format].files(table, filters or (), base_dir))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _json_value(value: Any) -> Any:
    """A partition value as a task record holds it: JSON's scalars, a date or time as ISO
    text, anything else as its text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


# --- Delta Lake ---------------------------------------------------------------------------------


class DeltaFormat:
    UNSUPPORTED_READER_FEATURES = frozenset({"deletionVectors", "columnMapping"})
    """Delta reader features whose tables are not their data files' rows."""

    def pinned(self, table: TableSpec, base_dir: Path) -> int:
        return int(self._open(table, base_dir).version())

    def files(self, table: TableSpec, filters: Terms, base_dir: Path) -> list[TableFile]:
        delta = self._open(table, base_dir)
        partitions = list(delta.metadata().partition_columns)
        types = {field.name: str(field.type) for field in pa.schema(delta.schema().to_arrow())}
        pruning = [tuple(term) for term in filters if term[0] in partitions]
        root = delta.table_uri.rstrip("/")
        files = []
        for action in pa.table(delta.get_add_actions(flatten=True)).to_pylist():
            values = {name: action.get(f"partition.{name}") for name in partitions}
            if all(_holds(values[column], op, value) for column, op, value in pruning):
                # Delta keeps partition values out of the data files: they come with each.
                files.append(TableFile(
                    _joined(root, action["path"]), int(action["size_bytes"]),
                    tuple((name, types[name], _json_value(values[name])) for name in partitions)))
        return files

    def _open(self, table: TableSpec, base_dir: Path) -> Any:
        from deltalake import DeltaTable  # noqa: PLC0415 - only Delta sources need it

        path = str(table.path)
        location = path if "://" in path else str(base_dir / path)
        try:
            delta = DeltaTable(location, version=table.version)
        except Exception as exc:  # deltalake raises its own kinds, from Rust
            text = _one_line(exc)
            if any(sign in text for sign in ("not exist", "No such file", "not a Delta table",
                                             "No files in log segment")):
                raise TableError(table, "no Delta table there") from exc
            if table.version is not None and "version" in text.lower():
                raise TableError(table, f"has no version {table.version}", True) from exc
            raise TableError(table, text) from exc
        features = set(delta.protocol().reader_features or ())
        unsupported = sorted(features & self.UNSUPPORTED_READER_FEATURES)
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
    expected``; values compare as text unless both read as numbers. A null satisfies no term,
    ``!=`` and ``not in`` included, as in SQL and as the rows' filter treats nulls."""
    if actual is None:
        return False
    if op in ("in", "not in"):
        found = any(_equal(actual, item) for item in (expected if isinstance(expected, list)
                                                      else [expected]))
        return found if op == "in" else not found
    if op in ("=", "!="):
        return _equal(actual, expected) == (op == "=")
    left, right = _comparable(actual, expected)
    return {"<": left < right, "<=": left <= right, ">": left > right,
            ">=": left >= right}[op]


def _equal(actual: Any, expected: Any) -> bool:
    left, right = _comparable(actual, expected)
    return bool(left == right)


def _comparable(actual: Any, expected: Any) -> tuple[Any, Any]:
    if isinstance(expected, bool):
        return str(actual).lower(), str(expected).lower()
    if isinstance(expected, int | float):
        try:
            return float(actual), float(expected)
        except ValueError:
            pass
    return str(actual), str(expected)


# --- Apache Iceberg -----------------------------------------------------------------------------


class IcebergFormat:
    def pinned(self, table: TableSpec, base_dir: Path) -> int:
        loaded = self._load(table)
        if table.snapshot is None:
            current = loaded.current_snapshot()
            if current is None:
                raise TableError(table, "has no snapshot: nothing was ever written to it")
            return int(current.snapshot_id)
        if loaded.snapshot_by_id(table.snapshot) is None:
            raise TableError(table, f"has no snapshot {table.snapshot}", True)
        return table.snapshot

    def files(self, table: TableSpec, filters: Terms, base_dir: Path) -> list[TableFile]:
        loaded = self._load(table)
        if loaded.snapshot_by_id(table.snapshot) is None:
            raise TableError(table, f"has no snapshot {table.snapshot}", True)
        scan = loaded.scan(snapshot_id=table.snapshot, row_filter=_iceberg_filter(filters))
        files = []
        for task in scan.plan_files():
            if task.delete_files:
                raise TableError(table, "has delete files (row-level deletes), which Primus "
                                 "does not apply: its data files alone are not its rows")
            files.append(TableFile(_local(task.file.file_path),
                                   int(task.file.file_size_in_bytes)))
        return files

    @staticmethod
    def _load(table: TableSpec) -> Any:
        from pyiceberg.catalog import load_catalog  # noqa: PLC0415 - Iceberg sources only
        from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415
        from pyiceberg.utils.config import Config  # noqa: PLC0415

        name = str(table.catalog)
        try:
            # Read now, not at pyiceberg's import: a long-lived AM sees the configuration of
            # today, and each call the environment it has.
            settings = Config().get_catalog_config(name)
            if settings is None:
                raise TableError(table, f"catalog {name!r} is not configured here (pyiceberg: "
                                 f"~/.pyiceberg.yaml or PYICEBERG_CATALOG__{name.upper()}__*)")
            # load_catalog merges its properties as the configuration they come from, nested
            # values and all; its annotation allows only flat strings.
            catalog = load_catalog(name, **settings)  # type: ignore[arg-type]
        except TableError:
            raise
        except Exception as exc:  # pyiceberg's own kinds, and the catalog's driver's
            raise TableError(table, f"catalog {table.catalog!r} cannot be opened: "
                             f"{_one_line(exc)}") from exc
        try:
            return catalog.load_table(str(table.name))
        except NoSuchTableError as exc:
            raise TableError(table, "no such table in the catalog") from exc
        except Exception as exc:
            raise TableError(table, _one_line(exc)) from exc


def _local(path: str) -> str:
    return path.removeprefix("file://") if path.startswith("file:///") else path


def _iceberg_filter(filters: Terms) -> Any:
    """``filters`` as a pyiceberg row filter: Iceberg prunes files by partitions and column
    statistics with it."""
    from pyiceberg import expressions as ex  # noqa: PLC0415

    compare = {"=": ex.EqualTo, "!=": ex.NotEqualTo, "<": ex.LessThan,
               "<=": ex.LessThanOrEqual, ">": ex.GreaterThan, ">=": ex.GreaterThanOrEqual}
    made: Any = ex.AlwaysTrue()
    for column, op, value in filters:
        if op in compare:
            term = compare[op](column, value)
        else:
            members = set(value if isinstance(value, list) else [value])
            # pyiceberg's In and NotIn are pydantic models with an __init__ of their own
            # (term, literals); mypy types them by their fields instead (term, type, values).
            term = (ex.In(column, members) if op == "in"  # type: ignore[call-arg, arg-type]
                    else ex.NotIn(column, members))  # type: ignore[call-arg, arg-type]
        made = ex.And(made, term)
    return made


TABLE_FORMATS: dict[str, TableFormat] = {"delta": DeltaFormat(), "iceberg": IcebergFormat()}
"""Table formats by the name a source's ``table.format`` gives."""
