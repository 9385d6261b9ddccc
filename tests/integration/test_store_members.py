"""A store over a real etcd cluster of three members (TLS on loopback): with ``server_name``
one connection spans every member and moves on when the member it uses is killed."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from primus.config.etcd import EtcdConfig
from primus.store.api import Put, StoreError, StoreUnavailableError
from primus.store.embedded import find_etcd_binary, free_port
from primus.store.etcd_store import EtcdCoordinator
from primus.store.pki import EtcdPki, ensure_pki
from primus.store.space import recover_space


@pytest.fixture
def members(tmp_path: Path) -> Iterator[tuple[EtcdPki, list[subprocess.Popen[bytes]], list[str]]]:
    """Three etcd members on loopback, clients over TLS with client certificates (the
    embedded PKI: its server certificate names 127.0.0.1 and localhost)."""
    pki = ensure_pki(tmp_path / "pki")
    ports = [(free_port(), free_port()) for _ in range(3)]
    cluster = ",".join(f"m{i}=http://127.0.0.1:{peer}" for i, (_, peer) in enumerate(ports))
    processes = []
    for i, (client, peer) in enumerate(ports):
        processes.append(subprocess.Popen([
            str(find_etcd_binary()), "--name", f"m{i}", "--data-dir", str(tmp_path / f"m{i}"),
            "--listen-client-urls", f"https://127.0.0.1:{client}",
            "--advertise-client-urls", f"https://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", cluster, "--initial-cluster-state", "new",
            "--client-cert-auth", "--trusted-ca-file", str(pki.ca_cert),
            "--cert-file", str(pki.server_cert), "--key-file", str(pki.server_key),
            "--log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        yield pki, processes, [f"https://127.0.0.1:{client}" for client, _ in ports]
    finally:
        for process in processes:
            process.kill()
            process.wait()


def _members_config(pki: EtcdPki, endpoints: list[str]) -> EtcdConfig:
    """Primus's settings for the members: every endpoint, TLS with the name they share."""
    return EtcdConfig(endpoints=tuple(endpoints), ca_cert=str(pki.ca_cert),
                      cert=str(pki.client_cert), key=str(pki.client_key),
                      server_name="localhost", request_timeout=3.0)


async def _connect(config: EtcdConfig, within: float = 30.0) -> EtcdCoordinator:
    """Connect once the cluster has elected a leader (it answers then)."""
    async with asyncio.timeout(within):
        while True:
            try:
                return await EtcdCoordinator.connect(config)
            except StoreUnavailableError:
                await asyncio.sleep(0.2)


async def _until_served(call, within: float = 15.0):  # type: ignore[no-untyped-def]
    """Retry ``call()`` while the store is unavailable, as callers do after an outage."""
    async with asyncio.timeout(within):
        while True:
            try:
                return await call()
            except StoreUnavailableError:
                await asyncio.sleep(0.1)


async def test_one_connection_moves_to_another_member_when_the_first_is_killed(members):
    pki, processes, endpoints = members
    store = await _connect(_members_config(pki, endpoints))
    try:
        assert store.endpoint == ",".join(endpoints)
        lease = await store.grant_lease(10)
        await store.txn([], [Put("/m/before", b"1", lease=lease.id)])
        processes[0].kill()  # the member every connection picks first
        processes[0].wait()
        await _until_served(lambda: store.txn([], [Put("/m/after", b"2")]))
        assert (await store.get("/m/before")) is not None, "a key of a live lease is kept"
        assert await _until_served(lambda: store.refresh_lease(lease.id)) > 0
        assert (await store.get("/m/after")).value == b"2"
    finally:
        await store.close()


async def test_without_a_server_name_a_member_certificate_is_checked_against_its_endpoint(
        members):
    pki, _, endpoints = members
    # Each member alone: one whose certificate failed the check would be left for the next
    # endpoint, and which one a client of all of them ends on also depends on timing.
    for endpoint in endpoints:
        config = EtcdConfig(endpoints=(endpoint,), ca_cert=str(pki.ca_cert),
                            cert=str(pki.client_cert), key=str(pki.client_key))
        store = await _connect(config)
        try:
            assert store.endpoint == endpoint
            await store.put("/m/checked", endpoint.encode())
        finally:
            await store.close()


async def test_a_server_name_no_member_certificate_carries_is_refused(members):
    pki, _, endpoints = members
    config = EtcdConfig(endpoints=tuple(endpoints), ca_cert=str(pki.ca_cert),
                        cert=str(pki.client_cert), key=str(pki.client_key),
                        server_name="not-in-the-certificate", request_timeout=2.0)
    with pytest.raises(StoreError):
        await EtcdCoordinator.connect(config)


async def test_space_is_read_from_each_member_and_recovery_defragments_each_in_turn(members):
    pki, processes, endpoints = members
    store = await _connect(_members_config(pki, endpoints))
    try:
        for i in range(20):
            await _until_served(lambda i=i: store.put(f"/m/{i}", b"x" * 10_000))
        spaces = await store.space()
        assert sorted(s.member for s in spaces) == ["m0", "m1", "m2"]
        assert sorted(s.endpoint for s in spaces) == sorted(endpoints)
        for space in spaces:
            assert space.error == "" and space.size > 0 and space.alarms == ()
            assert space.quota == 2 * 1024**3, "etcd's default quota, read over TLS"
        steps: list[str] = []
        recovery = await recover_space(store, steps.append)
        assert recovery.complete and sorted(recovery.defragmented) == ["m0", "m1", "m2"]
        assert [step.split()[1] for step in steps if step.startswith("defragmented")] == \
            [space.member for space in spaces], "one member after the other, each once"
        processes[2].kill()
        processes[2].wait()
        spaces = {s.member: s for s in await _until_served(store.space)}
        assert spaces["m2"].error and not spaces["m0"].error
        recovery = await _until_served(lambda: recover_space(store))
        assert not recovery.complete and sorted(recovery.defragmented) == ["m0", "m1"]
        assert any(p.startswith("m2: not defragmented") for p in recovery.problems)
        assert (await store.get("/m/19")).value == b"x" * 10_000
    finally:
        await store.close()
