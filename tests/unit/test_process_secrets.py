"""Secrets reach a Primus process on an inherited pipe, never in its environment, and a process
that holds them is undumpable (primus/process_secrets.py), with real child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from primus import process_secrets
from primus.processes import spawn_detached

# The child prints its secrets, its environment as the kernel shows it to others, and whether
# the variable naming the descriptor is still in os.environ once read.
REPORT = """\
import json, os
from primus import process_secrets
secrets = dict(process_secrets.received())
raw = open(f"/proc/{os.getpid()}/environ", "rb").read().decode()
print(json.dumps({"secrets": secrets, "environ": raw,
                  "fd_named": process_secrets.FD_ENV in os.environ}))
"""


def run_child(secrets: dict[str, str], env: dict[str, str] | None = None) -> dict:
    with process_secrets.handed_over(secrets) as (named, fds):
        result = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True,
                                env={**(env or os.environ), **named}, pass_fds=fds,
                                check=True, timeout=60)
    return json.loads(result.stdout)


def test_a_child_receives_its_secrets_on_a_pipe_and_its_environment_never_holds_them():
    report = run_child({"PRIMUS_ETCD_PASSWORD": "pw-1d4e", "TOKEN": "tok-77a1"})

    assert report["secrets"] == {"PRIMUS_ETCD_PASSWORD": "pw-1d4e", "TOKEN": "tok-77a1"}
    assert "pw-1d4e" not in report["environ"] and "tok-77a1" not in report["environ"]
    assert not report["fd_named"], "the descriptor's number must not reach its children"


def test_secrets_larger_than_a_pipe_s_default_buffer_arrive_whole():
    big = "x" * (300 * 1024)

    assert run_child({"BIG": big})["secrets"] == {"BIG": big}


def test_a_child_given_no_secrets_gets_no_descriptor_and_receives_none():
    with process_secrets.handed_over({}) as (named, fds):
        assert (named, fds) == ({}, [])
    assert run_child({})["secrets"] == {}


def test_a_spawned_process_does_not_inherit_a_secret_from_its_starter_s_environment(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PRIMUS_ETCD_PASSWORD", "from-the-shell-5b2c")
    log = tmp_path / "child.log"

    child = spawn_detached([sys.executable, "-c", REPORT], {"PRIMUS_HOME": str(tmp_path)},
                           str(log), secrets={"PRIMUS_ETCD_PASSWORD": "handed-over-9e0f"})
    child.wait(timeout=60)

    report = json.loads(log.read_text())
    assert report["secrets"] == {"PRIMUS_ETCD_PASSWORD": "handed-over-9e0f"}
    assert "PRIMUS_ETCD_PASSWORD" not in report["environ"]
    assert "PRIMUS_HOME=" in report["environ"]


def test_a_process_made_undumpable_says_so_and_its_exec_d_children_are_dumpable_again():
    code = ("import ctypes, subprocess, sys; from primus import process_secrets; "
            "libc = ctypes.CDLL(None); process_secrets.make_undumpable(); "
            "print(libc.prctl(3, 0, 0, 0, 0)); sys.stdout.flush(); "
            "subprocess.run([sys.executable, '-c', "
            "'import ctypes; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))'])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)

    assert result.stdout.split() == ["0", "1"], "PR_GET_DUMPABLE: itself, then a trainer"
