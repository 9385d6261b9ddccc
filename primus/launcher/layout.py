"""Where an application's files live on a host, and the environment of its processes there.

The application's directory under a ``PRIMUS_HOME`` is :func:`primus.config.site.app_dir`,
which the executor finds its own with."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

from primus.config.inventory import Host
from primus.config.site import Settings, app_dir
from primus.config.spec import JobSpec

_AM_LOG = re.compile(r"am(-[1-9][0-9]*)?\.log")


def host_home(host: Host, settings: Settings) -> str:
    """``PRIMUS_HOME`` on the host: its inventory ``primus_home``, else this process's home."""
    return host.home or str(settings.home)


def host_app_dir(host: Host, settings: Settings, app_id: str) -> PurePosixPath:
    """The application's directory on ``host``."""
    return app_dir(host_home(host, settings), app_id)


def am_log_path(host: Host, settings: Settings, app_id: str, number: int = 0) -> PurePosixPath:
    """The log of AM candidate ``number`` on ``host``: ``am.log`` for the first, the others
    ``am-<number>.log``."""
    return host_app_dir(host, settings, app_id) / ("am.log" if number == 0 else
                                                  f"am-{number}.log")


def executor_log_path(host: Host, settings: Settings, app_id: str, role: str, index: int,
                      executor_log: bool = False) -> PurePosixPath:
    """Where executor ``role``-``index`` on ``host`` writes its trainer's output, or with
    ``executor_log`` its own log. The server reads logs at these paths, which it builds
    itself, never at a path an application's key names."""
    name = f"{role}-{index}.executor.log" if executor_log else f"{role}-{index}.log"
    return host_app_dir(host, settings, app_id) / name


def claimed_am_log(claimed: str, hosts: Sequence[Host], settings: Settings, app_id: str
                   ) -> tuple[Host, PurePosixPath] | None:
    """The host and the path of the AM log ``claimed`` (the leader's record, which its AM
    writes), if it is one of the paths :func:`am_log_path` gives on one of ``hosts``; else
    ``None``: the claim is not believed."""
    path = PurePosixPath(claimed)
    if not _AM_LOG.fullmatch(path.name):
        return None
    number = int(path.stem[3:] or 0)
    for host in hosts:
        if path == am_log_path(host, settings, app_id, number):
            return host, path
    return None


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
