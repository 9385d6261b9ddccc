"""An application as read from its keys: one consistent read, and the view built from it.

The AM and the client layer read an application the same way: :func:`read_app_keys` reads its
keys at one revision and :meth:`AppView.from_snapshot` folds them into records. The AM then keeps
its view current with watch events (:meth:`AppView.observe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from primus.config.spec import JobSpec
from primus.state.keys import AppKeys
from primus.state.records import (
    AdmissionRequest,
    AppEvent,
    AppStatus,
    ClusterSpec,
    Eviction,
    ExecutorLive,
    ExecutorPlan,
    ExecutorResult,
    HangReport,
    KillRequest,
    Preemption,
    Reservation,
    StreamStats,
    SuspendRequest,
    TrainerStacks,
    Waiting,
    decode,
    decode_spec,
)
from primus.state.records import Blacklist as HostBlacklist
from primus.state.states import AppState, ExecutorState
from primus.state.topology import TopologyChange, effective_spec
from primus.store.api import Coordinator, EventType, Get, Snapshot, WatchEvent


async def read_app_keys(store: Coordinator, keys: AppKeys, stacks: bool = False) -> Snapshot:
    """Every key of the application except its data streams' tasks, at one revision (a stream
    may hold hundreds of thousands of task keys; only its ``stats`` are read), and its keys of
    admission (``scheduler/apps/<app>/``); the trainers' stacks taken at hangs (up to 64 KiB
    per trainer and hang) only with ``stacks``."""
    singles = [keys.spec, keys.status, keys.leader, keys.hosts, keys.kill, keys.suspend,
               keys.cluster, keys.blacklist, keys.hang]
    first = await store.txn([], [*(Get(k) for k in singles),
                                 Get(keys.executors, prefix=True), Get(keys.events, prefix=True),
                                 Get(keys.roles, prefix=True), Get(keys.sources, prefix=True),
                                 Get(keys.changes, prefix=True),
                                 Get(keys.notifications, prefix=True),
                                 *([Get(keys.stacks, prefix=True)] if stacks else []),
                                 Get(keys.scheduler.app(keys.app_id), prefix=True)])
    kvs = [kv for read in first.reads for kv in read]
    spec = next((kv for kv in kvs if kv.key == keys.spec), None)
    streams = submitted_spec(keys.app_id, spec.value).data if spec is not None else []
    if streams:  # stats are written apart from the rest: a later revision is fine
        stats = await store.txn([], [Get(keys.stream(s.name).stats) for s in streams])
        kvs += [kv for read in stats.reads for kv in read]
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
    process_exited: bool = False
    stop_requested: bool = False
    stop_finished: bool = False
    launch_error: str = ""
    inherited_plan: bool = False


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
    spec: JobSpec = field(init=False)
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
    hang: HangReport | None = None
    stacks: dict[tuple[int, str, int], TrainerStacks] = field(default_factory=dict)
    """The trainers' stacks taken at each hang kept: by hang, role and index."""

    def __post_init__(self) -> None:
        self.spec = self.submitted

    def is_current(self, executor: ExecutorId) -> bool:
        """Whether ``spec`` has this executor (a scale-down or a role removal retires it)."""
        role, index = executor
        return any(r.name == role and index < r.num for r in self.spec.roles)

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
        app_id, kind, rest = self.keys.scheduler.parse(event.key)
        if app_id == self.keys.app_id:
            if kind == "request":
                self.request = None
            elif kind == "waiting":
                self.waiting = None
            elif kind == "preempt":
                self.preemption = None
            elif kind == "evict":
                self.eviction = None
            elif kind == "reservations":
                role, _, index = rest.partition("/")
                self.reservations.pop((role, int(index)), None)
            return
        parsed = self.keys.parse_executor(event.key)
        if parsed is not None and parsed.kind == "live" and \
                (parsed.role, parsed.index) in self.executors:
            self.executors[(parsed.role, parsed.index)].live = None
        elif event.key == self.keys.kill:
            self.kill = None
        elif event.key == self.keys.suspend:
            self.suspend = None
        elif event.key == self.keys.cluster:
            self.cluster = None
        elif event.key == self.keys.hang:
            self.hang = None
        elif event.key.startswith(self.keys.stacks):
            self.stacks.pop(self.keys.parse_stack(event.key), None)
        elif event.key.startswith((self.keys.roles, self.keys.sources)):
            self.topology.pop(event.key, None)
            self._topology_changed()

    def observe_put(self, key: str, value: bytes, revision: int = 0) -> None:
        """Fold the current value of one key (written at ``revision``) into the view."""
        keys = self.keys
        app_id, kind, _ = keys.scheduler.parse(key)
        if app_id == keys.app_id:
            if kind == "request":
                self.request = decode(AdmissionRequest, value, key)
                self.request_revision = revision
            elif kind == "waiting":
                self.waiting = decode(Waiting, value, key)
            elif kind == "preempt":
                self.preemption = decode(Preemption, value, key)
            elif kind == "evict":
                self.eviction = decode(Eviction, value, key)
            elif kind == "reservations":
                reservation = decode(Reservation, value, key)
                self.reservations[(reservation.role, reservation.index)] = reservation
        elif key == keys.status:
            self.status = decode(AppStatus, value, key)
            self.changes = {seq: change for seq, change in self.changes.items()
                            if seq > self.status.changes_recorded}
        elif key == keys.cluster:
            self.cluster = decode(ClusterSpec, value, key)
        elif key == keys.kill:
            self.kill = decode(KillRequest, value, key)
        elif key == keys.suspend:
            self.suspend = decode(SuspendRequest, value, key)
        elif key == keys.blacklist:
            self.blacklist = decode(HostBlacklist, value, key)
        elif key.startswith(keys.root + "data/") and key.endswith("/stats"):
            self.streams[key[len(keys.root) + 5:-6]] = decode(StreamStats, value, key)
        elif key.startswith(keys.events):
            self.next_event_seq = max(self.next_event_seq, decode(AppEvent, value, key).seq + 1)
        elif key == keys.hang:
            self.hang = decode(HangReport, value, key)
        elif key.startswith(keys.stacks):
            self.stacks[keys.parse_stack(key)] = decode(TrainerStacks, value, key)
        elif key.startswith((keys.roles, keys.sources)):
            self.topology[key] = value
            self._topology_changed()
        elif key.startswith(keys.changes):
            change = decode(TopologyChange, value, key)
            if change.seq > self.status.changes_recorded:
                self.changes[change.seq] = change
        else:
            parsed = keys.parse_executor(key)
            if parsed is None:
                return
            # An index the topology no longer has is kept: the AM retires it.
            executor = self.executors.setdefault((parsed.role, parsed.index), ExecutorView())
            if parsed.kind == "plan":
                executor.plan = decode(ExecutorPlan, value, key)
            elif parsed.kind == "live":
                executor.live = decode(ExecutorLive, value, key)
            elif parsed.kind == "result":
                executor.result = decode(ExecutorResult, value, key)

