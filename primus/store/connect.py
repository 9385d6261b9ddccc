"""Open the store the settings point at, starting the embedded etcd when none is configured."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

from primus.config.site import Settings
from primus.store.api import Coordinator
from primus.store.embedded import EmbeddedEtcd
from primus.store.etcd_store import EtcdCoordinator

AfterStart = Callable[[Coordinator, Settings], Awaitable[None]]


async def open_store(settings: Settings, after_embedded_start: AfterStart | None = None
                     ) -> tuple[Coordinator, Settings]:
    """Connect to etcd and return the store with settings pinned to the endpoint that answered.

    With no etcd configured, the embedded etcd under ``settings.home`` is reused or started,
    and reached with its client certificate; the settings then carry the certificate's paths
    (never its contents) to the processes started with them. When this call started it,
    ``after_embedded_start`` runs with the connected store before it is returned.
    """
    embedded = None
    if settings.etcd is None:
        embedded = EmbeddedEtcd(settings.home)
        info = await asyncio.to_thread(embedded.ensure_running)
        settings = dataclasses.replace(settings, etcd=info.client_config())
    assert settings.etcd is not None  # narrowed for type checkers; set just above
    store = await EtcdCoordinator.connect(settings.etcd)
    settings = settings.with_endpoint(store.endpoint)
    if embedded is not None and embedded.started and after_embedded_start is not None:
        try:
            await after_embedded_start(store, settings)
        except BaseException:
            await store.close()
            raise
    return store, settings
