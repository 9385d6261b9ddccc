"""Webhooks (the site file's ``notify:``, and a job's ``notify:``; docs/observability.md,
"Notifications").

The server posts a JSON body to each webhook for the events it asks for (:data:`EVENTS`),
signed with HMAC-SHA256: a site webhook with the key in its ``secret_file``, a job's with a
key of its application's own (derived from ``job_key_file``; its owner gets it with
``primus notify-key``). ``job_urls`` (prefixes), when set, are the only places a job's
webhooks may point to. Deliveries are retried ``attempts`` times with a backoff that doubles
from ``backoff``; each waits ``timeout`` at most.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from primus.config.spec import LONG_DURATION, NOTIFY_EVENTS, url_problem

_KEYS = {"webhooks": "a list of {url, secret_file, events}",
         "job_key_file": "the file of the key the jobs' own webhooks are signed with (a key "
                         "derived from it per application)",
         "job_urls": "a list of URL prefixes: the only places a job's webhooks may point to",
         "admission_wait": "a duration (10m): an application waiting longer for admission is "
                           "notified (admission_wait)",
         "timeout": "a duration from 1s to 60s: how long one delivery may take",
         "attempts": "how many times a delivery is tried (1 to 100)",
         "backoff": "a duration from 1s: the first wait before trying again (it doubles, up "
                    "to 5 minutes)"}
_HOOK_KEYS = {"url": "an http:// or https:// URL", "secret_file": "the file of its HMAC key",
              "events": "a list of " + ", ".join(NOTIFY_EVENTS)}


@dataclass(frozen=True)
class SiteWebhook:
    url: str
    secret_file: str
    events: tuple[str, ...] = NOTIFY_EVENTS


@dataclass(frozen=True)
class NotifyPolicy:
    """The site's ``notify:``."""

    webhooks: tuple[SiteWebhook, ...] = ()
    job_key_file: str | None = None
    """``None``: ``$PRIMUS_HOME/server/webhook-key``, made by the server."""
    job_urls: tuple[str, ...] = ()
    admission_wait: float = 600.0
    timeout: float = 10.0
    attempts: int = 8
    backoff: float = 2.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def job_url_problem(self, url: str) -> str | None:
        """Why a job may not send to ``url``; ``None`` when it may."""
        problem = url_problem(url)
        if problem is None and self.job_urls and not url.startswith(self.job_urls):
            problem = "must start with one of the site's notify.job_urls: " + \
                ", ".join(self.job_urls)
        return problem


def read_notify(data: Any, refuse: Callable[[str, object, str], NoReturn]) -> NotifyPolicy:
    """The site file's ``notify:``; ``refuse(field, value, allowed)`` raises the error naming
    the file, for the first key that is wrong."""
    if not isinstance(data, Mapping):
        refuse("notify", data, "must be a mapping with " + ", ".join(_KEYS))
    found: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _KEYS:
            refuse(f"notify.{key}", value, "unknown key; allowed: " + ", ".join(_KEYS))
        where = f"notify.{key}"
        if key == "webhooks":
            found[key] = tuple(_webhooks(value, refuse))
        elif key == "job_urls":
            if not isinstance(value, list) or any(url_problem(u) for u in value):
                refuse(where, value, f"must be {_KEYS[key]}")
            found[key] = tuple(value)
        elif key == "job_key_file":
            if not isinstance(value, str) or not value:
                refuse(where, value, f"must be {_KEYS[key]}")
            found[key] = value
        elif key == "attempts":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
                refuse(where, value, f"must be {_KEYS[key]}")
            found[key] = value
        else:
            try:
                found[key] = float(LONG_DURATION.parse(value))
            except ValueError:
                refuse(where, value, f"must be {_KEYS[key]}")
            if key == "timeout" and not 1 <= found[key] <= 60 or \
                    key == "backoff" and found[key] < 1:
                refuse(where, value, f"must be {_KEYS[key]}")
    return NotifyPolicy(**found)


def _webhooks(value: Any, refuse: Callable[[str, object, str], NoReturn]
              ) -> list[SiteWebhook]:
    if not isinstance(value, list):
        refuse("notify.webhooks", value, f"must be {_KEYS['webhooks']}")
    hooks = []
    for position, hook in enumerate(value):
        where = f"notify.webhooks[{position}]"
        if not isinstance(hook, Mapping):
            refuse(where, hook, "must be a mapping {url, secret_file, events}")
        for key in hook:
            if key not in _HOOK_KEYS:
                refuse(f"{where}.{key}", hook[key], "unknown key; allowed: "
                       + ", ".join(_HOOK_KEYS))
        problem = url_problem(hook.get("url"))
        if problem is not None:
            refuse(f"{where}.url", hook.get("url"), problem)
        secret = hook.get("secret_file")
        if not isinstance(secret, str) or not secret:
            refuse(f"{where}.secret_file", secret, "is required: the file of the key every "
                   "delivery to it is signed with")
        events = hook.get("events", list(NOTIFY_EVENTS))
        if not isinstance(events, list) or not events or \
                any(e not in NOTIFY_EVENTS for e in events):
            refuse(f"{where}.events", events, f"must be {_HOOK_KEYS['events']}")
        hooks.append(SiteWebhook(hook["url"], secret, tuple(events)))
    return hooks
