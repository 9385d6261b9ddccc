"""The application service: every operation on applications, as the CLI and the API call it.

An operation writes the application's desired state to etcd (the spec at submit, a kill request)
and starts AM processes; the AM that leads the application acts on it. Nothing here decides for
an application or runs an AM: the client depends on the store, the state layout, the launchers
and the configuration, never on ``primus.am``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import getpass
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from primus.client import queues
from primus.client import savepoints as savepoint_io
from primus.client.api import (
    AmGoneError,
    AppEndedError,
    AppNotFoundError,
    AppPage,
    AppReport,
    AppSummary,
    HangStacks,
    HostNotFoundError,
    LogLine,
    LogSource,
    NotStoppedError,
    Revived,
    parse_log_name,
)
from primus.client.commands import CommandService
from primus.client.hosts import load_hosts, owner_account, ready_hosts
from primus.client.identities import (
    app_identity,
    identity_grants,
    owner_settings,
)
from primus.client.queues import HostUsage, QueuedApp, publish_queues
from primus.client.topology import (
    Changed,
    ChangePlan,
    add_role_plan,
    add_source_plan,
    change_topology,
    remove_role_plan,
    resize_plan,
    scale_plan,
)
from primus.client.webhooks import app_key, ensure_job_key
from primus.config.inventory import Host, local_inventory
from primus.config.site import Settings
from primus.config.spec import JobSpec
from primus.errors import PrimusError
from primus.history.api import AppQuery, ArchivedSummary, History, stored_queue
from primus.launcher.api import LaunchError, LaunchRequest, StopRequest
from primus.launcher.layout import (
    agent_dir,
    am_log_path,
    app_secrets,
    claimed_am_log,
    executor_log_path,
    host_app_dir,
    host_env,
)
from primus.launcher.registry import Launchers
from primus.scheduler.admission import request_of
from primus.scheduler.placement import am_host, am_hosts
from primus.state.keys import AppKeys, SchedulerKeys, am_keeper_key, apps_prefix
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppOwner,
    AppStatus,
    DeliveryOutcome,
    HangReport,
    HostCondition,
    KillRequest,
    ProcessRef,
    Refusal,
    Savepoint,
    SuspendRequest,
    TrainerStacks,
    UnreadableRecordError,
    Waiting,
    advance,
    decode,
    decode_hosts,
    encode,
    encode_host,
    encode_hosts,
    owned_status,
)
from primus.state.states import AppState
from primus.state.view import AppView, read_app_keys
from primus.store.api import (
    Coordinator,
    Delete,
    EventType,
    Get,
    Put,
    Resync,
    StoreError,
    key_missing,
    key_unchanged_since,
)
from primus.store.recipes import key_values, watching

logger = logging.getLogger(__name__)

LOG_LINES_AHEAD = 1000
"""Lines :meth:`ApplicationService.read_logs` reads ahead of its consumer, at most."""
STOP_GRACE = 10.0
"""Seconds a process of an application failed by the server has to stop before SIGKILL."""


ID_DRAWS = 8
"""Ids drawn for one submission before it gives up (each taken already)."""


def new_app_id(name: str) -> str:
    """A unique, sortable, readable id: ``<name>-<UTC date-time>-<random>``."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{name}-{stamp}-{secrets.token_hex(2)}"


ARRAY_SUFFIX = "-array"
"""A job array's id is an application id's form with this after it (an application's id ends
in hex digits): ``primus kill``/``status`` tell the two apart by it."""


def is_array_id(text: str) -> bool:
    """Whether ``text`` names a job array rather than an application."""
    return text.endswith(ARRAY_SUFFIX)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """Hosts checked for one submission (as :func:`ready_hosts` found them)."""

    user: str
    account: str
    hosts: list[Host]
    candidates: list[Host]
    """The AM candidates' hosts."""
    unenforced: dict[str, str]
    """Hosts where resources are not enforced, and why."""


def _param_text(value: str | int | float | bool) -> str:
    """A job array's parameter as its environment variable holds it (JSON's spelling of
    true and false)."""
    return json.dumps(value) if isinstance(value, bool) else str(value)


class ApplicationService(CommandService):
    """Operations on the applications of one deployment (``settings.prefix``) in ``store``.

    One instance serves any number of operations, one after another or at once; it holds no
    state of its own beyond one launcher per kind of host.

    Args:
        store: The connected store.
        settings: The settings the store was opened with (pinned to the endpoint that answered:
            AM processes started here are given them).
        history: The history of finished applications: reads fall back to it for the
            applications whose keys are gone from etcd. ``None``: etcd alone.
    """

    def __init__(self, store: Coordinator, settings: Settings,
                 history: History | None = None) -> None:
        self.store = store
        self.settings = settings
        self.history = history
        self.admission: queues.AdmissionView | None = None
        """A server's own copy of admission's keys, where it follows them; else each look at
        the queue or the hosts reads them."""
        self._launchers = Launchers(settings)

    def _keys(self, app_id: str) -> AppKeys:
        return AppKeys(self.settings.prefix, app_id)

    async def close(self) -> None:
        """Let go of the connections to hosts this service opened (SSH keeps them a while)."""
        await self._launchers.close()

    async def await_keeper(self, timeout: float) -> bool:
        """Whether an AM keeper leads (``server/am-keeper``), waiting up to ``timeout`` seconds
        for one to be elected (a server just started campaigns at once)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout), contextlib.aclosing(key_values(
                    self.store, am_keeper_key(self.settings.prefix))) as values:
                async for value in values:
                    if value is not None:
                        return True
        return False

    async def submit(self, spec: JobSpec, hosts: Sequence[Host], user: str | None = None,
                     secrets: Mapping[str, str] | None = None,
                     files: Sequence[str] | None = None, park: bool = False) -> str:
        """Check the hosts, record the application, copy its files, start its AM; return its id.

        With ``park`` (a server's submit, or the embedded default's, whose own server starts
        its AMs), where an AM keeper runs and the job has no ``secret_env``, no AM is started:
        the application waits for admission as a record (``parked``) and the keeper starts its
        AM once admission grants it (docs/scheduling.md). A direct submit to a shared etcd
        starts its AM itself, with the submitter's credentials, as before.

        ``spec`` has passed :func:`~primus.client.preflight.check_job` with ``hosts``, the
        application's inventory; the hosts, checked here (:func:`ready_hosts`) before anything
        is written, are stored with the application so that any AM, on any host, places on
        the same hosts. ``user`` is who submits it (default: this process's account).
        ``secrets`` holds the values of the job's ``secret_env`` (default: this process's
        environment's); ``files`` the local copies of the job's ``files`` to copy to the hosts
        (default: ``spec.files`` themselves; an API server gives what the request carried).

        Raises:
            HostCheckError: a host cannot run the application; nothing was written.
            LaunchError: files could not be copied or the AM not started; the application is
                recorded FAILED, saying why.
        """
        if spec.array is not None:
            raise ValueError("a job with an array section is submitted by submit_array")
        user = user or getpass.getuser()
        restoring = None
        if spec.from_savepoint:  # read and checked before anything is written
            restoring = await savepoint_io.load(self.store, self.history, self.settings.prefix,
                                              spec.from_savepoint)
            spec = savepoint_io.restore_spec(spec, restoring, user)
        checked = await self._checked(spec, hosts, user)
        await publish_queues(self.store, self.settings)  # for the leader; after the checks
        return await self._record(spec, checked, secrets, files, park, restoring)

    async def submit_array(self, spec: JobSpec, hosts: Sequence[Host], user: str | None = None,
                           secrets: Mapping[str, str] | None = None,
                           files: Sequence[str] | None = None, park: bool = False
                           ) -> tuple[str, list[str]]:
        """Submit the members of ``spec``'s job array (its ``array`` section), each as an
        application of its own, as :meth:`submit` does one; return the array's id and the
        members' application ids, in index order. The hosts are checked once, before anything
        is written. Each member's trainers find their index, the array and their parameters
        in their environment (``PRIMUS_ARRAY_ID``, ``PRIMUS_ARRAY_INDEX``,
        ``PRIMUS_ARRAY_SIZE``, ``PRIMUS_ARRAY_PARAMS`` and ``PRIMUS_PARAM_<NAME>``); each
        member's owner record names its array and ``max_running``, which admission holds to.

        Raises:
            HostCheckError, LaunchError: as :meth:`submit`; the members submitted before
                stay submitted.
        """
        array = spec.array
        if array is None:
            raise ValueError("the job has no array section")
        user = user or getpass.getuser()
        checked = await self._checked(spec, hosts, user)
        await publish_queues(self.store, self.settings)
        array_id = new_app_id(spec.name) + ARRAY_SUFFIX
        members = array.members()
        app_ids = []
        for index, params in members:
            env = {**spec.env, "PRIMUS_ARRAY_ID": array_id, "PRIMUS_ARRAY_INDEX": str(index),
                   "PRIMUS_ARRAY_SIZE": str(len(members)),
                   "PRIMUS_ARRAY_PARAMS": json.dumps(params, sort_keys=True),
                   **{f"PRIMUS_PARAM_{name.upper()}": _param_text(value)
                      for name, value in params.items()}}
            member = spec.model_copy(update={"array": None, "env": env})
            app_ids.append(await self._record(
                member, checked, secrets, files, park, None,
                array=(array_id, index, len(members), array.max_running)))
        return array_id, app_ids

    async def _checked(self, spec: JobSpec, hosts: Sequence[Host], user: str) -> _Checked:
        """The hosts checked (:func:`ready_hosts`) for ``user``'s application of ``spec``,
        with its AM candidates' hosts."""
        account = owner_account(self.settings, user)
        candidates = am_hosts(spec, hosts)
        # An owner's AM hosts are checked with the others, as the owner, in the same round
        # (the AM host may be this one, outside the inventory): each with its home there.
        extra = [h for h in dict.fromkeys(candidates) if account and h not in hosts]
        unenforced: dict[str, str] = {}
        checked = await ready_hosts(self.settings, [*hosts, *extra], user, account, unenforced)
        if account:
            found = dict(zip([*hosts, *extra], checked, strict=True))
            candidates = [found[h] for h in candidates]
        return _Checked(user, account, checked[:len(hosts)], candidates, unenforced)

    async def _record(self, spec: JobSpec, checked: _Checked,
                      secrets: Mapping[str, str] | None, files: Sequence[str] | None,
                      park: bool, restoring: savepoint_io.Loaded | None,
                      array: tuple[str, int, int, int | None] | None = None) -> str:
        """Record the application of ``spec`` on ``checked`` hosts and start its AM (unless it
        parks); its id. ``array``: the array it is a member of, its index there, the array's
        size and its ``max_running``."""
        user, account, hosts, candidates, unenforced = (
            checked.user, checked.account, checked.hosts, checked.candidates, checked.unenforced)
        # With an AM keeper running, the application waits for admission as a record: its
        # request is written here and its AM started once admission grants it. Not a job with
        # secret_env: their values live only in the processes given them.
        parks = park and not spec.secret_env
        parked = parks and \
            await self.store.get(am_keeper_key(self.settings.prefix)) is not None
        array_id, array_index, array_size, max_running = array or ("", None, None, None)
        # An id is its name, the second and 16 random bits: members of an array submitted in
        # one second can draw the same one. The record is written only where none exists, so
        # a drawn id that is taken is drawn again.
        for _ in range(ID_DRAWS):
            app_id = new_app_id(spec.name)
            keys = self._keys(app_id)
            now = time.time()
            owner = AppOwner(app_id=app_id, name=spec.name, user=user, account=account,
                             queue=spec.queue or "", preemptible=spec.preemptible,
                             submit_host=socket.gethostname(), submit_time=now, parks=parks,
                             array=array_id, array_index=array_index, array_size=array_size,
                             array_max_running=max_running)
            status = owned_status(AppStatus(
                app_id=app_id, name=spec.name, state=AppState.QUEUED if parked else
                AppState.SUBMITTED, submit_time=now, parked=parked), owner)
            if await self._write_submission(keys, spec, owner, status, hosts, unenforced):
                break
        else:
            raise PrimusError(f"no free application id for {spec.name} after {ID_DRAWS} "
                              f"draws; submit again")
        try:
            if restoring is not None:  # before its AM starts, which reads the streams
                await savepoint_io.write_restore(self.store, keys, restoring)
            copied = spec.files if files is None else files
            if copied and spec.workdir is None:  # trainers run where the files are copied
                await asyncio.gather(*(
                    self._launchers.for_host(host, account).copy_files(
                        host, copied, str(host_app_dir(host, self.settings, app_id) / "work"))
                    for host in hosts))
            for number, host in enumerate([] if parked else candidates):
                await self._start_am(spec, owner, host, number, secrets, checked=True)
        except LaunchError as exc:
            # No AM runs, so nothing else will ever end the application: record why it failed.
            failed = advance(status, AppState.FAILED, finish_time=time.time(), exit_code=1,
                             diagnosis=f"not started: {exc}")
            await self.store.txn([key_missing(keys.leader)], [Put(keys.status, encode(failed))])
            raise
        return app_id

    async def _write_submission(self, keys: AppKeys, spec: JobSpec, owner: AppOwner,
                                status: AppStatus, hosts: Sequence[Host],
                                unenforced: Mapping[str, str]) -> bool:
        """Write the records of a new application (spec, owner, status, hosts, first event,
        desired counts, the hosts for admission, its request where it parks) where its id is
        free; whether it was."""
        app_id, account, parked = owner.app_id, owner.account, status.parked
        event = AppEvent(seq=0, time=status.submit_time, kind="submitted",
                         message=f"submitted by {status.user} on {status.submit_host}" +
                         (f"; runs as account {account}" if account else "") + "".join(
                             f"; resources not enforced on {name}: {why}"
                             for name, why in sorted(unenforced.items())) +
                         ("; waits for admission with no AM (an AM starts once it is "
                          "admitted)" if parked else ""))
        ops = [Put(keys.spec, spec.model_dump_json().encode()), Put(keys.owner, encode(owner)),
               Put(keys.status, encode(status)), Put(keys.hosts, encode_hosts(hosts)),
               Put(keys.event(0), encode(event))]
        ops += [Put(keys.desired(role.name), str(role.num).encode()) for role in spec.roles]
        # Admission learns the hosts from the submission: an AM writes no key of the
        # deployment's (its identity may not, on a shared deployment).
        ops += [Put(keys.scheduler.host(host.name), encode_host(host)) for host in hosts]
        if parked:
            ops.append(Put(keys.scheduler.request(app_id), encode(request_of(
                app_id, owner.user, spec, status.submit_time, [host.name for host in hosts],
                [(role.name, index) for role in spec.roles for index in range(role.num)]))))
        # A taken id's identity is its application's: checked before one is made, and one that
        # exists already (drawn at the same moment by another submission) is left alone.
        if account and (await self.store.get(keys.status) is not None
                        or not await self._make_identity(app_id)):
            return False
        return (await self.store.txn([key_missing(keys.status)], ops)).succeeded

    async def create_savepoint(self, app_id: str, user: str,
                               timeout: float = savepoint_io.TAKE_TIMEOUT) -> Savepoint:
        """Ask the application's AM for a savepoint of its data streams and wait until it is
        taken (``user`` asks); return it.

        Raises:
            AppNotFoundError, AppEndedError, SavepointError: as :func:`savepoint_io.request`
                and :func:`savepoint_io.wait_taken` say.
        """
        keys = self._keys(app_id)
        asked = await savepoint_io.request(self.store, keys, user)
        return await savepoint_io.wait_taken(self.store, keys, asked.number, timeout)

    async def savepoints(self, app_id: str) -> list[Savepoint]:
        """The application's savepoints, oldest first (from the history once its keys are
        gone)."""
        return await savepoint_io.listed(self.store, self.history, self._keys(app_id))

    async def _start_am(self, spec: JobSpec, owner: AppOwner, host: Host, number: int,
                        secrets: Mapping[str, str] | None = None, why: str = "",
                        checked: bool = False) -> str:
        """Start AM candidate ``number`` of the application on ``host``, detached, as its
        owner's account where it has one (with the application's etcd identity); return its
        log file. ``checked``: ``host`` was just checked as that account (its home resolved).

        Everything it acts on is the server's: ``owner`` (the record written at submit),
        ``spec`` and ``host`` as the server recorded them; nothing the application wrote.

        Candidate 0 logs to ``am.log``, the others to ``am-<number>.log``, in the application's
        directory on that host. The AM process stands as a candidate until the application has
        ended.
        """
        app_id = owner.app_id
        if owner.account and not checked:  # the host as the owner has it (its home there)
            (host,) = await ready_hosts(self.settings, [host], owner.user, owner.account)
        log_file = str(am_log_path(host, self.settings, app_id, number))
        settings = self.settings
        if owner.account:
            assert settings.accounts is not None  # owners' applications need accounts:
            settings = owner_settings(settings, app_identity(settings, app_id),
                                      settings.accounts)
        await self._launchers.for_host(host, owner.account).launch(LaunchRequest(
            host=host,
            argv=[host.python, "-m", "primus.am", "--app", app_id, "--log-file", log_file,
                  *(["--why", why] if why else [])],
            log_file=log_file, env=host_env(host, settings),
            secrets=app_secrets(settings, spec, os.environ if secrets is None else secrets)))
        return log_file

    async def fail_over_budget(self, app_id: str, why: str) -> None:
        """End an application of an owner that holds more of etcd than its budget
        (:mod:`primus.client.budgets`): its identity loses every write permission at once (so
        nothing it does can grow it further, or undo what follows), it is recorded FAILED with
        ``why`` as its diagnosis, and its AM and executors are stopped, as its owner, on their
        hosts. Repeating it finds the application ended and changes nothing.

        Raises:
            StoreError: etcd did not answer; the application may be partly stopped.
        """
        keys = self._keys(app_id)
        identity = app_identity(self.settings, app_id)
        logger.warning("[%s] %s: its identity loses write permission, and it fails", app_id, why)
        try:
            await self.store.grant(identity.name, [
                dataclasses.replace(grant, write=False)
                for grant in identity_grants(self.settings.prefix, app_id) if grant.write])
        except StoreError as exc:
            if "not found" not in str(exc):
                raise  # else its identity was removed at its end already
        report = await self.get_app(app_id)
        owner = _owner(report)
        status = report.view.status
        if not status.state.terminal:
            failed = status.model_copy(update={
                "state": AppState.FAILED, "finish_time": time.time(), "exit_code": 1,
                "diagnosis": why})  # from any state: the server's last word, not the AM's
            await self.store.put(keys.status, encode(failed))
        hosts = {host.name: host for host in report.hosts}
        stops: dict[str, list[StopRequest]] = {}
        for executor in report.view.executors.values():
            plan = executor.plan
            if plan is not None and plan.process is not None and plan.host in hosts \
                    and not plan.state.terminal:
                stops.setdefault(plan.host, []).append(StopRequest(plan.process, STOP_GRACE))
        if report.leader is not None:
            host, _ = self._am_log(report.view, report.leader, report.hosts)
            hosts.setdefault(host.name, host)
            stops.setdefault(host.name, []).append(StopRequest(ProcessRef(
                host=report.leader.host, pid=report.leader.pid,
                start_time=report.leader.start_time), STOP_GRACE))
        results = await asyncio.gather(*(
            self._launchers.for_host(hosts[name], owner.account).stop(
                hosts[name], requests,
                release=str(agent_dir(hosts[name], self.settings, app_id)))
            for name, requests in stops.items()), return_exceptions=True)
        for name, result in zip(stops, results, strict=True):
            if isinstance(result, BaseException):
                logger.warning("[%s] over budget: could not stop its processes on %s: %s",
                               app_id, name, result)

    async def _make_identity(self, app_id: str) -> bool:
        """Make the etcd identity of a new application of an owner (see
        :mod:`primus.client.identities`); ``False``, changing nothing, where one of that name
        exists (its id is another application's).

        Raises:
            PrimusError: Primus's identity may not manage etcd users; nothing was written.
        """
        identity = app_identity(self.settings, app_id)
        try:
            await self.store.add_identity(identity.name, identity.password,
                                          identity_grants(self.settings.prefix, app_id))
        except StoreError as exc:
            if "already exists" in str(exc):  # its role, made first: another's, not removed
                return False
            await self.store.remove_identity(identity.name)
            raise PrimusError(f"cannot make the etcd identity of {app_id}: {exc} (a shared "
                              f"deployment needs etcd auth on, and Primus's etcd user in "
                              f"role root: docs/operations.md)") from exc
        return True

    async def recover(self, app_id: str, host_name: str | None = None, why: str = "") -> str:
        """Start one more AM candidate for the application; return the host it runs on.

        It leads once no other AM does, rebuilds its view from etcd and adopts every executor
        whose lease is alive, without restarting any. Without ``host_name`` it runs on this
        host. ``why`` (who starts it, and why) goes into the event it records as it takes over.

        Raises:
            AppNotFoundError: there is no such application.
            AppEndedError: the application has ended and its AM exited.
            HostNotFoundError: ``host_name`` is not one of the application's hosts.
        """
        report = await self.get_app(app_id)
        if report.view.status.state.terminal and report.leader is None:
            raise AppEndedError(f"{app_id} has ended ({report.view.status.state.value}); "
                                f"nothing to recover")
        if host_name and host_name not in {h.name for h in report.hosts}:
            raise HostNotFoundError(f"host {host_name}: not one of the hosts of {app_id} "
                                    f"({', '.join(h.name for h in report.hosts)})")
        host = report.host(host_name) if host_name else local_inventory()[0]
        await self._start_am(report.view.spec, _owner(report), host,
                             number=int(time.time()), why=why)
        return host.name

    async def revive(self) -> list[Revived]:
        """Start an AM candidate, as :meth:`recover` does, for every application that has not
        ended and that no AM leads.

        For a process that has just started the embedded etcd again: the AMs may have gone
        with it (a reboot, a kill), and nothing else would ever notice. Their leader keys may
        have come back with it, since etcd restarts every lease's TTL when it starts: a key
        that names an AM process no longer running here counts as no AM, and the new
        candidate, campaigning, waits for that key to expire. An AM still running here stands
        again by itself and gets no second candidate.
        """
        revived = []
        for summary in await self.list_apps():
            if not summary.leaderless:
                continue
            app_id = summary.status.app_id
            try:
                await self.recover(app_id)
            except PrimusError as exc:
                revived.append(Revived(app_id, str(exc)))
            else:
                revived.append(Revived(app_id))
        return revived

    async def get_app(self, app_id: str, previous: AppReport | None = None) -> AppReport:
        """Read the application's keys at one revision.

        ``previous``, a report of this application read before, is returned again at the new
        revision when none of the keys it was built from changed since (nothing is decoded).

        An application whose keys are gone from etcd (its retention passed) is read from the
        history, when there is one: the report is then ``archived``, with no AM.

        Raises:
            AppNotFoundError: there is no such application.
            HistoryUnavailableError: its keys are gone and the history cannot be read.
        """
        keys = self._keys(app_id)
        snapshot = await read_app_keys(self.store, keys)
        archived = False
        if self.history is not None and not any(kv.key == keys.status for kv in snapshot.kvs):
            record = await self.history.get(app_id)
            if record is not None:
                snapshot, archived = record.snapshot, True
        by_key = {kv.key: kv for kv in snapshot.kvs}
        if keys.status not in by_key or keys.spec not in by_key:
            raise AppNotFoundError(f"no application {app_id!r} under {self.settings.prefix}")
        versions = tuple((kv.key, kv.mod_revision) for kv in snapshot.kvs)
        if previous is not None and previous.versions == versions:
            return dataclasses.replace(previous, revision=snapshot.revision)
        view = AppView.from_snapshot(keys, snapshot)
        leader = decode(AmLeader, by_key[keys.leader].value) if keys.leader in by_key else None
        events = [decode(AppEvent, kv.value) for kv in snapshot.kvs
                  if kv.key.startswith(keys.events)]
        noted = [notification_event(decode(DeliveryOutcome, kv.value, kv.key))
                 for kv in snapshot.kvs if kv.key.startswith(keys.notifications)]
        noted += [refusal_event(decode(Refusal, kv.value, kv.key))
                  for kv in snapshot.kvs if kv.key.startswith(keys.refusals)]
        if noted:
            events = sorted(events + noted, key=lambda event: event.time)
        hosts = (decode_hosts(by_key[keys.hosts].value) if keys.hosts in by_key
                 else local_inventory())
        am_log = str(self._am_log(view, leader, hosts)[1])
        return AppReport(view, leader, events, snapshot.revision, hosts, am_log, versions,
                         archived)

    def _am_log(self, view: AppView, leader: AmLeader | None, hosts: Sequence[Host]
                ) -> tuple[Host, PurePosixPath]:
        """Where the leading AM's log is: the path its leader record names if it is one of
        the paths an AM of this application logs to on one of its hosts (or this one, where
        ``primus recover`` starts one); else the first candidate's on the AM host."""
        claimed = claimed_am_log(leader.log_file, [*hosts, local_inventory()[0]], self.settings,
                                 view.keys.app_id) if leader and leader.log_file else None
        if claimed is None:
            host = am_host(view.spec, hosts)
            return host, am_log_path(host, self.settings, view.keys.app_id)
        return claimed

    async def list_apps(self, include_history: bool = False, array: str = "",
                        progress: bool = True) -> list[AppSummary]:
        """The status and AM of every application in etcd, newest first; with
        ``include_history``, also those archived (an application in both is listed once, as
        archived); with ``array``, the members of that job array only. ``progress``: with
        each one's progress, which reads each one's keys (without it, a look at every
        application reads two keys of each, and decodes no spec's data).

        Raises:
            HistoryUnavailableError: ``include_history`` and the history cannot be read.
        """
        live = [s for s in await self._live_apps() if not array or s.status.array == array]
        if progress:
            live = await self._with_progress(live)
        if not include_history or self.history is None:
            return live
        archived: list[AppSummary] = []
        read = 0
        while True:
            rows, total = await self.history.query(AppQuery(offset=read, limit=500))
            read += len(rows)
            archived += (s for s in map(_archived_summary, rows)
                         if not array or s.status.array == array)
            if not rows or read >= total:
                break
        shown = {summary.status.app_id for summary in archived}
        return sorted([*(s for s in live if s.status.app_id not in shown), *archived],
                      key=_listed, reverse=True)

    async def find_apps(self, query: AppQuery, include_history: bool = True,
                        progress: bool = True) -> AppPage:
        """One page of the applications ``query`` selects, those in etcd and those archived
        (an application in both counts once, as archived), newest submission first (ties by
        id, greatest first).

        The applications in etcd are few (they are deleted after the retention) and read
        whole; the history is read a page at a time. The merged list is paged exactly: the
        position of a history row is its index in the history plus the number of live rows
        listed before it, so the page starts ``k`` live rows and ``offset - k`` history rows
        in, ``k`` found by bisection.

        ``include_history`` false lists the applications in etcd only (what can still be
        listed while the history cannot be read). ``progress`` false leaves the progress of
        those in etcd out (it reads each one's keys).

        Raises:
            HistoryUnavailableError: the history cannot be read.
        """
        live = await self._live_apps()
        history = self.history if include_history else None
        if history is not None:
            ended = [s.status.app_id for s in live if s.status.state.terminal]
            archived = await history.contains(ended) if ended else set()
            live = [s for s in live if s.status.app_id not in archived]
        live = sorted((s for s in live if query.matches(s.status.state, s.status.user, s.queue,
                                                        s.status.name)),
                      key=_listed, reverse=True)
        with_progress = self._with_progress if progress else _as_they_are
        if history is None:
            return AppPage(await with_progress(
                live[query.offset:query.offset + query.limit]), len(live))
        low, high = 0, len(live)  # how many live rows come before position `offset`
        while low < high:
            middle = (low + high) // 2
            before = 0 if middle >= query.offset else (await history.query(dataclasses.replace(
                query, offset=0, limit=1, newer_than=_listed(live[middle]))))[1]
            if middle + before >= query.offset:
                high = middle
            else:
                low = middle + 1
        rows, total = await history.query(dataclasses.replace(query, offset=query.offset - low))
        archived_rows = [_archived_summary(row) for row in rows]
        # One archived after the look at what the history holds is in both: listed once.
        just_archived = {s.status.app_id for s in archived_rows}
        page = sorted([*(s for s in live[low:low + query.limit]
                         if s.status.app_id not in just_archived), *archived_rows],
                      key=_listed, reverse=True)[:query.limit]
        return AppPage(await with_progress(page), len(live) + total)

    async def _with_progress(self, summaries: list[AppSummary]) -> list[AppSummary]:
        """``summaries`` with the progress of those in etcd (read from each one's keys; an
        archived one has its own from the history)."""
        async def progress(summary: AppSummary) -> float | None:
            if summary.archived:
                return summary.progress
            if summary.status.state is AppState.SUCCEEDED:
                return 1.0
            try:
                return (await self.get_app(summary.status.app_id)).view.progress()
            except AppNotFoundError:  # archived and deleted since it was listed
                return None

        figures = await asyncio.gather(*(progress(s) for s in summaries))
        return [dataclasses.replace(s, progress=f) for s, f in zip(summaries, figures,
                                                                   strict=True)]

    async def _live_apps(self) -> list[AppSummary]:
        """The status, AM and queue of every application in etcd, newest first."""
        prefix = self.settings.prefix
        status_keys = [k for k in await self.store.list_keys(apps_prefix(prefix))
                       if k.endswith("/status") and k.count("/") == prefix.count("/") + 3]
        return sorted(await self.summaries([k.split("/")[-2] for k in status_keys]),
                      key=_listed, reverse=True)

    async def summaries(self, app_ids: Sequence[str]) -> list[AppSummary]:
        """The status, AM and queue of each of ``app_ids`` still in etcd, in that order (those
        gone, or whose records do not read, left out)."""
        prefix = self.settings.prefix
        summaries: list[AppSummary] = []
        scheduler = SchedulerKeys(prefix)
        default_queue = self.settings.queues.default_queue
        for start in range(0, len(app_ids), 25):  # etcd caps operations per transaction
            apps = [AppKeys(prefix, app_id) for app_id in app_ids[start:start + 25]]
            result = await self.store.txn([], [get for app in apps
                                               for get in (Get(app.status), Get(app.owner),
                                                           Get(app.leader),
                                                           Get(scheduler.waiting(app.app_id)),
                                                           Get(app.spec))])
            reads = result.reads
            for app, status, owner, leader, waiting, spec in zip(
                    apps, reads[::5], reads[1::5], reads[2::5], reads[3::5], reads[4::5],
                    strict=True):
                if not status:
                    continue
                try:
                    summaries.append(AppSummary(
                        owned_status(decode(AppStatus, status[0].value, app.status),
                                     decode(AppOwner, owner[0].value, app.owner)
                                     if owner else None),
                        decode(AmLeader, leader[0].value, app.leader) if leader else None,
                        decode(Waiting, waiting[0].value).reason if waiting else "",
                        stored_queue(spec[0].value, default_queue) if spec else default_queue))
                except UnreadableRecordError as exc:
                    # An application's own keys say what it wrote: one it broke is left out
                    # of the list, never the list broken for everyone.
                    logger.warning("[%s] not listed: %s", app.app_id, exc)
        return summaries

    async def wait_for_end(self, app_id: str,
                           on_change: Callable[[AppReport], None] | None = None,
                           am_start_timeout: float = 30.0, recheck: float = 5.0,
                           am_started: float | None = None,
                           until_suspended: bool = True) -> AppReport:
        """Wait until the application has ended (or, with ``until_suspended``, is suspended)
        and its AM has exited; return the final report.

        ``on_change`` is called with a fresh report after every batch of changes. An AM is
        given ``am_start_timeout`` seconds to lead from the submission, and from
        ``am_started``, when the caller started an AM candidate then.

        Raises:
            AppNotFoundError: there is no such application.
            AmGoneError: no AM leads the running application, or none came to lead within
                ``am_start_timeout`` seconds of being started; waiting longer would never end.
        """
        keys = self._keys(app_id)
        while True:
            async with watching(self.store, keys.root) as watch:
                report = await self.get_app(app_id)
                if on_change is not None:
                    on_change(report)
                status = report.view.status
                if (status.state.terminal or until_suspended and
                        status.state is AppState.SUSPENDED) and report.leader is None:
                    return report
                if report.leader is None and not status.state.terminal and \
                        not status.parked:  # parked: it waits with no AM, as it should
                    since = am_started
                    if status.state is AppState.SUBMITTED:
                        since = max(since or 0.0, status.submit_time)
                    if since is None:
                        raise AmGoneError(
                            f"{app_id} is {status.state.value} but its AM is gone; "
                            f"`primus recover {app_id}` starts one, "
                            f"`primus kill {app_id}` stops what is left")
                    if time.time() - since > am_start_timeout:
                        raise AmGoneError(f"the AM of {app_id} did not start within "
                                          f"{am_start_timeout:g}s; see its am.log")
                try:
                    async with asyncio.timeout(recheck):
                        async for event in watch.after(report.revision):
                            if isinstance(event, Resync) or \
                                    event.key in (keys.status, keys.leader) or (
                                        on_change is not None and event.type is EventType.PUT
                                        and _shown(keys, event.key)):
                                break
                except TimeoutError:
                    pass  # nothing changed: re-read, so that a silent AM death is noticed

    async def kill(self, app_id: str, reason: str, timeout: float,
                   outcome: AppState = AppState.KILLED) -> AppReport:
        """Ask the application to stop, and wait until it has; return the final report.

        The request, saying who asked, why and the ``outcome`` (KILLED, or SUCCEEDED: see
        :meth:`request_kill`), is written to the application's ``kill`` key; the AM that leads
        acts on it: it stops every executor and records the outcome. When no AM leads (it
        died), an AM candidate is started on this host, as :meth:`recover` does; it leads once
        the dead AM's key has expired, carries out the request and exits.

        Raises:
            AppNotFoundError: there is no such application.
            AppEndedError: SUCCEEDED was asked of an application that has ended or not started.
            NotStoppedError: it has not ended within ``timeout`` seconds.
        """
        report = await self.get_app(app_id)
        if outcome is AppState.SUCCEEDED:
            _check_may_succeed(app_id, report.view.status.state)
        if report.view.status.state.terminal and report.leader is None:
            return report
        request = KillRequest(time=time.time(), user=getpass.getuser(), reason=reason,
                              outcome=outcome)
        await self.store.txn([key_missing(self._keys(app_id).kill)],
                             [Put(self._keys(app_id).kill, encode(request))])
        return await self._wait_until_settled(app_id, report, timeout, "stopped",
                                              until_suspended=False)

    async def suspend(self, app_id: str, reason: str, user: str, timeout: float) -> AppReport:
        """Suspend a running application and wait until it is (see :meth:`request_suspend`):
        state SUSPENDED, nothing running, its AM gone.

        Raises:
            AppNotFoundError: there is no such application.
            AppEndedError: it is not running (ended, suspended, being killed, not started).
            NotStoppedError: it was not suspended within ``timeout`` seconds.
        """
        await self.request_suspend(app_id, reason, user)
        return await self._wait_until_settled(app_id, await self.get_app(app_id), timeout,
                                              "suspended")

    async def request_suspend(self, app_id: str, reason: str, user: str) -> int:
        """Ask for a running application to be suspended, without waiting; return the etcd
        revision of the request.

        Its AM stops every executor gracefully (trainers get ``stop_grace``; readers give
        their data tasks back at their last checkpoint), gives its hosts up and records
        SUSPENDED, then exits; ``primus resume`` queues it again. The request (who, why) is the
        application's ``suspend`` key, written only while it is QUEUED, STARTING, RUNNING or
        RESTARTING and no kill was asked; an AM failover in the middle loses nothing. When no
        AM leads, a candidate is started on this host, as for a kill.

        Raises:
            AppNotFoundError: there is no such application.
            AppEndedError: it is not running (ended, suspended, being killed, not started).
        """
        report = await self.get_app(app_id)
        keys = self._keys(app_id)
        status = await self.store.get(keys.status)
        state = decode(AppStatus, status.value).state if status else report.view.status.state
        if status is None or state not in (AppState.QUEUED, AppState.STARTING,
                                           AppState.RUNNING, AppState.RESTARTING) or \
                report.view.kill is not None:
            raise AppEndedError(
                f"{app_id} is {state.value}" + (", being killed" if report.view.kill else "") +
                "; only a running (or queued) application can be suspended")
        request = SuspendRequest(time=time.time(), user=user, reason=reason)
        written = await self.store.txn(
            [key_missing(keys.suspend), key_missing(keys.kill),
             key_unchanged_since(keys.status, status.mod_revision)],
            [Put(keys.suspend, encode(request))])
        if not written.succeeded:
            raise AppEndedError(f"{app_id} changed while it was being suspended (another "
                                "request, or its state moved on); look at it and ask again")
        if _needs_candidate(report):
            await self.start_candidate(report)
        return written.revision

    async def resume(self, app_id: str) -> int:
        """Resume a suspended application: its ``suspend`` request is withdrawn and an AM
        candidate started on this host, which queues it again (admission, then the executors
        start anew; each data stream goes on from its checkpoints). Returns the etcd revision
        of the withdrawal.

        Raises:
            AppNotFoundError: there is no such application.
            AppEndedError: it is not suspended.
        """
        report = await self.get_app(app_id)
        keys = self._keys(app_id)
        status = await self.store.get(keys.status)
        state = decode(AppStatus, status.value).state if status else report.view.status.state
        if status is None or state is not AppState.SUSPENDED:
            raise AppEndedError(f"{app_id} is {state.value}, not SUSPENDED; only a suspended "
                                "application can be resumed")
        withdrawn = await self.store.txn([key_unchanged_since(keys.status, status.mod_revision)],
                                         [Delete(keys.suspend)])
        if not withdrawn.succeeded:
            raise AppEndedError(f"{app_id} changed while it was being resumed; look at it and "
                                "ask again")
        await self.start_candidate(report)
        return withdrawn.revision

    async def _wait_until_settled(self, app_id: str, report: AppReport, timeout: float,
                                  what: str, until_suspended: bool = True) -> AppReport:
        """Wait until the application carried a request out and its AM exited, starting an AM
        candidate when none leads (none runs for a suspended application: a kill of one needs
        it); ``what`` names the outcome in the timeout's message.

        The candidate started here leads once a dead AM's key has expired. An AM that died
        (or lost its lease) before acting, or a candidate that did not come to lead, is
        replaced the same way until ``timeout``.
        """
        am_log = report.am_log
        candidate_started: float | None = None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if _needs_candidate(report):
                        am_log = await self.start_candidate(report)
                        candidate_started = time.time()
                    try:
                        return await self.wait_for_end(app_id, am_started=candidate_started,
                                                       until_suspended=until_suspended)
                    except AmGoneError:
                        report = await self.get_app(app_id)
        except TimeoutError as exc:
            raise NotStoppedError(f"{app_id} was not {what} within {timeout:g}s; its AM log is "
                                  f"{am_log}") from exc

    async def request_kill(self, app_id: str, reason: str, user: str,
                           outcome: AppState = AppState.KILLED) -> int:
        """Ask the application to stop, without waiting; return the etcd revision of the request
        (of the first one, kill or succeed, when one was made before: that one decides).

        ``outcome`` SUCCEEDED ends it as succeeded (``primus succeed``: someone decided it has
        done its work): it must be running (STARTING, RUNNING or RESTARTING). As :meth:`kill`
        does, an AM candidate is started on this host when no AM leads.

        Raises:
            AppNotFoundError: there is no such application.
            AppEndedError: it has ended already, or SUCCEEDED was asked before it started.
        """
        report = await self.get_app(app_id)
        if outcome is AppState.SUCCEEDED:  # its refusal says what may end as succeeded
            _check_may_succeed(app_id, report.view.status.state)
        if report.view.status.state.terminal:
            raise AppEndedError(f"{app_id} has ended ({report.view.status.state.value})")
        key = self._keys(app_id).kill
        request = KillRequest(time=time.time(), user=user, reason=reason, outcome=outcome)
        result = await self.store.txn([key_missing(key)], [Put(key, encode(request))], [Get(key)])
        first = result.reads[0] if not result.succeeded else ()
        revision = first[0].mod_revision if first else result.revision
        if _needs_candidate(report):
            await self.start_candidate(report)
        return revision

    # ---- Topology: desired state the AM reconciles (primus/client/topology.py) ----------------

    async def scale_role(self, app_id: str, role: str, executors: int, user: str) -> Changed:
        """Give ``role`` ``executors`` executors: the AM launches new indices, or stops the
        highest ones (gracefully; they count neither as failures nor against success).

        Raises:
            AppNotFoundError, RoleNotFoundError: no such application or role.
            SpecError: ``executors`` is out of range (the problem's source is ``executors``).
            AppEndedError: the application has ended or is stopping.
            PlacementError: the new executors fit on none of the application's hosts.
        """
        return await self._change(app_id, user, scale_plan(role, executors))

    async def resize_role(self, app_id: str, role: str, cpu: Any, memory: Any, user: str,
                          why: str = "") -> Changed:
        """Make each executor of ``role`` reserve ``cpu`` cores and ``memory`` (a size as a
        job file writes it; ``None``: as it is): admission grants it in place where the hosts
        have room (else it waits, saying why), and the executors apply it to their trainers
        without restarting them. ``why`` ends the change's message (autosize's reason).

        Raises:
            AppNotFoundError, RoleNotFoundError: no such application or role.
            SpecError: a value is refused as a job file's would be (source ``resize``).
            ChangeRefusedError: nothing changes, or the memory is below what a trainer of the
                role holds now.
            AppEndedError: the application has ended or is stopping.
            PlacementError: one executor of the new size fits on none of its hosts.
        """
        return await self._change(app_id, user, resize_plan(
            role, cpu, memory, self.settings.resources.memory_margin, why))

    async def add_role(self, app_id: str, role: Any, user: str, source: str = "role"
                       ) -> Changed:
        """Add ``role`` (one parsed entry of a job file's ``roles``) to the application.

        Raises:
            SpecError: the role is refused as a job file's would be, or its name is taken; the
                problems name ``source`` (the request field or the file the role came from).
            As :meth:`scale_role`, but for RoleNotFoundError.
        """
        return await self._change(app_id, user, add_role_plan(role, source))

    async def remove_role(self, app_id: str, role: str, user: str) -> Changed:
        """Remove ``role``: its executors are stopped and retired, its ranks leave the cluster.

        Raises:
            AppNotFoundError, RoleNotFoundError: no such application or role.
            AppEndedError: the application has ended or is stopping.
            ChangeRefusedError: it is the last role, or it alone reads a data stream that has
                not ended.
        """
        return await self._change(app_id, user, remove_role_plan(role))

    async def add_data_source(self, app_id: str, stream: str, source: Any, user: str
                              ) -> Changed:
        """Add ``source`` (one parsed entry of a stream's ``sources``, its path absolute) to
        a running stream: its files' tasks are created and read like the others.

        Raises:
            AppNotFoundError, StreamNotFoundError: no such application or stream.
            SpecError: the source is refused (source ``source``), or matches no file.
            AppEndedError: the application or the stream has ended.
        """
        from primus.data.sources import count_source_files  # noqa: PLC0415 - fsspec

        return await self._change(app_id, user,
                                  add_source_plan(stream, source, count_source_files))

    async def _change(self, app_id: str, user: str,
                      plan: Callable[[AppView, int], ChangePlan]) -> Changed:
        changed = await change_topology(self.store, self._keys(app_id), user, plan)
        report = await self.get_app(app_id)
        if report.leaderless:  # the change waits for an AM: start one, as kill does
            await self.start_candidate(report)
        return changed

    async def start_candidate(self, report: AppReport, host: Host | None = None,
                              why: str = "") -> str:
        """Start an AM candidate for the application on ``host`` (default: this host); return
        its log file. ``why`` goes into the event it records as it takes over. The AM of a
        parked application (its AM exited, or none was started at submit) logs to ``am.log``
        as the AM started at submit would; another candidate to a log of its own."""
        number = 0 if report.view.status.parked else int(time.time())
        return await self._start_am(report.view.spec, _owner(report),
                                    host or local_inventory()[0], number, why=why)

    async def stacks(self, app_id: str, hang: int = 0) -> HangStacks:
        """The stacks of the application's trainers at hang ``hang`` (0: the last), from etcd,
        else from the history.

        Raises:
            AppNotFoundError: there is no such application, or no such hang among those kept.
            HistoryUnavailableError: its keys are gone and the history cannot be read.
        """
        keys = self._keys(app_id)
        read = await self.store.txn([], [Get(keys.status), Get(keys.hang),
                                         Get(keys.stacks, prefix=True)])
        kvs = [kv for entries in read.reads for kv in entries]
        if not read.reads[0] and self.history is not None:
            record = await self.history.get(app_id)
            kvs = [] if record is None else [
                kv for kv in record.snapshot.kvs
                if kv.key in (keys.status, keys.hang) or kv.key.startswith(keys.stacks)]
        if not any(kv.key == keys.status for kv in kvs):
            raise AppNotFoundError(f"no application {app_id!r} under {self.settings.prefix}")
        last = next((decode(HangReport, kv.value, kv.key) for kv in kvs if kv.key == keys.hang),
                    None)
        taken = {keys.parse_stack(kv.key): decode(TrainerStacks, kv.value, kv.key)
                 for kv in kvs if kv.key.startswith(keys.stacks)}
        kept = sorted({key[0] for key in taken})
        wanted = hang or (last.id if last is not None else 0)
        if hang and hang not in kept:
            raise AppNotFoundError(f"{app_id}: no hang {hang} among those kept "
                                   f"({', '.join(map(str, kept)) or 'none'})")
        return HangStacks(last if last is not None and last.id == wanted else None,
                          [s for key, s in sorted(taken.items()) if key[0] == wanted], kept)

    def webhook_key(self, app_id: str) -> bytes:
        """The key the application's own webhooks are signed with (hex text): derived from the
        deployment's jobs' webhook key, which this process must be able to read (the server's
        account, or the local account on the embedded default)."""
        return app_key(ensure_job_key(self.settings), app_id)

    async def app_webhook_key(self, app_id: str) -> bytes:
        """:meth:`webhook_key`, of an application that exists.

        Raises:
            AppNotFoundError: there is no such application.
        """
        await self.get_app(app_id)
        return self.webhook_key(app_id)

    # ---- Admission and hosts, as this process's account sees them ---------------------------

    async def waiting_apps(self, limit: int = 0) -> tuple[list[QueuedApp], int]:
        """The first ``limit`` applications waiting for admission (0: every one), in
        admission order, and how many wait in all."""
        return await queues.waiting_apps(self.store, self.settings.prefix, self.admission,
                                         limit)

    async def host_usage(self, inventory: str | None) -> list[HostUsage]:
        """What each host admission knows holds, and what is free; with ``inventory`` (a file
        here), its hosts too."""
        hosts = load_hosts(inventory, self.settings) if inventory else []
        return await queues.host_usage(self.store, self.settings.prefix, hosts, self.admission)

    async def drain_host(self, host: str, reason: str) -> HostCondition:
        """Take ``host`` out of service, drained by this process's account; a host the site's
        inventory does not have is refused (:func:`~primus.client.queues.drain`)."""
        known = load_hosts(None, self.settings) if self.settings.inventory else []
        return await queues.drain(self.store, self.settings.prefix, host, reason,
                                  getpass.getuser(), known)

    async def resume_host(self, host: str) -> HostCondition | None:
        """Put ``host`` back in service; its condition before (``None``: it was in service)."""
        return await queues.resume(self.store, self.settings.prefix, host)

    async def log_sources(self, app_id: str, executor: str | None = None,
                          executor_log: bool = False) -> list[LogSource]:
        """The logs to read: of one executor (``<role>-<index>``), of the AM (``am``), or, without
        ``executor``, of every executor launched so far. ``executor_log`` chooses an executor's
        own log over its trainer's output.

        Raises:
            LogNameError: ``executor`` names no log (:func:`~primus.client.api.parse_log_name`).
            AppNotFoundError: there is no such application.
            PrimusError: no such executor, or none launched yet.
        """
        wanted = None if executor is None else parse_log_name(executor)
        report = await self.get_app(app_id)
        owner = _owner(report)
        sources: list[LogSource] = []
        if wanted == "am":
            where, am_log = self._am_log(report.view, report.leader, report.hosts)
            sources.append(LogSource("am", where, str(am_log), owner.account))
        hosts = {host.name: host for host in report.hosts}
        for (role, index), ex in sorted(report.view.executors.items()):
            if ex.plan is None or wanted not in (None, (role, index)):
                continue
            on = hosts.get(ex.plan.host)
            if on is None:  # the plan names a host the application was not given
                logger.warning("[%s] %s-%s: its plan names host %r, not one of its own; its "
                               "log is not read", app_id, role, index, ex.plan.host)
                continue
            path = executor_log_path(on, self.settings, app_id, role, index, executor_log)
            sources.append(LogSource(f"{role}-{index}", on, str(path), owner.account))
        if isinstance(wanted, tuple) and not sources:
            raise PrimusError(f"no executor '{wanted[0]}-{wanted[1]}' in {app_id}")
        if not sources:
            raise PrimusError(f"{app_id} has no executor launched yet")
        return sources

    async def logs(self, app_id: str, executor: str | None, executor_log: bool, follow: bool
                   ) -> AsyncIterator[tuple[LogLine, bool]]:
        """:meth:`read_logs` of :meth:`log_sources`, each line with whether several logs are
        read."""
        sources = await self.log_sources(app_id, executor, executor_log)
        async for line in self.read_logs(app_id, sources, follow):
            yield line, len(sources) > 1

    async def read_logs(self, app_id: str, sources: Sequence[LogSource],
                        follow: bool = False, offsets: Mapping[str, int] | None = None
                        ) -> AsyncGenerator[LogLine, None]:
        """The lines of ``sources``, each source's in order, the sources read at once and their
        lines interleaved as they arrive; a source named in ``offsets`` from that byte on
        (a line's :attr:`~primus.client.api.LogLine.end`, to resume after it).

        With ``follow``, new lines keep coming until the application has ended and its AM
        exited (or no AM is left to end it); without, each log is read once to its end.
        """
        ended = asyncio.Event()
        # Bounded, so that a pump reading a long log waits for the lines to be taken.
        lines: asyncio.Queue[LogLine | Exception | None] = asyncio.Queue(LOG_LINES_AHEAD)

        async def watch_end() -> None:
            try:
                if not (await self.get_app(app_id)).view.status.state.terminal:
                    await self.wait_for_end(app_id)
            except PrimusError:
                pass  # no AM will ever end it, or etcd is gone: nothing more will be written
            finally:
                ended.set()

        async def pump(source: LogSource) -> None:
            """Put the lines of ``source``, then ``None``; or the error that ended reading it."""
            pending = b""
            position = (offsets or {}).get(source.name, 0)
            keep_following = (lambda: not ended.is_set()) if follow else None
            launcher = self._launchers.for_host(source.host, source.account)
            try:
                async for chunk in launcher.read_log(source.host, source.path,
                                                     follow=keep_following, offset=position):
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        position += len(line) + 1
                        await lines.put(LogLine(source.name, line.decode(errors="replace"),
                                                position))
                if pending:
                    await lines.put(LogLine(source.name, pending.decode(errors="replace"),
                                            position + len(pending)))
            except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it
                await lines.put(exc)
            else:
                await lines.put(None)

        watcher = asyncio.ensure_future(watch_end()) if follow else None
        pumps = [asyncio.ensure_future(pump(source)) for source in sources]
        try:
            running = len(pumps)
            while running:
                item = await lines.get()
                if item is None:
                    running -= 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
        finally:
            for task in [*pumps, *([watcher] if watcher else [])]:
                task.cancel()


def notification_event(outcome: DeliveryOutcome) -> AppEvent:
    """A notification's outcome as an entry of the application's event log (kind
    ``notify``): to which webhooks it went (their URL without a query), in how many
    attempts, and why not where it did not."""
    said = []
    for target in outcome.targets:
        parts = urlsplit(target.url)
        where = f"{parts.scheme}://{parts.netloc}{parts.path}"
        said.append(f"delivered to {where}" if target.delivered else
                    f"not delivered to {where}: {target.error}")
    return AppEvent(seq=-1, time=outcome.time, kind="notify",
                    message=f"{outcome.kind}: " + "; ".join(said) +
                    f" ({outcome.attempts} attempt{'' if outcome.attempts == 1 else 's'})")


def refusal_event(refusal: Refusal) -> AppEvent:
    """A refusal of one of the application's values as an entry of its event log (kind
    ``refused``)."""
    return AppEvent(seq=-1, time=refusal.time, kind="refused",
                    message=f"the {refusal.reader} did not believe {refusal.key}: {refusal.why}")


def _owner(report: AppReport) -> AppOwner:
    """The server's record of the application, which every privileged action takes the
    owner and the account from.

    Raises:
        PrimusError: the application has none (recorded by a Primus from before it existed):
            nothing is started or read for it with Primus's privileges.
    """
    if report.view.owner is None:
        raise PrimusError(f"{report.view.keys.app_id} has no owner record "
                          f"({report.view.keys.owner}): it was recorded by an earlier Primus, "
                          "and nothing is started or read for it as anyone")
    return report.view.owner


async def _as_they_are(summaries: list[AppSummary]) -> list[AppSummary]:
    return summaries


def _listed(summary: AppSummary) -> tuple[float, str]:
    """Where an application is listed: by submit time, then id (both descending)."""
    return summary.status.submit_time, summary.status.app_id


def _archived_summary(app: ArchivedSummary) -> AppSummary:
    return AppSummary(app.status, None, queue=app.queue, archived=True, progress=app.progress)


def _shown(keys: AppKeys, key: str) -> bool:
    """Whether a change of ``key`` changes what ``submit --wait`` shows: a stream's data tasks
    (claims, checkpoints) change many times a second and show only through its stats."""
    return not keys.is_task_key(key)


def _check_may_succeed(app_id: str, state: AppState) -> None:
    """An application ends as succeeded only while it runs (STARTING, RUNNING, RESTARTING)."""
    if state.terminal:
        raise AppEndedError(f"{app_id} has ended ({state.value}); only a running application "
                            "can end as succeeded")
    if state in (AppState.SUBMITTED, AppState.QUEUED):
        raise AppEndedError(f"{app_id} is {state.value}, not running; only a running "
                            "application can end as succeeded (`primus kill` stops it)")


def _needs_candidate(report: AppReport) -> bool:
    """Whether a request the AM carries out needs an AM candidate started here: no AM leads
    the running application, or it is suspended or parked (none runs for it then) and none
    leads."""
    return report.leaderless or report.leader is None and (
        report.view.status.state is AppState.SUSPENDED or report.view.status.parked)
