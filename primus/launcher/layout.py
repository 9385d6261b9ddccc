"""Where an application's files live on a host, and the environment of its processes there."""

from __future__ import annotations

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


def host_env(host: Host, settings: Settings) -> dict[str, str]:
    """The environment of a Primus process of the application on ``host``: it resolves these
    settings there. It holds no secret (:func:`app_secrets`)."""
    return {**settings.to_env(), "PRIMUS_HOME": host_home(host, settings)}


def app_secrets(settings: Settings, spec: JobSpec, given: Mapping[str, str]
                ) -> dict[str, str]:
    """The secrets of a Primus process of the application: the etcd password of these
    settings, and the values of the job's ``secret_env`` found in ``given`` (an API request's,
    the submitting command's environment, or what an AM itself received).

    They go from process to process on stdin or an inherited descriptor
    (``LaunchRequest.secrets``), never through etcd, a command line or an environment.
    """
    carried = {name: given[name] for name in spec.secret_env if name in given}
    return {**carried, **settings.to_secrets()}
