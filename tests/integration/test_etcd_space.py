"""etcd's own space, against a real etcd with a small quota: a site driven into the NOSPACE
alarm shows it (``primus etcd space``, the server's metrics) and recovers by the documented
procedure (``primus etcd recover-space``) with nothing acknowledged lost."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from primus.config.etcd import EtcdConfig
from primus.server.metrics import EtcdSpaceCollector
from primus.store.api import Alarm, StoreAuthError, StoreSpaceExceededError
from primus.store.embedded import EtcdProcessInfo, find_etcd_binary, start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from primus.store.space import SpaceMonitor
from tests.support.metrics import Samples, samples
from tests.support.primus import run_primus

QUOTA = 16 * 1024 * 1024
BIG = 1024 * 1024
"""Bytes of each overwrite of the big key (etcd takes requests up to 1.5 MiB)."""
ROOT_PASSWORD = "root-pw-77c1"
USER_PASSWORD = "user-pw-0b9e"


@pytest.fixture
def small_etcd(tmp_path: Path) -> Iterator[EtcdProcessInfo]:
    """An etcd of its own whose database may hold ``QUOTA`` bytes."""
    _, info = start_etcd(tmp_path / "etcd" / "data", tmp_path / "etcd" / "etcd.log",
                         extra_args=("--quota-backend-bytes", str(QUOTA)))
    yield info
    stop_pid(info.pid)


def cli_env(tmp_path: Path, endpoint: str, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    (tmp_path / "no-site-defaults.yaml").write_text("{}\n")
    env.update(PRIMUS_ETCD=endpoint, PRIMUS_HOME=str(tmp_path / "home"), PRIMUS_PREFIX="/site",
               PRIMUS_CONF=str(tmp_path / "no-site-defaults.yaml"), COLUMNS="200", **more)
    return env


async def fill(store: EtcdCoordinator) -> tuple[dict[str, bytes], tuple[str, bytes]]:
    """Write until etcd refuses for want of space: small keys, and one big key overwritten
    (its history grows the database). The keys and values etcd acknowledged, and the write
    it refused -- which etcd 3.5 may have applied all the same: its quota check at apply
    applies the put that crosses the quota and then answers NOSPACE."""
    acknowledged: dict[str, bytes] = {}
    for i in range(50):
        await store.put(f"/site/acked/{i:03}", f"value {i}".encode())
        acknowledged[f"/site/acked/{i:03}"] = f"value {i}".encode()
    for i in range(10 * QUOTA // BIG):
        writes = (("/site/big", f"{i:08}".encode() * (BIG // 8)),
                  (f"/site/during/{i:03}", b"small"))
        for key, value in writes:
            try:
                await store.put(key, value)
            except StoreSpaceExceededError:
                return acknowledged, (key, value)
            acknowledged[key] = value
    raise AssertionError(f"etcd with a {QUOTA}-byte quota took {10 * QUOTA} bytes")


def brief(value: bytes | None) -> str:
    """A value short enough for an assertion's message (pytest's diff of two 1 MiB values
    runs for minutes)."""
    return "absent" if value is None else f"{len(value)} bytes from {value[:16]!r}"


def scrape(monitor: SpaceMonitor) -> Samples:
    """The samples the server's ``/metrics`` would show of ``monitor``'s last reading."""
    return samples(EtcdSpaceCollector(monitor))


NOSPACE = ("primus_etcd_alarm", (("alarm", "NOSPACE"), ("member", "primus")))


async def test_a_site_driven_into_nospace_recovers_by_recover_space_with_nothing_acknowledged_lost(
        small_etcd, tmp_path):
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(small_etcd.client_url,)))
    try:
        acknowledged, refused = await fill(store)
        with pytest.raises(StoreSpaceExceededError, match="recover-space"):
            await store.put("/site/small", b"refused too")

        # What an operator sees: the server's metrics and `primus etcd space`.
        monitor = SpaceMonitor(store)
        await monitor.read()
        metrics = scrape(monitor)
        assert metrics[NOSPACE] == 1.0
        assert metrics["primus_etcd_quota_bytes", (("member", "primus"),)] == QUOTA
        assert metrics["primus_etcd_db_size_bytes", (("member", "primus"),)] >= QUOTA * 0.9
        assert [w.what for w in monitor.warnings()] == ["NOSPACE", "FULL"]
        env = cli_env(tmp_path, small_etcd.client_url)
        shown = run_primus(env, "etcd", "space", "-o", "json", timeout=60)
        assert shown.returncode == 0, shown.stderr
        (member,) = json.loads(shown.stdout)
        assert member["alarms"] == ["NOSPACE"] and member["quota"] == QUOTA
        assert member["size"] >= QUOTA * 0.9

        recovered = run_primus(env, "etcd", "recover-space", timeout=120)
        assert recovered.returncode == 0, (recovered.stdout, recovered.stderr)
        for step in ("compacted the history", "defragmented primus",
                     "disarmed the NOSPACE alarm of primus"):
            assert step in recovered.stdout, recovered.stdout

        for key, value in acknowledged.items():
            found = await store.get(key)
            held = None if found is None else found.value
            allowed = (value, refused[1]) if key == refused[0] else (value,)
            assert held in allowed, f"{key}: {brief(held)}, acknowledged {brief(value)}"
        await store.put("/site/small", b"served again")
        assert (await store.get("/site/small")).value == b"served again"
        (after,) = await store.space()
        assert after.alarms == () and after.size < QUOTA / 2
        await monitor.read()
        assert scrape(monitor)[NOSPACE] == 0.0
        assert monitor.warnings() == []

        again = run_primus(env, "etcd", "recover-space", timeout=120)
        assert again.returncode == 0, (again.stdout, again.stderr)
        assert "disarmed" not in again.stdout
    finally:
        await store.close()


def etcdctl(endpoint: str, *args: str, user: str | None = None) -> None:
    subprocess.run([str(find_etcd_binary("etcdctl")), "--endpoints", endpoint,
                    *(["--user", user] if user else []), *args],
                   check=True, capture_output=True, timeout=30)


async def test_recover_space_without_the_root_role_is_refused_before_anything_is_done(
        small_etcd, tmp_path):
    url = small_etcd.client_url
    root = f"root:{ROOT_PASSWORD}"
    etcdctl(url, "user", "add", root)
    etcdctl(url, "auth", "enable")
    etcdctl(url, "role", "add", "site-rw", user=root)
    etcdctl(url, "role", "grant-permission", "--prefix=true", "site-rw", "readwrite", "/site/",
            user=root)
    etcdctl(url, "user", "add", f"user:{USER_PASSWORD}", user=root)
    etcdctl(url, "user", "grant-role", "user", "site-rw", user=root)
    store = await EtcdCoordinator.connect(EtcdConfig(endpoints=(url,), user="user",
                                                     password=USER_PASSWORD))
    try:
        first = await store.put("/site/key", b"old")
        await store.put("/site/key", b"new")
        env = cli_env(tmp_path, url, PRIMUS_ETCD_USER="user",
                      PRIMUS_ETCD_PASSWORD=USER_PASSWORD)
        refused = run_primus(env, "etcd", "recover-space", timeout=60)
        assert refused.returncode == 2, (refused.stdout, refused.stderr)
        assert "root role" in refused.stderr and "'user'" in refused.stderr
        assert USER_PASSWORD not in refused.stderr
        assert "compacted" not in refused.stdout
        old = await store.get_prefix("/site/key", revision=first)
        assert [kv.value for kv in old.kvs] == [b"old"], "nothing was compacted"
        with pytest.raises(StoreAuthError):
            await store.check_maintainer()
        (member,) = await store.space()  # any identity may look
        assert member.alarms == () and member.quota == QUOTA
    finally:
        await store.close()
    admin = await EtcdCoordinator.connect(EtcdConfig(endpoints=(url,), user="root",
                                                     password=ROOT_PASSWORD))
    try:
        await admin.check_maintainer()
        await admin.disarm("primus", Alarm.NOSPACE)  # none raised: left alone
    finally:
        await admin.close()
