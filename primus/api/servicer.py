"""The ``primus.v1.Primus`` service: requests translated into calls of the client layer.

Each RPC checks its request (a field out of range is INVALID_ARGUMENT naming the field), checks
that the caller may do it (a change, or a read of its logs, stacks or savepoints: the
application's owner or an admin; such reads anyone's where ``server.read_access`` says so), calls
:class:`~primus.client.service.ApplicationService` (or :func:`~primus.client.watch.watch_app`,
the hosts' probe; ``GetApplication`` through :class:`~primus.api.reads.ApplicationReads`, which
shares one read among the requests that arrive together) and converts the answer with
:mod:`primus.api.convert`. Nothing is decided here; errors of the client layer become status
codes in one place (:func:`_status_of`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import logging
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from primus.api import convert
from primus.api.auth import CALLER
from primus.api.reads import ApplicationReads
from primus.api.v1 import primus_pb2 as pb
from primus.api.v1 import primus_pb2_grpc as pb_grpc
from primus.client.access import Action, Identity, may, refusal
from primus.client.api import (
    AppNotFoundError,
    AppSummary,
    HostNotFoundError,
    LogLine,
    LogNameError,
)
from primus.client.hosts import probe_hosts
from primus.client.preflight import checked_submission
from primus.client.queues import drain, host_usage, resume
from primus.client.savepoints import TAKE_TIMEOUT
from primus.client.service import ApplicationService
from primus.client.topology import ChangeConflictError, RoleNotFoundError, StreamNotFoundError
from primus.client.uploads import Upload, check_uploads, staged
from primus.client.watch import (
    ClusterChanged,
    EventAdded,
    ExecutorChanged,
    KillRequested,
    LeaderChanged,
    RevisionAheadError,
    RoleChanged,
    StatusChanged,
    StreamChanged,
    WatchUpdate,
    watch_app,
)
from primus.config.inventory import Host, InventoryError, parse_inventory
from primus.config.loader import (
    NO_VALUE,
    SET_SOURCE,
    SpecError,
    SpecProblem,
    load_job_text,
)
from primus.config.reading import (
    MAX_CONFIG_BYTES,
    MAX_SET_BYTES,
    InputError,
    parse_yaml,
    shown,
)
from primus.config.site import DEFAULT_MAX_UPLOAD, Settings
from primus.config.spec import ROLE_NAME_PATTERN, STREAM_NAME_PATTERN
from primus.errors import PrimusError
from primus.history.api import HistoryUnavailableError
from primus.launcher.api import LaunchError
from primus.state.states import AppState
from primus.store.api import StoreError, StoreUnavailableError
from primus.store.recipes import close_reading

logger = logging.getLogger(__name__)

REQUEST_BYTES_BESIDE_FILES = 4 * 1024 * 1024
"""What a request holds besides a submission's files, at most (a job of 1 MiB, overrides...)."""
MAX_REQUEST_BYTES = DEFAULT_MAX_UPLOAD + REQUEST_BYTES_BESIDE_FILES
"""The largest request message a server with the default ``server.max_upload`` receives
(:func:`max_request_bytes`); larger ones are RESOURCE_EXHAUSTED."""


def max_request_bytes(settings: Settings) -> int:
    """The largest request message the server receives: a submission with its files at
    ``server.max_upload``; larger ones are RESOURCE_EXHAUSTED."""
    return settings.server_max_upload + REQUEST_BYTES_BESIDE_FILES
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
DEFAULT_EVENTS = 20
MAX_EVENTS = 1000
MAX_REASON = 4096
MAX_OVERRIDES = 1000
LOG_LINES_PER_MESSAGE = 1000

_APP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
MAX_ROLE_BYTES = MAX_CONFIG_BYTES
"""AddRole's role text: at most 1 MiB, as a job file (the role is stored with the job)."""
MAX_SOURCE_BYTES = MAX_SET_BYTES
"""AddDataSource's source text: at most 64 KiB."""


MAX_SAVEPOINT_WAIT = 600.0
"""The longest CreateSavepoint waits for the AM, in seconds."""


class RequestError(PrimusError):
    """A request field out of its range; the message starts with the field's name."""


class _Abort(Exception):
    """A status to end the RPC with; ``details`` the whole status, when it carries details."""

    def __init__(self, code: grpc.StatusCode, message: str,
                 details: status_pb2.Status | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


@contextlib.contextmanager
def _status_of(what: str) -> Iterator[None]:
    """Turn the client layer's errors into the status the API documents; an unexpected error
    becomes INTERNAL with a short message, its traceback logged (never sent)."""
    try:
        yield
    except _Abort:
        raise
    except (RequestError, LogNameError) as exc:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
    except SpecError as exc:  # a change's request field (executors, role, source) refused
        status = convert.spec_error_status(exc, {})
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, status.message, status) from exc
    except (AppNotFoundError, HostNotFoundError, RoleNotFoundError, StreamNotFoundError) as exc:
        raise _Abort(grpc.StatusCode.NOT_FOUND, str(exc)) from exc
    except ChangeConflictError as exc:
        raise _Abort(grpc.StatusCode.ABORTED, str(exc)) from exc
    except RevisionAheadError as exc:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
    except (StoreUnavailableError, LaunchError, HistoryUnavailableError) as exc:
        raise _Abort(grpc.StatusCode.UNAVAILABLE, str(exc)) from exc
    except StoreError as exc:
        logger.error("%s: etcd refused: %s", what, exc)
        raise _Abort(grpc.StatusCode.UNAVAILABLE, str(exc)) from exc
    except PrimusError as exc:  # AppEndedError, PlacementError: not possible in this state
        raise _Abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from exc
    except Exception as exc:
        logger.exception("%s failed", what)
        raise _Abort(grpc.StatusCode.INTERNAL,
                     f"{what} failed: internal error ({type(exc).__name__}); "
                     f"see the server's log") from exc


def _check_reason(reason: str) -> None:
    """A request's free-text reason: at most ``MAX_REASON`` characters."""
    if len(reason) > MAX_REASON:
        raise RequestError(f"reason: {len(reason)} characters; must be at most {MAX_REASON}")


def _check_app_id(app_id: str) -> str:
    if not app_id:
        raise RequestError("app_id: must not be empty")
    if not _APP_ID.fullmatch(app_id):
        raise RequestError(f"app_id: got {app_id[:80]!r}; must be an application id (letters, "
                           f"digits, '.', '_', '-', at most 253 characters)")
    return app_id


def _check_name(field: str, name: str, pattern: str, what: str) -> str:
    """A role or stream name of a request; INVALID_ARGUMENT naming ``field`` unless it is one
    (a name that cannot be a role's is no role of any application)."""
    if not name:
        raise RequestError(f"{field}: must not be empty")
    if not re.fullmatch(pattern, name):
        raise RequestError(f"{field}: got {shown(name)}; must be {what}: 1 to 32 lowercase "
                           f"letters, digits, '_' or '-', starting with a letter")
    return name


def _parse_text(field: str, text: str, limit: int) -> Any:
    """The YAML or JSON ``text`` of a request ``field``, parsed within the bounds of job files
    (:mod:`primus.config.reading`).

    Raises:
        SpecError: Naming ``field``: it is empty, larger than ``limit`` bytes, or no valid YAML.
    """
    encoded = text.encode(errors="surrogateescape")
    if not encoded.strip():
        raise SpecError(SpecProblem(field, "", NO_VALUE, "must not be empty"))
    if len(encoded) > limit:
        raise SpecError(SpecProblem(field, "", NO_VALUE, f"is {len(encoded):,} bytes; at most "
                                    f"{limit:,} bytes are accepted"))
    try:
        return parse_yaml(encoded)
    except InputError as exc:
        raise SpecError(SpecProblem(field, "", NO_VALUE, str(exc))) from exc


def _source_entry(text: str) -> Any:
    """AddDataSource's ``source``: a stream's ``sources`` entry, or a plain string taken as its
    path. A relative path is refused: a request has no directory to take it from.

    Raises:
        SpecError: Naming ``source`` (or ``source.path``).
    """
    entry = _parse_text("source", text, MAX_SOURCE_BYTES)
    if isinstance(entry, str):
        entry = {"path": entry}
    path = entry.get("path") if isinstance(entry, dict) else None
    if isinstance(path, str) and path and "://" not in path and not os.path.isabs(path):
        raise SpecError(SpecProblem("source", "path", path, (
            "must be an absolute path or a URL: a request has no directory to take a "
            "relative path from")))
    table = entry.get("table") if isinstance(entry, dict) else None
    pin_field = "snapshot" if isinstance(table, dict) and table.get("format") == "iceberg" \
        else "version"
    if isinstance(table, dict) and table.get(pin_field) is None:
        raise SpecError(SpecProblem("source", f"table.{pin_field}", NO_VALUE, (
            "must be set: the server does not read the owner's tables to pin their latest "
            f"{pin_field}")))
    location = table.get("path") if isinstance(table, dict) else None
    if isinstance(location, str) and location and "://" not in location and \
            not os.path.isabs(location):
        raise SpecError(SpecProblem("source", "table.path", location, (
            "must be an absolute path or a URL: a request has no directory to take a "
            "relative path from")))
    return entry


def _check_secret_env(source: str, names: Sequence[str], values: Mapping[str, str]) -> None:
    """The request's ``secret_env`` holds a value for each name the job's lists, and nothing
    else.

    Raises:
        SpecError: Naming the missing or unknown variables (never a value).
    """
    problems = [SpecProblem(source, f"secret_env[{i}]", name, "has no value in the request's "
                            "secret_env (`primus submit` sends it from its environment)")
                for i, name in enumerate(names) if name not in values]
    problems += [SpecProblem("request", "secret_env", name, "is not in the job's secret_env")
                 for name in sorted(values) if name not in names]
    if problems:
        raise SpecError(*problems)


def _in_range(field: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise RequestError(f"{field}: got {value}; must be >= {low} and <= {high}")
    return value


class PrimusServicer(pb_grpc.PrimusServicer):
    """The API over one deployment: ``service`` for applications, ``hosts`` the inventory."""

    def __init__(self, service: ApplicationService, hosts: Sequence[Host]) -> None:
        self.service = service
        self.hosts = list(hosts)
        self.reads = ApplicationReads(service)

    # ---- Applications ---------------------------------------------------------------------

    async def SubmitApplication(self, request: pb.SubmitApplicationRequest,  # noqa: N802
                                context: grpc.aio.ServicerContext
                                ) -> pb.SubmitApplicationResponse:
        async with _rpc(context, "SubmitApplication"):
            source = request.job_source or "job"
            if len(source) > 255 or not source.isprintable():
                raise RequestError("job_source: must be at most 255 printable characters")
            if len(request.overrides) > MAX_OVERRIDES:
                raise RequestError(f"overrides: {len(request.overrides)} given; at most "
                                   f"{MAX_OVERRIDES}")
            base = request.base_directory or None
            if base is not None and not os.path.isabs(base):
                raise RequestError(f"base_directory: got {base[:200]!r}; must be an absolute "
                                   f"path")
            settings = self.service.settings
            uploads = [Upload(f.path, f.content, f.mode) for f in request.files]
            app_ids: list[str]
            try:
                spec = load_job_text(request.job, source, base,
                                     site_defaults=settings.job_defaults,
                                     overrides=list(request.overrides))
                _check_secret_env(source, spec.secret_env, request.secret_env)
                check_uploads(source, spec.files, uploads, settings.server_max_upload)
                spec, hosts = await checked_submission(
                    source, spec, self._hosts_of(request.inventory, request.inventory_source),
                    settings, through_api=True, user=CALLER.get().user)
            except SpecError as exc:
                status = convert.spec_error_status(exc, {source: "job", SET_SOURCE: "overrides"})
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, status.message,
                             status) from exc
            array, app_ids = "", []
            with staged(uploads, spec.files) as files:
                if spec.array is not None:
                    array, app_ids = await self.service.submit_array(
                        spec, hosts, user=CALLER.get().user, secrets=dict(request.secret_env),
                        files=files, park=True)
                    app_id = app_ids[0]
                else:
                    app_id = await self.service.submit(spec, hosts, user=CALLER.get().user,
                                                       secrets=dict(request.secret_env),
                                                       files=files, park=True)
            report = await self.service.get_app(app_id)
            return pb.SubmitApplicationResponse(
                app_id=app_id, status=convert.to_message(report.view.status),
                revision=report.revision, array=array, app_ids=app_ids)

    async def ListApplications(self, request: pb.ListApplicationsRequest,  # noqa: N802
                               context: grpc.aio.ServicerContext
                               ) -> pb.ListApplicationsResponse:
        async with _rpc(context, "ListApplications"):
            page_size = _in_range("page_size", request.page_size, 0, 2**31 - 1)
            page_size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
            states = []
            for position, value in enumerate(request.states):
                try:
                    states.append(convert.app_state_from_proto(value, f"states[{position}]"))
                except convert.MessageError as exc:
                    raise RequestError(str(exc)) from exc
            filters = _filters_digest(sorted(s.value for s in states), request.user,
                                      request.name, request.include_history, request.array)
            after = _read_page_token(request.page_token, filters)
            apps = sorted((s for s in await self.service.list_apps(request.include_history,
                                                                    request.array)
                           if (not states or s.status.state in states)
                           and (not request.user or s.status.user == request.user)
                           and (not request.name or s.status.name == request.name)),
                          key=_position)
            if after is not None:
                apps = [s for s in apps if _position(s) > after]
            page, more = apps[:page_size], len(apps) > page_size
            token = _page_token(_position(page[-1]), filters) if more else ""
            return pb.ListApplicationsResponse(
                applications=[convert.summary_to_message(s) for s in page],
                next_page_token=token)

    async def GetApplication(self, request: pb.GetApplicationRequest,  # noqa: N802
                             context: grpc.aio.ServicerContext) -> pb.Application:
        async with _rpc(context, "GetApplication"):
            app_id = _check_app_id(request.app_id)
            events = _in_range("events", request.events, 0, MAX_EVENTS) or DEFAULT_EVENTS
            return await self.reads.get(app_id, events)

    async def WatchApplication(self, request: pb.WatchApplicationRequest,  # noqa: N802
                               context: grpc.aio.ServicerContext
                               ) -> AsyncIterator[pb.WatchApplicationResponse]:
        async with _rpc(context, "WatchApplication"):
            app_id = _check_app_id(request.app_id)
            after = _in_range("after_revision", request.after_revision, 0, 2**63 - 1)
            events = (_in_range("snapshot_events", request.snapshot_events, 0, MAX_EVENTS)
                      or DEFAULT_EVENTS)
            interval = request.progress_interval.ToTimedelta().total_seconds()
            if request.HasField("progress_interval") and interval != 0 and not \
                    1 <= interval <= 86400:
                raise RequestError(f"progress_interval: got {interval:g}s; must be at least "
                                   f"1s and at most 1 day, or unset")
            updates = watch_app(self.service, app_id, after, interval or 60.0)
            try:
                async for update in updates:
                    yield _watch_response(update, events)
            finally:
                await updates.aclose()

    async def KillApplication(self, request: pb.KillApplicationRequest,  # noqa: N802
                              context: grpc.aio.ServicerContext) -> pb.KillApplicationResponse:
        async with _rpc(context, "KillApplication"):
            app_id = _check_app_id(request.app_id)
            _check_reason(request.reason)
            user = await self._may_change(app_id, "kill")
            revision = await self.service.request_kill(
                app_id, request.reason or "killed by user", user)
            return pb.KillApplicationResponse(revision=revision)

    async def SucceedApplication(self, request: pb.SucceedApplicationRequest,  # noqa: N802
                                 context: grpc.aio.ServicerContext
                                 ) -> pb.SucceedApplicationResponse:
        async with _rpc(context, "SucceedApplication"):
            app_id = _check_app_id(request.app_id)
            _check_reason(request.reason)
            user = await self._may_change(app_id, "succeed")
            revision = await self.service.request_kill(app_id, request.reason, user,
                                                       outcome=AppState.SUCCEEDED)
            return pb.SucceedApplicationResponse(revision=revision)

    async def SuspendApplication(self, request: pb.SuspendApplicationRequest,  # noqa: N802
                                 context: grpc.aio.ServicerContext
                                 ) -> pb.SuspendApplicationResponse:
        async with _rpc(context, "SuspendApplication"):
            app_id = _check_app_id(request.app_id)
            _check_reason(request.reason)
            user = await self._may_change(app_id, "suspend")
            revision = await self.service.request_suspend(app_id, request.reason, user)
            return pb.SuspendApplicationResponse(revision=revision)

    async def ResumeApplication(self, request: pb.ResumeApplicationRequest,  # noqa: N802
                                context: grpc.aio.ServicerContext
                                ) -> pb.ResumeApplicationResponse:
        async with _rpc(context, "ResumeApplication"):
            app_id = _check_app_id(request.app_id)
            await self._may_change(app_id, "resume")
            return pb.ResumeApplicationResponse(revision=await self.service.resume(app_id))

    # ---- Topology and data ----------------------------------------------------------------

    async def ScaleRole(self, request: pb.ScaleRoleRequest,  # noqa: N802
                        context: grpc.aio.ServicerContext) -> pb.ScaleRoleResponse:
        async with _rpc(context, "ScaleRole"):
            app_id = _check_app_id(request.app_id)
            role = _check_name("role", request.role, ROLE_NAME_PATTERN, "a role name")
            user = await self._may_change(app_id, "scale")  # the count: scale_plan's to judge
            changed = await self.service.scale_role(app_id, role, request.executors, user)
            assert changed.role is not None and changed.previous is not None
            return pb.ScaleRoleResponse(
                role=convert.role_to_message(changed.role, changed.role.num),
                previous_executors=changed.previous, revision=changed.revision,
                change=convert.to_message(changed.change))

    async def ResizeRole(self, request: pb.ResizeRoleRequest,  # noqa: N802
                         context: grpc.aio.ServicerContext) -> pb.ResizeRoleResponse:
        async with _rpc(context, "ResizeRole"):
            app_id = _check_app_id(request.app_id)
            role = _check_name("role", request.role, ROLE_NAME_PATTERN, "a role name")
            user = await self._may_change(app_id, "resize")
            changed = await self.service.resize_role(
                app_id, role, request.cpu if request.HasField("cpu") else None,
                request.memory if request.HasField("memory") else None, user)
            assert changed.role is not None
            return pb.ResizeRoleResponse(
                role=convert.role_to_message(changed.role, changed.role.num),
                revision=changed.revision, change=convert.to_message(changed.change))

    async def AddRole(self, request: pb.AddRoleRequest,  # noqa: N802
                      context: grpc.aio.ServicerContext) -> pb.AddRoleResponse:
        async with _rpc(context, "AddRole"):
            app_id = _check_app_id(request.app_id)
            source = request.role_source or "role"
            if len(source) > 255 or not source.isprintable():
                raise RequestError("role_source: must be at most 255 printable characters")
            role_data = _parse_text(source, request.role, MAX_ROLE_BYTES)
            user = await self._may_change(app_id, "add a role to")
            changed = await self.service.add_role(app_id, role_data, user, source=source)
            assert changed.role is not None
            return pb.AddRoleResponse(role=convert.role_to_message(changed.role,
                                                                   changed.role.num),
                                      revision=changed.revision,
                                      change=convert.to_message(changed.change))

    async def RemoveRole(self, request: pb.RemoveRoleRequest,  # noqa: N802
                         context: grpc.aio.ServicerContext) -> pb.RemoveRoleResponse:
        async with _rpc(context, "RemoveRole"):
            app_id = _check_app_id(request.app_id)
            role = _check_name("role", request.role, ROLE_NAME_PATTERN, "a role name")
            user = await self._may_change(app_id, "remove a role of")
            changed = await self.service.remove_role(app_id, role, user)
            return pb.RemoveRoleResponse(revision=changed.revision,
                                         change=convert.to_message(changed.change))

    async def AddDataSource(self, request: pb.AddDataSourceRequest,  # noqa: N802
                            context: grpc.aio.ServicerContext) -> pb.AddDataSourceResponse:
        async with _rpc(context, "AddDataSource"):
            app_id = _check_app_id(request.app_id)
            stream = _check_name("stream", request.stream, STREAM_NAME_PATTERN,
                                 "a data stream name")
            source = _source_entry(request.source)
            user = await self._may_change(app_id, "add a data source to")
            changed = await self.service.add_data_source(app_id, stream, source, user)
            return pb.AddDataSourceResponse(files=changed.files or 0,
                                            revision=changed.revision,
                                            change=convert.to_message(changed.change))

    async def RecoverApplication(self, request: pb.RecoverApplicationRequest,  # noqa: N802
                                 context: grpc.aio.ServicerContext
                                 ) -> pb.RecoverApplicationResponse:
        async with _rpc(context, "RecoverApplication"):
            app_id = _check_app_id(request.app_id)
            await self._may_change(app_id, "recover")
            report = await self.service.get_app(app_id)
            host = request.host or report.view.spec.am.host  # None: this server's host
            return pb.RecoverApplicationResponse(host=await self.service.recover(app_id, host))

    async def _may_change(self, app_id: str, what: str) -> str:
        """The caller's user, when the caller may change the application; else
        PERMISSION_DENIED saying who may not ``what`` it (``kill``, ``scale``...)."""
        return await self._may(app_id, Action.CHANGE, what)

    async def _may(self, app_id: str, action: Action, what: str) -> str:
        """The caller's user, when the caller may do ``action`` to the application (on this
        site's ``server.read_access``); else PERMISSION_DENIED saying who may not ``what`` it
        (``kill``, ``read the logs of``...), who may, and why."""
        caller = CALLER.get()
        owner = (await self.service.get_app(app_id)).view.status.user
        if not may(caller, action, owner, self.service.settings.server_read_access):
            raise _Abort(grpc.StatusCode.PERMISSION_DENIED,
                         refusal(caller, what, app_id, owner, action))
        return caller.user

    # ---- Logs and hosts -------------------------------------------------------------------

    async def GetLogs(self, request: pb.GetLogsRequest,  # noqa: N802
                      context: grpc.aio.ServicerContext
                      ) -> AsyncIterator[pb.GetLogsResponse]:
        async with _rpc(context, "GetLogs"):
            app_id = _check_app_id(request.app_id)
            which = request.WhichOneof("source")
            executor = None
            if which == "am" and request.am:
                executor = "am"
            elif which == "executor":
                executor = f"{request.executor.role}-{request.executor.index}"
            offset = _in_range("offset", request.offset, 0, 2**63 - 1)
            if offset and executor is None:
                raise RequestError("offset: resumes one log; name an executor or the AM")
            await self._may(app_id, Action.READ_PRIVATE, "read the logs of")
            try:
                sources = await self.service.log_sources(
                    app_id, executor, executor_log=request.kind == pb.LOG_KIND_EXECUTOR)
            except (AppNotFoundError, LogNameError):
                raise
            except PrimusError as exc:  # no such executor, or none launched yet
                code = (grpc.StatusCode.NOT_FOUND if executor
                        else grpc.StatusCode.FAILED_PRECONDITION)
                raise _Abort(code, str(exc)) from exc
            async for message in _log_messages(self.service.read_logs(
                    app_id, sources, follow=request.follow,
                    offsets={source.name: offset for source in sources})):
                message.sources = len(sources)
                yield message

    async def ListHosts(self, request: pb.ListHostsRequest,  # noqa: N802
                        context: grpc.aio.ServicerContext) -> pb.ListHostsResponse:
        async with _rpc(context, "ListHosts"):
            hosts = self._hosts_of(request.inventory, request.inventory_source)
            if not request.probe:
                return pb.ListHostsResponse(hosts=[pb.HostInfo(host=convert.host_to_message(h))
                                                   for h in hosts])
            reports = await probe_hosts(self.service.settings, hosts)
            return pb.ListHostsResponse(hosts=[convert.host_report_to_message(r)
                                               for r in reports])

    # ---- Admission ------------------------------------------------------------------------

    async def ListQueue(self, request: pb.ListQueueRequest,  # noqa: N802
                        context: grpc.aio.ServicerContext) -> pb.ListQueueResponse:
        async with _rpc(context, "ListQueue"):
            limit = _in_range("limit", request.limit, 0, 2**31 - 1)
            apps, total = await self.service.waiting_apps(limit)
            return pb.ListQueueResponse(applications=[convert.queued_to_message(app)
                                                      for app in apps], total=total)

    async def GetHostUsage(self, request: pb.GetHostUsageRequest,  # noqa: N802
                           context: grpc.aio.ServicerContext) -> pb.GetHostUsageResponse:
        async with _rpc(context, "GetHostUsage"):
            hosts = self._hosts_of(request.inventory, request.inventory_source)
            usages = await host_usage(self.service.store, self.service.settings.prefix, hosts,
                                      self.service.admission)
            return pb.GetHostUsageResponse(hosts=[convert.usage_to_message(u) for u in usages])

    async def GetStacks(self, request: pb.GetStacksRequest,  # noqa: N802
                        context: grpc.aio.ServicerContext) -> pb.GetStacksResponse:
        async with _rpc(context, "GetStacks"):
            app_id = _check_app_id(request.app_id)
            await self._may(app_id, Action.READ_PRIVATE, "read the stacks of")
            found = await self.service.stacks(app_id, request.hang)
            response = pb.GetStacksResponse(
                stacks=[convert.to_message(s) for s in found.stacks], hangs=found.hangs)
            if found.hang is not None:
                response.hang.CopyFrom(convert.to_message(found.hang))
            return response

    async def GetWebhookKey(self, request: pb.GetWebhookKeyRequest,  # noqa: N802
                            context: grpc.aio.ServicerContext) -> pb.GetWebhookKeyResponse:
        async with _rpc(context, "GetWebhookKey"):
            app_id = _check_app_id(request.app_id)
            await self._may_change(app_id, "read the webhook key of")
            return pb.GetWebhookKeyResponse(key=self.service.webhook_key(app_id).decode())

    async def CreateSavepoint(self, request: pb.CreateSavepointRequest,  # noqa: N802
                              context: grpc.aio.ServicerContext) -> pb.CreateSavepointResponse:
        async with _rpc(context, "CreateSavepoint"):
            app_id = _check_app_id(request.app_id)
            if not 0 <= request.timeout_seconds <= MAX_SAVEPOINT_WAIT:
                raise RequestError(f"timeout_seconds: {request.timeout_seconds:g}; must be "
                                   f"between 0 and {MAX_SAVEPOINT_WAIT:g}")
            user = await self._may_change(app_id, "take a savepoint of")
            taken = await self.service.create_savepoint(
                app_id, user, request.timeout_seconds or TAKE_TIMEOUT)
            return pb.CreateSavepointResponse(savepoint=taken.model_dump_json())

    async def ListSavepoints(self, request: pb.ListSavepointsRequest,  # noqa: N802
                             context: grpc.aio.ServicerContext) -> pb.ListSavepointsResponse:
        async with _rpc(context, "ListSavepoints"):
            app_id = _check_app_id(request.app_id)
            # Each savepoint is its cut: the streams' sources and how far each got.
            await self._may(app_id, Action.READ_PRIVATE, "read the savepoints of")
            found = await self.service.savepoints(app_id)
            return pb.ListSavepointsResponse(savepoints=[s.model_dump_json() for s in found])

    async def DrainHost(self, request: pb.DrainHostRequest,  # noqa: N802
                        context: grpc.aio.ServicerContext) -> pb.DrainHostResponse:
        async with _rpc(context, "DrainHost"):
            caller = self._admin("drain hosts")
            if not request.host:
                raise RequestError("host: must name the host to drain")
            if not request.reason.strip():
                raise RequestError("reason: must say why the host is drained")
            _check_reason(request.reason)
            condition = await drain(self.service.store, self.service.settings.prefix,
                                    request.host, request.reason.strip(), caller.user,
                                    self._hosts_of("", ""))
            return pb.DrainHostResponse(condition=convert.to_message(condition))

    async def ResumeHost(self, request: pb.ResumeHostRequest,  # noqa: N802
                         context: grpc.aio.ServicerContext) -> pb.ResumeHostResponse:
        async with _rpc(context, "ResumeHost"):
            self._admin("resume hosts")
            if not request.host:
                raise RequestError("host: must name the host to resume")
            was = await resume(self.service.store, self.service.settings.prefix, request.host)
            return pb.ResumeHostResponse(
                **({} if was is None else {"condition": convert.to_message(was)}))

    @staticmethod
    def _admin(what: str) -> Identity:
        """The caller, when an admin; else PERMISSION_DENIED saying who may ``what``."""
        caller = CALLER.get()
        if not caller.admin:
            raise _Abort(grpc.StatusCode.PERMISSION_DENIED,
                         f"{caller.user} may not {what}; admins may (the tokens file's admins)")
        return caller

    def _hosts_of(self, inventory: str, source: str) -> list[Host]:
        """The server's inventory, or the hosts a request's ``inventory`` text selects from it.

        A request names hosts; how they are reached and what they offer is the server's
        inventory's (a request could otherwise have the server connect anywhere, or run
        commands on its own host, as its own account).

        Raises:
            SpecError: Naming ``inventory``: it is malformed, or names a host the server's
                inventory does not have.
        """
        if not inventory:
            return self.hosts
        source = source or "inventory"
        try:
            named = parse_inventory(inventory, source).hosts
        except InventoryError as exc:
            raise SpecError(SpecProblem("inventory", "", NO_VALUE, str(exc))) from exc
        known = {host.name: host for host in self.hosts}
        unknown = [host.name for host in named if host.name not in known]
        if unknown:
            raise SpecError(SpecProblem("inventory", "", NO_VALUE, (
                f"{source}: names hosts the server's inventory does not have: "
                f"{', '.join(unknown[:20])}; through the server, an inventory selects among "
                f"its hosts ({', '.join(list(known)[:20])})")))
        return [known[host.name] for host in named]


@contextlib.asynccontextmanager
async def _rpc(context: grpc.aio.ServicerContext, what: str) -> AsyncIterator[None]:
    """Run an RPC's body; end the RPC with the status its error maps to."""
    try:
        with _status_of(what):
            yield
    except _Abort as abort:
        if abort.details is not None:
            await context.abort_with_status(rpc_status.to_status(abort.details))
        await context.abort(abort.code, abort.message)


# ---- Converting answers ---------------------------------------------------------------------

async def _log_messages(lines: AsyncGenerator[LogLine, None]
                        ) -> AsyncIterator[pb.GetLogsResponse]:
    """Lines as messages: the lines of one source that are read already go in one message (at
    most :data:`LOG_LINES_PER_MESSAGE`); a line is never held back waiting for the next."""
    pending: asyncio.Task[LogLine] | None = None
    source, texts, end = "", list[str](), 0
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(lines))
            if texts:
                done, _ = await asyncio.wait({pending}, timeout=0)
                if not done or len(texts) >= LOG_LINES_PER_MESSAGE:
                    yield pb.GetLogsResponse(source=source, lines=texts, offset=end)
                    texts = []
                    continue
            try:
                line = await pending
            except StopAsyncIteration:
                pending = None
                break
            pending = None
            if texts and line.source != source:
                yield pb.GetLogsResponse(source=source, lines=texts, offset=end)
                texts = []
            source, end = line.source, line.end
            texts.append(line.text)
        if texts:
            yield pb.GetLogsResponse(source=source, lines=texts, offset=end)
    finally:
        await close_reading(lines, pending)


def _watch_response(update: WatchUpdate, events: int) -> pb.WatchApplicationResponse:
    message = pb.WatchApplicationResponse(revision=update.revision)
    if update.snapshot is not None:
        message.snapshot.CopyFrom(convert.report_to_message(update.snapshot, events))
    for change in update.changes:
        item = message.changes.add()
        if isinstance(change, StatusChanged):
            item.status.CopyFrom(convert.to_message(change.status))
        elif isinstance(change, LeaderChanged):
            item.am_leader.SetInParent()
            if change.leader is not None:
                item.am_leader.leader.CopyFrom(convert.to_message(change.leader))
        elif isinstance(change, RoleChanged):
            item.role.CopyFrom(convert.role_to_message(change.role, change.desired,
                                                       change.removed))
        elif isinstance(change, ExecutorChanged):
            item.executor.CopyFrom(convert.executor_to_message(change.executor, change.view))
        elif isinstance(change, StreamChanged):
            item.stream.CopyFrom(convert.stream_to_message(change.name, change.stats))
        elif isinstance(change, ClusterChanged):
            item.cluster.SetInParent()
            if change.cluster is not None:
                item.cluster.cluster.CopyFrom(convert.to_message(change.cluster))
        elif isinstance(change, KillRequested):
            item.kill.CopyFrom(convert.to_message(change.kill))
        elif isinstance(change, EventAdded):
            item.event.CopyFrom(convert.to_message(change.event))
    return message


# ---- Paging ---------------------------------------------------------------------------------

def _position(summary: AppSummary) -> tuple[float, str]:
    """Where an application is listed: newest submission first, ties by id."""
    return (-summary.status.submit_time, summary.status.app_id)


def _filters_digest(states: list[str], user: str, name: str, include_history: bool,
                    array: str = "") -> str:
    text = json.dumps([states, user, name, *([True] if include_history else []),
                       *([array] if array else [])])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _page_token(position: tuple[float, str], filters: str) -> str:
    data = json.dumps({"t": position[0], "id": position[1], "f": filters})
    return base64.urlsafe_b64encode(data.encode()).decode()


def _read_page_token(token: str, filters: str) -> tuple[float, str] | None:
    if not token:
        return None
    if len(token) > 1024:
        raise RequestError("page_token: too long; pass next_page_token as it was returned")
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        position = (float(data["t"]), str(data["id"]))
        issued_for = data["f"]
    except (ValueError, TypeError, KeyError, binascii.Error) as exc:
        raise RequestError("page_token: malformed; pass next_page_token as it was "
                           "returned") from exc
    if issued_for != filters:
        raise RequestError("page_token: was issued for other filters (states, user, name); "
                           "list again from the first page")
    return position

