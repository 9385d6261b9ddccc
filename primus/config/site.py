"""Site settings: where etcd is, where Primus keeps its files, and site-wide job defaults.

Sources, later wins: built-in defaults < the site defaults file (``$PRIMUS_CONF``, else
``/etc/primus/defaults.yaml`` when it exists) < environment variables < command-line options.
Child processes (AM, executors) receive the resolved settings through :meth:`Settings.to_env`,
and the etcd password through :meth:`Settings.to_secrets`, which they get outside their
environment (:mod:`primus.process_secrets`); the queues are not among them: the admission
leader reads their copy in etcd (``scheduler/config``, docs/scheduling.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn, TypeVar, get_args

from pydantic import BaseModel

from primus.config.accounts import AccountPolicy, Trust, read_policy
from primus.config.etcd import EtcdConfig
from primus.config.health import HealthPolicy, read_health
from primus.config.loader import SpecError, SpecProblem, read_config_file
from primus.config.notify import NotifyPolicy, read_notify
from primus.config.queues import (
    DEFAULT_BUDGET,
    DEFAULT_QUEUE,
    Budget,
    QueuesConfig,
    QueueSpec,
    Quota,
)
from primus.config.reading import InputError, read_bounded
from primus.config.resources import ResourcePolicy, read_resources
from primus.config.spec import BYTES, DOMAIN_LEVEL_PATTERN, LONG_DURATION, QUEUE_NAME_PATTERN
from primus.config.ssh import HOST_KEY_CHECKING, SshOptions

DEFAULT_SITE_FILE = Path("/etc/primus/defaults.yaml")
NO_SITE_FILE = "-"  # PRIMUS_CONF value that means: read no site file
_SITE_KEYS = {"etcd", "prefix", "home", "job", "inventory", "ssh", "server", "queues", "budget",
              "default_queue", "history", "accounts", "resources", "health", "notify",
              "trust", "topology"}
DEFAULT_MAX_UPLOAD = 64 << 20
"""The files of one submission through the API server, at most, in all (``server.max_upload``)."""
MAX_MAX_UPLOAD = 1 << 30
_SERVER_KEYS = {"tokens": "the path of the API server's tokens file",
                "max_upload": "the largest size of one submission's files in all (bytes, or "
                              "a size such as 256Mi), at most 1Gi",
                "address": "the API server's HOST:PORT, which the `primus` command goes through",
                "ca_cert": "the path of the CA certificate (PEM) that signed the API server's",
                "read_access": "who may read an application's logs, stacks and savepoints"}
_HISTORY_KEYS = {"url", "retention"}
_HISTORY_SCHEMES = ("sqlite:///", "postgresql://", "postgresql+psycopg://")
DEFAULT_RETENTION = 7 * 86_400
"""Seconds a finished application's keys stay in etcd after it is archived (7 days)."""


class ReadAccess(str, Enum):
    """The site's ``server.read_access``: who may read what an application keeps to itself
    through the API server and the UI (its logs, its hang stacks, its savepoints), as YARN's
    view ACLs. Its listing and status are every authenticated user's, whatever this says.

    OWNER: its owner and the admins. The default.
    EVERYONE: every authenticated user.
    """

    OWNER = "owner"
    EVERYONE = "everyone"


_ETCD_KEYS = {"endpoints", "ca_cert", "cert", "key", "user", "password_file", "request_timeout",
              "server_name"}
_SSH_KEYS = {"known_hosts": str, "strict_host_key_checking": str, "connect_timeout": int,
             "max_parallel": int, "retries": int, "multiplex": bool, "control_persist": int}


def app_dir(home: str | PurePosixPath, app_id: str) -> PurePosixPath:
    """The application's directory under a ``PRIMUS_HOME`` (this host's, or another host's):
    logs, copied files, the trainer's working directory. Defined here, below both the executor,
    which finds its own with it, and the launchers' ``launcher/layout.py``."""
    return PurePosixPath(home) / "apps" / app_id


@dataclass(frozen=True)
class Settings:
    """Resolved site settings. ``etcd`` is ``None`` when the embedded etcd is to be used."""

    home: Path
    prefix: str = "/primus"
    etcd: EtcdConfig | None = None
    job_defaults: Mapping[str, Any] = field(default_factory=dict)
    source: Path | None = None
    inventory: str | None = None
    ssh: SshOptions = field(default_factory=SshOptions)
    server_tokens: str | None = None
    """The API server's tokens file (``server.tokens``; ``primus server run --tokens`` wins)."""
    server_address: str | None = None
    """The API server the ``primus`` command goes through (``server.address``;
    ``--server``/``$PRIMUS_SERVER`` win); ``None``: the command reaches etcd itself."""
    server_ca_cert: str | None = None
    """The CA certificate that signed that server's (``server.ca_cert``)."""
    server_max_upload: int = DEFAULT_MAX_UPLOAD
    """Bytes the files of one submission through the API server may hold in all
    (``server.max_upload``): the server refuses more, and the command sends no more."""
    server_read_access: ReadAccess = ReadAccess.OWNER
    """Who may read an application's logs, stacks and savepoints through the API server
    (``server.read_access``); read by the server alone, so not passed to children."""
    queues: QueuesConfig = field(default_factory=QueuesConfig)
    """The admission queues (``queues:`` and ``default_queue:``); not passed to children."""
    history_url: str | None = field(default=None, repr=False)  # it may hold a password
    """The history database (``history.url``); ``None``: the SQLite file
    :attr:`default_history_file`. Not passed to children."""
    history_retention: float = DEFAULT_RETENTION
    """Seconds a finished application's keys stay in etcd (``history.retention``)."""
    accounts: AccountPolicy | None = None
    """The site's ``accounts:``: applications run as their owners' accounts, each with an etcd
    identity of its own (``primus.config.accounts``); ``None``: under this process's account,
    with its credentials. Not passed to children."""
    resources: ResourcePolicy = field(default_factory=ResourcePolicy)
    """The site's ``resources:``: how trainers are held to their reservations
    (``primus.config.resources``)."""
    health: HealthPolicy = field(default_factory=HealthPolicy)
    """The site's ``health:``: how the admission leader checks hosts
    (``primus.config.health``)."""
    notify: NotifyPolicy = field(default_factory=NotifyPolicy)
    """The site's ``notify:``: the webhooks the server posts to (``primus.config.notify``);
    read by the server alone, so not passed to children."""
    trust: Trust = Trust.OWNER_ACCOUNTS
    """The site's ``trust:``: whether an API server without ``accounts:`` may serve several
    users as its own account (``one-account``); read by the server alone."""
    domain_levels: tuple[str, ...] = ()
    """The site's ``topology.levels``: the levels of host domains, coarse to fine (``spine``,
    ``rack``), which a job's ``placement_domain`` names and the inventory's
    ``primus_domains`` place hosts in; checked where jobs are submitted."""

    @property
    def default_history_file(self) -> Path:
        """The SQLite file of the history when ``history.url`` is not set."""
        return self.home / "history" / "history.db"

    def with_endpoint(self, endpoint: str) -> Settings:
        """These settings pinned to one etcd endpoint (what children of this process use);
        unchanged when the connection spans every member (``etcd.server_name``)."""
        if self.etcd is not None and self.etcd.server_name:
            return self
        base = self.etcd or EtcdConfig(endpoints=())
        return dataclasses.replace(self, etcd=dataclasses.replace(base, endpoints=(endpoint,)))

    def to_env(self) -> dict[str, str]:
        """Environment variables that make a child process resolve the same settings, with
        :meth:`to_secrets`: everything but the password, which its environment must not hold
        (a process of the same account could read it there)."""
        # Children may run on other hosts, where the site file may not exist: everything they
        # need travels in the environment, and they read no site file (PRIMUS_CONF=-).
        env = {"PRIMUS_HOME": str(self.home), "PRIMUS_PREFIX": self.prefix,
               "PRIMUS_CONF": NO_SITE_FILE,
               "PRIMUS_SSH_OPTIONS": json.dumps(dataclasses.asdict(self.ssh)),
               "PRIMUS_RESOURCES": self.resources.to_json(),
               "PRIMUS_HEALTH": self.health.to_json()}
        if self.etcd is not None:
            env["PRIMUS_ETCD"] = ",".join(self.etcd.endpoints)
            for name, value in (("CACERT", self.etcd.ca_cert), ("CERT", self.etcd.cert),
                                ("KEY", self.etcd.key), ("USER", self.etcd.user),
                                ("SERVER_NAME", self.etcd.server_name)):
                if value:
                    env[f"PRIMUS_ETCD_{name}"] = value
            env["PRIMUS_ETCD_REQUEST_TIMEOUT"] = str(self.etcd.request_timeout)
        return env

    def to_secrets(self) -> dict[str, str]:
        """The rest of :meth:`to_env`, which a child gets on a descriptor, never in its
        environment or on a command line (:mod:`primus.process_secrets`): the etcd password,
        as the variable :func:`load_settings` reads it from."""
        if self.etcd is None or not self.etcd.password:
            return {}
        return {"PRIMUS_ETCD_PASSWORD": self.etcd.password}


def _site_error(path: Path, field_path: str, value: object, allowed: str) -> SpecError:
    return SpecError(SpecProblem(str(path), field_path, value, allowed))


def _endpoints(value: str | list[str]) -> list[str]:
    """Endpoints from a comma-separated string or a list."""
    items = value.split(",") if isinstance(value, str) else value
    return [item.strip() for item in items if item.strip()]


def _check(path: Path, field_path: str, value: object, ok: bool, allowed: str) -> None:
    if not ok:
        raise _site_error(path, field_path, value, allowed)


def _read_site_file(path: Path) -> dict[str, Any]:
    """Read and check the site defaults file; every error names the file and the key."""
    data = read_config_file(str(path)) or {}
    _check(path, "", type(data).__name__, isinstance(data, dict), "must be a mapping")
    for key in data:
        _check(path, str(key), data[key], key in _SITE_KEYS,
               "unknown key; allowed: " + ", ".join(sorted(_SITE_KEYS)))
    for key in ("prefix", "home"):
        if key in data:
            _check(path, key, data[key], isinstance(data[key], str), "must be a string")
    if "prefix" in data:
        _check(path, "prefix", data["prefix"], data["prefix"].startswith("/"),
               "must start with /")
    _check(path, "job", data.get("job"), isinstance(data.get("job") or {}, dict),
           "must be a mapping of job-spec fields")
    if "inventory" in data:
        _check(path, "inventory", data["inventory"], isinstance(data["inventory"], str),
               "must be the path of an inventory file")
    ssh = data.get("ssh") or {}
    _check(path, "ssh", ssh, isinstance(ssh, dict), "must be a mapping")
    for key, value in ssh.items():
        _check(path, f"ssh.{key}", value, key in _SSH_KEYS,
               "unknown key; allowed: " + ", ".join(sorted(_SSH_KEYS)))
        if _SSH_KEYS[key] is str:
            _check(path, f"ssh.{key}", value, isinstance(value, str), "must be a string")
        elif _SSH_KEYS[key] is bool:
            _check(path, f"ssh.{key}", value, isinstance(value, bool), "must be true or false")
        else:
            _check(path, f"ssh.{key}", value, isinstance(value, int) and
                   not isinstance(value, bool) and value >= 1, "must be an integer >= 1")
    if "strict_host_key_checking" in ssh:
        _check(path, "ssh.strict_host_key_checking", ssh["strict_host_key_checking"],
               ssh["strict_host_key_checking"] in HOST_KEY_CHECKING,
               "must be one of " + ", ".join(HOST_KEY_CHECKING))
    server = data.get("server") or {}
    _check(path, "server", server, isinstance(server, dict), "must be a mapping")
    for key, value in server.items():
        _check(path, f"server.{key}", value, key in _SERVER_KEYS,
               "unknown key; allowed: " + ", ".join(sorted(_SERVER_KEYS)))
        if key == "max_upload":
            _check(path, f"server.{key}", value, _upload_limit(value) is not None,
                   f"must be {_SERVER_KEYS[key]}")
            continue
        if key == "read_access":
            _check_choice(path, f"server.{key}", value, ReadAccess)
            continue
        _check(path, f"server.{key}", value, isinstance(value, str) and value != "",
               f"must be {_SERVER_KEYS[key]}")
    if "trust" in data:
        _check_choice(path, "trust", data["trust"], Trust)
        _check(path, "trust", data["trust"], data["trust"] != Trust.ONE_ACCOUNT.value
               or "accounts" not in data,
               "must not be one-account beside accounts: (applications run as their owners' "
               "accounts there); remove one of the two")
    _check_history(path, data.get("history") or {})
    etcd = data.get("etcd") or {}
    _check(path, "etcd", etcd, isinstance(etcd, dict), "must be a mapping")
    for key, value in etcd.items():
        where = f"etcd.{key}"
        _check(path, where, value, key in _ETCD_KEYS,
               "unknown key; allowed: " + ", ".join(sorted(_ETCD_KEYS)))
        if key == "endpoints":
            _check(path, where, value, isinstance(value, str) or (
                isinstance(value, list) and all(isinstance(v, str) for v in value)),
                "must be a list of host:port strings or one comma-separated string")
        elif key == "request_timeout":
            _check(path, where, value, _is_timeout(value), _TIMEOUT_ALLOWED)
        else:
            _check(path, where, value, isinstance(value, str), "must be a string")
    return data


def _check_choice(path: Path, field_path: str, value: object, choices: type[Enum]) -> None:
    """Check that ``value`` is one of the values of the str enum ``choices``."""
    allowed = [choice.value for choice in choices]
    _check(path, field_path, value, value in allowed, "must be one of " + ", ".join(allowed))


def _check_history(path: Path, history: Any) -> None:
    """Check the site file's ``history:`` (``url``, ``retention``)."""
    _check(path, "history", history, isinstance(history, dict),
           "must be a mapping with " + ", ".join(sorted(_HISTORY_KEYS)))
    for key, value in history.items():
        _check(path, f"history.{key}", value, key in _HISTORY_KEYS,
               "unknown key; allowed: " + ", ".join(sorted(_HISTORY_KEYS)))
    if "url" in history:
        url = history["url"]
        _check(path, "history.url", _without_password(url),
               isinstance(url, str) and url.startswith(_HISTORY_SCHEMES) and "\0" not in url,
               "must be a database URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB")
    if "retention" in history:
        _retention(path, history["retention"])


def _without_password(url: object) -> object:
    """``url`` as an error may show it: a password in it replaced by ``***``."""
    if not isinstance(url, str):
        return url
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _retention(path: Path, value: object) -> int:
    """``history.retention`` in seconds (at least one)."""
    try:
        seconds = LONG_DURATION.parse(value)
    except ValueError as exc:
        raise _site_error(path, "history.retention", value, str(exc)) from None
    _check(path, "history.retention", value, seconds >= 1, "must be at least 1 second")
    return seconds


def _read_queues(path: Path, data: Mapping[str, Any]) -> QueuesConfig:
    """The queues of the site file (``queues:``, ``default_queue:``): the built-in ``default``
    queue alone when it defines none. Every error names the file and the field."""
    queues = data.get("queues") or {}
    _check(path, "queues", queues, isinstance(queues, dict),
           "must be a mapping of queue names to queues")
    specs = {}
    for name, entry in queues.items():
        where = f"queues.{name}"
        _check(path, where, name, isinstance(name, str) and
               re.fullmatch(QUEUE_NAME_PATTERN, name) is not None,
               f"a queue name must match {QUEUE_NAME_PATTERN}")
        entry = entry or {}
        _check(path, where, entry, isinstance(entry, dict),
               "must be a mapping with " + ", ".join(QueueSpec.model_fields))
        for key, value in entry.items():
            _check(path, f"{where}.{key}", value, key in QueueSpec.model_fields,
                   "unknown key; allowed: " + ", ".join(QueueSpec.model_fields))
            if key == "priority":
                _check_number(path, f"{where}.{key}", value, QueueSpec, key)
                continue
            _check_bounds(path, f"{where}.{key}", value, Budget if key == "budget" else Quota)
        specs[name] = QueueSpec.model_validate({k: v for k, v in entry.items() if v is not None})
    default = data.get("default_queue", DEFAULT_QUEUE)
    defined = specs or {DEFAULT_QUEUE: QueueSpec()}
    _check(path, "default_queue", default, isinstance(default, str) and default in defined,
           ("must name a queue" if "default_queue" in data else
            f"queues defines no queue {DEFAULT_QUEUE!r}: set default_queue to one")
           + "; queues: " + ", ".join(sorted(defined)))
    budget = data.get("budget")
    if budget is not None:
        _check_bounds(path, "budget", budget, Budget)
    return QueuesConfig(queues=defined, default_queue=default, budget=Budget.model_validate(
        {**DEFAULT_BUDGET.model_dump(), **{k: v for k, v in (budget or {}).items()
                                          if v is not None}}))


def _check_bounds(path: Path, where: str, value: object, model: type[Quota] | type[Budget]
                  ) -> None:
    """A mapping of ``model``'s fields to numbers within their bounds (or null)."""
    bounds = value or {}
    _check(path, where, bounds, isinstance(bounds, dict),
           "must be a mapping with " + ", ".join(model.model_fields))
    assert isinstance(bounds, dict)  # checked just above
    for name, limit in bounds.items():
        _check(path, f"{where}.{name}", limit, name in model.model_fields,
               "unknown key; allowed: " + ", ".join(model.model_fields))
        if limit is not None:
            _check_number(path, f"{where}.{name}", limit, model, name)


def _check_number(path: Path, field_path: str, value: object, model: type[BaseModel],
                  name: str) -> None:
    """Check ``value`` against the type and bounds of ``model``'s field ``name``."""
    info = model.model_fields[name]
    whole = int in (info.annotation, *get_args(info.annotation))
    low = next(c.ge for c in info.metadata if hasattr(c, "ge"))
    high = next(c.le for c in info.metadata if hasattr(c, "le"))
    kind = isinstance(value, int) if whole else isinstance(value, int | float)
    _check(path, field_path, value, kind and not isinstance(value, bool) and
           low <= value <= high,  # NaN fails both comparisons
           f"must be {'an integer' if whole else 'a number'} >= {int(low):,} and <= {int(high):,}")


MAX_REQUEST_TIMEOUT = 3600
"""Longest etcd request timeout, in seconds."""
_TIMEOUT_ALLOWED = f"must be a number of seconds > 0 and <= {MAX_REQUEST_TIMEOUT}"
MAX_PASSWORD_BYTES = 64 << 10
"""Largest etcd password file."""


def _is_timeout(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and 0 < value <= MAX_REQUEST_TIMEOUT)  # NaN fails both comparisons


def _number(text: str) -> float:
    """``text`` as a float; NaN when it is none (which no check accepts)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _read_password(source: Path, path: str) -> str:
    """The password in the file ``path``, read within bounds; errors name ``source``'s key."""
    def refuse(why: str) -> SpecError:
        return _site_error(source, "etcd.password_file", path, f"must be a readable file ({why})")

    if "\0" in path:
        raise refuse("a path holds no NUL character")
    try:
        return read_bounded(path, MAX_PASSWORD_BYTES).decode().strip()
    except OSError as exc:
        raise refuse(str(exc.strerror)) from exc
    except InputError as exc:
        raise refuse(f"it {exc}") from exc
    except UnicodeDecodeError as exc:
        raise refuse("it is not UTF-8 text") from exc


def load_settings(etcd_endpoints: str | None = None, env: Mapping[str, str] | None = None
                  ) -> Settings:
    """Resolve settings from the site file, the environment and an ``--etcd`` option.

    Raises:
        SpecError: the site defaults file is unreadable or malformed.
    """
    env = os.environ if env is None else env
    conf = env.get("PRIMUS_CONF")
    if conf == NO_SITE_FILE:
        source = None
    elif conf:
        source = Path(conf)
    else:
        source = DEFAULT_SITE_FILE if DEFAULT_SITE_FILE.exists() else None
    data = _read_site_file(source) if source is not None else {}
    etcd = dict(data.get("etcd") or {})
    endpoints_text = etcd_endpoints or env.get("PRIMUS_ETCD")
    endpoints = _endpoints(endpoints_text or etcd.get("endpoints") or [])
    password = env.get("PRIMUS_ETCD_PASSWORD")
    if password is None and etcd.get("password_file"):
        password = _read_password(source or Path("?"), etcd["password_file"])
    timeout = etcd.get("request_timeout", 5.0)
    if env.get("PRIMUS_ETCD_REQUEST_TIMEOUT"):
        timeout = _number(env["PRIMUS_ETCD_REQUEST_TIMEOUT"])
        _check(Path("$PRIMUS_ETCD_REQUEST_TIMEOUT"), "", env["PRIMUS_ETCD_REQUEST_TIMEOUT"],
               _is_timeout(timeout), _TIMEOUT_ALLOWED)
    config = None
    if endpoints:
        config = EtcdConfig(
            endpoints=tuple(endpoints),
            ca_cert=env.get("PRIMUS_ETCD_CACERT") or etcd.get("ca_cert"),
            cert=env.get("PRIMUS_ETCD_CERT") or etcd.get("cert"),
            key=env.get("PRIMUS_ETCD_KEY") or etcd.get("key"),
            user=env.get("PRIMUS_ETCD_USER") or etcd.get("user"),
            password=password,
            request_timeout=float(timeout),
            server_name=env.get("PRIMUS_ETCD_SERVER_NAME") or etcd.get("server_name"),
        )
    home = Path(env.get("PRIMUS_HOME") or data.get("home") or Path.home() / ".primus")
    prefix = (env.get("PRIMUS_PREFIX") or data.get("prefix") or "/primus").rstrip("/")
    ssh = {**json.loads(env.get("PRIMUS_SSH_OPTIONS") or "{}"), **(data.get("ssh") or {})}
    if env.get("PRIMUS_SSH_KNOWN_HOSTS"):
        ssh["known_hosts"] = env["PRIMUS_SSH_KNOWN_HOSTS"]
    if env.get("PRIMUS_SSH_STRICT_HOST_KEY_CHECKING"):
        checking = env["PRIMUS_SSH_STRICT_HOST_KEY_CHECKING"]
        _check(Path("$PRIMUS_SSH_STRICT_HOST_KEY_CHECKING"), "", checking,
               checking in HOST_KEY_CHECKING, "must be one of " + ", ".join(HOST_KEY_CHECKING))
        ssh["strict_host_key_checking"] = checking
    return Settings(home=home.expanduser().absolute(), prefix=prefix, etcd=config,
                    job_defaults=data.get("job") or {}, source=source,
                    inventory=env.get("PRIMUS_INVENTORY") or data.get("inventory"),
                    ssh=SshOptions(**ssh),
                    server_tokens=(data.get("server") or {}).get("tokens"),
                    server_address=(data.get("server") or {}).get("address"),
                    server_ca_cert=(data.get("server") or {}).get("ca_cert"),
                    server_max_upload=_upload_limit((data.get("server") or {}).get(
                        "max_upload", DEFAULT_MAX_UPLOAD)) or DEFAULT_MAX_UPLOAD,
                    server_read_access=ReadAccess((data.get("server") or {}).get(
                        "read_access", ReadAccess.OWNER)),
                    queues=_read_queues(source or Path("?"), data),
                    history_url=(data.get("history") or {}).get("url"),
                    history_retention=_retention(source or Path("?"), (
                        data.get("history") or {}).get("retention", DEFAULT_RETENTION)),
                    accounts=_accounts(source or Path("?"), data),
                    resources=_policy(source, data, env, "resources", ResourcePolicy,
                                      read_resources),
                    health=_policy(source, data, env, "health", HealthPolicy, read_health),
                    notify=_notify(source or Path("?"), data),
                    trust=Trust(data.get("trust", Trust.OWNER_ACCOUNTS)),
                    domain_levels=_domain_levels(source or Path("?"), data))


def _domain_levels(path: Path, data: Mapping[str, Any]) -> tuple[str, ...]:
    """The site file's ``topology.levels`` (none: no level)."""
    topology = data.get("topology")
    if topology is None:
        return ()
    allowed = ("a list of distinct level names, coarse to fine, each 1 to 32 lowercase "
               "letters, digits or '_', starting with a letter (spine, rack, nvlink_clique)")
    if not isinstance(topology, Mapping) or set(topology) - {"levels"}:
        raise _site_error(path, "topology", topology, "must be a mapping with levels: " +
                          allowed)
    levels = topology.get("levels") or []
    if not isinstance(levels, list) or len(set(map(str, levels))) != len(levels) or not all(
            isinstance(level, str) and re.fullmatch(DOMAIN_LEVEL_PATTERN, level)
            for level in levels):
        raise _site_error(path, "topology.levels", levels, "must be " + allowed)
    return tuple(levels)


def _notify(path: Path, data: Mapping[str, Any]) -> NotifyPolicy:
    """The site file's ``notify:`` (none: no site webhook)."""
    def refuse(where: str, value: object, allowed: str) -> NoReturn:
        raise _site_error(path, where, value, allowed)

    return read_notify(data["notify"] or {}, refuse) if "notify" in data else NotifyPolicy()


def _accounts(path: Path, data: Mapping[str, Any]) -> AccountPolicy | None:
    """The site file's ``accounts:``, or ``None`` when it has none."""
    if "accounts" not in data:
        return None

    def refuse(where: str, value: object, allowed: str) -> NoReturn:
        raise _site_error(path, where, value, allowed)

    return read_policy(data["accounts"] or {}, refuse)


_Policy = TypeVar("_Policy", ResourcePolicy, HealthPolicy)


def _policy(source: Path | None, data: Mapping[str, Any], env: Mapping[str, str], key: str,
            model: type[_Policy],
            read: Callable[[Any, Callable[[str, object, str], NoReturn]], _Policy]) -> _Policy:
    """The site file's section ``key`` (``resources``, ``health``) as its policy; a child's
    comes in ``$PRIMUS_<KEY>`` (:meth:`Settings.to_env`)."""
    passed = env.get(f"PRIMUS_{key.upper()}")
    if passed:
        return model.from_json(passed)

    def refuse(where: str, value: object, allowed: str) -> NoReturn:
        raise _site_error(source or Path("?"), where, value, allowed)

    found = data.get(key)
    return model() if found is None else read(found, refuse)


def _upload_limit(value: object) -> int | None:
    """``server.max_upload`` in bytes; ``None`` when it is no size from 1 byte to 1 GiB."""
    try:
        limit = BYTES.parse(value)
    except ValueError:
        return None
    return limit if 1 <= limit <= MAX_MAX_UPLOAD else None
