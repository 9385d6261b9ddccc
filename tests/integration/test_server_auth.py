"""Who may call ``primus server``: bearer tokens and ownership, over a real TLS channel.

A real server process on the session etcd, with a tokens file issuing tokens to alice, bob
and an admin; applications are recorded in etcd as an AM would have written them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from primus.api.client import ApiError, Client
from primus.client.access import AuthConfig, TokenEntry, load_tokens, token_digest
from primus.config.etcd import EtcdConfig
from primus.state.keys import AppKeys
from primus.store.etcd_store import EtcdCoordinator
from tests.support.primus import run_primus
from tests.support.records import record_app
from tests.support.server import one_account_site, start_server
from tests.support.tokens import TOKENS, client_of


def kill_key_exists(config: EtcdConfig, prefix: str, app_id: str) -> bool:
    async def read() -> bool:
        store = await EtcdCoordinator.connect(config)
        try:
            return await store.get(AppKeys(prefix, app_id).kill) is not None
        finally:
            await store.close()
    return asyncio.run(read())


def test_call_without_a_token_or_with_an_unknown_one_is_unauthenticated_but_health_answers(
        token_server, pki, tmp_path, monkeypatch):
    monkeypatch.delenv("PRIMUS_TOKEN", raising=False)
    for caller in (client_of(token_server, pki, tmp_path, None),
                   client_of(token_server, pki, tmp_path, "mallory", token="guessed-token")):
        with caller, pytest.raises(ApiError) as refused:
            list(caller.list_apps())
        assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED
        assert "token" in str(refused.value)
    credentials = grpc.ssl_channel_credentials(pki.ca_cert.read_bytes())
    with grpc.secure_channel(token_server.address, credentials) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                           timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_reader_reads_anything_but_may_not_kill_an_application_of_another_user(
        token_server, pki, tmp_path, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0, user="bob")
    with client_of(token_server, pki, tmp_path, "alice") as alice:
        assert [a.status.app_id for a in alice.list_apps()] == ["train-1"]
        assert alice.get_app("train-1").status.user == "bob"
        with pytest.raises(ApiError) as refused:
            alice.kill("train-1", reason="not mine")
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert "alice may not kill application train-1 owned by bob" in str(refused.value)
    with client_of(token_server, pki, tmp_path, "alice") as alice, \
            pytest.raises(ApiError) as refused:
        alice.succeed("train-1", reason="not mine either")
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert "alice may not succeed application train-1 owned by bob" in str(refused.value)
    with client_of(token_server, pki, tmp_path, "alice") as alice, \
            pytest.raises(ApiError) as refused:
        alice.resize_role("train-1", "worker", cpu=2)
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert "alice may not resize application train-1 owned by bob" in str(refused.value)
    assert not kill_key_exists(etcd, prefix, "train-1")


def test_owner_kills_their_application_and_an_admin_kills_anyones(
        token_server, pki, tmp_path, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0, user="bob")
    record_app(etcd, prefix, "train-2", submitted=1001.0, user="alice")
    with client_of(token_server, pki, tmp_path, "bob") as bob:
        bob.kill("train-1", reason="done with it")
        assert bob.get_app("train-1").kill.user == "bob"
    with client_of(token_server, pki, tmp_path, "root") as root:
        root.kill("train-2", reason="maintenance")
        assert root.get_app("train-2").kill.user == "root"
    assert kill_key_exists(etcd, prefix, "train-2")


def test_only_an_admin_drains_and_resumes_a_host_and_only_one_the_server_knows(
        token_server, pki, tmp_path):
    with client_of(token_server, pki, tmp_path, "alice") as alice, \
            client_of(token_server, pki, tmp_path, "root") as root:
        [host] = [h.name for h in root.hosts()]
        for call in (lambda: alice.drain_host(host, "mine now"),
                     lambda: alice.resume_host(host)):
            with pytest.raises(ApiError) as refused:
                call()
            assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
            assert "alice may not" in str(refused.value) and "admins may" in str(refused.value)
        with pytest.raises(ApiError) as unknown:
            root.drain_host("nowhere", "gone")
        assert unknown.value.code is grpc.StatusCode.NOT_FOUND
        assert "host 'nowhere'" in str(unknown.value)
        with pytest.raises(ApiError) as blank:
            root.drain_host(host, "  ")
        assert blank.value.code is grpc.StatusCode.INVALID_ARGUMENT

        drained = root.drain_host(host, "new disks")
        assert (drained.state, drained.by, drained.reason) == ("drained", "root", "new disks")
        assert [u.condition for u in root.host_usage() if u.host.name == host] == [drained]
        assert root.resume_host(host) == drained
        assert root.resume_host(host) is None, "in service already"


def test_submit_records_the_tokens_user_as_owner(token_server, pki, tmp_path):
    job = "name: hello\nroles:\n  - name: worker\n    num: 1\n    command: 'sleep 30'\n"
    with client_of(token_server, pki, tmp_path, "alice") as alice:
        app_id = alice.submit(job, source="hello.yaml")
        try:
            assert alice.get_app(app_id).status.user == "alice"
        finally:
            alice.kill(app_id, reason="test over")


def test_tokens_never_appear_in_the_servers_log(token_server, pki, tmp_path, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0, user="bob")
    for user in TOKENS:
        # refused: the scraper everything, alice the kill; bob and root kill it
        with client_of(token_server, pki, tmp_path, user) as caller, \
                contextlib.suppress(ApiError):
            list(caller.list_apps())
            caller.kill("train-1")
    with client_of(token_server, pki, tmp_path, "mallory", token="guessed-token") as stranger, \
            contextlib.suppress(ApiError):
        list(stranger.list_apps())
    token_server.stop()
    log = token_server.log.read_text()
    assert "callers identified by token" in log
    assert not [token for token in [*TOKENS.values(), "guessed-token"] if token in log]


def test_client_certificate_names_the_caller_and_the_tokens_file_may_make_it_admin(
        primus_env, tmp_path, pki, etcd, prefix):
    record_app(etcd, prefix, "train-1", submitted=1000.0, user="bob")
    tls = ("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
           "--client-ca", str(pki.ca_cert))
    admins = tmp_path / "admins.yaml"
    admins.write_text("tokens: []\nadmins: [primus]\n")  # the test certificate's CN
    # Whoever the CA signs for is a user: a site without accounts: must trust them all.
    env = one_account_site(primus_env, tmp_path)
    for flags, allowed in ((tls, False), ((*tls, "--tokens", str(admins)), True)):
        server = start_server(env, tmp_path, *flags)
        try:
            with Client(server.address, ca_cert=pki.ca_cert, cert=pki.client_cert,
                        key=pki.client_key, timeout=10) as caller:
                if allowed:
                    caller.kill("train-1")
                    assert caller.get_app("train-1").kill.user == "primus"
                else:
                    with pytest.raises(ApiError, match="primus may not kill") as refused:
                        caller.kill("train-1")
                    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
                    assert not kill_key_exists(etcd, prefix, "train-1")
        finally:
            server.stop()


def test_plaintext_client_refuses_to_send_a_token(tmp_path):
    path = tmp_path / "token"
    path.write_text("a-token\n")
    with pytest.raises(Exception, match="TLS only"):
        Client("127.0.0.1:1", plaintext=True, token_file=path)


def test_server_refuses_tokens_over_plaintext(primus_env, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens: []\n")
    result = run_primus(primus_env, "server", "run", "--listen", "127.0.0.1:0", "--plaintext",
                        "--tokens", str(tokens))
    assert result.returncode == 2
    assert "--tokens" in result.stderr and "--plaintext" in result.stderr


def test_server_token_writes_a_private_token_and_prints_only_its_digest(primus_env, tmp_path):
    out = tmp_path / "alice.token"
    result = run_primus(primus_env, "server", "token", "alice", "--out", str(out))
    assert result.returncode == 0, result.stderr
    token = out.read_text().strip()
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    entry = tmp_path / "tokens.yaml"
    entry.write_text("tokens:\n" + result.stdout)
    assert load_tokens(entry) == AuthConfig((TokenEntry("alice", token_digest(token)),))
    assert token not in result.stdout + result.stderr
    again = run_primus(primus_env, "server", "token", "alice", "--out", str(out))
    assert again.returncode != 0 and "exists" in again.stderr


def test_server_reads_its_tokens_file_from_the_site_defaults(primus_env, tmp_path, pki):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"tokens:\n  - user: alice\n    sha256: {token_digest(TOKENS['alice'])}\n")
    # alice is no admin: without accounts:, the site must trust her with the server's account
    Path(primus_env["PRIMUS_CONF"]).write_text(f"server:\n  tokens: {tokens}\n"
                                               "trust: one-account\n")
    server = start_server(primus_env, tmp_path, "--tls-cert", str(pki.server_cert),
                          "--tls-key", str(pki.server_key))
    try:
        with client_of(server, pki, tmp_path, "alice") as alice:
            assert list(alice.list_apps()) == []
        with client_of(server, pki, tmp_path, None) as stranger, \
                pytest.raises(ApiError) as refused:
            list(stranger.list_apps())
        assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED
    finally:
        server.stop()


def two_users_tokens(tmp_path: Path) -> Path:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n" + "".join(
        f"  - user: {user}\n    sha256: {token_digest(TOKENS[user])}\n"
        for user in ("alice", "root")) + "admins: [root]\n")
    return tokens


def test_server_of_two_users_without_accounts_refuses_to_start_and_says_why(
        primus_env, tmp_path, pki):
    tokens = two_users_tokens(tmp_path)
    started = time.monotonic()
    result = run_primus(primus_env, "server", "run", "--listen", "127.0.0.1:0", "--no-ui",
                        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                        "--tokens", str(tokens), timeout=30)
    assert result.returncode != 0
    assert time.monotonic() - started < 20, "it refuses at once, before serving anything"
    assert f"the tokens file {tokens} names users alice, root (alice not admins)" in \
        result.stderr
    assert f"the site file {primus_env['PRIMUS_CONF']} has no accounts:" in result.stderr
    assert "run as this server's own account" in result.stderr
    assert "accounts:" in result.stderr and "trust: one-account" in result.stderr


def test_server_of_two_users_starts_on_a_site_that_trusts_one_account(primus_env, tmp_path,
                                                                      pki):
    Path(primus_env["PRIMUS_CONF"]).write_text("trust: one-account\n")
    server = start_server(primus_env, tmp_path, "--tls-cert", str(pki.server_cert),
                          "--tls-key", str(pki.server_key),
                          "--tokens", str(two_users_tokens(tmp_path)))
    try:
        with client_of(server, pki, tmp_path, "alice") as alice:
            assert list(alice.list_apps()) == []
    finally:
        server.stop()
