"""``primus queue`` and ``primus hosts usage`` through the real command, on admission records
written straight into a real etcd: the queues, hosts, requests, reasons and reservations an
admission leader and the AMs would have written."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from primus.client.queues import AdmissionView, host_usage, publish_queues, waiting_apps
from primus.config.inventory import Host
from primus.config.queues import QueuesConfig, QueueSpec, Quota
from primus.config.site import load_settings
from primus.config.spec import JobSpec, RoleSpec
from primus.scheduler.seals import seal
from primus.state.keys import AppKeys, SchedulerKeys
from primus.state.records import (
    AdmissionRequest,
    AppOwner,
    Record,
    Reservation,
    Waiting,
    encode,
    encode_host,
    encode_hosts,
)
from primus.store.api import Coordinator
from tests.support.primus import run_primus

GIB = 1 << 30
WORKER = RoleSpec(name="worker", command="true", num=2, cpu=2, memory=GIB, gpu=1)
PS = RoleSpec(name="ps", command="true", cpu=1, memory=2 * GIB)
QUEUES = QueuesConfig(queues={"default": QueueSpec(),
                              "urgent": QueueSpec(priority=10, quota=Quota(gpus=8))})


def request(app_id: str, queue: str, submit_time: float, *executors: tuple[str, int],
            granted: bool = False) -> AdmissionRequest:
    """A request of alice's for ``executors`` of the worker and ps roles."""
    return AdmissionRequest(app_id=app_id, user="alice", queue=queue, submit_time=submit_time,
                            roles=[WORKER, PS], executors=list(executors), hosts=["h1", "h2"],
                            granted=granted)


def recorded(prefix: str, app_id: str, queue: str, submit_time: float
             ) -> dict[str, Record | bytes]:
    """The server's records of alice's application ``app_id`` (owner, spec, hosts), which
    admission takes who, where and how much from."""
    keys = AppKeys(prefix, app_id)
    spec = JobSpec(name=app_id, queue=queue or None, roles=[WORKER, PS])
    return {keys.owner: AppOwner(app_id=app_id, name=app_id, user="alice", queue=queue,
                                 submit_time=submit_time),
            keys.spec: spec.model_dump_json().encode(),
            keys.hosts: encode_hosts([Host("h1", "10.0.0.1"), Host("h2", "10.0.0.2")])}


def reservation(app_id: str, role: str, index: int, host: str, gpus: list[int],
                user: str = "alice") -> Reservation:
    spec = {"worker": WORKER, "ps": PS}[role]
    return Reservation(app_id=app_id, user=user, queue="default", role=role, index=index,
                       host=host, cpu=spec.cpu, memory=spec.memory, gpus=gpus, since=1.0)


async def put_all(store: Coordinator, records: dict[str, Record | bytes]) -> None:
    for key, value in records.items():
        await store.put(key, value if isinstance(value, bytes) else encode(value))


def primus_json(env: dict[str, str], *args: str) -> object:
    result = run_primus(env, *args, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def primus_table(env: dict[str, str], *args: str) -> list[str]:
    result = run_primus(env, *args)
    assert result.returncode == 0, result.stderr
    return [line.split() for line in result.stdout.splitlines()]


@pytest.fixture
def keys(prefix: str) -> SchedulerKeys:
    return SchedulerKeys(prefix)


# --- primus queue -----------------------------------------------------------------------------


async def test_queue_lists_waiting_apps_by_priority_then_submission_with_why_they_wait(
        primus_env, store, keys, prefix):
    await put_all(store, {
        **recorded(prefix, "late", "default", 300.0), **recorded(prefix, "early", "", 100.0),
        **recorded(prefix, "urgent", "urgent", 500.0),
        keys.config: QUEUES.model_dump_json().encode(),
        keys.request("late"): request("late", "default", 300.0, ("worker", 0)),
        keys.waiting("late"): Waiting(reason="not enough gpus on h1", since=400.0),
        keys.request("early"): request("early", "", 100.0, ("worker", 0), ("worker", 1),
                                       ("ps", 0)),
        keys.reservation("early", "ps", 0): reservation("early", "ps", 0, "h2", []),
        keys.request("urgent"): request("urgent", "urgent", 500.0, ("worker", 0)),
        keys.waiting("urgent"): Waiting(reason="queue urgent: gpus quota 8, would hold 9",
                                        since=600.0),
        keys.request("admitted"): request("admitted", "default", 1.0, ("worker", 0),
                                          granted=True),
    })

    waiting = primus_json(primus_env, "queue")

    assert [(w["position"], w["app_id"], w["queue"], w["priority"], w["executors"],
             w["reason"]) for w in waiting] == [
        (1, "urgent", "urgent", 10, ["worker-0"], "queue urgent: gpus quota 8, would hold 9"),
        (2, "early", "default", 0, ["worker-0", "worker-1"], "waiting for the admission leader"),
        (3, "late", "default", 0, ["worker-0"], "not enough gpus on h1")]
    assert [(w["user"], w["submit_time"], w["reason_since"]) for w in waiting] == [
        ("alice", 500.0, 600.0), ("alice", 100.0, None), ("alice", 300.0, 400.0)]
    rows = primus_table(primus_env, "queue")
    assert rows[0] == ["POS", "QUEUE", "PRIORITY", "USER", "APP", "EXECUTORS", "SUBMITTED",
                       "SINCE", "WHY"]
    assert [row[:6] for row in rows[1:]] == [
        ["1", "urgent", "10", "alice", "urgent", "1"], ["2", "default", "0", "alice", "early", "2"],
        ["3", "default", "0", "alice", "late", "1"]]
    assert " ".join(rows[2]).endswith(" - waiting for the admission leader")  # SINCE: none yet


async def test_queue_with_a_limit_lists_the_head_of_the_queue_and_counts_the_rest(
        primus_env, store, keys, prefix):
    records: dict[str, Record | bytes] = {keys.config: QUEUES.model_dump_json().encode()}
    for n in range(4):
        records |= {**recorded(prefix, f"app{n}", "default", 100.0 + n),
                    keys.request(f"app{n}"): request(f"app{n}", "default", 100.0 + n,
                                                     ("worker", 0))}
    await put_all(store, records)

    head = primus_json(primus_env, "queue", "--limit", "2")
    table = run_primus(primus_env, "queue", "--limit", "2")

    assert [w["app_id"] for w in head] == ["app0", "app1"]
    assert table.returncode == 0, table.stderr
    assert table.stdout.rstrip().endswith("and 2 more wait (--limit 0 shows every one)")
    assert [w["app_id"] for w in primus_json(primus_env, "queue")] == [
        "app0", "app1", "app2", "app3"]


async def test_queue_piped_prints_each_waiting_app_on_one_line_however_long_why_it_waits(
        primus_env, store, keys, prefix):
    """stdout a pipe and no $COLUMNS: rich would take 80 columns and wrap WHY a word a line."""
    reason = ("not enough gpus on h1 (2 free, 8 asked) nor on h2 (0 free, 8 asked); "
              "queue default: gpus quota 8, would hold 16")
    await put_all(store, {**recorded(prefix, "wide", "default", 100.0),
                          keys.config: QUEUES.model_dump_json().encode(),
                          keys.request("wide"): request("wide", "default", 100.0, ("worker", 0)),
                          keys.waiting("wide"): Waiting(reason=reason, since=200.0)})
    env = {k: v for k, v in primus_env.items() if k not in ("COLUMNS", "LINES")}

    result = run_primus(env, "queue")

    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()
    assert header.split() == ["POS", "QUEUE", "PRIORITY", "USER", "APP", "EXECUTORS",
                              "SUBMITTED", "SINCE", "WHY"]
    assert row.split()[:6] == ["1", "default", "0", "alice", "wide", "1"]
    assert row.rstrip().endswith(reason)


def test_queue_says_so_when_nothing_waits(primus_env):
    result = run_primus(primus_env, "queue")

    assert (result.returncode, result.stdout) == (0, "no application waits for admission\n")
    assert primus_json(primus_env, "queue") == []


# --- primus hosts usage -----------------------------------------------------------------------


@pytest.fixture
async def two_apps_on_h1(store, keys) -> None:
    """h1 (4 slots, 16 cpu, 64 GiB, 4 GPUs) holds app-a's two workers and app-b's ps; h2
    (no limit, no GPU) holds nothing."""
    await put_all(store, {
        keys.host("h1"): encode_host(Host("h1", "10.0.0.1", slots=4, cpu=16, memory=64 * GIB,
                                          gpus=4)),
        keys.host("h2"): encode_host(Host("h2", "10.0.0.2")),
        keys.reservation("app-a", "worker", 0): reservation("app-a", "worker", 0, "h1", [0]),
        keys.reservation("app-a", "worker", 1): reservation("app-a", "worker", 1, "h1", [2]),
        keys.reservation("app-b", "ps", 0): reservation("app-b", "ps", 0, "h1", [], "bob"),
    })


async def test_hosts_usage_shows_capacity_what_each_app_holds_and_what_is_free(
        primus_env, two_apps_on_h1):
    usage = primus_json(primus_env, "hosts", "usage")

    assert usage == [
        {"host": "h1", "capacity": {"slots": 4, "cpu": 16, "memory": 64 * GIB,
                                    "gpus": [0, 1, 2, 3]},
         "held": [{"app_id": "app-a", "user": "alice", "queue": "default",
                   "executors": ["worker-0", "worker-1"], "cpu": 4, "memory": 2 * GIB,
                   "gpus": [0, 2]},
                  {"app_id": "app-b", "user": "bob", "queue": "default", "executors": ["ps-0"],
                   "cpu": 1, "memory": 2 * GIB, "gpus": []}],
         "free": {"slots": 1, "cpu": 11, "memory": 60 * GIB, "gpus": [1, 3]},
         "condition": None},
        {"host": "h2", "capacity": {"slots": None, "cpu": None, "memory": None, "gpus": None},
         "held": [], "free": {"slots": None, "cpu": None, "memory": None, "gpus": None},
         "condition": None}]
    assert primus_table(primus_env, "hosts", "usage") == [
        ["HOST", "HELD", "BY", "EXECUTORS", "SLOTS", "CPU", "MEMORY", "GPU", "DEVICES"],
        ["h1", "capacity", "4", "16", "64.0GiB", "0-3"],
        ["app-a", "(alice,", "default)", "worker[0,1]", "2", "4", "2.0GiB", "0,2"],
        ["app-b", "(bob,", "default)", "ps[0]", "1", "1", "2.0GiB", "none"],
        ["free", "1", "11", "60.0GiB", "1,3"],
        ["h2", "capacity", "unlimited", "unlimited", "unlimited", "-"],
        ["free", "unlimited", "unlimited", "unlimited", "-"]]


async def test_hosts_usage_adds_the_inventory_hosts_admission_has_not_seen_yet(
        primus_env, two_apps_on_h1, tmp_path: Path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("h3 primus_slots=2 primus_gpus=2\nh1 primus_slots=99\n")

    usage = primus_json(primus_env, "hosts", "usage", "-i", str(inventory))

    assert [(u["host"], u["capacity"]["slots"], u["free"]["slots"], u["free"]["gpus"])
            for u in usage] == [("h3", 2, 2, [0, 1]), ("h1", 4, 1, [1, 3]),
                                ("h2", None, None, None)]


async def test_submit_publishes_the_site_queues_once_for_the_admission_leader(store, prefix,
                                                                              tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("queues: {default: {}, urgent: {priority: 10, quota: {gpus: 8}}}\n")
    settings = load_settings(env={"PRIMUS_CONF": str(site), "PRIMUS_PREFIX": prefix})
    key = SchedulerKeys(prefix).config

    assert await publish_queues(store, settings) is True
    written = await store.get(key)
    assert await publish_queues(store, settings) is False
    assert (await store.get(key)).mod_revision == written.mod_revision
    assert QueuesConfig.model_validate_json(written.value) == settings.queues

    site.write_text("queues: {default: {priority: 1}}\n")
    changed = load_settings(env={"PRIMUS_CONF": str(site), "PRIMUS_PREFIX": prefix})
    assert await publish_queues(store, changed) is True
    assert QueuesConfig.model_validate_json((await store.get(key)).value) == changed.queues


# --- A server's own copy of admission's keys -----------------------------------------------------


async def test_a_servers_followed_copy_of_the_queue_sees_every_write_and_delete_before_a_look(
        store, keys, prefix):
    """The view a server answers ``primus queue`` from follows admission's keys by a watch; a
    look right after a write or a delete (no wait between) already shows it, and says the same
    as a look that reads etcd itself."""
    await put_all(store, {**recorded(prefix, "first", "default", 100.0),
                          **recorded(prefix, "second", "default", 200.0),
                          keys.config: QUEUES.model_dump_json().encode(),
                          keys.request("first"): request("first", "default", 100.0,
                                                         ("worker", 0))})
    view = AdmissionView(store, prefix)
    assert await view.state() is None  # not following yet: a look reads etcd itself
    following = asyncio.ensure_future(view.run())
    try:
        await asyncio.wait_for(view.followed.wait(), 10)

        async def listed() -> list[str]:
            shown = [queued.request.app_id for queued in
                     (await waiting_apps(store, prefix, view))[0]]
            assert shown == [queued.request.app_id for queued in
                             (await waiting_apps(store, prefix))[0]], "the copy and etcd differ"
            return shown

        assert await listed() == ["first"]
        await put_all(store, {keys.request("second"): request("second", "default", 200.0,
                                                              ("worker", 0))})
        assert await listed() == ["first", "second"]
        await store.delete(keys.request("first"))
        assert await listed() == ["second"]
        await put_all(store, {keys.reservation("second", "worker", 0):
                              reservation("second", "worker", 0, "h1", [])})
        usage = await host_usage(store, prefix, [Host("h1", "10.0.0.1")], view)
        assert [(u.host.name, [held.app_id for held in u.held]) for u in usage] == [
            ("h1", ["second"])]
        await store.delete(keys.request("second"))
        assert await listed() == []
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following


async def test_a_servers_copy_leaves_out_reservations_without_the_leaders_seal(
        store, keys, prefix):
    """An application's identity may write under its own ``scheduler/apps/<app>/``: on a site
    of owners, the server's copy believes a reservation only with the admission leader's seal,
    as the leader does, so that a forged one shows on no host and orders no queue."""
    key = b"the-leaders-seal-key"
    forged = reservation("forger", "worker", 0, "h1", [])
    sealed = seal(key, keys.reservation("honest", "worker", 0),
                  reservation("honest", "worker", 0, "h1", []))
    await put_all(store, {keys.config: QUEUES.model_dump_json().encode(),
                          keys.reservation("forger", "worker", 0): forged,
                          keys.reservation("honest", "worker", 0): sealed})
    view = AdmissionView(store, prefix, key)
    following = asyncio.ensure_future(view.run())
    try:
        await asyncio.wait_for(view.followed.wait(), 10)
        usage = await host_usage(store, prefix, [Host("h1", "10.0.0.1")], view)
        assert [(u.host.name, [held.app_id for held in u.held]) for u in usage] == [
            ("h1", ["honest"])]
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
