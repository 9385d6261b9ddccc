"""Prometheus metrics of a deployment, served by ``primus server`` at ``/metrics``.

What the AMs, executors and admission write reaches the server through etcd: one watch of the
deployment's prefix keeps a :class:`Fold` of the few keys metrics come from (applications'
status, spec and AM leader, executors' plans, data streams' stats, admission requests,
reservations, host conditions), and a scrape renders that fold (:class:`FoldCollector`); no
scrape reads etcd. Counters (ends, restarts, failures, leases lost, AM take-overs, admission
waits) count the transitions this server saw since it started, as Prometheus counters do.

Label sets are bounded: states, queues, roles, exit classes, inventory hosts; per application
only the data streams of applications that have not ended. No label names an executor.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import Counter as CounterMetric
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from primus.client.access import AuthConfig, bearer_token, may_scrape
from primus.config.inventory import Host
from primus.config.spec import OOM_KILLED
from primus.history.api import stored_queue
from primus.state.records import (
    AdmissionRequest,
    AmLeader,
    AppStatus,
    ExecutorPlan,
    ExecutorUsage,
    HostCondition,
    Reservation,
    StreamStats,
    UnreadableRecordError,
    decode,
)
from primus.state.states import AppState, ExecutorState
from primus.state.topology import CHANGE_KINDS, RoleAdded, TopologyChange
from primus.state.view import submitted_spec
from primus.store.api import Alarm, Coordinator, EventType, Get, KeyValue, Resync, StoreError
from primus.store.recipes import watching
from primus.store.space import SpaceMonitor
from primus.ui.samples import Samples

logger = logging.getLogger(__name__)

WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
"""Seconds: the admission wait histogram's buckets, from a free host to a day's queue."""
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
"""Seconds: the API's and the UI's latency buckets."""
READ_BATCH = 100
"""Keys one transaction of the first read gets (etcd allows 128 operations by default)."""
DATA_KEPT = 300.0
"""Seconds a stream's series stay after its application ended: scrapes then see its final
figures."""
UNCLASSED = "EXIT_CODE"
EXIT_CLASSES = frozenset({OOM_KILLED, "HUNG"})
"""The ``exit_class`` labels a failure counts under (any other: :data:`UNCLASSED`)."""
OTHER_ROLE = "(other)"
"""The ``role`` label of a plan whose role is none of its application's (a forged plan)."""
"""The exit class of a failure with none recorded: the trainer exited non-zero."""


@dataclass
class _App:
    queue: str
    roles: frozenset[str] = frozenset()
    """The roles of its spec and those people added (``roles/<role>/spec``, the server's
    keys): the only ``role`` labels its plans count under (its plans are its own processes'
    writes, which could name any number of roles)."""
    autosized: frozenset[str] = frozenset()
    """Those of its roles whose spec asks for ``autosize`` (``primus/server/autosize.py``)."""
    state: AppState | None = None
    """``None`` until its status is read."""
    finish_time: float | None = None
    am_id: str = ""


@dataclass
class _Plan:
    role: str
    state: ExecutorState
    attempt: int


@dataclass
class _Request:
    queue: str
    granted: bool
    seen: float


@dataclass
class Fold:
    """The deployment as the metrics need it, folded from etcd's keys one at a time.

    :meth:`put` and :meth:`delete` take keys in any order and at most once each revision:
    a value older than the one held (by ``mod_revision``) is ignored, so the first read and
    the watch opened before it may overlap.
    """

    prefix: str
    default_queue: str
    clock: Callable[[], float] = time.time
    apps: dict[str, _App] = field(default_factory=dict)
    plans: dict[tuple[str, str, int], _Plan] = field(default_factory=dict)
    streams: dict[tuple[str, str], StreamStats] = field(default_factory=dict)
    usage: dict[tuple[str, str, int], ExecutorUsage] = field(default_factory=dict)
    requests: dict[str, _Request] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    conditions: dict[str, str] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict)
    ends: Counter[tuple[str, str]] = field(default_factory=Counter)
    restarts: Counter[str] = field(default_factory=Counter)
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    leases_lost: Counter[str] = field(default_factory=Counter)
    takeovers: int = 0
    changes: dict[str, str] = field(default_factory=dict)
    """The change log's entries in etcd (``changes/<seq>``, the server's records): their
    kinds, by key."""
    waited: Callable[[str, float], None] = lambda queue, seconds: None
    """Called with each admission wait seen end: the queue and the seconds it lasted."""
    samples: Samples = field(default_factory=Samples)
    """The series the UI draws: streams' stats over time, admission waits per queue."""

    def wanted(self, key: str) -> bool:
        """Whether a key is one the metrics read (most of a deployment's keys, its data
        tasks, are not)."""
        return self._kind(key)[0] != ""

    def put(self, kv: KeyValue) -> None:
        """Fold the value ``kv`` holds."""
        if self.revisions.get(kv.key, 0) >= kv.mod_revision:
            return
        kind, app_id, rest = self._kind(kv.key)
        if not kind:
            return
        self.revisions[kv.key] = kv.mod_revision
        try:
            self._put(kind, app_id, rest, kv)
        except UnreadableRecordError as exc:
            logger.warning("metrics: %s", exc)

    def delete(self, key: str, revision: int) -> None:
        """Fold the deletion of ``key`` at ``revision``."""
        if self.revisions.get(key, 0) >= revision:
            return
        kind, app_id, rest = self._kind(key)
        if not kind:
            return
        self.revisions.pop(key, None)
        if kind == "status":
            self.apps.pop(app_id, None)
            self.samples.forget(app_id)
            for plan in [k for k in self.plans if k[0] == app_id]:
                del self.plans[plan]
            for stream in [k for k in self.streams if k[0] == app_id]:
                del self.streams[stream]
            for executor in [k for k in self.usage if k[0] == app_id]:
                del self.usage[executor]
        elif kind == "plan":
            role, _, index = rest.rpartition("/")
            self.plans.pop((app_id, role, int(index)), None)
        elif kind == "usage":
            role, _, index = rest.rpartition("/")
            self.usage.pop((app_id, role, int(index)), None)
        elif kind == "change":
            self.changes.pop(key, None)
        elif kind == "stats":
            self.streams.pop((app_id, rest), None)
        elif kind == "request":
            request = self.requests.pop(app_id, None)
            if request is not None and not request.granted:
                self._waited(request)
        elif kind == "reservation":
            self.reservations.pop(key, None)
        elif kind == "condition":
            self.conditions.pop(rest, None)

    def _kind(self, key: str) -> tuple[str, str, str]:
        """``(kind, app, rest)`` of a key the metrics read; ``kind`` empty for others."""
        apps, scheduler = f"{self.prefix}/apps/", f"{self.prefix}/scheduler/"
        if key.startswith(apps):
            app_id, _, rest = key[len(apps):].partition("/")
            if rest in ("status", "spec"):
                return rest, app_id, ""
            if rest == "am/leader":
                return "leader", app_id, ""
            parts = rest.split("/")
            if len(parts) == 3 and parts[0] == "roles" and parts[2] == "spec":
                return "role", app_id, parts[1]
            if len(parts) == 4 and parts[0] == "executors" and parts[2].isdigit() \
                    and parts[3] in ("plan", "usage"):
                return parts[3], app_id, f"{parts[1]}/{parts[2]}"
            if len(parts) == 3 and parts[0] == "data" and parts[2] == "stats":
                return "stats", app_id, parts[1]
            if len(parts) == 2 and parts[0] == "changes" and parts[1].isdigit():
                return "change", app_id, parts[1]
        elif key.startswith(scheduler):
            parts = key[len(scheduler):].split("/")
            if parts[0] == "conditions" and len(parts) == 2:
                return "condition", "", parts[1]
            if parts[0] == "apps" and len(parts) == 3 and parts[2] == "request":
                return "request", parts[1], ""
            if parts[0] == "apps" and len(parts) == 5 and parts[2] == "reservations":
                return "reservation", parts[1], ""
        return "", "", ""

    def _put(self, kind: str, app_id: str, rest: str, kv: KeyValue) -> None:
        if kind == "status":
            status = decode(AppStatus, kv.value, kv.key)
            app = self._app(app_id)
            if status.state.terminal and app.state is not None and not app.state.terminal:
                self.ends[(status.state.value, app.queue)] += 1
            app.state, app.finish_time = status.state, status.finish_time
        elif kind == "spec":
            app = self._app(app_id)
            app.queue = stored_queue(kv.value, self.default_queue)
            spec = submitted_spec(app_id, kv.value)
            app.roles = frozenset(role.name for role in spec.roles)
            app.autosized = frozenset(role.name for role in spec.roles if role.autosize)
        elif kind == "role":  # added at run time, by the server for a person
            app = self._app(app_id)
            app.roles = app.roles | {rest}
            if decode(RoleAdded, kv.value, kv.key).role.autosize:
                app.autosized = app.autosized | {rest}
        elif kind == "leader":
            leader = decode(AmLeader, kv.value, kv.key)
            app = self._app(app_id)
            if app.am_id and app.am_id != leader.am_id:
                self.takeovers += 1
            app.am_id = leader.am_id
        elif kind == "plan":
            self._plan(app_id, decode(ExecutorPlan, kv.value, kv.key))
        elif kind == "usage":
            role, _, index = rest.rpartition("/")
            self.usage[(app_id, role, int(index))] = decode(ExecutorUsage, kv.value, kv.key)
        elif kind == "change":
            change = decode(TopologyChange, kv.value, kv.key)
            self.changes[kv.key] = change.kind if change.kind in CHANGE_KINDS else "other"
        elif kind == "stats":
            stats = self.streams[(app_id, rest)] = decode(StreamStats, kv.value, kv.key)
            self.samples.stream_stats(app_id, rest, stats, self.clock())
        elif kind == "request":
            request = decode(AdmissionRequest, kv.value, kv.key)
            known = self.requests.get(app_id)
            queue = self._app(app_id).queue  # the spec's, not what the request says
            if known is None:
                known = self.requests[app_id] = _Request(queue, request.granted, self.clock())
            elif request.granted and not known.granted:
                self._waited(known)
            known.granted = request.granted
        elif kind == "reservation":
            self.reservations[kv.key] = decode(Reservation, kv.value, kv.key)
        elif kind == "condition":
            self.conditions[rest] = decode(HostCondition, kv.value, kv.key).state

    def _app(self, app_id: str) -> _App:
        return self.apps.setdefault(app_id, _App(self.default_queue))

    def _plan(self, app_id: str, plan: ExecutorPlan) -> None:
        key = (app_id, plan.role, plan.index)
        role = plan.role if plan.role in self._app(app_id).roles else OTHER_ROLE
        plan = plan.model_copy(update={"role": role, "exit_class": plan.exit_class
                                       if plan.exit_class in EXIT_CLASSES else ""})
        before = self.plans.get(key)
        self.plans[key] = _Plan(plan.role, plan.state, plan.attempt)
        if before is None:
            return
        if plan.attempt > before.attempt:
            self.restarts[plan.role] += plan.attempt - before.attempt
        if plan.state is before.state and plan.attempt == before.attempt:
            return
        if plan.state is ExecutorState.FAILED:
            self.failures[(plan.role, plan.exit_class or UNCLASSED)] += 1
        elif plan.state is ExecutorState.LOST:
            self.leases_lost[plan.role] += 1

    def _waited(self, request: _Request) -> None:
        now = self.clock()
        self.waited(request.queue, now - request.seen)
        self.samples.waited(request.queue, now - request.seen, now)
        request.granted = True

    def resync(self, kvs: Iterable[KeyValue], revision: int) -> None:
        """Fold a new read of every key at ``revision`` (after the watch fell behind a
        compaction): keys it lacks were deleted."""
        kvs = [kv for kv in kvs if self.wanted(kv.key)]
        for gone in set(self.revisions) - {kv.key for kv in kvs}:
            self.delete(gone, revision)
        for kv in kvs:
            self.put(kv)


class FoldCollector(Collector):
    """Renders a :class:`Fold` (and the inventory's capacity) at each scrape."""

    def __init__(self, fold: Fold, hosts: Sequence[Host],
                 archive_lag: Callable[[], float | None] = lambda: None) -> None:
        self.fold = fold
        self.hosts = hosts
        self.archive_lag = archive_lag

    def collect(self) -> Iterator[Metric]:
        fold = self.fold
        live = {app_id for app_id, app in fold.apps.items()
                if app.state is not None and not app.state.terminal}
        yield from _gauge("primus_applications",
                          "Applications in etcd (ended ones until their retention passes), by "
                          "state and queue.", ("state", "queue"),
                          Counter((a.state.value, a.queue) for a in fold.apps.values()
                                  if a.state is not None))
        yield from _counter("primus_application_ends",
                            "Applications seen ending, by final state and queue.",
                            ("state", "queue"), fold.ends)
        yield from _gauge("primus_executors",
                          "Executors of applications that have not ended, by state and role.",
                          ("state", "role"),
                          Counter((p.state.value, p.role) for (app_id, _, _), p in
                                  fold.plans.items() if app_id in live))
        yield from _counter("primus_executor_restarts",
                            "New attempts of executors (in place or elsewhere), by role.",
                            ("role",), {(role,): n for role, n in fold.restarts.items()})
        yield from _counter("primus_executor_failures",
                            "Executor attempts that failed, by role and exit class "
                            f"(OOM_KILLED, or {UNCLASSED}: a non-zero exit).",
                            ("role", "exit_class"), fold.failures)
        yield from _counter("primus_executor_leases_lost",
                            "Executor attempts whose lease expired (LOST), by role.", ("role",),
                            {(role,): n for role, n in fold.leases_lost.items()})
        yield from _gauge("primus_topology_changes",
                          "Changes of running applications people asked for, in the change "
                          "logs of the applications in etcd, by kind (scale, resize, add-role, "
                          "remove-role, add-source).", ("kind",),
                          Counter((kind,) for kind in fold.changes.values()))
        takeovers = CounterMetricFamily("primus_am_takeovers",
                                        "AMs that took over an application from another.")
        takeovers.add_metric([], fold.takeovers)
        yield takeovers
        yield from self._usage(fold, live)
        yield from self._admission(fold)
        yield from self._hosts(fold)
        now = fold.clock()
        yield from self._data(fold, live | {
            app_id for app_id, app in fold.apps.items()
            if app.state is not None and app.state.terminal
            and now - (app.finish_time or now) < DATA_KEPT})
        lag = self.archive_lag()
        if lag is not None:
            archive = GaugeMetricFamily(
                "primus_history_archive_lag_seconds",
                "How long the oldest ended application not yet archived has waited "
                "(0: none waits).")
            archive.add_metric([], lag)
            yield archive

    def _admission(self, fold: Fold) -> Iterator[Metric]:
        now = fold.clock()
        waiting = [r for r in fold.requests.values() if not r.granted]
        yield from _gauge("primus_admission_queue_length",
                          "Applications waiting for admission, by queue.", ("queue",),
                          Counter((r.queue,) for r in waiting))
        longest: dict[tuple[str, ...], float] = {}
        for request in waiting:
            longest[(request.queue,)] = max(longest.get((request.queue,), 0.0),
                                            now - request.seen)
        yield from _gauge("primus_admission_longest_wait_seconds",
                          "How long the application waiting longest for admission has waited, "
                          "by queue.", ("queue",), longest)

    def _hosts(self, fold: Fold) -> Iterator[Metric]:
        held: dict[str, list[float]] = {h.name: [0.0, 0.0, 0.0] for h in self.hosts}
        for reservation in fold.reservations.values():
            sums = held.setdefault(reservation.host, [0.0, 0.0, 0.0])
            sums[0] += reservation.cpu
            sums[1] += reservation.memory
            sums[2] += len(reservation.gpus)
        capacity = {h.name: (h.cpu, h.memory, h.gpus) for h in self.hosts}
        for position, (name, unit, what) in enumerate((("cpus", "", "CPUs"),
                                                       ("memory", "_bytes", "memory"),
                                                       ("gpus", "", "GPUs"))):
            yield from _gauge(f"primus_host_reserved_{name}{unit}",
                              f"{what} reserved for executors, by host.", ("host",),
                              {(host,): sums[position] for host, sums in held.items()})
            free = {(host,): declared - held[host][position]
                    for host, cap in capacity.items() if (declared := cap[position]) is not None}
            yield from _gauge(f"primus_host_free_{name}{unit}",
                              f"{what} the inventory declares less those reserved, by host "
                              "(hosts that declare them).", ("host",), free)
        yield from _gauge("primus_host_out_of_service",
                          "1 for a host drained or quarantined, by host and state.",
                          ("host", "state"),
                          {(host, state): 1 for host, state in fold.conditions.items()})

    def _usage(self, fold: Fold, live: set[str]) -> Iterator[Metric]:
        """Per application that has not ended and role: what its executors' trainers use
        against what they reserved (their latest figures, of their current attempts)."""
        sums: dict[str, dict[tuple[str, str], float]] = {
            name: collections.defaultdict(float) for name in (
                "cpu_used", "cpu_reserved", "memory_used", "memory_reserved")}
        for (app_id, role, index), usage in fold.usage.items():
            plan = fold.plans.get((app_id, role, index))
            if app_id not in live or plan is None or plan.attempt != usage.attempt or \
                    plan.state.terminal:
                continue
            label = (app_id, plan.role)  # the fold's role: one of the application's own
            sums["cpu_used"][label] += usage.cpu or 0.0
            sums["cpu_reserved"][label] += usage.cpu_reserved
            sums["memory_used"][label] += usage.memory or 0
            sums["memory_reserved"][label] += usage.memory_reserved
        for name, unit, what in (("cpu_used", "cores", "CPU its trainers used over their last "
                                                       "interval"),
                                 ("cpu_reserved", "cores", "CPU its executors reserved"),
                                 ("memory_used", "bytes", "memory its trainers hold"),
                                 ("memory_reserved", "bytes", "memory its executors reserved")):
            yield from _gauge(f"primus_role_{name}_{unit}",
                              f"Per application that has not ended and role: the {what} "
                              f"(executors running, as their executors last measured).",
                              ("app", "role"), dict(sums[name]))

    def _data(self, fold: Fold, shown: set[str]) -> Iterator[Metric]:
        streams = {key: stats for key, stats in fold.streams.items() if key[0] in shown}
        tasks = {}
        for (app_id, stream), stats in streams.items():
            tasks[(app_id, stream, "total")] = stats.tasks
            tasks[(app_id, stream, "done")] = stats.done
            tasks[(app_id, stream, "failed")] = stats.failed
        yield from _gauge("primus_data_tasks",
                          "Data tasks of the streams of applications that have not ended "
                          "(or ended in the last 5 minutes): written (total), done and "
                          "failed.", ("app", "stream", "state"),
                          tasks)
        yield from _counter("primus_data_records",
                            "Records read (of tasks done) from the streams of applications "
                            "that have not ended (or ended in the last 5 minutes).",
                            ("app", "stream"),
                            {key: s.records for key, s in streams.items()})
        yield from _counter("primus_data_bytes",
                            "Bytes read (of tasks done) from the streams of applications that "
                            "have not ended (or ended in the last 5 minutes); its rate() is "
                            "the feed's throughput.",
                            ("app", "stream"), {key: s.bytes for key, s in streams.items()})
        yield from _counter("primus_data_failed_records",
                            "Records the failed tasks of the same streams delivered before "
                            "they failed (with primus_data_records, what the trainers were "
                            "given once).", ("app", "stream"),
                            {key: s.failed_records for key, s in streams.items()})
        yield from _gauge("primus_data_lag",
                          "Messages no reader has finished in the partitions of an unbounded "
                          "Kafka stream: each partition's end minus its oldest unfinished "
                          "offset, summed.", ("app", "stream"),
                          {key: s.lag for key, s in streams.items() if s.lag is not None})


class EtcdSpaceCollector(Collector):
    """Renders the last reading of etcd's space (:class:`SpaceMonitor`) at each scrape: per
    member (a handful), its database's size, the part in use, its quota, and its alarms."""

    def __init__(self, monitor: SpaceMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        monitor = self.monitor
        answered = [m for m in monitor.members if not m.error]
        yield from _gauge("primus_etcd_member_answered",
                          "Whether the etcd member answered the last reading of its space "
                          "(1) or not (0).", ("member",),
                          {(m.member,): 0.0 if m.error else 1.0 for m in monitor.members})
        yield from _gauge("primus_etcd_db_size_bytes",
                          "Size of the etcd member's database file: what its quota limits.",
                          ("member",), {(m.member,): m.size for m in answered})
        yield from _gauge("primus_etcd_db_size_in_use_bytes",
                          "Bytes of the etcd member's database that hold data (the rest is "
                          "free pages, given back by defragmenting).", ("member",),
                          {(m.member,): m.in_use for m in answered})
        yield from _gauge("primus_etcd_quota_bytes",
                          "The etcd member's space quota (--quota-backend-bytes).",
                          ("member",), {(m.member,): m.quota for m in answered
                                        if m.quota is not None})
        yield from _gauge("primus_etcd_alarm",
                          "1 while the etcd member has raised the alarm (NOSPACE: out of "
                          "space, every write refused), else 0.", ("member", "alarm"),
                          {(m.member, alarm.value): float(alarm in m.alarms)
                           for m in monitor.members for alarm in Alarm})
        if monitor.read_at is not None:
            yield from _gauge("primus_etcd_space_read_timestamp_seconds",
                              "When etcd's space was last read (Unix time).", (),
                              {(): monitor.read_at})


LabelValues = TypeVar("LabelValues", bound=tuple[str, ...])
"""A sample's label values, in the order of its family's labels."""


def _gauge(name: str, documentation: str, labels: Sequence[str],
           values: Mapping[LabelValues, float]) -> Iterator[Metric]:
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    yield family


def _counter(name: str, documentation: str, labels: Sequence[str],
             values: Mapping[LabelValues, float]) -> Iterator[Metric]:
    family = CounterMetricFamily(name, documentation, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    yield family


class ServerMetrics:
    """A server's registry: the deployment's fold, and the API's and the UI's requests."""

    def __init__(self, store: Coordinator, prefix: str, default_queue: str,
                 hosts: Sequence[Host],
                 archive_lag: Callable[[], float | None] = lambda: None,
                 etcd_space: SpaceMonitor | None = None) -> None:
        self.store = store
        disable_created_metrics()  # no `_created` series: they double a scrape for nothing
        self.fold = Fold(prefix, default_queue)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(FoldCollector(self.fold, hosts, archive_lag))
        if etcd_space is not None:
            self.registry.register(EtcdSpaceCollector(etcd_space))
        self.api_requests = CounterMetric(
            "primus_api_requests", "API calls, by method and status code.",
            ["method", "code"], registry=self.registry)
        self.api_latency = Histogram(
            "primus_api_request_duration_seconds", "How long API calls took, by method.",
            ["method"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.ui_requests = CounterMetric(
            "primus_ui_requests", "Web UI requests, by route and HTTP status.",
            ["route", "status"], registry=self.registry)
        self.ui_latency = Histogram(
            "primus_ui_request_duration_seconds", "How long web UI requests took, by route "
            "(a live feed: until it closed).", ["route"], buckets=LATENCY_BUCKETS,
            registry=self.registry)
        self.admission_wait = Histogram(
            "primus_admission_wait_seconds", "How long admission requests waited to be "
            "granted (or withdrawn), by queue.", ["queue"], buckets=WAIT_BUCKETS,
            registry=self.registry)
        self.fold.waited = lambda queue, seconds: self.admission_wait.labels(queue).observe(
            seconds)
        self.ready = asyncio.Event()
        """Set once the first read is folded (tests await it)."""

    def api_call(self, method: str, code: str, seconds: float) -> None:
        """Count one API call of ``method`` (its short name) that ended with ``code``."""
        self.api_requests.labels(method, code).inc()
        self.api_latency.labels(method).observe(seconds)

    def ui_request(self, route: str, status: int, seconds: float) -> None:
        """Count one UI request of ``route`` (its pattern, ``/apps/{app}``)."""
        self.ui_requests.labels(route, str(status)).inc()
        self.ui_latency.labels(route).observe(seconds)

    async def run(self) -> None:
        """Keep the fold current until cancelled: read the keys it needs, then follow the
        watch opened before the read; read again after a resync or a failed watch."""
        prefix = f"{self.fold.prefix}/"
        while True:
            try:
                async with watching(self.store, prefix) as watch:
                    await self._read(prefix)
                    self.ready.set()
                    async for event in watch.after(0):
                        if isinstance(event, Resync):
                            self.fold.resync(event.snapshot.kvs, event.snapshot.revision)
                        elif event.type is EventType.PUT:
                            self.fold.put(KeyValue(event.key, event.value, create_revision=0,
                                                   mod_revision=event.revision, version=0))
                        else:
                            self.fold.delete(event.key, event.revision)
            except StoreError as exc:
                logger.warning("metrics: the watch of %s failed (%s); reading again", prefix,
                               exc)
                await asyncio.sleep(1.0)
            except Exception:
                logger.exception("metrics: folding failed; reading again")
                await asyncio.sleep(1.0)

    async def _read(self, prefix: str) -> None:
        keys = [k for k in await self.store.list_keys(prefix) if self.fold.wanted(k)]
        for start in range(0, len(keys), READ_BATCH):
            result = await self.store.txn([], [Get(k) for k in keys[start:start + READ_BATCH]])
            for read in result.reads:
                for kv in read:
                    self.fold.put(kv)


def metrics_route(metrics: ServerMetrics, auth: AuthConfig
                  ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The ``/metrics`` handler: the registry in Prometheus's text format, for a caller
    :func:`~primus.client.access.may_scrape` admits (``authorization: Bearer <token>``);
    401 for others."""

    async def scrape(request: web.Request) -> web.StreamResponse:
        if not may_scrape(auth, bearer_token(request.headers.get("Authorization"))):
            raise web.HTTPUnauthorized(
                text="metrics: present a scraper's or an admin's token "
                     "(authorization: Bearer <token>)",
                headers={"WWW-Authenticate": 'Bearer realm="primus metrics"'})
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return scrape


def measuring(metrics: ServerMetrics) -> Callable[..., Awaitable[web.StreamResponse]]:
    """An aiohttp middleware counting every request by route pattern and status."""

    @web.middleware
    async def measure(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
        started = time.perf_counter()
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "(none)"
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            metrics.ui_request(route, status, time.perf_counter() - started)

    return measure


def serve_metrics(app: web.Application, metrics: ServerMetrics, auth: AuthConfig
                  ) -> web.Application:
    """``app`` (the web UI's, before it starts) with every request counted and ``/metrics``
    served to scrapers."""
    app.middlewares.insert(0, measuring(metrics))
    app.router.add_get("/metrics", metrics_route(metrics, auth))
    return app


def metrics_app(metrics: ServerMetrics, auth: AuthConfig) -> web.Application:
    """An aiohttp application serving ``/metrics`` alone (``--metrics-listen``)."""
    return serve_metrics(web.Application(), metrics, auth)
