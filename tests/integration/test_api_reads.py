"""``GetApplication``'s reads (primus/api/reads.py) on the session etcd: every reply holds the
writes acknowledged before its request, requests that arrive together share a read, and what is
kept of an application is forgotten when unused or gone.

Applications are recorded in etcd directly, as submit and an AM would have written them.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from primus.api.client import Client
from primus.api.reads import ApplicationReads
from primus.api.v1 import primus_pb2 as pb
from primus.client.api import AppNotFoundError, AppReport
from primus.client.service import ApplicationService
from primus.config.site import Settings
from primus.config.spec import JobSpec
from primus.state.keys import AppKeys
from primus.state.records import AmLeader, AppEvent, AppStatus, KillRequest, encode
from primus.state.states import AppState
from primus.store.api import Delete, Put
from primus.store.etcd_store import EtcdCoordinator
from tests.support.server import start_server

SPEC = JobSpec.model_validate({"name": "train", "roles": [{"name": "worker", "num": 2,
                                                            "command": "true"}]})
T0 = 1_795_314_462.5


def status(app_id: str, state: AppState = AppState.RUNNING) -> AppStatus:
    return AppStatus(app_id=app_id, name="train", state=state, user="alice",
                     submit_host=socket.gethostname(), submit_time=T0)


async def record_app(store: EtcdCoordinator, prefix: str, app_id: str) -> AppKeys:
    """An application RUNNING, led by an AM on another host (nothing here starts one)."""
    keys = AppKeys(prefix, app_id)
    await store.txn([], [
        Put(keys.spec, SPEC.model_dump_json().encode()), Put(keys.status, encode(status(app_id))),
        Put(keys.desired("worker"), b"2"),
        Put(keys.event(0), encode(AppEvent(seq=0, time=T0, kind="submitted", message="hi"))),
        Put(keys.leader, encode(AmLeader(am_id="elsewhere-1", host="elsewhere", pid=1,
                                         since=T0)))])
    return keys


class GatedService(ApplicationService):
    """The client layer, counting its reads; with ``gate`` set, a read holds its answer, once
    etcd has given it, until the gate opens."""

    def __init__(self, store: EtcdCoordinator, settings: Settings) -> None:
        super().__init__(store, settings)
        self.reads = 0
        self.read_done = asyncio.Event()
        self.gate: asyncio.Event | None = None

    async def get_app(self, app_id: str, previous: AppReport | None = None) -> AppReport:
        self.reads += 1
        report = await super().get_app(app_id, previous)
        self.read_done.set()
        if self.gate is not None:
            await self.gate.wait()
        return report


def service_of(store: EtcdCoordinator, prefix: str, tmp_path: Path) -> GatedService:
    return GatedService(store, Settings(home=tmp_path, prefix=prefix))


async def test_a_write_acknowledged_before_a_request_shows_in_its_reply(store, prefix, tmp_path):
    keys = await record_app(store, prefix, "train-1")
    reads = ApplicationReads(service_of(store, prefix, tmp_path))
    before = await reads.get("train-1", 20)
    assert before.status.state == pb.APPLICATION_STATE_RUNNING and not before.HasField("kill")

    killed = await store.put(keys.kill, encode(KillRequest(time=T0, user="bob", reason="r")))
    after_put = await reads.get("train-1", 20)
    assert after_put.revision >= killed and after_put.kill.user == "bob"

    dropped = (await store.txn([], [Delete(keys.kill)])).revision
    after_delete = await reads.get("train-1", 20)
    assert after_delete.revision >= dropped and not after_delete.HasField("kill")


async def test_a_request_arriving_during_a_read_waits_for_the_next_one(store, prefix, tmp_path):
    keys = await record_app(store, prefix, "train-1")
    service = service_of(store, prefix, tmp_path)
    reads = ApplicationReads(service)
    service.gate = asyncio.Event()
    early = asyncio.ensure_future(reads.get("train-1", 20))
    await asyncio.wait_for(service.read_done.wait(), 10)  # its read has been answered by etcd
    written = await store.put(keys.status, encode(status("train-1", AppState.SUCCEEDED)))
    late = asyncio.ensure_future(reads.get("train-1", 20))
    service.gate.set()

    early_reply, late_reply = await asyncio.wait_for(asyncio.gather(early, late), 10)

    assert early_reply.revision < written
    assert late_reply.revision >= written
    assert late_reply.status.state == pb.APPLICATION_STATE_SUCCEEDED
    assert service.reads == 2


async def test_requests_that_arrive_together_share_one_read(store, prefix, tmp_path):
    await record_app(store, prefix, "train-1")
    service = service_of(store, prefix, tmp_path)
    reads = ApplicationReads(service)

    replies = await asyncio.wait_for(
        asyncio.gather(*(reads.get("train-1", 20) for _ in range(16))), 10)

    assert service.reads == 1
    assert len({reply.revision for reply in replies}) == 1


async def test_an_unchanged_application_is_not_converted_again_but_carries_the_new_revision(
        store, prefix, tmp_path):
    keys = await record_app(store, prefix, "train-1")
    service = service_of(store, prefix, tmp_path)
    reads = ApplicationReads(service)
    first = await reads.get("train-1", 20)
    first_report = await service.get_app("train-1")
    elsewhere = await store.put(f"{prefix}/unrelated", b"x")

    second = await reads.get("train-1", 20)
    unchanged = await service.get_app("train-1", first_report)

    assert second.revision >= elsewhere > first.revision
    second.revision = first.revision
    assert second == first
    assert unchanged.view is first_report.view and unchanged.revision >= elsewhere
    await store.put(keys.desired("worker"), b"3")
    changed = await service.get_app("train-1", unchanged)
    assert changed.view is not first_report.view
    assert {role.name: role.num for role in changed.view.spec.roles} == {"worker": 3}
    assert [role.desired_executors for role in (await reads.get("train-1", 20)).roles] == [3]


async def test_the_number_of_events_asked_for_is_honoured_for_each_request(store, prefix,
                                                                         tmp_path):
    keys = await record_app(store, prefix, "train-1")
    await store.txn([], [Put(keys.event(seq), encode(AppEvent(seq=seq, time=T0 + seq,
                                                              kind="note", message=str(seq))))
                         for seq in range(1, 30)])
    reads = ApplicationReads(service_of(store, prefix, tmp_path))

    few, many = await asyncio.gather(reads.get("train-1", 3), reads.get("train-1", 25))

    assert [event.seq for event in few.events] == [27, 28, 29]
    assert [event.seq for event in many.events] == list(range(5, 30))


async def test_an_application_not_read_for_a_while_is_forgotten(store, prefix, tmp_path):
    await record_app(store, prefix, "train-1")
    await record_app(store, prefix, "train-2")
    now = [0.0]
    reads = ApplicationReads(service_of(store, prefix, tmp_path), idle=60.0,
                             clock=lambda: now[0])
    await reads.get("train-1", 20)
    now[0] = 59.0
    await reads.get("train-2", 20)
    assert "train-1" in reads and "train-2" in reads

    now[0] = 61.0
    await reads.get("train-2", 20)

    assert "train-1" not in reads and "train-2" in reads


async def test_beyond_the_applications_kept_the_least_recently_read_is_forgotten(
        store, prefix, tmp_path):
    for app_id in ("train-1", "train-2", "train-3"):
        await record_app(store, prefix, app_id)
    reads = ApplicationReads(service_of(store, prefix, tmp_path), kept=2)
    await reads.get("train-1", 20)
    await reads.get("train-2", 20)
    await reads.get("train-1", 20)

    await reads.get("train-3", 20)

    assert "train-1" in reads and "train-2" not in reads and "train-3" in reads


async def test_an_application_that_ended_shows_its_end_and_one_deleted_is_not_found(
        store, prefix, tmp_path):
    keys = await record_app(store, prefix, "train-1")
    reads = ApplicationReads(service_of(store, prefix, tmp_path))
    assert (await reads.get("train-1", 20)).HasField("am_leader")

    await store.txn([], [Put(keys.status, encode(status("train-1", AppState.SUCCEEDED))),
                         Delete(keys.leader)])
    ended = await reads.get("train-1", 20)
    assert ended.status.state == pb.APPLICATION_STATE_SUCCEEDED
    assert not ended.HasField("am_leader")

    await store.delete(keys.root, prefix=True)
    for _ in range(2):
        try:
            await reads.get("train-1", 20)
        except AppNotFoundError:
            pass
        else:
            raise AssertionError("a deleted application was still read")
        assert "train-1" not in reads


async def test_a_change_made_in_etcd_shows_in_the_next_get_application_of_the_server(
        store, prefix, tmp_path, primus_env):
    keys = await record_app(store, prefix, "train-1")
    server = start_server(primus_env, tmp_path)
    try:
        with Client(server.address, plaintext=True) as client:
            assert client.get_app("train-1").status.state is AppState.RUNNING
            for state in (AppState.SUCCEEDED, AppState.FAILED):
                written = await store.put(keys.status, encode(status("train-1", state)))
                app = client.get_app("train-1")
                assert app.status.state is state and app.revision >= written
    finally:
        server.stop()
