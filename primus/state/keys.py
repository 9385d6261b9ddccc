"""The etcd key layout of an application (documented in docs/etcd-layout.md)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_EXECUTOR_KEY = re.compile(r"(?P<role>[^/]+)/(?P<index>[0-9]+)/(?P<kind>plan|live|result|usage)")

EVENT_LOG_SIZE = 1000
"""Entries of an application's event log (``events/<seq>``): the AM deletes older ones as it
writes new ones, and readers read the newest this many (an identity could write more)."""


@dataclass(frozen=True)
class ExecutorKey:
    """Which executor and which of its keys an etcd key under ``executors/`` names."""

    role: str
    index: int
    kind: str  # plan | live | result


@dataclass(frozen=True)
class AppKeys:
    """Keys of one application under a deployment prefix (default ``/primus``)."""

    prefix: str
    app_id: str

    @property
    def root(self) -> str:
        """``<prefix>/apps/<app>/``: everything about the application."""
        return f"{self.prefix}/apps/{self.app_id}/"

    @property
    def spec(self) -> str:
        return self.root + "spec"

    @property
    def status(self) -> str:
        return self.root + "status"

    @property
    def owner(self) -> str:
        """``owner``: the server's record of whose the application is and how it runs
        (:class:`~primus.state.records.AppOwner`); read-only to the application."""
        return self.root + "owner"

    @property
    def run_time(self) -> tuple[list[str], list[str]]:
        """The keys and the prefixes under :attr:`root` that the application's own processes
        (its AM, agents, executors) write: facts about itself. Every other key under
        :attr:`root` is written by Primus's services alone (the server's record: ``owner``,
        ``spec``, ``hosts``; people's requests: ``kill``, ``suspend``, ``roles/``,
        ``sources/``, ``changes/``; ``notifications/``, ``refused/``), so an application's
        identity only reads them (docs/operations.md, "What an application can write")."""
        keys = [self.status, self.leader, self.cluster, self.blacklist, self.hang]
        return keys, [self.executors, self.events, self.stacks, self.savepoints, self.data]

    @property
    def leader(self) -> str:
        return self.root + "am/leader"

    @property
    def hosts(self) -> str:
        return self.root + "hosts"

    @property
    def kill(self) -> str:
        return self.root + "kill"

    @property
    def suspend(self) -> str:
        return self.root + "suspend"

    @property
    def blacklist(self) -> str:
        return self.root + "blacklist"

    @property
    def cluster(self) -> str:
        return self.root + "cluster"

    @property
    def executors(self) -> str:
        return self.root + "executors/"

    @property
    def events(self) -> str:
        return self.root + "events/"

    @property
    def data(self) -> str:
        """``data/``: the keys of every data stream (:meth:`stream`)."""
        return self.root + "data/"

    def stream(self, name: str) -> StreamKeys:
        """Keys of data stream ``name``."""
        return StreamKeys(f"{self.data}{name}/")

    def is_task_key(self, key: str) -> bool:
        """Whether ``key`` is one of a data stream's task keys (claims, checkpoints: written
        many times a second), not its stats."""
        return key.startswith(self.data) and not key.endswith("/stats")

    @property
    def roles(self) -> str:
        """``roles/``: the topology's changes per role (``primus/state/topology.py``)."""
        return self.root + "roles/"

    @property
    def sources(self) -> str:
        """``sources/``: data sources added to running streams."""
        return self.root + "sources/"

    @property
    def changes(self) -> str:
        """``changes/``: the log of topology changes, who asked and what."""
        return self.root + "changes/"

    @property
    def savepoints(self) -> str:
        """``savepoints/``: the application's savepoints (their cut of each stream is under
        the stream's keys, :meth:`StreamKeys.savepoint`)."""
        return self.root + "savepoints/"

    def savepoint(self, number: int) -> str:
        return f"{self.savepoints}{number:06d}"

    @property
    def hang(self) -> str:
        """``hang``: the last hang an executor reported, and what came of it."""
        return self.root + "hang"

    @property
    def notifications(self) -> str:
        """``notifications/``: how each webhook notification of the application went."""
        return self.root + "notifications/"

    @property
    def refusals(self) -> str:
        """``refused/``: values of its own keys Primus's privileged readers did not believe."""
        return self.root + "refused/"

    def refusal(self, key: str) -> str:
        """The record of the refusal of ``key``'s value: one per key, named by its digest."""
        return self.refusals + hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def stacks(self) -> str:
        """``stacks/``: the trainers' stacks taken at each hang, ``<hang>/<role>/<index>``."""
        return self.root + "stacks/"

    def stack(self, hang: int, role: str, index: int) -> str:
        return f"{self.stacks}{hang:06d}/{role}/{index}"

    def parse_stack(self, key: str) -> tuple[int, str, int]:
        """``(hang, role, index)`` of a key under ``stacks/``."""
        hang, role, index = key[len(self.stacks):].split("/")
        return int(hang), role, int(index)

    @property
    def scheduler(self) -> SchedulerKeys:
        """The deployment's keys of admission."""
        return SchedulerKeys(self.prefix)

    def desired(self, role: str) -> str:
        return f"{self.root}roles/{role}/desired"

    def role_spec(self, role: str) -> str:
        """A role added at run time."""
        return f"{self.root}roles/{role}/spec"

    def role_removed(self, role: str) -> str:
        return f"{self.root}roles/{role}/removed"

    def role_resources(self, role: str) -> str:
        """The role's CPU and memory per executor, resized at run time."""
        return f"{self.root}roles/{role}/resources"

    def added_source(self, stream: str, change: int) -> str:
        return f"{self.sources}{stream}/{change:012d}"

    def change(self, seq: int) -> str:
        return f"{self.changes}{seq:012d}"

    def executor(self, role: str, index: int, kind: str) -> str:
        """``executors/<role>/<index>/<kind>`` with kind one of plan, live, result."""
        return f"{self.executors}{role}/{index}/{kind}"

    def event(self, seq: int) -> str:
        # Zero-padded so that key order is event order.
        return f"{self.events}{seq:012d}"

    def parse_executor(self, key: str) -> ExecutorKey | None:
        """The executor a key under ``executors/`` belongs to, or ``None`` for other keys."""
        if not key.startswith(self.executors):
            return None
        match = _EXECUTOR_KEY.fullmatch(key[len(self.executors):])
        if match is None:
            return None
        return ExecutorKey(match["role"], int(match["index"]), match["kind"])


@dataclass(frozen=True)
class SchedulerKeys:
    """Keys of admission, shared by the applications of a deployment, under
    ``<prefix>/scheduler/`` (docs/etcd-layout.md). What concerns one application is under
    ``scheduler/apps/<app>/``, which its AM watches."""

    prefix: str

    @property
    def root(self) -> str:
        return f"{self.prefix}/scheduler/"

    @property
    def leader(self) -> str:
        return self.root + "leader"

    @property
    def config(self) -> str:
        """The queues and their quotas, as the site configuration defines them."""
        return self.root + "config"

    @property
    def hosts(self) -> str:
        return self.root + "hosts/"

    @property
    def apps(self) -> str:
        return self.root + "apps/"

    @property
    def conditions(self) -> str:
        return self.root + "conditions/"

    def condition(self, name: str) -> str:
        """Why a host takes no new executor (drained, quarantined): a
        :class:`~primus.state.records.HostCondition`; absent while it takes them."""
        return f"{self.conditions}{name}"

    @property
    def topology_checks(self) -> str:
        return self.root + "topology/"

    def topology_check(self, name: str) -> str:
        """Why a host's GPUs are linked otherwise than its inventory declares, as the
        admission leader's health check found (a :class:`~primus.state.records.TopologyCheck`);
        absent while they agree. Such a host takes no executor that asks for locality."""
        return f"{self.topology_checks}{name}"

    def host(self, name: str) -> str:
        """A host as the applications that use it declared it; rewritten with every
        reservation made on it, so that its revision tells whether one was made since."""
        return f"{self.hosts}{name}"

    def app(self, app_id: str) -> str:
        """``scheduler/apps/<app>/``: the application's request, reservations, waiting."""
        return f"{self.apps}{app_id}/"

    def request(self, app_id: str) -> str:
        return f"{self.app(app_id)}request"

    def waiting(self, app_id: str) -> str:
        return f"{self.app(app_id)}waiting"

    def preempt(self, app_id: str) -> str:
        return f"{self.app(app_id)}preempt"

    def evict(self, app_id: str) -> str:
        return f"{self.app(app_id)}evict"

    def reservations(self, app_id: str) -> str:
        return f"{self.app(app_id)}reservations/"

    def reservation(self, app_id: str, role: str, index: int) -> str:
        return f"{self.reservations(app_id)}{role}/{index}"

    def parse(self, key: str) -> tuple[str, str, str]:
        """``(app, kind, rest)`` of a key under ``scheduler/apps/``: kind ``request``,
        ``waiting``, ``preempt``, ``evict`` or ``reservations`` (rest ``<role>/<index>``);
        empty strings for others."""
        if not key.startswith(self.apps):
            return "", "", ""
        app_id, _, tail = key[len(self.apps):].partition("/")
        kind, _, rest = tail.partition("/")
        return app_id, kind, rest


def identity_start(prefix: str) -> str:
    """What the etcd user names of a deployment's application identities start with
    (``primus.client.identities``)."""
    return (prefix.strip("/").replace("/", ".") or "primus") + ".app."


def identity_name(prefix: str, app_id: str) -> str:
    """The etcd user (and role) of application ``app_id`` on a shared deployment."""
    return identity_start(prefix) + app_id


def apps_prefix(prefix: str) -> str:
    """Where every application of a deployment lives."""
    return f"{prefix}/apps/"


@dataclass(frozen=True)
class StreamKeys:
    """Keys of one data stream, under ``apps/<app>/data/<stream>/`` (docs/etcd-layout.md).

    A task ``<id>`` (``<epoch>-<seq>``) has its definition under ``tasks/``; exactly one of
    ``pending/``, ``owner/`` (leased by its reader), ``done/`` or ``failed/`` says where it is;
    ``progress/`` holds its last checkpoint while it is not done.
    """

    root: str

    @property
    def scan(self) -> str:
        return self.root + "scan"

    @property
    def stats(self) -> str:
        return self.root + "stats"

    @property
    def end(self) -> str:
        """Exists once every task of every epoch is done or failed."""
        return self.root + "end"

    @property
    def savepoints(self) -> str:
        """``savepoints/``: the stream's cuts in the application's savepoints."""
        return self.root + "savepoints/"

    def savepoint(self, number: int) -> str:
        """``savepoints/<number>/``: the stream's cut in savepoint ``number``, in chunks."""
        return f"{self.savepoints}{number:06d}/"

    def prefix(self, kind: str) -> str:
        """``tasks/``, ``pending/``, ``owner/``, ``progress/``, ``done/`` or ``failed/``."""
        return f"{self.root}{kind}/"

    def key(self, kind: str, task: str) -> str:
        return f"{self.root}{kind}/{task}"


def autosizer_key(prefix: str) -> str:
    """Where the autosizer (``primus.server.autosize``) is elected."""
    return f"{prefix}/server/autosizer"


def am_keeper_key(prefix: str) -> str:
    """Where the AM keeper (``primus.client.keeper``) is elected: while this key exists, a
    keeper runs, and an application may wait for admission with no AM (``parked``)."""
    return f"{prefix}/server/am-keeper"
