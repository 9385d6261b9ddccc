"""An application as read from its keys: one consistent read, and the view built from it.

The AM and the client layer read an application the same way: :func:`read_app_keys` reads its
keys at one revision and :meth:`AppView.from_snapshot` folds them into records. The AM then keeps
its view current with watch events (:meth:`AppView.observe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from primus.config.spec import JobSpec, size_text
from primus.state.keys import EVENT_LOG_SIZE, AppKeys
from primus.state.records import (
    AdmissionRequest,
    AppEvent,
    AppOwner,
    AppStatus,
    ClusterSpec,
    Eviction,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    ExecutorUsage,
    HangReport,
    KillRequest,
    Preemption,
    Record,
    Reservation,
    Savepoint,
    StreamStats,
    SuspendRequest,
    TrainerStacks,
    Waiting,
    decode,
    decode_spec,
    owned_status,
)
from primus.state.records import Blacklist as HostBlacklist
from primus.state.states import AppState, ExecutorState
from primus.state.topology import TopologyChange, effective_spec
from primus.store.api import Coordinator, EventType, Get, Snapshot, WatchEvent


async def read_app_keys(store: Coordinator, keys: AppKeys, stacks: bool = False,
                        savepoints: bool = False) -> Snapshot:
    """Every key of the application except its data streams' tasks, at one revision (a stream
    may hold hundreds of thousands of task keys; only its ``stats`` are read), and its keys of
    admission (``scheduler/apps/<app>/``); the trainers' stacks taken at hangs (up to 64 KiB
    per trainer and hang) only with ``stacks``; the streams' cuts in its savepoints (their
    task keys, compressed) only with ``savepoints``."""
    singles = [keys.spec, keys.status, keys.owner, keys.leader, keys.hosts, keys.kill, keys.suspend,
               keys.cluster, keys.blacklist, keys.hang]
    first = await store.txn([], [*(Get(k) for k in singles),
                                 Get(keys.executors, prefix=True),
                                 Get(keys.events, prefix=True, limit=EVENT_LOG_SIZE, last=True),
                                 Get(keys.roles, prefix=True), Get(keys.sources, prefix=True),
                                 Get(keys.changes, prefix=True),
                                 Get(keys.notifications, prefix=True),
                                 Get(keys.refusals, prefix=True),
                                 Get(keys.savepoints, prefix=True),
                                 *([Get(keys.stacks, prefix=True)] if stacks else []),
                                 Get(keys.scheduler.app(keys.app_id), prefix=True)])
    kvs = [kv for read in first.reads for kv in read]
    spec = next((kv for kv in kvs if kv.key == keys.spec), None)
    streams = submitted_spec(keys.app_id, spec.value).data if spec is not None else []
    if streams:  # stats are written apart from the rest: a later revision is fine
        stats = await store.txn([], [Get(keys.stream(s.name).stats) for s in streams])
        kvs += [kv for read in stats.reads for kv in read]
        if savepoints:  # and so are the cuts, which never change
            cuts = await store.txn([], [Get(keys.stream(s.name).savepoints, prefix=True)
                                        for s in streams])
            kvs += [kv for read in cuts.reads for kv in read]
    return Snapshot(first.revision, tuple(kvs))


_SPECS_KEPT = 64
_specs: dict[tuple[str, bytes], JobSpec] = {}  # least recently read first


def submitted_spec(app_id: str, value: bytes) -> JobSpec:
    """The application's stored spec (``apps/<app>/spec``), decoded once per process: it is
    written once, at submit, and read with every read of the application. A spec is frozen, so
    every reader may share it; the :data:`_SPECS_KEPT` specs read last are kept.

    Raises:
        UnreadableRecordError: As :func:`~primus.state.records.decode_spec`.
    """
    spec = _specs.pop((app_id, value), None)
    if spec is None:
        spec = decode_spec(app_id, value)
        if len(_specs) >= _SPECS_KEPT:
            del _specs[next(iter(_specs))]
    _specs[(app_id, value)] = spec
    return spec


async def read_spec(store: Coordinator, keys: AppKeys) -> JobSpec | None:
    """The application's spec as it should be now (its topology changes applied), read at one
    revision; ``None`` when the application does not exist."""
    read = await store.txn([], [Get(keys.spec), Get(keys.roles, prefix=True),
                                Get(keys.sources, prefix=True)])
    spec, *topology = read.reads
    if not spec:
        return None
    return effective_spec(decode_spec(keys.app_id, spec[0].value), keys,
                          {kv.key: kv.value for entries in topology for kv in entries})


ExecutorId = tuple[str, int]


class KeyKind(str, Enum):
    """What one key of an application holds, as :func:`app_key` recognises it.

    Under ``apps/<app>/``: ``STATUS``, ``OWNER``, ``LEADER`` (``am/leader``), ``CLUSTER``,
    ``KILL``, ``SUSPEND``, ``BLACKLIST`` and ``HANG``, one key each; ``EVENT`` (``events/<seq>``);
    ``STREAM`` (a data stream's ``stats``); ``STACK`` (``stacks/<hang>/<role>/<index>``);
    ``ROLE`` (``roles/<role>/...``) and ``SOURCE`` (``sources/<stream>/<change>``), the
    topology's changes; ``CHANGE`` (``changes/<seq>``), their log; ``PLAN``, ``LIVE``,
    ``RESULT`` and ``USAGE`` (``executors/<role>/<index>/<kind>``); ``SAVEPOINT``
    (``savepoints/<n>``). Under ``scheduler/apps/<app>/``:
    ``REQUEST``, ``WAITING``, ``PREEMPT``, ``EVICT`` and ``RESERVATION``
    (``reservations/<role>/<index>``).
    """

    STATUS = "status"
    OWNER = "owner"
    LEADER = "leader"
    CLUSTER = "cluster"
    KILL = "kill"
    SUSPEND = "suspend"
    BLACKLIST = "blacklist"
    HANG = "hang"
    EVENT = "event"
    STREAM = "stream"
    STACK = "stack"
    ROLE = "role"
    SOURCE = "source"
    CHANGE = "change"
    PLAN = "plan"
    LIVE = "live"
    RESULT = "result"
    USAGE = "usage"
    REQUEST = "request"
    WAITING = "waiting"
    PREEMPT = "preempt"
    EVICT = "evict"
    RESERVATION = "reservation"
    SAVEPOINT = "savepoint"


_EXECUTOR_RECORDS: dict[KeyKind, type[Record]] = {
    KeyKind.PLAN: ExecutorPlan, KeyKind.LIVE: ExecutorLive, KeyKind.RESULT: ExecutorResult,
    KeyKind.USAGE: ExecutorUsage}
EXECUTOR_KINDS = frozenset(_EXECUTOR_RECORDS)
"""The kinds of an executor's keys, each one of :class:`ExecutorView`'s records."""

_ADMISSION_SINGLES = frozenset({KeyKind.REQUEST, KeyKind.WAITING, KeyKind.PREEMPT,
                                KeyKind.EVICT})


@dataclass(frozen=True)
class AppKey:
    """One key of an application as :func:`app_key` recognised it: what it holds (``kind``),
    and which one of its kind it is, where the key names that."""

    kind: KeyKind
    role: str = ""
    """The role of an executor's key, a ``RESERVATION``, a ``STACK`` or a ``ROLE`` key."""
    index: int = 0
    """The index of an executor's key, a ``RESERVATION`` or a ``STACK``."""
    hang: int = 0
    """The hang a ``STACK`` was taken at."""
    stream: str = ""
    """The data stream a ``STREAM`` key counts."""

    @property
    def executor(self) -> ExecutorId:
        return self.role, self.index

    @property
    def stack(self) -> tuple[int, str, int]:
        return self.hang, self.role, self.index


def app_key(keys: AppKeys, key: str) -> AppKey | None:
    """What ``key`` holds, a key under the application's root or its keys of admission
    (``scheduler/apps/<app>/``); ``None`` for keys no view reads (its spec, its hosts, its
    notifications, a data stream's tasks) and for those of other applications."""
    app_id, kind, rest = keys.scheduler.parse(key)
    if app_id:
        if app_id != keys.app_id:
            return None
        if kind == "reservations":
            role, _, number = rest.partition("/")
            return AppKey(KeyKind.RESERVATION, role, int(number))
        return AppKey(KeyKind(kind)) if kind in _ADMISSION_SINGLES else None
    single = {keys.status: KeyKind.STATUS, keys.owner: KeyKind.OWNER,
              keys.leader: KeyKind.LEADER,
              keys.cluster: KeyKind.CLUSTER, keys.kill: KeyKind.KILL,
              keys.suspend: KeyKind.SUSPEND, keys.blacklist: KeyKind.BLACKLIST,
              keys.hang: KeyKind.HANG}.get(key)
    if single is not None:
        return AppKey(single)
    if key.startswith(keys.data):
        return None if keys.is_task_key(key) else \
            AppKey(KeyKind.STREAM, stream=key[len(keys.data):-len("/stats")])
    if key.startswith(keys.events):
        return AppKey(KeyKind.EVENT)
    if key.startswith(keys.stacks):
        hang, role, index = keys.parse_stack(key)
        return AppKey(KeyKind.STACK, role, index, hang)
    if key.startswith(keys.roles):
        return AppKey(KeyKind.ROLE, key[len(keys.roles):].partition("/")[0])
    if key.startswith(keys.sources):
        return AppKey(KeyKind.SOURCE)
    if key.startswith(keys.changes):
        return AppKey(KeyKind.CHANGE)
    if key.startswith(keys.savepoints):
        return AppKey(KeyKind.SAVEPOINT)
    parsed = keys.parse_executor(key)
    return None if parsed is None else AppKey(KeyKind(parsed.kind), parsed.role, parsed.index)


@dataclass(frozen=True)
class StreamFacts:
    """What the AM knows of a data stream from its ledger: the counts, whether every task of
    every source is resolved, the first task that failed, and why writing its tasks stopped
    (an error of the task writer), if it did."""

    stats: StreamStats
    resolved: bool = False
    first_failure: str = ""
    error: str = ""


@dataclass
class ExecutorView:
    """What is known of one executor: its stored keys, plus what the AM observed of its
    processes itself (``process_exited``, ``stop_requested``, ``stop_finished``,
    ``launch_error``: why the launcher could not start it; ``inherited_plan``: its plan was
    PLANNED when this AM began to lead, so whether the AM that wrote it launched it is unknown;
    left at their defaults by any other reader)."""

    plan: ExecutorPlan | None = None
    live: ExecutorLive | None = None
    result: ExecutorResult | None = None
    usage: ExecutorUsage | None = None
    """What its trainer used, as its executor last wrote it (the AM decides nothing on it)."""
    process_exited: bool = False
    stop_requested: bool = False
    stop_finished: bool = False
    launch_error: str = ""
    inherited_plan: bool = False


def observe_executor(executors: dict[ExecutorId, ExecutorView], found: AppKey, key: str,
                     value: bytes | None) -> None:
    """Set the plan, live or result (``found.kind``, one of :data:`EXECUTOR_KINDS`) of an
    executor as ``key`` now holds it: the record in ``value``, ``None`` once deleted. An
    executor not in ``executors`` is added."""
    setattr(executors.setdefault(found.executor, ExecutorView()), found.kind.value,
            None if value is None else decode(_EXECUTOR_RECORDS[found.kind], value, key))


@dataclass
class AppView:
    """An application as observed: rebuilt from one snapshot of its keys (:func:`read_app_keys`)
    and kept current by watch events. Observations only, no decisions: the AM decides on it
    (``primus/am/reconcile.py``), the client layer reports it.

    ``spec`` is the application as it should be now (:func:`~primus.state.topology.
    effective_spec`): ``submitted`` with the topology changes in ``topology`` applied.
    ``executors`` holds every index ever planned, also those a scale-down or a role removal
    left out of ``spec`` (:meth:`is_current` tells them apart).
    """

    keys: AppKeys
    submitted: JobSpec
    status: AppStatus
    """As its AM wrote it, with the server's record's facts in place (:func:`~primus.state.
    records.owned_status`)."""
    spec: JobSpec = field(init=False)
    owner: AppOwner | None = None
    """The server's record (``None``: recorded before it existed, read from the history)."""
    topology: dict[str, bytes] = field(default_factory=dict)
    changes: dict[int, TopologyChange] = field(default_factory=dict)
    executors: dict[ExecutorId, ExecutorView] = field(default_factory=dict)
    cluster: ClusterSpec | None = None
    kill: KillRequest | None = None
    suspend: SuspendRequest | None = None
    blacklist: HostBlacklist = field(default_factory=HostBlacklist)
    next_event_seq: int = 0
    placed_elsewhere: set[ExecutorId] = field(default_factory=set)
    """Executors whose reservation the AM gave up to ask admission again away from its host
    (only the AM observes these; a new AM asks once more)."""
    stream_facts: dict[str, StreamFacts] = field(default_factory=dict)
    """What the AM's ledgers know of each data stream (only the AM observes these)."""
    read_rates: dict[ExecutorId, float] = field(default_factory=dict)
    """Bytes per second each executor read over its role's straggler window, for the current
    attempts measured long enough (only the AM observes these)."""
    streams: dict[str, StreamStats] = field(default_factory=dict)
    reservations: dict[ExecutorId, Reservation] = field(default_factory=dict)
    request: AdmissionRequest | None = None
    request_revision: int = 0
    waiting: Waiting | None = None
    preemption: Preemption | None = None
    eviction: Eviction | None = None
    """Hosts out of service where it holds reservations (``scheduler/apps/<app>/evict``)."""
    noted_out_of_service: set[tuple[str, str]] = field(default_factory=set)
    """The hosts out of service (and why) this AM recorded an event for."""
    noted_lag: set[str] = field(default_factory=set)
    """The unbounded streams whose lag past ``max_lag`` this AM recorded an event for (a
    stream leaves it once its lag is back under)."""
    hang: HangReport | None = None
    stacks: dict[tuple[int, str, int], TrainerStacks] = field(default_factory=dict)
    """The trainers' stacks taken at each hang kept: by hang, role and index."""
    savepoints: dict[int, Savepoint] = field(default_factory=dict)
    """The savepoints of its data streams, by number."""
    may_park: bool = False
    """Whether the application may wait for admission with no AM (``AppStatus.parked``): an
    AM keeper runs, and the job carries no secret that only processes hold (only the AM
    observes this)."""

    def __post_init__(self) -> None:
        self.spec = self.submitted

    def is_current(self, executor: ExecutorId) -> bool:
        """Whether ``spec`` has this executor (a scale-down or a role removal retires it)."""
        role, index = executor
        return any(r.name == role and index < r.num for r in self.spec.roles)

    def role_usage(self, role: str) -> str:
        """What the role's running trainers use against what they reserved, summed over those
        whose executors measured their current attempt (``using 1.9 of 8 cores, 1.2 GiB of
        16 GiB``); empty before any did."""
        running = [ex for (name, _), ex in self.executors.items()
                   if name == role and ex.plan is not None and not ex.plan.state.terminal
                   and ex.usage is not None and ex.usage.attempt == ex.plan.attempt]
        if not running:
            return ""
        usages = [ex.usage for ex in running if ex.usage is not None]
        cpu = sum(u.cpu or 0.0 for u in usages)
        return (f"using {cpu:.2f} of {sum(u.cpu_reserved for u in usages):g} cores, "
                f"{size_text(sum(u.memory or 0 for u in usages))} of "
                f"{size_text(sum(u.memory_reserved for u in usages))}")

    def executors_by_role(self) -> dict[str, list[tuple[int, ExecutorView]]]:
        """Every executor the application has or had, by role in rank order (removed roles
        last), by index: the topology's, then those it retired."""
        by_role: dict[str, list[tuple[int, ExecutorView]]] = {
            role.name: [] for role in self.spec.roles}
        for (role, index), executor in sorted(self.executors.items()):
            if self.is_current((role, index)) or executor.plan is not None:
                by_role.setdefault(role, []).append((index, executor))
        return by_role

    def progress(self) -> float | None:
        """How far the application got, from 0 to 1: the data tasks done (or failed) of those
        its streams hold where it reads data, else its executors that ended successfully;
        ``None`` before anything is known (a stream still scanning, no executor planned)."""
        if self.status.state is AppState.SUCCEEDED:
            return 1.0
        if self.spec.data:
            stats = [self.streams.get(stream.name) for stream in self.spec.data]
            known = [s for s in stats if s is not None and s.tasks]
            if len(known) < len(stats):
                return None
            ended = sum(s.done + s.failed for s in known) / sum(s.tasks for s in known)
            # A stream still finding files has more tasks to come: not done before that.
            return ended if all(s.exhausted for s in known) else min(ended, 0.99)
        current = [ex for executor, ex in self.executors.items() if self.is_current(executor)]
        if not current:
            return None
        return sum(1 for ex in current if ex.plan is not None
                   and ex.plan.state is ExecutorState.SUCCEEDED) / len(current)

    def _topology_changed(self) -> None:
        self.spec = effective_spec(self.submitted, self.keys, self.topology)
        for role in self.spec.roles:
            for index in range(role.num):
                self.executors.setdefault((role.name, index), ExecutorView())

    @classmethod
    def from_snapshot(cls, keys: AppKeys, snapshot: Snapshot) -> AppView:
        """Build the view from every key of the application read at one revision."""
        by_key = {kv.key: kv for kv in snapshot.kvs}
        view = cls(keys, submitted_spec(keys.app_id, by_key[keys.spec].value),
                   decode(AppStatus, by_key[keys.status].value, keys.status))
        view.topology = {kv.key: kv.value for kv in snapshot.kvs
                         if kv.key.startswith((keys.roles, keys.sources))}
        view._topology_changed()
        for kv in snapshot.kvs:
            if not kv.key.startswith((keys.roles, keys.sources)):
                view.observe_put(kv.key, kv.value, kv.mod_revision)
        return view

    def observe(self, event: WatchEvent) -> None:
        """Fold one watch event into the view."""
        if event.type is EventType.PUT:
            self.observe_put(event.key, event.value, event.revision)
            return
        found = app_key(self.keys, event.key)
        if found is None:
            return
        match found.kind:
            case KeyKind.REQUEST:
                self.request = None
            case KeyKind.WAITING:
                self.waiting = None
            case KeyKind.PREEMPT:
                self.preemption = None
            case KeyKind.EVICT:
                self.eviction = None
            case KeyKind.RESERVATION:
                self.reservations.pop(found.executor, None)
            case KeyKind.LIVE if found.executor in self.executors:
                self.executors[found.executor].live = None
            case KeyKind.KILL:
                self.kill = None
            case KeyKind.SUSPEND:
                self.suspend = None
            case KeyKind.CLUSTER:
                self.cluster = None
            case KeyKind.HANG:
                self.hang = None
            case KeyKind.STACK:
                self.stacks.pop(found.stack, None)
            case KeyKind.ROLE | KeyKind.SOURCE:
                self.topology.pop(event.key, None)
                self._topology_changed()

    def observe_put(self, key: str, value: bytes, revision: int = 0) -> None:
        """Fold the current value of one key (written at ``revision``) into the view."""
        found = app_key(self.keys, key)
        if found is None:
            return
        match found.kind:
            case KeyKind.REQUEST:
                self.request = decode(AdmissionRequest, value, key)
                self.request_revision = revision
            case KeyKind.WAITING:
                self.waiting = decode(Waiting, value, key)
            case KeyKind.PREEMPT:
                self.preemption = decode(Preemption, value, key)
            case KeyKind.EVICT:
                self.eviction = decode(Eviction, value, key)
            case KeyKind.RESERVATION:
                self.reservations[found.executor] = decode(Reservation, value, key)
            case KeyKind.STATUS:
                self.status = owned_status(decode(AppStatus, value, key), self.owner)
                self.changes = {seq: change for seq, change in self.changes.items()
                                if seq > self.status.changes_recorded}
            case KeyKind.OWNER:
                self.owner = decode(AppOwner, value, key)
                self.status = owned_status(self.status, self.owner)
            case KeyKind.CLUSTER:
                self.cluster = decode(ClusterSpec, value, key)
            case KeyKind.KILL:
                self.kill = decode(KillRequest, value, key)
            case KeyKind.SUSPEND:
                self.suspend = decode(SuspendRequest, value, key)
            case KeyKind.BLACKLIST:
                self.blacklist = decode(HostBlacklist, value, key)
            case KeyKind.STREAM:
                self.streams[found.stream] = decode(StreamStats, value, key)
            case KeyKind.EVENT:
                self.next_event_seq = max(self.next_event_seq,
                                          decode(AppEvent, value, key).seq + 1)
            case KeyKind.HANG:
                self.hang = decode(HangReport, value, key)
            case KeyKind.STACK:
                self.stacks[found.stack] = decode(TrainerStacks, value, key)
            case KeyKind.SAVEPOINT:
                savepoint = decode(Savepoint, value, key)
                self.savepoints[savepoint.number] = savepoint
            case KeyKind.ROLE | KeyKind.SOURCE:
                self.topology[key] = value
                self._topology_changed()
            case KeyKind.CHANGE:
                change = decode(TopologyChange, value, key)
                if change.seq > self.status.changes_recorded:
                    self.changes[change.seq] = change
            case _ if found.kind in EXECUTOR_KINDS:
                # An index the topology no longer has is kept: the AM retires it.
                observe_executor(self.executors, found, key, value)
