"""The client layer: what the ``primus`` command and the API server do with applications and
hosts, implemented once. It reads and writes the application's desired state in etcd and starts
AM processes; it never runs or imports the AM itself.

Also :class:`Client` (``primus.client.Client``), the Primus API from Python: it is defined in
``primus/api/client.py``, since only ``primus/api/`` imports the generated code, and loaded on
first use, so that the command line does not load gRPC.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Client"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from primus.api.client import Client  # noqa: PLC0415 - loads gRPC on first use

        return Client
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
