"""Site settings: where etcd is, where Primus keeps its files, and site-wide job defaults.

Sources, later wins: built-in defaults < the site defaults file (``$PRIMUS_CONF``, else
``/etc/primus/defaults.yaml`` when it exists) < environment variables < command-line options.
Child processes (AM, executors) receive the resolved settings through :meth:`Settings.to_env`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from primus.config.loader import SpecError, SpecProblem
from primus.store.api import EtcdConfig

DEFAULT_SITE_FILE = Path("/etc/primus/defaults.yaml")
_SITE_KEYS = {"etcd", "prefix", "home", "job"}
_ETCD_KEYS = {"endpoints", "ca_cert", "cert", "key", "user", "password_file", "request_timeout"}


@dataclass(frozen=True)
class Settings:
    """Resolved site settings. ``etcd`` is ``None`` when the embedded etcd is to be used."""

    home: Path
    prefix: str = "/primus"
    etcd: EtcdConfig | None = None
    job_defaults: Mapping[str, Any] = field(default_factory=dict)
    source: Path | None = None

    def with_endpoint(self, endpoint: str) -> Settings:
        """These settings pinned to one etcd endpoint (what children of this process use)."""
        base = self.etcd or EtcdConfig(endpoints=())
        return Settings(self.home, self.prefix,
                        EtcdConfig(endpoints=(endpoint,), ca_cert=base.ca_cert, cert=base.cert,
                                   key=base.key, user=base.user, password=base.password,
                                   request_timeout=base.request_timeout),
                        self.job_defaults, self.source)

    def to_env(self) -> dict[str, str]:
        """Environment variables that make a child process resolve the same settings.

        The password travels in the environment, never on a command line.
        """
        env = {"PRIMUS_HOME": str(self.home), "PRIMUS_PREFIX": self.prefix}
        if self.source is not None:
            env["PRIMUS_CONF"] = str(self.source)
        if self.etcd is not None:
            env["PRIMUS_ETCD"] = ",".join(self.etcd.endpoints)
            for name, value in (("CACERT", self.etcd.ca_cert), ("CERT", self.etcd.cert),
                                ("KEY", self.etcd.key), ("USER", self.etcd.user),
                                ("PASSWORD", self.etcd.password)):
                if value:
                    env[f"PRIMUS_ETCD_{name}"] = value
        return env


def _site_error(path: Path, field_path: str, value: object, allowed: str) -> SpecError:
    return SpecError(SpecProblem(str(path), field_path, value, allowed))


def _read_site_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise _site_error(path, "", str(exc), "a readable YAML file") from exc
    except yaml.YAMLError as exc:
        raise _site_error(path, "", str(exc).splitlines()[0], "valid YAML") from exc
    if not isinstance(data, dict):
        raise _site_error(path, "", type(data).__name__, "a mapping")
    unknown = set(data) - _SITE_KEYS
    if unknown:
        raise _site_error(path, sorted(unknown)[0], data[sorted(unknown)[0]],
                          "unknown key; allowed: " + ", ".join(sorted(_SITE_KEYS)))
    etcd = data.get("etcd") or {}
    if not isinstance(etcd, dict):
        raise _site_error(path, "etcd", etcd, "a mapping")
    if set(etcd) - _ETCD_KEYS:
        bad = sorted(set(etcd) - _ETCD_KEYS)[0]
        raise _site_error(path, f"etcd.{bad}", etcd[bad],
                          "unknown key; allowed: " + ", ".join(sorted(_ETCD_KEYS)))
    if not isinstance(data.get("job") or {}, dict):
        raise _site_error(path, "job", data["job"], "a mapping of job-spec fields")
    return data


def load_settings(etcd_endpoints: str | None = None, env: Mapping[str, str] | None = None
                  ) -> Settings:
    """Resolve settings from the site file, the environment and an ``--etcd`` option.

    Raises:
        SpecError: the site defaults file is unreadable or malformed.
    """
    env = os.environ if env is None else env
    source = Path(env["PRIMUS_CONF"]) if env.get("PRIMUS_CONF") else (
        DEFAULT_SITE_FILE if DEFAULT_SITE_FILE.exists() else None)
    data = _read_site_file(source) if source is not None else {}
    etcd = dict(data.get("etcd") or {})
    endpoints_text = etcd_endpoints or env.get("PRIMUS_ETCD")
    endpoints = ([e.strip() for e in endpoints_text.split(",") if e.strip()]
                 if endpoints_text else list(etcd.get("endpoints") or []))
    password = env.get("PRIMUS_ETCD_PASSWORD")
    if password is None and etcd.get("password_file"):
        try:
            password = Path(etcd["password_file"]).read_text().strip()
        except OSError as exc:
            raise _site_error(source or Path("?"), "etcd.password_file", etcd["password_file"],
                              f"a readable file ({exc.strerror})") from exc
    config = None
    if endpoints:
        config = EtcdConfig(
            endpoints=tuple(endpoints),
            ca_cert=env.get("PRIMUS_ETCD_CACERT") or etcd.get("ca_cert"),
            cert=env.get("PRIMUS_ETCD_CERT") or etcd.get("cert"),
            key=env.get("PRIMUS_ETCD_KEY") or etcd.get("key"),
            user=env.get("PRIMUS_ETCD_USER") or etcd.get("user"),
            password=password,
            request_timeout=float(etcd.get("request_timeout", 5.0)),
        )
    home = Path(env.get("PRIMUS_HOME") or data.get("home") or Path.home() / ".primus")
    prefix = (env.get("PRIMUS_PREFIX") or data.get("prefix") or "/primus").rstrip("/")
    return Settings(home=home.expanduser().absolute(), prefix=prefix, etcd=config,
                    job_defaults=data.get("job") or {}, source=source)
