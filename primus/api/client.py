"""``primus.api.client.Client``: the Primus API from Python, with typed results, for notebooks and
pipelines.

Calls are synchronous (a notebook cell runs them as they are); streaming RPCs are iterators.
Results are Primus's own values (:mod:`primus.state.records`, :mod:`primus.client.api`,
:mod:`primus.client.watch`), not protobuf messages. Errors are :class:`ApiError` with the gRPC
status code; an unknown application raises :class:`~primus.client.api.AppNotFoundError`.

Example::

    from primus.api.client import Client

    client = Client.embedded()                 # the server beside the embedded etcd
    for app in client.list_apps(states=["RUNNING"]):
        print(app.status.app_id, app.status.state.value)
    app = client.get_app("train-20261124-101500-3f2a")
    print(app.status.state, {role: n for role, n in app.desired.items()})
    for line in client.logs(app.status.app_id, executor=("worker", 0), follow=True):
        print(line.source, line.text)

Changing a running application's topology (its owner or an admin may)::

    changed = client.scale_role(app_id, "worker", 8)
    print(changed.previous, "->", changed.role.num, "at revision", changed.revision)
    client.add_role(app_id, '''
        name: evaluator
        command: python eval.py
        num: 1
    ''')                                        # YAML/JSON text, or a dict
    client.remove_role(app_id, "evaluator")
    added = client.add_data_source(app_id, "train", "/data/2026-11-25/*.txt")
    print(added.files, "files join stream train")
    # a refused change raises ApiError: .code INVALID_ARGUMENT with .violations naming the
    # field, NOT_FOUND, PERMISSION_DENIED or FAILED_PRECONDITION (see docs/api.md)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from primus.api import convert
from primus.api.v1 import primus_pb2 as pb
from primus.api.v1 import primus_pb2_grpc as pb_grpc
from primus.client.api import (
    AppNotFoundError,
    AppReport,
    AppSummary,
    HangStacks,
    HostReport,
    LogLine,
)
from primus.client.queues import HostUsage, QueuedApp
from primus.client.uploads import Upload
from primus.client.watch import (
    AppChange,
    ClusterChanged,
    EventAdded,
    ExecutorChanged,
    KillRequested,
    LeaderChanged,
    RoleChanged,
    StatusChanged,
    StreamChanged,
)
from primus.config.inventory import Host
from primus.config.site import load_settings
from primus.config.spec import JobSpec, RoleSpec
from primus.errors import PrimusError
from primus.state.records import (
    AmLeader,
    AppEvent,
    AppStatus,
    ClusterSpec,
    HangReport,
    HostCondition,
    KillRequest,
    Savepoint,
    StreamStats,
    TrainerStacks,
    decode,
)
from primus.state.states import AppState
from primus.state.topology import TopologyChange
from primus.state.view import ExecutorId, ExecutorView


class ApiError(PrimusError):
    """The server refused a call; ``code`` is the gRPC status code, the message its words.

    ``violations`` holds, for a refused job, one ``(field, description)`` per problem
    (``("job.roles[0].num", "got -1; must be an integer >= 1 ...")``).
    """

    def __init__(self, code: grpc.StatusCode, message: str,
                 violations: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.details = message
        """The server's words, without the code."""
        self.violations = violations


@dataclass(frozen=True)
class Application:
    """Everything about one application, read at ``revision`` (``GetApplication``).

    ``spec`` is the job as submitted; ``roles`` are its roles as they should be now (added
    roles after the job's, removed ones left out, each ``num`` its desired count), and
    ``desired`` maps each of them to that count.
    """

    status: AppStatus
    leader: AmLeader | None
    spec: JobSpec
    roles: list[RoleSpec]
    desired: dict[str, int]
    executors: dict[ExecutorId, ExecutorView]
    streams: dict[str, StreamStats | None]
    cluster: ClusterSpec | None
    kill: KillRequest | None
    events: list[AppEvent]
    revision: int
    progress: float | None = None


@dataclass(frozen=True)
class Changed:
    """A topology change as the server recorded it; the application's AM carries it out.

    Attributes:
        revision: The etcd revision of the change; :meth:`Client.watch` from it shows the AM
            carrying it out.
        role: The role as it should be now (:meth:`Client.scale_role`, :meth:`Client.add_role`).
        previous: Executors the role was to have before (:meth:`Client.scale_role`).
        files: Files the added source matched when it was checked
            (:meth:`Client.add_data_source`).
    """

    revision: int
    role: RoleSpec | None = None
    previous: int | None = None
    files: int | None = None
    change: TopologyChange | None = None
    """The change as recorded (its number, who asked, what it does in words)."""


@dataclass(frozen=True)
class LogPage:
    """Lines of one log as :meth:`Client.log_pages` receives them, how many logs the call
    reads in all, and the byte of ``source``'s log after these lines (``offset=`` of
    :meth:`Client.log_pages` resumes from it)."""

    source: str
    lines: list[str]
    sources: int
    offset: int = 0


@dataclass(frozen=True)
class Update:
    """One message of a watch: a snapshot, the changes of one revision, or progress."""

    revision: int
    snapshot: Application | None = None
    changes: list[AppChange] = field(default_factory=list)


class Client:
    """A connection to a Primus API server.

    Args:
        address: ``HOST:PORT`` of the server.
        ca_cert: The CA that signed the server's certificate (PEM file); ``None`` with
            ``plaintext``.
        cert: This client's certificate (PEM file), when the server requires one.
        key: Its key.
        plaintext: Connect without TLS (a server run with ``--plaintext``).
        timeout: Seconds a unary call may take.
        token_file: A file holding this client's bearer token; else the token is taken from
            ``$PRIMUS_TOKEN``, if set. Sent over TLS only.

    Raises:
        PrimusError: A token is given with ``plaintext`` (it would cross the network in the
            clear), or the token file cannot be read.
    """

    def __init__(self, address: str, ca_cert: str | Path | None = None,
                 cert: str | Path | None = None, key: str | Path | None = None,
                 plaintext: bool = False, timeout: float = 30.0,
                 token_file: str | Path | None = None) -> None:
        self.address = address
        self.timeout = timeout
        token = _token(token_file)
        if plaintext:
            if token is not None:
                raise PrimusError("a bearer token is sent over TLS only; this client is "
                                  "plaintext (unset $PRIMUS_TOKEN or use TLS)")
            self._channel = grpc.insecure_channel(address)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(ca_cert), private_key=_read(key),
                certificate_chain=_read(cert))
            if token is not None:
                credentials = grpc.composite_channel_credentials(
                    credentials, grpc.access_token_call_credentials(token))
            self._channel = grpc.secure_channel(address, credentials)
        self._stub = pb_grpc.PrimusStub(self._channel)

    @classmethod
    def embedded(cls, home: str | Path | None = None, timeout: float = 30.0) -> Client:
        """A client of the server beside the embedded etcd of ``home`` (default: the site's
        ``$PRIMUS_HOME``), starting that server when it does not run."""
        from primus.client.embedded_server import EmbeddedServer  # noqa: PLC0415 - a process

        home = Path(home) if home is not None else load_settings().home
        info = EmbeddedServer(home).ensure_running()
        pki = home / "etcd" / "pki"
        return cls(info.address, ca_cert=pki / "ca.crt", cert=pki / "client.crt",
                   key=pki / "client.key", timeout=timeout)

    def close(self) -> None:
        """Close the connection."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- Applications ---------------------------------------------------------------------

    def list_apps(self, states: Iterable[AppState | str] = (), user: str = "", name: str = "",
                  page_size: int = 0, include_history: bool = False) -> Iterator[AppSummary]:
        """Applications, newest first, filtered by state, user and job name; pages are
        fetched as the iterator is read. ``include_history``: also those archived."""
        request = pb.ListApplicationsRequest(user=user, name=name, page_size=page_size,
                                             include_history=include_history)
        request.states.extend(convert.app_state_to_proto(AppState(s)) for s in states)
        while True:
            response = self._call(self._stub.ListApplications, request)
            for summary in response.applications:
                yield AppSummary(
                    convert.from_message(summary.status, AppStatus),
                    convert.from_message(summary.am_leader, AmLeader)
                    if summary.HasField("am_leader") else None,
                    queue=summary.queue, archived=summary.archived,
                    progress=summary.progress if summary.HasField("progress") else None)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    def submit(self, job: str, source: str = "", overrides: Iterable[str] = (),
               base_directory: str = "", files: Iterable[Upload] = (),
               secret_env: Mapping[str, str] | None = None, inventory: str = "",
               inventory_source: str = "") -> str:
        """Submit a job given as the text of a job file; return the application's id.

        ``source`` names the text in errors (``train.yaml``); ``overrides`` are ``--set``
        expressions; ``base_directory`` is where relative ``workdir`` and data paths are taken
        from (on the hosts; empty: they are refused). ``files`` carry the content of the
        job's ``files`` (:func:`primus.client.uploads.read_job_files`), ``secret_env`` the
        values of its ``secret_env``; ``inventory`` selects among the server's hosts. A
        refused job raises :class:`ApiError` with ``violations``. A job array's first
        member's id (:meth:`submit_all` gives every one)."""
        return self.submit_all(job, source, overrides, base_directory, files, secret_env,
                               inventory, inventory_source)[1][0]

    def submit_all(self, job: str, source: str = "", overrides: Iterable[str] = (),
                   base_directory: str = "", files: Iterable[Upload] = (),
                   secret_env: Mapping[str, str] | None = None, inventory: str = "",
                   inventory_source: str = "") -> tuple[str, list[str]]:
        """:meth:`submit`, returning the job array's id (empty for a job of no array) and
        every application's id (a job array's members in index order)."""
        response = self._call(self._stub.SubmitApplication, pb.SubmitApplicationRequest(
            job=job, job_source=source, overrides=list(overrides),
            base_directory=base_directory, secret_env=dict(secret_env or {}),
            files=[pb.File(path=f.path, content=f.content, mode=f.mode) for f in files],
            inventory=inventory, inventory_source=inventory_source))
        return response.array, list(response.app_ids) or [response.app_id]

    def get_app(self, app_id: str, events: int = 0) -> Application:
        """One application, read at one revision, with its latest ``events`` (0: 20)."""
        return _application(self._call(self._stub.GetApplication,
                                       pb.GetApplicationRequest(app_id=app_id, events=events)))

    def get_report(self, app_id: str, events: int = 0) -> AppReport:
        """One application as the client layer reports it (what ``primus status`` shows),
        with its latest ``events`` (0: 20)."""
        return convert.report_from_message(self._call(
            self._stub.GetApplication, pb.GetApplicationRequest(app_id=app_id, events=events)))

    def summaries(self, include_history: bool = False, array: str = "") -> Iterator[AppSummary]:
        """Every application as listed, as the server judged it (``leaderless``, ``waiting``),
        newest first; with ``array``, the members of that job array only."""
        request = pb.ListApplicationsRequest(include_history=include_history, array=array)
        while True:
            response = self._call(self._stub.ListApplications, request)
            yield from map(convert.summary_from_message, response.applications)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    def recover(self, app_id: str, host: str = "") -> str:
        """Start one more AM candidate for the application, on ``host`` (default: the first
        its ``am`` settings allow); return the host."""
        return self._call(self._stub.RecoverApplication, pb.RecoverApplicationRequest(
            app_id=app_id, host=host)).host

    def watch(self, app_id: str, after_revision: int = 0,
              progress_interval: float = 0, timeout: float | None = None) -> Iterator[Update]:
        """Follow an application until it has ended: a snapshot (unless resuming from
        ``after_revision``), then every change, one revision at a time; ``timeout``: seconds
        after which the stream ends with DEADLINE_EXCEEDED."""
        request = pb.WatchApplicationRequest(app_id=app_id, after_revision=after_revision)
        if progress_interval:
            request.progress_interval.FromNanoseconds(int(progress_interval * 1e9))
        for message in self._stream(self._stub.WatchApplication, request, timeout):
            yield Update(message.revision,
                         _application(message.snapshot) if message.HasField("snapshot")
                         else None,
                         [_change(change) for change in message.changes])

    def succeed(self, app_id: str, reason: str = "") -> int:
        """End a running application as succeeded; the revision of the request."""
        return self._call(self._stub.SucceedApplication,
                          pb.SucceedApplicationRequest(app_id=app_id, reason=reason)).revision

    def suspend(self, app_id: str, reason: str = "") -> int:
        """Ask for a running application to be suspended; the revision of the request."""
        return self._call(self._stub.SuspendApplication,
                          pb.SuspendApplicationRequest(app_id=app_id, reason=reason)).revision

    def resume(self, app_id: str) -> int:
        """Resume a suspended application; the revision of the withdrawal."""
        return self._call(self._stub.ResumeApplication,
                          pb.ResumeApplicationRequest(app_id=app_id)).revision

    def kill(self, app_id: str, reason: str = "") -> int:
        """Ask for the application to stop; return the etcd revision of the request."""
        return self._call(self._stub.KillApplication,
                          pb.KillApplicationRequest(app_id=app_id, reason=reason)).revision

    # ---- Topology and data ----------------------------------------------------------------

    def scale_role(self, app_id: str, role: str, executors: int) -> Changed:
        """Give ``role`` ``executors`` executors (at least 1): the AM launches the new indices,
        or stops the highest ones gracefully."""
        response = self._call(self._stub.ScaleRole, pb.ScaleRoleRequest(
            app_id=app_id, role=role, executors=executors))
        return Changed(response.revision, convert.role_from_message(response.role)[0],
                       previous=response.previous_executors, change=_change_of(response))

    def resize_role(self, app_id: str, role: str, cpu: float | None = None,
                    memory: str | int | None = None) -> Changed:
        """Make each executor of ``role`` reserve ``cpu`` cores and ``memory`` (a size as a
        job file writes it; ``None``: as it is), granted in place and applied live."""
        request = pb.ResizeRoleRequest(app_id=app_id, role=role)
        if cpu is not None:
            request.cpu = cpu
        if memory is not None:
            request.memory = str(memory)
        response = self._call(self._stub.ResizeRole, request)
        return Changed(response.revision, convert.role_from_message(response.role)[0],
                       change=_change_of(response))

    def add_role(self, app_id: str, role: str | Mapping[str, object], source: str = ""
                 ) -> Changed:
        """Add a role: the YAML or JSON text of one entry of a job file's ``roles``, or that
        entry as a dict; ``source`` names it in errors (the file it came from). A refused role
        raises :class:`ApiError` with ``violations`` (``("role.num", "got 0; ...")``)."""
        text = role if isinstance(role, str) else json.dumps(dict(role))
        response = self._call(self._stub.AddRole, pb.AddRoleRequest(
            app_id=app_id, role=text, role_source=source))
        return Changed(response.revision, convert.role_from_message(response.role)[0],
                       change=_change_of(response))

    def remove_role(self, app_id: str, role: str) -> Changed:
        """Remove a role: the AM stops its executors gracefully."""
        response = self._call(self._stub.RemoveRole, pb.RemoveRoleRequest(
            app_id=app_id, role=role))
        return Changed(response.revision, change=_change_of(response))

    def add_data_source(self, app_id: str, stream: str,
                        source: str | Mapping[str, object]) -> Changed:
        """Add files to a running data stream: ``source`` is a path or URL glob (absolute), or
        a dict of one entry of a stream's ``sources`` (``path``, ``start``, ``end``,
        ``success_marker``, ``marker_timeout``)."""
        entry = {"path": source} if isinstance(source, str) else dict(source)
        response = self._call(self._stub.AddDataSource, pb.AddDataSourceRequest(
            app_id=app_id, stream=stream, source=json.dumps(entry, default=str)))
        return Changed(response.revision, files=response.files, change=_change_of(response))

    # ---- Logs and hosts -------------------------------------------------------------------

    def logs(self, app_id: str, executor: tuple[str, int] | str | None = None,
             executor_log: bool = False, follow: bool = False) -> Iterator[LogLine]:
        """Lines of one executor's log (``("worker", 0)``), of the AM (``"am"``), or of every
        executor; with ``follow``, until the application ends."""
        for page in self.log_pages(app_id, executor, executor_log, follow):
            for text in page.lines:
                yield LogLine(page.source, text)

    def log_pages(self, app_id: str, executor: tuple[str, int] | str | None = None,
                  executor_log: bool = False, follow: bool = False, offset: int = 0
                  ) -> Iterator[LogPage]:
        """:meth:`logs` as the server sends them: the lines of one log read together. With
        ``offset`` (the last page's), one executor's or the AM's log resumes after what was
        read."""
        request = pb.GetLogsRequest(app_id=app_id, follow=follow, offset=offset,
                                    kind=pb.LOG_KIND_EXECUTOR if executor_log
                                    else pb.LOG_KIND_TRAINER)
        if executor == "am":
            request.am = True
        elif isinstance(executor, tuple):
            request.executor.role, request.executor.index = executor
        for message in self._stream(self._stub.GetLogs, request):
            yield LogPage(message.source, list(message.lines), message.sources, message.offset)

    def stacks(self, app_id: str, hang: int = 0) -> HangStacks:
        """The trainers' stacks at hang ``hang`` of the application (0: the last)."""
        response = self._call(self._stub.GetStacks, pb.GetStacksRequest(app_id=app_id,
                                                                        hang=hang))
        return HangStacks(
            convert.from_message(response.hang, HangReport)
            if response.HasField("hang") else None,
            [convert.from_message(s, TrainerStacks) for s in response.stacks],
            list(response.hangs))

    def webhook_key(self, app_id: str) -> str:
        """The key the application's own webhooks are signed with (hex text)."""
        return self._call(self._stub.GetWebhookKey,
                          pb.GetWebhookKeyRequest(app_id=app_id)).key

    def create_savepoint(self, app_id: str, timeout: float = 0.0) -> Savepoint:
        """Take a savepoint of the application's data streams; it once taken."""
        response = self._call(self._stub.CreateSavepoint, pb.CreateSavepointRequest(
            app_id=app_id, timeout_seconds=timeout), timeout=(timeout or 60.0) + 30.0)
        return decode(Savepoint, response.savepoint.encode())

    def savepoints(self, app_id: str) -> list[Savepoint]:
        """The application's savepoints, oldest first."""
        response = self._call(self._stub.ListSavepoints,
                              pb.ListSavepointsRequest(app_id=app_id))
        return [decode(Savepoint, value.encode()) for value in response.savepoints]

    def hosts(self, inventory: str = "", source: str = "") -> list[Host]:
        """The server's inventory, or the hosts of ``inventory`` (text) among them."""
        response = self._call(self._stub.ListHosts, pb.ListHostsRequest(
            inventory=inventory, inventory_source=source))
        return [convert.host_from_message(info.host) for info in response.hosts]

    def probe_hosts(self, inventory: str = "", source: str = "") -> list[HostReport]:
        """The server's inventory (or ``inventory``'s hosts among it), each host probed."""
        response = self._call(self._stub.ListHosts, pb.ListHostsRequest(
            probe=True, inventory=inventory, inventory_source=source))
        return [convert.host_report_from_message(info) for info in response.hosts]

    # ---- Admission ------------------------------------------------------------------------

    def queue(self) -> list[QueuedApp]:
        """The applications waiting for admission, in admission order."""
        return self.queue_page()[0]

    def queue_page(self, limit: int = 0) -> tuple[list[QueuedApp], int]:
        """The first ``limit`` applications waiting for admission (0: every one), in
        admission order, and how many wait in all."""
        response = self._call(self._stub.ListQueue, pb.ListQueueRequest(limit=limit))
        return ([convert.queued_from_message(app) for app in response.applications],
                response.total)

    def host_usage(self, inventory: str = "", source: str = "") -> list[HostUsage]:
        """Per host: its capacity, what each application holds there, what is free."""
        response = self._call(self._stub.GetHostUsage, pb.GetHostUsageRequest(
            inventory=inventory, inventory_source=source))
        return [convert.usage_from_message(usage) for usage in response.hosts]

    def drain_host(self, host: str, reason: str) -> HostCondition:
        """Take ``host`` out of service (admins only)."""
        response = self._call(self._stub.DrainHost, pb.DrainHostRequest(host=host,
                                                                         reason=reason))
        return convert.from_message(response.condition, HostCondition)

    def resume_host(self, host: str) -> HostCondition | None:
        """Put ``host`` back in service (admins only); what it was out for, if it was."""
        response = self._call(self._stub.ResumeHost, pb.ResumeHostRequest(host=host))
        return (convert.from_message(response.condition, HostCondition)
                if response.HasField("condition") else None)

    # ---- Calls ----------------------------------------------------------------------------

    def _call(self, method, request,  # type: ignore[no-untyped-def]
              timeout: float | None = None):
        try:
            return method(request, timeout=timeout or self.timeout)
        except grpc.RpcError as exc:
            raise _error(exc) from None

    def _stream(self, method, request,  # type: ignore[no-untyped-def]
                timeout: float | None = None) -> Iterator:
        call = method(request, timeout=timeout)
        try:
            yield from call
        except grpc.RpcError as exc:
            raise _error(exc) from None
        finally:
            call.cancel()


def _read(path: str | Path | None) -> bytes | None:
    return Path(path).read_bytes() if path is not None else None


TOKEN_ENV = "PRIMUS_TOKEN"


def _token(token_file: str | Path | None) -> str | None:
    """The bearer token from ``token_file``, else from ``$PRIMUS_TOKEN``; ``None``: none."""
    if token_file is None:
        return os.environ.get(TOKEN_ENV, "").strip() or None
    try:
        token = Path(token_file).read_text().strip()
    except OSError as exc:
        raise PrimusError(f"token file {token_file}: cannot be read ({exc.strerror})") from exc
    except UnicodeDecodeError:
        # Not chained, and the bad byte is not named: both would show part of the token.
        raise PrimusError(f"token file {token_file}: is not UTF-8 text") from None
    if not token:
        raise PrimusError(f"token file {token_file}: is empty; it must hold the token")
    return token


def _error(exc: grpc.RpcError) -> PrimusError:
    code, details = exc.code(), exc.details() or ""  # type: ignore[attr-defined]
    if code is grpc.StatusCode.NOT_FOUND and "no application" in details:
        return AppNotFoundError(details)
    violations: list[tuple[str, str]] = []
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            violations += [(v.field, v.description) for v in bad_request.field_violations]
    return ApiError(code, details, tuple(violations))


def _application(message: pb.Application) -> Application:
    executors = dict(convert.executor_from_message(e) for e in message.executors)
    return Application(
        status=convert.from_message(message.status, AppStatus),
        leader=(convert.from_message(message.am_leader, AmLeader)
                if message.HasField("am_leader") else None),
        spec=convert.job_from_message(message),
        roles=[convert.role_from_message(role)[0] for role in message.roles],
        desired={role.name: role.desired_executors for role in message.roles},
        executors=executors,
        streams=dict(convert.stream_from_message(s) for s in message.streams),
        cluster=(convert.from_message(message.cluster, ClusterSpec)
                 if message.HasField("cluster") else None),
        kill=convert.from_message(message.kill, KillRequest) if message.HasField("kill")
        else None,
        events=[convert.from_message(e, AppEvent) for e in message.events],
        revision=message.revision,
        progress=message.progress if message.HasField("progress") else None)


def _change_of(response: pb.ScaleRoleResponse | pb.ResizeRoleResponse | pb.AddRoleResponse
               | pb.RemoveRoleResponse | pb.AddDataSourceResponse) -> TopologyChange | None:
    return (convert.from_message(response.change, TopologyChange)
            if response.HasField("change") else None)


def _change(message: pb.ApplicationChange) -> AppChange:
    kind = message.WhichOneof("change")
    if kind == "status":
        return StatusChanged(convert.from_message(message.status, AppStatus))
    if kind == "am_leader":
        held = message.am_leader
        return LeaderChanged(convert.from_message(held.leader, AmLeader)
                             if held.HasField("leader") else None)
    if kind == "role":
        role, desired = convert.role_from_message(message.role)
        return RoleChanged(role, desired, message.role.removed)
    if kind == "executor":
        executor, view = convert.executor_from_message(message.executor)
        return ExecutorChanged(executor, view)
    if kind == "stream":
        return StreamChanged(*convert.stream_from_message(message.stream))
    if kind == "cluster":
        held = message.cluster
        return ClusterChanged(convert.from_message(held.cluster, ClusterSpec)
                              if held.HasField("cluster") else None)
    if kind == "kill":
        return KillRequested(convert.from_message(message.kill, KillRequest))
    return EventAdded(convert.from_message(message.event, AppEvent))


__all__ = ["ApiError", "Application", "Changed", "Client", "LogPage", "Update"]

