"""Where an application's files live on a host, and the environment of its processes there."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePosixPath

from primus.config.inventory import Host
from primus.config.site import Settings
from primus.config.spec import JobSpec


def host_home(host: Host, settings: Settings) -> str:
    """``PRIMUS_HOME`` on the host: its inventory ``primus_home``, else this process's home."""
    return host.home or str(settings.home)


def app_dir(home: str | PurePosixPath, app_id: str) -> PurePosixPath:
    """The application's directory under a ``PRIMUS_HOME``: logs, copied files, trainer cwd."""
    return PurePosixPath(home) / "apps" / app_id


def host_app_dir(host: Host, settings: Settings, app_id: str) -> PurePosixPath:
    """The application's directory on ``host``."""
    return app_dir(host_home(host, settings), app_id)


def agent_dir(host: Host, settings: Settings, app_id: str) -> PurePosixPath:
    """The directory of the application's host agent on ``host`` (its socket and lock): one
    per host, since the application's directory may be on a file system the hosts share (an
    owner's NFS home), where one host's agent must not take another's launches."""
    return host_app_dir(host, settings, app_id) / "hosts" / host.name


def host_env(host: Host, settings: Settings, spec: JobSpec,
             secrets: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a Primus process of the application on ``host``.

    It resolves these settings, and carries the job's ``secret_env`` from ``secrets`` (an API
    request's), else from this process's own environment: secrets go from process to
    process, never through etcd or a command line.
    """
    given = os.environ if secrets is None else secrets
    carried = {name: given[name] for name in spec.secret_env if name in given}
    return {**settings.to_env(), "PRIMUS_HOME": host_home(host, settings), **carried}
