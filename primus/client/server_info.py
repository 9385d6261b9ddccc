"""``primus server``'s contract: how it is told to listen and secure itself, and its errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from primus.errors import PrimusError

NO_SERVER = "-"
"""``--server -`` (or ``$PRIMUS_SERVER=-``): no API server, whatever the site defaults name;
the ``primus`` command reaches etcd itself."""


class ServerError(PrimusError):
    """The API server cannot start, or cannot be found or stopped."""


@dataclass(frozen=True)
class ServerTls:
    """The server's certificate and key, and the CA whose client certificates it requires
    (``None``: any client may connect; it authenticates the server only)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass(frozen=True)
class ServerInfo:
    """What a running server records in its state file (0600)."""

    pid: int
    address: str
    started: float
    tls: bool
    client_auth: bool
    ui_url: str = ""
    """Where the web UI is served; empty when it is not."""
    metrics_url: str = ""
    """Where ``--metrics-listen`` serves the metrics; empty when it does not (they are then
    at the UI's ``/metrics``)."""
    site_notice: str = ""
    """What the server has to say of its site file: a change that waits for its restart, or
    a changed file that does not read (:mod:`primus.server.site_reload`); empty when none."""
