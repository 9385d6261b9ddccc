"""The launcher contract, run against every launcher: the local one and the SSH one (on a test
host in a network namespace, reached with real ssh and sshd).

Each case starts real processes through the launcher and checks them from outside (psutil,
their log files): a cold process, a wave of executors forked by the host agent, liveness,
signals, stopping many process groups together, copying files, describing the host, checking
its health (and, over SSH, a host that cannot be reached), reading logs, releasing a host, the
agent's death (before a wave and in the middle of one), the fallback to cold start-up when the
agent cannot run, and another installation of Primus with another version.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from primus import __version__
from primus.config.inventory import Host, load_inventory, local_inventory
from primus.config.ssh import SshOptions
from primus.launcher import agent
from primus.launcher.api import (
    HostUnreachableError,
    Launcher,
    LaunchError,
    LaunchRequest,
    StopRequest,
)
from primus.launcher.local_launcher import LocalLauncher
from primus.launcher.ssh_launcher import SshLauncher, control_directory
from primus.processes import count_gpus
from primus.state.records import ProcessRef
from tests.support.apps import agents_of, gone
from tests.support.chaos import link_down
from tests.support.installs import install_primus_copy
from tests.support.waiting import wait_until, wait_until_async

SLEEPER = ("import os, time; print(os.environ['MARK'], os.getcwd(), flush=True); "
           "time.sleep(600)")
SECRETIVE = ("from primus import process_secrets; import time; "
             "print(sorted(process_secrets.received().items()), flush=True); time.sleep(600)")
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ignoring TERM', flush=True); time.sleep(600)")
# A leader and a child in its process group (the application's directory on the child's command
# line, for the clean-up to find it).
FAMILY = ("import os, subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', "
          "'import time; time.sleep(600)', os.getcwd()]); print('child', child.pid, "
          "flush=True); time.sleep(600)")
OTHER_VERSION = f"{__version__}+other"


@dataclass
class Target:
    """A launcher, a host it reaches, and a directory of an application on that host."""

    launcher: Launcher
    host: Host
    app_dir: Path
    etcd: str  # an etcd the host's executors can reach
    gateway: str  # an address of this machine the host reaches
    account_home: str  # the home of the account the launched processes run as

    def request(self, code: str, name: str, **env: str) -> LaunchRequest:
        return LaunchRequest(host=self.host, argv=[self.host.python, "-c", code],
                             log_file=str(self.app_dir / f"{name}.log"), cwd=str(self.app_dir),
                             env={"MARK": name, **env})

    def executor(self, index: int, prefix: str, etcd: str | None = None) -> LaunchRequest:
        """An executor of an application that does not exist: it connects to etcd with the
        request's environment, finds no spec, says so in its log and exits 2. With ``etcd``
        (a :func:`silent_etcd`), it waits in its first request until the test ends."""
        waits = {"PRIMUS_ETCD": etcd, "PRIMUS_ETCD_REQUEST_TIMEOUT": "600"} if etcd else {}
        return LaunchRequest(
            host=self.host, log_file=str(self.app_dir / f"worker-{index}.executor.log"),
            env={"PRIMUS_ETCD": self.etcd, "PRIMUS_PREFIX": prefix, "PRIMUS_CONF": "-",
                 "PRIMUS_HOME": str(self.app_dir.parent.parent), **waits},
            argv=[self.host.python, "-m", "primus.executor", "--app", "ghost", "--role",
                  "worker", "--index", str(index), "--attempt", "1", "--host", self.host.name,
                  "--address", self.host.address,
                  "--log-file", str(self.app_dir / f"worker-{index}.log")])


@pytest.fixture(params=["local", "ssh"])
async def target(request, tmp_path) -> AsyncIterator[Target]:
    app_id = f"app-{secrets.token_hex(6)}"  # unique: agents_of finds the agent by it
    if request.param == "local":
        etcd = request.getfixturevalue("etcd_server")
        found = Target(LocalLauncher(), local_inventory()[0],
                       tmp_path / "home" / "apps" / app_id, etcd.client_url, "127.0.0.1",
                       os.path.expanduser("~"))
    else:
        testbed = request.getfixturevalue("ssh_testbed")
        host = next(h for h in load_inventory(str(testbed.cluster.inventory)).hosts
                    if h.name == "h2")
        launcher = SshLauncher(SshOptions(known_hosts=str(testbed.cluster.known_hosts)),
                               control_dir=control_directory(str(tmp_path / "home")))
        login = subprocess.run(testbed.cluster.ssh_argv(
            next(h for h in testbed.cluster.hosts if h.name == "h2"), "echo ~"),
            capture_output=True, text=True, check=True)
        found = Target(launcher, host, Path(host.home or "/") / "apps" / app_id,
                       testbed.etcd.client_url, testbed.cluster.gateway, login.stdout.strip())
    found.app_dir.mkdir(parents=True, mode=0o700)
    try:
        yield found
    finally:
        await found.launcher.release(found.host, str(found.app_dir))
        await found.launcher.close()
        for proc in psutil.process_iter(["cmdline"]):
            if str(found.app_dir) in " ".join(proc.info["cmdline"] or []):
                proc.kill()


@pytest.fixture
def silent_etcd(target: Target) -> Iterator[str]:
    """An "etcd" that accepts connections and never answers: an executor's first request to it
    waits (see :meth:`Target.executor`), long enough to look at the executor."""
    with socket.create_server((target.gateway, 0)) as silent:
        yield f"http://{target.gateway}:{silent.getsockname()[1]}"


@pytest.fixture(scope="session")
def other_primus(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The python of another installation of Primus, which says it is OTHER_VERSION."""
    return install_primus_copy(tmp_path_factory.mktemp("other-primus") / "venv", OTHER_VERSION)


def log_of(target: Target, name: str) -> str:
    path = target.app_dir / name
    return path.read_text() if path.exists() else ""


def executors_of(target: Target) -> dict[int, list[int]]:
    """The pids of the executors of the target's application that run, by executor index."""
    found = collections.defaultdict(list)
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[1:3] == ["-m", "primus.executor"] and \
                f"{target.app_dir}/" in " ".join(cmdline):
            found[int(cmdline[cmdline.index("--index") + 1])].append(proc.pid)
    return dict(found)


def mode_of(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


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


async def test_secrets_reach_a_process_on_a_descriptor_never_in_its_environment(target):
    secretive = dataclasses.replace(target.request(SECRETIVE, "secretive"),
                                    secrets={"PRIMUS_TEST_TOKEN": "tok-5e1d"})
    process = await target.launcher.launch(secretive)
    wait_until(lambda: "[('PRIMUS_TEST_TOKEN', 'tok-5e1d')]" in log_of(target, "secretive.log"),
               20, "the process to print the secrets it received")
    environ = psutil.Process(process.pid).environ()  # as the kernel shows it, from its start
    assert "PRIMUS_TEST_TOKEN" not in environ and "tok-5e1d" not in environ.values()
    await target.launcher.stop(target.host, [StopRequest(process, grace=5)])


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


async def test_a_signal_reaches_the_process_alone_or_its_group_and_never_a_recycled_pid(
        target):
    leader = await target.launcher.launch(target.request(FAMILY, "family"))
    said = wait_until(lambda: re.search(r"child (\d+)", log_of(target, "family.log")), 20,
                      "the leader to start its child")
    child = int(said[1])
    recycled = ProcessRef(host=leader.host, pid=leader.pid, start_time=leader.start_time - 60)
    delivered = await target.launcher.signal(target.host, recycled, signal.SIGTERM)
    assert delivered is False, f"a signal to a recycled pid: expected False, got {delivered}"
    assert (gone(leader.pid), gone(child)) == (False, False), \
        "a signal to a recycled pid hit the process that now has it"

    delivered = await target.launcher.signal(target.host, leader, signal.SIGTERM, group=False)
    assert delivered is True, f"a signal to the leader alone: expected True, got {delivered}"
    wait_until(lambda: gone(leader.pid), 20, "the leader to end on its SIGTERM")
    assert not gone(child), "a signal to the leader alone reached its child too"

    # The group outlives its leader, and is signalled all the same.
    delivered = await target.launcher.signal(target.host, leader, signal.SIGTERM)
    assert delivered is True, f"a signal to the leader's group: expected True, got {delivered}"
    wait_until(lambda: gone(child), 20, "the leader's child to end on the group's SIGTERM")
    deadline = time.monotonic() + 20  # ended processes are in their group until reaped
    while await target.launcher.signal(target.host, leader, signal.SIGTERM):
        assert time.monotonic() < deadline, \
            "a signal to a group whose processes all ended: expected False, got True for 20s"
        await asyncio.sleep(0.1)


async def test_copied_files_and_directories_keep_their_names_in_a_private_directory(
        target, tmp_path):
    source = tmp_path / "source"
    (source / "conf" / "nested").mkdir(parents=True)
    (source / "conf" / "top.yaml").write_text("top: 1\n")
    (source / "conf" / "nested" / "deep.yaml").write_text("deep: 2\n")
    (source / "train.sh").write_text("#!/bin/sh\necho trained\n")
    (source / "train.sh").chmod(0o755)
    destination = target.app_dir / "files" / "job"

    await target.launcher.copy_files(target.host, [str(source / "train.sh"),
                                                   f"{source / 'conf'}/"], str(destination))

    copied = {str(path.relative_to(destination)): path.read_text()
              for path in destination.rglob("*") if path.is_file()}
    expected = {"train.sh": "#!/bin/sh\necho trained\n", "conf/top.yaml": "top: 1\n",
                "conf/nested/deep.yaml": "deep: 2\n"}
    assert copied == expected, f"expected {expected} in {destination}, found {copied}"
    script = mode_of(destination / "train.sh")
    assert script == "0o755", f"the script's mode: expected 0o755 as copied, got {script}"
    made = (mode_of(destination.parent), mode_of(destination))
    assert made == ("0o700", "0o700"), f"the directories made: expected private (0o700), {made}"


async def test_probe_describes_the_host(target):
    described = await target.launcher.probe(target.host)
    expected = {"primus_version": __version__, "home": target.account_home,
                "cpu": psutil.cpu_count(logical=True), "memory": psutil.virtual_memory().total,
                "gpus": count_gpus()}  # the test hosts are this machine's namespaces
    assert {key: described.get(key) for key in expected} == expected, \
        f"expected {expected}, described {described}"
    assert isinstance(described.get("load"), float) and described["load"] >= 0, described


def health_request(target: Target, **changed: object) -> dict[str, object]:
    """A health check's request for the target's host, as the admission leader makes one
    (``primus.scheduler.health``): its home, no free space or GPU needed, no command."""
    return {"home": str(target.app_dir.parent.parent), "min_free": 1, "gpus": 0, "command": "",
            "timeout": 10, **changed}


async def test_check_health_finds_a_healthy_host_healthy_by_checks_run_on_the_host(target):
    # The host's address is one of its own there alone (a test host's is not this machine's).
    there = f"ip -4 -o addr show | grep -q ' inet {target.host.address}/'"
    reason = await target.launcher.check_health(target.host,
                                                health_request(target, command=there))
    assert reason is None, f"a healthy host: expected None, got {reason!r}"


async def test_check_health_says_why_a_host_is_unhealthy_in_one_line(target):
    home = str(target.app_dir.parent.parent)
    full = await target.launcher.check_health(target.host, health_request(target,
                                                                          min_free=2 ** 62))
    expected = rf"free space: [0-9.]+ [KMGTP]?i?B left in {re.escape(home)} \(needs 4194304 TiB\)"
    assert re.fullmatch(expected, full or ""), \
        f"more free space needed than there is: expected {expected}, got {full!r}"

    failing = "echo 'scrub failed: sda ✗'; echo 'second line'; exit 3"
    reason = await target.launcher.check_health(target.host,
                                                health_request(target, command=failing))
    assert reason == f"health check `{failing}`: exit 3: scrub failed: sda ✗", \
        f"a failing command: expected its exit and its first line, got {reason!r}"

    both = await target.launcher.check_health(target.host, health_request(
        target, min_free=2 ** 62, command="exit 3"))
    assert (both or "").startswith("free space: "), f"the first failing check: {both!r}"


async def test_check_health_ends_a_hung_check_at_its_timeout_and_says_so(target):
    hung = f"sleep {600 + secrets.randbelow(1000)}.{secrets.randbelow(1000):03d}"
    began = time.monotonic()
    reason = await target.launcher.check_health(target.host,
                                                health_request(target, command=hung, timeout=1))
    took = time.monotonic() - began
    assert reason == f"health check `{hung}`: timed out after 1s", \
        f"a command past its timeout: expected it named, got {reason!r}"
    assert took < 1 + 10, f"the check took {took:.1f}s with a timeout of 1s"
    wait_until(lambda: not [p for p in psutil.process_iter(["cmdline"])
                            if " ".join(p.info["cmdline"] or []) == hung], 10,
               f"the hung `{hung}` to be killed")


@pytest.mark.parametrize("target", ["ssh"], indirect=True)  # the local host is always reached
async def test_check_health_of_a_host_nothing_answers_on_raises_naming_it(target):
    closed = dataclasses.replace(target.host, ssh=dataclasses.replace(target.host.ssh, port=1))
    with pytest.raises(HostUnreachableError,
                       match=f"^{re.escape(f'{closed.name} ({closed.address}): ')}"
                             "connection refused"):
        await target.launcher.check_health(closed, health_request(target))


@pytest.mark.parametrize("target", ["ssh"], indirect=True)
async def test_check_health_of_a_cut_off_host_raises_naming_it_within_the_connect_timeout(
        target, ssh_testbed):
    assert isinstance(target.launcher, SshLauncher)
    launcher = SshLauncher(dataclasses.replace(target.launcher.options, connect_timeout=2))
    test_host = next(h for h in ssh_testbed.cluster.hosts if h.name == target.host.name)
    began = time.monotonic()
    with link_down(test_host), pytest.raises(
            HostUnreachableError,
            match=f"^{re.escape(f'{target.host.name} ({target.host.address}): ')}"
                  "(timeout|no route to host)"):
        await launcher.check_health(target.host, health_request(target))
    took = time.monotonic() - began
    assert took < 2 + 10, f"the check of a cut-off host took {took:.1f}s, connect timeout 2s"


async def test_read_log_gives_a_whole_file_and_fails_naming_a_missing_one(target):
    content = bytes(range(256)) * 1024  # every byte value, several reads' worth
    (target.app_dir / "big.log").write_bytes(content)
    read = b"".join([chunk async for chunk in target.launcher.read_log(
        target.host, str(target.app_dir / "big.log"))])
    assert read == content, f"read {len(read)} bytes, not the file's {len(content)}"
    missing = target.app_dir / "missing.log"
    with pytest.raises(LaunchError, match=re.escape(str(missing))):
        async for _ in target.launcher.read_log(target.host, str(missing)):
            pass


async def test_read_log_from_an_offset_gives_the_rest_followed_or_not(target):
    log = target.app_dir / "resumed.log"
    log.write_bytes(b"first\nsecond\n")
    rest = b"".join([chunk async for chunk in target.launcher.read_log(
        target.host, str(log), offset=len(b"first\n"))])
    followed = b"".join([chunk async for chunk in target.launcher.read_log(
        target.host, str(log), follow=lambda: False, offset=len(b"first\n"))])
    assert rest == followed == b"second\n"


async def test_check_data_names_each_source_matching_no_file_on_the_host(target):
    (target.app_dir / "data").mkdir()
    (target.app_dir / "data" / "part-0.txt").write_text("x\n")
    streams = [(0, {"name": "train", "roles": ["worker"], "sources": [
        {"path": str(target.app_dir / "data" / "part-*.txt")},
        {"path": str(target.app_dir / "data" / "none-*.txt")}]})]
    assert await target.launcher.check_data(target.host, streams) == [
        {"field": "data[0].sources[1].path", "value": str(target.app_dir / "data" / "none-*.txt"),
         "why": "matches no file"}]
    matched = [(0, {**streams[0][1], "sources": streams[0][1]["sources"][:1]})]
    assert await target.launcher.check_data(target.host, matched) == []


async def test_read_log_with_follow_gives_what_is_appended_until_told_to_stop(target):
    log = target.app_dir / "growing.log"  # not written yet: a trainer not started
    following = True
    read = bytearray()

    async def follow() -> None:
        async for chunk in target.launcher.read_log(target.host, str(log),
                                                    follow=lambda: following):
            read.extend(chunk)

    reader = asyncio.ensure_future(follow())
    try:
        log.write_bytes(b"first\n")
        await wait_until_async(lambda: read == b"first\n", 30, "the file once written")
        with log.open("ab") as growing:
            growing.write(b"second\n")
        await wait_until_async(lambda: read == b"first\nsecond\n", 30, "the appended line")
        with log.open("ab") as growing:
            growing.write(b"last\n")
        following = False  # just after the last line: it comes all the same
        async with asyncio.timeout(30):
            await reader
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    assert read == b"first\nsecond\nlast\n", f"read {bytes(read)!r}"


async def test_a_wave_of_executors_is_forked_by_one_agent_each_with_its_own_request(
        target, prefix):
    requests = [target.executor(i, prefix) for i in range(6)]
    results = await target.launcher.launch_executors(target.host, str(target.app_dir), requests)
    assert all(isinstance(r, ProcessRef) for r in results), results
    assert len({r.pid for r in results if isinstance(r, ProcessRef)}) == 6
    agents = agents_of(target.app_dir.name)
    assert len(agents) == 1, f"one agent for the application on the host, found {agents}"
    again = await target.launcher.launch_executors(target.host, str(target.app_dir),
                                                   [target.executor(9, prefix)])
    assert isinstance(again[0], ProcessRef)
    assert agents_of(target.app_dir.name) == agents, "the second wave reuses the agent"
    for i in range(6):
        # Each ran the executor with its own environment (else: "PRIMUS_ETCD is not set").
        wait_until(lambda i=i: "no spec, plan or role in etcd" in
                   log_of(target, f"worker-{i}.executor.log"), 30,
                   f"worker-{i} to run and find no application")
    await target.launcher.release(target.host, str(target.app_dir))
    wait_until(lambda: not agents_of(target.app_dir.name), 20, "the released agent to exit")
    assert not (target.app_dir / agent.socket_name()).exists()


async def test_a_last_stop_lets_the_agent_go_in_the_same_call(target, prefix, silent_etcd):
    started = await target.launcher.launch_executors(
        target.host, str(target.app_dir), [target.executor(i, prefix, silent_etcd)
                                           for i in range(2)])
    executors = [ref for ref in started if isinstance(ref, ProcessRef)]
    assert len(executors) == 2, started
    assert agents_of(target.app_dir.name), "the wave started an agent"

    await target.launcher.stop(target.host, [StopRequest(ref, grace=5) for ref in executors],
                               release=str(target.app_dir))

    assert await target.launcher.alive(target.host, executors) == [False, False]
    # Told by the stop itself, not gone idle (it would say so after IDLE_SECONDS).
    wait_until(lambda: "told to exit" in log_of(target, "agent.log"), 20,
               "the agent to be told to exit")
    wait_until(lambda: not agents_of(target.app_dir.name), 20, "the agent to exit")
    assert "no executor and no request" not in log_of(target, "agent.log")


async def test_a_forked_executor_is_named_and_detached_like_a_cold_one(target, prefix,
                                                                       silent_etcd):
    [process] = await target.launcher.launch_executors(
        target.host, str(target.app_dir), [target.executor(0, prefix, etcd=silent_etcd)])
    assert isinstance(process, ProcessRef)
    child = psutil.Process(process.pid)
    assert child.cmdline()[:4] == [target.host.python, "-m", "primus.executor", "--app"]
    assert os.getsid(process.pid) == process.pid
    assert child.ppid() == agents_of(target.app_dir.name)[0].pid
    await target.launcher.stop(target.host, [StopRequest(process, grace=5)])
    assert await target.launcher.alive(target.host, [process]) == [False]


async def test_a_killed_agent_is_replaced_by_the_next_wave_without_duplicates(target, prefix):
    await target.launcher.launch_executors(target.host, str(target.app_dir),
                                           [target.executor(0, prefix)])
    # The agent detaches as it starts: for an instant the process it started from shows its
    # command line too.
    [first] = wait_until(lambda: (agents := agents_of(target.app_dir.name)) and
                         len(agents) == 1 and agents, 10, "one agent")
    first.kill()  # its socket stays behind, and nobody answers on it
    first.wait(10)
    results = await target.launcher.launch_executors(
        target.host, str(target.app_dir), [target.executor(i, prefix) for i in (1, 2)])
    assert all(isinstance(r, ProcessRef) for r in results), results
    assert [a.pid for a in agents_of(target.app_dir.name)] != [first.pid]
    for i in (1, 2):
        wait_until(lambda i=i: log_of(target, f"worker-{i}.executor.log").count(
            "no spec, plan or role in etcd") == 1, 30, f"worker-{i} to run once")


async def test_executors_start_cold_when_the_agent_cannot_run(target, prefix, caplog):
    (target.app_dir / "agent.lock").mkdir()  # the agent's lock cannot be taken
    results = await target.launcher.launch_executors(
        target.host, str(target.app_dir), [target.executor(i, prefix) for i in range(2)])
    assert all(isinstance(r, ProcessRef) for r in results), results
    assert not agents_of(target.app_dir.name)
    assert "executors start cold" in caplog.text
    for i in range(2):
        wait_until(lambda i=i: "no spec, plan or role in etcd" in
                   log_of(target, f"worker-{i}.executor.log"), 30, f"worker-{i} to run cold")


async def test_an_agent_killed_mid_wave_fails_the_unanswered_and_starts_none_twice(
        target, prefix, silent_etcd):
    # The agent answers a wave's requests one by one. Opening the fourth one's log, a FIFO
    # nobody reads, blocks it; just before, it makes the FIFO's directory private, when it has
    # sent the third answer: the moment it is killed.
    blocked = target.app_dir / "blocked"
    blocked.mkdir()
    blocked.chmod(0o755)
    fifo = blocked / "worker-3.executor.log"
    os.mkfifo(fifo, 0o600)
    requests = [target.executor(i, prefix, etcd=silent_etcd) for i in range(6)]
    requests[3] = dataclasses.replace(requests[3], log_file=str(fifo))
    wave = asyncio.ensure_future(target.launcher.launch_executors(
        target.host, str(target.app_dir), requests))
    await wait_until_async(lambda: mode_of(blocked) == "0o700", 60,
                           "the agent to come to the fourth request")
    [serving] = agents_of(target.app_dir.name)
    serving.kill()
    # A wave sent again would not block on the FIFO now: a second start would show.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        async with asyncio.timeout(60):
            results = await wave
    finally:
        os.close(reader)

    ended = f"{target.host.name}: the host agent ended before it started this executor"
    assert [type(r).__name__ for r in results[:3]] == ["ProcessRef"] * 3 and \
        [str(r) for r in results[3:]] == [ended] * 3, \
        f"expected 3 processes, then 3 times {ended!r}; got {results}"
    answered = {i: [result.pid] for i, result in enumerate(results[:3])
                if isinstance(result, ProcessRef)}
    running = executors_of(target)
    assert running == answered, \
        f"expected the answered executors once each and no other {answered}, running {running}"
    assert not agents_of(target.app_dir.name), "an agent was started again for the wave"


@pytest.mark.parametrize("target", ["ssh"], indirect=True)
async def test_a_host_with_another_primus_version_refuses_the_wave(target, prefix, other_primus):
    # Over SSH only: the local launcher's host is the AM's own process and installation.
    host = dataclasses.replace(target.host, python=other_primus)
    elsewhere = dataclasses.replace(target, host=host)
    results = await target.launcher.launch_executors(
        host, str(target.app_dir), [elsewhere.executor(i, prefix) for i in range(2)])
    refused = (f"{host.name}: this host runs Primus {OTHER_VERSION}, the AM {__version__}; "
               "install the same version on every host")
    assert [str(r) if isinstance(r, LaunchError) else r for r in results] == [refused] * 2, \
        f"expected {refused!r} for each request, got {results}"
    left = sorted(path.name for path in target.app_dir.iterdir())
    assert left == [], f"the refused wave started something: {left} in {target.app_dir}"


async def test_an_agent_of_another_primus_version_is_left_alone_by_a_wave(
        target, prefix, silent_etcd, other_primus):
    # An AM of the other version launched a process through its own agent there, which keeps
    # that agent running. (Run from the application's directory: from the repository's,
    # `import primus` would find this version.)
    subprocess.run([other_primus, "-c", (
        "import sys; from primus.launcher import agent; app = sys.argv[1]; "
        "agent.spawn_many(app, [{'argv': [sys.executable, '-c', 'import time; time.sleep(600)', "
        "app], 'log_file': app + '/other.log'}])"),
        str(target.app_dir)], check=True, capture_output=True, cwd=target.app_dir)
    [theirs] = agents_of(target.app_dir.name)
    their_children = theirs.children()
    assert len(their_children) == 1, f"the agent of {OTHER_VERSION} started {their_children}"
    [process] = await target.launcher.launch_executors(
        target.host, str(target.app_dir), [target.executor(0, prefix, etcd=silent_etcd)])
    assert isinstance(process, ProcessRef), process
    ours = [a.pid for a in agents_of(target.app_dir.name) if a.pid != theirs.pid]
    forked_by = psutil.Process(process.pid).ppid()
    assert len(ours) == 1 and forked_by == ours[0], \
        f"expected the executor forked by an agent of {__version__} ({ours}), not by the " \
        f"agent of {OTHER_VERSION} ({theirs.pid}): it was forked by {forked_by}"
    assert theirs.children() == their_children, \
        f"the agent of {OTHER_VERSION} forked {theirs.children()}, it had {their_children}"


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
