"""Applications recorded in etcd directly, as ``primus submit`` and an AM would have written them,
so that what a server answers can be checked against known keys without running an AM."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import Sequence

from primus.config.etcd import EtcdConfig
from primus.config.spec import JobSpec
from primus.state.keys import AppKeys
from primus.state.records import AmLeader, AppEvent, AppOwner, AppStatus, encode
from primus.state.states import AppState
from primus.store.api import Put
from primus.store.etcd_store import EtcdCoordinator

HOST = socket.gethostname()
"""The host recorded applications were submitted from: this one."""
SPEC = JobSpec.model_validate({"name": "train", "roles": [{"name": "worker", "num": 2,
                                                            "command": "true"}]})
"""The job every recorded application was submitted with."""


def write(config: EtcdConfig, ops: list[Put], leased: Sequence[Put] = ()) -> int:
    """Write ``ops``, and ``leased`` on a new lease of ten minutes (as an AM's leader record
    always is), in one transaction; return its revision."""

    async def run() -> int:
        store = await EtcdCoordinator.connect(config)
        try:
            lease = (await store.grant_lease(600)).id if leased else 0
            return (await store.txn([], [*ops, *(dataclasses.replace(put, lease=lease)
                                                  for put in leased)])).revision
        finally:
            await store.close()
    return asyncio.run(run())


def record_app(config: EtcdConfig, prefix: str, app_id: str, *, submitted: float,
               state: AppState = AppState.RUNNING, user: str = "alice",
               leader_host: str | None = "elsewhere") -> int:
    """Record an application as submit and an AM would have; the AM named runs on another
    host, so that nothing here starts one."""
    keys = AppKeys(prefix, app_id)
    status = AppStatus(app_id=app_id, name=app_id.split("-")[0], state=state, user=user,
                       submit_host=HOST, submit_time=submitted)
    owner = AppOwner(app_id=app_id, name=status.name, user=user, submit_host=HOST,
                     submit_time=submitted)
    ops = [Put(keys.spec, SPEC.model_dump_json().encode()), Put(keys.owner, encode(owner)),
           Put(keys.status, encode(status)), Put(keys.desired("worker"), b"2"),
           Put(keys.event(0), encode(AppEvent(seq=0, time=submitted, kind="submitted",
                                              message="submitted by alice")))]
    leader = [] if leader_host is None else [Put(keys.leader, encode(AmLeader(
        am_id=f"{leader_host}-1", host=leader_host, pid=1, since=submitted)))]
    return write(config, ops, leader)
