"""Who calls the API and what they may do: identities, the tokens file, and the policy.

Decisions are pure functions (:func:`identify`, :func:`may`, :func:`refusal`,
:func:`unsafe_site_refusal`); the gRPC edge (:mod:`primus.api.auth`) reads the call's
certificate and metadata and applies them.

A caller is identified by, in order: the subject common name of its client certificate (when
the server requires client certificates), mapped through :attr:`AuthConfig.certificate_users`
when it names a shared certificate; else a bearer token, whose SHA-256 digest is looked up in
the tokens file. The server stores and compares digests only, in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from primus.config.accounts import Trust
from primus.config.loader import SpecError, SpecProblem, read_config_file
from primus.config.site import ReadAccess

_DIGEST = re.compile(r"[0-9a-f]{64}")
_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
_TOKENS_KEYS = {"tokens", "admins", "scrapers"}
_ENTRY_KEYS = {"user", "sha256"}
BEARER = "bearer "


class Action(str, Enum):
    """What a call does to an application.

    READ: reads listings and status (List, Get, Watch, ListHosts, ListQueue): anyone
        authenticated.
    READ_PRIVATE: reads what an application keeps to itself (its logs, its hang stacks, its
        savepoints and their cuts): its owner or an admin; anyone authenticated where the
        site's ``server.read_access`` is ``everyone``.
    SUBMIT: creates an application owned by the caller: anyone authenticated.
    CHANGE: changes an existing application (kill, topology): its owner or an admin.
    """

    READ = "read"
    READ_PRIVATE = "read-private"
    SUBMIT = "submit"
    CHANGE = "change"


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: the user name recorded for what it does, and whether it is an
    admin of this deployment."""

    user: str
    admin: bool = False


@dataclass(frozen=True)
class TokenEntry:
    """One issued token: its SHA-256 digest (hex) and the user it identifies."""

    user: str
    sha256: str


@dataclass(frozen=True)
class AuthConfig:
    """How the server authenticates.

    Attributes:
        tokens: The issued tokens (digests only).
        admins: Users who may change any application.
        certificate_users: Client-certificate common names that stand for another user name
            (the embedded client certificate ``primus`` stands for the local account).
        open_as: With no way to authenticate configured (no client CA, no tokens), every
            caller acts as this user, an admin; ``None``: callers must authenticate.
        scrapers: Users whose tokens read the server's metrics (``/metrics``) and nothing
            else: the API and the UI do not know them.
    """

    tokens: tuple[TokenEntry, ...] = ()
    admins: frozenset[str] = frozenset()
    certificate_users: Mapping[str, str] = field(default_factory=dict)
    open_as: str | None = None
    scrapers: frozenset[str] = frozenset()


def token_digest(token: str) -> str:
    """The SHA-256 digest (hex) of ``token``, as the tokens file records it."""
    return hashlib.sha256(token.encode()).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``authorization: Bearer <token>`` header value, else ``None``."""
    if authorization is None or not authorization.lower().startswith(BEARER):
        return None
    return authorization[len(BEARER):].strip() or None


def identify(config: AuthConfig, certificate_names: Sequence[str],
             token: str | None) -> Identity | None:
    """Who calls, from the certificate's common names and the bearer token; ``None``: nobody
    known (UNAUTHENTICATED)."""
    if config.open_as is not None:
        return Identity(config.open_as, admin=True)
    user = None
    if certificate_names:
        user = config.certificate_users.get(certificate_names[0], certificate_names[0])
    elif token is not None:
        digest = token_digest(token)
        # Every entry is compared, so the time taken does not tell which entry matched.
        for entry in config.tokens:
            if hmac.compare_digest(entry.sha256, digest):
                user = entry.user
    if user is None or user in config.scrapers:
        return None
    return Identity(user, admin=user in config.admins)


def may_scrape(config: AuthConfig, token: str | None) -> bool:
    """Whether the bearer ``token`` may read the server's metrics: a scraper's token or an
    admin's (anyone, with no way to authenticate configured)."""
    if config.open_as is not None:
        return True
    if token is None:
        return False
    digest = token_digest(token)
    users = {entry.user for entry in config.tokens if hmac.compare_digest(entry.sha256, digest)}
    return any(user in config.scrapers or user in config.admins for user in users)


def may(identity: Identity, action: Action, owner: str | None = None,
        read_access: ReadAccess = ReadAccess.OWNER) -> bool:
    """Whether ``identity`` may do ``action`` to an application owned by ``owner``, on a site
    whose ``server.read_access`` is ``read_access``."""
    if action is Action.CHANGE or (action is Action.READ_PRIVATE
                                   and read_access is ReadAccess.OWNER):
        return identity.admin or identity.user == owner
    return True


def refusal(identity: Identity, what: str, app_id: str, owner: str,
            action: Action = Action.CHANGE) -> str:
    """The PERMISSION_DENIED message: who was refused what, who may, and why."""
    why = ("" if action is not Action.READ_PRIVATE else
           " (the site's server.read_access is owner: an application's logs, stacks and "
           "savepoints are its owner's)")
    return (f"{identity.user} may not {what} application {app_id} owned by {owner}; "
            f"its owner and admins may{why}")


def unsafe_site_refusal(config: AuthConfig, tokens_file: Path | None,
                        client_ca: Path | None, site: Path | None, accounts: bool,
                        trust: Trust) -> str | None:
    """Why a server with ``config`` must not serve this site, or ``None`` when it may.

    Without ``accounts:`` every application runs as the server's own account, so every user
    it serves can act as that account: read its files and credentials, and every other
    user's data. That is safe for one admin (the embedded default: the local account), and
    only by the site's say-so (``trust: one-account``) for more users, or for any user who is
    not an admin. Users are those of the tokens file (scrapers read the metrics only, so they
    are none), those ``certificate_users`` names, and, when ``client_ca`` is given (client
    certificates required by a CA the deployment chose, not the embedded one), whoever that
    CA signs a certificate for: which users those are, the server cannot know.

    Args:
        config: How the server identifies callers.
        tokens_file: The tokens file it read, if any.
        client_ca: The CA whose certificates' common names are users (``None`` on the
            embedded default and without client certificates).
        site: The site file, if any (named in the refusal).
        accounts: The site has ``accounts:``.
        trust: The site's ``trust:``.
    """
    if accounts or trust is Trust.ONE_ACCOUNT or config.open_as is not None:
        return None
    users = {entry.user for entry in config.tokens} - config.scrapers
    users |= set(config.certificate_users.values())
    others = sorted(users - config.admins)
    if len(users) <= 1 and not others and client_ca is None:
        return None
    named = []
    if tokens_file is not None:
        named.append(f"the tokens file {tokens_file} names users {', '.join(sorted(users))}"
                     + (f" ({', '.join(others)} not admins)" if others else ""))
    if client_ca is not None:
        named.append(f"the client CA {client_ca} makes a user of every common name it signs")
    if not named:
        named.append(f"the server knows users {', '.join(sorted(users))}")
    where = f"the site file {site}" if site is not None else "the site (no site file)"
    return (f"refusing to serve: {' and '.join(named)}, and {where} has no accounts:, so "
            f"every user's applications would run as this server's own account, with its "
            f"files and credentials: any of these users could read the others' data and "
            f"Primus's etcd credentials. Give the site file accounts: (applications run as "
            f"their owners' accounts; docs/operations.md), or, if every one of these users "
            f"may act as this account, say so with trust: {Trust.ONE_ACCOUNT.value}")


def _problem(path: Path, field_path: str, value: object, allowed: str) -> SpecError:
    return SpecError(SpecProblem(str(path), field_path, value, allowed))


def load_tokens(path: Path) -> AuthConfig:
    """Read a tokens file: ``tokens`` (a list of ``{user, sha256}``), ``admins`` and
    ``scrapers`` (lists of user names).

    Raises:
        SpecError: Naming the file, the field and the value, when the file is unreadable or
            a field is wrong. A token's digest is never shown in an error.
    """
    data = read_config_file(str(path)) or {}
    if not isinstance(data, dict):
        raise _problem(path, "", type(data).__name__, "must be a mapping with tokens, admins")
    for key in data:
        if key not in _TOKENS_KEYS:
            raise _problem(path, str(key), data[key],
                           "unknown key; allowed: " + ", ".join(sorted(_TOKENS_KEYS)))
    entries = [] if data.get("tokens") is None else data["tokens"]
    if not isinstance(entries, list):
        raise _problem(path, "tokens", type(entries).__name__, "must be a list of {user, sha256}")
    tokens: list[TokenEntry] = []
    for position, entry in enumerate(entries):
        where = f"tokens[{position}]"
        if not isinstance(entry, dict):
            raise _problem(path, where, type(entry).__name__, "must be a mapping {user, sha256}")
        for key in entry:
            if key not in _ENTRY_KEYS:
                raise _problem(path, f"{where}.{key}", "(not shown)",
                               "unknown key; allowed: " + ", ".join(sorted(_ENTRY_KEYS)))
        for key in sorted(_ENTRY_KEYS - set(entry)):
            raise _problem(path, f"{where}.{key}", "nothing", "is required")
        user, digest = entry["user"], entry["sha256"]
        if not isinstance(user, str) or not _USER.fullmatch(user):
            raise _problem(path, f"{where}.user", user, _USER_ALLOWED)
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            # The value is not shown: a token pasted here by mistake must not reach a log.
            raise _problem(path, f"{where}.sha256", "(not shown)",
                           "must be the SHA-256 digest of the token, 64 lowercase hex digits "
                           "(`primus server token` prints one); never the token itself")
        if any(t.sha256 == digest for t in tokens):
            raise _problem(path, f"{where}.sha256", "(not shown)",
                           "is listed twice; each token identifies one user")
        tokens.append(TokenEntry(user, digest))
    admins, scrapers = _users(path, data, "admins"), _users(path, data, "scrapers")
    for user in sorted(admins & scrapers):
        raise _problem(path, "scrapers", user, "must not name an admin: a scraper's token "
                       "reads the metrics and nothing else")
    return AuthConfig(tuple(tokens), admins, scrapers=scrapers)


def _users(path: Path, data: dict[str, object], key: str) -> frozenset[str]:
    users = [] if data.get(key) is None else data[key]
    if not isinstance(users, list):
        raise _problem(path, key, users, "must be a list of user names")
    for position, user in enumerate(users):
        if not isinstance(user, str) or not _USER.fullmatch(user):
            raise _problem(path, f"{key}[{position}]", user, _USER_ALLOWED)
    return frozenset(users)


_USER_ALLOWED = ("must be a user name: letters, digits, '.', '_', '@', '-', starting with a "
                 "letter or digit, at most 128 characters")
