"""Seals on what the admission leader writes where an application's identity may write too.

An AM gives its reservations up in the same transaction as it records its executors' ends
(``scheduler/apps/<app>/reservations/``), so its identity may write there, and etcd cannot
grant a delete without a put. A reservation or a preemption the application wrote itself
would otherwise count against every other application's hosts, or hold every preemption
back. The leader therefore seals each one it writes with an HMAC, keyed by a key only the
servers hold and bound to the etcd key it is written at, and believes only values whose
seal is right: a forged one, or one copied from another application's key, is ignored.

What a seal cannot stop, and docs/operations.md says: an application giving its own
reservations up early, or writing back one of its own it gave up (both only about hosts it
was granted).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TypeVar

from primus.state.records import Preemption, Reservation

Sealable = Reservation | Preemption
S = TypeVar("S", Reservation, Preemption)


def _mac(key: bytes, etcd_key: str, record: Sealable) -> str:
    body = record.model_copy(update={"seal": ""}).model_dump_json().encode()
    return hmac.new(key, etcd_key.encode() + b"\0" + body, hashlib.sha256).hexdigest()


def seal(key: bytes | None, etcd_key: str, record: S) -> S:
    """``record`` with its seal for ``etcd_key`` (unchanged without a ``key``: a site of one
    account, where no application identity exists to forge one)."""
    return record if key is None else record.model_copy(update={"seal": _mac(key, etcd_key,
                                                                            record)})


def sealed(key: bytes | None, etcd_key: str, record: Sealable) -> bool:
    """Whether ``record``, read at ``etcd_key``, is one the leader wrote there (always, without
    a ``key``)."""
    return key is None or hmac.compare_digest(record.seal, _mac(key, etcd_key, record))
