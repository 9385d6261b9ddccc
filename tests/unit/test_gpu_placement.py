"""Topology-aware GPU placement (issue 44) as a job and an inventory ask for it: the
inventory's ``primus_gpu_topology`` / ``primus_gpu_nvlink``, a role's ``gpu_locality``,
``gpu_locality_preferred`` and ``cpu_binding``, placement choosing devices on the topology,
and submit's refusals naming the field and what the hosts offer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from primus.client.preflight import _check_gpus
from primus.config.inventory import (
    Host,
    InventoryError,
    format_gpu_groups,
    format_gpu_tree,
    load_inventory,
    parse_gpu_topology,
)
from primus.config.queues import QueuesConfig
from primus.config.spec import JobSpec, RoleSpec
from primus.scheduler.admission import Admit, Wait, admit, request_of
from primus.scheduler.gpu_topology import nics_of, numa_nodes_of
from primus.scheduler.health import topology_mismatch
from primus.scheduler.placement import HostFree, PlacementError, place_executors
from tests.unit.test_gpu_topology import SMI_NVSWITCH

# DGX-1 style bridged pairs: two sockets, two PCIe switches of two GPUs each, NVLink pairs.
BRIDGED = "0-1|2-3;4-5|6-7"
PAIRS = "0,1;2,3;4,5;6,7"


def host(name: str = "g1", tree: str | None = BRIDGED, nvlink: str = PAIRS,
         gpus: int = 8) -> Host:
    parsed = parse_gpu_topology(tree, nvlink) if tree is not None else (None, ())
    return Host(name=name, address=name, gpus=gpus, gpu_tree=parsed[0], gpu_nvlink=parsed[1])


def role(**fields: object) -> RoleSpec:
    return RoleSpec.model_validate({"name": "worker", "command": "x", "cpu": 0.1, **fields})


def placed(roles: RoleSpec, hosts: list[Host], strategy: str = "spread"
           ) -> dict[int, tuple[str, tuple[int, ...]]]:
    free = [HostFree.of(h) for h in hosts]
    slots = place_executors([(roles.name, i) for i in range(roles.num)], {roles.name: roles},
                            free, strategy)
    return {index: (slot.host.name, slot.gpus) for (_, index), slot in slots.items()}


# --- The inventory -----------------------------------------------------------------------------


def test_the_inventory_declares_the_gpu_tree_and_nvlink_groups_as_text_or_lists(tmp_path: Path):
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    a:\n      primus_gpu_topology: [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]\n"
        "      primus_gpu_nvlink: [[0, 1, 2, 3, 4, 5, 6, 7]]\n")
    (tmp_path / "hosts.ini").write_text(
        "b primus_gpus=8 primus_gpu_topology='0-1|2-3;4-5|6-7' primus_gpu_nvlink=0-7\n"
        "c primus_gpu_topology='0-3;;4-7'\n")
    a = load_inventory(tmp_path / "hosts.yml").hosts[0]
    b, c = load_inventory(tmp_path / "hosts.ini").hosts
    assert a.gpus == b.gpus == 8, "the tree gives the count where primus_gpus is unset"
    assert a.gpu_tree == b.gpu_tree == (((0, 1), (2, 3)), ((4, 5), (6, 7)))
    assert a.gpu_nvlink == b.gpu_nvlink == (tuple(range(8)),)
    assert c.gpu_tree == (((0, 1, 2, 3),), (), ((4, 5, 6, 7),)), "node 1 has no GPU"
    assert (format_gpu_tree(b.gpu_tree), format_gpu_groups(b.gpu_nvlink)) == (
        "0-1|2-3;4-5|6-7", "0-7")
    assert numa_nodes_of(role(gpu=2, cpu_binding="numa"), c, (4, 5)) == [2]


def test_the_inventory_names_the_nic_closest_to_each_gpu_and_a_trainer_gets_its_own(
        tmp_path: Path):
    (tmp_path / "hosts.ini").write_text(
        "a primus_gpus=8 primus_gpu_nics='mlx5_0:0-3;mlx5_1:4-7'\n")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    b: {primus_gpus: 4, primus_gpu_nics: {ib0: [0, 1], ib1: '2-3'}}\n")
    (a,) = load_inventory(tmp_path / "hosts.ini").hosts
    (b,) = load_inventory(tmp_path / "hosts.yml").hosts
    assert a.gpu_nics == (("mlx5_0", (0, 1, 2, 3)), ("mlx5_1", (4, 5, 6, 7)))
    assert nics_of(a, (4, 5)) == ["mlx5_1"] and nics_of(a, (3, 4)) == ["mlx5_0", "mlx5_1"]
    assert nics_of(b, (2,)) == ["ib1"] and nics_of(host(), (0, 1)) == []
    (tmp_path / "hosts.ini").write_text("c primus_gpus=2 primus_gpu_nics='mlx5_0:0-3'\n")
    with pytest.raises(InventoryError, match=r"host c: primus_gpu_nics names GPU\(s\) 2, 3, "
                                             r"which the host does not have \(0 to 1\)"):
        load_inventory(tmp_path / "hosts.ini")


@pytest.mark.parametrize(("line", "message"), [
    ("h primus_gpu_topology='0-1|x'", "primus_gpu_topology='0-1|x': must be the GPUs' NUMA "
                                      "nodes separated by ';'"),
    ("h primus_gpu_topology='0-1|3'", "must name the devices 0 to 2 once each; got 0, 1, 3"),
    ("h primus_gpus=4 primus_gpu_topology='0-7'", "names 8 GPU(s), primus_gpus says 4"),
    ("h primus_gpu_nvlink=0-7", "primus_gpu_nvlink needs primus_gpu_topology"),
    ("h primus_gpu_topology=0-3 primus_gpu_nvlink='0-1;4-5'",
     "primus_gpu_nvlink names GPU(s) 4, 5, which primus_gpu_topology does not have (0 to 3)"),
])
def test_a_gpu_topology_that_does_not_read_is_refused_naming_the_host_and_variable(
        tmp_path: Path, line: str, message: str):
    (tmp_path / "hosts.ini").write_text(line + "\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(tmp_path / "hosts.ini")
    assert "host h" in str(caught.value) and message in str(caught.value), str(caught.value)


# --- The job's fields --------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "message"), [
    ({"gpu_locality": "rack"}, "Input should be 'nvlink', 'switch', 'numa' or 'any'"),
    ({"gpu": 2, "gpu_locality": "nvlink", "gpu_locality_preferred": "numa"},
     "gpu_locality_preferred numa is farther than gpu_locality nvlink"),
    ({"cpu_binding": "numa"}, "cpu_binding numa binds to the NUMA node(s) of the executor's "
                              "GPUs; the role reserves none"),
    ({"gpu": 1, "cpu_binding": "socket"}, "Input should be 'none' or 'numa'"),
])
def test_a_locality_or_binding_that_cannot_hold_is_refused(fields, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        role(**fields)


# --- Placement ---------------------------------------------------------------------------------


def test_required_locality_places_each_executor_on_linked_devices():
    assert placed(role(num=4, gpu=2, gpu_locality="nvlink"), [host()]) == {
        0: ("g1", (0, 1)), 1: ("g1", (2, 3)), 2: ("g1", (4, 5)), 3: ("g1", (6, 7))}


def test_small_executors_fill_broken_blocks_first_so_a_whole_block_stays_free():
    free = [HostFree.of(host())]
    one = role(gpu=1)
    taken = [place_executors([("worker", i)], {"worker": one}, free, "spread")[("worker", i)].gpus
             for i in range(3)]
    assert taken == [(0,), (1,), (2,)], "the first pair, then the second switch's"
    # A 4-GPU job linked within a NUMA node still fits the second socket, untouched.
    four = role(gpu=4, gpu_locality="numa")
    assert place_executors([("big", 0)], {"big": four}, free, "spread")[("big", 0)].gpus == (
        4, 5, 6, 7)


def test_a_locality_no_free_set_meets_waits_naming_the_host_and_what_is_free():
    free = [HostFree.of(host())]
    free[0].devices = [0, 2, 4, 6]  # one GPU of each pair held
    with pytest.raises(PlacementError, match=r"no 2 free GPUs linked at nvlink or closer on g1 "
                                             r"\(free: 0, 2, 4, 6\)"):
        place_executors([("worker", 0)], {"worker": role(gpu=2, gpu_locality="nvlink")}, free,
                        "spread")
    assert place_executors([("worker", 0)], {"worker": role(gpu=2, gpu_locality="numa")}, free,
                           "spread")[("worker", 0)].gpus == (0, 2)


def test_a_host_of_unknown_topology_takes_no_role_that_asks_for_locality():
    with pytest.raises(PlacementError, match="g2's GPU topology is unknown"):
        placed(role(gpu=2, gpu_locality="switch"), [host("g2", tree=None)])
    assert placed(role(gpu=2), [host("g2", tree=None)]) == {0: ("g2", (0, 1))}


def test_a_preferred_locality_picks_the_host_that_meets_it_and_falls_back_where_none_does():
    busy, idle = HostFree.of(host("busy")), HostFree.of(host("idle"))
    busy.devices = [0, 2, 4, 6]
    idle.used = 5  # spread would pick busy: the preference overrides it
    wants = role(gpu=2, gpu_locality="any", gpu_locality_preferred="nvlink")
    slots = place_executors([("worker", 0)], {"worker": wants}, [busy, idle], "spread")
    assert (slots[("worker", 0)].host.name, slots[("worker", 0)].gpus) == ("idle", (0, 1))
    idle.devices = [1, 3]
    slots = place_executors([("worker", 1)], {"worker": wants}, [busy, idle], "spread")
    assert slots[("worker", 1)].host.name == "busy", "no host meets it: the least used"


# --- Submit's refusals -------------------------------------------------------------------------


def test_submit_refuses_a_locality_no_host_offers_naming_what_each_offers():
    spec = JobSpec.model_validate({"name": "tp", "roles": [
        {"name": "worker", "command": "x", "gpu": 4, "gpu_locality": "switch"}]})
    (problem,) = _check_gpus("job.yaml", spec, [host(), host("g2", tree=None)])
    assert problem.field == "roles[0].gpu_locality" and problem.allowed == (
        "role worker asks 4 GPUs linked at switch or closer; its hosts offer at most: g1 2, "
        "g2 none (no primus_gpu_topology)")
    fits = spec.model_copy(update={"roles": [role(gpu=4, gpu_locality="numa")]})
    assert _check_gpus("job.yaml", fits, [host()]) == []


def test_submit_refuses_numa_binding_where_no_host_names_its_gpus_numa_nodes():
    spec = JobSpec.model_validate({"name": "bound", "roles": [
        {"name": "worker", "command": "x", "gpu": 1, "cpu_binding": "numa"}]})
    (problem,) = _check_gpus("job.yaml", spec, [host("g2", tree=None)])
    assert problem.field == "roles[0].cpu_binding"
    assert _check_gpus("job.yaml", spec, [host()]) == []


# --- A host whose GPUs are linked otherwise than declared ---------------------------------------


def test_a_host_whose_probe_contradicts_its_inventory_takes_no_role_asking_for_locality():
    declared = host()  # bridged pairs, where nvidia-smi shows an NVSwitch
    why = topology_mismatch(declared, {"gpu_topology_matrix": SMI_NVSWITCH})
    assert why is not None and why.startswith(
        "its GPUs are linked otherwise than the inventory declares (here: the inventory, "
        "there: nvidia-smi topo -m): GPU 0-2: numa here, nvlink there")
    assert topology_mismatch(declared, {}) == ("nvidia-smi topo -m did not answer; the "
                                               "inventory declares a GPU topology "
                                               "(primus_gpu_topology)")
    assert topology_mismatch(host(tree=None), {}) is None, "nothing declared: nothing to hold"
    right = host(tree="0-3;4-7", nvlink="0-7")
    assert topology_mismatch(right, {"gpu_topology_matrix": SMI_NVSWITCH}) is None

    def decide(**fields: object) -> Admit | Wait:
        spec = JobSpec.model_validate({"name": "j", "roles": [
            {"name": "worker", "command": "x", "cpu": 0.1, "gpu": 2, **fields}]})
        request = request_of("a", "alice", spec, 0.0, ["g1"], [("worker", 0)])
        (decision,) = admit([request], [], {"g1": declared}, QueuesConfig(),
                            mismatches={"g1": why})
        assert isinstance(decision, Admit | Wait)
        return decision
    waits = decide(gpu_locality="nvlink")
    assert isinstance(waits, Wait) and f"g1 ({why})" in waits.reason, waits
    assert isinstance(decide(cpu_binding="none"), Admit), "a role asking no locality runs there"
