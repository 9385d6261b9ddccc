"""What a change of the site defaults file changes, for a server that re-reads it while it runs
(docs/operations.md, "Changing the site file while the server runs").

A server takes most of its settings once, at its start: its etcd connection, its prefix and
home, the history database, the admission leader's queues and health checks, and what it
authorizes are held by parts that run for the server's whole life. The site's ``notify:`` is
read by the notifier at each pass and each delivery, so a new one is used from the next pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from primus.config.site import DEFAULT_SITE_FILE, NO_SITE_FILE, Settings

SITE_KEYS = {"home": "home", "prefix": "prefix", "etcd": "etcd", "job_defaults": "job",
             "inventory": "inventory", "ssh": "ssh", "server_tokens": "server.tokens",
             "server_address": "server.address", "server_ca_cert": "server.ca_cert",
             "server_max_upload": "server.max_upload",
             "server_read_access": "server.read_access",
             "queues": "queues (queues, default_queue, budget)", "history_url": "history.url",
             "history_retention": "history.retention", "accounts": "accounts",
             "resources": "resources", "health": "health", "notify": "notify",
             "trust": "trust", "domain_levels": "topology.levels"}
"""Each setting of :class:`~primus.config.site.Settings` (but ``source``), as the site file
names it."""
RELOADABLE = ("notify",)
"""The settings a running server takes from a changed site file; the others wait for its
restart."""


def watched_site_file(settings: Settings, env: Mapping[str, str]) -> Path | None:
    """The file whose change changes ``settings``: the site file they were read from, else the
    default one (``/etc/primus/defaults.yaml``), which may appear later; ``None`` with
    ``PRIMUS_CONF=-``, which reads none."""
    if settings.source is not None:
        return settings.source
    return None if env.get("PRIMUS_CONF") == NO_SITE_FILE else DEFAULT_SITE_FILE


def changed_settings(before: Settings, after: Settings) -> list[str]:
    """The settings (:class:`~primus.config.site.Settings`' fields, but ``source``) whose value
    differs between two readings, in the order of the class."""
    return [f.name for f in dataclasses.fields(Settings)
            if f.name != "source" and getattr(before, f.name) != getattr(after, f.name)]
