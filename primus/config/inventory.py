"""Hosts that executors can be placed on, and how to reach them.

The embedded default is the local host; an inventory file (Ansible INI or YAML, or a
DeepSpeed/Horovod hostfile) yields the same :class:`Host` values with SSH connection settings.

An Ansible inventory means here what it means to ``ansible-inventory``: the implicit groups ``all``
and ``ungrouped``, nested children, host ranges, INI values read as Python literals,
``group_vars/`` and ``host_vars/`` beside the file, and Ansible's variable precedence. Jinja2
templates are not evaluated: a variable Primus reads must hold its value itself.
``docs/inventory.md`` is the user's reference.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
import os
import re
import shlex
import socket
import string
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_args

from primus.config.reading import (
    MAX_DEPTH,
    MAX_INVENTORY_BYTES,
    InputError,
    parse_yaml,
    printable,
    read_bounded,
    shown,
)
from primus.config.spec import ByteCount
from primus.errors import PrimusError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SshSettings:
    """How to reach a host over SSH; every field maps to one OpenSSH option.

    ``None`` leaves the option to the user's ``~/.ssh/config`` and OpenSSH's defaults.
    """

    port: int | None = None
    user: str | None = None
    key_file: str | None = None
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Host:
    """A host of the inventory, with the resources Primus may use on it.

    A resource left ``None`` is not limited by placement (the local host on the embedded
    default, where oversubscription is the user's choice).

    Attributes:
        name: The inventory name (Ansible's ``inventory_hostname``).
        address: Where other hosts and SSH reach it (``ansible_host``, else the name).
        launcher: ``local`` or ``ssh``.
        ssh: Connection settings when ``launcher`` is ``ssh``.
        python: The interpreter that has Primus installed on the host.
        home: ``PRIMUS_HOME`` on the host (logs and work directories); ``None``: the default.
        groups: Inventory groups the host belongs to (placement selects by them).
        labels: ``primus_labels`` (placement selects by them too).
        health_check: ``primus_health_check``: a shell command that exits 0 on a healthy
            host (``primus.scheduler.health``); ``None``: the built-in checks alone.
    """

    name: str
    address: str
    launcher: str = "local"
    ssh: SshSettings = field(default_factory=SshSettings)
    python: str = "python3"
    home: str | None = None
    slots: int | None = None
    cpu: float | None = None
    memory: int | None = None
    gpus: int | None = None
    groups: frozenset[str] = field(default_factory=frozenset)
    labels: frozenset[str] = field(default_factory=frozenset)
    health_check: str | None = None
    gpu_tree: tuple[tuple[tuple[int, ...], ...], ...] | None = None
    """``primus_gpu_topology``: the GPUs' tree, NUMA nodes, each a list of PCIe switches,
    each a list of device indices; ``None``: not known."""
    gpu_nvlink: tuple[tuple[int, ...], ...] = ()
    """``primus_gpu_nvlink``: groups of devices all linked by NVLink (one group of every
    device behind an NVSwitch; pairs for NVLink bridges)."""
    gpu_nics: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """``primus_gpu_nics``: each RDMA NIC with the GPU devices it is closest to (under the
    same PCIe switch), which a trainer on those devices gets as ``NCCL_IB_HCA``."""
    domains: tuple[tuple[str, str], ...] = ()
    """``primus_domains``: the host's domain at each level it names (``("rack", "r3")``), by
    level; a job's ``placement_domain`` keeps its executors in one."""

    def domain(self, level: str) -> str | None:
        """The host's domain at ``level``; ``None`` where its inventory names none."""
        return next((value for name, value in self.domains if name == level), None)


def as_owner(host: Host) -> Host:
    """``host`` as an application's owner reaches it: over SSH as the owner's own account,
    with the owner's own keys (the inventory's user and key are Primus's)."""
    return dataclasses.replace(host, ssh=dataclasses.replace(host.ssh, user=None,
                                                             key_file=None))


def local_inventory() -> list[Host]:
    """The one-host inventory of the embedded default: this machine, reached on loopback."""
    return [Host(name=socket.gethostname(), address="127.0.0.1", python=sys.executable)]


class InventoryError(PrimusError):
    """An inventory that cannot be used; the message says where, about what, and what is allowed.

    Attributes:
        source: The file the problem is in: the inventory, or one of its ``group_vars/`` or
            ``host_vars/`` files.
        line: The line in ``source``, where there is one (INI inventories and hostfiles).
        subject: The host or group concerned (``host gpu01``, ``group gpu``), or empty.
        problem: What is wrong and what is allowed, in words.
    """

    def __init__(self, source: str, problem: str, line: int | None = None,
                 subject: str = "") -> None:
        self.source, self.problem, self.line, self.subject = source, problem, line, subject
        where = source if line is None else f"{source}:{line}"
        super().__init__(printable(f"{where}: {subject}: {problem}" if subject
                                   else f"{where}: {problem}"))


@dataclass(frozen=True)
class Inventory:
    """The hosts of one group of an inventory file, resolved and checked.

    Attributes:
        hosts: The hosts of the selected group, in the order they first appear in the file.
        source: The inventory file, as given.
    """

    hosts: tuple[Host, ...]
    source: str

    def host(self, name: str) -> Host:
        """The selected host whose inventory name is ``name``.

        Raises:
            InventoryError: If no selected host has that name.
        """
        for host in self.hosts:
            if host.name == name:
                return host
        raise InventoryError(self.source, f"no host named {shown(name)} among the"
                                          f" {len(self.hosts)} selected hosts")


DEFAULT_GROUP = "primus"
"""The group :func:`load_inventory` selects when none is asked for and the inventory has it."""


def load_inventory(path: str | os.PathLike[str], group: str | None = None) -> Inventory:
    """Load an Ansible inventory (INI or YAML) or a DeepSpeed/Horovod hostfile.

    The format is told by the file name, then by the content: ``.yml``, ``.yaml`` and ``.json``
    files are Ansible YAML and ``.ini`` files Ansible INI; otherwise a file with a ``[section]``
    line is INI, a file that is a YAML mapping is YAML, a file with a line giving a slot count
    (``NAME slots=N`` or ``NAME:N``) is a hostfile, and any other file is INI.

    Args:
        path: The inventory file.
        group: The group whose hosts to select; by default :data:`DEFAULT_GROUP` if the
            inventory has that group, else ``all``.

    Returns:
        The selected hosts, each with its connection settings and resources.

    Raises:
        InventoryError: The file cannot be read or is malformed, a variable Primus reads has a
            value it does not accept, or the group does not exist or has no hosts.
    """
    source = os.fspath(path)
    return _inventory(read_inventory_text(source), source, group, from_file=True)


def parse_inventory(text: str, source: str = "inventory", group: str | None = None
                    ) -> Inventory:
    """An inventory given as text (an API request's), read as :func:`load_inventory` reads a
    file named ``source``, except that no ``group_vars/`` or ``host_vars/`` are read beside it.

    Raises:
        InventoryError: As :func:`load_inventory`'s, naming ``source``.
    """
    encoded = text.encode(errors="surrogateescape")
    if len(encoded) > MAX_INVENTORY_BYTES:
        raise InventoryError(source, f"is {len(encoded):,} bytes; an inventory is at most "
                                     f"{MAX_INVENTORY_BYTES:,} bytes")
    if "\0" in text:
        raise InventoryError(source, "holds a NUL character (\\0); no host name or variable "
                                     "may")
    return _inventory(text, source, group, from_file=False)


def _inventory(text: str, source: str, group: str | None, from_file: bool) -> Inventory:
    inventory = _AnsibleInventory(source)
    kind = _format(source, text)
    _READERS[kind](inventory, text)
    # Ansible reads group_vars/ and host_vars/ in the inventory's directory, links resolved.
    vars_base = (Path(os.path.abspath(source)).parent.resolve()
                 if from_file and kind != "hostfile" else None)
    resolved = inventory.resolve(vars_base)
    if group is None:
        group = DEFAULT_GROUP if DEFAULT_GROUP in inventory.groups else "all"
    if group not in inventory.groups:
        raise InventoryError(source, f"no group {shown(group)}; the groups are "
                             + ", ".join(sorted(inventory.groups)))
    hosts = tuple(_host(name, groups, variables)
                  for name, (groups, variables) in resolved.items() if group in groups)
    if not hosts:
        raise InventoryError(source, "has no hosts; Primus needs at least one",
                             subject=f"group {group}")
    logger.debug("inventory %s (%s): %d hosts in group %s", source, kind, len(hosts), group)
    return Inventory(hosts, source)


@dataclass(frozen=True)
class _Where:
    """Where something was read: a file, and the line in formats whose lines matter."""

    source: str
    line: int | None = None

    def error(self, problem: str, subject: str = "") -> InventoryError:
        return InventoryError(self.source, problem, self.line, subject)


_Value = tuple[Any, _Where]
"""A variable's value, and where it was set."""
_Resolved = tuple[frozenset[str], dict[str, _Value]]
"""A host's groups, transitively, and its variables."""


@dataclass
class _Group:
    parents: list[str] = field(default_factory=list)
    variables: dict[str, _Value] = field(default_factory=dict)
    priority: int = 1  # ansible_group_priority: orders groups of equal depth


@dataclass
class _HostEntry:
    groups: list[str] = field(default_factory=list)  # the groups that list it directly
    variables: dict[str, _Value] = field(default_factory=dict)  # set in the inventory file


class _AnsibleInventory:
    """Groups and hosts as an inventory file declares them, resolved the way Ansible does.

    Mirrors Ansible's ``InventoryData``: readers add groups, hosts, children and variables; then
    :meth:`resolve` applies the implicit groups and Ansible's variable precedence.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.groups = {"all": _Group(), "ungrouped": _Group(parents=["all"])}
        self.hosts: dict[str, _HostEntry] = {}  # in the order hosts first appear
        self.listed = 0  # hosts added, a host in two groups counted twice
        self._child_where: dict[tuple[str, str], _Where] = {}  # where (parent, child) is said

    def add_group(self, name: str) -> _Group:
        group = self.groups.get(name)
        if group is None:
            if len(self.groups) == MAX_GROUPS:
                raise InventoryError(self.source, f"has more than {MAX_GROUPS:,} groups")
            group = self.groups[name] = _Group()
        return group

    def add_host(self, name: str, group: str, port: int | None, where: _Where) -> _HostEntry:
        """Add ``name`` to ``group``; like Ansible, a ``name:port`` port counts where first seen.

        A range expands to at most :data:`MAX_HOSTS` hosts, but a file may hold many: the hosts
        of the whole inventory are bounded too, in number and in times listed.
        """
        self.listed += 1
        if self.listed > MAX_LISTED_HOSTS:
            raise where.error(f"lists hosts more than {MAX_LISTED_HOSTS:,} times in all, host"
                              " ranges expanded (a host in two groups counts twice)")
        entry = self.hosts.get(name)
        if entry is None:
            if len(self.hosts) == MAX_HOSTS:
                raise where.error(f"holds more than {MAX_HOSTS:,} hosts, host ranges expanded")
            entry = self.hosts[name] = _HostEntry()
            if port is not None:
                entry.variables["ansible_port"] = (port, where)
        self.add_group(group)
        if group not in entry.groups:
            entry.groups.append(group)
        return entry

    def add_child(self, parent: str, child: str, where: _Where) -> None:
        """Make ``child`` a child of ``parent``; cycles are refused by :meth:`resolve`."""
        self.add_group(parent)
        if child == parent:
            raise _cycle_error(parent, child, where)
        if parent not in self.add_group(child).parents:
            self.groups[child].parents.append(parent)
            self._child_where[(parent, child)] = where

    def set_group_variable(self, group: str, key: str, value: Any, where: _Where) -> None:
        if key != "ansible_group_priority":
            self.add_group(group).variables[key] = (value, where)
            return
        try:
            self.add_group(group).priority = int(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an infinity
            raise where.error(f"ansible_group_priority={shown(value)}: must be an integer",
                              subject=f"group {group}") from None

    def resolve(self, vars_base: Path | None) -> dict[str, _Resolved]:
        """Every host's groups (transitively, ``all`` included) and variables, as Ansible has them.

        Groups without a parent become children of ``all``; the hosts in no group but ``all``,
        and only they, are in ``ungrouped``. Variables, each layer winning over those before:
        ``all``'s in the file, other groups' in the file, ``group_vars/all``, other groups'
        ``group_vars/``, the host's in the file, its ``host_vars/``. Groups are layered by depth
        below ``all``, then ``ansible_group_priority``, then name. Call once, after the reader.

        Args:
            vars_base: The directory holding ``group_vars/`` and ``host_vars/``; ``None``: none.
        """
        for name, group in list(self.groups.items()):
            if name != "all" and not group.parents:
                self.add_child("all", name, _Where(self.source))
        lineages = self._lineages()
        depths = {"all": 0}

        def depth(name: str) -> int:
            # Groups may nest as deep as the file is long: no recursion. Parents form no cycle.
            pending = [name]
            while pending:
                current = pending[-1]
                parents = self.groups[current].parents
                missing = [parent for parent in parents if parent not in depths]
                if missing:
                    pending += missing
                    continue
                if current not in depths:
                    depths[current] = 1 + max(depths[parent] for parent in parents)
                pending.pop()
            return depths[name]

        layer_keys: dict[str, tuple[int, int, str]] = {}

        def layer_key(name: str) -> tuple[int, int, str]:
            if name not in layer_keys:  # once per group, not once per host and group
                layer_keys[name] = depth(name), self.groups[name].priority, name
            return layer_keys[name]

        def from_files(directory: str, name: str) -> dict[str, _Value]:
            return _vars_files_variables(vars_base / directory, name) if vars_base else {}

        group_files = {name: from_files("group_vars", name) for name in self.groups}
        resolved = {}
        for name, entry in self.hosts.items():
            direct = [group for group in entry.groups if group != "ungrouped"]
            if set(direct) <= {"all"}:
                direct.append("ungrouped")
            groups = frozenset().union(*(lineages[group] for group in direct))
            layered = sorted(groups - {"all"}, key=layer_key)
            variables: dict[str, _Value] = {}
            for layer in (self.groups["all"].variables,
                          *(self.groups[group].variables for group in layered),
                          group_files["all"],
                          *(group_files[group] for group in layered),
                          entry.variables,
                          from_files("host_vars", name)):
                variables.update(layer)
            resolved[name] = (groups, variables)
        return resolved

    def _lineages(self) -> dict[str, frozenset[str]]:
        """Each group with all its ancestors, in time linear in the groups and their children.

        Raises:
            InventoryError: Children form a cycle (naming the line of one of its links), or a
                group has more than :data:`MAX_ANCESTORS` ancestors.
        """
        lineages: dict[str, frozenset[str]] = {}
        expanding: set[str] = set()  # on the current path, waiting for their parents
        for start in self.groups:
            pending = [start]  # no recursion: groups may nest as deep as the file is long
            while pending:
                name = pending[-1]
                if name in lineages:
                    pending.pop()
                    continue
                parents = self.groups[name].parents
                waiting = [parent for parent in parents if parent not in lineages]
                if waiting:
                    # Above `name` on the stack is only what it descends from.
                    cycle = next((parent for parent in waiting if parent in expanding), None)
                    if cycle is not None:
                        raise _cycle_error(cycle, name, self._child_where[(cycle, name)])
                    expanding.add(name)
                    pending += waiting
                    continue
                lineage = frozenset([name]).union(*(lineages[parent] for parent in parents))
                if len(lineage) > MAX_ANCESTORS + 1:
                    raise InventoryError(self.source, f"group {shown(name)} descends from more "
                                         f"than {MAX_ANCESTORS} groups")
                lineages[name] = lineage
                expanding.discard(name)
                pending.pop()
        return lineages


def _cycle_error(parent: str, child: str, where: _Where) -> InventoryError:
    return where.error(f"cannot have {shown(child)} as a child: {shown(parent)} is"
                       f" {shown(child)} or descends from it, and children must not form a cycle",
                       subject=f"group {parent}")


# Reading files.

_YAML_SUFFIXES = (".yml", ".yaml", ".json")  # Ansible's YAML_FILENAME_EXTENSIONS
_VARS_FILE_SUFFIXES = ("", *_YAML_SUFFIXES)
_SECTION = re.compile(r"\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?")
_CHILD_LINE = re.compile(r"([^:\]\s]+)\s*(?:#.*)?")
_BRACKETED_HOST_PORT = re.compile(r"\[(.+)\]:([0-9]+)")
_HOST_PORT = re.compile(r"((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)")
_GIVES_SLOTS = re.compile(r"\S+\s+slots=|[^\s:\[]+:[0-9]+$")
_HOSTFILE_LINE = re.compile(r"(?:(\S+)\s+slots=|([^\s:]+):)([1-9][0-9]{0,5})")


def read_inventory_text(source: str) -> str:
    """The text of the inventory file ``source``, within the bounds of inventories.

    Raises:
        InventoryError: It cannot be read, is too large, is not UTF-8 or holds a NUL.
    """
    try:
        data = read_bounded(source, MAX_INVENTORY_BYTES)
        text = data.decode("utf-8-sig")  # a byte order mark is no text
    except OSError as exc:
        raise InventoryError(source, f"cannot read: {exc.strerror}") from exc
    except InputError as exc:
        raise InventoryError(source, str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise InventoryError(source, f"is not UTF-8 text ({exc.reason})") from exc
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise InventoryError(source, "holds a NUL character (\\0); no host name or variable may",
                             line)
    return text


class _DuplicateJsonKeyError(ValueError):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        raise _DuplicateJsonKeyError(next(key for key in keys if keys.count(key) > 1))
    return dict(pairs)


def _parse_yaml(text: str, source: str) -> Any:
    """YAML or JSON; like Ansible, JSON first, for JSON may hold tabs that YAML refuses.

    Both within the bounds of :mod:`primus.config.reading` (JSON by the YAML parser when it
    is past them, or names a key twice, so that the error says where).
    """
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except (ValueError, RecursionError):
        pass
    try:
        data = parse_yaml(text)
    except InputError as exc:
        raise InventoryError(source, str(exc), exc.line) from exc
    if _depth_past_bound(data):  # JSON the YAML parser read, but not YAML's bounds: re-check
        raise InventoryError(source, f"nests deeper than {MAX_DEPTH} levels")
    return data


def _depth_past_bound(data: Any) -> bool:
    """Whether parsed data nests deeper than :data:`MAX_DEPTH` (iteratively: no recursion)."""
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                return True
            items = value.values() if isinstance(value, dict) else value
            pending.extend((item, depth + 1) for item in items)
    return False


def _format(source: str, text: str) -> str:
    """``ini``, ``yaml`` or ``hostfile``, by the rule :func:`load_inventory` documents."""
    suffix = os.path.splitext(source)[1]
    if suffix in _YAML_SUFFIXES:
        return "yaml"
    if suffix == ".ini":
        return "ini"
    lines = [line.partition("#")[0].strip() for line in text.splitlines()]
    if any(line.startswith("[") for line in lines):
        return "ini"
    try:
        if isinstance(_parse_yaml(text, source), dict):
            return "yaml"
    except InventoryError:
        pass
    return "hostfile" if any(map(_GIVES_SLOTS.match, lines)) else "ini"


def _read_ini(inventory: _AnsibleInventory, text: str) -> None:
    """Read Ansible's INI format as its ``ini`` inventory plugin does.

    Lines before the first section list ``ungrouped`` hosts. ``[g:children]`` and ``[g:vars]``
    may name a group declared further down, by ``[g]`` or ``[g:children]``, but not one never
    declared.
    """
    group, kind = "ungrouped", "hosts"
    declared = {"all", "ungrouped"}
    mentioned: dict[str, _Where] = {}
    for number, line in enumerate(map(str.strip, text.splitlines()), start=1):
        if not line or line[0] in "#;":
            continue
        where = _Where(inventory.source, number)
        if section := _SECTION.fullmatch(line):
            group, kind = section[1], section[2] or "hosts"
            if kind not in ("hosts", "children", "vars"):
                raise where.error(f"section {line} has an unknown type {shown(kind)}; allowed:"
                                  f" [{group}], [{group}:children], [{group}:vars]")
            if kind == "vars":
                mentioned.setdefault(group, where)
            else:
                declared.add(group)
            inventory.add_group(group)
        elif line.startswith("[") and line.endswith("]"):
            raise where.error(f"invalid section {line}; allowed: [group], [group:children],"
                              " [group:vars], with no spaces or ':' in the group name")
        elif kind == "hosts":
            _read_ini_host_line(inventory, group, line, where)
        elif kind == "vars":
            key, equals, value = line.partition("=")
            if not equals:
                raise where.error(f"got {shown(line)}; a line of [{group}:vars] is key=value")
            inventory.set_group_variable(group, key.strip(), _ini_value(value.strip()), where)
        elif child := _CHILD_LINE.fullmatch(line):
            mentioned.setdefault(child[1], where)
            inventory.add_child(group, child[1], where)
        else:
            raise where.error(f"got {shown(line)}; a line of [{group}:children] is one group name")
    for name, where in mentioned.items():
        if name not in declared:
            raise where.error(f"is never declared; declare it with a [{name}] or"
                              f" [{name}:children] section", subject=f"group {name}")


def _read_ini_host_line(inventory: _AnsibleInventory, group: str, line: str,
                        where: _Where) -> None:
    """``PATTERN [key=value ...]``, split like a shell does, ``#`` starting a comment."""
    try:
        pattern, *assignments = shlex.split(line, comments=True)
    except ValueError as exc:
        raise where.error(f"cannot split {shown(line)} into words: {exc}") from None
    variables = {}
    for assignment in assignments:
        key, equals, value = assignment.partition("=")
        if not equals:
            raise where.error(f"got {shown(assignment)}; after the host name come key=value"
                              " variables", subject=f"host {pattern}")
        variables[key] = (_ini_value(value), where)
    names, port = _host_names(pattern, where)
    for name in names:
        inventory.add_host(name, group, port, where).variables.update(variables)


def _ini_value(text: str) -> Any:
    """A value in an INI inventory as Ansible reads it: a Python literal if it is one, else text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # "\d" in a path is text, not an error
            return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return text  # deep nesting too: CPython's parser gives up with one of the last two


def _read_yaml(inventory: _AnsibleInventory, text: str) -> None:
    """Read Ansible's YAML format as its ``yaml`` inventory plugin does, unknown keys refused."""
    data = _parse_yaml(text, inventory.source)
    if not isinstance(data, dict) or not data:
        raise _Where(inventory.source).error(
            f"got {shown(data)}; a YAML inventory is a mapping of groups, such as"
            " all: {hosts: ..., children: ..., vars: ...}")
    for name, body in data.items():
        _read_yaml_group(inventory, name, body)


def _read_yaml_group(inventory: _AnsibleInventory, name: Any, body: Any) -> None:
    where = _Where(inventory.source)
    subject = f"group {name}"
    if not isinstance(name, str):
        raise where.error(f"group names must be strings, got {shown(name)}")
    if not isinstance(body, dict | None):
        raise where.error(f"got {shown(body)}; a group maps any of hosts, children and vars",
                          subject)
    inventory.add_group(name)
    for key, section in (body or {}).items():
        if key not in ("hosts", "children", "vars"):
            raise where.error(f"unknown key {shown(key)}; allowed: hosts, children, vars", subject)
        if isinstance(section, str):  # Ansible reads `hosts: gpu01` as `hosts: {gpu01: }`
            section = {section: None}
        if not isinstance(section, dict | None):
            raise where.error(f"{key} must be a mapping, got {shown(section)}", subject)
        for item, value in (section or {}).items():
            if key == "vars":
                inventory.set_group_variable(name, item, value, where)
            elif key == "children":
                _read_yaml_group(inventory, item, value)
                inventory.add_child(name, item, where)
            else:
                _read_yaml_host(inventory, name, item, value, where)


def _read_yaml_host(inventory: _AnsibleInventory, group: str, pattern: Any, variables: Any,
                    where: _Where) -> None:
    if not isinstance(pattern, str):
        raise where.error(f"host {shown(pattern)} must be a string; quote names that look like"
                          " numbers", subject=f"group {group}")
    if not isinstance(variables, dict | None):
        raise where.error(f"got {shown(variables)}; a host maps its variables to their values",
                          subject=f"host {pattern}")
    names, port = _host_names(pattern, where)
    for name in names:
        entry = inventory.add_host(name, group, port, where)
        entry.variables.update((key, (value, where)) for key, value in (variables or {}).items())


def _read_hostfile(inventory: _AnsibleInventory, text: str) -> None:
    """Read a DeepSpeed/Horovod hostfile: hosts in ``ungrouped``, ``primus_slots`` set."""
    first_lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.partition("#")[0].strip()
        if not line:
            continue
        where = _Where(inventory.source, number)
        match = _HOSTFILE_LINE.fullmatch(line)
        if not match:
            raise where.error(f"got {shown(line)}; a hostfile line is NAME slots=N or NAME:N,"
                              " with N a whole number >= 1, or a # comment (for Ansible INI, name"
                              " the file *.ini or give it a [group] section)")
        name = match[1] or match[2]
        if name in first_lines:
            raise where.error(f"is listed again (first on line {first_lines[name]}); list each"
                              " host once", subject=f"host {name}")
        first_lines[name] = number
        inventory.add_host(name, "ungrouped", None, where).variables["primus_slots"] = (
            int(match[3]), where)


_READERS: dict[str, Callable[[_AnsibleInventory, str], None]] = {
    "ini": _read_ini, "yaml": _read_yaml, "hostfile": _read_hostfile}


def _host_names(pattern: str, where: _Where) -> tuple[list[str], int | None]:
    """The hosts and the port of a host pattern such as ``gpu[01:08].example:2222``.

    A port follows a ``:`` (``[address]:port`` for IPv6); ranges are ``[begin:end]`` or
    ``[begin:end:step]``, over numbers (a leading zero fixes the width) or single letters.
    """
    port = None
    for form in (_BRACKETED_HOST_PORT, _HOST_PORT):  # in turn, as Ansible does
        if match := form.fullmatch(pattern):
            if len(match[2]) > 5:  # int() refuses more than 4,300 digits; ports have five
                raise where.error(f"invalid port {shown(match[2])} in {shown(pattern)}; a port"
                                  " is a whole number from 1 to 65535")
            pattern, port = match[1], int(match[2])
    if not pattern or pattern.endswith(":") or pattern == "---":
        raise where.error(f"invalid host name {shown(pattern)}; allowed: a name or address, with"
                          " ranges such as gpu[01:08], then :port if need be")
    return _expand_ranges(pattern, where), port


def _expand_ranges(pattern: str, where: _Where) -> list[str]:
    head, bracket, rest = pattern.partition("[")
    if not bracket:
        return [pattern]
    spec, closing, tail = rest.partition("]")
    bounds = spec.split(":")
    try:
        if not closing or len(bounds) not in (2, 3) or not bounds[1]:
            raise ValueError("must be [begin:end] or [begin:end:step]")
        step = bounds[2] if len(bounds) == 3 else "1"
        if not (step.isdecimal() and len(step) <= 12 and int(step) >= 1):
            raise ValueError("the step must be a whole number >= 1")
        items = _range_items(bounds[0] or "0", bounds[1], int(step))
    except ValueError as exc:
        raise where.error(f"host range [{spec}{closing} in {shown(pattern)}: {exc}") from None
    tails = _expand_ranges(tail, where)
    if len(items) * len(tails) > MAX_HOSTS:
        raise where.error(f"host pattern {shown(pattern)} expands to more than {MAX_HOSTS:,} "
                          "hosts")
    return [head + item + tail for item in items for tail in tails]


def _range_items(begin: str, end: str, step: int) -> list[str]:
    letters = string.ascii_letters
    if len(begin) == len(end) == 1 and begin in letters and end in letters:
        if letters.index(begin) > letters.index(end):
            raise ValueError("begin must not come after end")
        return list(letters[letters.index(begin):letters.index(end) + 1:step])
    if not (begin.isdecimal() and end.isdecimal()):
        raise ValueError("begin and end must be both whole numbers or both single letters")
    if max(len(begin), len(end)) > 12:
        raise ValueError("begin and end have at most 12 digits")
    if int(begin) > int(end):
        raise ValueError("begin must not be greater than end")
    if (int(end) - int(begin)) // step + 1 > MAX_HOSTS:
        raise ValueError(f"expands to more than {MAX_HOSTS:,} hosts")
    width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
    if width and len(end) != width:
        raise ValueError("begin has a leading zero, so end must have as many digits")
    return [str(number).zfill(width) for number in range(int(begin), int(end) + 1, step)]


def _vars_files_variables(directory: Path, name: str) -> dict[str, _Value]:
    """The variables Ansible's ``host_group_vars`` plugin finds for ``name`` in ``directory``.

    The first of ``name``, ``name.yml``, ``name.yaml``, ``name.json`` that exists is read; if it
    is a directory, every such file below it is, in name order, later files winning.
    """
    variables: dict[str, _Value] = {}
    for path in _vars_files(directory, name):
        where = _Where(str(path))
        data = _parse_yaml(read_inventory_text(where.source), where.source)
        if data and not isinstance(data, dict):
            raise where.error(f"got {shown(data)}; a vars file maps variable names to values")
        variables.update((key, (value, where)) for key, value in (data or {}).items())
    return variables


def _vars_files(directory: Path, name: str) -> list[Path]:
    if "/" in name or name in ("", ".", ".."):
        # Looked up as a path, a host or group named "/" would walk the whole file system, and
        # one named /etc/shadow or ../../x would read a file anywhere: no such name has a file.
        return []
    # os.path's tests, as Ansible's: a name no file can have (past 255 bytes) is no file, where
    # Path.is_dir() raises.
    for suffix in _VARS_FILE_SUFFIXES:
        path = directory / (name + suffix)
        if os.path.isdir(path):
            return _files_below(path)
        if os.path.exists(path):
            return [path]
    return []


def _files_below(directory: Path) -> list[Path]:
    """The vars files below ``directory`` as Ansible reads them: in name order, a directory's
    files where its name sorts.

    Each directory is read once, however many links lead to it (a link to a parent would
    otherwise loop), and at most :data:`MAX_VARS_FILES` files are taken.
    """
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def entries(path: Path) -> Iterator[Path]:
        try:
            identity = os.stat(path)
            names = sorted(path.iterdir())
        except OSError as exc:
            raise InventoryError(str(path), f"cannot read: {exc.strerror}") from exc
        if (identity.st_dev, identity.st_ino) in seen:
            return iter(())
        seen.add((identity.st_dev, identity.st_ino))
        return iter(names)

    walking = [entries(directory)]  # no recursion: links may nest without end
    while walking:
        path = next(walking[-1], None)
        if path is None:
            walking.pop()
        elif path.name.startswith(".") or path.name.endswith("~"):  # hidden files, backups
            continue
        elif os.path.isdir(path) and not path.suffix:
            walking.append(entries(path))
        elif os.path.isfile(path) and path.suffix in _VARS_FILE_SUFFIXES:
            found.append(path)
            if len(found) > MAX_VARS_FILES:
                raise InventoryError(str(directory), f"holds more than {MAX_VARS_FILES:,} "
                                     "vars files")
    return found


MAX_VARS_FILES = 10_000
"""Files one ``group_vars/NAME/`` or ``host_vars/NAME/`` directory may hold, all levels."""


# From variables to a Host.

_PRIMUS_VARIABLES = ("primus_cpu", "primus_domains", "primus_gpu_nics", "primus_gpu_nvlink",
                     "primus_gpu_topology", "primus_gpus", "primus_health_check", "primus_home",
                     "primus_labels", "primus_memory", "primus_python", "primus_slots")
DEPLOY_VARIABLES = "primus_deploy_"
"""The prefix of the deployment playbook's variables (deploy/ansible, docs/deploy.md): they
share the inventory Primus reads, which leaves them to the playbook."""
_CONNECTIONS = {"ssh": "ssh", "ansible.builtin.ssh": "ssh",
                "local": "local", "ansible.builtin.local": "local"}
_INTERPRETER_DISCOVERY = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")
_BYTE_COUNT = get_args(ByteCount)[1]  # the job spec's parser of sizes such as 64Gi

_T = TypeVar("_T")


def _host(name: str, groups: frozenset[str], variables: dict[str, _Value]) -> Host:
    """The host ``name``, from its resolved variables; unknown ``primus_*`` variables refused
    (but the deployment playbook's, ``primus_deploy_*``)."""
    subject = f"host {name}"
    unknown = sorted(key for key in variables if isinstance(key, str)
                     and key.startswith("primus_") and key not in _PRIMUS_VARIABLES
                     and not key.startswith(DEPLOY_VARIABLES))
    if unknown:
        raise variables[unknown[0]][1].error(
            f"unknown variable {unknown[0]}; Primus reads {', '.join(_PRIMUS_VARIABLES)} "
            f"(and leaves {DEPLOY_VARIABLES}* to the deployment playbook)", subject)

    def setting(keys: tuple[str, ...], check: Callable[[Any], _T]) -> _T | None:
        """The checked value of the last of ``keys`` set, as Ansible reads aliases; else None."""
        for key in reversed(keys):
            if variables.get(key, (None,))[0] is None:
                continue
            value, where = variables[key]
            if isinstance(value, str) and ("{{" in value or "{%" in value):
                raise where.error(f"{key}={shown(value)}: Jinja2 templates are not evaluated by"
                                  " Primus; give the value itself", subject)
            try:
                return check(value)
            except ValueError as exc:
                raise where.error(f"{key}={shown(value)}: {exc}", subject) from None
        return None

    interpreter = setting(("ansible_python_interpreter",), _text)
    gpus = setting(("primus_gpus",), _whole_number(0, 1024))
    tree = setting(("primus_gpu_topology",), _gpu_tree)
    nvlink = setting(("primus_gpu_nvlink",), _gpu_groups) or ()
    if tree is not None or nvlink:
        gpus = _gpus_of_topology(variables, subject, gpus, tree, nvlink)
    nics = setting(("primus_gpu_nics",), _gpu_nics) or ()
    stray = sorted({d for _, devices in nics for d in devices if gpus is None or d >= gpus})
    if stray:
        raise variables["primus_gpu_nics"][1].error(
            f"primus_gpu_nics names GPU(s) {', '.join(map(str, stray))}, which the host does "
            f"not have (" + (f"0 to {gpus - 1}" if gpus else "primus_gpus is unset") + ")",
            subject)
    return Host(
        name=name,
        address=setting(("ansible_host", "ansible_ssh_host"), _text) or name,
        launcher=setting(("ansible_connection",), _connection) or "ssh",
        ssh=SshSettings(
            port=setting(("ansible_port", "ansible_ssh_port"), _whole_number(1, 65535)),
            user=setting(("ansible_user", "ansible_ssh_user"), _text),
            key_file=setting(("ansible_private_key_file", "ansible_ssh_private_key_file"), _text),
            extra_args=(*(setting(("ansible_ssh_common_args",), _ssh_arguments) or ()),
                        *(setting(("ansible_ssh_extra_args",), _ssh_arguments) or ()))),
        python=setting(("primus_python",), _text)
        or (None if interpreter in _INTERPRETER_DISCOVERY else interpreter) or "python3",
        home=setting(("primus_home",), _text),
        slots=setting(("primus_slots",), _whole_number(1, 1_000_000)),
        cpu=setting(("primus_cpu",), _positive_number),
        memory=setting(("primus_memory",), _memory),
        gpus=gpus,
        groups=groups,
        labels=setting(("primus_labels",), _labels) or frozenset(),
        health_check=setting(("primus_health_check",), _text),
        gpu_tree=tree,
        gpu_nvlink=nvlink,
        gpu_nics=nics,
        domains=setting(("primus_domains",), _domains) or (),
    )


def _gpus_of_topology(variables: dict[str, _Value], subject: str, gpus: int | None,
                      tree: tuple[tuple[tuple[int, ...], ...], ...] | None,
                      nvlink: tuple[tuple[int, ...], ...]) -> int:
    """The host's GPU count, checked against its topology: the tree names every device from
    0 once (``primus_gpus``, when set, says as many), and NVLink groups name only those."""
    if tree is None:
        raise variables["primus_gpu_nvlink"][1].error(
            "primus_gpu_nvlink needs primus_gpu_topology (the GPUs' NUMA nodes and PCIe "
            "switches) beside it", subject)
    devices = sorted(d for node in tree for switch in node for d in switch)
    where = variables["primus_gpu_topology"][1]
    if devices != list(range(len(devices))):
        raise where.error(f"primus_gpu_topology must name the devices 0 to {len(devices) - 1} "
                          f"once each; got {', '.join(map(str, devices))}", subject)
    if gpus is not None and gpus != len(devices):
        raise where.error(f"primus_gpu_topology names {len(devices)} GPU(s), primus_gpus says "
                          f"{gpus}", subject)
    stray = sorted({d for group in nvlink for d in group} - set(devices))
    if stray:
        raise variables["primus_gpu_nvlink"][1].error(
            f"primus_gpu_nvlink names GPU(s) {', '.join(map(str, stray))}, which "
            f"primus_gpu_topology does not have (0 to {len(devices) - 1})", subject)
    return len(devices)


# Checks of variable values: each returns the value Primus uses or raises ValueError saying what
# is allowed.

def _text(value: Any) -> str:
    if isinstance(value, str) and value:
        return value
    raise ValueError("must be a non-empty string")


MAX_HOSTS = 100_000
"""Hosts one inventory may hold, host ranges expanded."""
MAX_GROUPS = 10_000
"""Groups one inventory may hold."""
MAX_ANCESTORS = 256
"""Groups one group may descend from (its parents, theirs...)."""
MAX_LISTED_HOSTS = 10 * MAX_HOSTS
"""Times an inventory may list hosts in all, host ranges expanded (a host in two groups counts
twice)."""


def _whole_number(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    allowed = (f"must be a whole number from {minimum} to {maximum}" if maximum is not None
               else f"must be a whole number >= {minimum}")

    def check(value: Any) -> int:
        if (isinstance(value, int) and not isinstance(value, bool) and value >= minimum
                and (maximum is None or value <= maximum)):
            return value
        raise ValueError(allowed)

    return check


def _positive_number(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 100_000:
        return float(value)  # NaN and infinities fail the comparison
    raise ValueError("must be a number > 0 and <= 100000, such as 8 or 0.5")


def _memory(value: Any) -> int:
    size: int = _BYTE_COUNT.parse(value)  # raises ValueError saying what is allowed
    if size <= 0:
        raise ValueError("must be greater than 0")
    return size


def _connection(value: Any) -> str:
    if isinstance(value, str) and value in _CONNECTIONS:
        return _CONNECTIONS[value]
    raise ValueError("Primus reaches hosts by ssh or local (ansible.builtin.ssh and"
                     " ansible.builtin.local too); other connection plugins are not supported")


def _ssh_arguments(value: Any) -> list[str]:
    if not isinstance(value, str):
        raise ValueError("must be a string of ssh options, quoted as in a shell")
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"must be a string of ssh options, quoted as in a shell ({exc})") from None


_TREE_FORM = ("must be the GPUs' NUMA nodes separated by ';' (node 0 first; empty for a node "
              "without GPUs), each node's PCIe switches by '|', each switch's devices by ',' "
              "(ranges a-b allowed), such as 0-1|2-3;4-5|6-7; or the same as lists of lists "
              "of device lists")
_GROUPS_FORM = ("must be groups of GPUs linked by NVLink separated by ';', each a list of "
                "devices (ranges a-b allowed), such as 0-7 or 0,1;2,3; or a list of lists")


def _devices(value: Any, form: str) -> tuple[int, ...]:
    """One list of device indices: ``0,2-3`` or a list of whole numbers."""
    if isinstance(value, str):
        found: list[int] = []
        for item in value.split(","):
            low, _, high = item.strip().partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise ValueError(form)
            found += range(int(low), int(high or low) + 1)
        value = found
    if isinstance(value, list | tuple) and value and all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1024 for d in value):
        return tuple(value)
    raise ValueError(form)


def format_gpu_tree(tree: Sequence[Sequence[Sequence[int]]]) -> str:
    """A GPU tree in ``primus_gpu_topology``'s text form (``0-1|2-3;4-5|6-7``)."""
    return ";".join("|".join(_ranges(switch) for switch in node) for node in tree)


def format_gpu_groups(groups: Sequence[Sequence[int]]) -> str:
    """NVLink groups in ``primus_gpu_nvlink``'s text form (``0-7``, ``0-1;2-3``)."""
    return ";".join(_ranges(group) for group in groups)


def parse_gpu_topology(tree: str, nvlink: str = "") -> tuple[
        tuple[tuple[tuple[int, ...], ...], ...], tuple[tuple[int, ...], ...]]:
    """The text forms of :func:`format_gpu_tree` and :func:`format_gpu_groups` read back.

    Raises:
        ValueError: either does not read, saying what is allowed.
    """
    return _gpu_tree(tree), _gpu_groups(nvlink) if nvlink else ()


def _ranges(devices: Sequence[int]) -> str:
    """``0,1,2,5`` as ``0-2,5``."""
    runs: list[list[int]] = []
    for device in devices:
        if runs and runs[-1][1] + 1 == device:
            runs[-1][1] = device
        else:
            runs.append([device, device])
    return ",".join(f"{low}-{high}" if high > low else str(low) for low, high in runs)


_NICS_FORM = ("must name each RDMA NIC and the GPUs closest to it: text such as "
              "mlx5_0:0-3;mlx5_1:4-7, or a mapping {mlx5_0: [0, 1, 2, 3]}; NIC names of "
              "letters, digits, '_', '-' and '.'")


def _gpu_nics(value: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if isinstance(value, str):
        pairs = [item.partition(":") for item in value.split(";") if item.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise ValueError(_NICS_FORM)
        value = {nic.strip(): devices for nic, _, devices in pairs}
    if not isinstance(value, dict) or not value or not all(
            isinstance(nic, str) and re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", nic) for nic in value):
        raise ValueError(_NICS_FORM)
    return tuple((nic, _devices(devices, _NICS_FORM)) for nic, devices in value.items())


def parse_gpu_nics(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """:func:`format_gpu_nics`' form read back.

    Raises:
        ValueError: it does not read, saying what is allowed.
    """
    return _gpu_nics(text)


def format_gpu_nics(nics: Sequence[tuple[str, Sequence[int]]]) -> str:
    """NICs in ``primus_gpu_nics``' text form (``mlx5_0:0-3;mlx5_1:4-7``)."""
    return ";".join(f"{nic}:{_ranges(devices)}" for nic, devices in nics)


def _gpu_tree(value: Any) -> tuple[tuple[tuple[int, ...], ...], ...]:
    nodes = value.split(";") if isinstance(value, str) else value
    if not isinstance(nodes, list | tuple) or not nodes:
        raise ValueError(_TREE_FORM)
    tree = []
    for node in nodes:  # a node without GPUs is empty (its place is its number)
        switches = (node.split("|") if node.strip() else []) if isinstance(node, str) else node
        if not isinstance(switches, list | tuple):
            raise ValueError(_TREE_FORM)
        tree.append(tuple(_devices(switch, _TREE_FORM) for switch in switches))
    if not any(tree):
        raise ValueError(_TREE_FORM)
    return tuple(tree)


def _gpu_groups(value: Any) -> tuple[tuple[int, ...], ...]:
    groups = value.split(";") if isinstance(value, str) else value
    if not isinstance(groups, list | tuple) or not groups:
        raise ValueError(_GROUPS_FORM)
    return tuple(_devices(group, _GROUPS_FORM) for group in groups)


_DOMAINS_FORM = ("must name the host's domain per level: a mapping such as {rack: r3, spine: "
                 "s1}, or text rack=r3,spine=s1; levels of lowercase letters, digits or '_', "
                 "values without spaces, ',' or '='")


def _domains(value: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(value, str):
        pairs = [item.strip().partition("=") for item in value.split(",") if item.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise ValueError(_DOMAINS_FORM)
        value = {level.strip(): name.strip() for level, _, name in pairs}
    if not isinstance(value, dict) or not value or not all(
            isinstance(level, str) and re.fullmatch(r"[a-z][a-z0-9_]{0,31}", level) and
            isinstance(name, str | int) and re.fullmatch(r"[^\s,=]{1,128}", str(name))
            for level, name in value.items()):
        raise ValueError(_DOMAINS_FORM)
    return tuple(sorted((level, str(name)) for level, name in value.items()))


def _labels(value: Any) -> frozenset[str]:
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, list | tuple | set) and all(isinstance(item, str) for item in items):
        return frozenset(item.strip() for item in items if item.strip())
    raise ValueError("must be a list of strings or a comma-separated string")
