"""Operations on applications, as the CLI (and scripts) use them: submit, read, list, kill."""

from __future__ import annotations

import asyncio
import datetime
import getpass
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from primus.am.master import ApplicationMaster
from primus.config.inventory import Host, local_inventory
from primus.config.site import Settings
from primus.config.spec import JobSpec
from primus.errors import PrimusError
from primus.launcher.api import LaunchError, LaunchRequest
from primus.launcher.layout import host_app_dir, host_env
from primus.launcher.processes import identity
from primus.launcher.registry import Launchers
from primus.scheduler.placement import am_host, am_hosts
from primus.state.keys import AppKeys, apps_prefix
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppStatus,
    KillRequest,
    decode,
    decode_hosts,
    encode,
    encode_hosts,
)
from primus.state.states import AppState
from primus.state.view import AppView, read_app_keys
from primus.store.api import Coordinator, EventType, Get, Put, Resync, key_missing


class AppNotFoundError(PrimusError):
    """No application with that id exists under the deployment prefix."""


def new_app_id(name: str) -> str:
    """A unique, sortable, readable id: ``<name>-<UTC date-time>-<random>``."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{name}-{stamp}-{secrets.token_hex(2)}"


async def submit(store: Coordinator, settings: Settings, spec: JobSpec,
                 hosts: Sequence[Host]) -> str:
    """Record the application in etcd, copy its files, start its AM; return its id.

    ``hosts`` is the application's inventory, already checked (:func:`ready_hosts`); it is
    stored with the application so that any AM, on any host, places on the same hosts.
    """
    app_id = new_app_id(spec.name)
    keys = AppKeys(settings.prefix, app_id)
    now = time.time()
    status = AppStatus(app_id=app_id, name=spec.name, state=AppState.SUBMITTED,
                       user=getpass.getuser(), submit_host=socket.gethostname(),
                       submit_time=now)
    event = AppEvent(seq=0, time=now, kind="submitted",
                     message=f"submitted by {status.user} on {status.submit_host}")
    ops = [Put(keys.spec, spec.model_dump_json().encode()), Put(keys.status, encode(status)),
           Put(keys.hosts, encode_hosts(hosts)), Put(keys.event(0), encode(event))]
    ops += [Put(keys.desired(role.name), str(role.num).encode()) for role in spec.roles]
    result = await store.txn([key_missing(keys.status)], ops)
    if not result.succeeded:
        raise PrimusError(f"application id {app_id} already exists; submit again")
    launchers = Launchers(settings)
    try:
        if spec.files and spec.workdir is None:  # trainers run where the files are copied
            await asyncio.gather(*(
                launchers.for_host(host).copy_files(
                    host, spec.files, str(host_app_dir(host, settings, app_id) / "work"))
                for host in hosts))
        for number, host in enumerate(am_hosts(spec, hosts)):
            await start_am(launchers, settings, spec, app_id, host, number)
    except LaunchError as exc:
        # No AM runs, so nothing else will ever end the application: record why it failed.
        failed = status.model_copy(update={"state": AppState.FAILED, "finish_time": time.time(),
                                           "exit_code": 1, "diagnosis": f"not started: {exc}"})
        await store.txn([key_missing(keys.leader)], [Put(keys.status, encode(failed))])
        raise
    return app_id


async def start_am(launchers: Launchers, settings: Settings, spec: JobSpec, app_id: str,
                   host: Host, number: int) -> None:
    """Start AM candidate ``number`` of the application on ``host``, detached.

    Candidate 0 logs to ``am.log``, the others to ``am-<number>.log``, in the application's
    directory on that host.
    """
    log_name = "am.log" if number == 0 else f"am-{number}.log"
    log_file = str(host_app_dir(host, settings, app_id) / log_name)
    await launchers.for_host(host).launch(LaunchRequest(
        host=host, argv=[host.python, "-m", "primus.am", "--app", app_id, "--log-file", log_file],
        log_file=log_file, env=host_env(host, settings, spec)))


async def recover(store: Coordinator, settings: Settings, app_id: str,
                  host_name: str | None) -> str:
    """Start one more AM candidate for the application; return the host it runs on.

    It leads once no other AM does, rebuilds its view from etcd and adopts every executor whose
    lease is alive, without restarting any.
    """
    report = await read_app(store, settings, app_id)
    if report.view.status.state.terminal and report.leader is None:
        raise PrimusError(f"{app_id} has ended ({report.view.status.state.value}); "
                          f"nothing to recover")
    host = report.host(host_name) if host_name else local_inventory()[0]
    await start_am(Launchers(settings), settings, report.view.spec, app_id, host,
                   number=int(time.time()))
    return host.name


@dataclass(frozen=True)
class Revived:
    """An application :func:`revive` started an AM candidate for, or why it could not."""

    app_id: str
    problem: str = ""


async def revive(store: Coordinator, settings: Settings) -> list[Revived]:
    """Start an AM candidate, as :func:`recover` does, for every application that has not
    ended and that no AM leads.

    For a process that has just started the embedded etcd again: the AMs may have gone with it
    (a reboot, a kill), and nothing else would ever notice. Their leader keys may have come
    back with it, since etcd restarts every lease's TTL when it starts: a key that names an AM
    process no longer running here counts as no AM, and the new candidate, campaigning, waits
    for that key to expire. An AM still running here stands again by itself (see
    :func:`~primus.am.master.stand_until_ended`) and gets no second candidate.
    """
    revived = []
    for summary in await list_apps(store, settings.prefix):
        if not summary.leaderless:
            continue
        app_id = summary.status.app_id
        try:
            await recover(store, settings, app_id, None)
        except PrimusError as exc:
            revived.append(Revived(app_id, str(exc)))
        else:
            revived.append(Revived(app_id))
    return revived


def leaderless(status: AppStatus, leader: AmLeader | None) -> bool:
    """Whether the application has not ended and no AM leads it to its end: there is no leader
    key, or it names an AM process of this host that no longer runs.

    The key outlives its AM by up to one lease TTL, and lives one TTL more when etcd restarts;
    an AM on another host is taken at its key's word.
    """
    if status.state.terminal:
        return False
    if leader is None:
        return True
    if leader.host != socket.gethostname() or not leader.start_time:
        return False
    return not identity(leader.pid, leader.start_time)


@dataclass(frozen=True)
class AppSummary:
    """One application as ``primus list`` shows it: its status and the AM that leads it."""

    status: AppStatus
    leader: AmLeader | None

    @property
    def leaderless(self) -> bool:
        """See :func:`leaderless`."""
        return leaderless(self.status, self.leader)


@dataclass(frozen=True)
class AppReport:
    """Everything about one application, read at one revision."""

    view: AppView
    leader: AmLeader | None
    events: list[AppEvent]
    revision: int
    hosts: list[Host]
    am_log: str

    def host(self, name: str) -> Host:
        """The inventory entry of a host the application uses."""
        return next(h for h in self.hosts if h.name == name)

    @property
    def leaderless(self) -> bool:
        """See :func:`leaderless`."""
        return leaderless(self.view.status, self.leader)


async def read_app(store: Coordinator, settings: Settings, app_id: str) -> AppReport:
    """Read the application's keys at one revision.

    Raises:
        AppNotFoundError: there is no such application.
    """
    prefix = settings.prefix
    keys = AppKeys(prefix, app_id)
    snapshot = await read_app_keys(store, keys)
    by_key = {kv.key: kv for kv in snapshot.kvs}
    if keys.status not in by_key or keys.spec not in by_key:
        raise AppNotFoundError(f"no application {app_id!r} under {prefix}")
    view = AppView.from_snapshot(keys, snapshot)
    leader = decode(AmLeader, by_key[keys.leader].value) if keys.leader in by_key else None
    events = [decode(AppEvent, kv.value) for kv in snapshot.kvs if kv.key.startswith(keys.events)]
    hosts = decode_hosts(by_key[keys.hosts].value) if keys.hosts in by_key else local_inventory()
    am_log = (leader.log_file if leader else "") or str(
        host_app_dir(am_host(view.spec, hosts), settings, app_id) / "am.log")
    return AppReport(view, leader, events, snapshot.revision, hosts, am_log)


async def list_apps(store: Coordinator, prefix: str) -> list[AppSummary]:
    """The status and AM of every application, newest first."""
    status_keys = [k for k in await store.list_keys(apps_prefix(prefix))
                   if k.endswith("/status") and k.count("/") == prefix.count("/") + 3]
    summaries: list[AppSummary] = []
    for start in range(0, len(status_keys), 50):  # etcd caps operations per transaction
        batch = status_keys[start:start + 50]
        leader_keys = [AppKeys(prefix, k.split("/")[-2]).leader for k in batch]
        result = await store.txn([], [Get(k) for pair in zip(batch, leader_keys, strict=True)
                                      for k in pair])
        for status, leader in zip(result.reads[::2], result.reads[1::2], strict=True):
            if status:
                summaries.append(AppSummary(decode(AppStatus, status[0].value), decode(
                    AmLeader, leader[0].value) if leader else None))
    return sorted(summaries, key=lambda s: s.status.submit_time, reverse=True)


class AmGoneError(PrimusError):
    """The application has not ended but no AM leads it (it died, or never started)."""


async def wait_for_end(store: Coordinator, settings: Settings, app_id: str,
                       on_change: Callable[[AppReport], None] | None = None,
                       am_start_timeout: float = 30.0, recheck: float = 5.0) -> AppReport:
    """Wait until the application has ended and its AM has exited; return the final report.

    ``on_change`` is called with a fresh report after every batch of changes.

    Raises:
        AmGoneError: no AM leads the running application, or none started within
            ``am_start_timeout`` seconds of submission; waiting longer would never end.
    """
    keys = AppKeys(settings.prefix, app_id)
    while True:
        report = await read_app(store, settings, app_id)
        if on_change is not None:
            on_change(report)
        status = report.view.status
        if status.state.terminal and report.leader is None:
            return report
        if report.leader is None and not status.state.terminal:
            if status.state is not AppState.SUBMITTED:
                raise AmGoneError(f"{app_id} is {status.state.value} but its AM is gone; "
                                  f"`primus recover {app_id}` starts one, "
                                  f"`primus kill {app_id}` stops what is left")
            if time.time() - status.submit_time > am_start_timeout:
                raise AmGoneError(f"the AM of {app_id} did not start within "
                                  f"{am_start_timeout:g}s; see its am.log")
        try:
            async with asyncio.timeout(recheck):
                async for event in store.watch_prefix(keys.root, report.revision + 1):
                    if isinstance(event, Resync) or event.key in (keys.status, keys.leader) \
                            or (on_change is not None and event.type is EventType.PUT
                                and _shown(keys, event.key)):
                        break
        except TimeoutError:
            pass  # nothing changed: re-read, so that a silent AM death is noticed


def _shown(keys: AppKeys, key: str) -> bool:
    """Whether a change of ``key`` changes what ``submit --wait`` shows: a stream's data tasks
    (claims, checkpoints) change many times a second and show only through its stats."""
    data = keys.root + "data/"
    return not key.startswith(data) or key.endswith("/stats")


async def kill(store: Coordinator, settings: Settings, app_id: str, reason: str,
               timeout: float) -> AppReport:
    """Ask the application to stop and wait until it has; take over if no AM leads it.

    When no AM leads (it died), this process becomes the AM for long enough to stop every
    executor and record KILLED.
    """
    keys = AppKeys(settings.prefix, app_id)
    report = await read_app(store, settings, app_id)
    if report.view.status.state.terminal and report.leader is None:
        return report
    request = KillRequest(time=time.time(), user=getpass.getuser(), reason=reason)
    await store.put(keys.kill, encode(request))
    deadline = time.monotonic() + timeout
    while True:
        if report.leader is None:
            await ApplicationMaster(store, settings, app_id).run()
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                return await wait_for_end(store, settings, app_id)
        except AmGoneError:
            # The AM that led when we asked died (or lost its lease) before acting on it.
            report = await read_app(store, settings, app_id)
        except asyncio.TimeoutError as exc:
            raise PrimusError(f"{app_id} did not stop within {timeout:g}s; its AM log is "
                              f"{report.am_log}") from exc
