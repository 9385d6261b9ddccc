"""Each trainer in a cgroup of its own, held to what its executor reserved.

The kernel's cgroups are the interface: files under the cgroup file system, written directly
(what runc, Slurm's cgroup plugin and the kubelet do; a library such as libcgroup would add a
dependency on every host for a few writes). Both versions are found at run time:

- **v2** (one unified hierarchy; most current distributions) when its root offers the
  ``memory`` controller: ``memory.max`` (and ``memory.swap.max`` 0), ``cpu.max``,
  ``pids.max``; the kernel counts OOM kills in ``memory.events``. GPU devices cannot be
  restricted without an eBPF program: a trainer sees the GPUs ``CUDA_VISIBLE_DEVICES`` names,
  and could open others.
- **v1** (a hierarchy per controller; these test machines): ``memory.limit_in_bytes`` (and
  ``memory.memsw.limit_in_bytes`` where swap is accounted), ``cpu.cfs_quota_us``,
  ``pids.max``, and in ``devices`` the host's other NVIDIA GPUs denied; OOM kills counted in
  ``memory.oom_control``.

A trainer bound to NUMA nodes (a role's ``cpu_binding: numa``) also gets a cpuset (v1's
``cpuset`` hierarchy, v2's ``cpuset`` controller): ``cpuset.cpus`` the nodes' CPUs as
``/sys/devices/system/node/node<N>/cpulist`` lists them, ``cpuset.mems`` the nodes.

A trainer's cgroup is made under a parent: the site's ``resources.cgroup_parent`` (a path in
the hierarchy), else the executor's own cgroup. The executor itself stays outside it, so a
trainer at its limit takes neither its executor nor the host agent with it. The trainer joins
before it starts (:meth:`TrainerCgroup.wrap`: a shell writes its own pid, then execs it), so
everything it forks is inside.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from primus.errors import PrimusError

CPU_PERIOD_US = 100_000
"""The CFS period a CPU quota is counted in (the kernel's default)."""

NVIDIA_MAJOR = 195
"""The character-device major number of ``/dev/nvidia<N>`` (N the minor number)."""

_JOINING = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
"""The shell's first step: join each cgroup named before ``--`` (exit 125 if it cannot)."""

_JOIN = _JOINING + 'exec "$@"'
"""Joins the cgroups, then execs what follows: the trainer's process is in them from its
first instruction."""

_JOIN_HELD = _JOINING + ('. /dev/stdin || exit 0; [ "${PRIMUS_GO_:-}" = 1 ] || exit 0; '
                         'unset PRIMUS_GO_; exec "$@" < /dev/null')
"""Joins the cgroups, then reads the exports of the environment to exec what follows from its
standard input, a pipe (started with an empty environment); execs it once they end with
``PRIMUS_GO_=1``, its input then ``/dev/null``; else exits 0 (the pipe closed with nothing:
not wanted after all)."""

PREFIX = "primus."
"""Every trainer cgroup's name starts with it (``primus.<app>.<role>-<index>.<attempt>``)."""

LEFTOVER_AGE = 60.0
"""Seconds after which an empty trainer cgroup is a leftover (:func:`sweep`)."""

JOIN_FAILED_EXIT = 125
"""What the joining shell exits with when it cannot join (its message is in the log)."""


class CgroupError(PrimusError):
    """A trainer's cgroup cannot be made or written (the message names the file)."""


@dataclass(frozen=True)
class Limits:
    """What one trainer may use."""

    memory: int
    """Bytes: the role's memory and the site's margin."""
    cpu: float
    """Cores, as a CFS quota."""
    pids: int | None
    """Processes and threads; ``None``: no limit."""
    gpus: tuple[int, ...] | None = None
    """The GPU devices it may open (indices; empty: none of the host's); ``None``: no
    restriction."""
    numa_nodes: tuple[int, ...] = ()
    """The NUMA nodes it is bound to (``cpu_binding: numa``), its CPUs and its memory: a
    cpuset of theirs; empty: not bound."""


@dataclass(frozen=True)
class Hierarchy:
    """Where a trainer's cgroups go: for v2 one directory, for v1 one per controller."""

    version: int
    parents: Mapping[str, Path]
    """The parent directory per controller (v2: ``""``, one directory)."""

    def describe(self) -> str:
        places = sorted({str(p) for p in self.parents.values()})
        return f"cgroup v{self.version} under {', '.join(places)}"


V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "devices", "cpuset")
"""The v1 controllers a trainer's cgroup has (``cpuset`` only when it is bound to NUMA
nodes: a v1 cpuset starts with no CPU, and a trainer could not join it; ``cpuacct``, where it
is mounted apart from ``cpu``, for the CPU time its usage figures count)."""


@dataclass(frozen=True)
class Usage:
    """What a trainer's cgroup used so far, as the kernel counts it (``None``: not counted
    here)."""

    cpu_seconds: float | None
    """CPU time of every process it held, user and system."""
    memory: int | None
    """Bytes charged to it now."""
    memory_peak: int | None
    """The most bytes charged to it at once (v2 kernels before 5.19 do not count it)."""


def find_hierarchy(parent: str | None = None, mountinfo: str = "/proc/self/mountinfo",
                   own: str = "/proc/self/cgroup") -> Hierarchy:
    """The cgroup hierarchy this process can put trainers in: v2 when it offers the memory
    controller, else v1 with at least ``memory``; under ``parent`` (a path in the hierarchy)
    or this process's own cgroup.

    Raises:
        CgroupError: neither is mounted with the memory controller.
    """
    mounts = _mounts(Path(mountinfo).read_text())
    own_paths = _own_paths(Path(own).read_text())
    unified = mounts.get("cgroup2")
    if unified is not None:
        root, mount = unified
        if "memory" in _read(mount / "cgroup.controllers", "").split():
            where = parent or own_paths.get("", "/")
            return Hierarchy(2, {"": _inside(mount, root, where)})
    parents = {}
    for controller in V1_CONTROLLERS:
        found = mounts.get(controller)
        if found is not None:
            root, mount = found
            parents[controller] = _inside(mount, root, parent or own_paths.get(controller, "/"))
    if "memory" not in parents:
        raise CgroupError("no cgroup hierarchy with the memory controller is mounted "
                          "(neither cgroup v2 offering memory nor v1's memory)")
    return Hierarchy(1, parents)


def _mounts(mountinfo: str) -> dict[str, tuple[str, Path]]:
    """The cgroup mounts of ``/proc/self/mountinfo``: ``cgroup2``, and each v1 controller;
    each with its root in the hierarchy and its mount point."""
    found: dict[str, tuple[str, Path]] = {}
    for line in mountinfo.splitlines():
        fields, _, tail = line.partition(" - ")
        parts, extra = fields.split(), tail.split()
        if len(parts) < 5 or len(extra) < 3:
            continue
        root, mount = _unescape(parts[3]), Path(_unescape(parts[4]))
        if extra[0] == "cgroup2":
            found.setdefault("cgroup2", (root, mount))
        elif extra[0] == "cgroup":
            for option in extra[2].split(","):
                if option in V1_CONTROLLERS:
                    found.setdefault(option, (root, mount))
    return found


def _own_paths(text: str) -> dict[str, str]:
    """``/proc/self/cgroup``: this process's path per v1 controller, and ``""`` for v2."""
    paths = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _inside(mount: Path, root: str, path: str) -> Path:
    """The directory of hierarchy path ``path`` under a mount of hierarchy root ``root``."""
    relative = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
    return mount if relative in ("", ".") else mount / relative


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _read(path: Path, default: str) -> str:
    try:
        return path.read_text()
    except OSError:
        return default


def _number(path: Path) -> int | None:
    """The integer a cgroup file holds; ``None`` where it does not exist or holds none."""
    text = _read(path, "").strip()
    return int(text) if text.isdigit() else None


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value.strip()!r} to {path}: {exc.strerror}") from None


@dataclass
class TrainerCgroup:
    """One trainer's cgroup (a directory per v1 controller)."""

    hierarchy: Hierarchy
    directories: Mapping[str, Path]
    limits: Limits

    @classmethod
    def make(cls, hierarchy: Hierarchy, name: str, limits: Limits) -> TrainerCgroup:
        """Make the cgroup ``name`` under the hierarchy's parents with ``limits``; one left by
        an earlier attempt of the same name is reused.

        Raises:
            CgroupError: a directory or a limit cannot be written (the message names it).
        """
        if "/" in name or not name.startswith(PREFIX):
            raise CgroupError(f"cgroup name {name!r}: must be one path component starting "
                              f"with {PREFIX!r}")
        for parent in set(hierarchy.parents.values()):
            sweep(parent)
        if limits.numa_nodes and "cpuset" not in hierarchy.parents and hierarchy.version == 1:
            raise CgroupError("binding to NUMA nodes needs the cpuset controller, which no "
                              "cgroup v1 hierarchy here has")
        directories = {c: parent / name for c, parent in hierarchy.parents.items()
                       if c != "cpuset" or limits.numa_nodes}
        made = cls(hierarchy, directories, limits)
        for directory in directories.values():
            try:
                directory.mkdir(exist_ok=True)
            except OSError as exc:
                made.remove()
                raise CgroupError(f"cannot make {directory}: {exc.strerror}") from None
        try:
            made._limit()
        except CgroupError:
            made.remove()
            raise
        return made

    def _limit(self) -> None:
        limits, dirs = self.limits, self.directories
        if self.hierarchy.version == 2:
            directory = dirs[""]
            _enable_controllers(directory.parent, cpuset=bool(limits.numa_nodes))
            _write(directory / "memory.max", f"{limits.memory}\n")
            if (directory / "memory.swap.max").exists():
                _write(directory / "memory.swap.max", "0\n")
            _write(directory / "cpu.max", f"{_quota(limits.cpu)} {CPU_PERIOD_US}\n")
            _write(directory / "pids.max", f"{limits.pids or 'max'}\n")
            if limits.numa_nodes:
                _bind(directory, limits.numa_nodes)
            return
        memory = dirs["memory"]
        _write(memory / "memory.limit_in_bytes", f"{limits.memory}\n")
        if (memory / "memory.memsw.limit_in_bytes").exists():  # no swapping past the limit
            _write(memory / "memory.memsw.limit_in_bytes", f"{limits.memory}\n")
        if "cpu" in dirs:
            _write(dirs["cpu"] / "cpu.cfs_period_us", f"{CPU_PERIOD_US}\n")
            _write(dirs["cpu"] / "cpu.cfs_quota_us", f"{_quota(limits.cpu)}\n")
        if "pids" in dirs:
            _write(dirs["pids"] / "pids.max", f"{limits.pids or 'max'}\n")
        if "cpuset" in dirs:
            _bind(dirs["cpuset"], limits.numa_nodes)
        if "devices" in dirs and limits.gpus is not None:
            for minor in nvidia_minors():
                if minor not in limits.gpus:
                    _write(dirs["devices"] / "devices.deny", f"c {NVIDIA_MAJOR}:{minor} rwm\n")

    def resize(self, cpu: float, memory: int) -> None:
        """Hold the trainer to ``cpu`` cores and ``memory`` bytes from now on (its limits
        written in place: the trainer runs on). A memory limit below what it holds now is
        refused by the kernel (``CgroupError``): the caller waits for it to hold less.

        Raises:
            CgroupError: a limit cannot be written.
        """
        self.limits = replace(self.limits, cpu=cpu, memory=memory)
        dirs = self.directories
        if self.hierarchy.version == 2:
            _write(dirs[""] / "memory.max", f"{memory}\n")
            _write(dirs[""] / "cpu.max", f"{_quota(cpu)} {CPU_PERIOD_US}\n")
            return
        limit, swap = dirs["memory"] / "memory.limit_in_bytes", \
            dirs["memory"] / "memory.memsw.limit_in_bytes"
        # memsw must stay >= the limit: raise it first when growing, lower it last when not.
        order = [swap, limit] if swap.exists() and memory > int(_read(limit, "0") or 0) \
            else [limit, *([swap] if swap.exists() else [])]
        for path in order:
            _write(path, f"{memory}\n")
        if "cpu" in dirs:
            _write(dirs["cpu"] / "cpu.cfs_quota_us", f"{_quota(cpu)}\n")

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started inside this cgroup: a shell joins it, then execs ``argv``."""
        return self._joined(_JOIN, argv)

    def wrap_held(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started inside this cgroup once told (see :data:`_JOIN_HELD`): a shell,
        started with an empty environment and a pipe as its input, joins it at once, then
        reads from the pipe the environment to exec ``argv`` with (:func:`held_go`)."""
        return self._joined(_JOIN_HELD, argv)

    def _joined(self, script: str, argv: Sequence[str]) -> list[str]:
        procs = [str(d / "cgroup.procs") for d in self.directories.values()]
        return ["/bin/sh", "-c", script, "primus-join", *procs, "--", *argv]

    def usage(self) -> Usage:
        """What the trainer used so far (:class:`Usage`)."""
        dirs = self.directories
        if self.hierarchy.version == 2:
            directory = dirs[""]
            stat = re.search(r"^usage_usec (\d+)$", _read(directory / "cpu.stat", ""), re.M)
            return Usage(int(stat.group(1)) / 1e6 if stat else None,
                         _number(directory / "memory.current"),
                         _number(directory / "memory.peak"))
        accounting = dirs.get("cpuacct", dirs.get("cpu"))
        cpu = _number(accounting / "cpuacct.usage") if accounting is not None else None
        memory = dirs["memory"]
        return Usage(cpu / 1e9 if cpu is not None else None,
                     _number(memory / "memory.usage_in_bytes"),
                     _number(memory / "memory.max_usage_in_bytes"))

    def oom_kills(self) -> int:
        """How many processes of the trainer the kernel killed at its memory limit."""
        directory = self.directories["" if self.hierarchy.version == 2 else "memory"]
        name = "memory.events" if self.hierarchy.version == 2 else "memory.oom_control"
        found = re.search(r"^oom_kill (\d+)$", _read(directory / name, ""), re.MULTILINE)
        return int(found.group(1)) if found else 0

    def remove(self, timeout: float = 2.0) -> None:
        """Remove the directories, once the processes in them are gone (the kernel refuses
        a cgroup that holds one); what is still busy after ``timeout`` is left."""
        deadline = time.monotonic() + timeout
        for directory in self.directories.values():
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)  # the killed group's last exits; nothing to await


def sweep(parent: Path, older_than: float = LEFTOVER_AGE) -> None:
    """Remove the trainers' cgroups under ``parent`` that an executor killed outright left
    behind: those older than ``older_than`` seconds that hold no process (the kernel refuses
    to remove one that does). A younger one may be about to take its trainer."""
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    if now - entry.stat(follow_symlinks=False).st_mtime > older_than:
                        os.rmdir(entry.path)


def _quota(cpu: float) -> int:
    return max(1000, round(cpu * CPU_PERIOD_US))


def _enable_controllers(parent: Path, cpuset: bool = False) -> None:
    """v2: let ``parent``'s children use memory, cpu and pids, and ``cpuset`` for a trainer
    bound to NUMA nodes (the kernel refuses when ``parent`` itself holds processes: set
    ``resources.cgroup_parent`` to one that holds none)."""
    enabled = _read(parent / "cgroup.subtree_control", "").split()
    wanted = [c for c in ("memory", "cpu", "pids", *(("cpuset",) if cpuset else ()))
              if c not in enabled]
    if wanted:
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted) + "\n")


NODES = Path("/sys/devices/system/node")
"""Where the kernel lists the NUMA nodes, each with its CPUs (``node<N>/cpulist``)."""


def node_cpus(nodes: Sequence[int], root: Path = NODES) -> str:
    """The CPUs of NUMA ``nodes``, as a cpuset list (``0-15,32-47``).

    Raises:
        CgroupError: a node this host does not have.
    """
    cpus = []
    for node in sorted(set(nodes)):
        listed = _read(root / f"node{node}" / "cpulist", "").strip()
        if not listed:
            have = sorted(p.name for p in root.glob("node[0-9]*")) if root.is_dir() else []
            raise CgroupError(f"NUMA node {node}: this host has {', '.join(have) or 'none'} "
                              f"({root})")
        cpus.append(listed)
    return ",".join(cpus)


def _bind(directory: Path, nodes: Sequence[int]) -> None:
    """The cpuset ``directory`` held to ``nodes``' CPUs and memory (CPUs first: the kernel
    checks a cpuset's memory nodes against its parent's)."""
    _write(directory / "cpuset.cpus", node_cpus(nodes) + "\n")
    _write(directory / "cpuset.mems", ",".join(map(str, sorted(set(nodes)))) + "\n")


PID_MAX = "/proc/sys/kernel/pid_max"
DEFAULT_PID_MAX = 32768
"""The kernel's own default, where ``kernel.pid_max`` cannot be read."""


def host_pid_max(path: str = PID_MAX) -> int:
    """This host's ``kernel.pid_max``: how many processes and threads it may hold."""
    try:
        return int(_read(Path(path), str(DEFAULT_PID_MAX)))
    except ValueError:
        return DEFAULT_PID_MAX


def nvidia_minors() -> list[int]:
    """The minor numbers of this host's ``/dev/nvidia<N>`` devices (one per GPU)."""
    return sorted(int(path[len("/dev/nvidia"):]) for path in glob.glob("/dev/nvidia[0-9]*")
                  if path[len("/dev/nvidia"):].isdigit())


def writable(hierarchy: Hierarchy) -> str | None:
    """Why trainers' cgroups cannot be made under ``hierarchy`` by this process, if not."""
    # cpuset is made only for a trainer bound to NUMA nodes: it fails that trainer alone.
    for parent in sorted({p for c, p in hierarchy.parents.items() if c != "cpuset"}):
        if not parent.is_dir():
            return f"{parent} does not exist"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"{parent} is not writable by uid {os.geteuid()}"
    return None


def probe(parent: str | None = None) -> str | None:
    """Why trainers on this host cannot be held to their reservations, if they cannot."""
    try:
        return writable(find_hierarchy(parent))
    except (CgroupError, OSError) as exc:
        return str(exc)


def held_go(environment: Mapping[str, str]) -> bytes | None:
    """What a shell of :meth:`TrainerCgroup.wrap_held` reads to exec its command with
    ``environment`` (exports it sources from its pipe); ``None`` when a name is no shell name
    (such an environment is given at the start instead)."""
    if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) for name in environment):
        return None
    return "".join(f"export {name}={shlex.quote(value)}\n"
                   for name, value in [*environment.items(), ("PRIMUS_GO_", "1")]).encode()
