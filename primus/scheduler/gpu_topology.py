"""GPU topology inside a host, and the choice of an executor's GPU devices on it.

A host's GPUs are linked at one of four levels, closest first (:class:`Link`): NVLink, the same
PCIe switch, the same NUMA node (through its host bridges), or across sockets. A
:class:`GpuTopology` holds the level of every pair, as ``nvidia-smi topo -m`` prints it
(:func:`parse_nvidia_smi_topo`) or as an inventory describes it (:meth:`GpuTopology.of_tree`).

:func:`choose_devices` is a pure function: the devices for one executor that asks for ``count``
GPUs linked at ``within`` or closer, chosen so that the largest well-connected blocks stay
free (best fit down the topology's tree, as HiveD's buddy cells do): the tightest domain that
has room, and inside it the sub-domains with the least room left. Small jobs then do not
fragment hosts that a whole-host job needs.
"""

from __future__ import annotations

import enum
import functools
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from primus.config.inventory import Host
from primus.config.spec import RoleSpec


class Link(enum.IntEnum):
    """How close two GPUs are linked (lower is closer), and the ``gpu_locality`` a role may
    ask for (its name, lower-cased)."""

    NVLINK = 0
    """One or more NVLinks (NVSwitch included): ``NV#`` in ``nvidia-smi topo -m``."""
    SWITCH = 1
    """Under one PCIe switch (``PIX``, ``PXB``)."""
    NUMA = 2
    """In one NUMA node, through its PCIe host bridges (``PHB``, ``NODE``)."""
    ANY = 3
    """Across sockets (``SYS``)."""


_SMI_LINKS = {"PIX": Link.SWITCH, "PXB": Link.SWITCH, "PHB": Link.NUMA, "NODE": Link.NUMA,
              "SYS": Link.ANY}


class TopologyError(ValueError):
    """A topology that does not read (a probe's output, an inventory's description)."""


@dataclass(frozen=True)
class GpuTopology:
    """The link between every pair of a host's GPUs, by device index."""

    links: tuple[tuple[Link, ...], ...]
    """``links[a][b]``: how devices ``a`` and ``b`` are linked (``links[a][a]`` is NVLINK)."""
    numa: tuple[int | None, ...] = ()
    """Each device's NUMA node, where known."""
    cpus: tuple[str | None, ...] = ()
    """Each device's CPU affinity (``0-55,112-167``), where ``nvidia-smi`` said."""

    @property
    def gpus(self) -> int:
        return len(self.links)

    @classmethod
    def of_tree(cls, nodes: Sequence[Sequence[Sequence[int]]],
                nvlink: Iterable[Iterable[int]] = ()) -> GpuTopology:
        """A topology from its tree: NUMA nodes, each a list of PCIe switches, each a list of
        devices; and groups of devices all linked by NVLink (an NVSwitch: one group of
        every device; NVLink bridges: pairs).

        Raises:
            TopologyError: a device is missing or named twice.
        """
        where: dict[int, tuple[int, int]] = {}
        for n, switches in enumerate(nodes):
            for s, devices in enumerate(switches):
                for device in devices:
                    if device in where:
                        raise TopologyError(f"GPU {device} is named twice")
                    where[device] = (n, s)
        if sorted(where) != list(range(len(where))):
            raise TopologyError(f"GPUs must be 0 to {len(where) - 1}, each once; got "
                                f"{sorted(where)}")
        linked = {frozenset(group) for group in map(frozenset, nvlink)}

        def link(a: int, b: int) -> Link:
            if a == b or any(a in group and b in group for group in linked):
                return Link.NVLINK
            if where[a] == where[b]:
                return Link.SWITCH
            return Link.NUMA if where[a][0] == where[b][0] else Link.ANY
        size = len(where)
        return cls(tuple(tuple(link(a, b) for b in range(size)) for a in range(size)),
                   tuple(where[d][0] for d in range(size)))

    def as_tree(self) -> tuple[tuple[tuple[tuple[int, ...], ...], ...],
                               tuple[tuple[int, ...], ...]]:
        """The tree and the NVLink groups that :meth:`of_tree` makes this topology of (as an
        inventory declares it, ``primus_gpu_topology`` and ``primus_gpu_nvlink``): NUMA nodes
        of PCIe switches of devices; every NVLink domain whose devices are all linked as one
        group, the pairs of any other (a hybrid cube mesh)."""
        # Devices under one switch: linked through PCIe switches alone (an NVLinked pair
        # hides how PCIe links it, as nvidia-smi prints it: each its own switch, then).
        switches = _components(self.gpus, lambda a, b: self.links[a][b] is Link.SWITCH)
        if self.numa and all(node is not None for node in self.numa):
            # By node number (the tree's place is the node's number; a node without GPUs
            # is an empty place): binding to a node needs its number.
            nodes = [frozenset(d for d, n in enumerate(self.numa) if n == number)
                     for number in range(max(n for n in self.numa if n is not None) + 1)]
        else:
            nodes = list(self._numa_nodes())
        tree = tuple(tuple(tuple(sorted(switch & node)) for switch in switches
                           if switch & node) for node in nodes)
        groups: list[tuple[int, ...]] = []
        for domain in self.domains(Link.NVLINK):
            if len(domain) < 2:
                continue
            if self.level_of(domain) is Link.NVLINK:
                groups.append(tuple(sorted(domain)))
            else:
                groups += [(a, b) for a, b in itertools.combinations(sorted(domain), 2)
                           if self.links[a][b] is Link.NVLINK]
        return tree, tuple(groups)

    def differences(self, other: GpuTopology) -> list[str]:
        """How ``other`` links the devices otherwise, in words (``GPU 0-1: nvlink here,
        switch there``); empty where both agree."""
        if other.gpus != self.gpus:
            return [f"{self.gpus} GPU(s) here, {other.gpus} there"]
        found = [f"GPU {a}-{b}: {self.links[a][b].name.lower()} here, "
                 f"{other.links[a][b].name.lower()} there"
                 for a, b in itertools.combinations(range(self.gpus), 2)
                 if self.links[a][b] != other.links[a][b]]
        if self.numa and other.numa:
            found += [f"GPU {d}: NUMA node {mine} here, {theirs} there"
                      for d, (mine, theirs) in enumerate(zip(self.numa, other.numa, strict=True))
                      if mine is not None and theirs is not None and mine != theirs]
        return found

    def level_of(self, devices: Iterable[int]) -> Link:
        """The farthest link between any two of ``devices`` (NVLINK for one device)."""
        chosen = list(devices)
        return max((self.links[a][b] for a, b in itertools.combinations(chosen, 2)),
                   default=Link.NVLINK)

    def parts(self, room: frozenset[int]) -> list[frozenset[int]]:
        """``room`` split one level down its tree: by NUMA node (known, or told by the links),
        else by PCIe switch, else by NVLink group; least room first. One part: nothing
        splits it."""
        for split in (self._numa_nodes(), self.domains(Link.SWITCH), self.domains(Link.NVLINK)):
            parts = [group & room for group in split if group & room]
            if len(parts) > 1:
                return sorted(parts, key=lambda part: (len(part), min(part)))
        return [room]

    @functools.cache  # noqa: B019 - frozen and small: a host's topology is kept for its life
    def _numa_nodes(self) -> tuple[frozenset[int], ...]:
        """The NUMA nodes that have GPUs, by their lowest device."""
        if self.numa and all(node is not None for node in self.numa):
            nodes: dict[int | None, set[int]] = {}
            for device, node in enumerate(self.numa):
                nodes.setdefault(node, set()).add(device)
            return tuple(frozenset(group) for _, group in sorted(nodes.items(),
                                                                  key=lambda kv: min(kv[1])))
        return self.domains(Link.NUMA)

    @functools.cache  # noqa: B019 - frozen and small: a host's topology is kept for its life
    def domains(self, level: Link) -> tuple[frozenset[int], ...]:
        """The devices grouped into domains at ``level``: within one, every pair is linked
        at ``level`` or closer (the connected parts of that relation, which the topologies
        of real machines make whole: an NVSwitch, a switch, a NUMA node, the host)."""
        return _components(self.gpus, lambda a, b: self.links[a][b] <= level)


def _components(size: int, joined: Callable[[int, int], bool]) -> tuple[frozenset[int], ...]:
    """Devices ``0`` to ``size - 1`` in the connected parts of relation ``joined``, by their
    lowest device."""
    left = set(range(size))
    found = []
    while left:
        seed = min(left)
        domain = {seed}
        frontier = [seed]
        while frontier:
            a = frontier.pop()
            for b in list(left - domain):
                if joined(a, b):
                    domain.add(b)
                    frontier.append(b)
        left -= domain
        found.append(frozenset(domain))
    return tuple(found)


def choose_devices(topology: GpuTopology, free: Iterable[int], count: int,
                   within: Link = Link.ANY) -> tuple[int, ...] | None:
    """``count`` devices of ``free`` linked at ``within`` or closer, leaving the largest
    well-connected blocks free; ``None`` when no such set is free.

    Best fit down the host's tree (NUMA nodes, then PCIe switches, then NVLink groups): the
    part with the least room that can hold the devices, at each level; only when no one part
    can, whole parts, the least room first (they are the most broken already), and only where
    the links between them are close enough for ``within``.
    """
    if count <= 0:
        return ()
    return _best(topology, frozenset(free), count, within)


def _best(topology: GpuTopology, room: frozenset[int], count: int, within: Link
          ) -> tuple[int, ...] | None:
    if count > len(room):
        return None
    parts = topology.parts(room)
    if len(parts) == 1:  # one NVLink group (or one device): any of it is as good
        chosen = tuple(sorted(room)[:count])
        return chosen if topology.level_of(chosen) <= within else None
    for part in parts:  # the least room first
        found = _best(topology, part, count, within)
        if found is not None:
            return found
    if topology.level_of(room) > within:
        return None  # spreading over the parts would link them farther than asked
    taken: list[int] = []
    for part in parts:
        want = min(count - len(taken), len(part))
        if want <= 0:
            break
        taken += _best(topology, part, want, Link.ANY) or ()
    return tuple(sorted(taken)) if len(taken) == count else None


def topology_of(host: Host) -> GpuTopology | None:
    """The topology the host's inventory declares (``primus_gpu_topology``,
    ``primus_gpu_nvlink``); ``None`` where it declares none."""
    return None if host.gpu_tree is None else _of_tree(host.gpu_tree, host.gpu_nvlink)


def numa_nodes_of(role: RoleSpec, host: Host, gpus: Iterable[int]) -> list[int]:
    """The NUMA nodes an executor of ``role`` with devices ``gpus`` on ``host`` is bound to:
    its devices' nodes with ``cpu_binding: numa`` (where the host's topology names them), else
    none."""
    topology = topology_of(host)
    if role.cpu_binding != "numa" or topology is None or not topology.numa:
        return []
    return sorted({node for d in gpus if (node := topology.numa[d]) is not None})


def nics_of(host: Host, gpus: Iterable[int]) -> list[str]:
    """The RDMA NICs closest to devices ``gpus`` of ``host`` (its ``primus_gpu_nics``), in the
    inventory's order; none where it names none."""
    wanted = set(gpus)
    return [nic for nic, devices in host.gpu_nics if wanted & set(devices)]


@functools.lru_cache(maxsize=256)
def _of_tree(tree: tuple[tuple[tuple[int, ...], ...], ...],
             nvlink: tuple[tuple[int, ...], ...]) -> GpuTopology:
    return GpuTopology.of_tree(tree, nvlink)


def parse_nvidia_smi_topo(text: str) -> GpuTopology:
    """The topology ``nvidia-smi topo -m`` prints: its GPU rows and columns (``X``, ``NV#``,
    ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``), and each GPU's ``NUMA Affinity`` and
    ``CPU Affinity``.

    Raises:
        TopologyError: the text has no GPU matrix, or a cell says something else.
    """
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if re.match(r"^\s+GPU0\b", line)), None)
    if header is None:
        raise TopologyError("no GPU matrix (a header line starting with GPU0)")
    columns = header.split("\t") if "\t" in header else re.split(r"\s{2,}|\t", header)
    columns = [c.strip() for c in columns if c.strip()]
    gpu_columns = [c for c in columns if re.fullmatch(r"GPU\d+", c)]
    size = len(gpu_columns)
    numa_at = columns.index("NUMA Affinity") if "NUMA Affinity" in columns else None
    cpus_at = columns.index("CPU Affinity") if "CPU Affinity" in columns else None
    rows: dict[int, list[str]] = {}
    for line in lines:
        match = re.match(r"^GPU(\d+)\s+(.*)$", line)
        if not match:
            continue
        cells = [c.strip() for c in re.split(r"\t+|\s{2,}|\s(?=\S)", match.group(2))
                 if c.strip()]
        rows[int(match.group(1))] = cells
    if sorted(rows) != list(range(size)):
        raise TopologyError(f"GPU rows {sorted(rows)} do not match the columns "
                            f"{', '.join(gpu_columns)}")
    links = []
    numa: list[int | None] = []
    cpus: list[str | None] = []
    for device in range(size):
        cells = rows[device]
        row = []
        for other, cell in enumerate(cells[:size]):
            if cell == "X":
                if other != device:
                    raise TopologyError(f"GPU{device}: X off the diagonal (GPU{other})")
                row.append(Link.NVLINK)
            elif re.fullmatch(r"NV\d+", cell):
                row.append(Link.NVLINK)
            elif cell in _SMI_LINKS:
                row.append(_SMI_LINKS[cell])
            else:
                raise TopologyError(f"GPU{device} to GPU{other}: {cell!r} is no link "
                                    f"nvidia-smi prints (X, NV#, PIX, PXB, PHB, NODE, SYS)")
        if len(row) != size:
            raise TopologyError(f"GPU{device}: {len(row)} links for {size} GPUs")
        links.append(tuple(row))
        value = cells[numa_at] if numa_at is not None and len(cells) > numa_at else ""
        numa.append(int(value) if value.isdigit() else None)
        affinity = cells[cpus_at] if cpus_at is not None and len(cells) > cpus_at else ""
        cpus.append(affinity if re.fullmatch(r"[0-9,-]+", affinity) else None)
    return GpuTopology(tuple(links), tuple(numa), tuple(cpus))
