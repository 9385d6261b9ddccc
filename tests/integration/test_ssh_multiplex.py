"""Shared SSH connections against real sshd hosts: calls to a host ride one connection until
it is let go, a host that refuses a second session on a connection is reached call by call,
a stale control socket is replaced, and an application's end closes its connections."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess

import psutil
import pytest

from primus.config.inventory import Host, load_inventory
from primus.config.ssh import SshOptions
from primus.launcher.ssh_launcher import SshLauncher, control_directory
from primus.state.records import ProcessRef
from tests.support.apps import assert_hosts_left_empty, status_json, write_job
from tests.support.cluster import TestCluster
from tests.support.primus import run_primus
from tests.support.waiting import wait_until, wait_until_async

NOBODY = ProcessRef(host="h", pid=2**22 - 1, start_time=1.0)


@pytest.fixture
def cluster(ssh_testbed) -> TestCluster:
    return ssh_testbed.cluster


@pytest.fixture
def env(ssh_testbed, primus_env) -> dict[str, str]:
    return ssh_testbed.env(primus_env)


def inventory_host(cluster: TestCluster, name: str) -> Host:
    return next(h for h in load_inventory(str(cluster.inventory)).hosts if h.name == name)


def cmdline_of(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def connections_to(address: str) -> int:
    """Established TCP connections from this namespace to the host's sshd."""
    listing = subprocess.run(["ss", "-tnH", "state", "established", "dst", f"{address}:22"],
                             capture_output=True, text=True, check=True).stdout
    return len(listing.splitlines())


@pytest.fixture
async def launcher(cluster, tmp_path):
    made = SshLauncher(SshOptions(known_hosts=str(cluster.known_hosts)),
                       control_dir=control_directory(str(tmp_path / "home")))
    yield made
    await made.close()


async def test_calls_to_a_host_ride_one_connection_until_it_is_let_go(launcher, cluster):
    host = inventory_host(cluster, "h3")
    assert connections_to(host.address) == 0
    for _ in range(5):
        assert await launcher.alive(host, [NOBODY]) == [False]
    assert connections_to(host.address) == 1
    await launcher.close()
    await wait_until_async(lambda: connections_to(host.address) == 0, 10,
                           "the shared connection to close")


async def test_a_host_refusing_a_second_session_is_reached_call_by_call(launcher, cluster,
                                                                        tmp_path, caplog):
    test_host = next(h for h in cluster.hosts if h.name == "h4")
    cluster.restart_sshd(test_host, max_sessions=1)
    host = inventory_host(cluster, "h4")
    log = tmp_path / "grows.log"
    try:
        assert await launcher.alive(host, [NOBODY]) == [False]  # the shared connection
        following = True
        reader = launcher.read_log(host, str(log), follow=lambda: following)
        first = asyncio.ensure_future(reader.__anext__())  # holds the one session
        # Once the follower runs on the host, the connection's only session is taken, and
        # the next call is refused one.
        await wait_until_async(lambda: any(
            "follow" in cmdline_of(pid) for pid in test_host.pids()), 20,
            "the follower to run on the host")
        async with asyncio.timeout(30):
            assert await launcher.alive(host, [NOBODY]) == [False]
        assert "h4 refuses a second session on a connection" in caplog.text
        # Later calls connect on their own from the start.
        assert await launcher.alive(host, [NOBODY]) == [False]
        following = False
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await first
        await reader.aclose()
    finally:
        await launcher.close()
        cluster.restart_sshd(test_host)


async def test_a_stale_control_socket_is_replaced(launcher, cluster):
    host = inventory_host(cluster, "h2")
    options = SshOptions(known_hosts=str(cluster.known_hosts))
    config = subprocess.run(["ssh", "-G", *options.argv(
        host, None, f"{launcher._control_dir}/%C")[1:]], capture_output=True, text=True,
        check=True).stdout
    path = next(line.split(" ", 1)[1] for line in config.splitlines()
                if line.startswith("controlpath "))
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)  # a socket file nobody listens on: a master that died
    stale.close()
    try:
        async with asyncio.timeout(30):
            assert await launcher.alive(host, [NOBODY]) == [False]
    finally:
        await launcher.close()


def test_an_applications_end_closes_its_connections_and_agents(env, cluster, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: sleepers
policy: {stop_grace: 2s}
roles:
  - name: worker
    num: 8
    command: sleep 600
""")
    app_id = run_primus(env, "submit", str(job), "-i", str(cluster.inventory)).stdout.strip()
    try:
        wait_until(lambda: status_json(env, app_id)["status"]["state"] == "RUNNING", 60,
                   "the application to run on every host")
        executors = [e for e in status_json(env, app_id)["executors"]["worker"]]
        hosts = {e["plan"]["host"] for e in executors}
        assert hosts == {"h1", "h2", "h3", "h4"}
        # No connection per call piles up: at most one shared connection to each host (the
        # submit's own goes once its last call ended; the AM's opens on its next call; one an
        # earlier test left idle goes within ssh.control_persist).
        wait_until(lambda: all(connections_to(h.address) <= 1 for h in cluster.hosts),
                   35, "at most one connection to each host")
        agents = [p for p in psutil.process_iter(["cmdline"])
                  if "primus.launcher.agent" in (p.info["cmdline"] or []) and
                  app_id in " ".join(p.info["cmdline"] or [])]
        assert len(agents) == 4, "one agent per host for the application"
        result = run_primus(env, "kill", app_id)
        assert result.returncode == 0, result.stderr
        wait_until(lambda: all(connections_to(h.address) == 0 for h in cluster.hosts), 10,
                   "every connection to close")
        assert_hosts_left_empty(cluster)
    finally:
        run_primus(env, "kill", app_id)
