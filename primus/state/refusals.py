"""Recording what a privileged reader did not believe of an application's own keys.

A reader of Primus's (the admission leader, the archiver, the list) that finds a value it
cannot read, or a claim the server's records contradict, logs it and leaves that application
out; it also records it once as the application's (``apps/<app>/refused/<id>``, one per key,
read-only to the application), where ``primus status`` and the UI show it among the events.
The application's keys are its own to break: this says so to its owner, and to no one else.
"""

from __future__ import annotations

import logging
import time

from primus.state.keys import AppKeys
from primus.state.records import Refusal, encode
from primus.store.api import Coordinator, Put, StoreError, key_missing

logger = logging.getLogger(__name__)

MAX_RECORDED = 100
"""Refusals one process records per application: a flood of forged keys is refused each,
and counted against the application's budget, but not answered key for key."""
_recorded: dict[tuple[str, str], int] = {}


async def record_refusal(store: Coordinator, keys: AppKeys, key: str, why: str,
                         reader: str) -> None:
    """Log that ``reader`` did not believe ``key`` (``why``: the field and what was expected)
    and record it once for the application, unless it is recorded already or this process
    recorded :data:`MAX_RECORDED` of them. A failure to record is logged, never raised: the
    reader goes on with the others."""
    counted = (keys.prefix, keys.app_id)
    if _recorded.get(counted, 0) >= MAX_RECORDED:
        logger.debug("[%s] %s: not believed by the %s: %s", keys.app_id, key, reader, why)
        return
    logger.warning("[%s] %s: not believed by the %s: %s", keys.app_id, key, reader, why)
    _recorded[counted] = _recorded.get(counted, 0) + 1
    record = Refusal(time=time.time(), key=key, why=why[:1000], reader=reader)
    try:
        await store.txn([key_missing(keys.refusal(key))],
                        [Put(keys.refusal(key), encode(record))])
    except StoreError as exc:
        logger.warning("[%s] the refusal of %s was not recorded: %s", keys.app_id, key, exc)
