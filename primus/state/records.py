"""The values Primus stores in etcd: one model per key kind, serialised as JSON.

These models are the single schema definition of what ``etcdctl get`` shows; every writer and
reader goes through :func:`encode` and :func:`decode`. Fields are snake_case; times are Unix
seconds (float); absent optional fields are ``null``.
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from primus import __version__
from primus.config.inventory import Host
from primus.config.spec import JobSpec, RoleSpec, SourceSpec, size_text
from primus.errors import PrimusError
from primus.state.states import AppState, ExecutorState, check_transition


class Record(BaseModel):
    """Base of every stored value: immutable, and unknown fields rejected on read."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class AppStatus(Record):
    """``apps/<app>/status``: the application's state and outcome."""

    app_id: str
    name: str
    state: AppState
    attempt: int = 1
    user: str = ""
    submit_host: str = ""
    submit_time: float
    start_time: float | None = None
    finish_time: float | None = None
    exit_code: int | None = None
    diagnosis: str = ""
    changes_recorded: int = 0
    """The last topology change (``changes/<seq>``) the AM recorded as an event."""
    account: str = ""
    """The Unix account its processes run as on every host, on a shared deployment (site
    ``accounts:``); empty: the account of whoever submitted it directly."""
    parked: bool = False
    """QUEUED with no AM process: its admission request waits as a record, and the AM keeper
    starts an AM once admission granted it (or once a kill or a suspension needs one). Written
    by submit, or by an AM that leaves its application waiting; cleared by the AM that leads
    it next."""
    array: str = ""
    """The job array it is a member of (its id); empty: none. From the owner record."""
    array_index: int | None = None
    """Its index in that array."""
    array_size: int | None = None
    """How many members that array has."""


class AppOwner(Record):
    """``apps/<app>/owner``: what the server decided when it recorded the application, written
    once at submit and read-only to the application's identity. Every privileged action
    (starting an AM, reading logs, admission, the history, metrics, notifications) takes the
    application's user and account from here, never from the ``status`` its AM writes."""

    app_id: str
    name: str
    user: str
    account: str = ""
    """The Unix account its processes run as (site ``accounts:``); empty: the account of
    whoever runs Primus (the embedded default, a site of one account)."""
    queue: str = ""
    """The job's queue as submitted; empty: the deployment's default queue."""
    preemptible: bool = False
    submit_host: str = ""
    submit_time: float
    parks: bool = False
    """It may wait for admission with no AM, its AM started by the AM keeper once admitted:
    submitted through a server, or on the embedded default (whose server runs as its owner).
    Not a direct submit to a shared etcd: its AM holds the submitter's credentials."""
    array: str = ""
    """The job array it is a member of (its id); empty: none."""
    array_index: int | None = None
    """Its index in that array."""
    array_size: int | None = None
    """How many members that array has."""
    array_max_running: int | None = None
    """At most this many members of its array admitted at once (the array's ``max_running``);
    admission takes it from here, never from a request."""


def owned_status(status: AppStatus, owner: AppOwner | None) -> AppStatus:
    """``status`` with the facts of the server's record in place of those its writer claims
    (id, name, user, account, where and when submitted). ``owner`` is ``None`` for an
    application recorded before the record existed (read from the history)."""
    if owner is None:
        return status
    return status.model_copy(update={
        "app_id": owner.app_id, "name": owner.name, "user": owner.user,
        "account": owner.account, "submit_host": owner.submit_host,
        "submit_time": owner.submit_time, "array": owner.array,
        "array_index": owner.array_index, "array_size": owner.array_size})


class Refusal(Record):
    """``apps/<app>/refused/<id>``: a value of the application's own keys that a privileged
    reader of Primus's did not believe (it did not read, or claimed what the server's records
    contradict), with what was expected; written by that reader (the server), shown among the
    application's events (kind ``refused``)."""

    time: float
    key: str
    why: str
    reader: str
    """Who did not believe it: ``admission``, ``archiver``, ``list``..."""


class AmLeader(Record):
    """``apps/<app>/am/leader``: the AM that leads, attached to its lease."""

    am_id: str
    host: str
    pid: int
    since: float
    log_file: str = ""
    start_time: float = 0.0  # the kernel's start time of ``pid`` on ``host`` (0: not recorded)


class ServiceLeader(Record):
    """``scheduler/leader``, ``server/am-keeper``, ``server/budget-keeper``,
    ``server/notifier``: the process that leads one of the deployment's services (admission,
    the AM keeper, the count of the budgets, the notifications), attached to its lease: the
    key goes with the process, and the next candidate takes over."""

    host: str
    pid: int

    @classmethod
    def this_process(cls) -> ServiceLeader:
        return cls(host=socket.gethostname(), pid=os.getpid())


class KillRequest(Record):
    """``apps/<app>/kill``: a request to end the application, written by ``primus kill``
    (``outcome`` KILLED) or ``primus succeed`` (SUCCEEDED: someone decided it has done its
    work). Either way the AM stops every executor gracefully, then records the outcome; the
    first request made decides."""

    time: float
    user: str = ""
    reason: str = "killed by user"
    outcome: AppState = AppState.KILLED

    @field_validator("outcome")
    @classmethod
    def _ends_the_application(cls, outcome: AppState) -> AppState:
        if outcome not in (AppState.KILLED, AppState.SUCCEEDED):
            raise ValueError(f"must be KILLED or SUCCEEDED, got {outcome.value}")
        return outcome


class SuspendRequest(Record):
    """``apps/<app>/suspend``: while it exists the application is to be suspended (stopped,
    hosts given up, data progress kept); written by ``primus suspend``, deleted by
    ``primus resume``."""

    time: float
    user: str = ""
    reason: str = ""


class ProcessRef(Record):
    """A process on a host, precise enough to signal it without hitting a recycled pid."""

    host: str
    pid: int
    start_time: float


PAST_ATTEMPTS = 16
"""Ended attempts an executor's plan keeps (``ExecutorPlan.past``): its timeline's bars."""


class PastAttempt(Record):
    """An executor attempt that ended and was followed by another: where it ran, from when
    to when, and how it ended."""

    attempt: int
    host: str
    state: ExecutorState
    launch_time: float | None = None
    release_time: float | None = None
    exit_code: int | None = None
    exit_class: str = ""


class ExecutorPlan(Record):
    """``apps/<app>/executors/<role>/<i>/plan``: the AM's record of one executor."""

    role: str
    index: int
    attempt: int
    host: str
    address: str
    state: ExecutorState
    launch_time: float | None = None
    release_time: float | None = None
    exit_code: int | None = None
    diagnosis: str = ""
    exit_class: str = ""
    """``OOM_KILLED``: its trainer was killed at its memory limit; empty otherwise."""
    process: ProcessRef | None = None
    trainer: ProcessRef | None = None
    log_file: str = ""
    executor_log: str = ""
    app_attempt: int = 1
    failures: int = 0
    restarts: int = 0
    restart_at: float | None = None
    gpus: list[int] = Field(default_factory=list)
    """The GPU devices its reservation holds, given to its trainer as CUDA_VISIBLE_DEVICES
    (empty when its role asks for no GPU)."""
    numa_nodes: list[int] = Field(default_factory=list)
    """The NUMA nodes of those devices, which its trainer's CPUs and memory are bound to
    (its role's ``cpu_binding: numa``); empty: not bound."""
    nics: list[str] = Field(default_factory=list)
    """The RDMA NICs closest to those devices (the host's ``primus_gpu_nics``), given to its
    trainer as ``NCCL_IB_HCA``; empty: none named."""
    retired: bool = False
    """Stopped because a scale-down or a role removal left the index out of the topology: it
    counts neither as a failure nor against success, and starts anew if the index returns."""
    past: list[PastAttempt] = Field(default_factory=list)
    """The attempts before this one, oldest first: the last :data:`PAST_ATTEMPTS`."""

    @property
    def final(self) -> bool:
        """Whether this index has ended for good: its attempt ended and no restart is due."""
        return self.state.terminal and self.restart_at is None


class ExecutorLive(Record):
    """``apps/<app>/executors/<role>/<i>/live``: written by the executor, attached to its lease."""

    attempt: int
    host: str
    address: str
    pid: int
    ports: list[int] = Field(default_factory=list)
    state: ExecutorState
    registered_time: float
    trainer: ProcessRef | None = None
    trainer_start_time: float | None = None


class ExecutorUsage(Record):
    """``apps/<app>/executors/<role>/<i>/usage``: what the attempt's trainer used, as its
    cgroup counts it, against what its executor reserved: written by the executor every
    ``resources.usage_interval`` while the trainer runs, and once more when it ends (``None``:
    not counted on its host, or no interval measured yet)."""

    attempt: int
    time: float
    cpu: float | None = None
    """Cores used over the last interval (CPU seconds per second)."""
    cpu_seconds: float | None = None
    """CPU time of the attempt's trainer so far."""
    memory: int | None = None
    """Bytes its cgroup holds now."""
    memory_peak: int | None = None
    """The most bytes it held at once."""
    cpu_reserved: float = 0.0
    memory_reserved: int = 0
    """Bytes its role reserved (its limit adds the site's margin)."""


def usage_texts(usage: ExecutorUsage | None, attempt: int) -> tuple[str, str]:
    """An attempt's CPU and memory used against what it reserved, as ``primus status`` and the
    UI show them (``0.48 of 2``, ``310 MiB, peak 402 MiB of 1 GiB``); ``-`` before its
    executor measured them, or when the figures are of another attempt."""
    if usage is None or usage.attempt != attempt:
        return "-", "-"
    cpu = "-" if usage.cpu is None else f"{usage.cpu:.2f} of {usage.cpu_reserved:g}"
    memory = "-" if usage.memory is None else size_text(usage.memory) + (
        f", peak {size_text(usage.memory_peak)}" if usage.memory_peak is not None else "") + \
        f" of {size_text(usage.memory_reserved)}"
    return cpu, memory


class ExecutorResult(Record):
    """``apps/<app>/executors/<role>/<i>/result``: how the executor's attempt ended."""

    attempt: int
    exit_code: int
    finish_time: float
    diagnosis: str = ""
    exit_class: str = ""
    """``OOM_KILLED``: the kernel killed the trainer at its memory limit; empty otherwise."""


class ClusterMember(Record):
    """One executor as every trainer sees it in the cluster spec."""

    role: str
    index: int
    rank: int
    address: str
    ports: list[int]
    attempt: int = 1


class ClusterSpec(Record):
    """``apps/<app>/cluster``: the gang, written by the AM once every executor registered."""

    attempt: int
    members: list[ClusterMember]
    master_addr: str
    master_port: int
    version: int = 1

    def member(self, role: str, index: int) -> ClusterMember | None:
        """The entry of executor ``role``-``index``, if the spec has one."""
        return next((m for m in self.members if m.role == role and m.index == index), None)


class HostHealth(Record):
    """How a host has fared with this application's executors."""

    failures: int = 0
    blacklisted_until: float | None = None


class Blacklist(Record):
    """``apps/<app>/blacklist``: failures per host, and hosts avoided until a time."""

    hosts: dict[str, HostHealth] = Field(default_factory=dict)

    def avoided(self, now: float) -> set[str]:
        """Hosts still in their cooldown at ``now``."""
        return {name for name, health in self.hosts.items()
                if health.blacklisted_until is not None and health.blacklisted_until > now}


class AppEvent(Record):
    """``apps/<app>/events/<seq>``: one entry of the bounded event log."""

    seq: int
    time: float
    kind: str
    message: str
    role: str | None = None
    index: int | None = None


class HangReport(Record):
    """``apps/<app>/hang``: the last hang of a trainer, reported by its executor (the first of
    the role to see its trainer idle for the role's ``hang_timeout``). Every executor of
    ``role`` then writes its trainer's stacks (``stacks/<id>/<role>/<index>``); the AM
    summarizes them, records it ``handled`` with the summary and applies the role's
    ``on_hang`` (``restart``: the executors stop their trainers as hung)."""

    id: int
    role: str
    index: int
    host: str
    idle: float
    """Seconds the reporting trainer had been idle."""
    time: float
    handled: bool = False
    summary: str = ""
    restart: bool = False


class TrainerStacks(Record):
    """``apps/<app>/stacks/<hang>/<role>/<index>``: one trainer's stacks at a hang, and where
    its main thread stood (``where``: its innermost Python frame of the trainer's own code,
    then the library frame it waits in; else what its threads wait in, from /proc)."""

    role: str
    index: int
    attempt: int
    host: str
    idle: float
    """Seconds since its trainer last wrote output, read data or reported progress."""
    where: str
    text: str
    python: bool = True
    """Taken by py-spy; false: kernel stacks and wait channels from /proc."""


class NotifySeen(Record):
    """``notify/seen/apps/<app>`` (or ``notify/seen/hosts/<host>``, ``notify/seen/arrays/
    <array>``): what the server's webhooks were told of last, so that each fact is delivered
    once (``primus/server/notify.py``): the application's state, its last hang, the admission
    wait that began at ``waiting_since``; a host's quarantine that began at
    ``quarantined_since``; a job array's end (``state`` ``ENDED``)."""

    state: str = ""
    hang: int = 0
    waiting_since: float = 0.0
    quarantined_since: float = 0.0


class DeliveryTarget(Record):
    """A webhook of a delivery: its URL, whose key signs it (``site:<n>``: the site's n-th
    webhook's; ``app``: the application's own), and whether it answered 2xx."""

    url: str
    key: str
    delivered: bool = False
    error: str = ""


class Delivery(Record):
    """``notify/outbox/<id>``: a notification not yet delivered to every webhook, with the
    body every webhook gets (JSON text, signed as it is)."""

    id: str
    kind: str
    app_id: str = ""
    body: str
    targets: list[DeliveryTarget]
    attempts: int = 0
    next_at: float
    created: float


class DeliveryOutcome(Record):
    """``apps/<app>/notifications/<id>``: how a notification of the application went, per
    webhook: delivered, or why not after every attempt."""

    kind: str
    time: float
    attempts: int
    targets: list[DeliveryTarget]


class DataTask(Record):
    """``data/<stream>/tasks/<id>``: a byte range of one file, read in one epoch. Immutable."""

    epoch: int
    seq: int
    path: str
    start: int
    end: int
    size: int
    partition: str = ""
    constants: list[tuple[str, str, Any]] | None = None
    """Columns its rows have that the file does not hold (a Delta table's partition columns):
    ``(name, Arrow type, value)``."""

    @property
    def task_id(self) -> str:
        return task_id(self.epoch, self.seq)


def task_id(epoch: int, seq: int) -> str:
    """A task's key name: epoch and sequence number, zero-padded so key order is read order."""
    return f"{epoch:04d}-{seq:08d}"


class TaskProgress(Record):
    """``data/<stream>/progress/<id>``: where reading a task got to (a checkpoint), and how
    often it was attempted. ``offset`` is a record boundary: reading resumes there."""

    offset: int
    records: int = 0
    bytes: int = 0
    attempts: int = 0
    error: str = ""


class TaskOwner(Record):
    """``data/<stream>/owner/<id>``: the executor reading the task, attached to its lease."""

    role: str
    index: int
    attempt: int
    since: float
    pid: int = 0
    """The reading executor's process: on a host's shared lease, its keeper deletes the owner
    keys of an executor that died (``executor/host_lease.py``)."""


class TaskDone(Record):
    """``data/<stream>/done/<id>`` (or ``failed/<id>``): how a task ended."""

    records: int
    bytes: int
    role: str
    index: int
    time: float
    attempts: int = 1
    error: str = ""


class ScanPart(Record):
    """One part of an epoch's tasks: the stream's sources from where the part before ended
    (the first: from the first source) up to ``sources`` (exclusive), its tasks numbered from
    ``first_task``. An epoch is one part, plus one per group of sources added to the stream
    while it was written (or after it, for the last epoch)."""

    sources: int
    first_task: int


class FoldedTasks(Record):
    """An unbounded Kafka stream's done tasks that its AM folded out of etcd (their ``tasks/``
    and ``done/`` keys deleted, their totals kept here), so that a stream reading for months
    holds as many task keys as it has tasks not done yet."""

    tasks: int = 0
    records: int = 0
    bytes: int = 0
    below: dict[str, dict[int, int]] = Field(default_factory=dict)
    """``{topic: {partition: offset}}``: every offset of the partition below this one was read
    by a task done and folded."""


class StreamScan(Record):
    """``data/<stream>/scan``: how far the AM got writing tasks.

    ``created`` tasks of ``epoch`` are written, the parts of ``parts`` in order (empty: the
    epoch has none written); ``epoch_tasks`` is how many the epoch has once that is known.
    ``complete``: every epoch is written for the sources its last part reaches."""

    epoch: int = 1
    created: int = 0
    epoch_tasks: int | None = None
    complete: bool = False
    parts: list[ScanPart] = Field(default_factory=list)
    slices: dict[str, dict[int, int]] | None = None
    """An unbounded Kafka stream (``end: none``): the offset each partition's next slice
    starts at, ``{topic: {partition: offset}}``, written with the tasks of the slice before;
    ``None`` until the first slice after the offsets pinned at submit."""
    folded: FoldedTasks | None = None
    """An unbounded Kafka stream: its done tasks folded out of etcd (``None``: none yet)."""


READERS_KEPT = 512
"""Readers a stream's stats count records for (``StreamStats.readers``)."""


class StreamStats(Record):
    """``data/<stream>/stats``: progress of the stream, kept by the AM."""

    tasks: int = 0
    done: int = 0
    failed: int = 0
    records: int = 0
    """Records of the tasks done (each read once, whatever attempts it took)."""
    bytes: int = 0
    failed_records: int = 0
    """Records the failed tasks delivered before they failed (up to the damage, where their
    last attempt checkpointed): with :attr:`records`, what the trainers were given once."""
    failed_bytes: int = 0
    exhausted: bool = False
    lag: int | None = None
    """An unbounded Kafka stream: messages in its partitions no reader has finished, summed
    over the partitions (each one's end minus its oldest unfinished offset); ``None`` for other
    streams."""
    lags: dict[str, int] = Field(default_factory=dict)
    """An unbounded Kafka stream: :attr:`lag` per partition (``topic[partition]``); empty for
    other streams."""
    epoch: int = 0
    """The latest epoch a task was done in (0: none done yet)."""
    readers: dict[str, int] = Field(default_factory=dict)
    """Records of the tasks done, per reader (``role-index``): the first
    :data:`READERS_KEPT` readers (:attr:`readers_partial` says when others read too)."""
    readers_partial: bool = False


class StreamCut(Record):
    """One stream in a savepoint: what it was when the savepoint was taken (its settings
    that decide its tasks, its sources as the application had them, pinned tables and
    sources added at run time included), how far it got, and in how many chunks its task
    keys are stored (``data/<stream>/savepoints/<n>/``)."""

    name: str
    format: str
    sources: list[SourceSpec]
    chunk_size: int | None = None
    epochs: int = 1
    shuffle: bool = False
    seed: int = 0
    columns: list[str] | None = None
    filter: list[tuple[str, str, Any]] | None = None
    scan: StreamScan = Field(default_factory=StreamScan)
    tasks: int = 0
    done: int = 0
    failed: int = 0
    reading: int = 0
    """Tasks started and not done: each resumes at its checkpoint."""
    records: int = 0
    """Records before the cut: those of the done tasks and of the others' checkpoints."""
    chunks: int = 0


class SavepointState(str, enum.Enum):
    REQUESTED = "requested"
    TAKEN = "taken"
    FAILED = "failed"


class Savepoint(Record):
    """``savepoints/<number>``: a savepoint of the application's data streams, asked for by
    ``by`` (a user, or a trainer: ``role-index``); the AM takes it, reading every stream at one
    revision."""

    number: int
    state: SavepointState = SavepointState.REQUESTED
    by: str = ""
    name: str = ""
    """Given by the trainers that asked for it (``primus.data.reader.savepoint(name)``)."""
    readers: list[str] = Field(default_factory=list)
    """The readers (``role-index``) that wrote where their trainer was for it: the AM takes
    a trainers' savepoint once every reader holding tasks has, or after a minute."""
    requested: float = 0.0
    taken: float | None = None
    revision: int = 0
    streams: list[StreamCut] = Field(default_factory=list)
    error: str = ""


class AdmissionRequest(Record):
    """``scheduler/apps/<app>/request``: executors an application waits to be given hosts
    for, all at once (a gang): its first executors, then those a scale-up adds or a restart
    elsewhere needs. Written by the AM; the admission leader marks it ``granted`` once it has
    reserved every one, and the AM then deletes it."""

    app_id: str
    user: str
    queue: str
    """The job's queue; empty: the deployment's default queue."""
    submit_time: float
    preemptible: bool = False
    placement: str = "spread"
    hosts: list[str] = Field(default_factory=list)
    """The hosts the application may use (its inventory as resolved at submit)."""
    roles: list[RoleSpec]
    executors: list[tuple[str, int]]
    avoid: list[str] = Field(default_factory=list)
    """Hosts not to use for these executors, unless no other fits (blacklisted, lost on)."""
    granted: bool = False
    """Every executor was given a reservation; the AM deletes the request once it saw them
    (a new request can then not be mistaken for one already granted)."""
    array: str = ""
    """The job array of the application, and its ``max_running``: set by admission's vetting
    from the owner record, whatever the AM wrote."""
    array_max_running: int | None = None
    domain: str = ""
    """The level of host domains its executors must share one domain of (the job's
    ``placement_domain``); empty: none. Set by admission's vetting from the spec."""
    domain_preferred: str = ""
    """The level whose one domain they should share where one takes them all."""
    resize: bool = False
    """The executors hold reservations already: they ask for their roles' sizes as the spec
    says now (``primus resize``), on the hosts they hold. Admission takes the sizes from the
    spec (the server's record), never from the request."""


class Reservation(Record):
    """``scheduler/apps/<app>/reservations/<role>/<i>``: the resources one executor holds on
    its host (its GPU devices by index), from its admission until the AM records its end."""

    app_id: str
    user: str
    queue: str
    role: str
    index: int
    host: str
    cpu: float
    memory: int
    gpus: list[int] = Field(default_factory=list)
    since: float
    preemptible: bool = False
    """Its application may be stopped to admit one of a higher priority."""
    array: str = ""
    """The job array its application is a member of (what ``max_running`` counts)."""
    seal: str = ""
    """The admission leader's seal (``primus.scheduler.seals``): on a site of owners, a
    reservation without the right one was not written by the leader and counts for nothing."""


class Preemption(Record):
    """``scheduler/apps/<app>/preempt``: the admission leader asks the application to stop and
    queue again, to admit ``by``; its AM deletes it once it has."""

    by: str
    time: float
    reason: str
    seal: str = ""
    """The admission leader's seal, as on a :class:`Reservation`."""


class TopologyCheck(Record):
    """``scheduler/topology/<host>``: the host's GPUs, as ``nvidia-smi topo -m`` shows them,
    are linked otherwise than its inventory declares (or it did not answer); written by the
    admission leader's health check, deleted once they agree again."""

    reason: str
    since: float


class Waiting(Record):
    """``scheduler/apps/<app>/waiting``: why an application waits for admission, written by the
    admission leader when the reason changes (its position follows from the requests and the
    queues: ``primus.scheduler.admission.order``)."""

    reason: str
    since: float
    hosts: list[str] = Field(default_factory=list)
    """A resize that waits: the hosts without room for it (its roles with ``resize: move``
    move their executors off them)."""


class Eviction(Record):
    """``scheduler/apps/<app>/evict``: hosts out of service where the application holds
    reservations, each with why; written by the admission leader while it does. Its AM records
    an event, and, with ``move`` (the site's ``health.out_of_service: move``), moves the
    executors there as it moves a lost host's."""

    hosts: dict[str, str]
    move: bool = False


class HostCondition(Record):
    """``scheduler/conditions/<host>``: why admission places nothing new on a host. Absent: the
    host takes executors. ``drained`` by an operator (``primus hosts drain``) until resumed;
    ``quarantined`` by the health check until it passed ``passes`` more times in a row."""

    state: Literal["drained", "quarantined"]
    reason: str
    since: float
    by: str
    """Who drained it, or ``health check``."""
    passes: int = 0
    """Health checks passed in a row since it was quarantined."""

    def describe(self) -> str:
        """``drained by alice: new disks`` / ``quarantined by the health check: …``."""
        return f"{self.state} by {self.by}: {self.reason}"


R = TypeVar("R", bound=Record)
Stateful = TypeVar("Stateful", AppStatus, ExecutorPlan)


def advance(record: Stateful, state: AppState | ExecutorState, **fields: object) -> Stateful:
    """``record`` in ``state``, with ``fields`` changed too: every write of an application's or
    an executor's state goes through here, so the transition table holds for all of them.

    Raises:
        IllegalTransitionError: The table does not allow ``record.state`` → ``state``.
    """
    check_transition(record.state, state)
    return record.model_copy(update={"state": state, **fields})


def encode(record: Record) -> bytes:
    """Serialise a record for etcd."""
    return record.model_dump_json().encode()


class UnreadableRecordError(PrimusError):
    """A stored value does not parse: written by another version of Primus, by hand, or by an
    application's own processes; ``key`` names it (empty where it is not known)."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


def decode(model: type[R], value: bytes, key: str = "") -> R:
    """Parse a stored value into its record type.

    Raises:
        UnreadableRecordError: Naming ``key`` and the first field that does not parse.
    """
    try:
        return model.model_validate_json(value)
    except ValidationError as exc:
        raise _unreadable(key or model.__name__, exc, key) from None


def decode_spec(app_id: str, value: bytes) -> JobSpec:
    """Parse an application's stored spec (``apps/<app>/spec``).

    Raises:
        UnreadableRecordError: Naming the application and the first field that does not parse.
    """
    try:
        return JobSpec.model_validate_json(value)
    except ValidationError as exc:
        raise _unreadable(f"the spec of {app_id}", exc) from None


def _unreadable(what: str, exc: ValidationError, key: str = "") -> UnreadableRecordError:
    error = exc.errors(include_url=False)[0]
    where = ".".join(map(str, error["loc"])) or "the value"
    return UnreadableRecordError(
        f"{what} is stored in a form Primus {__version__} cannot read ({where}: {error['msg']}); "
        "read it with etcdctl", key)


_HOSTS = TypeAdapter(list[Host])


def encode_hosts(hosts: Sequence[Host]) -> bytes:
    """Serialise the application's inventory (``apps/<app>/hosts``)."""
    return _HOSTS.dump_json(list(hosts))


def decode_hosts(value: bytes) -> list[Host]:
    """Parse the application's inventory."""
    return _HOSTS.validate_json(value)


_HOST = TypeAdapter(Host)


def encode_host(host: Host) -> bytes:
    """Serialise one host (``scheduler/hosts/<name>``)."""
    return _HOST.dump_json(host)


def decode_host(value: bytes) -> Host:
    """Parse one host."""
    return _HOST.validate_json(value)
