"""Fixtures of the tests that call a real ``primus server`` over gRPC: a plaintext one, and a TLS
one that identifies its callers by the bearer tokens of :data:`tests.support.tokens.TOKENS`;
and the wheelhouse every deployment of the run installs from."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from primus.api.client import Client
from primus.config.etcd import EtcdConfig
from primus.store.embedded import EtcdProcessInfo, exclusive_lock
from primus.store.pki import EtcdPki, ensure_pki
from tests.support.browser import browser, context, page  # noqa: F401 - the UI's fixtures
from tests.support.deploy import build_wheelhouse
from tests.support.postgres import PostgresServer, start_postgres
from tests.support.server import RunningServer, start_server
from tests.support.tokens import start_token_server, through_server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL 15 server for the session (tests/support/postgres.py); each test
    makes its own database with :meth:`PostgresServer.new_database`."""
    running = start_postgres()
    yield running
    running.stop()


@pytest.fixture
def server(primus_env: dict[str, str], tmp_path: Path) -> Iterator[RunningServer]:
    """A plaintext ``primus server`` on the test's etcd prefix, stopped after the test."""
    running = start_server(primus_env, tmp_path)
    yield running
    running.stop()


@pytest.fixture
def client(server: RunningServer) -> Iterator[Client]:
    """A plaintext client of :func:`server`."""
    with Client(server.address, plaintext=True) as api:
        yield api


@pytest.fixture
def etcd(etcd_server: EtcdProcessInfo) -> EtcdConfig:
    """How the test reaches the session etcd (each write connects with ``asyncio.run``)."""
    return EtcdConfig(endpoints=(etcd_server.client_url,))


@pytest.fixture
def pki(tmp_path: Path) -> EtcdPki:
    """A CA with server and client certificates, in the test's directory."""
    return ensure_pki(tmp_path / "pki")


@pytest.fixture
def direct(primus_env: dict[str, str]) -> dict[str, str]:
    """The environment of the command that reaches etcd itself, and of :func:`token_server`:
    ``primus_env``; a module whose server needs settings of its own (an inventory) overrides
    it."""
    return primus_env


@pytest.fixture
def token_server(direct: dict[str, str], tmp_path: Path,
                 pki: EtcdPki) -> Iterator[RunningServer]:
    """A TLS ``primus server`` (``pki``'s certificate) knowing the tokens of alice, bob and root
    (the admin); reach it with :func:`tests.support.tokens.client_of`."""
    running = start_token_server(direct, tmp_path, pki)
    yield running
    running.stop()


@pytest.fixture
def alice(direct: dict[str, str], token_server: RunningServer, pki: EtcdPki,
          tmp_path: Path) -> dict[str, str]:
    """alice's command: through :func:`token_server` with her token, no etcd setting."""
    return through_server(direct, token_server, pki, tmp_path)


@pytest.fixture(params=["direct", "server"])
def cli_env(request: pytest.FixtureRequest, primus_env: dict[str, str],
            tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the ``primus`` command, once in each mode: direct (it reaches etcd
    itself), and through a real TLS ``primus server`` with alice's token and no etcd setting.
    Through the server, the command must not have started an etcd of its own."""
    if request.param == "direct":
        yield primus_env
        return
    pki = ensure_pki(tmp_path / "pki")
    running = start_token_server(primus_env, tmp_path, pki)
    env = through_server(primus_env, running, pki, tmp_path)
    yield env
    running.stop()
    assert not (Path(env["PRIMUS_HOME"]) / "etcd").exists(), \
        "a command through the server started an etcd"


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Primus's wheel and its dependencies' (the directory, the wheel), built once for every
    test worker: the first worker to need it builds it under a lock, the others wait and reuse
    it."""
    # The run's own directory: the workers' base directories are beside each other in it; a
    # run without workers has its base directory alone (its parent outlives the run).
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / \
        "deploy-wheelhouse"
    with exclusive_lock(shared):
        if not (shared / ".complete").exists():
            build_wheelhouse(shared)
            (shared / ".complete").touch()
    built = next(shared.glob("primus-*.whl"))
    return shared, built
