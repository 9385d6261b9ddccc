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
from pathlib import Path

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
                f"primus_python={base / 'venv' / 'bin' / 'python'} "
                f"primus_deploy_etc_dir={base / 'etc'} "
                f"primus_deploy_state_dir={base / 'state'} "
                f"primus_deploy_sudoers_file={sudoers_file(base)} "
                f"primus_deploy_ssh_host_key={host_key} "
                f"etcd_data_dir={base / 'etcd-data'} etcd_venv={base / 'etcd-venv'}")
    lines = ["[etcd]", *(host_line(i) for i in range(etcd)),
             "", "[primus]", *(host_line(i) for i in range(primus)),
             "", "[primus_server]", host_line(0), "",
             "[all:vars]", "ansible_user=root",
             f"ansible_ssh_private_key_file={cluster.key_file}",
             f"ansible_ssh_common_args='-o UserKnownHostsFile={cluster.known_hosts} "
             f"-o StrictHostKeyChecking=yes -o BatchMode=yes'",
             f"ansible_python_interpreter={DEPLOYED_PYTHON}",
             f"primus_deploy_base_python={DEPLOYED_PYTHON}",
             "primus_deploy_service_manager=daemon",
             f"primus_deploy_wheel={wheel}",
             f"primus_deploy_pip_args='--no-index --find-links {wheelhouse} --no-compile'",
             f"primus_deploy_pki_dir={root / 'pki'}",
             f"primus_deploy_server_tokens={root / 'tokens.yaml'}",
             f"primus_deploy_user_home={service_home(hosts_root or root / 'hosts')}",
             extra, ""]
    path.write_text("\n".join(lines))
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
