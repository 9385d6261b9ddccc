"""Changes of a running application's topology: scale a role, add or remove one, resize its
executors, add a data source to a stream.

Each change is validated against the application as it is now (the same checks and messages
as a job file, ``primus.config.loader.validate_change``, and whether the new executors can be
placed), then written in one transaction as desired state (``primus/state/topology.py``) with
an entry of the change log naming who asked. The transaction holds only if no other change
came in between and the application neither ended nor was asked to stop; otherwise the change
is checked again against what is new. The AM that leads acts on it, or the next one does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from primus.client.api import AppEndedError, AppNotFoundError
from primus.config.inventory import Host, local_inventory
from primus.config.loader import SpecError, SpecProblem, validate_change
from primus.config.spec import (
    MAX_EXECUTORS,
    JobSpec,
    RoleSpec,
    SourceSpec,
    TableSpec,
    size_text,
)
from primus.errors import PrimusError
from primus.scheduler.placement import PlacementError, place
from primus.state.keys import AppKeys
from primus.state.records import StreamStats, decode_hosts, encode
from primus.state.topology import (
    CHANGE_LOG_SIZE,
    RoleAdded,
    RoleRemoved,
    RoleResources,
    TopologyChange,
)
from primus.state.view import AppView, read_app_keys
from primus.store.api import (
    Compare,
    Coordinator,
    Delete,
    Op,
    Put,
    key_missing,
    key_unchanged_since,
)

CHANGE_TRIES = 5
"""Times a change is checked and written again when another change or the AM came first."""


class RoleNotFoundError(PrimusError):
    """The application has no role of that name."""


class StreamNotFoundError(PrimusError):
    """The application has no data stream of that name."""


class ChangeRefusedError(PrimusError):
    """The change cannot be made to the application as it is (its last role removed, a data
    stream left without a reader)."""


class ChangeConflictError(PrimusError):
    """Other writes kept coming in between this change's check and its write."""


@dataclass(frozen=True)
class Changed:
    """A change as written: the etcd revision of its transaction and its log entry."""

    revision: int
    change: TopologyChange
    role: RoleSpec | None = None
    """The role as it should be now (ScaleRole, AddRole)."""
    previous: int | None = None
    """How many executors the role was to have before (ScaleRole)."""
    files: int | None = None
    """How many files the added source matched when it was checked (AddDataSource)."""


@dataclass
class ChangePlan:
    """What one change writes: its ops, its new spec (checked for placement), its log entry."""

    ops: list[Op]
    spec: JobSpec
    kind: str
    message: str
    role: str | None = None
    stream: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    compares: list[Compare] = field(default_factory=list)


async def change_topology(store: Coordinator, keys: AppKeys, user: str,
                          plan: Callable[[AppView, int], ChangePlan]) -> Changed:
    """Check and write one change (see the module docstring).

    ``plan`` gets the application's view and the change's sequence number and returns what
    to write, raising the change's own errors (SpecError, RoleNotFoundError...).

    Raises:
        AppNotFoundError, AppEndedError: no such application, or it has ended or is stopping.
        PlacementError: the topology would need more than the application's hosts have.
        ChangeConflictError: other writes came first ``CHANGE_TRIES`` times in a row.
    """
    for _ in range(CHANGE_TRIES):
        snapshot = await read_app_keys(store, keys)
        by_key = {kv.key: kv for kv in snapshot.kvs}
        if keys.status not in by_key or keys.spec not in by_key:
            raise AppNotFoundError(f"no application {keys.app_id!r} under {keys.prefix}")
        view = AppView.from_snapshot(keys, snapshot)
        if view.status.state.terminal:
            raise AppEndedError(f"{keys.app_id} has ended ({view.status.state.value}); a "
                                f"finished application cannot be changed")
        if view.kill is not None:
            raise AppEndedError(f"{keys.app_id} is being stopped (asked by {view.kill.user}); "
                                f"it cannot be changed")
        logged = [int(kv.key[len(keys.changes):]) for kv in snapshot.kvs
                  if kv.key.startswith(keys.changes) and kv.key[len(keys.changes):].isdigit()]
        seq = max([view.status.changes_recorded, *logged]) + 1
        change = plan(view, seq)
        hosts = decode_hosts(by_key[keys.hosts].value) if keys.hosts in by_key \
            else local_inventory()
        _check_placement(view, change.spec, hosts)
        record = TopologyChange(seq=seq, time=time.time(), user=user, kind=change.kind,
                                message=change.message, role=change.role, stream=change.stream)
        ops = [*change.ops, Put(keys.change(seq), encode(record))]
        if seq > CHANGE_LOG_SIZE:
            ops.append(Delete(keys.change(seq - CHANGE_LOG_SIZE)))
        result = await store.txn(
            [key_missing(keys.change(seq)), key_missing(keys.kill),
             key_unchanged_since(keys.status, by_key[keys.status].mod_revision),
             *change.compares], ops)
        if result.succeeded:
            return Changed(result.revision, record, **change.extra)
    raise ChangeConflictError(f"{keys.app_id} kept changing while this change was checked "
                              f"({CHANGE_TRIES} tries); ask again")


def _check_placement(view: AppView, spec: JobSpec, hosts: list[Host]) -> None:
    """Refuse a topology whose new executors fit on none of the application's hosts, beside
    the executors already placed (each where it is)."""
    current = {(role.name, index) for role in spec.roles for index in range(role.num)}
    existing = {key: ex.plan.host for key, ex in view.executors.items()
                if key in current and ex.plan is not None and not ex.plan.retired
                and not ex.plan.final}
    place(spec, hosts, existing)
    for role in spec.roles:  # a resized role's executors, each on some host where it runs now
        if not any((host.cpu is None or host.cpu >= role.cpu) and
                   (host.memory is None or host.memory >= role.memory) for host in hosts):
            largest = max(hosts, key=lambda h: (h.cpu or 0, h.memory or 0))
            raise PlacementError(
                f"role {role.name}: {role.cpu:g} CPUs and {size_text(role.memory)} per "
                f"executor fit on none of the application's hosts (the largest: "
                f"{largest.name}, {largest.cpu:g} CPUs, {size_text(largest.memory or 0)})")


def _role(view: AppView, name: str) -> RoleSpec:
    role = next((r for r in view.spec.roles if r.name == name), None)
    if role is None:
        raise RoleNotFoundError(f"{view.keys.app_id} has no role {name!r}; roles: "
                                f"{', '.join(r.name for r in view.spec.roles)}")
    return role


def scale_plan(role_name: str, executors: int, source: str = "executors"
               ) -> Callable[[AppView, int], ChangePlan]:
    """The change that gives ``role_name`` ``executors`` executors (see :func:`change_topology`).

    ``source`` is what carried the number, for errors (the request field).
    """
    def plan(view: AppView, seq: int) -> ChangePlan:
        role = _role(view, role_name)
        others = view.spec.total_executors - role.num
        if not 1 <= executors <= MAX_EXECUTORS - others:
            raise SpecError(SpecProblem(source, "", executors, (
                f"must be >= 1 and <= {MAX_EXECUTORS - others} (a job has at most "
                f"{MAX_EXECUTORS:,} executors; its other roles have {others}); to remove "
                f"the role, remove it")))
        data = view.spec.model_dump(mode="json")
        position = next(i for i, r in enumerate(view.spec.roles) if r.name == role_name)
        data["roles"][position]["num"] = executors
        spec = validate_change(data, source, ("roles", position, "num"))
        return ChangePlan([Put(view.keys.desired(role_name), str(executors).encode())], spec,
                     "scale", f"role {role_name} scaled from {role.num} to {executors} "
                     f"executor{'' if executors == 1 else 's'}", role=role_name,
                     extra={"role": spec.roles[position], "previous": role.num})
    return plan


def resize_plan(role_name: str, cpu: Any, memory: Any, margin: float, why: str = ""
                ) -> Callable[[AppView, int], ChangePlan]:
    """The change that makes each executor of ``role_name`` reserve ``cpu`` cores and
    ``memory`` (a size, as a job file writes it; ``None``: as it is). Admission grants it in
    place where the hosts have room, and the executors apply it to their trainers' cgroups
    without restarting them. Memory is not taken below what a trainer of the role holds now
    (with the site's ``margin``: what its limit would be). ``why``, where given, ends the
    change's message (autosize says what it measured)."""
    def plan(view: AppView, seq: int) -> ChangePlan:
        role = _role(view, role_name)
        if cpu is None and memory is None:
            raise SpecError(SpecProblem("resize", "", None, "give cpu, memory or both"))
        data = view.spec.model_dump(mode="json")
        position = next(i for i, r in enumerate(view.spec.roles) if r.name == role_name)
        data["roles"][position].update({k: v for k, v in (("cpu", cpu), ("memory", memory))
                                        if v is not None})
        spec = validate_change(data, "resize", ("roles", position))
        new = spec.roles[position]
        if (new.cpu, new.memory) == (role.cpu, role.memory):
            raise ChangeRefusedError(f"role {role_name} reserves {role.cpu:g} CPUs and "
                                     f"{size_text(role.memory)} per executor already")
        held = [(f"{role_name}-{index}", ex.usage.memory) for (name, index), ex
                in sorted(view.executors.items()) if name == role_name
                and ex.plan is not None and not ex.plan.state.terminal
                and ex.usage is not None and ex.usage.attempt == ex.plan.attempt
                and ex.usage.memory is not None]
        most = max(held, key=lambda item: item[1], default=None)
        limit = int(new.memory * (1 + margin))
        if most is not None and limit < most[1]:
            raise ChangeRefusedError(
                f"memory: {size_text(new.memory)} is below what {most[0]} holds now "
                f"({size_text(most[1])}; its limit would be {size_text(limit)} with the "
                f"site's margin)")
        resources = RoleResources(change=seq, cpu=new.cpu, memory=new.memory)
        return ChangePlan([Put(view.keys.role_resources(role_name), encode(resources))], spec,
                          "resize", f"role {role_name} resized from {role.cpu:g} CPUs, "
                          f"{size_text(role.memory)} to {new.cpu:g} CPUs, "
                          f"{size_text(new.memory)} per executor" + (f" ({why})" if why else ""),
                          role=role_name, extra={"role": new})
    return plan


def add_role_plan(role_data: Any, source: str = "role") -> Callable[[AppView, int], ChangePlan]:
    """The change that adds the role ``role_data`` (one entry of a job file's ``roles``,
    parsed) after the application's roles."""
    def plan(view: AppView, seq: int) -> ChangePlan:
        if not isinstance(role_data, dict):
            raise SpecError(SpecProblem(source, "", role_data, "must be a mapping of role "
                                        f"fields ({', '.join(RoleSpec.model_fields)})"))
        name = role_data.get("name")
        used = {role.name for role in view.submitted.roles} | {
            key[len(view.keys.roles):].split("/")[0] for key in view.topology
            if key.startswith(view.keys.roles)}
        if isinstance(name, str) and name in used - {r.name for r in view.spec.roles}:
            raise SpecError(SpecProblem(source, "name", name, (
                "was a role of this application, since removed: a removed role's name is "
                "not used again (its executors' records keep it)")))
        data = view.spec.model_dump(mode="json")
        position = len(data["roles"])
        data["roles"].append(role_data)
        spec = validate_change(data, source, ("roles", position))
        role = spec.roles[position]
        ops: list[Op] = [Put(view.keys.role_spec(role.name),
                             encode(RoleAdded(change=seq, role=role))),
                         Put(view.keys.desired(role.name), str(role.num).encode())]
        return ChangePlan(ops, spec, "add-role", f"role {role.name} added with {role.num} "
                     f"executor{'' if role.num == 1 else 's'}", role=role.name,
                     extra={"role": role})
    return plan


def remove_role_plan(role_name: str) -> Callable[[AppView, int], ChangePlan]:
    """The change that removes ``role_name``: its executors are stopped and retired."""
    def plan(view: AppView, seq: int) -> ChangePlan:
        role = _role(view, role_name)
        if len(view.spec.roles) == 1:
            raise ChangeRefusedError(f"{role_name} is the last role of {view.keys.app_id}; an "
                                f"application keeps at least one (kill it to stop it)")
        stream = view.spec.stream_of(role_name)
        if stream is not None and stream.roles == [role_name] and \
                not view.streams.get(stream.name, StreamStats()).exhausted:
            raise ChangeRefusedError(f"role {role_name} alone reads data stream {stream.name}, "
                                f"which has not ended; its data would never be read")
        data = view.spec.model_dump(mode="json")
        data["roles"] = [r for r in data["roles"] if r["name"] != role_name]
        for entry in data["data"]:
            entry["roles"] = [r for r in entry["roles"] if r != role_name]
        data["data"] = [entry for entry in data["data"] if entry["roles"]]
        spec = validate_change(data, "role", ())
        return ChangePlan([Put(view.keys.role_removed(role_name),
                          encode(RoleRemoved(change=seq)))], spec, "remove-role",
                     f"role {role_name} removed ({role.num} executor"
                     f"{'' if role.num == 1 else 's'} stopped)", role=role_name)
    return plan


def _pinned(table: TableSpec, source: str) -> TableSpec:
    """``table`` at the version a source added now reads: the latest, unless it names one."""
    from primus.data.tables import TableError, pin  # noqa: PLC0415 - table sources only

    try:
        return pin(table)
    except TableError as exc:
        raise SpecError(SpecProblem(source, "table", table.location, exc.reason)) from exc


def add_source_plan(stream_name: str, source_data: Any, files: Callable[[SourceSpec], int],
                    source: str = "source") -> Callable[[AppView, int], ChangePlan]:
    """The change that adds the data source ``source_data`` (one entry of a stream's
    ``sources``, parsed) to stream ``stream_name``. ``files`` counts the files a source
    matches now, raising SpecError when it cannot be listed."""
    def plan(view: AppView, seq: int) -> ChangePlan:
        position = next((i for i, s in enumerate(view.spec.data) if s.name == stream_name),
                        None)
        if position is None:
            raise StreamNotFoundError(
                f"{view.keys.app_id} has no data stream {stream_name!r}" + (
                    f"; streams: {', '.join(s.name for s in view.spec.data)}"
                    if view.spec.data else "; it reads no data"))
        if view.streams.get(stream_name, StreamStats()).exhausted:
            raise AppEndedError(f"data stream {stream_name} of {view.keys.app_id} has ended: "
                                f"every task was read; a source cannot join it")
        data = view.spec.model_dump(mode="json")
        sources = data["data"][position]["sources"]
        sources.append(source_data)
        spec = validate_change(data, source, ("data", position, "sources", len(sources) - 1))
        added = spec.data[position].sources[-1]
        if added.table is not None and added.table.pinned is None:
            added = added.model_copy(update={"table": _pinned(added.table, source)})
            streams = list(spec.data)
            streams[position] = streams[position].model_copy(update={
                "sources": [*streams[position].sources[:-1], added]})
            spec = spec.model_copy(update={"data": streams})
        count = files(added)
        if count == 0 and not added.success_marker:
            raise SpecError(SpecProblem(source, "table" if added.table else "path",
                                        added.shown, "matches no file"))
        return ChangePlan([Put(view.keys.added_source(stream_name, seq),
                          added.model_dump_json().encode())], spec, "add-source",
                     f"data source {added.shown} ({count} file{'' if count == 1 else 's'}) "
                     f"added to stream {stream_name}", stream=stream_name,
                     extra={"files": count},
                     compares=[key_missing(view.keys.stream(stream_name).end)])
    return plan

