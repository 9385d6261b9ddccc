"""``format: arrow`` end to end: Arrow IPC files in both forms (the file form, and the stream
form Hugging Face ``datasets`` keeps its tables in) through real executors and trainers; rows
checked one by one (``tests/support/data.received_rows``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tests.support.apps import assert_nothing_left
from tests.support.data import received_rows, submit_data_job, wait_for_end
from tests.support.primus import run_primus


def write_arrow_files(directory: Path) -> list[int]:
    """Two files of each form, 3,000 rows each in batches of 700 (``n``, ``text``, ``score``);
    every ``n``."""
    directory.mkdir()
    every: list[int] = []
    for index in range(4):
        numbers = list(range(index * 3000, (index + 1) * 3000))
        table = pa.table({"n": pa.array(numbers, pa.int64()),
                          "text": [f"row {n}" for n in numbers],
                          "score": pa.array([None if n % 7 == 0 else n % 10 for n in numbers],
                                            pa.int32())})
        new = pa.ipc.new_file if index % 2 else pa.ipc.new_stream
        with pa.OSFile(str(directory / f"part-{index}.arrow"), "wb") as sink, \
                new(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=700):
                writer.write_batch(batch)
        every += numbers
    return every


def test_arrow_files_of_both_forms_deliver_every_row_once_projected_and_filtered(
        primus_env, tmp_path):
    numbers = write_arrow_files(tmp_path / "data")
    app_id, records = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.arrow}}]
    format: arrow
    columns: [n, text]
    filter: [[score, "not in", [3, 4]]]
    delivery: shm""", trainer_args="--via-reader", workers=2)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    kept = [n for n in numbers if n % 7 != 0 and n % 10 not in (3, 4)]
    assert sorted(received_rows(records)) == kept, "each row that passes the filter, once"
    assert sorted(received_rows(records, "text")) == sorted(f"row {n}" for n in kept)
    stats = status["data"]["train"]
    assert (stats["tasks"], stats["done"], stats["records"]) == (4, 4, len(kept))
    assert_nothing_left(app_id)


def test_a_file_that_is_no_arrow_fails_its_task_naming_it_and_a_chunk_size_is_refused(
        primus_env, tmp_path):
    write_arrow_files(tmp_path / "data")
    (tmp_path / "data" / "part-9.arrow").write_bytes(b"PAR1 not arrow at all" * 20)
    app_id, _ = submit_data_job(primus_env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.arrow}}]
    format: arrow
    max_task_attempts: 1""", workers=1)

    status = wait_for_end(primus_env, app_id)

    assert status["status"]["state"] == "FAILED"
    assert f"first: 0001-00000004: {tmp_path}/data/part-9.arrow: " in \
        status["status"]["diagnosis"], status["status"]["diagnosis"]
    assert "not an Arrow IPC file or stream" in status["status"]["diagnosis"]

    (tmp_path / "data" / "part-9.arrow").unlink()
    job = tmp_path / "chunked.yaml"
    job.write_text(f"""
name: chunked
roles: [{{name: worker, num: 1, command: "true"}}]
data:
  - {{name: train, roles: [worker], format: arrow, chunk_size: 1Ki,
      sources: [{{path: {tmp_path}/data/*.arrow}}]}}
""")
    refused = run_primus(primus_env, "submit", str(job))
    assert refused.returncode == 2, refused.stderr
    assert f"data[0].chunk_size: got '1024'; is smaller than a file of {tmp_path}/data/" \
        "part-0.arrow (" in refused.stderr, refused.stderr
