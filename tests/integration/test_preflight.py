"""``primus spec check`` accepts exactly what ``primus submit`` accepts, but for the checks that
need the hosts or the data, which it names; bad input is refused before anything is written."""

import json
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from primus.api.client import ApiError, Client
from primus.client.preflight import CHECKED_AT_SUBMIT, check_job
from primus.config.inventory import Host, local_inventory
from primus.config.loader import SpecError, load_job_spec
from primus.config.queues import QueuesConfig, QueueSpec, Quota
from primus.store.embedded import find_etcd_binary
from tests.support.primus import run_primus
from tests.support.server import start_server

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
    path = write(tmp_path, JOB + "data: [{name: s, roles: [worker], format: avro,"
                                 " sources: [{path: 'd/*'}]}]\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path))

    assert caught.value.field == "data[0].format"
    assert "avro" in str(caught.value)


def test_spec_check_refuses_columns_for_a_format_without_them(tmp_path):
    (tmp_path / "d").mkdir()
    path = write(tmp_path, JOB + "data: [{name: s, roles: [worker], format: text,"
                                 " columns: [a], sources: [{path: 'd/*'}]}]\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path))

    assert (caught.value.field, caught.value.value) == ("data[0].columns", "a")
    assert "format text has no columns" in str(caught.value)


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


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path. A problem shortens a value past the length it shows, and
    a test worker's ``tmp_path`` (``…/popen-gw0/test_…``) may be that long."""
    with tempfile.TemporaryDirectory(prefix="pf-") as name:
        yield Path(name)


def test_submit_refuses_a_source_matching_no_file_naming_the_field_and_the_pattern(short_dir):
    tmp_path = short_dir
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


def test_a_shuffle_buffer_is_refused_for_a_format_without_records_and_past_its_bound(
        short_dir):
    tmp_path = short_dir
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.bin").write_bytes(b"raw")
    path = write(tmp_path, JOB + "data: [{name: s, roles: [worker], format: bytes,"
                                 " shuffle_buffer: 100, sources: [{path: 'd/*'}]}]\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path), local_inventory())

    assert [(p.field, p.value, p.allowed) for p in caught.value.problems] == [
        ("data[0].shuffle_buffer", "100", "format bytes cannot tell its records apart to "
         "shuffle them (a block of a bytes stream is its record)")]
    too_large = write(tmp_path, JOB + "data: [{name: s, roles: [worker],"
                                      " shuffle_buffer: 20000000, sources: [{path: 'd/*'}]}]\n")
    with pytest.raises(SpecError) as caught:
        load_job_spec(too_large)
    assert "data[0].shuffle_buffer" in str(caught.value)
    assert "10000000" in str(caught.value)


def test_cli_spec_check_and_submit_refuse_the_same_file_the_same_way(primus_env, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "part-0.txt").write_text("a record\n")
    path = write(tmp_path, JOB + "data: [{name: s, roles: [worker], format: avro,"
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


# --- Queues, quotas and GPU devices -----------------------------------------------------------

QUEUES = QueuesConfig(queues={
    "default": QueueSpec(),
    "small": QueueSpec(quota=Quota(gpus=4, cpu=8, executors=4),
                       user_quota=Quota(executors=2)),
    "closed": QueueSpec(quota=Quota(applications=0)),
})
GPU_JOB = """\
name: demo
roles:
  - name: worker
    num: 3
    gpu: 2
    cpu: 2
    command: python3 -c pass
"""


def test_a_queue_the_site_does_not_define_is_refused_naming_the_queues_that_exist(tmp_path):
    path = write(tmp_path, JOB + "queue: urgent\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path), queues=QUEUES)

    assert (caught.value.field, caught.value.value, caught.value.allowed) == (
        "queue", "urgent", "no such queue; queues: closed, default, small")


def test_a_job_array_larger_than_its_queues_max_array_is_refused_before_anything_is_written(
        tmp_path):
    queues = QueuesConfig.model_validate({"queues": {"default": {"max_array": 100}}})
    path = write(tmp_path, JOB + "array: {count: 101}\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path), queues=queues)

    assert (caught.value.field, caught.value.value, caught.value.allowed) == (
        "array", "101 members", "queue default's max_array is 100: submit at most that many "
        "members at once (or to another queue)")
    write(tmp_path, JOB + "array: {count: 100}\n")
    check_job(str(path), load_job_spec(path), queues=queues)


def test_without_site_queues_only_the_default_queue_exists(tmp_path):
    path = write(tmp_path, JOB + "queue: urgent\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path))

    assert caught.value.allowed == "no such queue; queues: default"


def test_a_job_naming_no_queue_goes_to_the_default_queue_and_its_quotas(tmp_path):
    queues = QUEUES.model_copy(update={"default_queue": "closed"})
    path = write(tmp_path, JOB)

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path), queues=queues)

    assert (caught.value.field, caught.value.value) == ("queue", "closed")
    assert caught.value.allowed.startswith("queue closed's quota.applications is 0, the job "
                                           "needs 1 applications at once")


def test_a_job_larger_than_its_queue_quotas_is_refused_naming_each_resource_quota_and_need(
        tmp_path):
    path = write(tmp_path, GPU_JOB + "queue: small\n")

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path), queues=QUEUES)

    assert [(p.field, p.value) for p in caught.value.problems] == [("queue", "small")] * 2
    assert [p.allowed for p in caught.value.problems] == [
        "queue small's quota.gpus is 4, the job needs 6 gpus at once: it could never be "
        "admitted (submit a smaller job, or to another queue)",
        "queue small's user_quota.executors is 2, the job needs 3 executors at once: it could "
        "never be admitted (submit a smaller job, or to another queue)"]


def test_a_job_within_its_queue_quotas_passes(tmp_path):
    path = write(tmp_path, JOB + "queue: small\n")

    assert check_job(str(path), load_job_spec(path), queues=QUEUES).queue == "small"


def test_a_gpu_role_where_no_host_declares_gpu_devices_is_refused_naming_roles_gpu(tmp_path):
    path = write(tmp_path, JOB + "  - name: trainer\n    gpu: 1\n    hosts: [gpu]\n"
                                 "    command: python3 -c pass\n")
    hosts = [Host("a", "127.0.0.1", gpus=4, groups=frozenset({"cpu"})),
             Host("b", "127.0.0.1", groups=frozenset({"gpu"}))]

    with pytest.raises(SpecError) as caught:
        check_job(str(path), load_job_spec(path), hosts)

    assert (caught.value.field, caught.value.value, caught.value.allowed) == (
        "roles[1].gpu", 1, "no host role trainer may use (b) declares GPU devices; declare "
        "them in the inventory (primus_gpus) or ask for gpu: 0")


def test_a_gpu_role_fits_where_its_hosts_declare_devices(tmp_path):
    path = write(tmp_path, GPU_JOB)
    hosts = [Host("a", "127.0.0.1", gpus=4), Host("b", "127.0.0.1", gpus=2)]

    assert check_job(str(path), load_job_spec(path), hosts).roles[0].gpu == 2


SITE_QUEUES = """\
queues:
  default: {}
  small: {quota: {executors: 1}}
"""


def test_cli_submit_queue_option_names_the_queue_and_nothing_is_written(primus_env, tmp_path,
                                                                       etcd_server):
    site = tmp_path / "site.yaml"
    site.write_text(SITE_QUEUES)
    env = {**primus_env, "PRIMUS_CONF": str(site)}
    path = write(tmp_path, JOB.replace("command:", "num: 2\n    command:"))

    unknown = run_primus(env, "submit", str(path), "--queue", "nope")
    too_big = run_primus(env, "submit", str(path), "--set", "queue=default", "--queue", "small")

    assert unknown.returncode == too_big.returncode == 2
    assert f"{path}: queue: got 'nope'; no such queue; queues: default, small" in unknown.stderr
    assert (f"{path}: queue: got 'small'; queue small's quota.executors is 1, the job needs 2 "
            f"executors at once") in too_big.stderr
    etcdctl = [str(find_etcd_binary("etcdctl")), "--endpoints", etcd_server.client_url]
    stored = subprocess.run([*etcdctl, "get", "--prefix", "--keys-only",
                             primus_env["PRIMUS_PREFIX"] + "/"],
                            check=True, capture_output=True, text=True).stdout
    assert stored.strip() == "", "nothing may be written"


def test_cli_spec_check_checks_the_queue_against_the_site_queues(primus_env, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(SITE_QUEUES)
    path = write(tmp_path, JOB + "queue: nope\n")

    result = run_primus({**primus_env, "PRIMUS_CONF": str(site)}, "spec", "check", str(path))

    assert result.returncode == 2
    assert f"{path}: queue: got 'nope'; no such queue; queues: default, small" in result.stderr


def test_api_submit_checks_the_queue_against_the_servers_site_queues(primus_env, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(SITE_QUEUES)
    server = start_server({**primus_env, "PRIMUS_CONF": str(site)}, tmp_path)
    try:
        with Client(server.address, plaintext=True) as client, \
                pytest.raises(ApiError) as refused:
            client.submit(JOB + "queue: small\n", source="job.yaml",
                          overrides=["roles.worker.num=2"])
    finally:
        server.stop()

    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert [field for field, _ in refused.value.violations] == ["job.queue"]
    assert "job.yaml: queue: got 'small'; queue small's quota.executors is 1" in str(
        refused.value)
