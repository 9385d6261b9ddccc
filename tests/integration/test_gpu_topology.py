"""Topology-aware GPU placement with real processes (issue 44): ``primus hosts check``
reading a host's topology from ``nvidia-smi topo -m`` (a fake one on ``PATH`` printing what
an 8-GPU NVSwitch machine prints) and naming an inventory it contradicts; a job whose role asks
``gpu_locality: nvlink`` and ``cpu_binding: numa`` given an NVLinked pair past a GPU another
application holds, its trainer in a real cpuset cgroup of its devices' NUMA node.

Real etcd, real AM, executor and trainer processes on a local host.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support.apps import assert_nothing_left, write_job
from tests.support.data import wait_for_end
from tests.support.primus import run_primus
from tests.support.waiting import wait_until
from tests.unit.test_gpu_topology import SMI_NVSWITCH

NODES = Path("/sys/devices/system/node")


def fake_nvidia_smi(tmp_path: Path) -> dict[str, str]:
    """A ``nvidia-smi`` that lists 8 GPUs (``-L``, and their UUIDs and PCI bus ids) linked as an
    NVSwitch machine's (``topo -m``); the ``PATH`` that finds it first."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "topo.txt").write_text(SMI_NVSWITCH)
    fake = tools / "nvidia-smi"
    fake.write_text("#!/bin/sh\n"
                    f'if [ "$1" = topo ]; then exec cat {tools / "topo.txt"}; fi\n'
                    'if [ "$1" = --query-gpu=index,uuid,pci.bus_id ]; then\n'
                    '  for i in 0 1 2 3 4 5 6 7; do echo "$i, GPU-$i, 00000000:1$i:00.0"; done\n'
                    '  exit 0\n'
                    'fi\n'
                    "for i in 0 1 2 3 4 5 6 7; do echo \"GPU $i: H100 (UUID: GPU-$i)\"; done\n")
    fake.chmod(0o755)
    return {"PATH": f"{tools}:{os.environ['PATH']}"}


def test_hosts_check_reads_the_topology_and_names_an_inventory_it_contradicts(
        primus_env, tmp_path):
    env = {**primus_env, **fake_nvidia_smi(tmp_path), "COLUMNS": "250"}
    local = f"ansible_host=127.0.0.1 ansible_connection=local primus_python={sys.executable}"
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(f"probed {local}\n"
                     f"declared {local} primus_gpu_topology='0-1|2-3;4-5|6-7' "
                     f"primus_gpu_nvlink='0,1;2,3;4,5;6,7'\n")
    checked = run_primus(env, "hosts", "check", "-i", str(hosts), "-o", "json")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    reports = {r["host"]: r for r in json.loads(checked.stdout)}
    probed, declared = reports["probed"], reports["declared"]
    assert probed["ok"] and (probed["gpus"], probed["gpu_topology"], probed["gpu_nvlink"]) == (
        8, "0|1|2|3;4|5|6|7", "0-7"), probed
    assert probed["gpu_devices"][5] == {"index": 5, "uuid": "GPU-5",
                                        "pci_bus_id": "00000000:15:00.0", "numa_node": 1,
                                        "cpu_affinity": "56-111,168-223"}, probed
    assert not declared["ok"] and declared["error"].startswith(
        "declared: its GPUs are linked otherwise than the inventory declares (here: the "
        "inventory, there: nvidia-smi topo -m): GPU 0-2: numa here, nvlink there"), declared

    hosts.write_text(f"declared {local} primus_gpu_topology='0-3;4-7' primus_gpu_nvlink=0-7\n")
    table = run_primus(env, "hosts", "check", "-i", str(hosts))
    assert table.returncode == 0, table.stdout + table.stderr
    assert "8 (0|1|2|3;4|5|6|7 nvlink 0-7)" in table.stdout, table.stdout
    listed = run_primus(env, "hosts", "list", "-i", str(hosts))
    assert "8 (0-3;4-7 nvlink 0-7)" in listed.stdout, listed.stdout


# Records its devices, its cpuset cgroup and the CPUs and memory nodes it may use, then runs
# until the test creates `finish-<name>`.
TRAINER = ('{{ echo "$PRIMUS_APP_ID ${{CUDA_VISIBLE_DEVICES-unset}}";'
           ' echo "nics ${{NCCL_IB_HCA-unset}}"; grep cpuset /proc/self/cgroup;'
           ' grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status; }} > {out}/{name};'
           ' while [ ! -e {out}/finish-{name} ]; do sleep 0.1; done')


def gpu_host(tmp_path: Path, topology: str) -> tuple[Path, Path]:
    """The trainers' directory, and an inventory of this machine as ``box``, 4 slots, with
    ``topology``'s variables."""
    out = tmp_path / "out"
    out.mkdir()
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(f"box ansible_host=127.0.0.1 ansible_connection=local primus_slots=4 "
                     f"primus_python={sys.executable} {topology}\n")
    return out, hosts


def submit(env: dict[str, str], tmp_path: Path, hosts: Path, name: str, out: Path,
           role: str) -> str:
    job = write_job(tmp_path / f"{name}.yaml", f"""
name: {name}
policy: {{stop_grace: 2s}}
roles:
  - name: worker
    cpu: 0.1
    {role}
    command: '{TRAINER.format(out=out, name=name)}'
""")
    result = run_primus(env, "submit", str(job), "-i", str(hosts))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_role_asking_nvlink_and_numa_binding_gets_a_linked_pair_in_its_nodes_cpuset(
        primus_env, tmp_path):
    """On a host of two NVLinked pairs in NUMA node 0 (this machine's), an application holding
    one GPU takes GPU 0 (best fit: the pair already broken stays the one broken); a role
    asking 2 GPUs linked by NVLink gets the other pair, 2 and 3 (first fit gave 1 and 2, one
    switch apart), with the NIC beside them as NCCL_IB_HCA, and its trainer runs in a cpuset
    of node 0's CPUs and memory."""
    out, hosts = gpu_host(tmp_path, "primus_gpu_topology='0-1|2-3' primus_gpu_nvlink='0,1;2,3'"
                                    " primus_gpu_nics='mlx5_0:0-1;mlx5_1:2-3'")
    one = submit(primus_env, tmp_path, hosts, "one", out, "gpu: 1")
    wait_until(lambda: (out / "one").exists(), 60, "one's trainer")
    pair = submit(primus_env, tmp_path, hosts, "pair", out,
                  "gpu: 2\n    gpu_locality: nvlink\n    cpu_binding: numa")
    wait_until(lambda: (out / "pair").exists() and "Mems" in (out / "pair").read_text(), 60,
               "pair's trainer")
    assert (out / "one").read_text().split("\n")[0] == f"{one} 0"
    lines = (out / "pair").read_text().splitlines()
    assert lines[0] == f"{pair} 2,3" and lines[1] == "nics mlx5_1", lines
    cpuset = next(line.split(":", 2)[2] for line in lines if ":cpuset:" in line)
    assert cpuset.rsplit("/", 1)[-1].startswith(f"primus.{pair}.worker-0."), lines
    node = (NODES / "node0" / "cpulist").read_text().strip()
    held = Path("/sys/fs/cgroup/cpuset") / cpuset.lstrip("/")
    assert (held / "cpuset.cpus").read_text().strip() == node
    assert (held / "cpuset.mems").read_text().strip() == "0"
    assert f"Cpus_allowed_list:\t{node}" in lines and "Mems_allowed_list:\t0" in lines, lines
    for name, app_id in (("one", one), ("pair", pair)):
        (out / f"finish-{name}").touch()
        assert wait_for_end(primus_env, app_id)["status"]["state"] == "SUCCEEDED"
        assert_nothing_left(app_id)
    assert not held.exists(), "the trainer's cpuset is removed with it"


# Records its application, role, index and host, then runs until `finish-<name>`.
GANG = ('echo "$PRIMUS_APP_ID $PRIMUS_INDEX $PRIMUS_HOST" >> {out}/gang;'
        ' while [ ! -e {out}/finish-{name} ]; do sleep 0.1; done')


def test_a_gang_asking_one_rack_runs_inside_it_and_one_no_rack_can_take_waits_saying_so(
        primus_env, tmp_path):
    """Five hosts of one slot on this machine in two racks (the site's topology.levels, the
    inventory's primus_domains): a gang of three asking placement_domain rack runs on the
    three hosts of r2 (spread alone would have put one on r1); a second gang of three waits,
    saying that no rack can take it, though two hosts are free."""
    site = tmp_path / "site.yaml"
    site.write_text("topology: {levels: [spine, rack]}\n")
    env = {**primus_env, "PRIMUS_CONF": str(site)}
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("".join(
        f"{name} ansible_connection=local primus_slots=1 primus_python={sys.executable} "
        f"primus_home={tmp_path / 'homes' / name} primus_domains='spine=s1,rack={rack}'\n"
        for name, rack in (("h1", "r1"), ("h2", "r1"), ("h3", "r2"), ("h4", "r2"),
                           ("h5", "r2"))))
    out = tmp_path / "out"
    out.mkdir()

    def submit(name: str, extra: str = "placement_domain: rack") -> str:
        job = write_job(tmp_path / f"{name}.yaml", f"""
name: {name}
policy: {{stop_grace: 2s}}
{extra}
roles:
  - name: worker
    num: 3
    cpu: 0.1
    command: '{GANG.format(out=out, name=name)}'
""")
        result = run_primus(env, "submit", str(job), "-i", str(hosts))
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def gang(app_id: str) -> list[str]:
        lines = (out / "gang").read_text().splitlines() if (out / "gang").exists() else []
        return sorted(line.split()[2] for line in lines if line.startswith(app_id))

    first = submit("first")
    wait_until(lambda: len(gang(first)) == 3, 60, "first's three trainers")
    assert gang(first) == ["h3", "h4", "h5"]
    second = submit("second")
    wait_until(lambda: "no rack can take all 3 executors" in run_primus(
        env, "status", second).stdout, 30, "second's reason to wait")
    refused = run_primus(env, "submit", str(tmp_path / "first.yaml"), "-i", str(hosts),
                         "--set", "placement_domain=row")
    assert refused.returncode == 2 and "placement_domain" in refused.stderr and \
        "the site's levels of host domains are spine, rack" in refused.stderr, refused.stderr
    assert run_primus(env, "kill", second).returncode == 0
    (out / "finish-first").touch()
    assert wait_for_end(env, first)["status"]["state"] == "SUCCEEDED"
    assert_nothing_left(first)


def test_a_host_the_health_check_finds_linked_otherwise_takes_no_role_asking_for_locality(
        primus_env, tmp_path):
    """The admission leader's health check (every second here) probes a host that declares
    bridged pairs where nvidia-smi shows an NVSwitch: a role asking NVLink waits, naming the
    contradiction; a role asking no locality runs there."""
    site = tmp_path / "site.yaml"
    site.write_text("health: {interval: 1s, timeout: 5s}\n")
    env = {**primus_env, **fake_nvidia_smi(tmp_path), "PRIMUS_CONF": str(site)}
    out, hosts = gpu_host(tmp_path, "primus_gpu_topology='0-1|2-3;4-5|6-7' "
                                    "primus_gpu_nvlink='0,1;2,3;4,5;6,7'")
    plain = submit(env, tmp_path, hosts, "plain", out, "gpu: 1")
    wait_until(lambda: (out / "plain").exists(), 60, "plain's trainer")
    # plain's AM leads admission: its first check, a second in, records the contradiction.
    leader_log = Path(env["PRIMUS_HOME"]) / "apps" / plain / "am.log"
    wait_until(lambda: "box: takes no executor asking for locality" in leader_log.read_text(),
               30, "the health check to find box's GPUs linked otherwise")
    linked = submit(env, tmp_path, hosts, "linked", out, "gpu: 2\n    gpu_locality: nvlink")
    def shown() -> str:  # the reason, its lines joined again
        return " ".join(run_primus(env, "status", linked).stdout.split())
    wait_until(lambda: "box (its GPUs are linked otherwise than the inventory declares" in
               shown(), 30, "linked's reason to wait")
    assert "GPU 0-2: numa here, nvlink there" in shown(), shown()
    assert not (out / "linked").exists()
    assert run_primus(env, "kill", linked).returncode == 0
    (out / "finish-plain").touch()
    assert wait_for_end(env, plain)["status"]["state"] == "SUCCEEDED"
    assert_nothing_left(plain)
