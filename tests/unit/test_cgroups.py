"""Finding the cgroup hierarchy (v1 and v2) from /proc's text, and what a trainer's cgroup is
given under v2. These machines mount v1 only, so v2 is exercised here on a plain directory: the
names and formats of the files written, not the kernel's reading of them
(tests/integration/test_resources.py runs v1 for real)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from primus.executor.cgroups import (
    CgroupError,
    Hierarchy,
    Limits,
    TrainerCgroup,
    find_hierarchy,
    held_go,
)


def proc(tmp_path: Path, mountinfo: str, own: str) -> tuple[str, str]:
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(own)
    return str(tmp_path / "mountinfo"), str(tmp_path / "cgroup")


def test_v2_with_the_memory_controller_is_used_under_this_process_or_the_parent(tmp_path):
    mount = tmp_path / "unified"
    mount.mkdir()
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    files = proc(tmp_path, f"30 23 0:26 / {mount} rw,nosuid - cgroup2 cgroup2 rw\n",
                 "0::/user.slice/session-1.scope\n")

    assert find_hierarchy(None, *files) == Hierarchy(
        2, {"": mount / "user.slice" / "session-1.scope"})
    assert find_hierarchy("/primus", *files) == Hierarchy(2, {"": mount / "primus"})


def test_v1_is_used_where_v2_offers_no_memory_each_controller_under_its_own_path(tmp_path):
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("")  # hybrid: controllers bound to v1
    lines = [f"41 31 0:38 / {unified} rw - cgroup2 cgroup2 rw"]
    lines += [f"3{i} 31 0:3{i} /docker/abc {tmp_path / name} rw - cgroup cgroup rw,{name}"
              for i, name in enumerate(("memory", "cpu,cpuacct", "pids"))]
    files = proc(tmp_path, "\n".join(lines) + "\n",
                 "4:memory:/docker/abc/job\n2:cpu,cpuacct:/docker/abc\n8:pids:/docker/abc\n")

    found = find_hierarchy(None, *files)

    assert found.version == 1
    assert found.parents == {"memory": tmp_path / "memory" / "job",
                             "cpu": tmp_path / "cpu,cpuacct",
                             "cpuacct": tmp_path / "cpu,cpuacct", "pids": tmp_path / "pids"}


def test_without_a_memory_controller_there_is_nothing_to_enforce_with(tmp_path):
    files = proc(tmp_path, f"39 31 0:36 / {tmp_path} rw - cgroup cgroup rw,pids\n", "8:pids:/\n")
    with pytest.raises(CgroupError, match="no cgroup hierarchy with the memory controller"):
        find_hierarchy(None, *files)


def test_under_v2_a_trainer_gets_its_limits_and_its_parent_the_controllers(tmp_path):
    made = TrainerCgroup.make(Hierarchy(2, {"": tmp_path}), "primus.app.worker-0.1",
                              Limits(memory=1 << 30, cpu=1.5, pids=512))
    directory = tmp_path / "primus.app.worker-0.1"

    assert made.directories == {"": directory}
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +cpu +pids\n"
    assert (directory / "memory.max").read_text() == f"{1 << 30}\n"
    assert (directory / "cpu.max").read_text() == "150000 100000\n"
    assert (directory / "pids.max").read_text() == "512\n"
    assert made.wrap(["train"])[-2:] == ["--", "train"]
    assert str(directory / "cgroup.procs") in made.wrap(["train"])


def test_a_trainer_cgroup_name_is_one_component_of_primus_s_own(tmp_path):
    for name in ("../escape", "other", "primus.a/b"):
        with pytest.raises(CgroupError, match="must be one path component"):
            TrainerCgroup.make(Hierarchy(2, {"": tmp_path}), name, Limits(1, 1.0, None))


def test_a_held_trainer_is_told_exactly_its_environment_and_runs_only_when_told(tmp_path):
    held = TrainerCgroup(Hierarchy(1, {}), {}, Limits(memory=1, cpu=1.0, pids=None))  # none to join
    argv = held.wrap_held(["/usr/bin/env", "-0"])
    environment = {"A": "it's $HOME\n`x` \\ \"q\"", "EMPTY": "", "PATH": "/usr/bin:/bin"}

    told = subprocess.run(argv, input=held_go(environment), env={}, cwd=tmp_path,
                          capture_output=True, check=True)
    got = dict(item.split("=", 1) for item in told.stdout.decode().split("\0") if item)
    assert got == {**environment, "PWD": str(tmp_path)}

    untold = subprocess.run(argv, input=b"", env={}, capture_output=True, check=False)
    assert (untold.returncode, untold.stdout) == (0, b""), "not told: it exits, runs nothing"


def test_an_environment_with_a_name_no_shell_takes_is_not_told_through_the_pipe():
    assert held_go({"BASH_FUNC_f%%": "() { :; }"}) is None
    assert held_go({"1X": "y"}) is None
