"""The choice of an executor's GPU devices on a host's topology (pure), on the topologies of
real machines, and against every subset on random ones; and ``nvidia-smi topo -m`` read."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primus.scheduler.gpu_topology import (
    GpuTopology,
    Link,
    TopologyError,
    choose_devices,
    parse_nvidia_smi_topo,
)

# An 8-GPU NVSwitch node (DGX H100 style): every pair NVLinked, four GPUs per socket.
NVSWITCH = GpuTopology.of_tree([[[0, 1, 2, 3]], [[4, 5, 6, 7]]], nvlink=[range(8)])
# PCIe switches of two GPUs, two switches per socket, no NVLink.
PCIE_PAIRS = GpuTopology.of_tree([[[0, 1], [2, 3]], [[4, 5], [6, 7]]])
# One PCIe switch of four per socket, NVLink bridges between pairs.
BRIDGED = GpuTopology.of_tree([[[0, 1, 2, 3]], [[4, 5, 6, 7]]],
                              nvlink=[(0, 1), (2, 3), (4, 5), (6, 7)])
# Two sockets, each GPU on its own host bridge (no switch shared, no NVLink).
TWO_SOCKET = GpuTopology.of_tree([[[0], [1], [2], [3]], [[4], [5], [6], [7]]])


def test_a_small_job_takes_from_the_most_broken_part_leaving_whole_blocks_free():
    # Switch {0, 1} has one GPU left: a 1-GPU job takes it, not one of a whole switch.
    assert choose_devices(PCIE_PAIRS, [1, 2, 3, 4, 5, 6, 7], 1) == (1,)
    # A 2-GPU job then fits a whole switch of the socket with the least room.
    assert choose_devices(PCIE_PAIRS, [2, 3, 4, 5, 6, 7], 2) == (2, 3)
    # On an NVSwitch node, small jobs stay on one socket and fill it first.
    assert choose_devices(NVSWITCH, [1, 2, 3, 4, 5, 6, 7], 2) == (1, 2)
    assert choose_devices(NVSWITCH, range(8), 8, Link.NVLINK) == tuple(range(8))


def test_locality_is_required_when_asked_and_none_is_given_where_no_free_set_has_it():
    assert choose_devices(PCIE_PAIRS, [0, 2, 4, 6], 2, Link.SWITCH) is None
    assert choose_devices(PCIE_PAIRS, [0, 2, 4, 6], 2, Link.NUMA) == (0, 2)
    assert choose_devices(BRIDGED, [0, 2, 3, 4], 2, Link.NVLINK) == (2, 3)
    assert choose_devices(BRIDGED, [0, 2, 4, 6], 2, Link.NVLINK) is None
    assert choose_devices(TWO_SOCKET, [0, 1, 4], 3, Link.NUMA) is None
    assert choose_devices(TWO_SOCKET, [0, 1, 4], 3) == (0, 1, 4)
    assert choose_devices(TWO_SOCKET, [0, 1, 4], 0) == ()


def brute_force_exists(topology: GpuTopology, free: list[int], count: int, within: Link) -> bool:
    return any(topology.level_of(subset) <= within
               for subset in itertools.combinations(free, count))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([NVSWITCH, PCIE_PAIRS, BRIDGED, TWO_SOCKET]),
       st.sets(st.integers(0, 7)), st.integers(1, 8), st.sampled_from(list(Link)))
def test_a_choice_is_free_the_size_asked_within_the_locality_and_found_whenever_one_exists(
        topology, free, count, within):
    chosen = choose_devices(topology, free, count, within)
    exists = brute_force_exists(topology, sorted(free), count, within)
    assert (chosen is not None) == exists
    if chosen is not None:
        assert len(set(chosen)) == count and set(chosen) <= free
        assert topology.level_of(chosen) <= within


def test_a_tree_naming_a_gpu_twice_or_skipping_one_is_refused():
    with pytest.raises(TopologyError, match="GPU 1 is named twice"):
        GpuTopology.of_tree([[[0, 1], [1]]])
    with pytest.raises(TopologyError, match="GPUs must be 0 to 1, each once"):
        GpuTopology.of_tree([[[0, 2]]])


# `nvidia-smi topo -m` of an 8-GPU NVSwitch node (its columns as the tool prints them).
SMI_NVSWITCH = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t0-55,112-167\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t0-55,112-167\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNV18\t0-55,112-167\t0\t\tN/A
GPU3\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\t0-55,112-167\t0\t\tN/A
GPU4\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\t56-111,168-223\t1\t\tN/A
GPU5\tNV18\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tNV18\t56-111,168-223\t1\t\tN/A
GPU6\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t X \tNV18\t56-111,168-223\t1\t\tN/A
GPU7\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t X \t56-111,168-223\t1\t\tN/A

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NV#  = Connection traversing a bonded set of # NVLinks
"""

# A PCIe host: two GPUs under each switch, two switches per socket.
SMI_PCIE = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPIX\tNODE\tSYS\t0-15\t0
GPU1\tPIX\t X \tNODE\tSYS\t0-15\t0
GPU2\tNODE\tNODE\t X \tSYS\t0-15\t0
GPU3\tSYS\tSYS\tSYS\t X \t16-31\t1
"""


def test_nvidia_smi_topo_is_read_links_and_numa_nodes():
    nvswitch = parse_nvidia_smi_topo(SMI_NVSWITCH)
    assert nvswitch.links == NVSWITCH.links and nvswitch.numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert choose_devices(nvswitch, [1, 2, 3, 4, 5, 6, 7], 2) == (1, 2)
    pcie = parse_nvidia_smi_topo(SMI_PCIE)
    assert pcie.links[0] == (Link.NVLINK, Link.SWITCH, Link.NUMA, Link.ANY)
    assert pcie.numa == (0, 0, 0, 1)
    assert choose_devices(pcie, range(4), 2, Link.SWITCH) == (0, 1)


def test_nvidia_smi_topo_that_does_not_read_says_why():
    with pytest.raises(TopologyError, match="no GPU matrix"):
        parse_nvidia_smi_topo("No devices were found\n")
    with pytest.raises(TopologyError, match="'QPI' is no link nvidia-smi prints"):
        parse_nvidia_smi_topo(SMI_PCIE.replace("SYS", "QPI", 1))


trees = st.integers(1, 8).flatmap(lambda size: st.permutations(range(size))).flatmap(
    lambda order: st.lists(st.integers(1, len(order)), min_size=len(order),
                           max_size=len(order)).map(lambda cuts: _cut(list(order), cuts)))


def _cut(devices: list[int], sizes: list[int]) -> list[list[list[int]]]:
    """``devices`` cut into NUMA nodes of switches, by ``sizes`` in turn."""
    nodes: list[list[list[int]]] = []
    sizes = iter(sizes)
    while devices:
        node: list[list[int]] = []
        for _ in range(next(sizes, 1)):
            if not devices:
                break
            take = next(sizes, 1)
            node.append(devices[:take])
            devices = devices[take:]
        nodes.append(node)
    return nodes


@settings(max_examples=100, deadline=None)
@given(trees, st.lists(st.lists(st.integers(0, 7), min_size=2, max_size=8), max_size=4))
def test_a_topology_read_back_as_a_tree_links_every_pair_alike(tree, nvlink):
    # What `hosts check` stores of a probed host (nvidia-smi's matrix, as the inventory's
    # tree) makes the same topology again: every pair linked alike, every NUMA node the same.
    size = sum(len(switch) for node in tree for switch in node)
    nvlink = [[d for d in group if d < size] for group in nvlink]
    topology = GpuTopology.of_tree(tree, [group for group in nvlink if len(group) > 1])
    again = GpuTopology.of_tree(*topology.as_tree())
    assert again.links == topology.links and again.numa == topology.numa
    assert topology.differences(again) == []


def test_differences_name_each_pair_linked_otherwise_and_each_numa_node():
    assert PCIE_PAIRS.differences(NVSWITCH)[:2] == ["GPU 0-1: switch here, nvlink there",
                                                   "GPU 0-2: numa here, nvlink there"]
    moved = GpuTopology.of_tree([[[0, 1], [2, 3]], [[4, 5], [7]], [[6]]])
    assert "GPU 6: NUMA node 1 here, 2 there" in PCIE_PAIRS.differences(moved)
    assert NVSWITCH.differences(GpuTopology.of_tree([[[0, 1]]])) == ["8 GPU(s) here, 2 there"]
