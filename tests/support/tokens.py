"""A ``primus server`` that identifies its callers by bearer token, and clients presenting them:
alice and bob are ordinary users, root is an admin, prometheus a scraper (it reads the metrics
and nothing else)."""

from __future__ import annotations

import getpass
from pathlib import Path

from primus.api.client import Client
from primus.client.access import token_digest
from primus.store.pki import EtcdPki
from tests.support.server import RunningServer, one_account_site, start_server

TOKENS = {"alice": "alice-secret-0f3c9a71", "bob": "bob-secret-77e1d2c4",
          "root": "root-secret-a5b6c7d8", "prometheus": "prometheus-secret-3e9d0c12"}
"""Each user's token; the server knows only their digests."""


def start_token_server(env: dict[str, str], tmp_path: Path, pki: EtcdPki,
                       *flags: str) -> RunningServer:
    """A TLS server (``pki``'s server certificate) whose tokens file lists :data:`TOKENS`'
    digests, with root as its admin and prometheus as its scraper; ``flags`` added. Its site
    is ``env``'s, saying ``trust: one-account`` where it has no ``accounts:``."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n" + "".join(
        f"  - user: {user}\n    sha256: {token_digest(token)}\n"
        for user, token in TOKENS.items()) + "admins: [root]\nscrapers: [prometheus]\n")
    return start_server(one_account_site(env, tmp_path), tmp_path, "--tls-cert",
                        str(pki.server_cert), "--tls-key", str(pki.server_key), "--tokens",
                        str(tokens), *flags)


def client_of(server: RunningServer, pki: EtcdPki, tmp_path: Path, user: str | None,
              token: str | None = None, timeout: float = 10) -> Client:
    """A TLS client presenting ``user``'s token (or ``token``; neither: no token)."""
    token = token if token is not None else TOKENS.get(user or "")
    if token is None:
        return Client(server.address, ca_cert=pki.ca_cert, timeout=timeout)
    path = tmp_path / f"token-{user}"
    path.write_text(token + "\n")
    return Client(server.address, ca_cert=pki.ca_cert, timeout=timeout, token_file=path)


def through_server(env: dict[str, str], server: RunningServer, pki: EtcdPki, tmp_path: Path,
                   user: str = "alice") -> dict[str, str]:
    """The environment of a ``primus`` command that ``user`` runs through ``server``: the
    server's address and CA, the user's token, a home of its own, and no etcd setting."""
    cli = {k: v for k, v in env.items() if not k.startswith("PRIMUS_ETCD")}
    cli.update(PRIMUS_SERVER=server.address, PRIMUS_SERVER_CA=str(pki.ca_cert),
               PRIMUS_TOKEN=TOKENS[user], PRIMUS_HOME=str(tmp_path / f"{user}-home"))
    Path(cli["PRIMUS_HOME"]).mkdir(mode=0o700, exist_ok=True)
    return cli


def user_of(env: dict[str, str]) -> str:
    """Who a ``primus`` command run with ``env`` acts as: the token's user through a server,
    else this process's account."""
    token = env.get("PRIMUS_TOKEN") if env.get("PRIMUS_SERVER") else None
    if token is not None:
        return next(user for user, known in TOKENS.items() if known == token)
    return getpass.getuser()
