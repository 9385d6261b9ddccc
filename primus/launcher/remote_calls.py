"""What both launchers send to :mod:`primus.launcher.remote` (and, through it, to the host
agent), and how they read its answers: the local launcher calls it in this process, the SSH
launcher runs it on the host."""

from __future__ import annotations

import logging
from typing import Any

from primus.config.inventory import Host
from primus.launcher.api import LaunchError, LaunchRequest
from primus.state.records import ProcessRef

logger = logging.getLogger(__name__)


def spawn_payload(request: LaunchRequest) -> dict[str, Any]:
    """A request as the host agent and ``remote spawn`` take it."""
    return {"argv": list(request.argv), "env": dict(request.env),
            "secrets": dict(request.secrets), "cwd": request.cwd, "log_file": request.log_file}


def wave_results(host: Host, answer: dict[str, Any], count: int
                 ) -> list[ProcessRef | LaunchError]:
    """``remote launch``'s answer as one result per request."""
    if "error" in answer:
        return [LaunchError(f"{host.name}: {answer['error']}")] * count
    if answer.get("cold"):
        logger.warning("%s: executors start cold: %s", host.name, answer["cold"])
    return [LaunchError(f"{host.name}: {item['error']}") if "error" in item else
            ProcessRef(host=host.name, pid=int(item["pid"]), start_time=float(item["start_time"]))
            for item in answer["processes"]]
