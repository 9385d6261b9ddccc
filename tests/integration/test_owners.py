"""A shared deployment, for real: applications run as their owners' accounts (alice, bob),
each with an etcd identity of its own, through a ``primus server`` that holds Primus's identity
(etcd's root role) and enters owners' accounts only through ``sudo``.

The server runs as root here (the suite does); etcd has auth on. Bob's trainer then tries
every credential and path it can reach, as an attacker would, while alice's application runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from primus.client.access import token_digest
from primus.client.identities import app_identity
from primus.config.etcd import EtcdConfig
from primus.config.site import Settings
from primus.private_files import write_private
from primus.state.keys import AppKeys, identity_start
from primus.state.records import (
    AmLeader,
    AppStatus,
    ExecutorPlan,
    Reservation,
    decode,
    encode,
)
from primus.store.api import StoreAuthError
from primus.store.embedded import start_etcd, stop_pid
from primus.store.etcd_store import EtcdCoordinator
from primus.store.pki import ensure_pki
from tests.integration.test_etcd_security import ROOT_PASSWORD, etcdctl_ok
from tests.support.apps import primus_environments, processes_of, status_json
from tests.support.owners import (
    GROUP,
    ensure_accounts,
    missing_parts,
    owners_python,
    owners_python_ok,
)
from tests.support.primus import REPO, run_primus
from tests.support.server import RunningServer, start_server
from tests.support.waiting import wait_until

PREFIX = "/primus"
TOKENS = {"alice": "alice-owner-3e1f", "bob": "bob-owner-9a2c", "carol": "carol-owner-77b0",
          "dave": "dave-owner-1c4d", "admin": "admin-owner-5f6e", "erin": "erin-owner-2b8a"}
"""dave has no account; carol's is not in the group; admin maps to root; erin's account is
made and removed by a test."""
ATTACKER = Path(__file__).with_name("owner_attacker.py")
SMALL_BUDGET = 300
"""Keys an application of the site's queue ``small`` may hold."""


@dataclass
class SharedSite:
    server: RunningServer
    etcd: str
    root: Path
    home: Path
    password_file: Path
    ca_cert: Path

    def env(self, user: str) -> dict[str, str]:
        """``user``'s ``primus`` command: the server and its token, nothing of etcd."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
        home = self.root / f"{user}-cli"
        home.mkdir(mode=0o700, exist_ok=True)
        env.update(PRIMUS_SERVER=self.server.address, PRIMUS_SERVER_CA=str(self.ca_cert),
                   PRIMUS_TOKEN=TOKENS[user],
                   PRIMUS_HOME=str(home), PRIMUS_CONF="-", COLUMNS="200")
        return env

    def store_config(self) -> EtcdConfig:
        return EtcdConfig(endpoints=(self.etcd,), user="root", password=ROOT_PASSWORD)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedSite]:
    assert not missing_parts(), f"the owners' tests need {missing_parts()}"
    ensure_accounts()
    python = owners_python()
    assert not owners_python_ok(python), owners_python_ok(python)
    root = tmp_path_factory.mktemp("owners")
    process, info = start_etcd(root / "etcd-data", root / "etcd.log")
    try:
        etcdctl_ok(info.client_url, "user", "add", f"root:{ROOT_PASSWORD}")
        etcdctl_ok(info.client_url, "auth", "enable")
        password_file = root / "etcd-password"
        password_file.write_text(ROOT_PASSWORD + "\n")
        password_file.chmod(0o600)
        tokens = root / "tokens.yaml"
        tokens.write_text("tokens:\n" + "".join(
            f"  - user: {user}\n    sha256: {token_digest(token)}\n"
            for user, token in TOKENS.items()) + "admins: [admin]\n")
        (root / "site.yaml").write_text(
            f"prefix: {PREFIX}\n"
            f"etcd:\n  endpoints: [{info.client_url}]\n  user: root\n"
            f"  password_file: {password_file}\n"
            f"server:\n  tokens: {tokens}\n"
            "accounts:\n  map: {admin: root}\n"
            # The queue of test_an_application_past_its_budget_...: a small budget of its own.
            f"queues:\n  default: {{}}\n  small: {{budget: {{keys: {SMALL_BUDGET}}}}}\n")
        home = root / "primus-home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
        env.update(PRIMUS_CONF=str(root / "site.yaml"), PRIMUS_HOME=str(home))
        pki = ensure_pki(root / "pki")
        server = start_server(env, root, "--tls-cert", str(pki.server_cert), "--tls-key",
                              str(pki.server_key), python=str(python))
        try:
            yield SharedSite(server, info.client_url, root, home, password_file, pki.ca_cert)
        finally:
            server.stop()
    finally:
        stop_pid(process.pid)


def submit(site: SharedSite, user: str, job: Path | str, *args: str, timeout: float = 180):
    return run_primus(site.env(user), "submit", str(job), *args, timeout=timeout)


def identities(site: SharedSite) -> list[str]:
    async def listed() -> list[str]:
        store = await EtcdCoordinator.connect(site.store_config())
        try:
            return await store.list_identities(identity_start(PREFIX))
        finally:
            await store.close()
    return asyncio.run(listed())


WHOAMI = """\
name: whoami
roles:
  - name: worker
    num: 2
    command: "id -un; env | grep -c '^PRIMUS_ETCD' || true; pwd"
"""


def test_an_application_runs_as_its_owner_with_an_identity_removed_at_its_end(site, tmp_path):
    job = tmp_path / "whoami.yaml"
    job.write_text(WHOAMI)
    result = submit(site, "alice", job, "--wait")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    app_id = result.stdout.strip().splitlines()[0]
    status = status_json(site.env("alice"), app_id)
    assert status["status"]["user"] == "alice" and status["status"]["account"] == "alice"
    logs = run_primus(site.env("alice"), "logs", app_id).stdout
    for index in (0, 1):
        assert f"[worker-{index}] alice" in logs, logs
        assert f"[worker-{index}] 0" in logs, logs  # no PRIMUS_ETCD_* in the trainer's env
    app_dir = Path("/home/alice/.primus/apps") / app_id
    assert stat.S_IMODE(app_dir.stat().st_mode) == 0o700
    assert app_dir.owner() == "alice" and (app_dir / "am.log").owner() == "alice"
    assert stat.S_IMODE((app_dir / "am.log").stat().st_mode) == 0o600
    wait_until(lambda: identity_start(PREFIX) + app_id not in identities(site), 30,
               f"the etcd identity of {app_id} to be removed once it ended")


SLEEPER = """\
name: victim
roles:
  - name: worker
    num: 2
    command: sleep 25
"""


def test_bobs_trainer_reaches_no_credential_path_or_process_of_alice_or_primus(site, tmp_path):
    """bob's trainer searches every process it can see for a credential: alice's and Primus's
    are out of its reach, and so is its own application's identity, which its executor, host
    agent, lease keeper and AM hold neither in their environment nor where the trainer may read
    or trace them. It gets its job's ``secret_env`` in its own environment. Handed the identity
    anyway, it reaches its own application's keys and nothing else."""
    victim_job = tmp_path / "victim.yaml"
    victim_job.write_text(SLEEPER)
    victim = submit(site, "alice", victim_job)
    assert victim.returncode == 0, victim.stderr
    victim_id = victim.stdout.strip().splitlines()[-1]
    wait_until(lambda: status_json(site.env("alice"), victim_id)["status"]["state"] ==
               "RUNNING", 60, f"{victim_id} to run")
    alice_dir = Path("/home/alice/.primus/apps") / victim_id
    targets = [site.home / "server" / "identity.key", site.password_file, site.root,
               alice_dir, alice_dir / "am.log", "/root"]
    handover = Path(tempfile.mkdtemp(prefix="bob-", dir="/tmp"))
    shutil.chown(handover, "bob")
    given = handover / "identity.json"
    attack_job = tmp_path / "attack.yaml"
    attack_job.write_text(
        "name: attack\nfiles: [owner_attacker.py]\nsecret_env: [PRIMUS_TEST_TOKEN]\n"
        "roles:\n  - name: worker\n    num: 1\n"
        f"    env: {{ATTACK_GIVEN: {given}}}\n"
        "    command: " + json.dumps(
            ["python3", "owner_attacker.py", str(_uid("alice")), victim_id,
             *map(str, targets)]) + "\n")
    (tmp_path / "owner_attacker.py").write_bytes(ATTACKER.read_bytes())
    token = "tok-" + os.urandom(8).hex()
    attack = run_primus({**site.env("bob"), "PRIMUS_TEST_TOKEN": token}, "submit",
                        str(attack_job), timeout=180)
    assert attack.returncode == 0, attack.stdout[-3000:] + attack.stderr[-3000:]
    attack_id = attack.stdout.strip().splitlines()[-1]
    found = wait_until(lambda: _said(site, attack_id, "ATTACK "), 90,
                       f"the attacker of {attack_id} to report")
    identity = app_identity(Settings(home=site.home, prefix=PREFIX), attack_id)
    # As root, which may read any process: its Primus processes' environments hold no secret.
    held = primus_environments(attack_id)
    assert {"primus.am", "primus.launcher.agent", "primus.executor"} <= {k for k, _ in held}
    for kind, environ in held:
        assert "PRIMUS_ETCD_PASSWORD" not in environ, f"{kind}: the password is in its environ"
        assert not {identity.password, token} & set(environ.values()), f"{kind}: a secret"
    write_private(given, json.dumps({"endpoint": site.etcd, "prefix": PREFIX,
                                     "user": identity.name,
                                     "password": identity.password}).encode())
    shutil.chown(given, "bob")
    assert found["uid"] == _uid("bob")
    assert found["my_etcd_env"] == [], "the trainer's environment names etcd credentials"
    assert found["my_secret_env"] == token, "the trainer did not get its secret_env"
    assert found["leaked_environ"] == [], "another account's environment was readable"
    assert found["read_fd_dirs"] == [] and found["signalled"] == [], found
    assert found["read_files"] == [], "read: " + ", ".join(found["read_files"])
    assert found["my_credentials"] is None, "the trainer found its application's identity"
    mine = found["my_primus_processes"]
    assert any("primus.executor" in p["title"] for p in mine), mine
    exposed = [p for p in mine if p["environ"] or p["mem"] or p["fd_dir"] or p["traced"]]
    assert exposed == [], f"readable or traceable by the trainer: {exposed}"
    wait_until(lambda: status_json(site.env("bob"), attack_id)["status"]["state"] in (
        "SUCCEEDED", "FAILED", "KILLED"), 90, f"{attack_id} to end")
    tried = _said(site, attack_id, "GIVEN ")
    assert tried and tried["own_status"] == 200, tried
    refused = {name: code for name, code in tried.items() if name != "own_status"}
    for name in ("victim_status", "victim_kill", "shared_host", "whole_prefix", "users"):
        assert refused[name] != 200, f"{name}: etcd answered 200"
    wait_until(lambda: status_json(site.env("alice"), victim_id)["status"]["state"] in (
        "SUCCEEDED", "FAILED", "KILLED"), 90, f"{victim_id} to end")
    assert status_json(site.env("alice"), victim_id)["status"]["state"] == "SUCCEEDED"
    shutil.rmtree(handover)


def _said(site: SharedSite, app_id: str, marker: str) -> dict | None:
    """The JSON after ``marker`` on a line of bob's application's output, if it is there."""
    logs = run_primus(site.env("bob"), "logs", app_id).stdout
    line = next((line for line in logs.splitlines() if marker in line), None)
    return json.loads(line.split(marker, 1)[1]) if line else None


def _uid(account: str) -> int:
    import pwd  # noqa: PLC0415

    return pwd.getpwnam(account).pw_uid


@pytest.mark.parametrize(("user", "why"), [
    ("dave", f"user 'dave': account 'dave' does not exist on {socket.gethostname()}"),
    ("carol", f"user 'carol': account 'carol' is not in group '{GROUP}' on "
              f"{socket.gethostname()}"),
    ("admin", "user 'admin': account 'root' is banned"),
])
def test_a_user_primus_may_not_act_as_is_refused_before_anything_is_written(site, user, why):
    before = run_primus(site.env("alice"), "list", "--all", "-o", "json")
    result = submit(site, user, REPO / "examples" / "hello" / "job.yaml")
    assert result.returncode != 0
    assert why in result.stderr, result.stderr
    after = run_primus(site.env("alice"), "list", "--all", "-o", "json")
    assert json.loads(after.stdout) == json.loads(before.stdout)


REMOVED = """\
name: removed
roles:
  - name: worker
    num: 2
    command: "if [ $PRIMUS_INDEX = 0 ]; then while [ ! -e {trigger} ]; do sleep 0.1; done;
      exit 1; fi; sleep 60"
    restart_policy: on_failure
    max_failures: 2
"""


def test_an_account_removed_while_its_application_runs_fails_what_starts_next(site, tmp_path):
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", "-G", GROUP, "erin"], check=True)
    trigger = Path(tempfile.mkdtemp(prefix="erin-", dir="/tmp")) / "go"
    trigger.parent.chmod(0o755)
    job = tmp_path / "removed.yaml"
    job.write_text(REMOVED.format(trigger=trigger))
    try:
        submitted = submit(site, "erin", job)
        assert submitted.returncode == 0, submitted.stderr
        app_id = submitted.stdout.strip().splitlines()[-1]
        wait_until(lambda: status_json(site.env("erin"), app_id)["status"]["state"] ==
                   "RUNNING", 60, f"{app_id} to run")
    finally:
        subprocess.run(["userdel", "-f", "erin"], check=True)
    trigger.touch()  # worker-0's trainer fails; its restart would start as erin
    wait_until(lambda: status_json(site.env("alice"), app_id)["status"]["state"] in (
        "SUCCEEDED", "FAILED", "KILLED"), 90, f"{app_id} to end")
    shown = status_json(site.env("alice"), app_id)
    assert shown["status"]["state"] == "FAILED"
    assert "no longer exists" in json.dumps(shown), json.dumps(shown)[-3000:]


def test_a_job_naming_paths_of_primus_or_alice_gets_nothing_of_them(site, tmp_path):
    """bob's job names, as its data source, Primus's etcd password file, and, as its workdir,
    alice's application directory: Primus reads neither for him."""
    alice_work = Path("/home/alice/.primus/apps")
    before = sorted(p.name for p in alice_work.iterdir())
    job = tmp_path / "greedy.yaml"
    job.write_text(
        "name: greedy\nroles:\n  - name: worker\n    num: 1\n    command: cat\n"
        f"data:\n  - name: stolen\n    roles: [worker]\n    sources: [{{path: "
        f"{site.password_file}}}]\n    format: text\n")
    refused = submit(site, "bob", job, "--wait")
    assert refused.returncode != 0
    assert ROOT_PASSWORD not in refused.stdout + refused.stderr
    job.write_text("name: trespass\nroles:\n  - name: worker\n    num: 1\n"
                   f"    command: touch planted\nworkdir: {alice_work}\n")
    trespass = submit(site, "bob", job, "--wait")
    assert trespass.returncode != 0, trespass.stdout
    assert sorted(p.name for p in alice_work.iterdir()) == before
    assert not (alice_work / "planted").exists()


FORGER = """\
name: forger
roles:
  - name: worker
    num: 1
    command: "echo bob-was-here; sleep 60"
"""


def test_every_fact_bobs_identity_can_write_is_refused_or_ignored_by_the_server(site, tmp_path):
    """bob holds his application's identity (given here: the defence in depth keeps it from
    his trainer) and rewrites what it can write. The server's record, spec, hosts and people's
    requests are refused by etcd; what it may write (its status, a plan, its leader record, a
    log link in its own directory) the server displays as the record says and never follows:
    bob is listed as bob, his logs are read as bob at paths the server builds (nothing of
    alice's or of Primus's is served), and an AM the server starts for him runs as bob."""
    alice_job = tmp_path / "alice.yaml"
    alice_job.write_text(FORGER.replace("forger", "alice-job"))
    alice_id = submit(site, "alice", alice_job).stdout.strip().splitlines()[-1]
    job = tmp_path / "forger.yaml"
    job.write_text(FORGER)
    submitted = submit(site, "bob", job)
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip().splitlines()[-1]
    for who, app in (("bob", app_id), ("alice", alice_id)):
        wait_until(lambda who=who, app=app: "bob-was-here" in run_primus(
            site.env(who), "logs", app).stdout, 60, f"{app} to run")
    alice_log = Path("/home/alice/.primus/apps") / alice_id / "am.log"
    keys = AppKeys(PREFIX, app_id)
    identity = app_identity(Settings(home=site.home, prefix=PREFIX), app_id)

    async def forge() -> dict[str, str]:
        store = await EtcdCoordinator.connect(dataclasses.replace(
            site.store_config(), user=identity.name, password=identity.password))
        refused = {}
        try:
            for key in (keys.owner, keys.spec, keys.hosts, keys.kill, keys.desired("worker"),
                        keys.change(99), keys.scheduler.config, AppKeys(PREFIX, alice_id).status):
                try:
                    await store.put(key, b"{}")
                    refused[key] = "written"
                except StoreAuthError as exc:
                    refused[key] = str(exc)
            status = decode(AppStatus, (await store.get(keys.status)).value)
            await store.put(keys.status, encode(status.model_copy(update={
                "user": "alice", "account": "", "name": "alice-job"})))
            plan_key = keys.executor("worker", 0, "plan")
            plan = decode(ExecutorPlan, (await store.get(plan_key)).value)
            await store.put(plan_key, encode(plan.model_copy(update={
                "log_file": str(alice_log), "executor_log": str(site.password_file)})))
            leader_kv = await store.get(keys.leader)  # kept on its AM's lease
            leader = decode(AmLeader, leader_kv.value)
            await store.put(keys.leader, encode(leader.model_copy(update={
                "log_file": str(site.password_file)})), lease=leader_kv.lease)
            # A reservation of every GPU and core of this host, which no leader sealed.
            await store.put(keys.scheduler.reservation(app_id, "worker", 7), encode(
                Reservation(app_id=app_id, user="alice", queue="", role="worker", index=7,
                            host=socket.gethostname(), cpu=1e6, memory=1 << 50,
                            gpus=list(range(64)), since=0.0)))
        finally:
            await store.close()
        return refused

    refused = asyncio.run(forge())
    assert {key: why for key, why in refused.items() if "permission denied" not in why} == {}
    # bob's own log replaced by a link to a file of Primus's: not followed.
    link = Path("/home/bob/.primus/apps") / app_id / "worker-0.executor.log"
    link.unlink()
    link.symlink_to(site.password_file)
    os.lchown(link, _uid("bob"), -1)

    listed = json.loads(run_primus(site.env("alice"), "list", "-o", "json").stdout)
    mine = next(app for app in listed if app["app_id"] == app_id)
    assert (mine["user"], mine["name"]) == ("bob", "forger")
    shown = status_json(site.env("bob"), app_id)["status"]
    assert (shown["user"], shown["account"]) == ("bob", "bob")
    served = "".join(run_primus(site.env("bob"), "logs", app_id, *args).stdout +
                     run_primus(site.env("bob"), "logs", app_id, *args).stderr
                     for args in ([], ["worker-0", "--executor-log"], ["am"]))
    assert "bob-was-here" in served
    assert ROOT_PASSWORD not in served and alice_id not in served, served[-2000:]
    assert "symbolic link" in served, served[-2000:]
    forged = keys.scheduler.reservation(app_id, "worker", 7)
    wait_until(lambda: any(forged in e["message"] and e["kind"] == "refused" for e in
                           status_json(site.env("bob"), app_id)["events"]), 30,
               "the admission leader to record that it did not believe the reservation")
    recovered = run_primus(site.env("bob"), "recover", app_id)
    assert recovered.returncode == 0, recovered.stderr
    wait_until(lambda: len(_am_processes(app_id)) == 2, 30, "the recovered AM to start")
    assert {p.username() for p in _am_processes(app_id)} == {"bob"}, \
        "an AM of bob's ran as another account"
    # Every AM killed: once the leader's lease has lapsed, the AM keeper starts one, as bob.
    killed = _am_processes(app_id)
    for process in killed:
        process.kill()
    psutil.wait_procs(killed, timeout=10)
    revived = wait_until(lambda: _am_processes(app_id), 60, "the AM keeper to start an AM")
    assert {p.username() for p in revived} == {"bob"}, "the keeper's AM ran as another account"
    run_primus(site.env("bob"), "kill", app_id)
    run_primus(site.env("alice"), "kill", alice_id)

    def archived() -> dict | None:
        listed = json.loads(run_primus(site.env("alice"), "list", "--all", "-o", "json").stdout)
        return next((app for app in listed if app["app_id"] == app_id and app["archived"]),
                    None)

    # The history records whose it is from the server's record, not from the forged status.
    record = wait_until(archived, 60, f"{app_id} to be archived")
    assert (record["user"], record["name"]) == ("bob", "forger")


def _am_processes(app_id: str) -> list[psutil.Process]:
    """The AM processes of ``app_id`` on this machine."""
    return [process for process in psutil.process_iter(["cmdline"])
            if "primus.am" in (process.info["cmdline"] or [])
            and app_id in (process.info["cmdline"] or [])]


def test_an_application_past_its_budget_loses_write_and_fails_and_no_other_does(site, tmp_path):
    """bob, holding his application's identity, writes keys as fast as etcd takes them: once
    his application holds more than its queue's budget, its identity may write nothing more,
    it fails naming the budget and its processes stop; alice's application runs on to its
    end, and etcd holds a few hundred of bob's keys, not what he tried to write."""
    alice_job = tmp_path / "alice.yaml"
    alice_job.write_text("name: steady\nroles:\n  - name: worker\n    num: 1\n"
                         "    command: sleep 8\n")
    alice_id = submit(site, "alice", alice_job).stdout.strip().splitlines()[-1]
    job = tmp_path / "flood.yaml"
    job.write_text(FORGER.replace("name: forger", "name: flood\nqueue: small"))
    submitted = submit(site, "bob", job)
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip().splitlines()[-1]
    wait_until(lambda: "bob-was-here" in run_primus(site.env("bob"), "logs", app_id).stdout,
               60, f"{app_id} to run")
    keys = AppKeys(PREFIX, app_id)
    identity = app_identity(Settings(home=site.home, prefix=PREFIX), app_id)

    async def flood() -> tuple[int, str]:
        store = await EtcdCoordinator.connect(dataclasses.replace(
            site.store_config(), user=identity.name, password=identity.password))
        try:
            for n in range(100 * SMALL_BUDGET):
                try:
                    await store.put(f"{keys.data}flood/{n:08d}", b"x" * 1024)
                except StoreAuthError as exc:
                    return n, str(exc)
            return 100 * SMALL_BUDGET, "never refused"
        finally:
            await store.close()

    written, refusal = asyncio.run(flood())
    assert "permission denied" in refusal, refusal
    assert written < 10 * SMALL_BUDGET, f"{written} keys written before the identity lost write"
    wait_until(lambda: status_json(site.env("bob"), app_id)["status"]["state"] == "FAILED",
               60, f"{app_id} to be failed")
    diagnosis = status_json(site.env("bob"), app_id)["status"]["diagnosis"]
    assert "over its etcd budget (the budget of queue small)" in diagnosis, diagnosis
    assert f"over its budget of {SMALL_BUDGET}" in diagnosis, diagnosis
    wait_until(lambda: not processes_of(app_id), 60, f"the processes of {app_id} to stop")
    wait_until(lambda: status_json(site.env("alice"), alice_id)["status"]["state"] in (
        "SUCCEEDED", "FAILED", "KILLED"), 90, f"{alice_id} to end")
    assert status_json(site.env("alice"), alice_id)["status"]["state"] == "SUCCEEDED"
