"""Each application's own etcd identity, on a shared deployment (site ``accounts:``).

The server makes it when it records the application: an etcd user and a role of one name that
may read and write the application's keys (``apps/<app>/``, ``scheduler/apps/<app>/``) and
nothing else. Its AM and executors use it instead of Primus's identity, which never leaves
Primus's own processes; it is removed once the application has ended and its AM has exited
(:func:`stale_identities`, run by the AM keeper, also sweeps what a crash left behind).

The password is not stored anywhere: it is derived from a key private to the server
(:func:`identity_key`) and the application's id, so that any server of the deployment can
hand it to an AM it starts later (the keeper's, ``primus recover``'s) without etcd or a log
ever holding it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from primus.config.site import Settings
from primus.private_files import private_dir, write_private
from primus.state.keys import AppKeys, identity_name

KEY_BYTES = 32


@dataclass(frozen=True)
class AppIdentity:
    """An application's etcd user and password (``repr`` hides the password)."""

    name: str
    password: str

    def __repr__(self) -> str:
        return f"AppIdentity(name={self.name!r})"


def identity_grants(prefix: str, app_id: str) -> tuple[list[str], list[str]]:
    """The prefixes the application's identity reads and writes, and the keys it only reads."""
    keys = AppKeys(prefix, app_id)
    return [keys.root, keys.scheduler.app(app_id)], [keys.scheduler.config]


def identity_key(settings: Settings) -> bytes:
    """The server's key that application passwords derive from: ``$PRIMUS_HOME/server/
    identity.key`` (0600), made on first use. Servers of one deployment share it (the
    playbook copies one to each)."""
    path = Path(settings.home) / "server" / "identity.key"
    if not path.exists():
        private_dir(path.parent)
        write_private(str(path), secrets.token_bytes(KEY_BYTES))
    return path.read_bytes()


def app_identity(settings: Settings, app_id: str) -> AppIdentity:
    """Application ``app_id``'s identity, its password derived from the server's key."""
    digest = hmac.new(identity_key(settings), f"{settings.prefix}\0{app_id}".encode(),
                      hashlib.sha256).digest()
    return AppIdentity(identity_name(settings.prefix, app_id),
                       base64.urlsafe_b64encode(digest).decode().rstrip("="))


def stale_identities(names: Sequence[str], start: str, apps: Mapping[str, bool],
                     seen_before: Set[str]) -> tuple[list[str], set[str]]:
    """Which identities to remove now, and which to remember as unclaimed for the next look.

    ``names`` are the identities found (starting with ``start``); ``apps`` every application
    in etcd, mapped to whether it is live (not ended, or its AM still runs). An ended
    application's identity goes at once. One whose application is not in etcd (archived and
    deleted, or never recorded: a crash between the two steps of a submission) goes once it
    was unclaimed at the previous look too (``seen_before``): a submission makes the identity
    just before it records the application, and must not lose it in between.
    """
    remove, unclaimed = [], set()
    for name in names:
        app_id = name[len(start):]
        if app_id in apps:
            if not apps[app_id]:
                remove.append(name)
        elif name in seen_before:
            remove.append(name)
        else:
            unclaimed.add(name)
    return sorted(remove), unclaimed


def owner_env(identity: AppIdentity, etcd_cert: str | None, etcd_key: str | None
              ) -> Mapping[str, str]:
    """The etcd part of an owner's processes' environment: the application's identity in
    place of Primus's (no path to a credential of Primus's)."""
    env = {"PRIMUS_ETCD_USER": identity.name, "PRIMUS_ETCD_PASSWORD": identity.password}
    if etcd_cert and etcd_key:
        env.update(PRIMUS_ETCD_CERT=etcd_cert, PRIMUS_ETCD_KEY=etcd_key)
    return env


def without_credentials(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the etcd credentials of Primus's identity (user, password, client
    certificate and key): the rest of ``Settings.to_env`` stays."""
    return {name: value for name, value in env.items()
            if name not in ("PRIMUS_ETCD_USER", "PRIMUS_ETCD_PASSWORD", "PRIMUS_ETCD_CERT",
                            "PRIMUS_ETCD_KEY")}
