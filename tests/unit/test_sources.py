"""Sources to tasks: globs and time partitions in a fixed order, success markers, splitting and
the order of each epoch."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import fsspec
import pytest

from primus.config.loader import SpecError
from primus.config.spec import SourceSpec, StreamSpec
from primus.data.sources import (
    DataFile,
    DataSourceError,
    SourceProblem,
    check_sources,
    count_source_files,
    epoch_order,
    expand_partitions,
    file_ranges,
    make_tasks,
    scan_source,
    scan_stream,
    shuffled,
)


class FakeTime:
    """A clock that moves only when slept on; ``on_sleep`` runs at each sleep (to make a marker
    appear while a partition is waited for)."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(len(self.sleeps))


def write(path: Path, data: bytes = b"x\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def stream(*sources: SourceSpec, **fields) -> StreamSpec:
    return StreamSpec(name="train", roles=["worker"], sources=list(sources), **fields)


async def scan(source: SourceSpec, base_dir: Path, fake: FakeTime | None = None
               ) -> list[list[DataFile]]:
    fake = fake or FakeTime()
    return [files async for files in scan_source(source, base_dir, clock=fake.clock,
                                                 sleep=fake.sleep)]


async def scan_all(spec: StreamSpec, base_dir: Path, fake: FakeTime | None = None
                   ) -> list[DataFile]:
    fake = fake or FakeTime()
    return [f async for files in scan_stream(spec, base_dir, clock=fake.clock, sleep=fake.sleep)
            for f in files]


async def test_glob_lists_files_sorted_by_path_with_their_sizes(tmp_path):
    for name, size in [("b.txt", 3), ("a.txt", 0), ("c/d.txt", 5), ("c.txt", 7)]:
        write(tmp_path / name, b"y" * size)
    write(tmp_path / "a.csv")

    [files] = await scan(SourceSpec(path=f"{tmp_path}/*.txt"), tmp_path)

    assert files == [DataFile(str(tmp_path / "a.txt"), 0), DataFile(str(tmp_path / "b.txt"), 3),
                     DataFile(str(tmp_path / "c.txt"), 7)]


async def test_relative_pattern_is_taken_from_the_base_dir(tmp_path):
    write(tmp_path / "data" / "part-0", b"abc")

    [files] = await scan(SourceSpec(path="data/part-*"), tmp_path)

    assert files == [DataFile(str(tmp_path / "data" / "part-0"), 3)]


async def test_directories_hidden_files_and_the_marker_are_left_out(tmp_path):
    write(tmp_path / "d" / "part-0")
    write(tmp_path / "d" / ".part-1.crc")
    write(tmp_path / "d" / "_SUCCESS", b"")
    write(tmp_path / "d" / "DONE", b"")
    write(tmp_path / "d" / "_temporary" / "part-2")
    write(tmp_path / "d" / ".staging" / "part-3")
    (tmp_path / "d" / "subdir").mkdir()

    [files] = await scan(SourceSpec(path=f"{tmp_path}/d/**", success_marker="DONE"), tmp_path)

    assert [f.path for f in files] == [str(tmp_path / "d" / "part-0")]


async def test_files_of_another_fsspec_filesystem_are_named_by_url():
    root = f"/primus-test-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    fs.pipe({f"{root}/b.txt": b"bb", f"{root}/a.txt": b"a"})

    [files] = await scan(SourceSpec(path=f"memory://{root}/*.txt"), Path("/"))

    assert [(f.path, f.size) for f in files] == [(f"memory://{root}/a.txt", 1),
                                                 (f"memory://{root}/b.txt", 2)]
    with fsspec.open(files[1].path, "rb") as f:
        assert f.read() == b"bb"


def test_hourly_partitions_cross_a_day_and_a_month_boundary_in_time_order():
    source = SourceSpec(path="/d/{{YYYY}}{{MM}}{{DD}}/{{HH}}/*.gz",
                        start=datetime(2026, 11, 30, 22, 40), end=datetime(2026, 12, 1, 1))

    assert expand_partitions(source) == [
        ("2026113022", "/d/20261130/22/*.gz"),
        ("2026113023", "/d/20261130/23/*.gz"),
        ("2026120100", "/d/20261201/00/*.gz"),
        ("2026120101", "/d/20261201/01/*.gz"),
    ]


def test_daily_partitions_cross_a_month_and_a_year_boundary_in_time_order():
    source = SourceSpec(path="/d/{{YYYY}}-{{MM}}-{{DD}}/*",
                        start=datetime(2026, 12, 30, 18), end=datetime(2027, 1, 2))

    assert expand_partitions(source) == [
        ("20261230", "/d/2026-12-30/*"),
        ("20261231", "/d/2026-12-31/*"),
        ("20270101", "/d/2027-01-01/*"),
        ("20270102", "/d/2027-01-02/*"),
    ]


def test_monthly_and_yearly_partitions_step_by_their_finest_field():
    monthly = SourceSpec(path="/d/{{YYYY}}/{{MM}}/*", start=datetime(2026, 11, 15),
                         end=datetime(2027, 2, 1))
    yearly = SourceSpec(path="/d/{{YYYY}}/*", start=datetime(2025, 6, 1),
                        end=datetime(2027, 1, 1))

    assert [label for label, _ in expand_partitions(monthly)] == ["202611", "202612", "202701",
                                                                  "202702"]
    assert expand_partitions(yearly) == [("2025", "/d/2025/*"), ("2026", "/d/2026/*"),
                                         ("2027", "/d/2027/*")]


def test_partition_label_holds_every_field_down_to_the_finest_used():
    source = SourceSpec(path="/d/hour={{HH}}/*", start=datetime(2026, 11, 22, 3),
                        end=datetime(2026, 11, 22, 4))

    assert expand_partitions(source) == [("2026112203", "/d/hour=03/*"),
                                         ("2026112204", "/d/hour=04/*")]


def test_path_without_time_fields_is_one_unlabelled_partition():
    assert expand_partitions(SourceSpec(path="/d/*.txt")) == [("", "/d/*.txt")]


async def test_partitions_are_read_in_time_order_and_labelled(tmp_path):
    for day in ("20261130", "20261201"):
        for name in ("b", "a"):
            write(tmp_path / day / name)
    source = SourceSpec(path=f"{tmp_path}/{{{{YYYY}}}}{{{{MM}}}}{{{{DD}}}}/*",
                        start=datetime(2026, 11, 30), end=datetime(2026, 12, 1))

    batches = await scan(source, tmp_path)

    assert [[(Path(f.path).relative_to(tmp_path).as_posix(), f.partition) for f in files]
            for files in batches] == [
        [("20261130/a", "20261130"), ("20261130/b", "20261130")],
        [("20261201/a", "20261201"), ("20261201/b", "20261201")],
    ]


def partitioned(tmp_path: Path, **fields) -> SourceSpec:
    """Hourly partitions under ``tmp_path``, by default 2026-11-22 03:00 and 04:00."""
    return SourceSpec(**{"path": f"{tmp_path}/{{{{YYYY}}}}{{{{MM}}}}{{{{DD}}}}/{{{{HH}}}}/*.txt",
                         "start": datetime(2026, 11, 22, 3), "end": datetime(2026, 11, 22, 4),
                         **fields})


async def test_partition_with_its_marker_is_read_without_waiting(tmp_path):
    for hour in ("03", "04"):
        write(tmp_path / "20261122" / hour / "part.txt")
        write(tmp_path / "20261122" / hour / "_SUCCESS", b"")
    fake = FakeTime()

    batches = await scan(partitioned(tmp_path, success_marker="_SUCCESS"), tmp_path, fake)

    assert [[f.partition for f in files] for files in batches] == [["2026112203"],
                                                                   ["2026112204"]]
    assert fake.sleeps == []


async def test_partition_missing_its_marker_fails_after_the_timeout_naming_it(tmp_path):
    write(tmp_path / "20261122" / "03" / "part.txt")
    write(tmp_path / "20261122" / "03" / "_SUCCESS", b"")
    write(tmp_path / "20261122" / "04" / "part.txt")  # no marker: still being written
    fake = FakeTime()
    spec = stream(partitioned(tmp_path, success_marker="_SUCCESS", marker_timeout="10s"))
    read: list[DataFile] = []

    with pytest.raises(DataSourceError) as caught:
        async for files in scan_stream(spec, tmp_path, clock=fake.clock, sleep=fake.sleep):
            read += files

    assert [f.partition for f in read] == ["2026112203"]
    message = str(caught.value)
    assert "data stream 'train': sources[0].path" in message
    assert "partition 2026112204" in message
    assert repr(str(tmp_path / "20261122" / "04" / "_SUCCESS")) in message
    assert "10 s" in message
    assert sum(fake.sleeps) == 10
    assert max(fake.sleeps) <= 1


async def test_partition_is_read_once_its_marker_appears_during_the_wait(tmp_path):
    hour = tmp_path / "20261122" / "03"
    write(hour / "part.txt")
    source = partitioned(tmp_path, success_marker="_SUCCESS", end=datetime(2026, 11, 22, 3))

    def producer_finishes(sleeps: int) -> None:
        if sleeps == 3:
            write(hour / "_SUCCESS", b"")

    fake = FakeTime(producer_finishes)
    batches = await scan(source, tmp_path, fake)

    assert batches == [[DataFile(str(hour / "part.txt"), 2, "2026112203")]]
    assert len(fake.sleeps) == 3


async def test_plain_source_matching_no_file_names_the_stream_and_field(tmp_path):
    write(tmp_path / "a.txt")
    spec = stream(SourceSpec(path=f"{tmp_path}/*.txt"), SourceSpec(path=f"{tmp_path}/*.csv"))

    with pytest.raises(DataSourceError) as caught:
        await scan_all(spec, tmp_path)

    assert str(caught.value) == (f"data stream 'train': sources[1].path "
                                 f"'{tmp_path}/*.csv' matches no file")


async def test_empty_partition_is_fine_when_the_source_has_files_elsewhere(tmp_path):
    write(tmp_path / "20261122" / "03" / "_SUCCESS", b"")  # done, and empty
    write(tmp_path / "20261122" / "04" / "part.txt")
    write(tmp_path / "20261122" / "04" / "_SUCCESS", b"")

    with_marker = await scan_all(stream(partitioned(tmp_path, success_marker="_SUCCESS")),
                                 tmp_path)
    without_marker = await scan_all(stream(partitioned(tmp_path)), tmp_path)

    assert [f.partition for f in with_marker] == ["2026112204"]
    assert with_marker == without_marker


async def test_partitioned_source_matching_nothing_in_any_partition_fails(tmp_path):
    (tmp_path / "20261122" / "03").mkdir(parents=True)

    with pytest.raises(DataSourceError) as caught:
        await scan_all(stream(partitioned(tmp_path)), tmp_path)

    assert str(caught.value).startswith("data stream 'train': sources[0].path ")
    assert str(caught.value).endswith("matches no file in partitions 2026112203 to 2026112204")


async def test_sources_are_read_in_the_order_listed(tmp_path):
    write(tmp_path / "z" / "1.txt")
    write(tmp_path / "a" / "1.txt")
    spec = stream(SourceSpec(path=f"{tmp_path}/z/*"), SourceSpec(path=f"{tmp_path}/a/*"))

    files = await scan_all(spec, tmp_path)

    assert [Path(f.path).parent.name for f in files] == ["z", "a"]


async def test_unknown_filesystem_is_reported_naming_the_stream(tmp_path):
    with pytest.raises(DataSourceError, match=r"^data stream 'train': sources\[0\]\.path "
                                              r"'nosuchfs://x/\*': cannot open"):
        await scan_all(stream(SourceSpec(path="nosuchfs://x/*")), tmp_path)


FILES = [DataFile("/d/a", 10, "p1"), DataFile("/d/empty", 0, "p1"), DataFile("/d/b", 4, "p2")]


def test_one_task_per_file_without_chunk_size():
    tasks = make_tasks(FILES, None, epoch=2, first_seq=7)

    assert [(t.epoch, t.seq, t.path, t.start, t.end, t.size, t.partition) for t in tasks] == [
        (2, 7, "/d/a", 0, 10, 10, "p1"),
        (2, 8, "/d/empty", 0, 0, 0, "p1"),
        (2, 9, "/d/b", 0, 4, 4, "p2"),
    ]


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 10, 100])
def test_chunked_tasks_cover_each_file_exactly_with_consecutive_seqs(chunk_size):
    tasks = make_tasks(FILES, chunk_size, epoch=1, first_seq=0)

    assert [t.seq for t in tasks] == list(range(len(tasks)))
    for file in FILES:
        ranges = [(t.start, t.end) for t in tasks if t.path == file.path]
        assert ranges[0][0] == 0 and ranges[-1][1] == file.size
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        assert all(end - start <= chunk_size for start, end in ranges)
    assert [(t.start, t.end) for t in tasks if t.path == "/d/empty"] == [(0, 0)]


def test_chunked_tasks_keep_file_order():
    tasks = make_tasks(FILES, 4, epoch=1, first_seq=0)

    assert [t.path for t in tasks] == ["/d/a"] * 3 + ["/d/empty", "/d/b"]


TASKS = make_tasks([DataFile(f"/d/{i:03d}", 5) for i in range(50)], None, epoch=1, first_seq=0)


def order(tasks):
    return [t.path for t in tasks]


def test_shuffled_order_is_the_same_for_the_same_seed_and_epoch():
    first = epoch_order(TASKS, 2, shuffle=True, seed=42)

    assert order(first) == order(epoch_order(TASKS, 2, shuffle=True, seed=42))
    assert sorted(order(first)) == order(TASKS)
    assert order(first) != order(TASKS)


def test_shuffled_order_differs_across_seeds_and_epochs():
    base = order(epoch_order(TASKS, 1, shuffle=True, seed=1))

    assert order(epoch_order(TASKS, 1, shuffle=True, seed=2)) != base
    assert order(epoch_order(TASKS, 2, shuffle=True, seed=1)) != base


def test_epoch_order_renumbers_seqs_and_sets_the_epoch():
    for shuffle in (False, True):
        tasks = epoch_order(TASKS, 3, shuffle=shuffle, seed=0)

        assert [t.seq for t in tasks] == list(range(len(TASKS)))
        assert {t.epoch for t in tasks} == {3}
    assert order(epoch_order(TASKS, 3, shuffle=False, seed=0)) == order(TASKS)


def test_check_sources_reports_plain_sources_matching_nothing(tmp_path):
    write(tmp_path / "x" / "a.txt")
    spec = stream(SourceSpec(path=f"{tmp_path}/x/*.txt"), SourceSpec(path=f"{tmp_path}/x/*.gz"),
                  SourceSpec(path="missing/*"))

    assert check_sources(spec, tmp_path, 2) == [
        SourceProblem("data[2].sources[1].path", f"{tmp_path}/x/*.gz", "matches no file"),
        SourceProblem("data[2].sources[2].path", "missing/*", "matches no file"),
    ]


def test_check_sources_refuses_a_chunk_size_smaller_than_a_row_group_of_a_file_or_table(
        tmp_path):
    """A Parquet task owns the row groups that start in it: chunks smaller than a row group
    would mostly hold none (24 tasks for 20 row groups, most of them empty)."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415
    from deltalake import write_deltalake  # noqa: PLC0415

    from primus.config.spec import TableSpec  # noqa: PLC0415
    from primus.data.parquet import _layout  # noqa: PLC0415

    rows = pa.table({"n": pa.array(range(20_000), pa.int64())})
    (tmp_path / "d").mkdir()
    pq.write_table(rows, tmp_path / "d" / "a.parquet", row_group_size=5000)
    with open(tmp_path / "d" / "a.parquet", "rb") as f:
        largest = max(g.end - g.start for g in _layout(pq.ParquetFile(f).metadata))
    write_deltalake(str(tmp_path / "t"), rows)
    files = SourceSpec(path=f"{tmp_path}/d/*.parquet")
    table = SourceSpec(table=TableSpec(format="delta", path=str(tmp_path / "t")))

    assert check_sources(stream(files, format="parquet", chunk_size=largest), tmp_path, 0) == []
    assert check_sources(stream(files, format="parquet", chunk_size=largest - 1), tmp_path,
                         0) == [SourceProblem(
        "data[0].chunk_size", str(largest - 1),
        f"is smaller than a row group of {tmp_path}/d/a.parquet ({largest:,} bytes): a task "
        f"reads whole row groups, those that start in it, so most tasks would read nothing; "
        f"use a chunk_size of at least {largest:,} bytes, or unset it (a task per file)")]
    [refused] = check_sources(stream(table, format="parquet", chunk_size=64), tmp_path, 3)
    assert (refused.field, refused.value) == ("data[3].chunk_size", "64")
    assert "is smaller than a row group of " in refused.why
    assert check_sources(stream(SourceSpec(path=f"{tmp_path}/d/*"), format="text",
                                chunk_size=64), tmp_path, 0) == [], "a line starts anywhere"


def test_check_sources_skips_partitions_and_sources_awaiting_their_marker(tmp_path):
    spec = stream(partitioned(tmp_path), SourceSpec(path=f"{tmp_path}/later/*",
                                                    success_marker="_SUCCESS"))

    assert check_sources(spec, tmp_path, 0) == []


def test_check_sources_reports_a_marked_source_that_is_done_but_empty(tmp_path):
    write(tmp_path / "done" / "_SUCCESS", b"")
    spec = stream(SourceSpec(path=f"{tmp_path}/done/*", success_marker="_SUCCESS"))

    assert check_sources(spec, tmp_path, 0) == [
        SourceProblem("data[0].sources[0].path", f"{tmp_path}/done/*", "matches no file")]


def test_check_sources_reports_an_unknown_filesystem_and_checks_sources_only(tmp_path):
    # The format is check_job's (test_preflight): a stream's sources are checked here.
    spec = stream(partitioned(tmp_path), SourceSpec(path="nosuchfs://bucket/*"), format="csv")

    problems = check_sources(spec, tmp_path, 1)

    assert [(p.field, p.value) for p in problems] == [("data[1].sources[1].path",
                                                       "nosuchfs://bucket/*")]
    assert problems[0].why.startswith("cannot open 'nosuchfs://bucket/*'")


def test_count_source_files_counts_the_data_files_a_source_matches_now(tmp_path):
    for name in ("a.txt", "b.txt", "sub/c.txt", ".hidden.txt", "_tmp/d.txt"):
        write(tmp_path / "x" / name)

    assert count_source_files(SourceSpec(path=f"{tmp_path}/x/**/*.txt")) == 3
    assert count_source_files(SourceSpec(path=f"{tmp_path}/x/*.gz")) == 0


def test_count_source_files_counts_the_partitions_that_exist_and_are_marked(tmp_path):
    # 03:00 is marked, 04:00 is not yet; 05:00 does not exist (yet).
    write(tmp_path / "20261122" / "03" / "a.txt")
    write(tmp_path / "20261122" / "03" / "b.txt")
    write(tmp_path / "20261122" / "03" / "_SUCCESS", b"")
    write(tmp_path / "20261122" / "04" / "a.txt")
    late = datetime(2026, 11, 22, 5)

    assert count_source_files(partitioned(tmp_path, end=late)) == 3
    assert count_source_files(partitioned(tmp_path, end=late, success_marker="_SUCCESS")) == 2


def test_count_source_files_refuses_a_source_it_cannot_list_naming_its_path(tmp_path):
    with pytest.raises(SpecError) as caught:
        count_source_files(SourceSpec(path="nosuchfs://bucket/*"))

    problem = caught.value.problems[0]
    assert (problem.source, problem.field, problem.value) == ("source", "path",
                                                              "nosuchfs://bucket/*")
    assert problem.allowed.startswith("cannot open 'nosuchfs://bucket/*'")


def test_the_am_writes_an_epoch_in_the_order_epoch_order_gives():
    # The AM shuffles light ranges and makes each task as it writes it: the same tasks, in the
    # same order, with the same numbers as shuffling the tasks themselves.
    files = [DataFile(f"/d/{i:03d}", 10 + i) for i in range(40)]
    written = [piece.task(3, seq) for seq, piece in
               enumerate(shuffled(file_ranges(files, 8), epoch=3, seed=9))]

    assert written == epoch_order(make_tasks(files, 8, epoch=3, first_seq=0), 3, shuffle=True,
                                  seed=9)
