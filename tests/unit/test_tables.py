"""Tables as sources (Delta, Iceberg): the version pinned, the files of that version, pruning by
the stream's filter, and tables that cannot be read refused with the reason."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.catalog import Catalog, load_catalog

from primus.config.spec import TableSpec
from primus.data.api import TableFile
from primus.data.tables import TableError, pin, table_files


def make_table(path: Path) -> Path:
    """A Delta table partitioned by ``day``: version 0 holds days a and b, version 1 adds b
    and c."""
    write_deltalake(str(path), pa.table({"n": [1, 2, 3], "day": ["a", "a", "b"]}),
                    partition_by=["day"])
    write_deltalake(str(path), pa.table({"n": [4, 5], "day": ["b", "c"]}),
                    partition_by=["day"], mode="append")
    return path


def days(files: list[TableFile]) -> list[str]:
    return sorted(file.path.split("/day=")[1].split("/")[0] for file in files)


def test_a_table_without_a_version_is_pinned_at_its_latest(tmp_path):
    table = make_table(tmp_path / "events")

    pinned = pin(TableSpec(format="delta", path=str(table)))

    assert pinned.version == 1
    assert days(table_files(pinned)) == ["a", "b", "b", "c"]


def test_a_pinned_version_lists_the_files_of_that_version_only(tmp_path):
    table = make_table(tmp_path / "events")

    files = table_files(pin(TableSpec(format="delta", path=str(table), version=0)))

    assert days(files) == ["a", "b"]
    assert files == sorted(files), "the same order for every reader of the version"
    assert all(Path(path).stat().st_size == size for path, size, _ in files)


@pytest.mark.parametrize(("terms", "expected"), [
    ([("day", "=", "b")], ["b", "b"]),
    ([("day", "!=", "b")], ["a", "c"]),
    ([("day", "in", ["a", "c"])], ["a", "c"]),
    ([("day", "not in", ["a", "c"])], ["b", "b"]),
    ([("day", ">=", "b"), ("day", "<", "c")], ["b", "b"]),
    ([("n", ">", 3)], ["a", "b", "b", "c"]),  # not a partition column: the rows are filtered
])
def test_files_whose_partition_values_fail_the_filter_are_left_out(tmp_path, terms, expected):
    table = pin(TableSpec(format="delta", path=str(make_table(tmp_path / "events"))))

    assert days(table_files(table, terms)) == expected


def test_a_version_the_table_does_not_have_is_refused_naming_it(tmp_path):
    table = make_table(tmp_path / "events")

    with pytest.raises(TableError, match="has no version 7"):
        pin(TableSpec(format="delta", path=str(table), version=7))


def test_a_path_without_a_table_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()

    with pytest.raises(TableError, match=f"delta table '{tmp_path}/empty': no Delta table"):
        pin(TableSpec(format="delta", path=str(tmp_path / "empty")))


def test_a_table_with_deletion_vectors_is_refused(tmp_path):
    write_deltalake(str(tmp_path / "dv"), pa.table({"n": [1, 2]}),
                    configuration={"delta.enableDeletionVectors": "true"})

    with pytest.raises(TableError, match="must apply deletionVectors"):
        pin(TableSpec(format="delta", path=str(tmp_path / "dv")))


def test_an_unpinned_table_is_not_listed(tmp_path):
    table = make_table(tmp_path / "events")

    with pytest.raises(TableError, match="no version"):
        table_files(TableSpec(format="delta", path=str(table)))


# --- Iceberg ------------------------------------------------------------------------------------


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Catalog:
    """An Iceberg SQL catalog ``lake`` on SQLite over a local warehouse, configured the way
    pyiceberg reads it (``PYICEBERG_CATALOG__LAKE__*``)."""
    settings = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": f"file://{tmp_path}/warehouse"}
    for key, value in settings.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__LAKE__{key.upper()}", value)
    catalog = load_catalog("lake", **settings)
    catalog.create_namespace("db")
    return catalog


def iceberg_table(catalog: Catalog) -> list[int]:
    """``db.events`` with two snapshots: n 0..9, then n 10..19 appended; their ids."""
    table = catalog.create_table("db.events", schema=pa.schema([("n", pa.int64())]))
    table.append(pa.table({"n": pa.array(range(10), pa.int64())}))
    first = table.current_snapshot().snapshot_id
    table.append(pa.table({"n": pa.array(range(10, 20), pa.int64())}))
    return [first, table.current_snapshot().snapshot_id]


def test_an_iceberg_table_is_pinned_at_its_current_snapshot_and_read_at_a_named_one(lake):
    first, second = iceberg_table(lake)

    current = pin(TableSpec(format="iceberg", catalog="lake", name="db.events"))
    earlier = pin(TableSpec(format="iceberg", catalog="lake", name="db.events", snapshot=first))

    assert current.snapshot == second
    assert len(table_files(current)) == 2
    assert len(table_files(earlier)) == 1
    assert all(Path(path).stat().st_size == size for path, size, _ in table_files(current))


def test_iceberg_prunes_the_files_the_filter_rules_out_by_their_statistics(lake):
    iceberg_table(lake)
    table = pin(TableSpec(format="iceberg", catalog="lake", name="db.events"))

    assert len(table_files(table, [("n", ">=", 12)])) == 1
    assert len(table_files(table, [("n", "in", [3, 15])])) == 2
    assert table_files(table, [("n", ">", 100)]) == []


def test_an_iceberg_snapshot_table_or_catalog_that_is_not_there_is_refused(lake):
    iceberg_table(lake)

    with pytest.raises(TableError, match="has no snapshot 42") as caught:
        pin(TableSpec(format="iceberg", catalog="lake", name="db.events", snapshot=42))
    assert caught.value.about_pin
    with pytest.raises(TableError, match="no such table in the catalog"):
        pin(TableSpec(format="iceberg", catalog="lake", name="db.nothing"))
    with pytest.raises(TableError, match="catalog .elsewhere. is not configured here"):
        pin(TableSpec(format="iceberg", catalog="elsewhere", name="db.events"))


def test_a_null_partition_value_satisfies_no_term_not_even_a_negative_one(tmp_path):
    write_deltalake(str(tmp_path / "t"), pa.table({"n": [1, 2], "day": ["a", None]}),
                    partition_by=["day"])
    table = pin(TableSpec(format="delta", path=str(tmp_path / "t")))

    assert len(table_files(table)) == 2
    assert table_files(table, [("day", "!=", "a")]) == []
    assert table_files(table, [("day", "not in", ["a"])]) == []


def test_a_delta_files_partition_values_come_with_it_in_the_tables_types(tmp_path):
    write_deltalake(str(tmp_path / "t"), pa.table({
        "n": [1, 2], "day": pa.array([datetime.date(2026, 11, 26), datetime.date(2026, 11, 27)]),
        "shard": pa.array([7, 8], pa.int32())}), partition_by=["day", "shard"])

    files = table_files(pin(TableSpec(format="delta", path=str(tmp_path / "t"))))

    assert sorted(file.constants for file in files) == [
        (("day", "date32[day]", "2026-11-26"), ("shard", "int32", 7)),
        (("day", "date32[day]", "2026-11-27"), ("shard", "int32", 8))]
