"""The etcd store against secured etcds: TLS with client certificates, and user/password auth.

Each secured etcd is real and started once per module. Certificates come from the ``openssl``
command line; a missing ``openssl`` or ``etcd`` fails these tests instead of skipping them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from primus.client.identities import app_identity
from primus.client.service import ApplicationService
from primus.config.etcd import EtcdConfig
from primus.config.site import Settings
from primus.store.api import (
    EventType,
    Get,
    Grant,
    Put,
    StoreAuthError,
    StoreError,
    StoreUnavailableError,
    WatchEvent,
    key_missing,
)
from primus.store.embedded import find_etcd_binary, free_port, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from tests.support.primus import run_primus
from tests.support.service import OBSERVER_TIMEOUT

STARTUP_TIMEOUT = 20.0
ROOT_PASSWORD = "root-pw-4d1c"
PRIMUS_USER = "primus"
PRIMUS_PASSWORD = "primus-pw-93a7"
WRONG_PASSWORD = "wrong-pw-5e2b"
SHORT_TOKEN_TTL = 1  # seconds; etcd's default is 300


# --- Certificates --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """PEM files of a test PKI: a CA, a server and a client signed by it, and a stranger CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.fail("the openssl command is needed to make test certificates; install openssl")
    result = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=60)
    assert result.returncode == 0, f"openssl {' '.join(args)} failed:\n{result.stderr}"


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
            "-subj", f"/CN={name}", cwd=directory)
    return directory / f"{name}.crt", directory / f"{name}.key"


def make_signed_cert(directory: Path, name: str, ca: tuple[Path, Path], extensions: str
                     ) -> tuple[Path, Path]:
    (directory / f"{name}.ext").write_text(extensions)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
            cwd=directory)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]),
            "-set_serial", str(time.time_ns()), "-days", "2", "-extfile", f"{name}.ext",
            "-out", f"{name}.crt", cwd=directory)
    return directory / f"{name}.crt", directory / f"{name}.key"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    directory = tmp_path_factory.mktemp("pki")
    ca = make_ca(directory, "primus-test-ca")
    server = make_signed_cert(directory, "server", ca,
                              "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                              "extendedKeyUsage=serverAuth\n")
    client = make_signed_cert(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    other_ca, _ = make_ca(directory, "stranger-ca")
    return Certificates(ca[0], server[0], server[1], client[0], client[1], other_ca)


# --- Secured etcds -------------------------------------------------------------------------------


def etcdctl(endpoint: str, *args: str, tls: Certificates | None = None,
            user: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real ``etcdctl`` (API v3) against ``endpoint``."""
    argv = [str(find_etcd_binary("etcdctl")), "--endpoints", endpoint, "--dial-timeout", "2s",
            "--command-timeout", "5s"]
    if tls is not None:
        argv += ["--cacert", str(tls.ca), "--cert", str(tls.client_cert),
                 "--key", str(tls.client_key)]
    if user is not None:
        argv += ["--user", user]
    return subprocess.run([*argv, *args], env={**os.environ, "ETCDCTL_API": "3"},
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)


def etcdctl_ok(endpoint: str, *args: str, **kwargs: object) -> None:
    result = etcdctl(endpoint, *args, **kwargs)  # type: ignore[arg-type]
    assert result.returncode == 0, f"etcdctl {' '.join(args)} failed:\n{result.stderr}"


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
             ) -> Iterator[str]:
    """An etcd serving clients over TLS only, requiring a client certificate signed by the CA.

    ``start_etcd`` waits on the plain-http health endpoint, so this one is started here with the
    same flags plus TLS, and is ready once ``etcdctl endpoint health`` succeeds over TLS.
    """
    base = tmp_path_factory.mktemp("etcd-tls")
    client_url = f"https://127.0.0.1:{free_port()}"
    peer_url = f"http://127.0.0.1:{free_port()}"
    argv = [str(find_etcd_binary()), "--name", "primus", "--data-dir", str(base / "data"),
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"primus={peer_url}", "--log-level", "warn", "--logger", "zap",
            "--cert-file", str(certificates.server_cert),
            "--key-file", str(certificates.server_key),
            "--trusted-ca-file", str(certificates.ca), "--client-cert-auth"]
    log_file = base / "etcd.log"
    with open(log_file, "wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while etcdctl(client_url, "endpoint", "health", tls=certificates).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"TLS etcd at {client_url} did not become healthy "
                            f"(exit {process.poll()}):\n{log_file.read_text()[-2000:]}")
        yield client_url
    finally:
        stop_pid(process.pid)


@contextlib.contextmanager
def etcd_with_auth(base: Path, extra_args: tuple[str, ...] = ()) -> Iterator[str]:
    """A plain-http etcd with auth on: user ``primus`` may read and write ``/primus/`` only."""
    process, info = start_etcd(base / "data", base / "etcd.log", extra_args=extra_args)
    try:
        url = info.client_url
        etcdctl_ok(url, "user", "add", f"root:{ROOT_PASSWORD}")
        etcdctl_ok(url, "auth", "enable")
        root = f"root:{ROOT_PASSWORD}"
        etcdctl_ok(url, "role", "add", "primus-rw", user=root)
        etcdctl_ok(url, "role", "grant-permission", "--prefix=true", "primus-rw", "readwrite",
                   "/primus/", user=root)
        etcdctl_ok(url, "user", "add", f"{PRIMUS_USER}:{PRIMUS_PASSWORD}", user=root)
        etcdctl_ok(url, "user", "grant-role", PRIMUS_USER, "primus-rw", user=root)
        yield url
    finally:
        stop_pid(process.pid)


@pytest.fixture(scope="module")
def auth_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with etcd_with_auth(tmp_path_factory.mktemp("etcd-auth")) as url:
        yield url


@pytest.fixture(scope="module")
def short_token_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Like ``auth_etcd``, but a token expires after ``SHORT_TOKEN_TTL`` seconds unused."""
    with etcd_with_auth(tmp_path_factory.mktemp("etcd-short-token"),
                        ("--auth-token-ttl", str(SHORT_TOKEN_TTL))) as url:
        yield url


def tls_config(endpoint: str, certificates: Certificates, **changes: object) -> EtcdConfig:
    fields: dict[str, object] = {
        "endpoints": (endpoint,), "ca_cert": str(certificates.ca),
        "cert": str(certificates.client_cert), "key": str(certificates.client_key),
        "request_timeout": 3.0}
    fields.update(changes)
    return EtcdConfig(**fields)  # type: ignore[arg-type]


def auth_config(endpoint: str, password: str = PRIMUS_PASSWORD) -> EtcdConfig:
    return EtcdConfig(endpoints=(endpoint,), user=PRIMUS_USER, password=password,
                      request_timeout=3.0)


async def next_event(watch: AsyncIterator[object], timeout: float = 10.0) -> WatchEvent:
    item = await asyncio.wait_for(watch.__anext__(), timeout)
    assert isinstance(item, WatchEvent), item
    return item


async def exercise_store(store: EtcdCoordinator, prefix: str) -> None:
    """Put, get, txn, a lease kept alive and a prefix watch, all under ``prefix``."""
    revision = await store.put(f"{prefix}/a", b"1")
    kv = await store.get(f"{prefix}/a")
    assert kv is not None and kv.value == b"1" and kv.mod_revision == revision

    created = await store.txn([key_missing(f"{prefix}/b")], [Put(f"{prefix}/b", b"2")],
                              [Get(f"{prefix}/b")])
    assert created.succeeded
    assert [kv.key for kv in (await store.get_prefix(f"{prefix}/")).kvs] == [
        f"{prefix}/a", f"{prefix}/b"]

    lease = await store.grant_lease(30)
    await store.put(f"{prefix}/leased", b"x", lease=lease.id)
    assert 0 < await store.refresh_lease(lease.id) <= 30
    assert (await store.get(f"{prefix}/leased")).lease == lease.id  # type: ignore[union-attr]

    watch = store.watch_prefix(f"{prefix}/", revision + 1)
    try:
        await store.put(f"{prefix}/watched", b"w")
        events = [await next_event(watch) for _ in range(3)]
    finally:
        await watch.aclose()
    assert [(e.type, e.key) for e in events] == [
        (EventType.PUT, f"{prefix}/b"), (EventType.PUT, f"{prefix}/leased"),
        (EventType.PUT, f"{prefix}/watched")]

    await store.revoke_lease(lease.id)
    assert await store.get(f"{prefix}/leased") is None
    assert await store.refresh_lease(lease.id) == 0


async def connect_failure(config: EtcdConfig, within: float) -> StoreError:
    """The error ``EtcdCoordinator.connect`` raises for ``config``, required within ``within``s."""
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        store = await asyncio.wait_for(EtcdCoordinator.connect(config), within)
        await store.close()
    assert time.monotonic() - started < within
    assert tuple(config.endpoints)[0] in str(caught.value)
    return caught.value


# --- TLS with client certificates ----------------------------------------------------------------


async def test_tls_with_client_certificate_supports_every_operation(tls_etcd, certificates,
                                                                    prefix):
    store = await EtcdCoordinator.connect(tls_config(tls_etcd, certificates))
    try:
        assert store.endpoint == tls_etcd
        await exercise_store(store, prefix)
    finally:
        await store.close()


async def test_tls_without_client_certificate_is_refused_naming_the_endpoint(tls_etcd,
                                                                             certificates):
    error = await connect_failure(tls_config(tls_etcd, certificates, cert=None, key=None),
                                  within=6.0)
    assert isinstance(error, (StoreUnavailableError, StoreAuthError)), repr(error)


async def test_tls_with_a_ca_that_did_not_sign_the_server_is_refused(tls_etcd, certificates):
    error = await connect_failure(tls_config(tls_etcd, certificates,
                                             ca_cert=str(certificates.other_ca)),
                                  within=6.0)
    assert isinstance(error, (StoreUnavailableError, StoreAuthError)), repr(error)
    assert "CERTIFICATE_VERIFY_FAILED" in str(error)


async def test_plain_http_to_a_tls_etcd_is_refused_naming_the_endpoint(tls_etcd):
    plain = tls_etcd.replace("https://", "http://")
    error = await connect_failure(EtcdConfig(endpoints=(plain,), request_timeout=3.0),
                                  within=6.0)
    assert isinstance(error, StoreUnavailableError), repr(error)


# --- User and password ---------------------------------------------------------------------------


@pytest.fixture
def primus_prefix(prefix: str) -> str:
    """A unique prefix inside the ``/primus/`` range the ``primus`` user may use."""
    return "/primus" + prefix


async def test_right_password_supports_every_operation_under_the_permitted_prefix(
        auth_etcd, primus_prefix):
    store = await EtcdCoordinator.connect(auth_config(auth_etcd))
    try:
        await exercise_store(store, primus_prefix)
    finally:
        await store.close()


async def test_wrong_password_raises_auth_error_naming_the_endpoint(auth_etcd):
    error = await connect_failure(auth_config(auth_etcd, WRONG_PASSWORD), within=6.0)
    assert isinstance(error, StoreAuthError), f"{type(error).__name__}: {error}"
    assert "authentication failed" in str(error)
    assert WRONG_PASSWORD not in str(error)


async def test_no_credentials_on_an_auth_etcd_cannot_write(auth_etcd, primus_prefix):
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(auth_etcd,),
                                                     request_timeout=3.0))
    try:
        with pytest.raises(StoreError) as caught:
            await store.put(f"{primus_prefix}/a", b"1")
    finally:
        await store.close()
    assert auth_etcd in str(caught.value) and "user name is empty" in str(caught.value)


@pytest.mark.parametrize("operation", ["put", "get", "txn", "delete", "get_prefix"])
async def test_access_outside_the_permitted_prefix_is_denied_clearly(auth_etcd, prefix,
                                                                     operation):
    store = await EtcdCoordinator.connect(auth_config(auth_etcd))
    key = f"/elsewhere{prefix}/a"
    calls = {
        "put": lambda: store.put(key, b"1"),
        "get": lambda: store.get(key),
        "txn": lambda: store.txn([key_missing(key)], [Put(key, b"1")]),
        "delete": lambda: store.delete(key),
        "get_prefix": lambda: store.get_prefix(key),
    }
    try:
        with pytest.raises(StoreAuthError) as caught:
            await calls[operation]()
    finally:
        await store.close()
    message = str(caught.value)
    assert auth_etcd in message and "permission denied" in message
    assert PRIMUS_PASSWORD not in message


async def test_watch_outside_the_permitted_prefix_is_denied_instead_of_staying_silent(
        auth_etcd, prefix):
    store = await EtcdCoordinator.connect(auth_config(auth_etcd))
    watch = store.watch_prefix(f"/elsewhere{prefix}/", 1)
    try:
        with pytest.raises(StoreAuthError, match="permission denied") as caught:
            await next_event(watch)
    finally:
        await watch.aclose()
        await store.close()
    assert auth_etcd in str(caught.value)


async def keep_lease_alive_only(store: EtcdCoordinator, lease_id: int) -> None:
    """Let the auth token expire while only lease keepalives go out (they do not renew it).

    Waiting here is the point of the test: etcd expires an unused token after
    ``SHORT_TOKEN_TTL`` seconds, checking once a second, and nothing signals the expiry.
    """
    deadline = time.monotonic() + SHORT_TOKEN_TTL + 2.5
    while time.monotonic() < deadline:
        assert await store.refresh_lease(lease_id) > 0
        await asyncio.sleep(0.25)


async def test_store_keeps_working_after_its_auth_token_expires(short_token_etcd,
                                                                primus_prefix):
    store = await EtcdCoordinator.connect(auth_config(short_token_etcd))
    try:
        lease = await store.grant_lease(30)
        first = await store.put(f"{primus_prefix}/a", b"1", lease=lease.id)
        open_watch = store.watch_prefix(f"{primus_prefix}/", first)
        try:
            assert (await next_event(open_watch)).key == f"{primus_prefix}/a"
            await keep_lease_alive_only(store, lease.id)

            second = await store.put(f"{primus_prefix}/b", b"2", lease=lease.id)
            assert (await store.get(f"{primus_prefix}/b")).value == b"2"  # type: ignore[union-attr]
            assert (await store.txn([key_missing(f"{primus_prefix}/c")],
                                    [Put(f"{primus_prefix}/c", b"3")])).succeeded
            assert (await next_event(open_watch)).revision == second
            await keep_lease_alive_only(store, lease.id)

            new_watch = store.watch_prefix(f"{primus_prefix}/", second)
            try:
                assert [(await next_event(new_watch)).key for _ in range(2)] == [
                    f"{primus_prefix}/b", f"{primus_prefix}/c"]
            finally:
                await new_watch.aclose()
        finally:
            await open_watch.aclose()
        await store.revoke_lease(lease.id)
        assert await store.list_keys(f"{primus_prefix}/") == [f"{primus_prefix}/c"]
    finally:
        await store.close()


async def test_store_keeps_working_while_another_client_adds_identities(auth_etcd,
                                                                       primus_prefix):
    """Each change to etcd's users and roles raises its auth revision, and etcd refuses a request
    that arrived under the older one ("auth: revision in header is old"): on a shared site the
    server adds an identity at every submit while every other application's clients work."""
    # What is under test is that no request fails, not how fast they go: on the loaded CI
    # machine an authentication (a bcrypt in etcd) once took past 3 s.
    patient = float(OBSERVER_TIMEOUT)
    root = await EtcdCoordinator.connect(EtcdConfig(endpoints=(auth_etcd,), user="root",
                                                    password=ROOT_PASSWORD,
                                                    request_timeout=patient))
    store = await EtcdCoordinator.connect(dataclasses.replace(auth_config(auth_etcd),
                                                              request_timeout=patient))
    names = [f"{primus_prefix.strip('/').replace('/', '.')}.{n}" for n in range(20)]

    async def add_identities() -> None:
        for name in names:
            await root.add_identity(name, "pw", [Grant(f"/x/{name}/", prefix=True, write=True)])

    async def write(worker: int) -> int:
        for n in range(200):
            key = f"{primus_prefix}/{worker}/{n}"
            assert (await store.txn([key_missing(key)], [Put(key, b"1")])).succeeded
        return n + 1

    try:
        assert await asyncio.gather(add_identities(), write(0), write(1)) == [None, 200, 200]
    finally:
        for name in names:
            await root.remove_identity(name)
        await store.close()
        await root.close()


async def test_an_identity_that_exists_is_left_alone_when_its_id_is_drawn_again(
        auth_etcd, primus_prefix, tmp_path):
    """Two submissions can draw one application id (16 random bits a second): the second may
    not take, nor undo, the first one's etcd identity; it is told to draw again."""
    root = await EtcdCoordinator.connect(EtcdConfig(endpoints=(auth_etcd,), user="root",
                                                    password=ROOT_PASSWORD))
    service = ApplicationService(root, Settings(home=tmp_path, prefix=primus_prefix))
    name = app_identity(service.settings, "hello-taken").name
    try:
        assert await service._make_identity("hello-taken")
        assert not await service._make_identity("hello-taken"), "drawn again"
        assert await root.list_identities(name) == [name], "the first one's identity stays"
        holder = await EtcdCoordinator.connect(EtcdConfig(
            endpoints=(auth_etcd,), user=name,
            password=app_identity(service.settings, "hello-taken").password))
        try:  # and works: its status key is its own to write
            await holder.put(f"{primus_prefix}/apps/hello-taken/status", b"{}")
        finally:
            await holder.close()
    finally:
        await root.remove_identity(name)
        await root.close()


def test_etcd_config_repr_never_shows_the_password():
    config = EtcdConfig(endpoints=("http://127.0.0.1:2379",), user=PRIMUS_USER,
                        password=PRIMUS_PASSWORD)
    assert PRIMUS_PASSWORD not in repr(config)
    assert PRIMUS_PASSWORD not in str(config)
    assert PRIMUS_USER in repr(config)


# --- The command line ----------------------------------------------------------------------------


@pytest.fixture
def auth_cli_env(auth_etcd: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    (tmp_path / "no-site-defaults.yaml").write_text("")
    env.update(PRIMUS_ETCD=auth_etcd, PRIMUS_ETCD_USER=PRIMUS_USER,
               PRIMUS_ETCD_PASSWORD=PRIMUS_PASSWORD, PRIMUS_PREFIX="/primus",
               PRIMUS_HOME=str(tmp_path / "home"),
               PRIMUS_CONF=str(tmp_path / "no-site-defaults.yaml"), COLUMNS="200")
    return env


def test_cli_lists_applications_with_user_and_password(auth_cli_env):
    result = run_primus(auth_cli_env, "list", "-o", "json", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_cli_with_wrong_password_exits_2_naming_the_endpoint_not_the_password(auth_cli_env,
                                                                              auth_etcd):
    env = {**auth_cli_env, "PRIMUS_ETCD_PASSWORD": WRONG_PASSWORD}
    result = run_primus(env, "list", "-o", "json", timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    output = result.stdout + result.stderr
    assert auth_etcd in output
    assert WRONG_PASSWORD not in output and PRIMUS_PASSWORD not in output
    assert not (Path(env["PRIMUS_HOME"]) / "etcd").exists(), "must not fall back to embedded"
