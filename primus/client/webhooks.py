"""The keys webhook deliveries are signed with (docs/observability.md, "Keys"): shared by the
server that sends them (``primus/server/notify.py``) and the service that gives an
application's owner its key (``primus notify-key``)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from primus.config.site import Settings


def signature(key: bytes, body: bytes) -> str:
    """The ``X-Primus-Signature-256`` header of ``body`` signed with ``key``."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def app_key(job_key: bytes, app_id: str) -> bytes:
    """The key an application's own webhooks are signed with (hex text, as the owner gets it
    from ``primus notify-key``)."""
    return hmac.new(job_key, f"primus-webhook:{app_id}".encode(), hashlib.sha256
                    ).hexdigest().encode()


def job_key_file(settings: Settings) -> Path:
    """Where the key the jobs' webhook keys derive from is kept."""
    configured = settings.notify.job_key_file
    return Path(configured) if configured else settings.home / "server" / "webhook-key"


def ensure_job_key(settings: Settings) -> bytes:
    """The jobs' webhook key; made (0600) when it does not exist and none is configured."""
    path = job_key_file(settings)
    if not path.exists() and settings.notify.job_key_file is None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_hex(32).encode())
    return path.read_bytes().strip()
