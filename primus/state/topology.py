"""An application's topology as it should be now: the submitted spec plus the changes since.

The stored ``spec`` never changes. What changes at run time is kept beside it, one key per
fact (docs/etcd-layout.md), so that ``etcdctl`` shows it and any AM that takes over reconciles
it:

- ``roles/<role>/desired``: how many executors the role should have (an integer, as text);
- ``roles/<role>/spec``: a role added at run time (:class:`RoleAdded`);
- ``roles/<role>/removed``: the role was removed (:class:`RoleRemoved`);
- ``roles/<role>/resources``: its CPU and memory per executor, resized (:class:`RoleResources`);
- ``sources/<stream>/<change>``: a data source added to a stream (a ``SourceSpec``);
- ``changes/<seq>``: the log of changes, who asked and what (:class:`TopologyChange`).

:func:`effective_spec` folds them into the spec every component works from: the AM places,
launches, builds the cluster spec and decides success on it; executors find their role in it.
Pure functions; the client layer writes the keys (``primus/client/topology.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from primus.config.spec import JobSpec, RoleSpec, SourceSpec
from primus.state.keys import AppKeys
from primus.state.records import Record, decode

CHANGE_KINDS = frozenset({"scale", "add-role", "remove-role", "add-source", "resize"})
"""What a change of the log (:class:`TopologyChange`) may be."""
CHANGE_LOG_SIZE = 1000
"""Entries of ``changes/`` kept; older ones are deleted with each new change."""


class RoleAdded(Record):
    """``roles/<role>/spec``: a role added to the running application, and by which change
    (added roles follow the submitted ones in rank order, in the order they were added)."""

    change: int
    role: RoleSpec


class RoleRemoved(Record):
    """``roles/<role>/removed``: the role was removed by change ``change``."""

    change: int


class RoleResources(Record):
    """``roles/<role>/resources``: the CPU and memory each executor of the role reserves, as
    resized by change ``change`` (``primus resize``)."""

    change: int
    cpu: float
    memory: int


class TopologyChange(Record):
    """``changes/<seq>``: one change of the running application, as asked."""

    seq: int
    time: float
    user: str
    kind: str = Field(description="scale, add-role, remove-role, add-source or resize")
    message: str
    role: str | None = None
    stream: str | None = None


def effective_spec(spec: JobSpec, keys: AppKeys, values: Mapping[str, bytes]) -> JobSpec:
    """The application's spec as it should be now: ``spec`` (as submitted) with the changes
    recorded in ``values`` (key → value of the application's ``roles/`` and ``sources/`` keys;
    other keys are ignored) applied.

    A role's ``num`` is its ``desired`` count, its ``cpu`` and ``memory`` its ``resources``;
    removed roles are left out; added roles follow the submitted ones; added sources follow a
    stream's own. The values were validated when
    the change was written, so the result is not validated again.
    """
    roles_root, sources_root = keys.root + "roles/", keys.root + "sources/"
    desired: dict[str, int] = {}
    added: list[RoleAdded] = []
    removed: set[str] = set()
    resources: dict[str, RoleResources] = {}
    sources: dict[str, list[tuple[int, SourceSpec]]] = {}
    for key, value in values.items():
        if key.startswith(roles_root):
            role, _, kind = key[len(roles_root):].partition("/")
            if kind == "desired" and value.isdigit():
                desired[role] = int(value)
            elif kind == "spec":
                added.append(decode(RoleAdded, value, key))
            elif kind == "removed":
                removed.add(role)
            elif kind == "resources":
                resources[role] = decode(RoleResources, value, key)
        elif key.startswith(sources_root):
            stream, _, seq = key[len(sources_root):].partition("/")
            if seq.isdigit():
                sources.setdefault(stream, []).append(
                    (int(seq), SourceSpec.model_validate_json(value)))
    if not desired and not added and not removed and not sources and not resources:
        return spec
    submitted = {role.name for role in spec.roles}
    roles = [role for role in spec.roles if role.name not in removed] + [
        entry.role for entry in sorted(added, key=lambda entry: entry.change)
        if entry.role.name not in removed and entry.role.name not in submitted]
    roles = [role.model_copy(update={"num": desired[role.name]})
             if desired.get(role.name, role.num) != role.num else role for role in roles]
    roles = [role.model_copy(update={"cpu": resources[role.name].cpu,
                                     "memory": resources[role.name].memory})
             if role.name in resources else role for role in roles]
    data = [stream.model_copy(update={"sources": [
        *stream.sources, *(source for _, source in sorted(sources[stream.name],
                                                          key=lambda entry: entry[0]))]})
            if stream.name in sources else stream for stream in spec.data]
    return spec.model_copy(update={"roles": roles, "data": data})


def topology_values(keys: AppKeys, values: Mapping[str, bytes]) -> dict[str, bytes]:
    """The entries of ``values`` that :func:`effective_spec` reads."""
    return {key: value for key, value in values.items()
            if key.startswith((keys.root + "roles/", keys.root + "sources/"))}
