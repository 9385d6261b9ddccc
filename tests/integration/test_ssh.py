"""Applications on real sshd hosts (network namespaces), launched and controlled over SSH."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from primus.store.embedded import find_etcd_binary
from tests.support.apps import (
    assert_hosts_left_empty,
    command_lines,
    leftovers,
    primus_environments,
    status_json,
    write_job,
)
from tests.support.cluster import TestCluster
from tests.support.primus import REPO, run_primus
from tests.support.waiting import wait_until

HELLO = REPO / "examples" / "hello" / "job.yaml"


@pytest.fixture
def env(ssh_testbed, primus_env):
    return ssh_testbed.env(primus_env)


@pytest.fixture
def cluster(ssh_testbed) -> TestCluster:
    return ssh_testbed.cluster


def plans(env, app_id: str) -> dict[str, dict]:
    return {f"{e['plan']['role']}-{e['plan']['index']}": e["plan"]
            for role in status_json(env, app_id)["executors"].values() for e in role}


def etcd_keys(env) -> str:
    return subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", env["PRIMUS_ETCD"], "get",
         "--prefix", env["PRIMUS_PREFIX"], "--keys-only"], capture_output=True, text=True,
        check=True, env={**os.environ, "ETCDCTL_API": "3"}).stdout.strip()


def test_hello_runs_across_hosts_with_logs_fetched_over_ssh(env, cluster):
    result = run_primus(env, "submit", str(HELLO), "-i", str(cluster.inventory), "--wait")
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    placed = plans(env, app_id)
    assert sorted(p["host"] for p in placed.values()) == ["h1", "h2", "h3", "h4"]
    addresses = {h.name: h.address for h in cluster.hosts}
    assert all(p["address"] == addresses[p["host"]] for p in placed.values())
    cluster_spec = status_json(env, app_id)["cluster"]
    assert {m["address"] for m in cluster_spec["members"]} == set(addresses.values())
    logs = run_primus(env, "logs", app_id)
    assert logs.returncode == 0, logs.stderr
    for name in placed:
        assert f"[{name}] hello from {name}" in logs.stdout
    worker_host = next(h for h in cluster.hosts if h.name == placed["worker-1"]["host"])
    assert placed["worker-1"]["log_file"].startswith(str(worker_host.home))
    assert_hosts_left_empty(cluster)


def test_files_are_copied_to_every_host_and_trainers_run_beside_them(env, cluster, tmp_path):
    (tmp_path / "data.txt").write_text("shipped data\n")
    job = write_job(tmp_path / "job.yaml", """
name: shipped
files: [data.txt]
roles:
  - name: worker
    num: 2
    command: cat data.txt && pwd
""")
    result = run_primus(env, "submit", str(job), "-i", str(cluster.inventory), "--wait")
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()
    logs = run_primus(env, "logs", app_id).stdout
    for index in (0, 1):
        host = next(h for h in cluster.hosts
                    if h.name == plans(env, app_id)[f"worker-{index}"]["host"])
        assert f"[worker-{index}] shipped data" in logs
        assert f"[worker-{index}] {host.home}/apps/{app_id}/work" in logs


def test_kill_stops_processes_on_every_host(env, cluster, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: sleepers
policy: {stop_grace: 2s}
roles:
  - name: worker
    num: 4
    command: sleep 600
""")
    app_id = run_primus(env, "submit", str(job), "-i", str(cluster.inventory)).stdout.strip()
    wait_until(lambda: status_json(env, app_id)["status"]["state"] == "RUNNING", 60,
               "the application to run on every host")
    assert set(leftovers(cluster)) == {"h1", "h2", "h3", "h4"}
    result = run_primus(env, "kill", app_id)
    assert result.returncode == 0, result.stderr
    assert status_json(env, app_id)["status"]["state"] == "KILLED"
    assert_hosts_left_empty(cluster)


def test_am_runs_on_the_host_the_spec_names(env, cluster, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: remote-am
am: {host: h3}
roles:
  - name: worker
    command: "sleep 5"
""")
    app_id = run_primus(env, "submit", str(job), "-i", str(cluster.inventory)).stdout.strip()
    # The worker keeps the application (and so its AM) running while the AM is looked at.
    am_pid = wait_until(lambda: status_json(env, app_id)["am"], 30, "the AM to lead")["pid"]
    assert am_pid in cluster.hosts[2].pids()
    wait_until(lambda: status_json(env, app_id)["status"]["state"] == "SUCCEEDED", 60,
               "the application to succeed")
    assert "leading" in run_primus(env, "logs", app_id, "am").stdout


def _inventory(cluster: TestCluster, tmp_path: Path, host_line: str, **vars: str) -> Path:
    lines = ["[primus]", host_line, "", "[primus:vars]", "ansible_user=root",
             f"ansible_ssh_private_key_file={vars.pop('key', cluster.key_file)}",
             f"ansible_python_interpreter={vars.pop('python', os.sys.executable)}",
             "ansible_ssh_common_args='-o ConnectTimeout=2'"]
    path = tmp_path / "inventory.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def _other_key(tmp_path: Path) -> Path:
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@pytest.mark.parametrize(("case", "cause"), [
    ("unreachable", "timeout|no route to host"),  # ConnectTimeout=2 or ARP gives up first
    ("refused key", "authentication refused"),
    ("changed host key", "host key"),
    ("no primus", "Primus is not installed"),
    ("bad variable", "primus_slots"),
    ("malformed line", "inventory.ini:2: host h1"),
])
def test_bad_host_fails_before_anything_is_written_or_launched(env, cluster, tmp_path, case,
                                                               cause):
    assert_hosts_left_empty(cluster)  # what an earlier test ran there has ended
    h1 = cluster.hosts[0]
    host_line = f"h1 ansible_host={h1.address}"
    extra: dict[str, str] = {}
    if case == "unreachable":
        host_line = f"h1 ansible_host={cluster.unused_address()}"
    elif case == "refused key":
        extra["key"] = str(_other_key(tmp_path))
    elif case == "changed host key":
        wrong = tmp_path / "known_hosts"
        stranger = Path(f"{_other_key(tmp_path)}.pub").read_text().split()
        wrong.write_text(f"{h1.address} {stranger[0]} {stranger[1]}\n")
        env = {**env, "PRIMUS_SSH_KNOWN_HOSTS": str(wrong)}
    elif case == "no primus":
        extra["python"] = "/usr/bin/python3"
    elif case == "bad variable":
        host_line += " primus_slots=many"
    elif case == "malformed line":
        host_line = f"h1 ansible_host={h1.address} novalue"
    inventory = _inventory(cluster, tmp_path, host_line, **extra)
    result = run_primus(env, "submit", str(HELLO), "-i", str(inventory), timeout=60)
    assert result.returncode == 2, result.stderr
    assert re.search(cause, result.stderr), result.stderr
    assert "h1" in result.stderr or case == "malformed line"
    assert result.stdout == ""
    assert etcd_keys(env) == "", "nothing may be written for bad hosts"
    assert leftovers(cluster) == {}


def test_request_no_inventory_can_satisfy_fails_naming_role_and_resource(env, cluster, tmp_path):
    inventory = tmp_path / "slots.ini"
    inventory.write_text(cluster.inventory.read_text().replace(
        "[primus:vars]", "[primus:vars]\nprimus_slots=1"))
    result = run_primus(env, "submit", str(HELLO), "-i", str(inventory),
                        "--set", "roles.worker.num=3")
    assert result.returncode == 2
    assert "worker-2" in result.stderr and "slots" in result.stderr
    assert etcd_keys(env) == ""


def test_loopback_etcd_with_remote_hosts_is_refused(primus_env, ssh_testbed, etcd_server):
    env = ssh_testbed.env(primus_env, PRIMUS_ETCD=etcd_server.client_url)
    result = run_primus(env, "submit", str(HELLO), "-i", str(ssh_testbed.cluster.inventory))
    assert result.returncode == 2
    assert "reachable only on this host" in result.stderr


def test_hosts_list_resolves_without_connecting_and_check_probes(env, cluster, tmp_path):
    listed = run_primus(env, "hosts", "list", "-i", str(cluster.inventory), "-o", "json")
    assert listed.returncode == 0, listed.stderr
    hosts = json.loads(listed.stdout)
    assert [(h["name"], h["address"], h["launcher"]) for h in hosts] == [
        (h.name, h.address, "ssh") for h in cluster.hosts]
    assert hosts[0]["ssh"]["user"] == "root"
    checked = run_primus(env, "hosts", "check", "-i", str(cluster.inventory), "-o", "json")
    assert checked.returncode == 0, checked.stderr
    reports = json.loads(checked.stdout)
    assert all(r["ok"] and r["cpu"] >= 1 and r["memory"] > 0 for r in reports)
    broken = _inventory(cluster, tmp_path, f"h9 ansible_host={cluster.unused_address()}")
    failing = run_primus(env, "hosts", "check", "-i", str(broken), "-o", "json")
    assert failing.returncode == 1
    assert json.loads(failing.stdout)[0]["ok"] is False


def test_logs_follow_over_ssh_until_the_app_ends(env, cluster, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: chatty-remote
roles:
  - name: worker
    command: for i in 1 2 3; do echo line $i; sleep 0.5; done
""")
    app_id = run_primus(env, "submit", str(job), "-i", str(cluster.inventory)).stdout.strip()
    wait_until(lambda: status_json(env, app_id)["executors"]["worker"][0]["plan"], 30,
               "the worker to be planned")
    result = run_primus(env, "logs", app_id, "worker-0", "-f", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["line 1", "line 2", "line 3"]
    assert_hosts_left_empty(cluster)


def test_secret_env_reaches_trainers_but_never_etcd_logs_or_command_lines(env, cluster,
                                                                        tmp_path):
    secret = "s3cr3t-" + os.urandom(6).hex()
    out = tmp_path / "seen"
    out.mkdir()
    job = write_job(tmp_path / "job.yaml", f"""
name: secretive
secret_env: [PRIMUS_TEST_TOKEN]
roles:
  - name: worker
    num: 2
    command: echo "$PRIMUS_TEST_TOKEN" > {out}/$PRIMUS_INDEX; sleep 600
""")
    env = {**env, "PRIMUS_TEST_TOKEN": secret}
    app_id = run_primus(env, "submit", str(job), "-i", str(cluster.inventory)).stdout.strip()
    # A file exists once the shell's redirection made it, before echo wrote into it.
    wait_until(lambda: sum(1 for p in out.iterdir() if p.read_text().endswith("\n")) == 2, 60,
               "both trainers to write what they were given")
    assert {p.read_text().strip() for p in out.iterdir()} == {secret}
    assert not any(secret.encode() in cmdline for cmdline in command_lines())
    held = primus_environments(app_id)  # the AM here, agents and executors on the hosts
    assert {"primus.am", "primus.executor"} <= {kind for kind, _ in held}, held
    assert not [kind for kind, environ in held if secret in environ.values()], \
        "a Primus process has the secret in its environment"
    assert run_primus(env, "kill", app_id).returncode == 0
    dump = subprocess.run(
        [str(find_etcd_binary("etcdctl")), "--endpoints", env["PRIMUS_ETCD"], "get", "--prefix",
         env["PRIMUS_PREFIX"]], capture_output=True, text=True, check=True,
        env={**os.environ, "ETCDCTL_API": "3"}).stdout
    assert "PRIMUS_TEST_TOKEN" in dump and secret not in dump
    logs = run_primus(env, "logs", app_id, "--executor-log").stdout + run_primus(
        env, "logs", app_id, "am").stdout
    assert "registered" in logs and secret not in logs


def test_missing_secret_env_is_rejected_before_submitting(env, cluster, tmp_path):
    job = write_job(tmp_path / "job.yaml", """
name: secretive
secret_env: [PRIMUS_TEST_ABSENT_TOKEN]
roles:
  - name: worker
    command: "true"
""")
    result = run_primus(env, "submit", str(job), "-i", str(cluster.inventory))
    assert result.returncode == 2
    assert "secret_env[0]" in result.stderr and "PRIMUS_TEST_ABSENT_TOKEN" in result.stderr
    assert etcd_keys(env) == ""
