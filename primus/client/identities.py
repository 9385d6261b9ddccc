"""Each application's own etcd identity, on a shared deployment (site ``accounts:``).

The server makes it when it records the application: an etcd user and a role of one name that
may read the application's keys (``apps/<app>/``, ``scheduler/apps/<app>/``) and write only
those its processes state facts in (:func:`identity_grants`), nothing else. Its AM and
executors use it instead of Primus's identity, which never leaves Primus's own processes; it
is removed once the application has ended and its AM has exited (:func:`stale_identities`,
run by the AM keeper, also sweeps what a crash left behind).

The password is not stored anywhere: it is derived from a key private to the server
(:func:`identity_key`) and the application's id, so that any server of the deployment can
hand it to an AM it starts later (the keeper's, ``primus recover``'s) without etcd or a log
ever holding it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from primus.config.accounts import AccountPolicy
from primus.config.site import Settings
from primus.private_files import private_dir, write_private
from primus.state.keys import AppKeys, am_keeper_key, identity_name
from primus.store.api import Grant

KEY_BYTES = 32


@dataclass(frozen=True)
class AppIdentity:
    """An application's etcd user and password (``repr`` hides the password)."""

    name: str
    password: str

    def __repr__(self) -> str:
        return f"AppIdentity(name={self.name!r})"


def identity_grants(prefix: str, app_id: str) -> list[Grant]:
    """What the application's identity may do: read every key of the application, the
    queues and the AM keeper's record; write its run-time keys (:attr:`AppKeys.run_time`)
    and its keys of admission.

    etcd's grants only add up, so the server's record (``owner``, ``spec``, ``hosts``) and
    people's requests are out of the identity's reach by being under no write grant: the
    writable keys are named one by one, never as a prefix that holds a record of the
    server's. Under ``scheduler/apps/<app>/`` the AM writes its request and gives its
    reservations up with its executors' ends; the admission leader seals what it writes
    there and believes nothing unsealed (:mod:`primus.scheduler.seals`).
    """
    keys = AppKeys(prefix, app_id)
    run_keys, run_prefixes = keys.run_time
    # Reads the AM keeper's record: whether its application may wait with no AM (parked).
    return [Grant(keys.root, prefix=True), Grant(keys.scheduler.config),
            Grant(am_keeper_key(prefix)),
            *(Grant(key, write=True) for key in run_keys),
            *(Grant(start, prefix=True, write=True) for start in run_prefixes),
            Grant(keys.scheduler.app(app_id), prefix=True, write=True)]


def identity_key(settings: Settings) -> bytes:
    """The server's key that application passwords derive from: ``$PRIMUS_HOME/server/
    identity.key`` (0600), made on first use. Servers of one deployment share it (the
    playbook copies one to each)."""
    path = Path(settings.home) / "server" / "identity.key"
    if not path.exists():
        private_dir(path.parent)
        write_private(str(path), secrets.token_bytes(KEY_BYTES))
    return path.read_bytes()


def seal_key(settings: Settings) -> bytes | None:
    """The key the admission leader seals reservations and preemptions with
    (``primus.scheduler.seals``), derived from the servers' key; ``None`` on a site without
    ``accounts:``, where no application has an identity of its own to forge them with."""
    if settings.accounts is None:
        return None
    return hmac.new(identity_key(settings), b"admission seals", hashlib.sha256).digest()


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


def owner_settings(settings: Settings, identity: AppIdentity, policy: AccountPolicy
                   ) -> Settings:
    """``settings`` as an owner's processes get them: the application's identity in place of
    Primus's (user and password), and the owners' certificate, if any, in place of Primus's;
    their environment (``Settings.to_env``) then holds no credential of Primus's."""
    assert settings.etcd is not None  # a shared deployment's server names its etcd
    return dataclasses.replace(settings, etcd=dataclasses.replace(
        settings.etcd, user=identity.name, password=identity.password,
        cert=policy.etcd_cert, key=policy.etcd_key))
