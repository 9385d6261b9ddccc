"""Hostile and malformed input: refused within stated bounds, naming the source and the field.

Regression cases of issue 17's findings 2, 3, 5 and 6 (job files, --set, site defaults and
inventories), measured in time and memory where the finding was about them.
"""

import os
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from primus.config.inventory import InventoryError, load_inventory
from primus.config.loader import MAX_SPEC_BYTES, SpecError, load_job_spec
from primus.config.reading import (
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    InputError,
    parse_yaml,
)
from primus.config.site import load_settings

JOB = """\
name: demo
roles:
  - name: worker
    command: python train.py
"""

BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(9))


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(path: Path, **layers) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_job_spec(path, **layers)
    return caught.value


def bounded(call, seconds: float = 2.0, megabytes: float = 64.0):
    """Run ``call``; fail unless it returns or raises within the time and memory given. The time
    is the CPU time of this thread: what the call cost, not how busy the machine's other test
    workers kept the cores."""
    tracemalloc.start()
    started = time.thread_time()
    try:
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 - returned for the caller to check
            result = exc
    finally:
        elapsed = time.thread_time() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < seconds, f"took {elapsed:.1f} s of CPU, bound {seconds} s"
    assert peak < megabytes * 2**20, f"peak {peak / 2**20:.0f} MiB, bound {megabytes} MiB"
    return result


def test_billion_laughs_is_refused_at_once_in_little_memory(tmp_path):
    path = write(tmp_path, BILLION_LAUGHS)

    error = bounded(lambda: load_job_spec(path), seconds=1.0, megabytes=16)

    assert isinstance(error, SpecError)
    assert str(error).startswith(f"{path}: expands to more than {MAX_NODES:,} values")


def test_deep_nesting_is_refused_naming_the_bound(tmp_path):
    path = write(tmp_path, "name: " + "[" * 20_000 + "]" * 20_000 + "\n")

    error = bounded(lambda: load_job_spec(path), seconds=1.0)

    assert isinstance(error, SpecError)
    assert f"nests deeper than {MAX_DEPTH} levels" in str(error)


def test_deep_block_nesting_is_refused_naming_the_line():
    text = "".join(" " * level + f"k{level}:\n" for level in range(MAX_DEPTH + 5)) + " " * 80 + "x"

    with pytest.raises(InputError) as caught:
        parse_yaml(text)

    assert caught.value.line == MAX_DEPTH + 1
    assert f"nests deeper than {MAX_DEPTH} levels" in str(caught.value)


def test_aliases_nesting_past_the_bound_once_expanded_are_refused():
    text = "a: &a " + "[" * 60 + "]" * 60 + "\n" + "b: &b [*a]\nc: &c [*b]\nd: &d [*c]\ne: [*d]\n"

    with pytest.raises(InputError, match="once aliases are expanded"):
        parse_yaml(text)


def test_alias_cycle_is_refused():
    with pytest.raises(InputError, match="cycles are not allowed"):
        parse_yaml("a: &a [1, *a]\n")


def test_anchors_and_merge_keys_within_bounds_still_work(tmp_path):
    path = write(tmp_path, textwrap.dedent("""\
        name: demo
        roles:
          - &common {name: chief, command: python train.py, env: {A: "1"}}
          - <<: *common
            name: worker
        """))

    spec = load_job_spec(path)

    assert [(r.name, r.command, r.env) for r in spec.roles] == [
        ("chief", "python train.py", {"A": "1"}), ("worker", "python train.py", {"A": "1"})]


def test_integer_of_thousands_of_digits_is_refused_naming_the_bound(tmp_path):
    path = write(tmp_path, JOB + "    num: " + "9" * 5000 + "\n")

    error = load_error(path)

    assert "a number of 5000 characters at line 5; numbers have at most 100" in str(error)


def test_integer_of_thousands_of_digits_in_set_is_refused(tmp_path):
    error = load_error(write(tmp_path, JOB), overrides=["roles.worker.num=" + "9" * 5000])

    assert error.source == "--set"
    assert error.field == "roles.worker.num"
    assert "numbers have at most 100" in error.allowed


def test_duplicate_keys_are_refused_naming_both_lines(tmp_path):
    path = write(tmp_path, JOB + "    command: rm -rf /\n")

    error = load_error(path)

    assert str(error) == (f"{path}: the key 'command' is given twice, on line 4 and on line 5; "
                          "give each key once")


def test_a_fifo_as_job_file_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException | object] = []
    reader = threading.Thread(target=lambda: outcome.append(bounded(lambda: load_job_spec(fifo))),
                              daemon=True)
    reader.start()
    reader.join(timeout=5)

    assert not reader.is_alive(), "loading a FIFO blocked"
    assert isinstance(outcome[0], SpecError)
    assert str(outcome[0]) == f"{fifo}: is a named pipe (FIFO); give a regular file"


def test_a_job_file_past_the_size_bound_is_refused_before_parsing(tmp_path):
    path = write(tmp_path, JOB + "# " + "x" * (50 << 20) + "\n")

    error = bounded(lambda: load_job_spec(path), seconds=1.0, megabytes=8)

    assert isinstance(error, SpecError)
    assert str(error) == f"{path}: is larger than 1 MiB; at most 1 MiB is read"
    assert MAX_CONFIG_BYTES == 1 << 20


def test_infinite_cpu_is_refused_at_check(tmp_path):
    error = load_error(write(tmp_path, JOB + "    cpu: .inf\n"))

    assert (error.field, error.value) == ("roles[0].cpu", float("inf"))
    assert error.allowed == "must be a number > 0 and <= 100000"


def test_nan_percent_is_refused_at_check(tmp_path):
    error = load_error(write(tmp_path, JOB + "    success_percent: .nan\n"))

    assert error.field == "roles[0].success_percent"


@pytest.mark.parametrize("value", ["100000000000000000000", "1e20", "3650000d"])
def test_durations_past_ten_years_are_refused(tmp_path, value):
    error = load_error(write(tmp_path, JOB + f"policy: {{deadline: {value}}}\n"))

    assert error.field == "policy.deadline"
    assert "seconds" in error.allowed


@pytest.mark.parametrize(("line", "field"), [
    ('    command: "python\\0 train.py"\n', "roles[0].command"),
    ('    command: [python, "train\\0.py"]\n', "roles[0].command[1]"),
    ('    env: {A: "x\\0y"}\n', "roles[0].env.A"),
    ('env: {A: "x\\0y"}\n', "env.A"),
    ('workdir: "/tmp\\0"\n', "workdir"),
])
def test_nul_characters_are_refused_at_check_naming_the_field(tmp_path, line, field):
    text = JOB.replace("    command: python train.py\n", "") + line
    if "command" not in line:
        text = JOB + line
    error = load_error(write(tmp_path, text))

    assert error.field == field
    assert "must not contain a NUL character" in error.allowed


def test_a_huge_env_value_is_refused_naming_the_field(tmp_path):
    path = write(tmp_path, JOB + "env: {BIG: " + "x" * (3 << 20) + "}\n")

    error = load_error(path)  # past the file bound already

    assert "at most 1 MiB" in str(error)


def test_an_env_value_past_the_string_bound_is_refused_naming_the_field(tmp_path):
    error = load_error(write(tmp_path, JOB + "env: {BIG: " + "x" * 70_000 + "}\n"))

    assert (error.field, error.allowed) == ("env.BIG", "must be at most 65536 characters")


def test_a_job_too_large_to_store_is_refused_naming_the_largest_field(tmp_path):
    env = "".join(f"  V{i}: {'x' * 60_000}\n" for i in range(12))
    site = {"env": {f"S{i}": "x" * 60_000 for i in range(12)}}
    error = load_error(write(tmp_path, JOB + "env:\n" + env), site_defaults=site)

    assert error.field == "env"
    assert f"a job is at most {MAX_SPEC_BYTES:,} bytes" in error.allowed


def test_errors_of_a_job_with_data_name_the_job_file(tmp_path):
    path = write(tmp_path, JOB + "    num: 0\n"
                 "data: [{name: s, roles: [worker], sources: [{path: 'x/*.txt'}]}]\n")

    error = load_error(path)

    assert error.source == str(path)
    assert error.field == "roles[0].num"


def test_set_errors_are_blamed_on_set(tmp_path):
    error = load_error(write(tmp_path, JOB), overrides=["roles.worker.restart_policy=always"])

    assert error.source == "--set"


def test_set_with_unclosed_bracket_names_the_problem(tmp_path):
    error = load_error(write(tmp_path, JOB), overrides=["roles.worker.command=[unclosed"])

    assert str(error) == ("--set: roles.worker.command: got '[unclosed'; invalid YAML at line 1, "
                          "column 10: expected ',' or ']', but got '<stream end>'")


def test_site_defaults_file_is_read_within_the_same_bounds(tmp_path):
    site = write(tmp_path, BILLION_LAUGHS, "defaults.yaml")

    error = bounded(lambda: load_settings(env={"PRIMUS_CONF": str(site)}), seconds=1.0)

    assert isinstance(error, SpecError)
    assert str(error).startswith(f"{site}: expands to more than")


def test_inventory_billion_laughs_is_refused(tmp_path):
    path = write(tmp_path, BILLION_LAUGHS, "hosts.yml")

    error = bounded(lambda: load_inventory(path), seconds=1.0)

    assert isinstance(error, InventoryError)
    assert "expands to more than" in str(error)


def test_inventory_json_nested_past_the_bound_is_refused(tmp_path):
    path = write(tmp_path, '{"all": ' + "[" * 5000 + "]" * 5000 + "}", "hosts.json")

    error = bounded(lambda: load_inventory(path), seconds=2.0)

    assert isinstance(error, InventoryError)
    assert f"nests deeper than {MAX_DEPTH} levels" in str(error)


def test_inventory_host_range_past_the_bound_is_refused(tmp_path):
    path = write(tmp_path, "[primus]\ngpu[0:99999999999]\n", "hosts.ini")

    error = bounded(lambda: load_inventory(path), seconds=1.0)

    assert isinstance(error, InventoryError)
    assert "expands to more than 100,000 hosts" in str(error)


def test_inventory_duplicate_yaml_keys_are_refused_naming_both_lines(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n    h1:\n    h1:\n", "hosts.yml")

    with pytest.raises(InventoryError, match="given twice, on line 3 and on line 4"):
        load_inventory(path)


def test_inventory_infinite_cpu_is_refused(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n    h1: {primus_cpu: .inf}\n", "hosts.yml")

    with pytest.raises(InventoryError, match="primus_cpu=inf: must be a number > 0"):
        load_inventory(path)


def test_inventory_nul_is_refused_naming_the_line(tmp_path):
    path = write(tmp_path, "[primus]\nh1\nh2 ansible_user=a\0b\n", "hosts.ini")

    with pytest.raises(InventoryError, match="hosts.ini:3: holds a NUL character"):
        load_inventory(path)


def test_a_fifo_as_inventory_is_refused(tmp_path):
    fifo = tmp_path / "hosts.ini"
    os.mkfifo(fifo)

    error = bounded(lambda: load_inventory(fifo), seconds=2.0)

    assert isinstance(error, InventoryError)
    assert "is a named pipe (FIFO); give a regular file" in str(error)


def test_a_hostfile_slot_count_of_thousands_of_digits_is_refused(tmp_path):
    path = write(tmp_path, "h1 slots=" + "9" * 5000 + "\n", "hostfile")

    with pytest.raises(InventoryError, match="a hostfile line is NAME slots=N"):
        load_inventory(path)


def test_inventory_groups_nested_thousands_deep_are_refused_in_bounded_time(tmp_path):
    chain = "".join(f"[g{i}:children]\ng{i + 1}\n" for i in range(5_000))
    path = write(tmp_path, chain + "[g5000]\nh1\n", "hosts.ini")

    error = bounded(lambda: load_inventory(path), seconds=2.0)

    assert isinstance(error, InventoryError)
    assert "descends from more than 256 groups" in str(error)


def test_inventory_cycle_through_thousands_of_groups_is_refused_in_bounded_time(tmp_path):
    chain = "".join(f"[g{i}:children]\ng{i + 1}\n" for i in range(200)) + "[g200:children]\ng0\n"
    path = write(tmp_path, chain + "[g5]\nh1\n", "hosts.ini")

    error = bounded(lambda: load_inventory(path), seconds=2.0)

    assert isinstance(error, InventoryError)
    assert "must not form a cycle" in str(error)


def test_inventory_with_many_groups_each_child_of_a_wide_group_loads_in_bounded_time(tmp_path):
    parents = "".join(f"[p{i}:children]\nwide\n" for i in range(200))
    children = "[wide:children]\n" + "".join(f"c{i}\n" for i in range(2_000))
    hosts = "".join(f"[c{i}]\nh{i}\n" for i in range(2_000))
    path = write(tmp_path, parents + children + hosts, "hosts.ini")

    inventory = bounded(lambda: load_inventory(path), seconds=5.0, megabytes=256)

    assert len(inventory.hosts) == 2_000
    assert {"wide", "p0", "p199", "c7"} <= inventory.hosts[7].groups


def test_inventory_vars_directory_with_links_to_its_parents_is_read_once(tmp_path):
    inventory = write(tmp_path, "[primus]\nh1\n", "hosts.ini")
    vars_dir = tmp_path / "group_vars" / "primus"
    vars_dir.mkdir(parents=True)
    (vars_dir / "a.yml").write_text("primus_slots: 2\n")
    (vars_dir / "loop1").symlink_to(vars_dir)
    (vars_dir / "loop2").symlink_to(tmp_path / "group_vars")

    loaded = bounded(lambda: load_inventory(inventory), seconds=2.0)

    assert not isinstance(loaded, Exception), loaded
    assert loaded.hosts[0].slots == 2
