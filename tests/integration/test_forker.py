"""The forker (primus/launcher/forker.py) with real processes: a process it forks is what a cold
start would have been, a changed Primus gets a fresh forker, and what it cannot serve fails
before anything starts, so that its caller starts the process cold.

Each test runs a forker of its own (a ``PYTHON*`` variable of the test's in the environment:
part of the forker's key), so that the suite's shared forker is neither used nor disturbed."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import sys
import uuid
from pathlib import Path

import psutil
import pytest

import primus
from primus import processes
from primus.launcher import forker
from tests.support.primus import REPO
from tests.support.waiting import wait_until

DESCRIBE = ("-m", "primus.launcher.forker", "describe")
LONG = "/a-long-path" * 200
"""An argument longer than the forker's own command line and environment: a child's title
must still show it whole (an executor's command line names several long paths)."""


@pytest.fixture
def own_forker(monkeypatch: pytest.MonkeyPatch) -> str:
    """A forker key of this test's own; the forkers it started are stopped after it."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv("PYTHONPRIMUSTEST", mark)
    yield mark
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            if (proc.info["environ"] or {}).get("PYTHONPRIMUSTEST") == mark:
                proc.kill()
        except psutil.Error:
            continue


def described(log: Path) -> dict:
    wait_until(lambda: log.exists() and log.read_text().endswith("\n"), 30,
               f"the described process to write {log}")
    return json.loads(log.read_text())


def start_both(tmp_path: Path, python: str = sys.executable) -> tuple[dict, dict, int]:
    """``describe`` started cold and forked, each with the same request: an environment, a
    working directory, secrets, a descriptor to keep (its number, third), under a umask of
    027."""
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    read_end, write_end = os.pipe()
    # At a number of its own, as the agent's ready pipe is (the first free one from 100: the
    # test worker's own descriptors are below).
    moved = fcntl.fcntl(read_end, fcntl.F_DUPFD, 100)
    os.close(read_end)
    old_mask = os.umask(0o027)
    try:
        request = {"env": {"PRIMUS_PROBE": "one two"}, "cwd": str(workdir),
                   "secrets": {"PRIMUS_ETCD_PASSWORD": "pw-4a1c"}}
        argv = [python, *DESCRIBE, "an argument", LONG, str(moved)]
        cold = processes.spawn_detached(argv, request["env"], str(tmp_path / "cold.log"),
                                        request["cwd"], request["secrets"])
        cold.wait(timeout=60)
        forker.spawn(argv, request["env"], str(tmp_path / "forked.log"), request["cwd"],
                     request["secrets"], pass_fds=[moved])
    finally:
        os.umask(old_mask)
        os.close(moved)
        os.close(write_end)
    return described(tmp_path / "cold.log"), described(tmp_path / "forked.log"), moved


def test_a_forked_process_is_what_a_cold_start_would_have_been(tmp_path, own_forker):
    cold, forked, fd = start_both(tmp_path)

    assert forked["args"] == cold["args"] == ["an argument", LONG, str(fd)]
    assert forked["title"] == cold["title"] == " ".join([sys.executable, *DESCRIBE,
                                                         "an argument", LONG, str(fd)])
    assert forked["cwd"] == cold["cwd"] == str(tmp_path / "work dir")
    assert forked["path0"] == cold["path0"], "-m puts the working directory first"
    assert forked["umask"] == cold["umask"] == 0o027
    assert forked["session_leader"] and cold["session_leader"]
    assert forked["env"] == cold["env"], "the request's whole environment, not the forker's"
    assert forked["env"]["PRIMUS_PROBE"] == "one two"
    assert "pw-4a1c" not in json.dumps(forked["env"])
    assert forked["secrets"] == cold["secrets"] == {"PRIMUS_ETCD_PASSWORD": len("pw-4a1c")}
    assert cold["fds"] == [] and forked["fds"] == [fd], \
        "the descriptor passed at its number (the cold child's was not passed)"
    assert forked["streams"][0] == cold["streams"][0] == os.devnull
    assert forked["streams"][1:] == [str(tmp_path / "forked.log")] * 2
    forker_pid = forked["ppid"]
    assert forker_pid != os.getpid() and psutil.Process(forker_pid).environ().get(
        "PYTHONPRIMUSTEST") == own_forker, "forked by this test's forker"


def test_the_forker_listens_where_only_its_account_can_reach(tmp_path, own_forker):
    start_both(tmp_path)

    directory = Path(forker.runtime_dir())
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    sockets = list(directory.glob("forker-*.sock"))
    assert sockets and all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in sockets)
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600
               for path in directory.glob("forker-*.log"))


def test_a_changed_primus_gets_a_fresh_forker_that_runs_the_change(tmp_path, own_forker,
                                                                   monkeypatch):
    source = tmp_path / "site"
    shutil.copytree(REPO / "primus", source / "primus")  # with its byte code, still valid
    monkeypatch.setenv("PYTHONPATH", str(source))
    log = tmp_path / "first.log"
    argv = [sys.executable, *DESCRIBE]
    forker.spawn(argv, {}, str(log))
    first = described(log)
    assert first["version"] == primus.__version__
    init = source / "primus" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{primus.__version__}"', '"9.9.9-edited"'))

    forker.spawn(argv, {}, str(tmp_path / "second.log"))
    second = described(tmp_path / "second.log")

    assert second["version"] == "9.9.9-edited", "the edit runs: never stale code"
    assert second["ppid"] != first["ppid"], "a fresh forker forked it"
    wait_until(lambda: not psutil.pid_exists(first["ppid"])
               or psutil.Process(first["ppid"]).status() == psutil.STATUS_ZOMBIE, 30,
               "the stale forker to exit")


def test_a_python_without_primus_fails_before_anything_starts(tmp_path, own_forker):
    bare = shutil.which("python3", path="/usr/bin")
    assert bare, "Debian's python3 (scripts/bootstrap installs it)"
    with pytest.raises(forker.ForkerError, match="did not start"):
        forker.spawn([bare, *DESCRIBE], {}, str(tmp_path / "never.log"))
    assert not (tmp_path / "never.log").exists()


@pytest.mark.parametrize("argv", [
    ["python3", "-m", "primus.am"],  # a Python by name: which one runs is PATH's to say
    [sys.executable, "-m", "json.tool"],  # not Primus's
    [sys.executable, "-c", "print(1)"],
])
def test_only_primus_s_modules_under_an_absolute_python_are_forked(tmp_path, argv):
    assert forker.module_of(argv) is None
    with pytest.raises(forker.ForkerError, match="not a module the forker runs"):
        forker.spawn(argv, {}, str(tmp_path / "never.log"))


def test_a_forker_directory_it_cannot_make_fails_before_anything_starts(tmp_path,
                                                                        monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "a-file"))
    with pytest.raises(forker.ForkerError, match="cannot reach the forker"):
        forker.spawn([sys.executable, *DESCRIBE], {}, str(tmp_path / "never.log"))
    assert not (tmp_path / "never.log").exists()


def memory_holds(pid: int, needle: bytes) -> bool:
    """Whether ``needle`` is anywhere in the readable memory of process ``pid`` (as root)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as memory:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                memory.seek(start)
                if needle in memory.read(end - start):
                    return True
            except (OSError, OverflowError, ValueError):
                continue
    return False


def test_the_forker_passes_a_secret_on_without_ever_holding_it(tmp_path, own_forker):
    secret = f"pw-{uuid.uuid4().hex}"
    log = tmp_path / "forked.log"
    pid = forker.spawn([sys.executable, *DESCRIBE], {}, str(log),
                       secrets={"PRIMUS_ETCD_PASSWORD": secret})

    assert described(log)["secrets"] == {"PRIMUS_ETCD_PASSWORD": len(secret)}
    forker_pid = described(log)["ppid"]
    assert memory_holds(forker_pid, own_forker.encode()), "the scan finds what it holds"
    assert forker_pid != pid and not memory_holds(forker_pid, secret.encode()), \
        "the secret went through the forker's memory"
