"""The web UI: pages rendered on the server, kept live by server-sent events fed by etcd watches.

``primus server`` serves it beside the gRPC API, on the same event loop and over the same
:class:`~primus.client.service.ApplicationService`, so a page reads what ``primus status``
reads (live applications from etcd, finished ones from the history store) and an action on a
page (kill, scale) writes the same desired state, under the same authorization, as the API's.

Who views a page is known from the ``primus_token`` cookie, an API bearer token the viewer
signed in with (``/login``); with no way to authenticate configured, everyone acts as the
server's account, as on the API. Text from applications (names, diagnoses, log lines) is
escaped by the templates (autoescape) or set as text by the script; every page is sent with a
Content-Security-Policy that allows the package's own script and style only.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import hmac
import json
import logging
import secrets
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlencode

import jinja2
import yaml
from aiohttp import web
from aiohttp_sse import sse_response

from primus.client.access import Action, AuthConfig, Identity, identify, may, refusal
from primus.client.api import AppNotFoundError, AppReport, HostNotFoundError
from primus.client.queues import QUEUE_SHOWN, drain, host_usage, resume, waiting_apps
from primus.client.service import ApplicationService
from primus.client.watch import watch_app
from primus.config.inventory import Host, format_gpu_groups, format_gpu_tree
from primus.config.loader import SpecError
from primus.config.spec import MAX_EXECUTORS
from primus.errors import PrimusError
from primus.history.api import AppQuery, HistoryUnavailableError
from primus.state.records import (
    DataTask,
    TaskDone,
    TaskOwner,
    TaskProgress,
    decode,
    usage_texts,
)
from primus.state.states import AppState
from primus.store.api import Get, KeyValue, Resync
from primus.store.recipes import close_reading, watching
from primus.store.space import SpaceMonitor
from primus.ui import charts, pages
from primus.ui.samples import Samples

logger = logging.getLogger(__name__)

HERE = Path(__file__).parent
COOKIE = "primus_token"
MAX_REQUEST_BYTES = 64 * 1024
"""Largest request body (a form) the UI reads; larger ones are refused with 413."""
LIST_DEBOUNCE = 0.05
"""Seconds the applications page's live feed gathers status changes before it re-renders."""
LOG_BATCH = 0.05
"""Seconds a log feed gathers lines before it sends them."""
LOG_LINES_SHOWN = 5000
"""Lines a log page keeps; older ones scroll away (the download has them all)."""
MAX_REASON = 1024
TASKS_PER_TXN = 25
"""Tasks whose four keys one transaction reads (etcd allows 128 operations by default)."""

_SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; "
                                "img-src 'self'; connect-src 'self'; form-action 'self'; "
                                "frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class UiContext:
    """What the handlers share: the service, the inventory, how viewers are identified."""

    service: ApplicationService
    hosts: Sequence[Host]
    auth: AuthConfig
    secret: bytes
    """This server's key for the forms' anti-forgery tokens when nobody signs in."""
    templates: jinja2.Environment
    secure: bool
    """Served over HTTPS: the cookie is marked Secure."""
    space: SpaceMonitor | None = None
    """etcd's space as the server last read it: every page warns of an alarm or a full
    database."""
    samples: Samples = dataclasses.field(default_factory=Samples)
    """The series the server keeps from its watch (streams' stats, admission waits)."""


CONTEXT: web.AppKey[UiContext] = web.AppKey("primus_ui", UiContext)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(clock=pages.clock, size=pages.size, percent=pages.percent,
                       amount=pages.amount, gpu_tree=format_gpu_tree,
                       gpu_groups=format_gpu_groups)
    env.globals.update(duration=pages.duration, usage_texts=usage_texts)
    return env


def create_app(service: ApplicationService, hosts: Sequence[Host], auth: AuthConfig,
               secure: bool = False, space: SpaceMonitor | None = None,
               samples: Samples | None = None) -> web.Application:
    """The UI's aiohttp application over ``service``.

    Args:
        service: The deployment's application service (with its history store).
        hosts: The inventory the server was given (the hosts page shows them).
        auth: How viewers are identified (the API's configuration).
        secure: Served over HTTPS (cookies are then marked Secure).
        space: etcd's space, read by the server (``None``: no warnings of it).
        samples: The series the server keeps (``None``: none, the pictures over time are
            empty).

    ``/metrics`` is the server's (``primus/server/metrics.py`` adds it, with the scrapers'
    own sign-in): this application does not ask its viewers to sign in there.
    """
    app = web.Application(client_max_size=MAX_REQUEST_BYTES,
                          middlewares=[_errors, _identified])
    app[CONTEXT] = UiContext(service, tuple(hosts), auth, secrets.token_bytes(32),
                             _environment(), secure, space, samples or Samples())
    app.router.add_get("/", _root)
    app.router.add_get("/login", _login_page)
    app.router.add_post("/login", _login)
    app.router.add_post("/logout", _logout)
    app.router.add_get("/apps", _apps_page)
    app.router.add_get("/apps/live", _apps_live)
    app.router.add_get("/apps/{app}", _app_page)
    app.router.add_get("/apps/{app}/live", _app_live)
    app.router.add_get("/apps/{app}/config.yaml", _app_config)
    app.router.add_get("/apps/{app}/charts.json", _app_charts)
    app.router.add_get("/apps/{app}/data/{stream}", _tasks_page)
    app.router.add_post("/apps/{app}/kill", _kill)
    app.router.add_post("/apps/{app}/succeed", _succeed)
    app.router.add_post("/apps/{app}/suspend", _suspend)
    app.router.add_post("/apps/{app}/resume", _resume)
    app.router.add_post("/apps/{app}/savepoint", _savepoint)
    app.router.add_post("/apps/{app}/scale", _scale)
    app.router.add_post("/apps/{app}/resize", _resize)
    app.router.add_get("/apps/{app}/stacks", _stacks_page)
    app.router.add_get("/apps/{app}/stacks/{hang}/{rank}", _stacks_download)
    app.router.add_get("/apps/{app}/logs/{log}", _log_page)
    app.router.add_get("/apps/{app}/logs/{log}/live", _log_live)
    app.router.add_get("/apps/{app}/logs/{log}/download", _log_download)
    app.router.add_get("/arrays/{array}", _array_page)
    app.router.add_get("/hosts", _hosts_page)
    app.router.add_get("/hosts/charts.json", _hosts_charts)
    app.router.add_post("/hosts/{host}/drain", _drain_host)
    app.router.add_post("/hosts/{host}/resume", _resume_host)
    app.router.add_static("/static", HERE / "static", append_version=True)
    app.on_response_prepare.append(_secure_headers)
    return app


async def start(app: web.Application, listen: str, ssl_context: ssl.SSLContext | None
                ) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on ``listen`` (``HOST:PORT``, port 0: any free port); return the runner
    (``await runner.cleanup()`` stops it) and the UI's URL.

    Raises:
        OSError: It cannot listen there.
    """
    host, _, port = listen.rpartition(":")
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, int(port), ssl_context=ssl_context, shutdown_timeout=1.0)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    scheme = "https" if ssl_context is not None else "http"
    shown = f"[{host}]" if ":" in host else host
    return runner, f"{scheme}://{shown}:{bound}/"


# ---- Identity, errors, headers ------------------------------------------------------------

VIEWER: web.RequestKey[Identity] = web.RequestKey("primus_viewer", Identity)
_PUBLIC = ("/login", "/static/", "/metrics")


@web.middleware
async def _identified(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
    """Find who views; send an unknown viewer to sign in (a feed: 401)."""
    if request.path.startswith(_PUBLIC):
        return await handler(request)
    ctx = request.app[CONTEXT]
    viewer = identify(ctx.auth, (), request.cookies.get(COOKIE))
    if viewer is None:
        if request.method == "GET" and not request.path.endswith(("/live", "/download")):
            raise web.HTTPSeeOther("/login?" + urlencode({"next": request.path_qs}))
        raise web.HTTPUnauthorized(text="sign in first: /login")
    request[VIEWER] = viewer
    return await handler(request)


@web.middleware
async def _errors(request: web.Request,
                  handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                  ) -> web.StreamResponse:
    """Errors as pages: 404 for what does not exist, 400 for a bad request, 503 for a store
    that cannot answer; never a traceback."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        text = exc.text or ""
        if text == f"{exc.status}: {exc.reason}":  # aiohttp's own, e.g. no route matched
            text = f"no page {request.path[:200]}" if exc.status == 404 else exc.reason
        return _error_page(request, exc.status, text)
    except (AppNotFoundError, pages.UiNotFoundError) as exc:
        return _error_page(request, 404, str(exc))
    except (pages.UiRequestError, SpecError) as exc:
        return _error_page(request, 400, str(exc))
    except HistoryUnavailableError as exc:
        return _error_page(request, 503, str(exc))
    except PrimusError as exc:
        logger.warning("%s %s: %s", request.method, request.path, exc)
        return _error_page(request, 503, str(exc))
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception:
        logger.exception("%s %s failed", request.method, request.path)
        return _error_page(request, 500, "the server failed to answer this request; its log "
                                         "says why")


def _error_page(request: web.Request, status: int, message: str) -> web.Response:
    viewer = request.get(VIEWER)
    body = request.app[CONTEXT].templates.get_template("error.html").render(
        status=status, message=message, viewer=viewer, csrf=_csrf(request))
    return web.Response(status=status, text=body, content_type="text/html")


async def _secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.path.startswith("/static/"):
        response.headers.setdefault("Cache-Control", "no-store")


def _csrf(request: web.Request) -> str:
    """The anti-forgery token of the viewer's forms: derived from the viewer's sign-in token
    (a page of another site can read neither), else from this server's key."""
    ctx = request.app[CONTEXT]
    token = request.cookies.get(COOKIE, "")
    return hmac.new(ctx.secret if not token else hashlib.sha256(token.encode()).digest(),
                    b"primus-ui-form", hashlib.sha256).hexdigest()


def _same_origin(request: web.Request) -> None:
    """Refuse a form that a page of another site posted (browsers say whose in ``Origin``)."""
    origin = request.headers.get("Origin")
    if origin is not None and origin != "null" and \
            origin.split("://", 1)[-1] != request.host:
        raise web.HTTPForbidden(text=f"a form from {origin[:100]} is not accepted here")


async def _form(request: web.Request) -> dict[str, str]:
    """A posted form, after checking that it comes from a page of this UI."""
    _same_origin(request)
    form = {k: str(v) for k, v in (await request.post()).items()}
    if not hmac.compare_digest(form.get("csrf", ""), _csrf(request)):
        raise web.HTTPForbidden(text="the form has expired: reload the page and try again")
    return form


def _render(request: web.Request, template: str, **values: Any) -> web.Response:
    ctx = request.app[CONTEXT]
    body = ctx.templates.get_template(template).render(
        viewer=request.get(VIEWER), csrf=_csrf(request), now=time.time(),
        space_warnings=ctx.space.warnings() if ctx.space is not None else [], **values)
    return web.Response(text=body, content_type="text/html")


# ---- Sign-in ------------------------------------------------------------------------------

def _safe_next(value: str | None) -> str:
    """Where to go after signing in: a path of this UI only."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/apps"


async def _root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/apps")


async def _login_page(request: web.Request) -> web.StreamResponse:
    return _render(request, "login.html", next=_safe_next(request.query.get("next")),
                   error="")


async def _login(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    _same_origin(request)
    form = {k: str(v) for k, v in (await request.post()).items()}
    token = form.get("token", "").strip()
    target = _safe_next(form.get("next"))
    viewer = identify(ctx.auth, (), token) if token else None
    if viewer is None:
        response = _render(request, "login.html", next=target,
                           error="that token is not known to this server")
        response.set_status(401)
        return response
    response = web.HTTPSeeOther(target)
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", secure=ctx.secure,
                        path="/")
    logger.info("UI: %s signed in", viewer.user)
    raise response


async def _logout(request: web.Request) -> web.StreamResponse:
    await _form(request)
    response = web.HTTPSeeOther("/login")
    response.del_cookie(COOKIE, path="/")
    raise response


# ---- Applications -------------------------------------------------------------------------

async def _apps_table(ctx: UiContext, listed: pages.ListRequest) -> dict[str, Any]:
    """What the applications table shows: a page of applications and how far each got; the
    applications in etcd alone, and why, when the history cannot be read."""
    try:
        page, unavailable = await ctx.service.find_apps(listed.query), ""
    except HistoryUnavailableError as exc:
        page, unavailable = await ctx.service.find_apps(listed.query, include_history=False), \
            str(exc)

    return {"page": page, "listed": listed, "page_size": pages.PAGE_SIZE,
            "history_unavailable": unavailable,
            "progress": {s.status.app_id: s.progress for s in page.items}}


async def _apps_page(request: web.Request) -> web.StreamResponse:
    listed = pages.list_request(request.query)
    ctx = request.app[CONTEXT]
    # Read before the table: its live feed starts after this revision, so that no change
    # falls between the table and the feed.
    revision = (await ctx.service.store.txn([], [])).revision
    table = await _apps_table(ctx, listed)
    return _render(request, "apps.html", states=[s.value for s in AppState],
                   live_url=f"/apps/live?{listed.link(listed.page)}&after={revision}", **table)


async def _array_page(request: web.Request) -> web.StreamResponse:
    """A job array: its members' states counted, and each member (as ``primus status
    ARRAY`` and ``primus list --array``)."""
    array = pages.checked_array_id(request.match_info["array"])
    service = request.app[CONTEXT].service
    try:
        members, unavailable = await service.list_apps(include_history=True, array=array), ""
    except HistoryUnavailableError as exc:
        members, unavailable = await service.list_apps(array=array), str(exc)
    if not members:
        raise pages.UiNotFoundError(f"no job array {array!r}: no application is a member of it")
    members.sort(key=lambda s: s.status.array_index or 0)
    counts = collections.Counter(s.status.state.value for s in members)
    return _render(request, "array.html", array=array, members=members,
                   counts=sorted(counts.items()), history_unavailable=unavailable)


async def _apps_live(request: web.Request) -> web.StreamResponse:
    """The applications table again whenever an application's status or AM changes after
    revision ``after``."""
    revision = pages.revision(request.query.get("after", ""))
    listed = pages.list_request({k: v for k, v in request.query.items() if k != "after"})
    ctx = request.app[CONTEXT]
    store, prefix = ctx.service.store, ctx.service.settings.prefix
    async with watching(store, f"{prefix}/apps/", after=revision) as changes, \
            sse_response(request) as feed:
        async for item in changes:
            if not isinstance(item, Resync) and \
                    not item.key.endswith(("/status", "/am/leader")):
                continue
            # Gather the changes that come together, then render once.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + LIST_DEBOUNCE
            while (left := deadline - loop.time()) > 0:
                if await changes.next_within(left) is None:
                    break
            table = await _apps_table(ctx, listed)
            html = ctx.templates.get_template("_apps_table.html").render(
                now=time.time(), **table)
            await feed.send(json.dumps({"apps-table": html}), event="sections")
    return feed


async def _report(request: web.Request) -> AppReport:
    app_id = pages.checked_app_id(request.match_info["app"])
    return await request.app[CONTEXT].service.get_app(app_id)


def _viewer_may(ctx: UiContext, viewer: Identity, action: Action, report: AppReport) -> bool:
    """Whether ``viewer`` may do ``action`` to the application of ``report``, on this site."""
    return may(viewer, action, report.view.status.user, ctx.service.settings.server_read_access)


async def _check_may(request: web.Request, action: Action, what: str) -> AppReport:
    """The page's application, when the viewer may do ``action`` to it; else 403 saying who
    may not ``what`` it (``kill``, ``read the logs of``...), who may, and why."""
    report = await _report(request)
    viewer = request[VIEWER]
    if not _viewer_may(request.app[CONTEXT], viewer, action, report):
        raise web.HTTPForbidden(text=refusal(viewer, what, report.view.status.app_id,
                                             report.view.status.user, action))
    return report


def _figures(ctx: UiContext, report: AppReport, now: float
             ) -> tuple[charts.Timeline, dict[str, charts.StreamFigure]]:
    """The application's pictures: its executors' timeline and each stream's figures."""
    view = report.view
    status = view.status
    plans = {role: [(index, ex.plan) for index, ex in executors]
             for role, executors in view.executors_by_role().items()}
    timeline = charts.timeline(plans, report.events, status.state, status.submit_time,
                               status.finish_time, now)
    streams = {stream.name: charts.stream_figure(
        stream.name, ctx.samples.stream(status.app_id, stream.name),
        view.streams.get(stream.name)) for stream in view.spec.data}
    return timeline, streams


def _sections(ctx: UiContext, report: AppReport, viewer: Identity) -> dict[str, str]:
    now = time.time()
    timeline, streams = _figures(ctx, report, now)
    values = {"report": report, "view": report.view, "now": now, "viewer": viewer,
              "may_change": _viewer_may(ctx, viewer, Action.CHANGE, report),
              "may_read": _viewer_may(ctx, viewer, Action.READ_PRIVATE, report),
              "timeline": charts.timeline_svg(timeline),
              "stream_charts": {name: charts.stream_svg(figure, f"stream-chart-{name}")
                                for name, figure in streams.items()}}
    return {name: ctx.templates.get_template(f"_app_{name}.html").render(values)
            for name in ("summary", "executors", "data", "events")}


async def _runs(ctx: UiContext, report: AppReport) -> list[charts.Run]:
    """The runs of the application's job: those of its name and owner, oldest first, the
    last :data:`charts.RUNS_SHOWN` up to this one."""
    status = report.view.status
    query = AppQuery(user=status.user, name=status.name, limit=charts.RUNS_SHOWN * 4)
    try:
        page = await ctx.service.find_apps(query, progress=False)
    except HistoryUnavailableError:
        page = await ctx.service.find_apps(query, include_history=False, progress=False)
    now = time.time()
    runs = [charts.Run(s.status.app_id, s.status.state.value, s.status.submit_time,
                       max(0.0, (s.status.finish_time or now) -
                           (s.status.start_time or s.status.submit_time)),
                       s.status.app_id == status.app_id)
            for s in page.items if s.status.name == status.name
            and s.status.submit_time <= status.submit_time]
    return sorted(runs, key=lambda r: (r.submitted, r.app_id))[-charts.RUNS_SHOWN:]


async def _app_page(request: web.Request) -> web.StreamResponse:
    report = await _report(request)
    ctx = request.app[CONTEXT]
    viewer = request[VIEWER]
    live = not (report.view.status.state.terminal and report.leader is None)
    config = yaml.safe_dump(report.view.submitted.model_dump(mode="json", exclude_none=True),
                            sort_keys=False)
    runs = await _runs(ctx, report)
    return _render(request, "app.html", report=report, view=report.view,
                   sections=_sections(ctx, report, viewer), config=config,
                   runs=charts.runs_svg(runs) if len(runs) > 1 else "",
                   may_change=_viewer_may(ctx, viewer, Action.CHANGE, report),
                   live_url=(f"/apps/{report.view.status.app_id}/live?after={report.revision}"
                             if live and not report.archived else ""),
                   error=request.query.get("error", "")[:500])


async def _app_live(request: web.Request) -> web.StreamResponse:
    """The application page's sections again after every change, until it has ended."""
    app_id = pages.checked_app_id(request.match_info["app"])
    after = pages.revision(request.query.get("after", ""))
    ctx = request.app[CONTEXT]
    viewer = request[VIEWER]
    updates = watch_app(ctx.service, app_id, after, progress_interval=3600.0)
    report: AppReport | None = None
    async with sse_response(request) as feed:
        try:
            async for update in updates:
                if update.snapshot is None and not update.changes:
                    continue
                report = await ctx.service.get_app(app_id, previous=report)
                await feed.send(json.dumps(_sections(ctx, report, viewer)), event="sections")
            await feed.send("ended", event="end")
        finally:
            await updates.aclose()
    return feed


async def _app_charts(request: web.Request) -> web.StreamResponse:
    """The facts of the application page's pictures, as JSON."""
    report = await _report(request)
    ctx = request.app[CONTEXT]
    timeline, streams = _figures(ctx, report, time.time())
    return web.json_response({
        "timeline": dataclasses.asdict(timeline),
        "streams": {name: dataclasses.asdict(figure) for name, figure in streams.items()},
        "runs": [dataclasses.asdict(run) for run in await _runs(ctx, report)]})


async def _stacks_page(request: web.Request) -> web.StreamResponse:
    """Where each rank stood at a hang (``?hang=N``; the last by default), each one's stacks
    to download."""
    app_id = pages.checked_app_id(request.match_info["app"])
    hang = pages.hang_number(request.query.get("hang", ""))
    await _check_may(request, Action.READ_PRIVATE, "read the stacks of")
    found = await request.app[CONTEXT].service.stacks(app_id, hang)
    return _render(request, "stacks.html", app_id=app_id, found=found,
                   hang=found.hang.id if found.hang is not None else hang)


async def _stacks_download(request: web.Request) -> web.StreamResponse:
    """One rank's stacks at a hang, as text."""
    app_id = pages.checked_app_id(request.match_info["app"])
    hang = pages.hang_number(request.match_info["hang"])
    rank = request.match_info["rank"]
    await _check_may(request, Action.READ_PRIVATE, "read the stacks of")
    found = await request.app[CONTEXT].service.stacks(app_id, hang)
    stacks = next((s for s in found.stacks if f"{s.role}-{s.index}" == rank), None)
    if stacks is None:
        raise pages.UiNotFoundError(f"{app_id}: no stacks of {rank[:64]} at hang {hang}")
    return web.Response(text=stacks.text, content_type="text/plain", headers={
        "Content-Disposition": f'attachment; filename="{app_id}-hang{hang}-{rank}.txt"'})


async def _app_config(request: web.Request) -> web.StreamResponse:
    report = await _report(request)
    text = yaml.safe_dump(report.view.submitted.model_dump(mode="json", exclude_none=True),
                          sort_keys=False)
    return web.Response(text=text, content_type="application/yaml", headers={
        "Content-Disposition": f'attachment; filename="{report.view.status.app_id}.yaml"'})


async def _tasks_page(request: web.Request) -> web.StreamResponse:
    """A page of a data stream's tasks: where each is and where it was checkpointed."""
    report = await _report(request)
    stream = request.match_info["stream"]
    if not pages.STREAM_NAME.fullmatch(stream) or \
            stream not in {s.name for s in report.view.spec.data}:
        raise pages.UiNotFoundError(f"no data stream {stream[:80]!r} in "
                                    f"{report.view.status.app_id}")
    after = request.query.get("after", "")
    if after and not pages.TASK_ID.fullmatch(after):
        raise pages.UiRequestError(f"after: got {after[:40]!r}; must be a task id like "
                                   f"0000-00000012")
    keys = report.view.keys.stream(stream)
    store = request.app[CONTEXT].service.store
    read = await store.get_prefix(keys.prefix("tasks"), limit=pages.TASKS_PER_PAGE + 1,
                                  after=keys.key("tasks", after) if after else None)
    tasks = [decode(DataTask, kv.value, kv.key) for kv in read.kvs[:pages.TASKS_PER_PAGE]]
    more = len(read.kvs) > pages.TASKS_PER_PAGE
    kinds = ("owner", "progress", "done", "failed")
    reads: list[tuple[KeyValue, ...]] = []
    for start in range(0, len(tasks), TASKS_PER_TXN):  # etcd caps operations per transaction
        found = await store.txn([], [Get(keys.key(kind, t.task_id))
                                     for t in tasks[start:start + TASKS_PER_TXN]
                                     for kind in kinds])
        reads.extend(found.reads)
    rows = []
    for position, task in enumerate(tasks):
        owner, progress, done, failed = (reads[position * 4 + i] for i in range(4))
        rows.append({
            "task": task,
            "owner": decode(TaskOwner, owner[0].value) if owner else None,
            "progress": decode(TaskProgress, progress[0].value) if progress else None,
            "done": decode(TaskDone, done[0].value) if done else None,
            "failed": decode(TaskDone, failed[0].value) if failed else None,
        })
    return _render(request, "tasks.html", report=report, view=report.view, stream=stream,
                   rows=rows, next_after=tasks[-1].task_id if more and tasks else "",
                   archived=report.archived)


async def _may_change(request: web.Request, what: str) -> tuple[str, dict[str, str]]:
    form = await _form(request)
    report = await _check_may(request, Action.CHANGE, what)
    return report.view.status.app_id, form


def _back(app_id: str, error: str = "") -> web.HTTPSeeOther:
    """Back to the application's page, saying why the action was refused, if it was."""
    return _back_to(f"/apps/{app_id}", error)


def _back_to(page: str, error: str = "") -> web.HTTPSeeOther:
    """Back to ``page``, saying why the action was refused, if it was."""
    query = "?" + urlencode({"error": error[:500]}) if error else ""
    return web.HTTPSeeOther(f"{page}{query}")


async def _kill(request: web.Request) -> web.StreamResponse:
    user = request[VIEWER].user
    await _ask(request, "kill", f"killed from the web UI by {user}",
               lambda service, app_id, reason: service.request_kill(app_id, reason, user))


async def _succeed(request: web.Request) -> web.StreamResponse:
    user = request[VIEWER].user
    await _ask(request, "succeed", "from the web UI",
               lambda service, app_id, reason: service.request_kill(
                   app_id, reason, user, outcome=AppState.SUCCEEDED))


async def _suspend(request: web.Request) -> web.StreamResponse:
    user = request[VIEWER].user
    await _ask(request, "suspend", "from the web UI",
               lambda service, app_id, reason: service.request_suspend(app_id, reason, user))


async def _savepoint(request: web.Request) -> web.StreamResponse:
    user = request[VIEWER].user
    await _ask(request, "take a savepoint of", "",
               lambda service, app_id, _: service.create_savepoint(app_id, user))


async def _resume(request: web.Request) -> web.StreamResponse:
    await _ask(request, "resume", "", lambda service, app_id, _: service.resume(app_id))


async def _ask(request: web.Request, what: str, default_reason: str,
               call: Callable[[ApplicationService, str, str], Awaitable[object]]) -> NoReturn:
    """Ask the service to ``what`` the application (``call`` with the service, its id and the
    form's reason, else ``default_reason``), as the signed-in viewer under the API's
    authorization; back to its page, saying why not if it was refused."""
    app_id, form = await _may_change(request, what)
    reason = form.get("reason", "").strip() or default_reason
    if len(reason) > MAX_REASON:
        raise _back(app_id, f"reason: {len(reason)} characters; at most {MAX_REASON}")
    try:
        await call(request.app[CONTEXT].service, app_id, reason)
    except PrimusError as exc:
        raise _back(app_id, str(exc)) from exc
    logger.info("UI: %s asked to %s %s", request[VIEWER].user, what, app_id)
    raise _back(app_id)


async def _scale(request: web.Request) -> web.StreamResponse:
    app_id, form = await _may_change(request, "scale")
    role, text = form.get("role", ""), form.get("executors", "").strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_EXECUTORS:
        raise _back(app_id, f"executors: got {text[:20]!r}; must be a whole number from 1 to "
                            f"{MAX_EXECUTORS}")
    try:
        await request.app[CONTEXT].service.scale_role(app_id, role, int(text),
                                                      request[VIEWER].user)
    except PrimusError as exc:
        raise _back(app_id, str(exc)) from exc
    raise _back(app_id)


async def _resize(request: web.Request) -> web.StreamResponse:
    """Resize a role's executors (as ``primus resize``): an empty field keeps its value."""
    app_id, form = await _may_change(request, "resize")
    cpu_text, memory = form.get("cpu", "").strip(), form.get("memory", "").strip() or None
    try:
        cpu = float(cpu_text) if cpu_text else None
    except ValueError:
        raise _back(app_id, f"cpu: got {cpu_text[:20]!r}; must be a number of cores") from None
    try:
        await request.app[CONTEXT].service.resize_role(app_id, form.get("role", ""), cpu,
                                                       memory, request[VIEWER].user)
    except PrimusError as exc:
        raise _back(app_id, str(exc)) from exc
    raise _back(app_id)


# ---- Logs ---------------------------------------------------------------------------------

async def _log_sources(request: web.Request) -> tuple[str, str, bool, list[Any]]:
    app_id = pages.checked_app_id(request.match_info["app"])
    name = request.match_info["log"]
    if not pages.LOG_NAME.fullmatch(name):
        raise pages.UiNotFoundError(f"no log {name[:80]!r} in {app_id}: a log is 'am' or "
                                    f"<role>-<index>")
    kind = request.query.get("kind", "trainer")
    if kind not in ("trainer", "executor"):
        raise pages.UiRequestError(f"kind: got {kind[:40]!r}; allowed: trainer, executor")
    await _check_may(request, Action.READ_PRIVATE, "read the logs of")
    try:
        sources = await request.app[CONTEXT].service.log_sources(
            app_id, name, executor_log=kind == "executor")
    except AppNotFoundError:
        raise
    except PrimusError as exc:
        raise pages.UiNotFoundError(str(exc)) from exc
    return app_id, name, kind == "executor", sources


async def _log_page(request: web.Request) -> web.StreamResponse:
    app_id, name, executor_log, _ = await _log_sources(request)
    suffix = "?kind=executor" if executor_log else ""
    return _render(request, "log.html", app_id=app_id, name=name, executor_log=executor_log,
                   live_url=f"/apps/{app_id}/logs/{name}/live{suffix}",
                   download_url=f"/apps/{app_id}/logs/{name}/download{suffix}",
                   lines_shown=LOG_LINES_SHOWN)


async def _log_live(request: web.Request) -> web.StreamResponse:
    """The log's lines as they are written, in batches, until the application has ended."""
    app_id, _, _, sources = await _log_sources(request)
    service = request.app[CONTEXT].service
    lines = service.read_logs(app_id, sources, follow=True)
    pending: asyncio.Task[Any] | None = None
    async with sse_response(request) as feed:
        try:
            batch: list[str] = []
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(anext(lines))
                done, _ = await asyncio.wait({pending}, timeout=LOG_BATCH if batch else None)
                if not done:
                    await feed.send(json.dumps(batch), event="lines")
                    batch = []
                    continue
                pending = None
                try:
                    line = done.pop().result()
                except StopAsyncIteration:
                    break
                except PrimusError as exc:
                    await feed.send(json.dumps([f"[primus] reading the log failed: {exc}"]),
                                    event="lines")
                    break
                batch.append(line.text)
            if batch:
                await feed.send(json.dumps(batch), event="lines")
            await feed.send("ended", event="end")
        finally:
            await close_reading(lines, pending)
    return feed


async def _log_download(request: web.Request) -> web.StreamResponse:
    app_id, name, executor_log, sources = await _log_sources(request)
    response = web.StreamResponse(headers={
        "Content-Type": "text/plain; charset=utf-8",
        "Content-Disposition": f'attachment; filename="{app_id}-{name}'
                               f'{"-executor" if executor_log else ""}.log"'})
    await response.prepare(request)
    async for line in _lines(request.app[CONTEXT].service, app_id, sources):
        await response.write(line.encode() + b"\n")
    await response.write_eof()
    return response


async def _lines(service: ApplicationService, app_id: str, sources: list[Any]
                 ) -> AsyncIterator[str]:
    lines = service.read_logs(app_id, sources, follow=False)
    try:
        async for line in lines:
            yield line.text
    finally:
        await lines.aclose()


# ---- Hosts --------------------------------------------------------------------------------

async def _hosts_figures(ctx: UiContext) -> dict[str, Any]:
    """The hosts page's tables and pictures: every host's usage, the head of the queue (with
    thousands waiting, a page of every one would be megabytes), the waits of the last day."""
    store, prefix = ctx.service.store, ctx.service.settings.prefix
    usages, (queued, total) = await asyncio.gather(
        host_usage(store, prefix, ctx.hosts, ctx.service.admission),
        waiting_apps(store, prefix, ctx.service.admission, QUEUE_SHOWN))
    now = time.time()
    rows, hosts = charts.host_rows(usages)
    waiting = [(q.request.app_id, q.queue, max(0.0, now - q.request.submit_time))
               for q in queued[:charts.WAITING_SHOWN]]
    return {"usages": usages, "queued": queued, "queued_total": total, "rows": rows,
            "hosts": hosts, "waits": charts.queue_waits(ctx.samples.waits_of(now)),
            "waiting": waiting}


async def _hosts_page(request: web.Request) -> web.StreamResponse:
    figures = await _hosts_figures(request.app[CONTEXT])
    return _render(request, "hosts.html", usages=figures["usages"], queued=figures["queued"],
                   queued_total=figures["queued_total"],
                   usage_chart=charts.hosts_svg(figures["rows"], figures["hosts"]),
                   waits_chart=charts.waits_svg(figures["waits"], figures["waiting"]),
                   error=request.query.get("error", ""))


async def _hosts_charts(request: web.Request) -> web.StreamResponse:
    """The facts of the hosts page's pictures, as JSON."""
    figures = await _hosts_figures(request.app[CONTEXT])
    return web.json_response({
        "hosts": [dataclasses.asdict(row) for row in figures["rows"]],
        "hosts_total": figures["hosts"],
        "waits": [dataclasses.asdict(w) for w in figures["waits"]],
        "waiting": [{"app_id": a, "queue": q, "seconds": round(s, 3)}
                    for a, q, s in figures["waiting"]]})


async def _drain_host(request: web.Request) -> web.StreamResponse:
    """Take the host out of service (an admin, as ``DrainHost``); back to the hosts page,
    saying why not if it was refused."""
    form, user = await _admin_form(request, "drain hosts")
    reason = form.get("reason", "").strip()
    if not reason or len(reason) > MAX_REASON:
        raise _back_to("/hosts", f"reason: must say why, in at most {MAX_REASON} characters")
    ctx = request.app[CONTEXT]
    try:
        await drain(ctx.service.store, ctx.service.settings.prefix,
                    request.match_info["host"], reason, user, ctx.hosts)
    except HostNotFoundError as exc:
        raise _back_to("/hosts", str(exc)) from None
    raise _back_to("/hosts")


async def _resume_host(request: web.Request) -> web.StreamResponse:
    await _admin_form(request, "resume hosts")
    ctx = request.app[CONTEXT]
    await resume(ctx.service.store, ctx.service.settings.prefix, request.match_info["host"])
    raise _back_to("/hosts")


async def _admin_form(request: web.Request, what: str) -> tuple[dict[str, str], str]:
    """The posted form and the viewer's user, when the viewer is an admin; else 403."""
    form = await _form(request)
    viewer = request[VIEWER]
    if not viewer.admin:
        raise web.HTTPForbidden(text=f"{viewer.user} may not {what}; admins may")
    return form, viewer.user
