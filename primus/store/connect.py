"""Open the store the settings point at, starting the embedded etcd when none is configured."""

from __future__ import annotations

import asyncio
import dataclasses

from primus.config.site import Settings
from primus.store.api import Coordinator
from primus.store.embedded import EmbeddedEtcd
from primus.store.etcd_store import EtcdCoordinator


async def open_store(settings: Settings) -> tuple[Coordinator, Settings]:
    """Connect to etcd and return the store with settings pinned to the endpoint that answered.

    With no etcd configured, the embedded etcd under ``settings.home`` is reused or started,
    and reached with its client certificate; the settings then carry the certificate's paths
    (never its contents) to the processes started with them.
    """
    if settings.etcd is None:
        info = await asyncio.to_thread(EmbeddedEtcd(settings.home).ensure_running)
        settings = dataclasses.replace(settings, etcd=info.client_config())
    assert settings.etcd is not None  # narrowed for type checkers; set just above
    store = await EtcdCoordinator.connect(settings.etcd)
    return store, settings.with_endpoint(store.endpoint)
