"""The ``primus`` command prints the same whether it reaches etcd itself or goes through a real
TLS ``primus server`` with a token (issue 40): the same stdout, stderr and exit status, the
same ``-o json``. Each command here once printed something else through the server, because
one side checked or worded a thing by itself."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.apps import status_json, write_job
from tests.support.primus import run_primus
from tests.support.waiting import wait_until

ENDED = "name: ended\nroles:\n  - {name: worker, command: 'true'}\n"
RUNNING = "name: running\nroles:\n  - {name: worker, command: sleep 600}\n"

CASES = {
    # name: (the command, the direct command it prints as; None: the same)
    "logs of an executor no name can be": (("logs", "{ended}", "nosuch"), None),
    "logs -f of an executor no name can be": (("logs", "{ended}", "nosuch", "-f"), None),
    "scale to no executor": (("scale", "{running}", "worker", "0"), None),
    "succeed an ended application": (("succeed", "{ended}"), None),
    "hosts check as json, with the account probed": (("hosts", "check", "-o", "json"), None),
    # Through a server, -i selects among the server's hosts; the server reaches each as its
    # own inventory says (docs/api.md): the command prints what the direct one prints for the
    # server's entries of the hosts the file names.
    "hosts list of an inventory file": (("hosts", "list", "-i", "{mine}"),
                                        ("hosts", "list", "-i", "{servers}")),
    "hosts check of an inventory file": (("hosts", "check", "-i", "{mine}"),
                                         ("hosts", "check", "-i", "{servers}")),
}

LOAD = re.compile(r"(?<= )\d+\.\d\d(?= )")
"""The LOAD column of ``hosts check``: the 1-minute load average moves between two runs."""


@pytest.fixture
def inventories(tmp_path: Path) -> dict[str, Path]:
    """The server's inventory (this host, two executors) and one of the person running the
    command that names the same host with other settings."""
    servers, mine = tmp_path / "hosts.ini", tmp_path / "mine.ini"
    servers.write_text(f"{socket.gethostname()} ansible_connection=local primus_slots=2\n")
    mine.write_text(f"{socket.gethostname()} ansible_connection=local primus_slots=1 "
                    f"primus_labels=fast\n")
    return {"servers": servers, "mine": mine}


@pytest.fixture
def direct(primus_env: dict[str, str], inventories: dict[str, Path]) -> dict[str, str]:
    """The direct command's environment (etcd), with the server's inventory as the site's."""
    return {**primus_env, "PRIMUS_INVENTORY": str(inventories["servers"])}


def _submitted(env: dict[str, str], job: Path, *flags: str) -> str:
    result = run_primus(env, "submit", str(job), *flags)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _shown(result: subprocess.CompletedProcess[str], args: tuple[str, ...]) -> tuple:
    """What a person sees of ``result``: exit status, stdout (parsed with ``-o json``) and
    stderr; the load average left out."""
    if "json" in args and result.returncode == 0:
        hosts = json.loads(result.stdout)
        for host in hosts:
            assert isinstance(host.pop("load"), float), host
        return result.returncode, hosts, result.stderr
    return result.returncode, LOAD.sub("LOAD", result.stdout), result.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_the_command_prints_the_same_through_a_server_as_directly(direct, alice,
                                                                  inventories, tmp_path,
                                                                  case):
    args, direct_args = CASES[case]
    names = {name: str(path) for name, path in inventories.items()}
    if "{ended}" in args:  # alice's, so that she may act on it through the server
        names["ended"] = _submitted(alice, write_job(tmp_path / "ended.yaml", ENDED), "--wait")
    if "{running}" in args:
        names["running"] = _submitted(alice, write_job(tmp_path / "running.yaml", RUNNING))
        wait_until(lambda: status_json(direct, names["running"])["status"]["state"]
                   == "RUNNING", 60, "the application to run")
    through_args = tuple(arg.format(**names) for arg in args)
    there_args = tuple(arg.format(**names) for arg in direct_args or args)
    try:
        through = run_primus(alice, *through_args, timeout=60)
        there = run_primus(direct, *there_args, timeout=60)
    finally:
        if "running" in names:
            assert run_primus(direct, "kill", names["running"]).returncode == 0
    assert _shown(through, args) == _shown(there, args)
