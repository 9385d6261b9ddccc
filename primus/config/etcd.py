"""How to reach etcd: the settings of a connection, as the site settings resolve them and the
store opens them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EtcdConfig:
    """How to reach etcd: endpoints (``host:port`` or ``http(s)://host:port``), TLS, auth.

    ``password`` is held in memory only; it is read from a file or the environment by the
    caller and never logged (``repr`` hides it).
    """

    endpoints: tuple[str, ...]
    ca_cert: str | None = None
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password: str | None = None
    request_timeout: float = 5.0
    server_name: str | None = None
    """A name every member's TLS certificate carries. With it, one connection spans every
    endpoint and moves to another member when the one it uses fails (each member's
    certificate is checked against this name); without it, the first endpoint that answers
    is used alone."""

    def __repr__(self) -> str:
        return (f"EtcdConfig(endpoints={self.endpoints!r}, tls={self.tls}, "
                f"user={self.user!r})")

    @property
    def tls(self) -> bool:
        """Whether the connection is TLS (a CA, a client cert, or an https endpoint)."""
        return bool(self.ca_cert or self.cert or
                    any(e.startswith("https://") for e in self.endpoints))
