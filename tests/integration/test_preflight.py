"""``primus spec check`` accepts exactly what ``primus submit`` accepts, but for the checks that
need the hosts or the data, which it names; bad input is refused before anything is written."""

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from primus.client.preflight import CHECKED_AT_SUBMIT, check_job
from primus.config.inventory import local_inventory
from primus.config.loader import SpecError, load_job_spec
from primus.store.embedded import find_etcd_binary
from tests.conftest import run_primus

JOB = """\
name: demo
roles:
  - name: worker
    command: python3 -c pass
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_spec_check_refuses_a_format_no_package_offers(tmp_path):
    (tmp_path / "d").mkdir()
    path = write(tmp_path, JOB + "data: [{name: s, roles: [worker], format: parquet,"
                                 " sources: [{path: 'd/*'}]}]\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path))

    assert caught.value.field == "data[0].format"
    assert "parquet" in str(caught.value)


def test_submit_names_an_unknown_format_once_beside_the_sources_refused(tmp_path):
    path = write(tmp_path, JOB + "data: [{name: s, roles: [worker], format: csv,"
                                 " sources: [{path: 'nosuchfs://bucket/*'}]}]\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path), local_inventory())

    problems = caught.value.problems
    assert [(p.field, p.value) for p in problems] == [
        ("data[0].format", "csv"), ("data[0].sources[0].path", "nosuchfs://bucket/*")]
    assert problems[0].allowed.startswith("unknown record format 'csv'")
    assert problems[1].allowed.startswith("cannot open 'nosuchfs://bucket/*'")


def test_spec_check_refuses_missing_files_and_secret_env(tmp_path, monkeypatch):
    monkeypatch.delenv("PRIMUS_TEST_TOKEN", raising=False)
    path = write(tmp_path, JOB + "files: [nothere.py]\nsecret_env: [PRIMUS_TEST_TOKEN]\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path))

    assert [p.field for p in caught.value.problems] == ["files[0]", "secret_env[0]"]


def test_submit_refuses_a_source_matching_no_file_naming_the_field_and_the_pattern(tmp_path):
    (tmp_path / "d").mkdir()
    path = write(tmp_path, JOB + "data: [{name: s, roles: [worker],"
                                 " sources: [{path: 'd/*.txt'}, {path: 'e/*'}]}]\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path), local_inventory())

    assert [(p.field, p.value, p.allowed) for p in caught.value.problems] == [
        ("data[0].sources[0].path", f"{tmp_path}/d/*.txt", "matches no file"),
        ("data[0].sources[1].path", f"{tmp_path}/e/*", "matches no file")]
    assert str(caught.value.problems[0]) == (f"{path}: data[0].sources[0].path: got "
                                             f"'{tmp_path}/d/*.txt'; matches no file")


def test_cli_spec_check_and_submit_refuse_the_same_file_the_same_way(primus_env, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "part-0.txt").write_text("a record\n")
    path = write(tmp_path, JOB + "data: [{name: s, roles: [worker], format: parquet,"
                                 " sources: [{path: 'd/*'}]}]\n")

    checked = run_primus(primus_env, "spec", "check", str(path))
    submitted = run_primus(primus_env, "submit", str(path))

    assert checked.returncode == submitted.returncode == 2
    assert checked.stderr == submitted.stderr
    assert "data[0].format" in checked.stderr
    assert not (Path(primus_env["PRIMUS_HOME"]) / "apps").exists(), "nothing may be launched"


def test_cli_spec_check_says_what_it_leaves_to_submit(primus_env, tmp_path):
    result = run_primus(primus_env, "spec", "check", str(write(tmp_path, JOB)))

    assert result.returncode == 0, result.stderr
    assert f"not checked here, checked by `primus submit`: {CHECKED_AT_SUBMIT}" in result.stderr


@pytest.mark.parametrize(("line", "field"), [
    ("    cpu: .inf\n", "roles[0].cpu"),
    ('    env: {A: "x\\0y"}\n', "roles[0].env.A"),
    ("policy: {deadline: 100000000000000000000}\n", "policy.deadline"),
])
def test_cli_refuses_values_no_process_can_receive_before_writing(primus_env, tmp_path, line,
                                                                  field):
    path = write(tmp_path, JOB + line)

    for command in ("spec", "submit"):
        args = ("spec", "check", str(path)) if command == "spec" else ("submit", str(path))
        result = run_primus(primus_env, *args)
        assert result.returncode == 2, result.stderr
        assert f"{path}: {field}: got" in result.stderr
        assert "Traceback" not in result.stderr
    assert not (Path(primus_env["PRIMUS_HOME"]) / "apps").exists(), "nothing may be launched"


def test_a_stored_spec_no_model_reads_gives_a_clear_error_not_a_traceback(primus_env, tmp_path,
                                                                         etcd_server):
    # What finding 2 left behind: a spec stored with "cpu": null (an infinity, as JSON).
    app_id = "bad-20261124-000000-abcd"
    root = f"{primus_env['PRIMUS_PREFIX']}/apps/{app_id}/"
    spec = {"name": "bad", "roles": [{"name": "w", "command": "true", "cpu": None}]}
    status = {"app_id": app_id, "name": "bad", "state": "SUBMITTED", "user": "u",
              "submit_host": "h", "submit_time": 1.0}
    etcdctl = [str(find_etcd_binary("etcdctl")), "--endpoints", etcd_server.client_url]
    for key, value in (("spec", spec), ("status", status)):
        subprocess.run([*etcdctl, "put", root + key, json.dumps(value)], check=True,
                       capture_output=True)

    for args in (("status", app_id), ("logs", app_id)):
        result = run_primus(primus_env, *args)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert f"the spec of {app_id} is stored in a form Primus" in result.stderr
