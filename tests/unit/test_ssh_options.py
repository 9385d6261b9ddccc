"""SSH command lines and how ssh's failures are explained. Pure logic, no ssh is run."""

from __future__ import annotations

import shlex

import pytest

from primus.config.inventory import Host, SshSettings
from primus.config.ssh import SshOptions
from primus.launcher.api import HostUnreachableError
from primus.launcher.ssh_launcher import TransientSshError, _failure

HOST = Host("gpu01", "10.1.2.3", "ssh", SshSettings(port=2222, user="train", key_file="/k/id",
                                                    extra_args=("-o", "ProxyJump=bastion")))


def options_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "-o")


def test_host_key_checking_and_batch_mode_are_on_by_default():
    argv = SshOptions().argv(HOST, "true")
    options = options_of(argv)
    assert options["StrictHostKeyChecking"] == "yes"
    assert options["BatchMode"] == "yes"
    assert "ConnectTimeout" in options and "ServerAliveInterval" in options


def test_per_host_settings_and_extra_args_come_before_the_destination():
    argv = SshOptions(known_hosts="/etc/primus/known_hosts").argv(HOST, "true")
    assert argv[:1] == ["ssh"]
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[argv.index("-l") + 1] == "train"
    assert argv[argv.index("-i") + 1] == "/k/id"
    assert options_of(argv)["UserKnownHostsFile"] == "/etc/primus/known_hosts"
    assert options_of(argv)["ProxyJump"] == "bastion"
    assert argv[-3:] == ["--", "10.1.2.3", "true"]


def test_remote_command_is_one_argument_quoted_once():
    command = shlex.join(["python3", "-m", "x", "a b", "$(rm -rf /)"])
    argv = SshOptions().argv(HOST, command)
    assert argv[-1] == command
    assert shlex.split(argv[-1]) == ["python3", "-m", "x", "a b", "$(rm -rf /)"]


def test_unknown_host_key_checking_mode_is_rejected():
    with pytest.raises(ValueError, match="strict_host_key_checking"):
        SshOptions(strict_host_key_checking="maybe")


@pytest.mark.parametrize(("stderr", "cause", "transient"), [
    ("root@10.1.2.3: Permission denied (publickey).", "authentication refused", False),
    ("@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@\nHost key verification failed.",
     "host key mismatch", False),
    ("No ED25519 host key is known for 10.1.2.3\nHost key verification failed.",
     "host key not trusted", False),
    ("ssh: connect to host 10.1.2.3 port 22: Connection timed out", "timeout", False),
    ("ssh: connect to host 10.1.2.3 port 22: No route to host", "no route to host", False),
    ("kex_exchange_identification: read: Connection reset by peer", "Connection reset", True),
    ("ssh: connect to host 10.1.2.3 port 22: Connection refused", "connection refused", True),
])
def test_ssh_failures_name_the_host_and_the_cause(stderr, cause, transient):
    error = _failure(HOST, stderr)
    assert isinstance(error, HostUnreachableError)
    assert isinstance(error, TransientSshError) is transient
    assert str(error).startswith("gpu01 (10.1.2.3): ")
    assert cause in str(error)
