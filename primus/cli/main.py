"""The ``primus`` command."""

from __future__ import annotations

import asyncio
import datetime
import functools
import getpass
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.live import Live
from rich.text import Text

from primus import __version__
from primus.api.client import ApiError
from primus.cli import output
from primus.cli.remote import (
    SERVER_ENV,
    RemoteService,
    ServerConfig,
    connect,
    describe_error,
    server_config,
)
from primus.client.api import AppReport, AppSummary
from primus.client.commands import CommandService
from primus.client.embedded_server import EmbeddedServer
from primus.client.hosts import load_hosts, probe_hosts
from primus.client.preflight import CHECKED_AT_SUBMIT, check_job, checked_submission
from primus.client.queues import QUEUE_SHOWN
from primus.client.server_info import NO_SERVER
from primus.client.service import ApplicationService, is_array_id
from primus.config.loader import load_job_spec, read_config_file
from primus.config.site import Settings, load_settings
from primus.config.spec import LONG_DURATION, JobSpec, job_schema, parse_array_option
from primus.errors import PrimusError
from primus.history.api import History
from primus.history.archiver import archive_pass
from primus.server.command import server_run
from primus.state.records import SavepointState
from primus.state.states import AppState
from primus.store.api import Coordinator
from primus.store.connect import open_store
from primus.store.embedded import EmbeddedEtcd
from primus.store.space import recover_space, space_warnings

console = output.make_console()
err_console = output.make_console(stderr=True)
T = TypeVar("T")

EXIT_FAILED = 1
EXIT_USAGE = 2


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    output.print_line(err_console, output.error_text(message))
    sys.exit(code)


def handle_errors(func: Callable[..., T]) -> Callable[..., T]:
    """Turn Primus errors into one clear line on stderr and exit code 2 (a call the API
    server refused: its words, or what to fix to reach it)."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        except ApiError as exc:
            config = click.get_current_context().obj.get("server_config")
            _fail(describe_error(config, exc) if config else exc.details)
            raise  # unreachable: _fail exits
        except PrimusError as exc:
            _fail(str(exc))
            raise  # unreachable: _fail exits
    return wrapper


def _settings(ctx: click.Context) -> Settings:
    return load_settings(ctx.obj.get("etcd"))


def _server(ctx: click.Context) -> ServerConfig | None:
    """The API server this command goes through; ``None``: it reaches etcd itself."""
    if "server_config" not in ctx.obj:
        ctx.obj["server_config"] = server_config(_settings(ctx), ctx.obj["server"],
                                                 ctx.obj["token_file"])
    return ctx.obj["server_config"]


def _beside_etcd(ctx: click.Context, command: str) -> None:
    """Refuse a command that works on this host's embedded etcd, its server or the history
    database, when commands go through an API server."""
    config = _server(ctx)
    if config is not None:
        _fail(f"`primus {command}` works beside etcd, and commands here go through the API "
              f"server {config.address} (--server, ${SERVER_ENV} or the site defaults' "
              f"server.address); run it where etcd is, with `--server {NO_SERVER}`")


async def _revive(store: Coordinator, settings: Settings) -> None:
    """After this command started the embedded etcd: give every application no AM leads an AM
    candidate, and say so. The command itself goes on whatever happens here."""
    try:
        revived = await ApplicationService(store, settings).revive()
    except PrimusError as exc:
        output.print_line(err_console, output.warning_text(
            f"could not look for applications that no AM leads: {exc}"))
        return
    for each in revived:
        output.print_line(err_console, output.revived_text(each))


def _open_history(settings: Settings) -> History:
    """The history of the site settings (SQLAlchemy is loaded only by the commands that read
    it)."""
    from primus.history.sql_history import open_history  # noqa: PLC0415 - loads SQLAlchemy

    return open_history(settings)


def with_service(ctx: click.Context, body: Callable[[CommandService], Awaitable[T]],
                 history: bool = False) -> T:
    """Run ``body`` with the application service: through the configured API server, else on
    a connected store (starting the embedded etcd if needed, and then AM candidates for the
    applications that lost theirs); with ``history``, the service reads the history of the
    site settings too (the server reads its own)."""
    config = _server(ctx)
    if config is not None:
        return with_server(ctx, config, body)
    return with_direct(ctx, body, history)


def with_direct(ctx: click.Context, body: Callable[[ApplicationService], Awaitable[T]],
                history: bool = False) -> T:
    """Run ``body`` with the application service on a connected store, as
    :func:`with_service` does when no API server is configured."""
    async def run() -> T:
        store, settings = await open_store(_settings(ctx), after_embedded_start=_revive)
        archive = _open_history(settings) if history else None
        service = ApplicationService(store, settings, archive)
        try:
            return await body(service)
        finally:
            await service.close()
            if archive is not None:
                await archive.close()
            await store.close()
    return asyncio.run(run())


def with_server(ctx: click.Context, config: ServerConfig,
                body: Callable[[RemoteService], Awaitable[T]]) -> T:
    """Run ``body`` with the service of the API server ``config`` names."""
    async def remote() -> T:
        service = RemoteService(connect(config), _settings(ctx))
        try:
            return await body(service)
        finally:
            await service.close()
    return asyncio.run(remote())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--etcd", metavar="ENDPOINTS", envvar="PRIMUS_ETCD",
              help="etcd endpoints, comma-separated (default: site defaults, else the "
                   "embedded etcd under $PRIMUS_HOME).")
@click.option("--server", metavar="HOST:PORT", envvar=SERVER_ENV,
              help="Go through this Primus API server (default: the site defaults' "
                   "server.address; '-': none, reach etcd directly).")
@click.option("--token-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Your API token, for --server (default: $PRIMUS_TOKEN, else "
                   "~/.primus/token, mode 0600).")
@click.version_option(__version__, prog_name="primus")
@click.pass_context
def cli(ctx: click.Context, etcd: str | None, server: str | None,
        token_file: str | None) -> None:
    """Primus: run distributed training applications on bare-metal hosts."""
    ctx.obj = {"etcd": etcd, "server": server, "token_file": token_file}


def _load(job_file: str, overrides: tuple[str, ...], settings: Settings) -> JobSpec:
    return load_job_spec(Path(job_file), site_defaults=settings.job_defaults,
                         overrides=list(overrides))


INVENTORY_OPTION = click.option(
    "-i", "--inventory", type=click.Path(dir_okay=False),
    help="Ansible inventory (INI or YAML) or hostfile; default: the site defaults' inventory, "
         "else this host.")


@cli.command("submit")
@click.argument("job_file", type=click.Path(dir_okay=False))
@INVENTORY_OPTION
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a job-spec field, e.g. roles.worker.num=4 (repeatable).")
@click.option("--queue", metavar="Q", help="Submit to queue Q of the site configuration "
              "(as --set queue=Q, and winning over it; default: the job's queue, else the "
              "default queue).")
@click.option("--wait", is_flag=True, help="Follow the application until it ends; exit 0 "
              "only if it SUCCEEDED.")
@click.option("--from-savepoint", "savepoint", metavar="APP/NUMBER",
              help="Start the data streams from this savepoint (as --set "
                   "from_savepoint=APP/NUMBER): `primus savepoint list APP` shows them.")
@click.option("--array", "array", metavar="INDICES[%N]",
              help="Submit a job array, an application per index (0-199, 1,3,5-7), at most N "
                   "of them running at once with %N (as the job's array section; winning "
                   "over it). Prints the array's id; each member's trainers find "
                   "PRIMUS_ARRAY_INDEX in their environment.")
@click.pass_context
@handle_errors
def submit_cmd(ctx: click.Context, job_file: str, inventory: str | None,
               overrides: tuple[str, ...], queue: str | None, wait: bool,
               savepoint: str | None, array: str | None) -> None:
    """Submit JOB_FILE; print the application id on stdout (of a job array: the array's id,
    then each member's application id on a line of its own on stderr)."""
    settings = _settings(ctx)
    if queue is not None:  # a JSON string is YAML that stays a string (`null`, `yes` too)
        overrides += (f"queue={json.dumps(queue)}",)
    if savepoint is not None:
        overrides += (f"from_savepoint={json.dumps(savepoint)}",)
    if array is not None:
        try:
            overrides += (f"array={json.dumps(parse_array_option(array))}",)
        except ValueError as exc:
            _fail(str(exc))

    def submitted(array_id: str, app_ids: list[str]) -> None:
        click.echo(array_id or app_ids[0])
        if array_id:
            for app_id in app_ids:
                click.echo(app_id, err=True)

    async def follow(service: CommandService, app_ids: list[str]) -> AppReport | None:
        if not wait:
            return None
        reports = []
        for app_id in app_ids:  # a job array's members one after another
            with Live(console=err_console, transient=False, auto_refresh=False) as live:
                def show(report: AppReport) -> None:
                    live.update(output.progress(report), refresh=True)
                reports.append(await service.wait_for_end(app_id, on_change=show))
            err_console.print()
        # The first member that did not succeed, else the last: what the exit status says.
        return next((r for r in reports if r.view.status.state is not AppState.SUCCEEDED),
                    reports[-1])

    config = _server(ctx)
    if config is not None:  # the server loads and checks the job file it is sent
        async def send(service: RemoteService) -> AppReport | None:
            array_id, app_ids = await service.submit_file(job_file, inventory, overrides)
            submitted(array_id, app_ids)
            return await follow(service, app_ids)
        report = with_server(ctx, config, send)
    else:
        spec, hosts = asyncio.run(checked_submission(
            job_file, _load(job_file, overrides, settings), load_hosts(inventory, settings),
            settings))

        async def submit(service: ApplicationService) -> AppReport | None:
            # The embedded default's own server starts its AMs (the same account and host):
            # a queued application waits there as a record. Started first, and its AM keeper
            # awaited: a first submission would otherwise start an AM for each application
            # (two hundred members of an array, two hundred AMs) before the server runs.
            if settings.etcd is None and await asyncio.to_thread(_ensure_embedded_server,
                                                                 settings):
                await service.await_keeper(KEEPER_WAIT)
            if spec.array is not None:
                array_id, app_ids = await service.submit_array(spec, hosts,
                                                               park=settings.etcd is None)
            else:
                array_id, app_ids = "", [await service.submit(spec, hosts,
                                                              park=settings.etcd is None)]
            submitted(array_id, app_ids)
            return await follow(service, app_ids)
        # A savepoint is read from the history once its application's keys are gone.
        report = with_direct(ctx, submit, history=bool(spec.from_savepoint))
    if report is not None:
        err_console.print(output.status_renderable(report))
        if report.view.status.state is not AppState.SUCCEEDED:
            sys.exit(EXIT_FAILED)


def _members_of(array: str, summaries: list[AppSummary]) -> list[AppSummary]:
    """Job array ``array``'s members (``summaries``, as listed for it), by index; refused
    when there is none."""
    members = sorted(summaries, key=lambda s: s.status.array_index or 0)
    if not members:
        _fail(f"no job array {array}: no application is a member of it")
    return members


KEEPER_WAIT = 10.0
"""Seconds a submission on the embedded default waits for its server's AM keeper to be
elected (it then starts the AMs itself, as with no server)."""


def _ensure_embedded_server(settings: Settings) -> bool:
    """Start the embedded default's API server if it does not run; whether it runs. Its AM
    keeper starts the AMs of queued applications once admitted; it archives the finished
    applications to the history and deletes their keys after the retention. An application
    submitted without it runs all the same (its AM started by the submission)."""
    try:
        EmbeddedServer(settings.home).ensure_running()
    except PrimusError as exc:
        output.print_line(err_console, output.warning_text(
            f"the API server, which starts queued applications' AMs and archives finished "
            f"ones, did not start: {exc}"))
        return False
    return True


@cli.command("list")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("-a", "--all", "everything", is_flag=True,
              help="Also the applications archived in the history (their keys deleted from "
                   "etcd after the retention).")
@click.option("--array", "array", metavar="ARRAY",
              help="Only the members of this job array, by index.")
@click.pass_context
@handle_errors
def list_cmd(ctx: click.Context, fmt: str, everything: bool, array: str | None) -> None:
    """List applications, newest first."""
    summaries = with_service(ctx, lambda service: service.list_apps(everything, array or ""),
                             history=everything)
    if array is not None:
        summaries = _members_of(array, summaries)
    if fmt == "json":
        output.print_json(console, output.apps_json(summaries))
    else:
        console.print(output.apps_table(summaries))


@cli.command("status")
@click.argument("app_id")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("-e", "--events", "events", type=click.IntRange(min=0), default=10, show_default=True,
              help="How many of the latest events to show (the table form; JSON has all).")
@click.pass_context
@handle_errors
def status_cmd(ctx: click.Context, app_id: str, fmt: str, events: int) -> None:
    """Show an application's state, its executors and its latest events; of a job array
    (its id), how many members are in each state, and each member."""
    if is_array_id(app_id):
        members = _members_of(app_id, with_service(
            ctx, lambda service: service.list_apps(True, app_id), history=True))
        if fmt == "json":
            output.print_json(console, output.array_json(app_id, members))
        else:
            console.print(output.array_renderable(app_id, members))
        return
    report = with_service(ctx, lambda service: service.get_app(app_id), history=True)
    if fmt == "json":
        output.print_json(console, output.status_json(report))
    else:
        console.print(output.status_renderable(report, events=events))


@cli.command("kill")
@click.argument("app_id")
@click.option("--reason", default="killed by user", show_default=True)
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait.")
@click.pass_context
@handle_errors
def kill_cmd(ctx: click.Context, app_id: str, reason: str, timeout: float) -> None:
    """Stop an application: every executor and trainer is stopped, state KILLED. Of a job
    array (its id): every member that has not ended."""
    if is_array_id(app_id):
        async def kill_members(service: CommandService) -> list[AppReport]:
            members = _members_of(app_id, await service.list_apps(array=app_id))
            return [await service.kill(m.status.app_id, reason, timeout) for m in members
                    if not m.status.state.terminal]
        for report in with_service(ctx, kill_members):
            output.print_line(console, f"{report.view.status.app_id} "
                                       f"{report.view.status.state.value}")
        return
    report = with_service(ctx, lambda service: service.kill(app_id, reason, timeout))
    output.print_line(console, f"{app_id} {report.view.status.state.value}")


@cli.command("succeed")
@click.argument("app_id")
@click.option("--reason", default="", help="Why it is done (recorded with who asked).")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait.")
@click.pass_context
@handle_errors
def succeed_cmd(ctx: click.Context, app_id: str, reason: str, timeout: float) -> None:
    """End a running application as succeeded: every executor and trainer is stopped
    gracefully, state SUCCEEDED (an evaluator or a person decided it has done its work)."""
    report = with_service(ctx, lambda service: service.kill(app_id, reason, timeout,
                                                            outcome=AppState.SUCCEEDED))
    output.print_line(console, f"{app_id} {report.view.status.state.value}")


@cli.command("suspend")
@click.argument("app_id")
@click.option("--reason", default="", help="Why (recorded with who asked).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait.")
@click.pass_context
@handle_errors
def suspend_cmd(ctx: click.Context, app_id: str, reason: str, timeout: float) -> None:
    """Suspend a running application: every executor stopped gracefully, its hosts given up,
    its data progress kept; state SUSPENDED until `primus resume`."""
    report = with_service(ctx, lambda service: service.suspend(app_id, reason,
                                                               getpass.getuser(), timeout))
    output.print_line(console, f"{app_id} {report.view.status.state.value}")


@cli.command("resume")
@click.argument("app_id")
@click.pass_context
@handle_errors
def resume_cmd(ctx: click.Context, app_id: str) -> None:
    """Resume a suspended application: it is queued again, its executors start anew and its
    data streams go on from their checkpoints."""
    with_service(ctx, lambda service: service.resume(app_id))
    output.print_line(console, f"{app_id} resumed")


@cli.command("scale", context_settings={"ignore_unknown_options": True})  # N may be -1
@click.argument("app_id")
@click.argument("role")
@click.argument("executors", type=int, metavar="N")
@click.pass_context
@handle_errors
def scale_cmd(ctx: click.Context, app_id: str, role: str, executors: int) -> None:
    """Give ROLE of APP_ID N executors while it runs: up launches new indices, down stops the
    highest ones gracefully. The AM carries the change out; `primus status` shows it."""
    changed = with_service(ctx, lambda service: service.scale_role(
        app_id, role, executors, getpass.getuser()))
    output.print_line(console, output.change_text(changed))


@cli.command("resize")
@click.argument("app_id")
@click.argument("role")
@click.option("--cpu", type=float, help="cores each executor reserves")
@click.option("--memory", metavar="SIZE", help="memory each executor reserves (2Gi, 512Mi)")
@click.pass_context
@handle_errors
def resize_cmd(ctx: click.Context, app_id: str, role: str, cpu: float | None,
               memory: str | None) -> None:
    """Resize ROLE of APP_ID while it runs: each executor reserves --cpu cores and --memory.
    Admission grants it on their hosts where they have room (else it waits: `primus queue`
    says why), and the executors apply it to their trainers without restarting them."""
    changed = with_service(ctx, lambda service: service.resize_role(
        app_id, role, cpu, memory, getpass.getuser()))
    output.print_line(console, output.change_text(changed))


@cli.group("role")
def role_group() -> None:
    """Add a role to a running application, or remove one."""


@role_group.command("add")
@click.argument("app_id")
@click.argument("role_file", metavar="FILE", type=click.Path(dir_okay=False))
@click.pass_context
@handle_errors
def role_add(ctx: click.Context, app_id: str, role_file: str) -> None:
    """Add the role in FILE (YAML or JSON: one entry of a job file's `roles`) to APP_ID; the
    AM places and launches its executors."""
    role = read_config_file(role_file)
    changed = with_service(ctx, lambda service: service.add_role(
        app_id, role, getpass.getuser(), source=role_file))
    output.print_line(console, output.change_text(changed))


@role_group.command("remove")
@click.argument("app_id")
@click.argument("role")
@click.pass_context
@handle_errors
def role_remove(ctx: click.Context, app_id: str, role: str) -> None:
    """Remove ROLE from APP_ID; the AM stops its executors gracefully."""
    changed = with_service(ctx, lambda service: service.remove_role(
        app_id, role, getpass.getuser()))
    output.print_line(console, output.change_text(changed))


@cli.group("data")
def data_group() -> None:
    """Add training data to a running application."""


@data_group.command("add")
@click.argument("app_id")
@click.argument("stream")
@click.argument("source")
@click.option("--start", metavar="TIME",
              help="First time partition, when SOURCE has time fields ({{YYYY}}...).")
@click.option("--end", metavar="TIME", help="Last time partition (inclusive).")
@click.option("--success-marker", metavar="NAME",
              help="Read a partition only once this file exists in its directory.")
@click.option("--table", "table_format", type=click.Choice(["delta", "iceberg"]),
              help="SOURCE is a table of this format, not a glob: a Delta table's directory, or "
                   "an Iceberg table's name (db.table) in --catalog.")
@click.option("--catalog", metavar="NAME",
              help="With --table iceberg: the catalog, as pyiceberg's configuration names it.")
@click.option("--version", "table_version", type=click.IntRange(min=0), metavar="N",
              help="With --table: the Delta version or Iceberg snapshot to read (default: the "
                   "latest now).")
@click.pass_context
@handle_errors
def data_add(ctx: click.Context, app_id: str, stream: str, source: str, start: str | None,
             end: str | None, success_marker: str | None, table_format: str | None,
             catalog: str | None, table_version: int | None) -> None:
    """Add the files of SOURCE (a path or URL glob; a relative path is taken from the current
    directory) to data stream STREAM of APP_ID; their tasks are read like the stream's others.
    With --table, SOURCE is a table, read at the version it has now (or --version)."""
    if (table_version is not None or catalog is not None) and table_format is None:
        raise click.UsageError("--version and --catalog are a table's: give --table too")
    location = source if "://" in source else os.path.abspath(source)
    entry: dict[str, object] = {"path": location, "start": start, "end": end,
                                "success_marker": success_marker}
    if table_format == "delta":
        entry = {**entry, "path": None, "table": {
            "format": "delta", "path": location, "version": table_version, "catalog": catalog}}
    elif table_format == "iceberg":
        entry = {**entry, "path": None, "table": {
            "format": "iceberg", "catalog": catalog, "name": source, "snapshot": table_version}}
    if "table" in entry:
        entry["table"] = {k: v for k, v in entry["table"].items()  # type: ignore[attr-defined]
                          if v is not None}
    changed = with_service(ctx, lambda service: service.add_data_source(
        app_id, stream, {k: v for k, v in entry.items() if v is not None}, getpass.getuser()))
    output.print_line(console, output.change_text(changed))


@cli.group("savepoint")
def savepoint_group() -> None:
    """Savepoints of an application's data streams: take, list, show (start another from one
    with `primus submit --from-savepoint APP/NUMBER`)."""


@savepoint_group.command("create")
@click.argument("app_id")
@click.option("--timeout", type=click.FloatRange(min=1, max=600), default=60.0,
              show_default=True, help="Seconds to wait for the AM to take it.")
@click.pass_context
@handle_errors
def savepoint_create(ctx: click.Context, app_id: str, timeout: float) -> None:
    """Take a savepoint of APP_ID's data streams: its AM reads every stream at one revision.
    Prints APP_ID/NUMBER on stdout once taken."""
    taken = with_service(ctx, lambda service: service.create_savepoint(
        app_id, getpass.getuser(), timeout))
    output.print_line(err_console, output.savepoint_text(app_id, taken).rstrip("\n"))
    click.echo(f"{app_id}/{taken.number}")
    if taken.state is not SavepointState.TAKEN:
        sys.exit(EXIT_FAILED)


@savepoint_group.command("list")
@click.argument("app_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, as stored.")
@click.pass_context
@handle_errors
def savepoint_list(ctx: click.Context, app_id: str, as_json: bool) -> None:
    """APP_ID's savepoints, oldest first."""
    found = with_service(ctx, lambda service: service.savepoints(app_id), history=True)
    for savepoint in found:
        click.echo(savepoint.model_dump_json() if as_json
                   else output.savepoint_text(app_id, savepoint), nl=as_json)
    if not found and not as_json:
        output.print_line(err_console, f"{app_id}: no savepoint")


@savepoint_group.command("show")
@click.argument("savepoint")
@click.option("--json", "as_json", is_flag=True, help="As stored (JSON).")
@click.pass_context
@handle_errors
def savepoint_show(ctx: click.Context, savepoint: str, as_json: bool) -> None:
    """Savepoint APP_ID/NUMBER: each stream's cut, sources and settings."""
    from primus.data.savepoints import parse_ref  # noqa: PLC0415

    app_id, number = parse_ref(savepoint)
    found = with_service(ctx, lambda service: service.savepoints(app_id), history=True)
    match = next((s for s in found if s.number == number), None)
    if match is None:
        _fail(f"{app_id} has no savepoint {number} (`primus savepoint list {app_id}`)",
              EXIT_FAILED)
        return
    click.echo(match.model_dump_json(indent=2) if as_json
               else output.savepoint_text(app_id, match, detail=True), nl=as_json)


@cli.command("notify-key")
@click.argument("app_id")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the key here (0600); an existing file is never overwritten.")
@click.pass_context
@handle_errors
def notify_key_cmd(ctx: click.Context, app_id: str, out: Path) -> None:
    """Write the key APP_ID's own webhooks (its job's notify:) are signed with: a receiver
    checks X-Primus-Signature-256 with it. Its owner and admins only."""
    from primus.private_files import write_private  # noqa: PLC0415

    if out.exists():
        _fail(f"--out: {out} exists; give a new file (a key is never overwritten)")

    key = with_service(ctx, lambda service: service.app_webhook_key(app_id))
    write_private(out, key + b"\n")
    output.print_line(err_console, f"the webhook key of {app_id} written to {out}")


@cli.command("recover")
@click.argument("app_id")
@click.option("--host", "host_name", metavar="NAME",
              help="Inventory host to start the AM on (default: this host).")
@click.pass_context
@handle_errors
def recover_cmd(ctx: click.Context, app_id: str, host_name: str | None) -> None:
    """Start a new AM candidate for APP_ID: it takes over once no AM leads, adopting every
    running executor without restarting it."""
    host = with_service(ctx, lambda service: service.recover(app_id, host_name))
    output.print_line(console, f"started an AM candidate for {app_id} on {host}")


@cli.command("logs")
@click.argument("app_id")
@click.argument("executor", required=False, metavar="[ROLE-INDEX|am]")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the app ends.")
@click.option("--executor-log", is_flag=True,
              help="Show the executor's own log instead of its trainer's output.")
@click.option("--stacks", is_flag=True,
              help="Show the trainers' stacks taken at the last hang (a role's hang_timeout) "
                   "instead: where each rank stood, then every thread.")
@click.option("--hang", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --stacks: those of hang N (the last few are kept).")
@click.pass_context
@handle_errors
def logs_cmd(ctx: click.Context, app_id: str, executor: str | None, follow: bool,
             executor_log: bool, stacks: bool, hang: int | None) -> None:
    """Print trainer logs: one executor's, or every executor's prefixed with [role-index]."""
    if hang is not None and not stacks:
        raise click.UsageError("--hang: goes with --stacks")
    if stacks:
        if follow or executor_log:
            raise click.UsageError("--stacks: cannot be combined with --follow or "
                                   "--executor-log")
        found = with_service(ctx, lambda service: service.stacks(app_id, hang or 0))
        click.echo(output.stacks_text(app_id, found, executor), nl=False)
        return

    async def body(service: CommandService) -> None:
        async for line, prefixed in service.logs(app_id, executor, executor_log, follow):
            click.echo(output.log_line(line, prefixed))

    with_service(ctx, body)


@cli.command("queue")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("--limit", type=click.IntRange(min=0), default=QUEUE_SHOWN, show_default=True,
              help="Only the first N in admission order (0: every one, which at ten thousand "
                   "waiting takes seconds to print); the table says how many more wait.")
@click.pass_context
@handle_errors
def queue_cmd(ctx: click.Context, fmt: str, limit: int) -> None:
    """List the applications waiting for admission, in admission order: position, queue,
    user, executors waiting, since when and why; the first 100 unless --limit says."""
    apps, total = with_service(ctx, lambda service: service.waiting_apps(limit))
    if fmt == "json":
        output.print_json(console, output.queue_json(apps))
    else:
        console.print(output.queue_renderable(apps, total))


@cli.group("history")
def history_group() -> None:
    """The history of finished applications (site settings' history.url; default a SQLite
    file under $PRIMUS_HOME/history)."""


def _before(value: str) -> float:
    """``--before``: an ISO date or time (local time unless it names a zone), or a duration
    (``30d``: older than 30 days), as seconds since the epoch."""
    try:
        return time.time() - LONG_DURATION.parse(value)
    except ValueError:
        pass
    try:
        return datetime.datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise PrimusError(f"--before: got {value!r}; must be an ISO date or time (2026-11-01, "
                          f"2026-11-01T12:00) or a duration: 90s, 12h, 30d (older than "
                          f"that)") from None


@history_group.command("prune")
@click.option("--before", "before", required=True, metavar="DATE|DURATION",
              help="Delete the applications that finished before DATE (ISO), or longer ago "
                   "than DURATION (30d).")
@click.pass_context
@handle_errors
def history_prune(ctx: click.Context, before: str) -> None:
    """Delete from the history the applications that finished before a date; their keys in
    etcd, if any are left, are not touched."""
    _beside_etcd(ctx, "history prune")
    moment = _before(before)

    async def run() -> int:
        archive = _open_history(_settings(ctx))
        try:
            return await archive.prune(moment)
        finally:
            await archive.close()
    pruned = asyncio.run(run())
    date = datetime.datetime.fromtimestamp(moment).isoformat(" ", "seconds")
    output.print_line(console, f"pruned {pruned} application(s) that finished before {date}")


@history_group.command("archive")
@click.pass_context
@handle_errors
def history_archive(ctx: click.Context) -> None:
    """Run one archive pass now (the server runs them by itself): archive the applications
    that have ended, delete from etcd the keys of those whose retention has passed."""
    _beside_etcd(ctx, "history archive")

    async def body(service: ApplicationService) -> None:
        assert service.history is not None  # with_direct(history=True) gives one
        report = await archive_pass(service.store, service.settings, service.history,
                                    time.time())
        for app_id in report.archived:
            output.print_line(console, f"archived {app_id}")
        for app_id in report.deleted:
            output.print_line(console, f"deleted the keys of {app_id} from etcd")
        output.print_line(err_console, f"{len(report.archived)} archived, "
                                       f"{len(report.deleted)} deleted from etcd")
    with_direct(ctx, body, history=True)


@cli.group("hosts")
def hosts_group() -> None:
    """Show and check the hosts of an inventory, and what applications hold on them."""


@hosts_group.command("list")
@INVENTORY_OPTION
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handle_errors
def hosts_list(ctx: click.Context, inventory: str | None, fmt: str) -> None:
    """Print the resolved hosts, their connection settings and resources, without connecting
    (through a server: its inventory, or the hosts of INVENTORY among it)."""
    config = _server(ctx)
    if config is not None:
        hosts = with_server(ctx, config, lambda service: service.hosts(inventory))
    else:
        hosts = load_hosts(inventory, _settings(ctx))
    if fmt == "json":
        output.print_json(console, output.hosts_json(hosts))
    else:
        console.print(output.hosts_table(hosts))


@hosts_group.command("check")
@INVENTORY_OPTION
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handle_errors
def hosts_check(ctx: click.Context, inventory: str | None, fmt: str) -> None:
    """Probe every host in parallel over SSH: reachable or why not, cpu, memory, gpus, load.

    Exits 1 when a host is not ready.
    """
    settings = _settings(ctx)
    config = _server(ctx)
    if config is not None:
        reports = with_server(ctx, config, lambda service: service.probe_hosts(inventory))
    else:
        reports = asyncio.run(probe_hosts(settings, load_hosts(inventory, settings)))
    if fmt == "json":
        output.print_json(console, output.reports_json(reports))
    else:
        console.print(output.reports_table(reports))
    if not all(report.ok for report in reports):
        sys.exit(EXIT_FAILED)


@hosts_group.command("usage")
@click.option("-i", "--inventory", type=click.Path(dir_okay=False),
              help="Also show this inventory's hosts (Ansible INI or YAML, or hostfile), those "
                   "no application has used yet included.")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handle_errors
def hosts_usage(ctx: click.Context, inventory: str | None, fmt: str) -> None:
    """Per host admission knows: its capacity, what each application holds there (cpu,
    memory, GPU devices) and what is free."""
    usages = with_service(ctx, lambda service: service.host_usage(inventory))
    if fmt == "json":
        output.print_json(console, output.usage_json(usages))
    else:
        console.print(output.usage_table(usages))


@hosts_group.command("drain")
@click.argument("host")
@click.option("--reason", required=True, help="Why, in words: shown with the host and to the "
                                              "applications that wait for it.")
@click.pass_context
@handle_errors
def hosts_drain(ctx: click.Context, host: str, reason: str) -> None:
    """Take HOST out of service: admission places nothing new there until `primus hosts
    resume`; what runs there goes on. Through a server, admins only."""
    if not reason.strip():
        raise click.BadParameter("must say why the host is drained", param_hint="--reason")

    condition = with_service(ctx, lambda service: service.drain_host(host, reason.strip()))
    console.print(Text(f"{host}: {condition.describe()}"))


@hosts_group.command("resume")
@click.argument("host")
@click.pass_context
@handle_errors
def hosts_resume(ctx: click.Context, host: str) -> None:
    """Put HOST back in service, drained or quarantined. Through a server, admins only."""
    was = with_service(ctx, lambda service: service.resume_host(host))
    console.print(Text(f"{host}: in service" + (f" (was {was.describe()})" if was else
                                                  " (it was)")))


@cli.group("spec")
def spec_group() -> None:
    """Validate job files and show their schema."""


@spec_group.command("check")
@click.argument("job_file", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
@click.pass_context
@handle_errors
def spec_check(ctx: click.Context, job_file: str, overrides: tuple[str, ...]) -> None:
    """Validate JOB_FILE and print it with every default applied.

    Checks what `primus submit` checks, except what needs the target hosts or the data; those
    are named on stderr.
    """
    settings = _settings(ctx)
    spec = check_job(job_file, _load(job_file, overrides, settings), queues=settings.queues,
                     notify=settings.notify, domain_levels=settings.domain_levels)
    output.print_json(console, spec.model_dump(mode="json"))
    output.print_line(err_console, f"not checked here, checked by `primus submit`: "
                                   f"{CHECKED_AT_SUBMIT}")


@spec_group.command("schema")
def spec_schema() -> None:
    """Print the JSON Schema of job files."""
    console.file.write(json.dumps(job_schema(), indent=2) + "\n")


@cli.group("etcd")
def etcd_group() -> None:
    """Manage the embedded etcd (used when no etcd is configured), and the space of whichever
    etcd the settings name."""


@etcd_group.command("status")
@click.pass_context
@handle_errors
def etcd_status(ctx: click.Context) -> None:
    """Print the embedded etcd's client URL, or say it is not running (exit 1)."""
    _beside_etcd(ctx, "etcd status")
    info = EmbeddedEtcd(_settings(ctx).home).status()
    if info is None:
        output.print_line(err_console, "embedded etcd is not running")
        sys.exit(EXIT_FAILED)
    click.echo(info.client_url)
    output.print_line(err_console, f"pid {info.pid}, data {info.data_dir}, log {info.log_file}")
    if info.pki is not None:
        output.print_line(err_console, output.etcdctl_exports(info.client_url, info.pki))


@etcd_group.command("stop")
@click.pass_context
@handle_errors
def etcd_stop(ctx: click.Context) -> None:
    """Stop the embedded etcd, and the API server beside it; its data is kept for the next
    start."""
    _beside_etcd(ctx, "etcd stop")
    home = _settings(ctx).home
    server = EmbeddedServer(home).stop()
    if server is not None:
        output.print_line(err_console, f"stopped the API server (pid {server.pid})")
    info = EmbeddedEtcd(home).stop()
    output.print_line(err_console, "stopped embedded etcd" + (f" (pid {info.pid})" if info else
                                                              ": it was not running"))


def _with_store(ctx: click.Context, command: str, body: Callable[[Coordinator], Awaitable[T]]
                ) -> T:
    """Run ``body`` on the store the settings name (the embedded etcd, started if need be),
    with Primus's own etcd identity; never through an API server."""
    _beside_etcd(ctx, command)

    async def run() -> T:
        store, _ = await open_store(_settings(ctx))
        try:
            return await body(store)
        finally:
            await store.close()
    return asyncio.run(run())


@etcd_group.command("space")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handle_errors
def etcd_space(ctx: click.Context, fmt: str) -> None:
    """Show how full each etcd member's database is, against its quota, and the alarms raised
    (NOSPACE: etcd refuses every write until `primus etcd recover-space`)."""
    members = _with_store(ctx, "etcd space", lambda store: store.space())
    if fmt == "json":
        output.print_json(console, output.space_json(members))
        return
    console.print(output.space_table(members))
    for warning in space_warnings(members):
        output.print_line(err_console, output.warning_text(warning.text))


@etcd_group.command("recover-space")
@click.pass_context
@handle_errors
def etcd_recover_space(ctx: click.Context) -> None:
    """Give etcd its space back and lift its NOSPACE alarm: compact the history to the current
    revision, defragment each member in turn (a member serves nothing while it is
    defragmented), then disarm the NOSPACE alarms of members now below their quota.

    Needs etcd's root role (Primus's own etcd identity). Safe to run at any time, and again;
    exits 1 when writes cannot be served again this way (it says why)."""
    recovery = _with_store(ctx, "etcd recover-space", lambda store: recover_space(
        store, lambda step: output.print_line(console, step)))
    for problem in recovery.problems:
        output.print_line(err_console, output.warning_text(problem))
    if not recovery.complete:
        sys.exit(EXIT_FAILED)


@cli.group("server")
def server_group() -> None:
    """Serve the Primus API (gRPC), and manage the server of the embedded default."""


server_group.add_command(server_run)


@server_group.command("start")
@click.pass_context
@handle_errors
def server_start(ctx: click.Context) -> None:
    """Start the API server beside the embedded etcd (if not running); print its address."""
    _beside_etcd(ctx, "server start")
    settings = _settings(ctx)
    if settings.etcd is not None:
        _fail("an etcd is configured: run `primus server run` with your certificates instead")
    info = EmbeddedServer(settings.home).ensure_running()
    click.echo(info.address)
    output.print_line(err_console, f"pid {info.pid}")
    if info.site_notice:  # it runs, and a changed site file waits for its restart
        output.print_line(err_console, output.warning_text(info.site_notice))


@server_group.command("token")
@click.argument("user")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the new token here (0600); hand this file to USER.")
@handle_errors
def server_token(user: str, out: Path) -> None:
    """Issue a new bearer token for USER: the token goes to --out, and the entry for the
    server's tokens file (its SHA-256 digest, never the token) to stdout."""
    import secrets  # noqa: PLC0415 - only this command makes tokens

    from primus.client.access import token_digest  # noqa: PLC0415
    from primus.private_files import write_private  # noqa: PLC0415

    if out.exists():
        _fail(f"--out: {out} exists; give a new file (a token is never overwritten)")
    token = secrets.token_urlsafe(32)
    write_private(out, (token + "\n").encode())
    click.echo(f"  - user: {json.dumps(user)}\n    sha256: {token_digest(token)}")
    output.print_line(err_console, f"token for {user} written to {out}; add the lines above "
                                   f"under `tokens:` in the server's tokens file")


@server_group.command("status")
@click.pass_context
@handle_errors
def server_status(ctx: click.Context) -> None:
    """Print the embedded API server's address, or say it is not running (exit 1)."""
    _beside_etcd(ctx, "server status")
    server = EmbeddedServer(_settings(ctx).home)
    info = server.status()
    if info is None:
        output.print_line(err_console, "the API server is not running")
        sys.exit(EXIT_FAILED)
    click.echo(info.address)
    if info.ui_url:
        click.echo(f"UI {info.ui_url} (`primus ui` prints a link that signs you in)")
    output.print_line(err_console, f"pid {info.pid}, log {server.log_file}")
    if info.site_notice:
        output.print_line(err_console, output.warning_text(info.site_notice))


@cli.command("ui")
@click.pass_context
@handle_errors
def ui_cmd(ctx: click.Context) -> None:
    """Start the embedded server if needed and print a link that opens the web UI signed in.

    The link carries your sign-in token after '#': browsers do not send that part to the
    server, and the page signs you in with it. Keep it to yourself, as ``$PRIMUS_HOME``.
    """
    _beside_etcd(ctx, "ui")
    settings = _settings(ctx)
    if settings.etcd is not None:
        _fail("an etcd is configured: the web UI is served by your deployment's `primus "
              "server` (see docs/ui.md); sign in there with your API token")
    server = EmbeddedServer(settings.home)
    info = server.ensure_running()
    if not info.ui_url:
        _fail(f"the embedded server (pid {info.pid}) serves no web UI; `primus server stop` "
              f"and run this again")
    click.echo(f"{info.ui_url}login#token={server.ui_token()}")


@server_group.command("stop")
@click.pass_context
@handle_errors
def server_stop(ctx: click.Context) -> None:
    """Stop the embedded API server."""
    _beside_etcd(ctx, "server stop")
    info = EmbeddedServer(_settings(ctx).home).stop()
    output.print_line(err_console, "stopped the API server" + (f" (pid {info.pid})" if info
                                                               else ": it was not running"))


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="primus")
