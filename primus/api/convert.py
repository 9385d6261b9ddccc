"""Conversions between Primus's records and the API's messages (proto/primus/v1/primus.proto).

Pure functions, used by the servicer to answer and by the Python client to read answers.

The records of :mod:`primus.state.records` and their messages have the same field names, so one
pair of functions converts them all (:func:`to_message`, :func:`from_message`), by these rules:

- a time (Unix seconds, ``float``) is a ``google.protobuf.Timestamp``; a time that is ``None``,
  or equal to its field's default (``AmLeader.start_time`` 0.0: not recorded), is left unset;
- :class:`~primus.state.states.AppState` and :class:`~primus.state.states.ExecutorState` are
  the enums ``ApplicationState`` and ``ExecutorState``, each value prefixed with the enum's
  name (``RUNNING`` is ``EXECUTOR_STATE_RUNNING``);
- ``None`` is an unset ``optional`` field or sub-message; a nested record is a sub-message and
  a list a repeated field.

What is not one record (an executor's three keys, a role, a stream, an application, a host) has
a function of its own.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, get_args

from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import code_pb2, error_details_pb2, status_pb2
from pydantic import ValidationError

from primus.api.v1 import primus_pb2 as pb
from primus.client.api import AppReport, AppSummary, HostReport
from primus.client.queues import HeldBy, HostUsage, QueuedApp
from primus.config.inventory import (
    Host,
    SshSettings,
    format_gpu_groups,
    format_gpu_nics,
    format_gpu_tree,
    parse_gpu_nics,
    parse_gpu_topology,
)
from primus.config.loader import SpecError
from primus.config.spec import JobSpec, RoleSpec
from primus.errors import PrimusError
from primus.scheduler.placement import HostFree
from primus.state.keys import AppKeys
from primus.state.records import (
    AdmissionRequest,
    AmLeader,
    AppEvent,
    AppStatus,
    ClusterMember,
    ClusterSpec,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    ExecutorUsage,
    HangReport,
    HostCondition,
    KillRequest,
    PastAttempt,
    Preemption,
    ProcessRef,
    Record,
    Reservation,
    StreamStats,
    SuspendRequest,
    TrainerStacks,
    Waiting,
)
from primus.state.states import AppState, ExecutorState
from primus.state.topology import TopologyChange
from primus.state.view import AppView, ExecutorId, ExecutorView

R = TypeVar("R", bound=Record)


class MessageError(PrimusError):
    """A message that does not convert into Primus's values: a required field unset, an enum
    value that names no state. The message names the message type and the field."""


MESSAGES: dict[type[Record], type[Message]] = {
    AppStatus: pb.ApplicationStatus,
    AmLeader: pb.AmLeader,
    KillRequest: pb.Kill,
    ProcessRef: pb.ProcessRef,
    ExecutorPlan: pb.ExecutorPlan,
    PastAttempt: pb.PastAttempt,
    ExecutorLive: pb.ExecutorLive,
    ExecutorResult: pb.ExecutorResult,
    ExecutorUsage: pb.ExecutorUsage,
    ClusterSpec: pb.Cluster,
    ClusterMember: pb.ClusterMember,
    StreamStats: pb.StreamStats,
    AppEvent: pb.Event,
    TopologyChange: pb.TopologyChange,
    Waiting: pb.Waiting,
    Reservation: pb.Reservation,
    Preemption: pb.Preemption,
    SuspendRequest: pb.Suspend,
    HostCondition: pb.HostCondition,
    HangReport: pb.Hang,
    TrainerStacks: pb.TrainerStacks,
}
"""Each record type and the message type it converts to."""


# ---- Times and states -----------------------------------------------------------------------

def timestamp(seconds: float) -> Timestamp:
    """A Unix time in seconds as a Timestamp, to the nanosecond."""
    stamp = Timestamp()
    _set_time(stamp, seconds)
    return stamp


def _set_time(stamp: Timestamp, seconds: float) -> None:
    whole = math.floor(seconds)
    nanos = round((seconds - whole) * 1e9)
    if nanos == 1_000_000_000:  # a fraction that rounds up to the next second
        whole, nanos = whole + 1, 0
    stamp.seconds = whole
    stamp.nanos = nanos


def seconds(stamp: Timestamp) -> float:
    """A Timestamp as a Unix time in seconds."""
    return stamp.seconds + stamp.nanos / 1e9


_APP_STATES = {state: pb.ApplicationState.Value(f"APPLICATION_STATE_{state.value}")
               for state in AppState}
_EXECUTOR_STATES = {state: pb.ExecutorState.Value(f"EXECUTOR_STATE_{state.value}")
                    for state in ExecutorState}
_STATE_ENUMS: dict[str, dict[Any, int]] = {
    pb.ApplicationState.DESCRIPTOR.full_name: _APP_STATES,
    pb.ExecutorState.DESCRIPTOR.full_name: _EXECUTOR_STATES,
}


def app_state_to_proto(state: AppState) -> int:
    """``AppState.RUNNING`` as ``APPLICATION_STATE_RUNNING``."""
    return _APP_STATES[state]


def app_state_from_proto(value: int, field: str = "state") -> AppState:
    """``APPLICATION_STATE_RUNNING`` as ``AppState.RUNNING``.

    Raises:
        MessageError: ``value`` is UNSPECIFIED or no state, naming ``field``.
    """
    return _state_from_proto(_APP_STATES, pb.ApplicationState.DESCRIPTOR, value, field)


def executor_state_to_proto(state: ExecutorState) -> int:
    """``ExecutorState.RUNNING`` as ``EXECUTOR_STATE_RUNNING``."""
    return _EXECUTOR_STATES[state]


def executor_state_from_proto(value: int, field: str = "state") -> ExecutorState:
    """``EXECUTOR_STATE_RUNNING`` as ``ExecutorState.RUNNING``.

    Raises:
        MessageError: ``value`` is UNSPECIFIED or no state, naming ``field``.
    """
    return _state_from_proto(_EXECUTOR_STATES, pb.ExecutorState.DESCRIPTOR, value, field)


def _state_from_proto(table: Mapping[Any, int], enum: EnumDescriptor, value: int,
                      field: str) -> Any:
    for state, number in table.items():
        if number == value:
            return state
    allowed = ", ".join(enum.values_by_number[number].name for number in table.values())
    raise MessageError(f"{field}: {value} is not a state of {enum.name}; allowed: {allowed}")


# ---- Records --------------------------------------------------------------------------------

def to_message(record: Record) -> Message:
    """A record of :mod:`primus.state.records` as its message (see :data:`MESSAGES`)."""
    plan = _plan(type(record))
    values = record.__dict__
    # Scalars go to the constructor at once; a sub-message given to it would be copied through
    # a slower path than filling the message's own field.
    message = plan.message(**{name: value if table is None else table[value]
                              for name, table in plan.scalars
                              if (value := values[name]) is not None})
    for name, default in plan.times:
        value = values[name]
        if value is not None and value != default:
            _set_time(getattr(message, name), value)
    for name in plan.records:
        if (value := values[name]) is not None:
            getattr(message, name).CopyFrom(to_message(value))
    for name in plan.record_lists:
        getattr(message, name).extend([to_message(item) for item in values[name]])
    return message


def from_message(message: Message, model: type[R]) -> R:
    """A message as the record ``model`` (see :data:`MESSAGES`).

    Raises:
        MessageError: A required field is unset or a value is out of the record's range,
            naming the message type and the field.
    """
    if type(message) is not MESSAGES[model]:
        raise TypeError(f"a {type(message).__name__} does not convert to {model.__name__}")
    try:
        return model(**_fields_of(message, model))
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(map(str, error["loc"]))
        raise MessageError(f"{message.DESCRIPTOR.name}.{where}: {error['msg']}") from None


@dataclass(frozen=True)
class _Plan:
    """How the fields of one record type convert (the rules of the module docstring)."""

    message: type[Message]
    scalars: tuple[tuple[str, Mapping[Any, int] | None], ...]
    """Scalars and lists of them, as they are; states through their enum's table."""
    times: tuple[tuple[str, Any], ...]
    """Times, with their default (left unset)."""
    records: tuple[str, ...]
    record_lists: tuple[str, ...]
    reads: tuple[tuple[str, bool, Callable[[Any], Any] | None], ...]
    """For :func:`from_message`, each field's name, whether it may be unset (and is then left
    out), and how its value converts (``None``: as it is)."""


@functools.cache
def _plan(model: type[Record]) -> _Plan:
    """How each field of ``model`` converts: worked out once per record type, not per record."""
    message = MESSAGES[model]
    scalars: list[tuple[str, Mapping[Any, int] | None]] = []
    times: list[tuple[str, Any]] = []
    records: list[str] = []
    record_lists: list[str] = []
    reads: list[tuple[str, bool, Callable[[Any], Any] | None]] = []
    for name, info in model.model_fields.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        nested = _record_type(info.annotation)
        read: Callable[[Any], Any] | None = None
        if field.message_type is Timestamp.DESCRIPTOR:
            times.append((name, info.default))
            read = seconds
        elif field.enum_type is not None:
            table = _STATE_ENUMS[field.enum_type.full_name]
            scalars.append((name, table))
            read = functools.partial(_state_from_proto, table, field.enum_type,
                                     field=f"{message.DESCRIPTOR.name}.{name}")
        elif nested is not None and field.is_repeated:
            record_lists.append(name)
            read = functools.partial(_records_of, model=nested)
        elif nested is not None:
            records.append(name)
            read = functools.partial(_record_of, model=nested)
        else:
            scalars.append((name, None))
            is_map = field.message_type is not None and \
                field.message_type.GetOptions().map_entry
            read = dict if is_map else list if field.is_repeated else None
        reads.append((name, field.has_presence, read))
    return _Plan(message, tuple(scalars), tuple(times), tuple(records), tuple(record_lists),
                 tuple(reads))


def _fields_of(message: Message, model: type[Record]) -> dict[str, Any]:
    """The keyword arguments of ``model`` that ``message`` sets."""
    fields: dict[str, Any] = {}
    for name, optional, read in _plan(model).reads:
        if optional and not message.HasField(name):
            continue
        value = getattr(message, name)
        fields[name] = value if read is None else read(value)
    return fields


def _record_of(message: Message, model: type[Record]) -> Record:
    return model(**_fields_of(message, model))


def _records_of(messages: Iterable[Message], model: type[Record]) -> list[Record]:
    return [model(**_fields_of(item, model)) for item in messages]


def _record_type(annotation: Any) -> type[Record] | None:
    """The record type a field holds (``ProcessRef | None``, ``list[ClusterMember]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, Record):
        return annotation
    return next((found for arg in get_args(annotation)
                 if (found := _record_type(arg)) is not None), None)


# ---- What spans several keys ----------------------------------------------------------------

def executor_to_message(executor: ExecutorId, view: ExecutorView) -> pb.Executor:
    """An executor index with its plan, live, result and usage keys (each unset when
    absent)."""
    role, index = executor
    message = pb.Executor(role=role, index=index)
    for part in ("plan", "live", "result", "usage"):
        record = getattr(view, part)
        if record is not None:
            getattr(message, part).CopyFrom(to_message(record))
    return message


def executor_from_message(message: pb.Executor) -> tuple[ExecutorId, ExecutorView]:
    """An executor message as its id and view (what the AM observes of processes left out).

    Raises:
        MessageError: A part does not convert.
    """
    return (message.role, message.index), ExecutorView(
        plan=from_message(message.plan, ExecutorPlan) if message.HasField("plan") else None,
        live=from_message(message.live, ExecutorLive) if message.HasField("live") else None,
        result=(from_message(message.result, ExecutorResult) if message.HasField("result")
                else None),
        usage=from_message(message.usage, ExecutorUsage) if message.HasField("usage") else None)


def stream_to_message(name: str, stats: StreamStats | None) -> pb.Stream:
    """A data stream and its progress (unset before the AM recorded any)."""
    message = pb.Stream(name=name)
    if stats is not None:
        message.stats.CopyFrom(to_message(stats))
    return message


def stream_from_message(message: pb.Stream) -> tuple[str, StreamStats | None]:
    """A stream message as its name and progress."""
    stats = from_message(message.stats, StreamStats) if message.HasField("stats") else None
    return message.name, stats


def role_to_message(role: RoleSpec, desired: int, removed: bool = False) -> pb.Role:
    """A role: its spec as canonical JSON and how many executors it should have."""
    return pb.Role(name=role.name, desired_executors=desired, spec_json=role.model_dump_json(),
                   removed=removed)


def role_from_message(message: pb.Role) -> tuple[RoleSpec, int]:
    """A role message as its spec and desired number of executors (``removed`` is read from
    the message itself).

    Raises:
        MessageError: ``spec_json`` is not a valid role.
    """
    try:
        role = _role_spec(message.spec_json)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(map(str, error["loc"])) or "the value"
        raise MessageError(f"Role.spec_json of {message.name!r}: {where}: {error['msg']}"
                           ) from None
    return role, message.desired_executors


def job_from_message(message: pb.Application) -> JobSpec:
    """The job an application message was submitted with.

    Raises:
        MessageError: ``spec_json`` is not a valid job.
    """
    try:
        return _job_spec(message.spec_json)
    except ValidationError as exc:
        raise MessageError(f"Application.spec_json: {exc.errors(include_url=False)[0]['msg']}"
                           ) from None


# A job's spec (frozen) is the same in every read of its application: validated once, not at
# each (its validation is most of what reading an application costs a client).
_job_spec = functools.lru_cache(maxsize=256)(JobSpec.model_validate_json)
_role_spec = functools.lru_cache(maxsize=1024)(RoleSpec.model_validate_json)


def application_to_message(view: AppView, leader: AmLeader | None, events: Iterable[AppEvent],
                           revision: int) -> pb.Application:
    """An application as read at ``revision``: ``spec_json`` the job as submitted, ``roles``
    and ``streams`` as its topology is now (roles added at run time after the job's, removed
    roles left out).

    Args:
        view: Its keys, folded (:meth:`AppView.from_snapshot`).
        leader: The AM that leads it, if any.
        events: The events to include, oldest first.
        revision: The etcd revision everything was read at.
    """
    message = pb.Application(
        status=to_message(view.status), spec_json=view.submitted.model_dump_json(),
        roles=[role_to_message(role, role.num) for role in view.spec.roles],
        executors=[executor_to_message(executor, view.executors[executor])
                   for executor in _in_role_order(view)],
        streams=[stream_to_message(stream.name, view.streams.get(stream.name))
                 for stream in view.spec.data],
        events=[to_message(event) for event in events], revision=revision)
    if leader is not None:
        message.am_leader.CopyFrom(to_message(leader))
    if view.cluster is not None:
        message.cluster.CopyFrom(to_message(view.cluster))
    if view.kill is not None:
        message.kill.CopyFrom(to_message(view.kill))
    progress = view.progress()
    if progress is not None:
        message.progress = progress
    message.pending_changes.extend(to_message(change) for _, change in
                                   sorted(view.changes.items()))
    message.reservations.extend(to_message(reservation) for _, reservation in
                                sorted(view.reservations.items()))
    for name in ("waiting", "preemption", "suspend"):
        if (record := getattr(view, name)) is not None:
            getattr(message, name).CopyFrom(to_message(record))
    return message


def report_to_message(report: AppReport, events: int) -> pb.Application:
    """An application as the client layer read it, with its latest ``events`` events."""
    message = application_to_message(report.view, report.leader, report.events[-events:],
                                      report.revision)
    message.archived = report.archived
    message.leaderless = report.leaderless
    return message


def report_from_message(message: pb.Application) -> AppReport:
    """An application message as the client layer's report of it, as the server read it: what
    ``primus status`` shows through the API. The view holds what the message carries (the
    AM's own observations, such as its ledgers' facts, are not in it); its keys have no
    deployment prefix, which the server does not say.

    Raises:
        MessageError: A part does not convert.
    """
    status = from_message(message.status, AppStatus)
    submitted = job_from_message(message)
    view = AppView(AppKeys("", status.app_id), submitted, status)
    view.spec = submitted.model_copy(update={
        "roles": [role_from_message(role)[0] for role in message.roles]})
    view.executors = dict(executor_from_message(e) for e in message.executors)
    view.streams = {name: stats for name, stats in map(stream_from_message, message.streams)
                    if stats is not None}
    view.changes = {change.seq: change for change in
                    (from_message(c, TopologyChange) for c in message.pending_changes)}
    view.reservations = {(r.role, r.index): r for r in
                         (from_message(item, Reservation) for item in message.reservations)}
    view.cluster = _optional(message, "cluster", ClusterSpec)
    view.kill = _optional(message, "kill", KillRequest)
    view.waiting = _optional(message, "waiting", Waiting)
    view.preemption = _optional(message, "preemption", Preemption)
    view.suspend = _optional(message, "suspend", SuspendRequest)
    return AppReport(view, _optional(message, "am_leader", AmLeader),
                     [from_message(e, AppEvent) for e in message.events], message.revision,
                     hosts=[], am_log="", archived=message.archived,
                     leaderless_as_read=message.leaderless)


def _optional(message: Message, name: str, model: type[R]) -> R | None:
    """The record of sub-message ``name``, ``None`` when it is unset."""
    return from_message(getattr(message, name), model) if message.HasField(name) else None


def _in_role_order(view: AppView) -> list[ExecutorId]:
    order = {role.name: position for position, role in enumerate(view.spec.roles)}
    return sorted(view.executors, key=lambda e: (order.get(e[0], len(order)), e[0], e[1]))


def summary_to_message(summary: AppSummary) -> pb.ApplicationSummary:
    """An application as listed: its status, the AM that leads it (if any), its queue and
    whether it was read from the history."""
    message = pb.ApplicationSummary(status=to_message(summary.status), queue=summary.queue,
                                    archived=summary.archived, waiting=summary.waiting,
                                    leaderless=summary.leaderless)
    if summary.progress is not None:
        message.progress = summary.progress
    if summary.leader is not None:
        message.am_leader.CopyFrom(to_message(summary.leader))
    return message


def summary_from_message(message: pb.ApplicationSummary) -> AppSummary:
    """A listed application as its summary, as the server judged it (``leaderless``)."""
    return AppSummary(from_message(message.status, AppStatus),
                      _optional(message, "am_leader", AmLeader), waiting=message.waiting,
                      queue=message.queue, archived=message.archived,
                      progress=message.progress if message.HasField("progress") else None,
                      leaderless_as_read=message.leaderless)


# ---- Admission ------------------------------------------------------------------------------

def queued_to_message(app: QueuedApp) -> pb.QueuedApplication:
    """An application waiting for admission. Built field by field, not through
    :func:`to_message`: ``ListQueue`` may list ten thousand (bench/bench_queue.py)."""
    request = app.request
    message = pb.QueuedApplication(
        position=app.position, queue=app.queue, priority=app.priority, app_id=request.app_id,
        user=request.user, executors=[pb.ExecutorRef(role=role, index=index)
                                      for role, index in request.executors])
    _set_time(message.submit_time, request.submit_time)
    if app.waiting is not None:
        message.waiting.reason = app.waiting.reason
        _set_time(message.waiting.since, app.waiting.since)
    return message


def queued_from_message(message: pb.QueuedApplication) -> QueuedApp:
    """A waiting application as listed; its request holds what the message carries (no roles
    or hosts)."""
    request = AdmissionRequest(app_id=message.app_id, user=message.user, queue=message.queue,
                               submit_time=seconds(message.submit_time), roles=[],
                               executors=[(e.role, e.index) for e in message.executors])
    waiting = Waiting(reason=message.waiting.reason, since=seconds(message.waiting.since)) \
        if message.HasField("waiting") else None
    return QueuedApp(message.position, request, message.queue, message.priority, waiting)


def usage_to_message(usage: HostUsage) -> pb.HostUsage:
    """One host's capacity, reservations and what is free (unlimited: unset)."""
    free, limits = usage.free, pb.HostFree()
    if not math.isinf(free.slots):
        limits.slots = int(free.slots)
    if not math.isinf(free.cpu):
        limits.cpu = free.cpu
    if not math.isinf(free.memory):
        limits.memory = int(free.memory)
    if free.devices is not None:
        limits.devices.indices.extend(free.devices)
    message = pb.HostUsage(host=host_to_message(usage.host), free=limits, reservations=[
        to_message(r) for held in usage.held for r in held.reservations])
    if usage.condition is not None:
        message.condition.CopyFrom(to_message(usage.condition))
    return message


def usage_from_message(message: pb.HostUsage) -> HostUsage:
    """A host's usage message as the client layer's, reservations grouped by application."""
    host = host_from_message(message.host)
    held: dict[str, HeldBy] = {}
    for item in message.reservations:
        reservation = from_message(item, Reservation)
        held.setdefault(reservation.app_id, HeldBy(reservation.app_id, reservation.user,
                                                   reservation.queue, [])
                        ).reservations.append(reservation)
    limits = message.free
    free = HostFree(host, slots=limits.slots if limits.HasField("slots") else math.inf,
                    cpu=limits.cpu if limits.HasField("cpu") else math.inf,
                    memory=limits.memory if limits.HasField("memory") else math.inf,
                    devices=list(limits.devices.indices) if limits.HasField("devices")
                    else None)
    return HostUsage(host, list(held.values()), free,
                     _optional(message, "condition", HostCondition))


# ---- Hosts ----------------------------------------------------------------------------------

def host_to_message(host: Host) -> pb.Host:
    """An inventory host; groups and labels sorted."""
    ssh = host.ssh
    message = pb.Host(
        name=host.name, address=host.address, launcher=host.launcher, python=host.python,
        ssh=pb.SshSettings(port=ssh.port, user=ssh.user, key_file=ssh.key_file,
                           extra_args=ssh.extra_args),
        home=host.home, slots=host.slots, cpu=host.cpu, memory=host.memory, gpus=host.gpus,
        groups=sorted(host.groups), labels=sorted(host.labels), health_check=host.health_check)
    message.domains.update(dict(host.domains))
    if host.gpu_nics:
        message.gpu_nics = format_gpu_nics(host.gpu_nics)
    if host.gpu_tree is not None:
        message.gpu_topology = format_gpu_tree(host.gpu_tree)
        message.gpu_nvlink = format_gpu_groups(host.gpu_nvlink)
    return message


def host_from_message(message: pb.Host) -> Host:
    """A host message as an inventory host."""
    ssh = message.ssh

    def present(holder: Message, name: str) -> Any:
        return getattr(holder, name) if holder.HasField(name) else None

    return Host(
        name=message.name, address=message.address, launcher=message.launcher,
        ssh=SshSettings(port=present(ssh, "port"), user=present(ssh, "user"),
                        key_file=present(ssh, "key_file"), extra_args=tuple(ssh.extra_args)),
        python=message.python, home=present(message, "home"), slots=present(message, "slots"),
        cpu=present(message, "cpu"), memory=present(message, "memory"),
        gpus=present(message, "gpus"), groups=frozenset(message.groups),
        labels=frozenset(message.labels), health_check=present(message, "health_check"),
        domains=tuple(sorted(message.domains.items())), **_gpu_topology(message))


def _gpu_topology(message: pb.Host) -> dict[str, Any]:
    """A host message's GPU tree, NVLink groups and NICs, as :class:`Host` holds them.

    Raises:
        MessageError: either does not read.
    """
    found: dict[str, Any] = {}
    try:
        if message.HasField("gpu_topology"):
            found["gpu_tree"], found["gpu_nvlink"] = parse_gpu_topology(
                message.gpu_topology, message.gpu_nvlink)
        if message.HasField("gpu_nics"):
            found["gpu_nics"] = parse_gpu_nics(message.gpu_nics)
    except ValueError as exc:
        raise MessageError(f"Host: {exc}") from None
    return found


_FACTS: dict[str, tuple[type, ...]] = {
    "cgroups": (str,), "primus_version": (str,), "account": (dict,), "home": (str,),
    "cpu": (int,), "memory": (int,), "gpus": (int,), "load": (float, int),
    "gpu_topology": (str,), "gpu_nvlink": (str,)}
"""The facts a probe reports (``describe_host``) that HostProbe carries, with their types, in
the order the probe gives them (``primus hosts check -o json`` prints them so, both ways)."""


def host_report_to_message(report: HostReport) -> pb.HostInfo:
    """A probed host. Facts of the wrong type (a host's probe answered oddly) are left unset,
    as unknown."""
    facts: dict[str, Any] = {
        name: report.facts[name] for name, types in _FACTS.items()
        if isinstance(report.facts.get(name), types) and not isinstance(report.facts[name], bool)}
    if "account" in facts:
        facts["account"] = _account_message(facts["account"])
        if facts["account"] is None:
            del facts["account"]
    probe = pb.HostProbe(ok=report.ok, error=report.error, **facts)
    for device in report.facts.get("gpu_devices") or []:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            probe.gpu_devices.append(pb.GpuDevice(
                index=device["index"], uuid=device.get("uuid") or "",
                pci_bus_id=device.get("pci_bus_id") or "", numa_node=device.get("numa_node"),
                cpu_affinity=device.get("cpu_affinity") or ""))
    return pb.HostInfo(host=host_to_message(report.host), probe=probe)


def _account_message(account: dict[str, Any]) -> pb.HostAccount | None:
    """A probe's account fact (``describe_account``); ``None`` when it does not read as one."""
    try:
        return pb.HostAccount(name=account["name"], uid=account["uid"], home=account["home"],
                              groups=sorted(account["groups"]))
    except (KeyError, TypeError, ValueError):
        return None


def host_report_from_message(message: pb.HostInfo) -> HostReport:
    """A probed host's message as its report (``facts`` holding the facts that are set)."""
    probe = message.probe
    facts: dict[str, Any] = {name: getattr(probe, name) for name in _FACTS
                             if probe.HasField(name)}
    if "account" in facts:
        account = probe.account
        facts["account"] = {"name": account.name, "uid": account.uid, "home": account.home,
                            "groups": list(account.groups)}
    if probe.gpu_devices:
        facts["gpu_devices"] = [
            {"index": d.index, "uuid": d.uuid, "pci_bus_id": d.pci_bus_id,
             "numa_node": d.numa_node if d.HasField("numa_node") else None,
             "cpu_affinity": d.cpu_affinity or None} for d in probe.gpu_devices]
    return HostReport(host_from_message(message.host), probe.ok, probe.error, facts)


# ---- Errors ---------------------------------------------------------------------------------

def spec_error_status(error: SpecError, sources: Mapping[str, str]) -> status_pb2.Status:
    """An INVALID_ARGUMENT status for a refused job, role or data source: the message as the
    loader words it, and a ``google.rpc.BadRequest`` with one field violation per problem.

    Args:
        error: What the loader refused.
        sources: The request field that carried each source the problems name, e.g.
            ``{"train.yaml": "job", "--set": "overrides"}``. A violation's field is that
            request field, then the problem's path in it (``job.roles[1].num``); a problem in a
            source not named here (the server's site defaults) is named by its source.

    Returns:
        The status, for ``grpc.ServicerContext.abort_with_status(rpc_status.to_status(...))``.
    """
    bad_request = error_details_pb2.BadRequest()
    for problem in error.problems:
        field = sources.get(problem.source, problem.source)
        bad_request.field_violations.add(
            field=f"{field}.{problem.field}" if problem.field else field,
            description=problem.reason)
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=str(error))
    status.details.add().Pack(bad_request)
    return status
