"""``primus scale``, ``role add|remove`` and ``data add`` through the real ``primus`` command,
on an application with a real AM, executors and trainers; and what ``primus status`` shows of
the changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.apps import status_json
from tests.support.jobs import READER_JOB, write_days
from tests.support.primus import run_primus
from tests.support.tokens import user_of
from tests.support.waiting import wait_until


@pytest.fixture
def app_id(cli_env, tmp_path) -> Iterator[str]:
    """A running application whose stream reads ``data/day-1-*.txt`` of ``tmp_path``."""
    write_days(tmp_path, "day-1-a.txt", "day-2-a.txt", "day-2-b.txt")
    (tmp_path / "job.yaml").write_text(READER_JOB)
    submitted = run_primus(cli_env, "submit", str(tmp_path / "job.yaml"))
    assert submitted.returncode == 0, submitted.stderr
    app = submitted.stdout.strip()
    wait_until(lambda: state(cli_env, app) == "RUNNING", 60, f"{app} to run")
    yield app
    run_primus(cli_env, "kill", app)


def state(env: dict[str, str], app: str) -> str:
    return status_json(env, app)["status"]["state"]


def primus_ok(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    result = run_primus(env, *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def primus_refused(env: dict[str, str], *args: str) -> str:
    result = run_primus(env, *args)
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    return result.stderr


def test_scale_prints_the_old_and_new_count_and_refuses_a_negative_one_naming_executors(
        cli_env, app_id):
    assert primus_ok(cli_env, "scale", app_id, "worker", "2") == (
        "worker: 1 → 2 executors (change 1); the AM applies it\n")
    assert "error: executors: got -1; must be >= 1" in primus_refused(
        cli_env, "scale", app_id, "worker", "-1")


def test_role_add_reads_the_role_file_and_refuses_one_that_fails_validation(cli_env, app_id,
                                                                           tmp_path):
    role = tmp_path / "evaluator.yaml"
    role.write_text("name: evaluator\nnum: 2\ncpu: 0.1\ncommand: sleep 600\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: evaluator\nnum: 0\ncommand: sleep 600\n")

    assert primus_ok(cli_env, "role", "add", app_id, str(role)) == (
        "role evaluator added with 2 executors (change 1); the AM applies it\n")
    assert f"error: {bad}: num: got 0; must be an integer >= 1" in primus_refused(
        cli_env, "role", "add", app_id, str(bad))
    assert f"error: {tmp_path / 'none.yaml'}: cannot read" in primus_refused(
        cli_env, "role", "add", app_id, str(tmp_path / "none.yaml"))


def test_role_remove_stops_the_role_and_refuses_an_unknown_one(cli_env, app_id):
    assert primus_ok(cli_env, "role", "remove", app_id, "ps") == (
        "role ps removed (1 executor stopped) (change 1); the AM applies it\n")
    assert f"error: {app_id} has no role 'nope'; roles: worker" in primus_refused(
        cli_env, "role", "remove", app_id, "nope")


def test_data_add_takes_a_relative_source_from_the_current_directory(cli_env, app_id,
                                                                     tmp_path):
    added = primus_ok(cli_env, "data", "add", app_id, "train", "data/day-2-*.txt",
                      cwd=tmp_path)

    assert added == (f"data source {tmp_path}/data/day-2-*.txt (2 files) added to stream "
                     f"train (change 1); the AM applies it\n")
    refused = primus_refused(cli_env, "data", "add", app_id, "train",
                             str(tmp_path / "day-9-*.txt"))
    assert "error: source: path: got '" in refused and "matches no file" in refused


def test_status_shows_desired_and_running_counts_and_each_change_with_who_asked(cli_env,
                                                                               app_id):
    primus_ok(cli_env, "scale", app_id, "worker", "2")
    user = user_of(cli_env)

    def shown() -> str | None:
        text = primus_ok(cli_env, "status", app_id)
        return text if "worker ×2: 2 desired, 2 running" in text else None
    text = wait_until(shown, 60, "status to show both workers running")

    assert "ps ×1: 1 desired, 1 running" in text
    assert f"change 1 by {user}: role worker scaled from 1 to 2 executors" in text
    status = json.loads(primus_ok(cli_env, "status", app_id, "-o", "json"))
    assert status["desired"] == {"worker": 2, "ps": 1}
    assert status["status"]["changes_recorded"] == 1 and status["pending_changes"] == []
