"""The deployment playbook against test hosts, for tests/integration/test_deploy.py and
bench/bench_deploy.py: the inventory both the playbook and Primus read, the wheelhouse the hosts
install from, running ``ansible-playbook`` and reading its recap."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from primus.store.embedded import free_port
from tests.support.cluster import TestCluster
from tests.support.primus import REPO

PLAYBOOK = REPO / "deploy" / "ansible" / "site.yml"
DEPLOYED_PYTHON = Path("/usr/bin/python3")
"""What the test hosts' venvs are made with, and what runs Ansible's modules there: Debian's
Python, which every account may run, as a real host's own. The deployment tests make some 600
module runs; over a first deployment one cost 0.15 CPU-s with it, 0.30 with the CI machine's
pyenv Python (built without optimizations, as a shared library)."""
VENV_BIN = Path(sys.executable).parent
ANSIBLE_ENV = {"ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_RETRY_FILES_ENABLED": "0",
               "ANSIBLE_PIPELINING": "1", "ANSIBLE_FORKS": "8"}
"""How the tests and the benchmark run Ansible: strict host keys, plain output, pipelining."""


def run_playbook(inventory: Path, *args: str, timeout: float = 420
                 ) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook -i inventory deploy/ansible/site.yml args…``, output captured; one
    that runs past ``timeout`` fails with the tail of what it printed (which task it was on)."""
    try:
        return subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
                               str(PLAYBOOK), *args], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **ANSIBLE_ENV})
    except subprocess.TimeoutExpired as exc:
        said = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else \
            exc.stdout or ""
        raise AssertionError(f"ansible-playbook ran past {timeout:g}s; its output ends:\n"
                             f"{said[-5000:]}") from None


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP's counts per host."""
    counts = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", stdout, re.MULTILINE):
        counts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
    return counts


def changed_tasks(stdout: str) -> list[str]:
    """The tasks that reported a change, with the hosts: ``TASK name: changed: [host]``."""
    changed, task = [], ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line.split("]", 1)[0][6:]
        elif line.startswith("changed: ["):
            changed.append(f"{task}: {line.split(' =>')[0]}")
    return changed


def write_inventory(path: Path, cluster: TestCluster, root: Path, wheel: Path,
                    wheelhouse: Path, etcd: int = 3, extra: str = "", primus: int = 4,
                    hosts_root: Path | None = None) -> Path:
    """The inventory the playbook and Primus both read: etcd on the first ``etcd`` hosts,
    Primus on the first ``primus``, the server on h1. The test hosts share this machine's file
    system, so each host's directories are its own (under ``hosts_root/<name>``, default
    ``root/hosts``), its sudo rule too; its SSH host key is the test sshd's. Their venvs are
    made with Debian's Python, which the server's service account and the owners can run."""
    def host_line(index: int) -> str:
        host = cluster.hosts[index]
        base = (hosts_root or root / "hosts") / host.name
        host_key = cluster.root / host.name / "ssh_host_ed25519_key.pub"
        return (f"{host.name} ansible_host={host.address} primus_home={base / 'home'} "
                f"{_host_directories(base)} primus_deploy_ssh_host_key={host_key}")
    lines = ["[etcd]", *(host_line(i) for i in range(etcd)),
             "", "[primus]", *(host_line(i) for i in range(primus)),
             "", "[primus_server]", host_line(0), "",
             "[all:vars]", "ansible_user=root",
             f"ansible_ssh_private_key_file={cluster.key_file}",
             f"ansible_ssh_common_args='-o UserKnownHostsFile={cluster.known_hosts} "
             f"-o StrictHostKeyChecking=yes -o BatchMode=yes'",
             *_site_variables(root, wheel, wheelhouse, hosts_root or root / "hosts"),
             extra, ""]
    path.write_text("\n".join(lines))
    return path


@dataclass(frozen=True)
class SitePorts:
    """The ports of a site deployed on this machine itself, beside everything else here."""

    etcd_client: int
    etcd_peer: int
    api: int
    ui: int

    @classmethod
    def free(cls) -> SitePorts:
        return cls(*(free_port() for _ in range(4)))


def write_one_host_inventory(path: Path, root: Path, base: Path, wheel: Path,
                             wheelhouse: Path, ports: SitePorts) -> Path:
    """The inventory of a site of one host, this machine, reached with
    ``ansible_connection=local`` (docs/deploy.md, "Try a shared site on one host"). The
    documented inventory, and every path and port of the site moved aside: the directories
    under ``base``, its sudo rule a file of its own, every listener on loopback at ``ports``."""
    lines = ["[etcd]", f"site ansible_connection=local {_host_directories(base)}",
             "", "[primus]", "site", "", "[primus_server]", "site", "",
             "[all:vars]", *_site_variables(root, wheel, wheelhouse, base),
             f"etcd_client_port={ports.etcd_client}", f"etcd_peer_port={ports.etcd_peer}",
             f"primus_deploy_server_listen=127.0.0.1:{ports.api}",
             f"primus_deploy_server_ui_listen=127.0.0.1:{ports.ui}", ""]
    path.write_text("\n".join(lines))
    return path


def _host_directories(base: Path) -> str:
    """A host's variables that put its directories under ``base``, its sudo rule too (the
    test hosts, and a site on this machine, share this machine's file system)."""
    return (f"primus_python={base / 'venv' / 'bin' / 'python'} "
            f"primus_deploy_etc_dir={base / 'etc'} "
            f"primus_deploy_state_dir={base / 'state'} "
            f"primus_deploy_sudoers_file={sudoers_file(base)} "
            f"etcd_data_dir={base / 'etcd-data'} etcd_venv={base / 'etcd-venv'}")


def _site_variables(root: Path, wheel: Path, wheelhouse: Path, hosts_root: Path) -> list[str]:
    """The variables of every test deployment: Debian's Python for the modules and the venvs,
    supervised daemons (no systemd here), the wheelhouse (no index), the controller's files
    (the certificates, and the tokens file the caller writes there) under ``root``."""
    return [f"ansible_python_interpreter={DEPLOYED_PYTHON}",
            f"primus_deploy_base_python={DEPLOYED_PYTHON}",
            "primus_deploy_service_manager=daemon",
            f"primus_deploy_wheel={wheel}",
            f"primus_deploy_pip_args='--no-index --find-links {wheelhouse} --no-compile'",
            f"primus_deploy_pki_dir={root / 'pki'}",
            f"primus_deploy_server_tokens={root / 'tokens.yaml'}",
            f"primus_deploy_user_home={service_home(hosts_root)}"]


def token_of(user: str) -> str:
    """The API token of ``user`` (alice or bob) on a test deployment."""
    return f"{user}-deploy-token"


def write_tokens(path: Path) -> Path:
    """The tokens file of a test deployment: alice (an admin) and bob."""
    from primus.client.access import token_digest  # noqa: PLC0415 - the server's own digest

    path.write_text("tokens:\n" + "".join(
        f"  - user: {user}\n    sha256: {token_digest(token_of(user))}\n"
        for user in ("alice", "bob")) + "admins: [alice]\n")
    return path


def service_home(hosts_root: Path) -> Path:
    """The home of a deployment's service account on its hosts (:class:`TestCluster` ``homes``):
    one for its hosts, whose authorized key is the deployment's own."""
    return hosts_root / "service-home"


def sudoers_file(base: Path) -> Path:
    """The sudo rule of the host whose directories are under ``base`` (``/etc/sudoers.d``
    is this machine's, shared by every test host)."""
    return Path("/etc/sudoers.d") / ("primus-test-" + hashlib.sha1(
        str(base).encode()).hexdigest()[:12])


def build_wheelhouse(directory: Path) -> Path:
    """Primus's wheel built from this checkout, and its dependencies' wheels beside it (the
    test hosts have no way to a package index); return Primus's wheel."""
    directory.mkdir(parents=True, exist_ok=True)
    # setuptools copies a module into build/lib only when it is newer than the copy there, so a
    # checkout's build/ left by an earlier wheel can put old code in this one.
    shutil.rmtree(REPO / "build", ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # Built with this venv's setuptools (no isolated build environment: 3 s less each).
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(directory),
                    str(REPO)], check=True, timeout=300)
    wheel = next(directory.glob("primus-*.whl"))
    subprocess.run([*pip, "download", "-d", str(directory), "--only-binary=:all:", str(wheel)],
                   check=True, timeout=600)
    return wheel
