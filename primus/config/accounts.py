"""Whose Unix account an application runs under, on a shared deployment.

The site file's ``accounts:`` turns it on: every application of an API user then runs (its AM,
host agents, executors and trainers) under that user's account on every host — the user's own
name, or the one ``accounts.map`` gives — never under Primus's. Which accounts Primus may act
as is decided here, once, as a pure function of the policy and what a host says about the
account (:func:`refusal`); the privileged step that enters the account (``sudo``, with the rule
the playbook installs) enforces the same group on each host (docs/operations.md, "Applications
run as their owners").

Without ``accounts:`` (the embedded default, one person) everything runs under the account of
whoever runs Primus, as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NoReturn

DEFAULT_MIN_UID = 1000
DEFAULT_GROUP = "primus-users"
DEFAULT_BANNED = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp",
    "proxy", "www-data", "backup", "list", "irc", "gnats", "nobody", "primus", "etcd",
    "postgres", "sshd", "systemd-network", "messagebus"})
"""Accounts no application runs as, whatever their uid: root and the system's own, and the
accounts of Primus's and etcd's services (as YARN's ``banned.users``)."""
ACCOUNT_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
"""A Unix account name as Debian's ``adduser`` accepts it (without a trailing ``$``)."""
_KEYS = {"map": "a mapping of API users to Unix accounts",
         "min_uid": "the lowest uid an application may run as (an integer >= 1)",
         "banned": "a list of accounts no application runs as",
         "group": "the group whose members Primus may act as",
         "etcd_cert": "the path of a client certificate (PEM) that lets owners' processes "
                      "through etcd's TLS handshake and grants nothing",
         "etcd_key": "the path of that certificate's key"}


class Trust(str, Enum):
    """The site's ``trust:``: whom an API server without ``accounts:`` may serve.

    OWNER_ACCOUNTS: applications must run as their owners' accounts: a server that knows more
        than one user, or any user who is not an admin, refuses to start without ``accounts:``
        (:func:`primus.client.access.unsafe_site_refusal`). The default.
    ONE_ACCOUNT: every user's applications run as the server's own account, and every user
        may act as it (read its files, its credentials, the other users' data): the site says
        it trusts them all alike.
    """

    OWNER_ACCOUNTS = "owner-accounts"
    ONE_ACCOUNT = "one-account"


@dataclass(frozen=True)
class AccountPolicy:
    """The site's ``accounts:``: which account each API user's applications run as."""

    map: Mapping[str, str] = field(default_factory=dict)
    min_uid: int = DEFAULT_MIN_UID
    banned: frozenset[str] = DEFAULT_BANNED
    group: str = DEFAULT_GROUP
    etcd_cert: str | None = None
    etcd_key: str | None = None

    def account_of(self, user: str) -> str:
        """The account ``user``'s applications run as: the map's, else the same name."""
        return self.map.get(user, user)


@dataclass(frozen=True)
class AccountFacts:
    """What one host says about an account (``remote probe`` run as that account)."""

    uid: int
    groups: tuple[str, ...]
    home: str


def name_refusal(user: str, account: str, policy: AccountPolicy) -> str | None:
    """Why no host may run ``user``'s application as ``account``, whatever it says about
    the account: the name is not one, or it is banned. ``None`` when it may be tried."""
    whose = f"user {user!r}: account {account!r}"
    if ACCOUNT_NAME.fullmatch(account) is None:
        return f"{whose} is not a valid account name ({ACCOUNT_NAME.pattern})"
    if account in policy.banned:
        return (f"{whose} is banned (accounts.banned: root, system and service accounts "
                f"never run applications)")
    return None


def refusal(user: str, account: str, policy: AccountPolicy, facts: AccountFacts | None,
            host: str) -> str | None:
    """Why ``user``'s application may not run as ``account`` on ``host``; ``None`` when it
    may. ``facts`` is ``None`` when the host has no such account."""
    whose = f"user {user!r}: account {account!r}"
    named = name_refusal(user, account, policy)
    if named is not None:
        return named
    if facts is None:
        return f"{whose} does not exist on {host}"
    if facts.uid < policy.min_uid:
        return f"{whose} has uid {facts.uid} on {host}, under accounts.min_uid {policy.min_uid}"
    if policy.group not in facts.groups:
        return (f"{whose} is not in group {policy.group!r} on {host} (accounts.group: the "
                f"accounts Primus may act as)")
    return None


def read_policy(data: Any, refuse: Callable[[str, object, str], NoReturn]) -> AccountPolicy:
    """The site file's ``accounts:`` as a policy; ``refuse(field, value, allowed)`` raises the
    error naming the file, for the first key that is wrong."""
    if not isinstance(data, dict):
        refuse("accounts", data, "must be a mapping with " + ", ".join(_KEYS))
    for key, value in data.items():
        if key not in _KEYS:
            refuse(f"accounts.{key}", value, "unknown key; allowed: " + ", ".join(sorted(_KEYS)))
    mapping = data.get("map") or {}
    if not isinstance(mapping, dict):
        refuse("accounts.map", mapping, f"must be {_KEYS['map']}")
    for user, account in mapping.items():
        if not isinstance(account, str) or ACCOUNT_NAME.fullmatch(account) is None:
            refuse(f"accounts.map.{user}", account,
                   f"must be a Unix account name ({ACCOUNT_NAME.pattern})")
    min_uid = data.get("min_uid", DEFAULT_MIN_UID)
    if not isinstance(min_uid, int) or isinstance(min_uid, bool) or min_uid < 1:
        refuse("accounts.min_uid", min_uid, f"must be {_KEYS['min_uid']}")
    banned = data.get("banned", sorted(DEFAULT_BANNED))
    if not isinstance(banned, list) or not all(isinstance(b, str) for b in banned):
        refuse("accounts.banned", banned, f"must be {_KEYS['banned']}")
    if "root" not in banned:
        refuse("accounts.banned", banned, "must name root: no application runs as root")
    for key in ("group", "etcd_cert", "etcd_key"):
        if key in data and (not isinstance(data[key], str) or not data[key]):
            refuse(f"accounts.{key}", data[key], f"must be {_KEYS[key]}")
    if bool(data.get("etcd_cert")) != bool(data.get("etcd_key")):
        refuse("accounts.etcd_key" if data.get("etcd_cert") else "accounts.etcd_cert", None,
               "etcd_cert and etcd_key go together")
    return AccountPolicy(map=dict(mapping), min_uid=min_uid, banned=frozenset(banned),
                         group=data.get("group", DEFAULT_GROUP),
                         etcd_cert=data.get("etcd_cert"), etcd_key=data.get("etcd_key"))
