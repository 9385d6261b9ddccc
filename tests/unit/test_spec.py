"""The job spec: its models, the layered loader and the errors it reports."""

import json
import re
import textwrap
from pathlib import Path

import pydantic
import pytest

from primus.config.loader import NO_VALUE, SpecError, load_job_spec
from primus.config.spec import ArraySpec, JobSpec, RoleSpec, job_schema, parse_array_option

TWO_ROLES = """
name: demo
roles:
  - name: chief
    command: python train.py
  - name: worker
    num: 2
    command: [python, train.py]
"""


def write_job(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load_error(path: Path, **layers) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_job_spec(path, **layers)
    return caught.value


def with_worker(tmp_path: Path, worker_lines: str) -> Path:
    """A job whose second role, the worker, has the given YAML lines (replacing its own)."""
    lines = textwrap.dedent(worker_lines)
    given = {line.partition(":")[0].strip() for line in lines.splitlines()}
    head, worker = TWO_ROLES.split("  - ")[:2], TWO_ROLES.split("  - ")[2]
    kept = [line for line in ["    name: worker\n", *worker.splitlines(keepends=True)[1:]]
            if line.partition(":")[0].strip() not in given]
    body = "".join(kept) + textwrap.indent(lines, "    ")
    return write_job(tmp_path, "  - ".join(head) + "  - " + body[4:])


def test_minimal_job_gets_built_in_defaults(tmp_path):
    spec = load_job_spec(write_job(tmp_path, TWO_ROLES))

    chief = spec.role("chief")
    assert (chief.num, chief.cpu, chief.memory, chief.gpu, chief.ports) == (1, 1.0, 2**30, 0, 1)
    assert chief.success_percent == 100
    assert chief.command == "python train.py"
    assert spec.role("worker").command == ["python", "train.py"]
    policy = spec.policy
    assert (policy.heartbeat_ttl, policy.register_timeout, policy.stop_grace) == (10, 120, 10)
    assert spec.env == {}


def test_error_reads_file_field_value_and_what_is_allowed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with_worker(tmp_path, "num: 0")

    error = load_error(Path("job.yaml"))

    assert str(error) == "job.yaml: roles[1].num: got 0; must be an integer >= 1 and <= 100000"


def test_num_below_one_is_rejected(tmp_path):
    path = with_worker(tmp_path, "num: 0")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "roles[1].num", 0)
    assert error.allowed == "must be an integer >= 1 and <= 100000"


def test_unknown_key_is_rejected_naming_field_and_allowed_keys(tmp_path):
    path = with_worker(tmp_path, "replicas: 3")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "roles[1].replicas", 3)
    assert error.allowed == (
        "unknown field; allowed: name, num, command, env, cpu, memory, gpu, gpu_locality,"
        " gpu_locality_preferred, cpu_binding, ports, success_percent, straggler, min_num,"
        " max_per_host, hosts, restart_policy, retryable_exit_codes,"
        " permanent_exit_codes, max_failures, max_role_failures, restart_backoff,"
        " restart_backoff_max, failure_action, on_cluster_change, resize, autosize,"
        " cluster_signal, hang_timeout, on_hang"
    )


def test_unknown_policy_key_lists_policy_fields(tmp_path):
    path = write_job(tmp_path, TWO_ROLES + "policy: {ttl: 5}\n")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "policy.ttl", 5)
    assert error.allowed == (
        "unknown field; allowed: heartbeat_ttl, register_timeout, stop_grace, max_app_attempts,"
        " deadline, blacklist_failures, blacklist_cooldown")


def test_duplicate_role_names_are_rejected(tmp_path):
    path = write_job(tmp_path, TWO_ROLES + "  - name: chief\n    command: python eval.py\n")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "roles[2].name", "chief")
    assert error.allowed == "must be unique among roles; roles[0] has the same name"


@pytest.mark.parametrize(
    "command", ['""', '"   "', "[]", '[python, ""]', '[python, "  "]', "[python, 3]", "{a: b}"]
)
def test_empty_command_is_rejected(tmp_path, command):
    path = with_worker(tmp_path, "")
    path.write_text(path.read_text().replace("command: [python, train.py]", f"command: {command}"))

    error = load_error(path)

    assert (error.source, error.field) == (str(path), "roles[1].command")
    assert error.allowed.startswith("must be a non-blank string (run by /bin/sh -c) or a non-empty")


def test_missing_command_is_reported_as_required(tmp_path):
    path = write_job(tmp_path, "name: demo\nroles: [{name: worker}]\n")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "roles[0].command", NO_VALUE)
    assert str(error) == f"{path}: roles[0].command: is required"


def test_wrong_type_names_the_field_and_value(tmp_path):
    path = with_worker(tmp_path, "cpu: two")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "roles[1].cpu", "two")
    assert error.allowed == "must be a number > 0 and <= 100000"


@pytest.mark.parametrize("value", ["yes", "'4'", "1.5"])
def test_num_must_be_a_real_integer(tmp_path, value):
    path = with_worker(tmp_path, f"num: {value}")

    error = load_error(path)

    assert (error.field, error.allowed) == ("roles[1].num", "must be an integer >= 1 and <= 100000")


@pytest.mark.parametrize(
    ("line", "field", "value", "allowed"),
    [
        ("ports: 65", "roles[1].ports", 65, "must be an integer >= 0 and <= 64"),
        ("gpu: -1", "roles[1].gpu", -1, "must be an integer >= 0 and <= 1024"),
        ("success_percent: 101", "roles[1].success_percent", 101,
         "must be a number >= 0 and <= 100"),
        ("name: Worker", "roles[1].name", "Worker", "must match ^[a-z][a-z0-9_-]{0,31}$"),
    ],
)
def test_out_of_range_role_values_are_rejected(tmp_path, line, field, value, allowed):
    path = with_worker(tmp_path, line)

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), field, value)
    assert error.allowed == allowed


def test_job_name_must_match_its_pattern(tmp_path):
    path = write_job(tmp_path, TWO_ROLES.replace("name: demo", "name: -demo"))

    error = load_error(path)

    assert (error.field, error.value) == ("name", "-demo")
    assert error.allowed == "must match ^[a-z0-9][a-z0-9_.-]{0,62}$"


def test_job_needs_at_least_one_role(tmp_path):
    path = write_job(tmp_path, "name: demo\nroles: []\n")

    error = load_error(path)

    assert (error.field, error.value, error.allowed) == ("roles", [], "must have at least 1 entry")


def test_several_problems_are_reported_one_line_each(tmp_path):
    path = with_worker(tmp_path, "num: 0\ngpu: -1\n")

    error = load_error(path)

    assert [problem.field for problem in error.problems] == ["roles[1].num", "roles[1].gpu"]
    assert str(error).splitlines() == [
        f"{path}: roles[1].num: got 0; must be an integer >= 1 and <= 100000",
        f"{path}: roles[1].gpu: got -1; must be an integer >= 0 and <= 1024",
    ]


def test_env_key_must_be_a_variable_name(tmp_path):
    path = write_job(tmp_path, TWO_ROLES + "env: {MY-VAR: x}\n")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "env.MY-VAR", "MY-VAR")
    assert error.allowed == "the key must match ^[A-Za-z_][A-Za-z0-9_]*$"


def test_env_numbers_become_text_but_booleans_are_rejected(tmp_path):
    spec = load_job_spec(write_job(tmp_path, TWO_ROLES + "env: {OMP_NUM_THREADS: 4, LR: 0.5}\n"))
    assert spec.env == {"OMP_NUM_THREADS": "4", "LR": "0.5"}

    path = with_worker(tmp_path, "env: {DEBUG: true}")
    error = load_error(path)
    assert (error.source, error.field, error.value) == (str(path), "roles[1].env.DEBUG", True)
    assert error.allowed == "must be a string"


@pytest.mark.parametrize(
    ("memory", "size"),
    [
        ("512Mi", 512 * 2**20),
        ("4Gi", 4 * 2**30),
        ("2G", 2 * 10**9),
        ("100M", 100 * 10**6),
        ("'1024'", 1024),
        ("64k", 64_000),
        ("2048", 2048),
    ],
)
def test_memory_units_are_normalised_to_bytes(tmp_path, memory, size):
    spec = load_job_spec(with_worker(tmp_path, f"memory: {memory}"))

    assert spec.role("worker").memory == size


@pytest.mark.parametrize(
    ("memory", "value"), [("4GB", "4GB"), ("-1Gi", "-1Gi"), ("1.5Gi", "1.5Gi"), ("true", True)]
)
def test_bad_memory_is_rejected_saying_what_is_allowed(tmp_path, memory, value):
    path = with_worker(tmp_path, f"memory: {memory}")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "roles[1].memory", value)
    assert "Ki, Mi, Gi, Ti (powers of 1024)" in error.allowed


def test_negative_memory_is_rejected(tmp_path):
    path = with_worker(tmp_path, "memory: -5")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "roles[1].memory", -5)
    assert error.allowed == "must be an integer > 0"


def test_durations_accept_seconds_and_units(tmp_path):
    policy_line = "policy: {heartbeat_ttl: 30s, register_timeout: 2m, stop_grace: '5'}\n"
    path = write_job(tmp_path, TWO_ROLES + policy_line)

    policy = load_job_spec(path).policy

    assert (policy.heartbeat_ttl, policy.register_timeout, policy.stop_grace) == (30, 120, 5)


DURATION_RULE = (
    "must be a whole number of seconds, or a whole number with a unit s, m or h (10s, 2m, 1h)"
)


@pytest.mark.parametrize(
    ("line", "field", "value", "allowed"),
    [
        ("heartbeat_ttl: 1", "policy.heartbeat_ttl", 1, "must be an integer >= 2 and <= 300"),
        ("heartbeat_ttl: 10min", "policy.heartbeat_ttl", "10min", DURATION_RULE),
        ("stop_grace: 1.5", "policy.stop_grace", 1.5, DURATION_RULE),
        ("register_timeout: 0s", "policy.register_timeout", 0, "must be an integer > 0"),
    ],
)
def test_bad_durations_are_rejected(tmp_path, line, field, value, allowed):
    path = write_job(tmp_path, TWO_ROLES + f"policy: {{{line}}}\n")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), field, value)
    assert error.allowed == allowed


def test_site_defaults_are_overridden_by_job_file_and_set(tmp_path):
    file_layer = "policy: {register_timeout: 60}\nenv: {B: file, C: file}\n"
    path = write_job(tmp_path, TWO_ROLES + file_layer)
    site = {
        "policy": {"heartbeat_ttl": 15, "register_timeout": 300, "stop_grace": 20},
        "env": {"A": "site", "B": "site"},
    }

    spec = load_job_spec(path, site_defaults=site, overrides=["policy.stop_grace=3", "env.C=set"])

    policy = spec.policy
    assert (policy.heartbeat_ttl, policy.register_timeout, policy.stop_grace) == (15, 60, 3)
    assert spec.env == {"A": "site", "B": "file", "C": "set"}


def test_lists_from_a_later_layer_replace_earlier_ones(tmp_path):
    site = {"roles": [{"name": "default", "command": "true"}]}

    spec = load_job_spec(write_job(tmp_path, TWO_ROLES), site_defaults=site)

    assert [role.name for role in spec.roles] == ["chief", "worker"]


def test_site_defaults_are_not_modified(tmp_path):
    site = {"env": {"A": "site"}}

    load_job_spec(write_job(tmp_path, TWO_ROLES), site_defaults=site, overrides=["env.A=set"])

    assert site == {"env": {"A": "site"}}


def test_set_selects_role_by_name(tmp_path):
    spec = load_job_spec(write_job(tmp_path, TWO_ROLES), overrides=["roles.worker.num=4"])

    assert (spec.role("chief").num, spec.role("worker").num) == (1, 4)


def test_set_selects_role_by_index(tmp_path):
    spec = load_job_spec(write_job(tmp_path, TWO_ROLES), overrides=["roles.0.gpu=2"])

    assert (spec.role("chief").gpu, spec.role("worker").gpu) == (2, 0)


def test_set_value_is_parsed_as_yaml(tmp_path):
    spec = load_job_spec(
        write_job(tmp_path, TWO_ROLES),
        overrides=[
            "name=other",
            "roles.chief.command=python eval.py --fast",
            "roles.worker.command=[torchrun, t.py]",
            "roles.worker.cpu=2.5",
            "env.FLAG='true'",
        ],
    )

    assert spec.name == "other"
    assert spec.role("chief").command == "python eval.py --fast"
    assert spec.role("worker").command == ["torchrun", "t.py"]
    assert spec.role("worker").cpu == 2.5
    assert spec.env == {"FLAG": "true"}


SET_SYNTAX = "must be KEY=VALUE, KEY dotted, e.g. roles.worker.num=4"
ROLE_CHOICE = "must be an index below 2 or one of the names chief, worker"


@pytest.mark.parametrize(
    ("override", "field", "value", "allowed"),
    [
        ("roles.worker.num", "", "roles.worker.num", SET_SYNTAX),
        ("roles..num=1", "", "roles..num=1", SET_SYNTAX),
        ("roles.ps.num=1", "roles.ps.num", "ps", ROLE_CHOICE),
        ("roles.7.num=1", "roles.7.num", "7", ROLE_CHOICE),
        ("name.first=x", "name.first", "demo", "name is not a mapping, so it has no 'first'"),
    ],
)
def test_bad_set_is_rejected(tmp_path, override, field, value, allowed):
    error = load_error(write_job(tmp_path, TWO_ROLES), overrides=[override])

    assert (error.source, error.field, error.value) == ("--set", field, value)
    assert error.allowed == allowed


def test_set_value_with_yaml_syntax_error_is_rejected(tmp_path):
    error = load_error(write_job(tmp_path, TWO_ROLES), overrides=["roles.worker.command=[python"])

    assert (error.source, error.field, error.value) == ("--set", "roles.worker.command", "[python")
    assert error.allowed.startswith("invalid YAML at line 1, column 8: ")


def test_bad_value_is_blamed_on_the_layer_it_came_from(tmp_path):
    path = write_job(tmp_path, TWO_ROLES + "policy: {stop_grace: -1}\n")
    site = {"policy": {"heartbeat_ttl": 1}}

    error = load_error(path, site_defaults=site, overrides=["roles.worker.num=0"])

    assert [(p.source, p.field, p.value) for p in error.problems] == [
        ("--set", "roles[1].num", 0),
        ("site defaults", "policy.heartbeat_ttl", 1),
        (str(path), "policy.stop_grace", -1),
    ]


def test_problem_in_a_list_from_the_job_file_is_blamed_on_the_job_file(tmp_path):
    path = write_job(tmp_path, "name: demo\nroles: [{name: worker}]\n")
    site = {"roles": [{"name": "default", "command": "true"}]}

    error = load_error(path, site_defaults=site)

    assert (error.source, error.field, error.value) == (str(path), "roles[0].command", NO_VALUE)


def test_site_defaults_must_be_a_mapping(tmp_path):
    error = load_error(write_job(tmp_path, TWO_ROLES), site_defaults=["policy"])

    assert (error.source, error.field, error.value) == ("site defaults", "", ["policy"])


def test_yaml_syntax_error_names_line(tmp_path):
    path = write_job(tmp_path, "name: demo\nroles:\n  - name: worker\n    command: x\n   num: 2\n")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "", NO_VALUE)
    assert error.allowed.startswith("invalid YAML at line 5, column 4: ")
    assert str(error).startswith(f"{path}: invalid YAML at line 5, column 4: ")


def test_missing_file_is_reported(tmp_path):
    path = tmp_path / "absent.yaml"

    error = load_error(path)

    assert str(error) == f"{path}: cannot read: No such file or directory"


@pytest.mark.parametrize(
    ("text", "value"), [("- a\n- b\n", ["a", "b"]), ("", None), ("just text\n", "just text")]
)
def test_top_level_must_be_a_mapping(tmp_path, text, value):
    path = write_job(tmp_path, text)

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), "", value)
    assert error.allowed == ("must be a mapping of job fields (name, roles, env, secret_env, "
                             "policy, workdir, files, placement, placement_domain,"
                             " placement_domain_preferred, am, start, data, from_savepoint,"
                             " savepoints_kept, queue, preemptible, array, notify)")


def test_json_job_file_is_accepted(tmp_path):
    worker = {"name": "worker", "num": 3, "command": ["python", "t.py"], "memory": "2Gi"}
    job = {"name": "demo", "roles": [worker]}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))

    spec = load_job_spec(path)

    assert spec.role("worker").num == 3
    assert spec.role("worker").memory == 2 * 2**30


def test_workdir_is_left_unset_when_the_job_file_has_none(tmp_path):
    assert load_job_spec(write_job(tmp_path, TWO_ROLES)).workdir is None


def test_relative_files_are_resolved_against_job_file_directory(tmp_path, monkeypatch):
    (tmp_path / "jobs").mkdir()
    write_job(tmp_path / "jobs", TWO_ROLES + "files: [train.py, /data/vocab.txt]\n")
    monkeypatch.chdir(tmp_path)

    spec = load_job_spec("jobs/job.yaml")

    assert spec.files == [str(tmp_path / "jobs" / "train.py"), "/data/vocab.txt"]


def test_relative_workdir_is_resolved_against_job_file_directory(tmp_path):
    path = write_job(tmp_path, TWO_ROLES + "workdir: ../runs/one\n")

    assert load_job_spec(path).workdir == str(tmp_path.parent / "runs" / "one")
    assert load_job_spec(path, overrides=["workdir=/srv/train"]).workdir == "/srv/train"


def test_spec_survives_a_json_round_trip(tmp_path):
    # The submitted spec is stored in etcd as JSON and read back by the AM and the executors.
    path = with_worker(tmp_path, "memory: 4Gi\nenv: {N: 4}\nsuccess_percent: 50")
    spec = load_job_spec(path, overrides=["policy.heartbeat_ttl=1m"])

    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec


def test_spec_is_frozen(tmp_path):
    spec = load_job_spec(write_job(tmp_path, TWO_ROLES))

    with pytest.raises(pydantic.ValidationError):
        spec.name = "other"
    with pytest.raises(pydantic.ValidationError):
        spec.role("worker").num = 9


def test_models_reject_bad_input_without_the_loader():
    with pytest.raises(pydantic.ValidationError):
        RoleSpec(name="worker", command="x", num=0)
    with pytest.raises(pydantic.ValidationError):
        JobSpec(name="demo", roles=[{"name": "w", "command": "x"}, {"name": "w", "command": "y"}])


def test_role_lookup_and_total_executors(tmp_path):
    spec = load_job_spec(write_job(tmp_path, TWO_ROLES))

    assert spec.role("worker").num == 2
    assert spec.total_executors == 3
    with pytest.raises(KeyError):
        spec.role("ps")


def test_schema_lists_role_fields():
    schema = job_schema()

    role = schema["$defs"]["RoleSpec"]
    assert list(role["properties"]) == [
        "name", "num", "command", "env", "cpu", "memory", "gpu", "gpu_locality",
        "gpu_locality_preferred", "cpu_binding", "ports", "success_percent", "straggler",
        "min_num", "max_per_host", "hosts", "restart_policy",
        "retryable_exit_codes",
        "permanent_exit_codes", "max_failures", "max_role_failures", "restart_backoff",
        "restart_backoff_max", "failure_action", "on_cluster_change", "resize", "autosize",
        "cluster_signal", "hang_timeout", "on_hang",
    ]
    assert role["required"] == ["name", "command"]
    assert role["additionalProperties"] is False
    assert all(field["description"] for field in role["properties"].values())
    memory_forms = role["properties"]["memory"]["anyOf"]
    assert {"type": "string", "pattern": "^([0-9]+)(|k|M|G|T|Ki|Mi|Gi|Ti)$"} in memory_forms
    assert schema["$defs"]["PolicySpec"]["properties"]["heartbeat_ttl"]["anyOf"][0] == {
        "type": "integer", "minimum": 2, "maximum": 300,
    }


@pytest.mark.parametrize("name", ["SIGKILL", "SIGTERM", "USR1"])
def test_cluster_signal_must_name_a_signal_a_trainer_can_handle_and_not_its_stop(tmp_path,
                                                                                 name):
    path = with_worker(tmp_path, f"cluster_signal: {name}")

    error = load_error(path)

    assert (error.field, error.value) == ("roles[1].cluster_signal", name)
    assert "other than SIGKILL, SIGSTOP and SIGTERM (which stops a trainer)" in error.allowed



@pytest.mark.parametrize(
    ("start", "field", "value", "allowed"),
    [
        ("{policy: greedy}", "start.policy", "greedy",
         "Input should be 'gang', 'dynamic' or 'ordered'"),
        ("{policy: ordered, schedule_percent: 0}", "start.schedule_percent", 0,
         "must be an integer >= 1 and <= 100"),
        ("{policy: ordered, schedule_percent: 101}", "start.schedule_percent", 101,
         "must be an integer >= 1 and <= 100"),
        ("{policy: ordered, on_timeout: wait}", "start.on_timeout", "wait",
         "Input should be 'fail' or 'continue'"),
        ("{policy: ordered, timeout: 0}", "start.timeout", 0, "must be > 0"),
    ],
)
def test_bad_start_policies_are_rejected_naming_the_field(tmp_path, start, field, value,
                                                          allowed):
    path = tmp_path / "job.yaml"
    path.write_text(f"name: j\nstart: {start}\nroles:\n  - name: worker\n    command: x\n")

    error = load_error(path)

    assert (error.source, error.field, error.value) == (str(path), field, value)
    assert error.allowed == allowed


def test_min_num_above_num_is_rejected(tmp_path):
    path = with_worker(tmp_path, "num: 2\nmin_num: 3")

    error = load_error(path)

    assert error.field == "roles[1]"
    assert error.allowed == "min_num 3 is above num 2; must be 1 to num"


def test_min_num_below_one_is_rejected(tmp_path):
    error = load_error(with_worker(tmp_path, "num: 2\nmin_num: 0"))

    assert (error.field, error.value) == ("roles[1].min_num", 0)
    assert error.allowed == "must be >= 1"


# --- Job arrays ---------------------------------------------------------------------------------


def test_the_array_option_takes_ranges_lists_and_a_max_running():
    assert parse_array_option("0-3") == {"indices": [0, 1, 2, 3]}
    assert parse_array_option("1,3,5-7%2") == {"indices": [1, 3, 5, 6, 7], "max_running": 2}
    assert parse_array_option(" 4 ") == {"indices": [4]}


@pytest.mark.parametrize(("text", "says"), [
    ("", "expected indices such as 0-199"), ("a-b", "expected indices such as 0-199"),
    ("3-1", "a range runs upwards"), ("0-20000", "at most 10000 members"),
    ("0-3%0", "%N needs a whole number N of at least 1"), ("0-3%x", "%N needs a whole"),
    ("1,,2", "expected indices"), ("-1", "expected indices")])
def test_a_bad_array_option_says_what_is_allowed(text, says):
    with pytest.raises(ValueError, match=f"--array '{re.escape(text)}': .*{re.escape(says)}"):
        parse_array_option(text)


def test_an_array_names_its_members_one_way_and_gives_each_its_parameters():
    assert ArraySpec(count=3).members() == [(0, {}), (1, {}), (2, {})]
    assert ArraySpec(indices=[7, 2]).members() == [(2, {}), (7, {})]
    assert ArraySpec(params=[{"lr": 0.1}, {"lr": 0.2, "deep": True}]).members() == [
        (0, {"lr": 0.1}), (1, {"lr": 0.2, "deep": True})]
    for bad in ({}, {"count": 2, "indices": [1]}, {"indices": [1, 1]},
                {"count": 2, "max_running": 0}, {"params": [{"bad name": 1}]}):
        with pytest.raises(pydantic.ValidationError):
            ArraySpec.model_validate(bad)


def test_a_job_array_cannot_start_from_a_savepoint():
    with pytest.raises(pydantic.ValidationError,
                       match="every member would restore the same streams"):
        JobSpec.model_validate({"name": "sweep", "array": {"count": 2},
                                "from_savepoint": "train-20261129-000000-abcd/1",
                                "roles": [{"name": "worker", "command": "x"}]})


def test_array_params_may_be_a_mapping_of_equal_lists_and_unequal_ones_are_refused():
    assert ArraySpec(params={"lr": [0.1, 0.01], "seed": [1, 2]}).members() == [
        (0, {"lr": 0.1, "seed": 1}), (1, {"lr": 0.01, "seed": 2})]
    with pytest.raises(pydantic.ValidationError,
                       match="every parameter needs one value per member; lr has 2, seed has 1"):
        ArraySpec(params={"lr": [0.1, 0.01], "seed": [1]})
    with pytest.raises(pydantic.ValidationError, match="lr is not"):
        ArraySpec(params={"lr": 0.1})
