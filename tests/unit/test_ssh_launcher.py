"""The SSH launcher's decisions about shared connections, with a recording process runner in
place of ssh: which command lines it runs, and what it does with ssh's answers."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from primus.config.inventory import Host, SshSettings
from primus.config.ssh import SshOptions
from primus.launcher.api import HostUnreachableError, LaunchError, LaunchRequest
from primus.launcher.ssh_launcher import SshLauncher, SshResult, control_directory
from primus.state.records import ProcessRef

HOST = Host("gpu01", "10.1.2.3", "ssh", SshSettings(user="train"), python="/opt/py")
REFUSED = ("mux_client_request_session: session request failed: Session open refused by "
           "peer\r\n")


class Recorder:
    """A process runner that records each command line and answers from a script."""

    def __init__(self, ssh_config: str = "controlmaster false\n",
                 answers: list[SshResult] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.ssh_config = ssh_config
        self.answers = list(answers or [])

    async def __call__(self, argv: list[str], stdin: bytes | None, limit: float) -> SshResult:
        self.calls.append(argv)
        if "-G" in argv:
            return SshResult(0, self.ssh_config.encode(), "")
        if "-O" in argv:
            return SshResult(0, b"", "")
        if self.answers:
            return self.answers.pop(0)
        return SshResult(0, json.dumps({"alive": [True]}).encode(), "")

    def remote(self) -> list[list[str]]:
        """The calls that ran a command on the host."""
        return [c for c in self.calls if "-G" not in c and "-O" not in c]


def options_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "-o")


PROCESS = ProcessRef(host="gpu01", pid=10, start_time=1.0)


async def test_calls_to_a_host_share_a_connection_in_the_private_directory():
    runner = Recorder()
    launcher = SshLauncher(SshOptions(control_persist=45), runner, control_dir="/run/p")
    await launcher.alive(HOST, [PROCESS])
    await launcher.alive(HOST, [PROCESS])
    assert sum("-G" in c for c in runner.calls) == 1, "ssh -G once per host"
    for call in runner.remote():
        options = options_of(call)
        assert options["ControlMaster"] == "auto"
        assert options["ControlPath"] == "/run/p/%C"
        assert options["ControlPersist"] == "45s"


async def test_the_users_own_multiplexing_for_the_host_is_left_to_their_config():
    runner = Recorder("controlmaster auto\ncontrolpath /home/u/.ssh/cm-%C\n")
    launcher = SshLauncher(SshOptions(), runner, control_dir="/run/p")
    await launcher.alive(HOST, [PROCESS])
    assert not any(k.startswith("Control") for k in options_of(runner.remote()[0]))


async def test_multiplexing_off_runs_each_call_on_its_own_connection():
    runner = Recorder()
    launcher = SshLauncher(SshOptions(multiplex=False), runner, control_dir="/run/p")
    await launcher.alive(HOST, [PROCESS])
    assert not any("-G" in c for c in runner.calls)
    assert not any(k.startswith("Control") for k in options_of(runner.remote()[0]))


async def test_a_host_refusing_a_shared_session_is_then_reached_call_by_call(caplog):
    # ssh (ControlMaster=auto) runs the refused command on a connection of its own and says so.
    ok = SshResult(0, json.dumps({"alive": [False]}).encode(), "")
    refused = SshResult(0, ok.stdout, REFUSED + "ControlSocket /run/p/x already exists, "
                                                "disabling multiplexing\r\n")
    runner = Recorder(answers=[refused, ok])
    launcher = SshLauncher(SshOptions(), runner, control_dir="/run/p")
    assert await launcher.alive(HOST, [PROCESS]) == [False]
    assert await launcher.alive(HOST, [PROCESS]) == [False]
    first, later = runner.remote()
    assert "ControlPath" in options_of(first)
    assert "ControlPath" not in options_of(later)
    assert "gpu01 refuses a second session on a connection" in caplog.text


async def test_other_ssh_failures_are_not_mistaken_for_a_refused_session():
    runner = Recorder(answers=[SshResult(255, b"", "Permission denied (publickey).\r\n")])
    launcher = SshLauncher(SshOptions(retries=1), runner, control_dir="/run/p")
    with pytest.raises(HostUnreachableError, match="authentication refused"):
        await launcher.alive(HOST, [PROCESS])
    assert len(runner.remote()) == 1


async def test_release_tells_the_agent_then_stops_the_shared_connection():
    runner = Recorder(answers=[SshResult(0, b'{"agent": true}', "")])
    launcher = SshLauncher(SshOptions(), runner, control_dir="/run/p")
    await launcher.release(HOST, "/data/apps/a1")
    release, stop = runner.calls[1:]
    assert release[-1] == "/opt/py -m primus.launcher.remote release /data/apps/a1"
    assert stop[:3] == ["ssh", "-O", "stop"] and options_of(stop)["ControlPath"] == "/run/p/%C"
    assert stop[-2:] == ["--", "10.1.2.3"]
    await launcher.close()  # nothing left to close
    assert len(runner.calls) == 3


async def test_close_stops_every_shared_connection_the_launcher_opened():
    runner = Recorder()
    launcher = SshLauncher(SshOptions(), runner, control_dir="/run/p")
    other = Host("gpu02", "10.1.2.4", "ssh", python="/opt/py")
    await launcher.alive(HOST, [PROCESS])
    await launcher.alive(other, [PROCESS])
    await launcher.close()
    stopped = {c[-1] for c in runner.calls if "-O" in c}
    assert stopped == {"10.1.2.3", "10.1.2.4"}


async def test_a_wave_from_a_host_of_another_version_fails_every_request():
    runner = Recorder(answers=[SshResult(0, json.dumps(
        {"error": "this host runs Primus 9.9, the AM 0.1.0; install the same version on every "
                  "host"}).encode(), "")])
    launcher = SshLauncher(SshOptions(), runner, control_dir="/run/p")
    results = await launcher.launch_executors(HOST, "/d", [
        LaunchRequest(HOST, ["/opt/py", "-m", "primus.executor"], "/d/x.log")] * 2)
    assert all(isinstance(r, LaunchError) and "Primus 9.9" in str(r) for r in results)
    wave = runner.remote()[0]
    assert wave[-1] == "/opt/py -m primus.launcher.remote launch"


def test_the_control_directory_is_the_homes_unless_too_long_for_a_socket(tmp_path):
    short = Path(tempfile.mkdtemp(prefix="h", dir="/tmp"))
    try:
        assert control_directory(str(short)) == str(short / "ssh")
        assert oct((short / "ssh").stat().st_mode & 0o777) == "0o700"
    finally:
        shutil.rmtree(short)
    deep = tmp_path / ("d" * 80)
    fallback = control_directory(str(deep))
    assert fallback.startswith(f"/tmp/primus-ssh-{os.getuid()}-")
    assert oct(os.stat(fallback).st_mode & 0o777) == "0o700"
    os.rmdir(fallback)


def test_a_planted_control_directory_is_refused(tmp_path):
    deep = str(tmp_path / ("e" * 80))
    fallback = control_directory(deep)
    os.chmod(fallback, 0o777)  # as if someone else had made it, open to all
    try:
        with pytest.raises(LaunchError, match="not a private directory of this account"):
            control_directory(deep)
    finally:
        os.rmdir(fallback)
