"""Data streams read by executors on several hosts of the SSH test cluster.

The hosts (``tests/support/cluster.py``) are network namespaces that share this machine's file
system, so the sources are at the same path on every host, as on a shared mount, and what the
trainers (``data_trainer.py``) read lands where the test can compare it with the sources.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from tests.support.apps import assert_hosts_left_empty, assert_nothing_left, status_json
from tests.support.chaos import REPLACED_WITHIN, link_down
from tests.support.cluster import TestCluster
from tests.support.data import (
    make_text_files,
    received_lines,
    stream_keys,
    submit_data_job,
    wait_for_end,
)
from tests.support.primus import run_primus
from tests.support.waiting import wait_until


@pytest.fixture
def env(ssh_testbed, primus_env):
    """``primus_env`` on the cluster's etcd, submitting to the cluster's inventory."""
    return ssh_testbed.env(primus_env, PRIMUS_INVENTORY=str(ssh_testbed.cluster.inventory))


@pytest.fixture
def cluster(ssh_testbed) -> TestCluster:
    return ssh_testbed.cluster


def hosts_of(status: dict) -> dict[int, str]:
    """The host each worker's latest attempt was placed on, by index."""
    return {e["index"]: e["plan"]["host"] for e in status["executors"]["worker"]}


def submit_to_three_hosts(env: dict[str, str], tmp_path: Path, stream: str = "", roles: str = "",
                          trainer_args: str = "") -> tuple[str, list[bytes], Path]:
    """Three workers on three hosts reading 3 MiB of text in 24 tasks; the application, every
    line of the sources and the records directory.

    A trainer that starts first could read much of the stream before the others run, so the
    trainers read nothing until every one runs: each feeder then holds two tasks (the one its
    trainer reads and ``prefetch`` ahead), and every host is left tasks to read.
    """
    source = make_text_files(tmp_path / "data", files=6, lines=12_500)
    app_id, records = submit_data_job(env, tmp_path, f"""
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 128Ki{stream}""", roles=roles, trainer_args=f"--wait-go {trainer_args}")
    wait_until(lambda: all(e["live"] and e["live"]["state"] == "RUNNING"
                           for e in status_json(env, app_id)["executors"]["worker"]), 60,
               "every worker to run its trainer")
    (records / "GO").touch()
    return app_id, source, records


def test_every_record_reaches_trainers_on_three_hosts_exactly_once(env, cluster, tmp_path):
    app_id, source, records = submit_to_three_hosts(env, tmp_path)

    status = wait_for_end(env, app_id, timeout=60)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    placed = hosts_of(status)
    assert len(set(placed.values())) == 3, f"one worker per host: {placed}"
    readers = {done["index"] for done in stream_keys(env, app_id, "done").values()}
    assert readers == {0, 1, 2}, "every host read some of the stream"
    assert sorted(received_lines(records)) == sorted(source)
    stats = status["data"]["train"]
    assert (stats["tasks"], stats["done"], stats["failed"], stats["records"],
            stats["exhausted"]) == (24, 24, 0, len(source), True)
    assert sorted(p.name for p in records.glob("*.eof")) == [
        "worker-0.1.eof", "worker-1.1.eof", "worker-2.1.eof"], "every trainer saw the end"
    assert_nothing_left(app_id)
    # sshd's session process of a connection that just closed may linger for a moment.
    assert_hosts_left_empty(cluster)


def test_records_survive_a_host_cut_off_mid_stream(env, cluster, tmp_path):
    app_id, source, records = submit_to_three_hosts(
        env, tmp_path, "\n    checkpoint_records: 50", roles="restart_policy: on_failure",
        trainer_args="--delay 0.05")
    victim_out = records / "worker-1.1.out"
    wait_until(lambda: victim_out.exists() and victim_out.stat().st_size > 0, 30,
               "worker-1 to read")
    victim = next(h for h in cluster.hosts if h.name == hosts_of(status_json(env, app_id))[1])

    read_before_cut = victim_out.stat().st_size
    with link_down(victim):
        replaced = wait_until(
            lambda: (e := status_json(env, app_id)["executors"]["worker"][1])["plan"]["attempt"]
            == 2 and e["plan"], REPLACED_WITHIN, "worker-1 to be replaced")
    assert replaced["host"] != victim.name, "the replacement avoids the cut-off host"

    status = wait_for_end(env, app_id, timeout=60)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    got = collections.Counter(received_lines(records))
    missing = [line for line in source if got[line] == 0]
    assert missing == [], f"{len(missing)} records never reached a trainer"
    # The cut-off executor can record nothing more, so the tasks it held are read again from
    # their last checkpoints: at most what its trainer read after the cut, plus the task it
    # was reading and one whose completion the cut may have lost.
    read_after_cut = victim_out.read_bytes()[read_before_cut:].count(b"\n")
    largest_task = max(d["records"] for d in stream_keys(env, app_id, "done").values())
    duplicates = sum(got.values()) - len(source)
    assert duplicates <= read_after_cut + 2 * largest_task, \
        "redelivery is bounded by what came after the cut-off reader's last checkpoint"
    stats = status["data"]["train"]
    assert (stats["tasks"], stats["done"], stats["failed"], stats["exhausted"]) == (
        24, 24, 0, True), "each task done once"
    assert "re-queued after its reader was lost" in run_primus(env, "logs", app_id, "am").stdout, \
        "the cut-off reader held tasks that were re-queued"
    assert {"worker-0.1.eof", "worker-1.2.eof", "worker-2.1.eof"} <= \
        {p.name for p in records.glob("*.eof")}, "every trainer still running saw the end"
    assert_nothing_left(app_id)
    assert_hosts_left_empty(cluster)
