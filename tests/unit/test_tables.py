"""Delta tables as sources: the version pinned, the files of that version, partition pruning
by the stream's filter, and tables that cannot be read refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from primus.config.spec import TableSpec
from primus.data.tables import TableError, pin, table_files


def make_table(path: Path) -> Path:
    """A Delta table partitioned by ``day``: version 0 holds days a and b, version 1 adds b
    and c."""
    write_deltalake(str(path), pa.table({"n": [1, 2, 3], "day": ["a", "a", "b"]}),
                    partition_by=["day"])
    write_deltalake(str(path), pa.table({"n": [4, 5], "day": ["b", "c"]}),
                    partition_by=["day"], mode="append")
    return path


def days(files: list[tuple[str, int]]) -> list[str]:
    return sorted(path.split("/day=")[1].split("/")[0] for path, _ in files)


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
    assert all(Path(path).stat().st_size == size for path, size in files)


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
