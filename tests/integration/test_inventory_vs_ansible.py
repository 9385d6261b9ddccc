"""An inventory means to Primus what it means to Ansible.

Each case is resolved twice: by the real ``ansible-inventory --list`` (ansible-core, from the
``test`` extra) and by :func:`load_inventory`. The hosts, each host's groups and every group's
hosts must agree. So must the variables Primus reads (``ansible_*`` and ``primus_*``): Ansible's
resolved ``_meta.hostvars``, written out as a flat inventory with no groups and no precedence to
decide, must load into the same hosts as the original file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from primus.config.inventory import Host, load_inventory

pytestmark = pytest.mark.integration

ANSIBLE_INVENTORY = Path(sys.executable).with_name("ansible-inventory")

INI_NESTED = """\
# ungrouped hosts come before any section
login0 ansible_host=10.0.0.2 ansible_connection=local
edge:2201 ansible_user=ops

[gpu]
gpu[01:04].example primus_gpus=8 primus_memory=64Gi
gpu[08:12:2].example ansible_port=2222
gpu01.example primus_slots=4 primus_labels=a100,nvlink # listed again: one host, two lines

[gpu:vars]
primus_slots=8
primus_cpu=32
ansible_user=trainer
ansible_ssh_common_args='-o StrictHostKeyChecking=yes'

[cpu]
node[a:c] primus_labels="['highmem']"
node[01:02]-rack[1:2]

[cpu:vars]
primus_slots=2
primus_cpu=0.5

[fast]
gpu02.example
nodea

[fast:vars]
primus_slots=16
primus_python=/fast/python
ansible_ssh_extra_args="-o ServerAliveInterval=5 -o 'ProxyJump bastion'"
ansible_group_priority=5

[slow]
gpu02.example
nodeb

[slow:vars]
primus_slots=1
primus_python=/slow/python

[compute:children]
gpu
cpu

[compute:vars]
ansible_python_interpreter=/opt/venv/bin/python
primus_home=/scratch/primus
ansible_user=compute

[primus:children]
compute

[all:vars]
ansible_user=root
primus_memory=512G
ansible_ssh_private_key_file=~/.ssh/cluster
"""

YAML_NESTED = """\
all:
  vars:
    ansible_user: root
    primus_memory: 17179869184
  hosts:
    login0:
      ansible_connection: local
      primus_python: /usr/bin/python3.11
  children:
    primus:
      children:
        gpu:
          hosts:
            gpu[1:3]:
              primus_gpus: 4
            "gpu9:2022":
          vars:
            primus_slots: 4
            primus_labels: [a100, nvlink]
            ansible_python_interpreter: auto_silent
        cpu:
          hosts: cpu01
          vars:
            primus_cpu: 96
            primus_slots: 2
      vars:
        ansible_user: primus
        primus_slots: 1
        ansible_port: 2200
    maintenance:
      hosts:
        gpu2:
          ansible_host: 10.1.0.2
      vars:
        primus_slots: 3
        ansible_ssh_common_args: -o ConnectTimeout=5
    gpu:
      hosts:
        gpu5:
"""

INI_WITH_VARS_DIRS = """\
[gpu]
gpu[01:03]

[gpu:vars]
primus_slots=8
ansible_user=from-inventory-group

[infiniband]
gpu02
gpu03

[primus:children]
gpu

[all:vars]
primus_slots=1
primus_gpus=2
"""

VARS_FILES = {
    # group_vars/all wins over [gpu:vars] in the file: Ansible's default precedence.
    "group_vars/all.yml": "ansible_user: from-group-vars-all\nprimus_cpu: 16\n",
    "group_vars/gpu/10-base.yml": "primus_gpus: 8\nprimus_labels: base\n",
    "group_vars/gpu/20-override.yaml": "primus_labels: [override]\n",
    "group_vars/gpu/.hidden.yml": "primus_gpus: 99\n",
    "group_vars/infiniband.json": json.dumps({"primus_labels": "ib,fast", "primus_slots": 6}),
    "group_vars/unused_group.yml": "primus_slots: 1000\n",
    "host_vars/gpu03": "primus_slots: 2\nansible_host: 192.0.2.3\n",
    "host_vars/gpu02.yml": "ansible_port: 2022\n",
}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    file_name: str
    text: str
    vars_files: dict[str, str] = dataclasses.field(default_factory=dict)


CASES = [
    Case("ini-nested", "hosts", INI_NESTED),
    Case("ini-suffix", "cluster.ini", INI_NESTED),
    Case("yaml-nested", "cluster.yml", YAML_NESTED),
    Case("yaml-no-suffix", "inventory", YAML_NESTED),
    Case("ini-with-vars-dirs", "hosts", INI_WITH_VARS_DIRS, VARS_FILES),
    Case("yaml-with-vars-dirs", "hosts.yaml",
         "all:\n  children:\n    gpu:\n      hosts: {gpu01: , gpu02: , gpu03: }\n"
         "      vars: {primus_slots: 8}\n    infiniband:\n      hosts: {gpu02: , gpu03: }\n",
         VARS_FILES),
]


def ansible_inventory(path: Path, tmp_path: Path) -> dict[str, Any]:
    """``ansible-inventory -i path --list`` as JSON, isolated from the user's Ansible setup."""
    workdir = tmp_path / "cwd"  # no ansible.cfg, group_vars or host_vars here
    workdir.mkdir()
    (workdir / "ansible.cfg").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(workdir / "ansible.cfg"),
               ANSIBLE_HOME=str(tmp_path / "ansible-home"))
    result = subprocess.run([str(ANSIBLE_INVENTORY), "-i", str(path), "--list"], cwd=workdir,
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def group_members(listing: dict[str, Any]) -> dict[str, set[str]]:
    """Every group's hosts, transitively, from ``--list`` output (which lists direct ones)."""

    def members(group: str) -> set[str]:
        entry = listing.get(group, {})
        return set(entry.get("hosts", [])).union(*map(members, entry.get("children", [])))

    return {group: members(group) for group in listing if group != "_meta"}


def without_groups(hosts: tuple[Host, ...]) -> dict[str, Host]:
    return {host.name: dataclasses.replace(host, groups=frozenset()) for host in hosts}


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    case: Case = request.param
    inventory_dir = tmp_path / "inventory"
    for relative, text in {case.file_name: case.text, **case.vars_files}.items():
        (inventory_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (inventory_dir / relative).write_text(text)
    return inventory_dir / case.file_name


def test_ansible_inventory_is_installed() -> None:
    assert ANSIBLE_INVENTORY.exists(), "pip install -e .[test] installs ansible-core"


def test_hosts_and_their_groups_are_the_ones_ansible_resolves(case_file: Path,
                                                              tmp_path: Path) -> None:
    listing = ansible_inventory(case_file, tmp_path)
    members = group_members(listing)
    ours = load_inventory(case_file, group="all")

    assert {host.name for host in ours.hosts} == members["all"]
    assert len(ours.hosts) == len(members["all"])
    for host in ours.hosts:
        assert host.groups == {group for group, names in members.items() if host.name in names}
    for group, names in members.items():
        if names:
            assert {host.name for host in load_inventory(case_file, group=group).hosts} == names


def test_variables_primus_reads_have_the_values_ansible_resolves(case_file: Path,
                                                                 tmp_path: Path) -> None:
    listing = ansible_inventory(case_file, tmp_path)
    hostvars = {name: listing["_meta"]["hostvars"].get(name, {})
                for name in group_members(listing)["all"]}
    assert any(hostvars.values())
    flat = tmp_path / "resolved-by-ansible.json"  # JSON is YAML: all: {hosts: {name: vars}}
    flat.write_text(json.dumps({"all": {"hosts": hostvars}}))

    expected = without_groups(load_inventory(flat).hosts)
    assert without_groups(load_inventory(case_file, group="all").hosts) == expected
