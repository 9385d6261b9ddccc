"""Straggler rescheduling with real executors, trainers and a data stream, on three hosts of
this machine (local launcher, each its own Primus home): the trainer on one host reads twenty
times slower; its executor is relaunched on the spare host, its task resumes at its
checkpoint, and the stream ends with every record delivered and each task done once."""

from __future__ import annotations

import collections
import json
import sys

from tests.support.apps import assert_nothing_left, write_job
from tests.support.data import TRAINER, make_text_files, received_lines, wait_for_end
from tests.support.primus import run_primus


def straggling_job(tmp_path, records, slow_home: str, workers: int, max_percent: int):
    """A job of ``workers`` readers, one a host, whose trainer reads twenty times slower where
    ``PRIMUS_HOME`` is ``slow_home``, with straggler rescheduling on a 2 s window."""
    command = json.dumps([sys.executable, str(TRAINER), str(records), "--read-size", "4096",
                          "--delay", "0.02", "--slow-home", slow_home, "--slow-delay", "0.4"])
    return write_job(tmp_path / "job.yaml", f"""
name: straggling
policy: {{stop_grace: 1s}}
roles:
  - name: worker
    num: {workers}
    max_per_host: 1
    command: {command}
    straggler: {{factor: 3, window: 2s, max_percent: {max_percent}}}
data:
  - name: train
    roles: [worker]
    sources: [{{path: {tmp_path}/data/*.txt}}]
    chunk_size: 16Ki
    checkpoint_records: 20
    checkpoint_interval: 1s
""")


def test_a_slow_reader_is_moved_to_the_spare_host_and_the_stream_completes(
        primus_env, tmp_path):
    source = make_text_files(tmp_path / "data", files=8, lines=2000)
    records = tmp_path / "records"
    records.mkdir()
    homes = {name: tmp_path / name for name in ("slow", "fast", "spare")}
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("".join(f"{name} ansible_connection=local primus_home={home}\n"
                                 for name, home in homes.items()))
    job = straggling_job(tmp_path, records, str(homes["slow"]), workers=2, max_percent=50)
    result = run_primus(primus_env, "submit", str(job), "-i", str(inventory))
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()

    status = wait_for_end(primus_env, app_id, timeout=180)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    moved = [e["message"] for e in status["events"] if "straggler: read" in e["message"]]
    assert moved and "moved off slow" in moved[0], [e["message"] for e in status["events"]]
    assert "against its role's median" in moved[0]
    hosts = {e["plan"]["host"] for e in status["executors"]["worker"]}
    assert "slow" not in hosts and "spare" in hosts, hosts
    got = collections.Counter(received_lines(records))
    assert [line for line in source if got[line] == 0] == [], "a record never arrived"
    stats = status["data"]["train"]
    assert (stats["done"], stats["failed"]) == (stats["tasks"], 0), "each task done once"
    assert_nothing_left(app_id)


def test_a_slow_reader_on_an_ssh_host_is_moved_to_the_spare_host(ssh_testbed, primus_env,
                                                                   tmp_path):
    """The same over SSH: three workers on three of the four test hosts, h1's trainer twenty
    times slower; its executor goes to the host left."""
    cluster = ssh_testbed.cluster
    env = ssh_testbed.env(primus_env)
    source = make_text_files(tmp_path / "data", files=8, lines=8000)
    records = tmp_path / "records"
    records.mkdir()
    slow = next(h for h in cluster.hosts if h.name == "h1")
    job = straggling_job(tmp_path, records, str(slow.home), workers=3, max_percent=34)
    result = run_primus(env, "submit", str(job), "-i", str(cluster.inventory))
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()

    status = wait_for_end(env, app_id, timeout=180)

    assert status["status"]["state"] == "SUCCEEDED", status["status"]
    moved = [e["message"] for e in status["events"] if "straggler: read" in e["message"]]
    assert moved and "moved off h1" in moved[0], [e["message"] for e in status["events"]]
    assert {e["plan"]["host"] for e in status["executors"]["worker"]} == {"h2", "h3", "h4"}
    got = collections.Counter(received_lines(records))
    assert [line for line in source if got[line] == 0] == [], "a record never arrived"
    stats = status["data"]["train"]
    assert (stats["done"], stats["failed"]) == (stats["tasks"], 0), "each task done once"
