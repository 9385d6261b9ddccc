"""The application master: leads one application, applies :func:`decide`'s actions, records all.

Loop: observe (watch events, launcher probes) → decide (pure) → act (launcher, guarded etcd
writes) → record (plan/status/events). Every write carries the leadership guard, so an AM that
lost leadership can change nothing.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from primus import process_secrets
from primus.am.background import Background
from primus.am.hangs import HandleHang
from primus.am.reconcile import (
    Action,
    Finish,
    Launch,
    NoteLag,
    NoteOutOfService,
    Park,
    RecordChanges,
    RequestHosts,
    Requeue,
    SetAppState,
    StartAttempt,
    StopExecutor,
    Suspend,
    UpdateExecutor,
    WriteCluster,
    apply_update,
    decide,
    past_attempts,
)
from primus.am.streams import LAST_COMMIT_WAIT, DataStreams
from primus.config.inventory import Host, as_owner, local_inventory
from primus.config.site import Settings
from primus.errors import PrimusError
from primus.launcher.api import Launcher, LaunchError, LaunchRequest, StopRequest
from primus.launcher.layout import agent_dir, app_secrets, executor_log_path, host_env
from primus.launcher.registry import Launchers
from primus.processes import start_time_of
from primus.scheduler.gpu_topology import nics_of, numa_nodes_of
from primus.state.keys import EVENT_LOG_SIZE, AppKeys, am_keeper_key
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppOwner,
    ExecutorPlan,
    ProcessRef,
    Record,
    advance,
    decode,
    decode_hosts,
    decode_spec,
    encode,
)
from primus.state.states import AppState, ExecutorState
from primus.state.view import AppView, ExecutorId, ExecutorView, read_app_keys
from primus.store.api import (
    Compare,
    Coordinator,
    Delete,
    Leadership,
    Lease,
    LeaseKeeper,
    Op,
    Put,
    Resync,
    Snapshot,
    StoreError,
    StoreUnavailableError,
    WatchEvent,
    key_missing,
    key_unchanged_since,
    while_leased,
)
from primus.store.recipes import Watch, campaign, watching

logger = logging.getLogger(__name__)

TICK_SECONDS = 1.0
PROBE_AFTER = 5.0  # seconds an executor may take to register before its process is checked
STAND_AGAIN_WAIT_MAX = 2.0  # seconds at most between tries to reach etcd after a lost lease
STAND_AGAIN_GIVE_UP = 900.0
"""Seconds of etcd out of reach after which an AM that lost its lease exits: its executors
fenced themselves long before, and the next ``primus`` command or the server's AM keeper
starts an AM once etcd answers again (an AM waiting for an etcd that is gone for good, the
test suite's after it ended, would never exit)."""


class EtcdGoneError(PrimusError):
    """etcd stayed out of reach past :data:`STAND_AGAIN_GIVE_UP` after the AM lost its lease."""


class LeadershipLostError(PrimusError):
    """This AM is no longer the leader; it must stop acting at once."""


@dataclass(frozen=True)
class AdmissionResync:
    """The watch of the application's admission keys was re-listed (after a compaction)."""

    snapshot: Snapshot


async def stand_until_ended(store: Coordinator, settings: Settings, app_id: str,
                            log_file: str = "", why: str = "") -> AppState:
    """Be an AM candidate of the application until it has ended, or waits for admission with
    no AM (parked: QUEUED is returned then); return how it ended.

    Each candidacy is one :class:`ApplicationMaster` run: a new lease, a campaign, and, once it
    leads, a view rebuilt from one read. A candidacy that loses its lease (etcd out of reach
    past the TTL, this process paused) or its leadership stops at once, having written nothing
    after the loss (every write carries its leadership guard). Then this process waits until
    etcd answers, retrying with exponential backoff of at most ``STAND_AGAIN_WAIT_MAX``
    seconds, and stands again: it leads if no other AM does, and ``decide`` then settles the
    executors whose leases went meanwhile; otherwise it waits as a standby. ``why`` says who
    started this process and why, in the event it records when it takes over.
    """
    keys = AppKeys(settings.prefix, app_id)
    log = f"[{app_id}/am]"
    while True:
        try:
            return await ApplicationMaster(store, settings, app_id, log_file, why).run()
        except (LeadershipLostError, StoreUnavailableError) as exc:
            logger.warning("%s %s; standing as a candidate again once etcd answers", log, exc)
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(StoreUnavailableError),
            wait=wait_exponential(multiplier=0.25, max=STAND_AGAIN_WAIT_MAX),
            stop=stop_after_delay(STAND_AGAIN_GIVE_UP), reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    await store.get(keys.status)
        except StoreUnavailableError as exc:
            raise EtcdGoneError(f"etcd out of reach for {STAND_AGAIN_GIVE_UP:g}s ({exc}); "
                                f"this AM exits, and an AM is started again by the next "
                                f"primus command once etcd answers") from exc
        logger.info("%s etcd answers; campaigning again", log)


RELEASE_TIMEOUT = 10.0
"""How long the AM gives a host to let its agent go when the application ends."""

KEEPER_LOOK = 5.0
"""Seconds between two looks of an AM at whether an AM keeper runs (:meth:`~ApplicationMaster.
_may_park`)."""


class ApplicationMaster:
    """Leads one application until it ends (one candidacy). See the module docstring."""

    def __init__(self, store: Coordinator, settings: Settings, app_id: str,
                 log_file: str = "", why: str = "") -> None:
        self.store = store
        self.log_file = log_file
        self.why = why
        """Who started this AM and why (``started by server vm:812: no AM led``), if told."""
        self.settings = settings
        self.keys = AppKeys(settings.prefix, app_id)
        self.hosts: list[Host] = []
        self.am_id = f"{socket.gethostname()}:{os.getpid()}"
        self._launchers = Launchers(settings)
        self._wakeup: asyncio.Queue[WatchEvent | Resync | AdmissionResync | None] = \
            asyncio.Queue()
        self._leadership: Leadership | None = None
        self._lost = asyncio.Event()  # the AM lease keeper's "lost" event, once it runs
        self._background = Background()
        self._probed: dict[ExecutorId, float] = {}  # when each executor was last probed
        # The application's data streams, once its spec is read (none until then).
        self._streams = DataStreams(store, self.keys, [], self._data_write, self._wake)
        self._parks = False  # its owner record says it may wait with no AM
        self._keeper_looked = -KEEPER_LOOK  # when _may_park last looked for an AM keeper
        self._keeper_runs = False
        self._launched_on: set[str] = set()  # hosts this AM launched executors on
        self._released: set[str] = set()  # hosts whose agent a last stop let go
        self._log = f"[{app_id}/am]"

    def _launcher(self, host: Host) -> Launcher:
        return self._launchers.for_host(host)

    def _host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    async def run(self) -> AppState:
        """Campaign for leadership, then reconcile until the application has ended (or is
        parked)."""
        spec_kv = await self.store.get(self.keys.spec)
        if spec_kv is None:
            raise PrimusError(f"application {self.keys.app_id} does not exist")
        hosts_kv = await self.store.get(self.keys.hosts)
        self.hosts = decode_hosts(hosts_kv.value) if hosts_kv else local_inventory()
        owner_kv = await self.store.get(self.keys.owner)
        owner = decode(AppOwner, owner_kv.value, self.keys.owner) if owner_kv else None
        self._parks = owner is not None and owner.parks
        if owner is not None and owner.account:
            # An owner's AM reaches the hosts as its owner, with the owner's own SSH keys:
            # the inventory's SSH user and key are Primus's, which it never holds.
            self.hosts = [as_owner(host) for host in self.hosts]
        ttl = decode_spec(self.keys.app_id, spec_kv.value).policy.heartbeat_ttl
        lease = await self.store.grant_lease(ttl)
        keeper = LeaseKeeper(self.store, lease,
                             on_lost=[lambda _why: self._wakeup.put_nowait(None)])
        self._lost = keeper.lost
        keeper.start()
        try:
            me = AmLeader(am_id=self.am_id, host=socket.gethostname(), pid=os.getpid(),
                          since=time.time(), log_file=self.log_file,
                          start_time=start_time_of(os.getpid()))
            self._leadership = await self._campaign(encode(me), lease, keeper)
            logger.info("%s leading as %s", self._log, self.am_id)
            # Both watches are open before the read: nothing written after it is missed.
            async with watching(self.store, self.keys.root) as changes, \
                    watching(self.store, self.keys.scheduler.app(self.keys.app_id)) as admission:
                snapshot = await read_app_keys(self.store, self.keys)
                return await self._lead(me, lease, keeper, snapshot,
                                        changes.after(snapshot.revision),
                                        admission.after(snapshot.revision))
        except StoreError as exc:
            if not keeper.lost.is_set():
                raise
            # Whatever failed, the lease is gone: what this AM was doing no longer counts.
            raise LeadershipLostError(f"leadership lost: the AM lease expired ({exc})") from exc
        finally:
            await keeper.stop(revoke=True)
            await self._launchers.close()

    async def _lead(self, me: AmLeader, lease: Lease, keeper: LeaseKeeper, snapshot: Snapshot,
                    changes: Watch, admission: Watch) -> AppState:
        """Lead from ``snapshot`` on, with the application's keys' ``changes`` and its keys of
        admission (``scheduler/apps/<app>/``) folded in, until the application has ended."""
        view = AppView.from_snapshot(self.keys, snapshot)
        for executor in view.executors.values():  # an earlier AM may have died launching
            executor.inherited_plan = executor.plan is not None and \
                executor.plan.state is ExecutorState.PLANNED
        watcher = asyncio.ensure_future(self._follow(changes))
        admitting = asyncio.ensure_future(self._follow(admission, AdmissionResync))
        if not view.status.state.terminal:
            # `since` says when this AM began to lead, not when it began to campaign; an
            # application parked is led again (by an AM the keeper started once admitted).
            leading = me.model_copy(update={"since": time.time()})
            unparked = view.status.model_copy(update={"parked": False})
            writes: list[Op] = [Put(self.keys.leader, encode(leading), lease.id)]
            if view.status.parked:
                writes.append(Put(self.keys.status, encode(unparked)))
            await self._write(writes, (
                "am", f"AM {self.am_id} leads" + (
                    f" (took over{'; ' + self.why if self.why else ''})"
                    if view.status.state is not AppState.SUBMITTED else ""),
                None), view)
            view.status = unparked
        # The watch's events under data/ are folded in from here on, also while the
        # ledgers load (each holds them until it has read its stream).
        self._streams = DataStreams(self.store, self.keys, view.spec.data, self._data_write,
                                    self._wake)
        self._streams.resize(view.spec.roles)  # before any event: who reads the streams
        if view.spec.data and not view.status.state.terminal:
            self._background.spawn(self._streams.run(view))
        try:
            await self._reconcile(view, keeper)
        finally:
            watcher.cancel()
            admitting.cancel()
            self._streams.cancel()
            stopping = self._background.cancel()
            # Their reads end before the watches close (a watch being read cannot close).
            await asyncio.gather(watcher, admitting, return_exceptions=True)
            if stopping:  # the data streams' offset mirrors commit where they ended
                await asyncio.wait(stopping, timeout=LAST_COMMIT_WAIT + 1)
        return view.status.state

    async def _campaign(self, me: bytes, lease: Lease, keeper: LeaseKeeper) -> Leadership:
        """Campaign until this AM leads; give up once its lease is lost.

        A standby's lease lapses too when etcd is out of reach past the TTL; campaigning on
        with it would win a leadership that expires at once.
        """
        campaigning = asyncio.ensure_future(campaign(self.store, self.keys.leader, me, lease))
        lost = asyncio.ensure_future(keeper.lost.wait())
        try:
            done, _ = await asyncio.wait((campaigning, lost),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not campaigning.done():
                campaigning.cancel()
        if campaigning not in done:
            raise LeadershipLostError("leadership lost: the AM lease expired while campaigning")
        return campaigning.result()

    async def _follow(self, watch: Watch,
                      resync: type[AdmissionResync] | None = None) -> None:
        """A watch's events into the loop (its resyncs as ``resync`` where given)."""
        async for event in watch:
            self._wakeup.put_nowait(resync(event.snapshot) if resync is not None and
                                    isinstance(event, Resync) else event)

    async def _reconcile(self, view: AppView, keeper: LeaseKeeper) -> None:
        while True:
            if keeper.lost.is_set():
                raise LeadershipLostError("leadership lost: the AM lease expired")
            while not self._wakeup.empty():  # decide on everything already observed
                self._fold(view, self._wakeup.get_nowait())
            await self._observe(view)
            self._streams.observe_facts(view)
            self._streams.observe_read_rates(view, time.time())
            view.may_park = await self._may_park(view)
            actions = decide(view, time.time(), self.hosts)
            # In order, except that a run of launches goes out together and the stops of a
            # pass go out in the background: each one request per host.
            self._stop_in_background(view, [a for a in actions if isinstance(a, StopExecutor)])
            for is_launch, run in itertools.groupby(
                    (a for a in actions if not isinstance(a, StopExecutor)),
                    lambda a: isinstance(a, Launch)):
                if is_launch:
                    await self._launch_batch(view, [a for a in run if isinstance(a, Launch)])
                else:
                    for action in run:
                        await self._act(view, action)
            if view.status.parked:  # its request waits as a record: nothing left to do
                logger.info("%s parked: this AM exits", self._log)
                return
            if any(isinstance(a, Finish | Suspend) for a in actions):
                await self._release_hosts(view)
                # What it held and asked for goes with it (every reservation, the request).
                await self._write([Delete(self.keys.scheduler.app(self.keys.app_id),
                                          prefix=True)], None, view)
                logger.info("%s application ended %s", self._log, view.status.state.value)
                return
            if actions:
                continue
            due = [ex.plan.restart_at for ex in view.executors.values()
                   if ex.plan is not None and ex.plan.restart_at is not None]
            timeout = max(0.0, min([TICK_SECONDS, *(t - time.time() for t in due)]))
            try:
                async with asyncio.timeout(timeout):
                    item = await self._wakeup.get()
                    while self._inert(item):  # folded, but no reason to decide again
                        self._fold(view, item)
                        item = await self._wakeup.get()
            except TimeoutError:
                continue
            while True:
                self._fold(view, item)
                if self._wakeup.empty():
                    break
                item = self._wakeup.get_nowait()

    def _inert(self, item: WatchEvent | Resync | AdmissionResync | None) -> bool:
        """Whether ``item`` is an event nothing the AM decides depends on: an executor's usage
        figures (every executor writes them every ``resources.usage_interval``)."""
        return isinstance(item, WatchEvent) and item.key.endswith("/usage") and \
            item.key.startswith(self.keys.executors)

    def _fold(self, view: AppView, item: WatchEvent | Resync | AdmissionResync | None) -> None:
        if isinstance(item, AdmissionResync):
            view.reservations, view.request, view.waiting, view.eviction = {}, None, None, None
            for kv in item.snapshot.kvs:
                view.observe_put(kv.key, kv.value, kv.mod_revision)
            return
        if isinstance(item, WatchEvent) and self._streams.observe(item):
            return
        if isinstance(item, Resync):
            self._streams.reload()
            fresh = AppView.from_snapshot(view.keys, item.snapshot)
            fresh.reservations, fresh.request, fresh.waiting, fresh.preemption = (
                view.reservations, view.request, view.waiting, view.preemption)
            fresh.eviction, fresh.noted_out_of_service = view.eviction, view.noted_out_of_service
            fresh.noted_lag = view.noted_lag
            fresh.stream_facts = view.stream_facts
            fresh.placed_elsewhere = view.placed_elsewhere
            fresh.request_revision = view.request_revision
            for key, executor in view.executors.items():
                if key in fresh.executors:
                    fresh.executors[key].process_exited = executor.process_exited
                    fresh.executors[key].stop_requested = executor.stop_requested
                    fresh.executors[key].stop_finished = executor.stop_finished
                    fresh.executors[key].launch_error = executor.launch_error
                    fresh.executors[key].inherited_plan = executor.inherited_plan
            view.__dict__.update(fresh.__dict__)
            self._streams.extend(view.spec.data)
            self._streams.resize(view.spec.roles)
        elif item is not None:
            view.observe(item)
            if item.key.startswith(self.keys.sources):
                self._streams.extend(view.spec.data)
            if item.key.startswith(self.keys.roles):
                self._streams.resize(view.spec.roles)

    async def _observe(self, view: AppView) -> None:
        """Observations beyond the watch: dead unregistered processes, results of gone leases.

        An executor that has not registered PROBE_AFTER seconds after its launch is probed,
        at most once every PROBE_AFTER seconds (over SSH a probe costs a connection), all
        probes at once.

        A live key that vanished is confirmed by reading the result key: the executor writes
        its result and deletes its live key in one transaction, but the two watch events may
        be folded separately, and a missing result must not be mistaken for a lost executor.
        """
        now = time.time()
        lookups = []
        probes: dict[str, list[ExecutorView]] = collections.defaultdict(list)
        for key, executor in view.executors.items():
            plan = executor.plan
            if plan is None or plan.state.terminal or executor.live is not None or (
                    executor.result is not None and executor.result.attempt == plan.attempt):
                continue
            if plan.state in (ExecutorState.REGISTERED, ExecutorState.RUNNING):
                lookups.append(self._confirm_result(view, key))
            elif plan.state is ExecutorState.LAUNCHED and plan.process and \
                    not executor.process_exited and plan.launch_time is not None and \
                    now - max(plan.launch_time, self._probed.get(key, 0.0)) >= PROBE_AFTER:
                self._probed[key] = now
                probes[plan.host].append(executor)
        lookups += [self._probe(self._host(host), executors) for host, executors in probes.items()]
        await asyncio.gather(*lookups)

    async def _confirm_result(self, view: AppView, key: ExecutorId) -> None:
        found = await self.store.get(self.keys.executor(*key, "result"))
        if found is not None:
            view.observe_put(found.key, found.value)

    async def _probe(self, host: Host, executors: Sequence[ExecutorView]) -> None:
        """Ask ``host`` in one call whether each of its launched executors still runs."""
        processes = [ex.plan.process for ex in executors if ex.plan and ex.plan.process]
        try:
            alive = await self._launcher(host).alive(host, processes)
        except LaunchError as exc:  # an unreachable host is the lease's business, not ours
            logger.warning("%s probing %s: %s", self._log, host.name, exc)
            return
        for executor, running in zip(executors, alive, strict=True):
            executor.process_exited = not running

    # --- background work ----------------------------------------------------------------------

    def _wake(self) -> None:
        self._wakeup.put_nowait(None)

    async def _data_write(self, ops: list[Op], compares: list[Compare]) -> bool:
        """The data side's write: applied only if ``compares`` hold and this AM still leads."""
        assert self._leadership is not None  # streams start once leading
        guard = self._leadership.guard()
        result = await while_leased(self._lost, lambda: self.store.txn([guard, *compares], ops))
        return result.succeeded

    # --- acting -------------------------------------------------------------------------------

    async def _write(self, ops: list[Op], event: tuple[str, str, ExecutorId | None] | None,
                     view: AppView) -> None:
        """Apply ``ops`` (plus an event-log entry) in one transaction guarded by leadership."""
        assert self._leadership is not None  # set before reconciling starts
        if event is not None:
            ops = [*ops, *self._event_ops(event, view)]
            view.next_event_seq += 1
        guard = self._leadership.guard()
        result = await while_leased(self._lost, lambda: self.store.txn([guard], ops))
        if not result.succeeded:
            raise LeadershipLostError("leadership lost: another AM leads; nothing was written")

    def _event_ops(self, event: tuple[str, str, ExecutorId | None], view: AppView
                   ) -> list[Op]:
        """The writes of ``event`` (kind, message, executor) as the next entry of the event log
        (``view.next_event_seq``), the oldest kept going when the log is full."""
        kind, message, executor = event
        seq = view.next_event_seq
        record = AppEvent(seq=seq, time=time.time(), kind=kind, message=message,
                          role=executor[0] if executor else None,
                          index=executor[1] if executor else None)
        ops: list[Op] = [Put(self.keys.event(seq), encode(record))]
        if seq >= EVENT_LOG_SIZE:
            ops.append(Delete(self.keys.event(seq - EVENT_LOG_SIZE)))
        return ops

    async def _put(self, key: str, record: Record, view: AppView,
                   event: tuple[str, str, ExecutorId | None] | None) -> None:
        await self._write([Put(key, encode(record))], event, view)
        view.observe_put(key, encode(record))

    async def _act(self, view: AppView, action: Action) -> None:
        if isinstance(action, SetAppState):
            await self._set_app_state(view, action)
        elif isinstance(action, UpdateExecutor):
            await self._update_executor(view, action)
        elif isinstance(action, StartAttempt):
            await self._start_attempt(view, action)
        elif isinstance(action, WriteCluster):
            await self._put(self.keys.cluster, action.cluster, view,
                            ("cluster", self._cluster_message(view, action), None))
        elif isinstance(action, RecordChanges):
            await self._record_changes(view, action)
        elif isinstance(action, RequestHosts):
            await self._request_hosts(view, action)
        elif isinstance(action, Requeue):
            await self._requeue(view, action)
        elif isinstance(action, Suspend):
            await self._suspend(view)
        elif isinstance(action, HandleHang):
            await self._handle_hang(view, action)
        elif isinstance(action, NoteOutOfService):
            said = "; ".join(f"{host} out of service: {why}" for host, why in action.hosts)
            await self._write([], ("hosts", f"{said}; its executors there "
                                   f"{'move to other hosts' if action.moved else 'run on'}",
                                   None), view)
            view.noted_out_of_service |= set(action.hosts)
        elif isinstance(action, Park):
            await self._park(view)
        elif isinstance(action, NoteLag):
            over = action.lag > action.max_lag
            await self._write([], ("data", (
                f"data stream {action.stream}: lag {action.lag} messages, past max_lag "
                f"{action.max_lag}; nothing is skipped, the readers go on" if over else
                f"data stream {action.stream}: lag {action.lag} messages, back within max_lag "
                f"{action.max_lag}"), None), view)
            (view.noted_lag.add if over else view.noted_lag.discard)(action.stream)

    async def _park(self, view: AppView) -> None:
        """Record the application parked, if its request is still as read (not granted
        meanwhile); the AM exits once it is (:meth:`_reconcile`)."""
        assert self._leadership is not None and view.request is not None
        status = view.status.model_copy(update={"parked": True})
        message = (f"waiting for admission with no AM: its request for "
                   f"{len(view.request.executors)} executors is a record, and an AM starts "
                   f"once it is granted")
        ops = [Put(self.keys.status, encode(status)),
               *self._event_ops(("parked", message, None), view)]
        guard = self._leadership.guard()
        unchanged = key_unchanged_since(self.keys.scheduler.request(self.keys.app_id),
                                        view.request_revision)
        result = await while_leased(self._lost, lambda: self.store.txn([guard, unchanged], ops))
        if result.succeeded:  # else granted, or deposed: the next pass says which
            logger.info("%s %s", self._log, message)
            view.status = status
            view.next_event_seq += 1

    async def _may_park(self, view: AppView) -> bool:
        """Whether the application may wait for admission with no AM: its owner record says
        so (submitted through a server, or on the embedded default), its job carries no
        ``secret_env`` (its values live only in the processes that were given them) and an
        AM keeper runs to start an AM once it is admitted (looked at every
        :data:`KEEPER_LOOK` seconds)."""
        if view.spec.secret_env or not self._parks:
            return False
        now = time.monotonic()
        if now - self._keeper_looked >= KEEPER_LOOK:
            self._keeper_looked = now
            try:
                self._keeper_runs = await self.store.get(
                    am_keeper_key(self.settings.prefix)) is not None
            except StoreUnavailableError:
                raise
            except StoreError as exc:  # an identity made before it could read the key
                logger.info("%s cannot tell whether an AM keeper runs (%s): waits with its "
                            "application", self._log, exc)
                self._keeper_runs = False
        return self._keeper_runs

    async def _handle_hang(self, view: AppView, action: HandleHang) -> None:
        """Record the hang handled with its summary (and whether its trainers restart), in
        the event log too; forget the stacks of the hangs before the last few."""
        report = action.report.model_copy(update={
            "handled": True, "summary": action.summary, "restart": action.restart})
        then = ("its trainers stop as HUNG and restart as the role's restart_policy says"
                if action.restart else "the application fails" if action.fail else
                "reported")
        await self._write([Put(self.keys.hang, encode(report)),
                           *(Delete(f"{self.keys.stacks}{hang:06d}/", prefix=True)
                             for hang in action.forget)],
                          ("hang", f"hang {report.id}: {action.summary}; {then} (stacks: "
                                   f"primus logs {self.keys.app_id} --stacks)",
                           (report.role, report.index)), view)
        view.observe_put(self.keys.hang, encode(report))
        view.stacks = {key: stacks for key, stacks in view.stacks.items()
                       if key[0] not in action.forget}

    def _stop_in_background(self, view: AppView, stops: Sequence[StopExecutor]) -> None:
        """One stop call per host, in the background. Where the application is giving its
        hosts up (``last``) and the call stops every executor left on its host, the host's
        agent goes in the same call: :meth:`_release_hosts` then has nothing left to do there.
        """
        by_host: dict[str, list[ExecutorId]] = collections.defaultdict(list)
        last: set[str] = set()
        for action in stops:
            view.executors[action.executor].stop_requested = True
            plan = view.executors[action.executor].plan
            if plan is None or plan.process is None:
                view.executors[action.executor].stop_finished = True
            else:
                by_host[plan.host].append(action.executor)
                if action.last:
                    last.add(plan.host)
        for host, executors in by_host.items():
            others = [ex for key, ex in view.executors.items()
                      if key not in executors and ex.plan is not None and ex.plan.host == host]
            release = host in last and all(
                ex.stop_requested or ex.plan is None or ex.plan.process is None
                or ex.plan.state.terminal for ex in others)
            self._background.spawn(self._stop(view, self._host(host), executors, release))

    @staticmethod
    def _cluster_message(view: AppView, action: WriteCluster) -> str:
        cluster = action.cluster
        if view.cluster is None:
            return f"every executor registered; cluster spec version {cluster.version} written"
        old = view.cluster
        changed = [f"{m.role}-{m.index} attempt {m.attempt} at {m.address}"
                   f"{':' + str(m.ports[0]) if m.ports else ''}"
                   for m in cluster.members if m != old.member(m.role, m.index)]
        left = [f"{m.role}-{m.index} left" for m in old.members
                if cluster.member(m.role, m.index) is None]
        return (f"cluster spec version {cluster.version} written ({len(cluster.members)} "
                f"member{'' if len(cluster.members) == 1 else 's'}): "
                f"{', '.join(changed + left) or 'ranks renumbered'}")

    async def _request_hosts(self, view: AppView, action: RequestHosts) -> None:
        """Write (or withdraw) the application's request for hosts, giving up the reservations
        of ``action.release``, on condition that the request is as this AM last saw it: the
        admission leader may have granted it meanwhile, and the next decision must see that
        first. (Admission knows the application's hosts from its submission.)"""
        assert self._leadership is not None  # set before reconciling starts
        sched = self.keys.scheduler
        app_id = self.keys.app_id
        key = sched.request(app_id)
        ops: list[Op] = [Delete(sched.reservation(app_id, *executor))
                         for executor in action.release]
        ops.append(Delete(key) if action.request is None else Put(key, encode(action.request)))
        seen = key_missing(key) if view.request is None else \
            key_unchanged_since(key, view.request_revision)
        guard = self._leadership.guard()
        result = await while_leased(self._lost, lambda: self.store.txn([guard, seen], ops))
        if not result.succeeded:
            guarded = await self.store.txn([guard], [])
            if not guarded.succeeded:
                raise LeadershipLostError("leadership lost: another AM leads; nothing was "
                                          "written")
            return  # the request moved on: the watch brings it, then decide again
        for executor in action.release:
            view.reservations.pop(executor, None)
            if action.request is not None and executor in action.request.executors:
                view.placed_elsewhere.add(executor)
        if action.request is None:
            view.request = None
        else:
            view.request, view.request_revision = action.request, result.revision
            waiting = ", ".join(f"{role}-{index}" for role, index in action.request.executors)
            logger.info("%s asked admission for hosts for %s", self._log, waiting)

    async def _record_changes(self, view: AppView, action: RecordChanges) -> None:
        """One event per topology change, with who asked; the status says which were."""
        for change in action.changes:
            status = view.status.model_copy(update={"changes_recorded": change.seq})
            message = f"change {change.seq} by {change.user}: {change.message}"
            logger.info("%s %s", self._log, message)
            await self._put(self.keys.status, status, view, ("change", message, None))

    async def _set_app_state(self, view: AppView, action: SetAppState) -> None:
        status = view.status
        now = time.time()
        update: dict[str, object] = {}
        if action.state is AppState.STARTING:
            update["start_time"] = now
        if action.state.terminal:
            update.update(finish_time=now, exit_code=action.exit_code,
                          diagnosis=action.diagnosis)
        message = f"application {action.state.value}" + (
            f": {action.diagnosis}" if action.diagnosis else "")
        logger.info("%s %s", self._log, message)
        await self._put(self.keys.status, advance(status, action.state, **update), view,
                        ("app-state", message, None))

    async def _start_attempt(self, view: AppView, action: StartAttempt) -> None:
        status = advance(view.status, AppState.STARTING, attempt=action.attempt,
                         start_time=time.time())
        message = f"application attempt {action.attempt} starting"
        logger.info("%s %s", self._log, message)
        await self._write([Put(self.keys.status, encode(status)), Delete(self.keys.cluster)],
                          ("app-attempt", message, None), view)
        view.status = status
        view.cluster = None

    async def _requeue(self, view: AppView, action: Requeue) -> None:
        """Preempted, every executor stopped: queue again (the attempt goes on)."""
        await self._set_aside(view, AppState.QUEUED, "preempted", (
            f"preempted to admit {action.by}: every executor stopped, hosts given up; queued "
            f"again (attempt {view.status.attempt} goes on)"))

    async def _suspend(self, view: AppView) -> None:
        """Suspended, every executor stopped: record SUSPENDED; the AM exits after this."""
        request = view.suspend
        await self._set_aside(view, AppState.SUSPENDED, "suspended", (
            f"suspended by {request.user if request else 'a user'}"
            f"{': ' + request.reason if request and request.reason else ''}: every executor "
            f"stopped, hosts given up; `primus resume` queues it again"))

    async def _set_aside(self, view: AppView, state: AppState, kind: str, message: str) -> None:
        """Every executor stopped: move to ``state``, dropping the cluster spec and giving every
        reservation and the request for hosts up, in one transaction; the attempt, its counts
        and the data progress stay as they are."""
        status = advance(view.status, state, start_time=None)
        logger.info("%s %s", self._log, message)
        await self._write([Put(self.keys.status, encode(status)), Delete(self.keys.cluster),
                           Delete(self.keys.scheduler.app(self.keys.app_id), prefix=True)],
                          (kind, message, None), view)
        view.status, view.cluster = status, None
        view.reservations, view.request, view.preemption, view.waiting = {}, None, None, None

    async def _update_executor(self, view: AppView, action: UpdateExecutor) -> None:
        plan = view.executors[action.executor].plan
        assert plan is not None  # decide only updates planned executors
        live = view.executors[action.executor].live
        trainer = live.trainer if live is not None and live.attempt == plan.attempt else None
        updated = apply_update(plan, action, time.time(), trainer)
        name = f"{action.executor[0]}-{action.executor[1]}"
        message = f"{name} {action.state.value}" + (
            f" (exit {action.exit_code})" if action.exit_code is not None else "") + (
            f": {action.diagnosis}" if action.diagnosis else "") + (
            f"; {action.decision}" if action.decision else "")
        logger.info("%s %s", self._log, message)
        key = self.keys.executor(*action.executor, "plan")
        ops: list[Op] = [Put(key, encode(updated))]
        if action.release:
            ops.append(Delete(self.keys.scheduler.reservation(self.keys.app_id,
                                                              *action.executor)))
            view.reservations.pop(action.executor, None)
        if action.blacklist is not None:
            ops.append(Put(self.keys.blacklist, encode(action.blacklist)))
        await self._write(ops, ("executor-state", message, action.executor), view)
        view.observe_put(key, encode(updated))
        if action.blacklist is not None:
            view.blacklist = action.blacklist
        if action.blacklisted:
            logger.info("%s %s", self._log, action.blacklisted)
            await self._write([], ("blacklist", action.blacklisted, None), view)

    async def _launch_batch(self, view: AppView, launches: Sequence[Launch]) -> None:
        """Plan every executor of the batch, then start them: one request per host, all
        hosts at once. On each host the agent paces their start-ups (``launcher/agent.py``)."""
        plans = await asyncio.gather(*(self._plan(view, action) for action in launches))
        by_host: dict[str, list[ExecutorPlan]] = collections.defaultdict(list)
        for plan in plans:
            if plan.state is ExecutorState.PLANNED:
                by_host[plan.host].append(plan)
        await asyncio.gather(*(self._start_executors(view, self._host(host), host_plans)
                               for host, host_plans in by_host.items()))

    async def _plan(self, view: AppView, action: Launch) -> ExecutorPlan:
        """Record the executor's new attempt: PLANNED, or LAUNCHED for a restart in place
        (the waiting executor watches its plan and starts the new attempt itself)."""
        role, index = action.executor
        host = action.host
        executor = view.executors[action.executor]
        previous = executor.plan
        executor.process_exited = executor.stop_requested = executor.stop_finished = False
        executor.launch_error = ""
        executor.inherited_plan = False
        view.placed_elsewhere.discard(action.executor)
        self._probed.pop(action.executor, None)
        app_id = self.keys.app_id
        plan = ExecutorPlan(role=role, index=index, attempt=action.attempt, host=host.name,
                            address=host.address, state=ExecutorState.PLANNED,
                            log_file=str(executor_log_path(host, self.settings, app_id, role,
                                                           index)),
                            executor_log=str(executor_log_path(host, self.settings, app_id,
                                                               role, index, executor_log=True)),
                            app_attempt=view.status.attempt, failures=action.failures,
                            restarts=action.restarts,
                            gpus=list(action.gpus),
                            numa_nodes=numa_nodes_of(view.spec.role(role), host, action.gpus),
                            nics=nics_of(host, action.gpus),
                            past=past_attempts(previous, action.attempt))
        name = f"{role}-{index}"
        if action.in_place and previous is not None:
            plan = advance(plan, ExecutorState.LAUNCHED, launch_time=time.time(),
                           process=previous.process)
            message = f"{name} attempt {action.attempt} restarting in place on {host.name}"
        elif action.again:
            message = (f"{name} attempt {action.attempt} launched again on {host.name}: an "
                       f"earlier AM planned it and may have ended before launching it")
        elif action.restarts:
            message = f"{name} attempt {action.attempt} placed on {host.name}"
        else:
            message = f"{name} placed on {host.name}"
        await self._put(self.keys.executor(role, index, "plan"), plan, view,
                        ("placed", message, action.executor))
        return plan

    async def _start_executors(self, view: AppView, host: Host,
                               plans: Sequence[ExecutorPlan]) -> None:
        requests = [LaunchRequest(
            host=host, log_file=plan.executor_log, env=host_env(host, self.settings),
            secrets=app_secrets(self.settings, view.spec, process_secrets.received()),
            argv=[host.python, "-m", "primus.executor", "--app", self.keys.app_id,
                  "--role", plan.role, "--index", str(plan.index),
                  "--attempt", str(plan.attempt), "--host", host.name,
                  "--address", host.address, "--log-file", plan.log_file])
            for plan in plans]
        try:
            results: list[ProcessRef | LaunchError] = await self._launcher(
                host).launch_executors(host, str(agent_dir(host, self.settings,
                                                           self.keys.app_id)), requests)
        except LaunchError as exc:
            results = [exc] * len(plans)
        now = time.time()
        self._launched_on.add(host.name)
        for plan, result in zip(plans, results, strict=True):
            if isinstance(result, LaunchError):  # an observation: decide applies the policy
                view.executors[(plan.role, plan.index)].launch_error = f"launch failed: {result}"
                self._wakeup.put_nowait(None)
                continue
            launched = advance(plan, ExecutorState.LAUNCHED, launch_time=now, process=result)
            await self._put(self.keys.executor(plan.role, plan.index, "plan"), launched, view,
                            None)

    async def _stop(self, view: AppView, host: Host, executors: Sequence[ExecutorId],
                    release: bool = False) -> None:
        """Stop the executors' process groups on ``host`` in one call, then their trainers'
        (and with ``release``, let the host's agent go), and wake the loop."""
        grace = view.spec.policy.stop_grace
        requests = []
        for executor in executors:
            ex = view.executors[executor]
            if ex.plan is not None and ex.plan.process is not None:
                trainer = ex.live.trainer if ex.live else ex.plan.trainer
                # The executor stops its trainer within the grace; allow it that plus a margin.
                requests.append(StopRequest(ex.plan.process, grace + 5.0,
                                            [trainer] if trainer else []))
        try:
            if requests:
                await self._launcher(host).stop(host, requests, str(
                    agent_dir(host, self.settings, self.keys.app_id)) if release else None)
                if release:
                    self._released.add(host.name)
        except LaunchError as exc:
            logger.warning("%s stopping executors on %s: %s", self._log, host.name, exc)
        for executor in executors:
            view.executors[executor].stop_finished = True
        self._wakeup.put_nowait(None)

    async def _release_hosts(self, view: AppView) -> None:
        """The application ended: each host it used lets its agent go and its connection
        close, all at once; a host that cannot be reached now is left to its agent's idle
        exit."""
        used = (self._launched_on | {ex.plan.host for ex in view.executors.values()
                                     if ex.plan is not None}) - self._released

        async def release(host: Host) -> None:
            try:
                async with asyncio.timeout(RELEASE_TIMEOUT):
                    await self._launcher(host).release(host, str(
                        agent_dir(host, self.settings, self.keys.app_id)))
            except (LaunchError, TimeoutError) as exc:
                logger.warning("%s releasing %s: %s", self._log, host.name, exc)

        await asyncio.gather(*(release(h) for h in self.hosts if h.name in used))
