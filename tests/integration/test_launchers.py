"""The launcher contract, run against every launcher: the local one and the SSH one (on a test
host in a network namespace, reached with real ssh and sshd).

Each case starts real processes through the launcher and checks them from outside (psutil,
their log files): a cold process, a wave of executors forked by the host agent, liveness,
stopping many process groups together, releasing a host, the agent's death and the fallback
to cold start-up when the agent cannot run.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from primus import __version__
from primus.config.inventory import Host, load_inventory, local_inventory
from primus.config.ssh import SshOptions
from primus.launcher import agent, remote
from primus.launcher.api import Launcher, LaunchError, LaunchRequest, StopRequest
from primus.launcher.local_launcher import LocalLauncher
from primus.launcher.ssh_launcher import SshLauncher, control_directory
from primus.state.records import ProcessRef
from tests.support.waiting import wait_until

SLEEPER = ("import os, time; print(os.environ['MARK'], os.getcwd(), flush=True); "
           "time.sleep(600)")
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ignoring TERM', flush=True); time.sleep(600)")


@dataclass
class Target:
    """A launcher, a host it reaches, and a directory of an application on that host."""

    launcher: Launcher
    host: Host
    app_dir: Path
    etcd: str  # an etcd the host's executors can reach
    gateway: str  # an address of this machine the host reaches

    def request(self, code: str, name: str, **env: str) -> LaunchRequest:
        return LaunchRequest(host=self.host, argv=[self.host.python, "-c", code],
                             log_file=str(self.app_dir / f"{name}.log"), cwd=str(self.app_dir),
                             env={"MARK": name, **env})

    def executor(self, index: int, prefix: str) -> LaunchRequest:
        """An executor of an application that does not exist: it connects to etcd with the
        request's environment, finds no spec, says so in its log and exits 2."""
        return LaunchRequest(
            host=self.host, log_file=str(self.app_dir / f"worker-{index}.executor.log"),
            env={"PRIMUS_ETCD": self.etcd, "PRIMUS_PREFIX": prefix, "PRIMUS_CONF": "-",
                 "PRIMUS_HOME": str(self.app_dir.parent.parent)},
            argv=[self.host.python, "-m", "primus.executor", "--app", "ghost", "--role",
                  "worker", "--index", str(index), "--attempt", "1", "--host", self.host.name,
                  "--address", self.host.address,
                  "--log-file", str(self.app_dir / f"worker-{index}.log")])


@pytest.fixture(params=["local", "ssh"])
async def target(request, tmp_path) -> AsyncIterator[Target]:
    if request.param == "local":
        etcd = request.getfixturevalue("etcd_server")
        found = Target(LocalLauncher(), local_inventory()[0],
                       tmp_path / "home" / "apps" / "app-1", etcd.client_url, "127.0.0.1")
    else:
        testbed = request.getfixturevalue("ssh_testbed")
        host = next(h for h in load_inventory(str(testbed.cluster.inventory)).hosts
                    if h.name == "h2")
        launcher = SshLauncher(SshOptions(known_hosts=str(testbed.cluster.known_hosts)),
                               control_dir=control_directory(str(tmp_path / "home")))
        found = Target(launcher, host, Path(host.home or "/") / "apps" / f"app-{os.getpid()}-"
                       f"{time.monotonic_ns()}", testbed.etcd.client_url,
                       testbed.cluster.gateway)
    found.app_dir.mkdir(parents=True, mode=0o700)
    try:
        yield found
    finally:
        await found.launcher.release(found.host, str(found.app_dir))
        await found.launcher.close()
        for proc in psutil.process_iter(["cmdline"]):
            if str(found.app_dir) in " ".join(proc.info["cmdline"] or []):
                proc.kill()


def agents_of(app_dir: Path) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if (p.info["cmdline"] or [])[1:4] == ["-m", "primus.launcher.agent", str(app_dir)]]


def log_of(target: Target, name: str) -> str:
    path = target.app_dir / name
    return path.read_text() if path.exists() else ""


async def test_a_process_starts_detached_with_its_environment_cwd_and_log(target):
    process = await target.launcher.launch(target.request(SLEEPER, "one"))
    child = psutil.Process(process.pid)
    assert os.getsid(process.pid) == process.pid, "not the leader of its own session"
    assert abs(child.create_time() - process.start_time) < 0.05
    wait_until(lambda: f"one {target.app_dir}" in log_of(target, "one.log"), 20,
               "the process to write its environment and directory to its log")
    assert oct((target.app_dir / "one.log").stat().st_mode & 0o777) == "0o600"
    await target.launcher.stop(target.host, [StopRequest(process, grace=5)])
    assert not psutil.pid_exists(process.pid) or \
        psutil.Process(process.pid).status() == psutil.STATUS_ZOMBIE


async def test_alive_tells_running_exited_and_recycled_processes_apart(target):
    running = await target.launcher.launch(target.request(SLEEPER, "running"))
    ended = await target.launcher.launch(target.request("pass", "ended"))
    wait_until(lambda: not psutil.pid_exists(ended.pid) or
               psutil.Process(ended.pid).status() == psutil.STATUS_ZOMBIE, 20,
               "the short process to end")
    recycled = ProcessRef(host=running.host, pid=running.pid, start_time=running.start_time - 60)
    assert await target.launcher.alive(target.host, [running, ended, recycled]) == \
        [True, False, False]
    await target.launcher.stop(target.host, [StopRequest(running, grace=5)])
    assert await target.launcher.alive(target.host, [running]) == [False]


async def test_stopping_many_groups_takes_one_grace_not_one_each(target):
    stubborn = [await target.launcher.launch(target.request(STUBBORN, f"stubborn-{i}"))
                for i in range(4)]
    companion = await target.launcher.launch(target.request(SLEEPER, "companion"))
    for i in range(4):
        wait_until(lambda i=i: "ignoring TERM" in log_of(target, f"stubborn-{i}.log"), 20,
                   f"stubborn-{i} to ignore SIGTERM")
    began = time.monotonic()
    await target.launcher.stop(target.host, [
        StopRequest(process, grace=2, then_kill=[companion] if i == 0 else [])
        for i, process in enumerate(stubborn)])
    took = time.monotonic() - began
    assert await target.launcher.alive(target.host, [*stubborn, companion]) == [False] * 5
    # Four graces one after another would be 8 s; together they are one, plus a call.
    assert took < 2 + 4, f"stopping took {took:.1f}s"


async def test_a_wave_of_executors_is_forked_by_one_agent_each_with_its_own_request(
        target, prefix):
    requests = [target.executor(i, prefix) for i in range(6)]
    results = await target.launcher.launch_executors(target.host, str(target.app_dir), requests)
    assert all(isinstance(r, ProcessRef) for r in results), results
    assert len({r.pid for r in results if isinstance(r, ProcessRef)}) == 6
    agents = agents_of(target.app_dir)
    assert len(agents) == 1, f"one agent for the application on the host, found {agents}"
    again = await target.launcher.launch_executors(target.host, str(target.app_dir),
                                                   [target.executor(9, prefix)])
    assert isinstance(again[0], ProcessRef)
    assert agents_of(target.app_dir) == agents, "the second wave reuses the agent"
    for i in range(6):
        # Each ran the executor with its own environment (else: "PRIMUS_ETCD is not set").
        wait_until(lambda i=i: "no spec, plan or role in etcd" in
                   log_of(target, f"worker-{i}.executor.log"), 30,
                   f"worker-{i} to run and find no application")
    await target.launcher.release(target.host, str(target.app_dir))
    wait_until(lambda: not agents_of(target.app_dir), 20, "the released agent to exit")
    assert not (target.app_dir / agent.socket_name()).exists()


async def test_a_forked_executor_is_named_and_detached_like_a_cold_one(target, prefix):
    # An "etcd" that accepts connections and never answers holds the executor in its first
    # request (for etcd's request timeout), long enough to look at it.
    silent = socket.create_server((target.gateway, 0))
    request = target.executor(0, prefix)
    request = LaunchRequest(host=request.host, argv=request.argv, log_file=request.log_file,
                            env={**request.env, "PRIMUS_ETCD":
                                 f"http://{target.gateway}:{silent.getsockname()[1]}"})
    with silent:
        [process] = await target.launcher.launch_executors(target.host, str(target.app_dir),
                                                           [request])
        assert isinstance(process, ProcessRef)
        child = psutil.Process(process.pid)
        assert child.cmdline()[:4] == [target.host.python, "-m", "primus.executor", "--app"]
        assert os.getsid(process.pid) == process.pid
        assert child.ppid() == agents_of(target.app_dir)[0].pid
        await target.launcher.stop(target.host, [StopRequest(process, grace=5)])
        assert await target.launcher.alive(target.host, [process]) == [False]


async def test_a_killed_agent_is_replaced_by_the_next_wave_without_duplicates(target, prefix):
    await target.launcher.launch_executors(target.host, str(target.app_dir),
                                           [target.executor(0, prefix)])
    [first] = agents_of(target.app_dir)
    first.kill()  # its socket stays behind, and nobody answers on it
    first.wait(10)
    results = await target.launcher.launch_executors(
        target.host, str(target.app_dir), [target.executor(i, prefix) for i in (1, 2)])
    assert all(isinstance(r, ProcessRef) for r in results), results
    assert [a.pid for a in agents_of(target.app_dir)] != [first.pid]
    for i in (1, 2):
        wait_until(lambda i=i: log_of(target, f"worker-{i}.executor.log").count(
            "no spec, plan or role in etcd") == 1, 30, f"worker-{i} to run once")


async def test_executors_start_cold_when_the_agent_cannot_run(target, prefix, caplog):
    (target.app_dir / "agent.lock").mkdir()  # the agent's lock cannot be taken
    results = await target.launcher.launch_executors(
        target.host, str(target.app_dir), [target.executor(i, prefix) for i in range(2)])
    assert all(isinstance(r, ProcessRef) for r in results), results
    assert not agents_of(target.app_dir)
    assert "executors start cold" in caplog.text
    for i in range(2):
        wait_until(lambda i=i: "no spec, plan or role in etcd" in
                   log_of(target, f"worker-{i}.executor.log"), 30, f"worker-{i} to run cold")


async def test_a_host_with_another_primus_version_refuses_the_wave(target, prefix):
    if isinstance(target.launcher, SshLauncher):
        answer = await target.launcher._remote(  # the wire, as an AM of another version
            target.host, ["launch"], stdin=b'{"version": "0.0.0", "directory": "x", '
                                           b'"requests": [{}]}')
    else:
        answer = await asyncio.to_thread(remote.launch, {"version": "0.0.0", "directory": "x",
                                                         "requests": [{}]})
    assert answer == {"error": f"this host runs Primus {__version__}, the AM 0.0.0; install "
                               "the same version on every host"}
    assert not agents_of(target.app_dir)


def test_an_agent_that_dies_mid_wave_fails_what_it_had_not_answered(tmp_path):
    # A stand-in agent on the real socket answers the first request, then dies.
    directory = tmp_path / "app"
    directory.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(directory / agent.socket_name()))
    listener.listen(1)

    def answer_one() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.makefile("rb").readline()
            connection.sendall(json.dumps({"pid": 123, "start_time": 1.0}).encode() + b"\n")

    thread = threading.Thread(target=answer_one)
    thread.start()
    answers = agent.spawn_many(str(directory), [{"argv": ["x"]}] * 3, python=sys.executable)
    thread.join(10)
    listener.close()
    assert answers == [{"pid": 123, "start_time": 1.0},
                       {"error": "the host agent ended before it started this executor"},
                       {"error": "the host agent ended before it started this executor"}]


async def test_release_without_an_agent_is_harmless(target):
    await target.launcher.release(target.host, str(target.app_dir))
    await target.launcher.release(target.host, str(target.app_dir / "never-made"))


async def test_an_unwritable_log_fails_that_request_alone(target, prefix):
    bad = target.executor(1, prefix)
    bad = LaunchRequest(host=bad.host, argv=bad.argv, env=bad.env,
                        log_file="/proc/no-such-dir/worker-1.executor.log")
    results = await target.launcher.launch_executors(
        target.host, str(target.app_dir), [target.executor(0, prefix), bad])
    assert isinstance(results[0], ProcessRef)
    assert isinstance(results[1], LaunchError)
    assert "/proc/no-such-dir" in str(results[1]) or "No such file" in str(results[1])
