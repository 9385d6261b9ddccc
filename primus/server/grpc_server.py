"""The API server process: the Primus service, gRPC health and reflection, over one store.

It keeps nothing of its own: every answer is read from etcd, so several servers may serve one
deployment side by side. It opens the store as every command does (starting the embedded etcd
when none is configured) and reports SERVING on the health service once the store answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import signal
import ssl
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import grpc
from aiohttp import web

from primus.api.server import ApiServer
from primus.client.access import AuthConfig, TokenEntry, load_tokens, token_digest
from primus.client.budgets import BudgetKeeper
from primus.client.hosts import load_hosts
from primus.client.identities import seal_key
from primus.client.keeper import AmKeeper
from primus.client.queues import AdmissionView, publish_queues
from primus.client.server_info import ServerError, ServerInfo, ServerTls
from primus.client.service import ApplicationService
from primus.client.webhooks import ensure_job_key
from primus.config.site import Settings
from primus.config.site_changes import watched_site_file
from primus.history.archiver import Archiver
from primus.history.sql_history import server_history
from primus.private_files import write_private
from primus.scheduler.leader import AdmissionLeader
from primus.server.autosize import Autosizer
from primus.server.metrics import ServerMetrics, metrics_app, serve_metrics
from primus.server.notify import Notifier
from primus.server.site_reload import SiteReloader
from primus.store.connect import open_store
from primus.store.embedded import EmbeddedEtcd
from primus.store.space import SpaceMonitor
from primus.ui import web as ui

logger = logging.getLogger(__name__)

STOP_GRACE = 5.0
"""Seconds running RPCs are given to finish when the server stops."""


def embedded_tls(settings: Settings) -> ServerTls:
    """The embedded etcd's certificates, for a server beside it: the server presents etcd's
    server certificate (127.0.0.1, localhost) and admits only the embedded client
    certificate, so the API is exactly as private as the embedded etcd."""
    pki = EmbeddedEtcd(settings.home).pki_dir
    return ServerTls(cert=pki / "server.crt", key=pki / "server.key",
                     client_ca=pki / "ca.crt")


EMBEDDED_CLIENT_NAME = "primus"
"""The common name of the embedded client certificate (:func:`primus.store.pki.ensure_pki`)."""


def auth_config(tls: ServerTls | None, tokens_file: Path | None, embedded: bool,
                ui_token: str | None = None) -> AuthConfig:
    """How the server identifies callers.

    With a client CA, a caller is its certificate's common name; with ``tokens_file``, a
    bearer token it lists. With neither, nobody can be identified, so every caller acts as
    this server's account, an admin (the server logs a warning). On the embedded default
    the embedded client certificate is the local account, admin of its own deployment:
    whoever holds that key (``$PRIMUS_HOME/etcd/pki``, 0600) is that user, and so is whoever
    holds ``ui_token`` (the web UI's sign-in token of the embedded default, in
    ``$PRIMUS_HOME/server/ui-token``, 0600).

    Raises:
        SpecError: The tokens file is unreadable or invalid (naming the file and field).
    """
    listed = load_tokens(tokens_file) if tokens_file is not None else AuthConfig()
    if embedded:
        local = getpass.getuser()
        tokens = listed.tokens if ui_token is None else \
            (*listed.tokens, TokenEntry(local, token_digest(ui_token)))
        return replace(listed, tokens=tokens, admins=listed.admins | {local},
                       certificate_users={EMBEDDED_CLIENT_NAME: local})
    if tokens_file is None and (tls is None or tls.client_ca is None):
        return AuthConfig(open_as=getpass.getuser())
    return listed


def _credentials(tls: ServerTls) -> grpc.ServerCredentials:
    try:
        key, cert = tls.key.read_bytes(), tls.cert.read_bytes()
        ca = tls.client_ca.read_bytes() if tls.client_ca else None
    except OSError as exc:
        raise ServerError(f"cannot read the server's TLS files: {exc}") from exc
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None)


async def _start_http(app: web.Application, what: str, listen: str, tls: ServerTls | None
                      ) -> tuple[web.AppRunner, str]:
    """Serve ``app`` (the web UI, or the metrics alone) beside the API; return its runner and
    URL."""
    context = None
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(tls.cert, tls.key)
        except (OSError, ssl.SSLError) as exc:
            raise ServerError(f"cannot read the {what}'s TLS files: {exc}") from exc
    try:
        runner, url = await ui.start(app, listen, context)
    except (OSError, ValueError) as exc:
        raise ServerError(f"cannot serve the {what} on {listen}: {exc}") from exc
    logger.info("serving the %s on %s", what, url)
    return runner, url


async def serve(settings: Settings, listen: str, tls: ServerTls | None, auth: AuthConfig,
                state_file: Path | None = None, ui_listen: str | None = None,
                ui_tls: ServerTls | None = None, metrics_listen: str | None = None,
                reread: Callable[[], Settings] | None = None) -> None:
    """Serve the API on ``listen`` (``HOST:PORT``; port 0: any free port), and the web UI on
    ``ui_listen``, until SIGTERM or SIGINT.

    Args:
        settings: Where the deployment's etcd is, and its prefix.
        listen: The address to listen on.
        tls: Certificates; ``None`` serves plaintext. With no etcd configured and ``tls``
            ``None``, pass :func:`embedded_tls` instead (the command line does).
        auth: How callers are identified (:func:`auth_config`).
        state_file: Written (0600) once the server answers: its pid and address.
        ui_listen: Where to serve the web UI (``None``: no UI).
        ui_tls: The UI's certificate and key (``None``: plain HTTP); it signs viewers in
            with their tokens, never with client certificates.
        metrics_listen: Where to serve ``/metrics`` alone, under ``ui_tls`` too (``None``:
            on the UI's listener only).
        reread: Reads ``settings`` again; given, the server watches the site file they came
            from and takes what may change while it runs (:mod:`primus.server.site_reload`).

    Raises:
        ServerError: It cannot listen on ``listen``, ``ui_listen`` or ``metrics_listen``, or
            read its certificates.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loaded = settings
    store, settings = await open_store(settings)
    try:
        hosts = load_hosts(None, settings)
        history = server_history(settings)
        service = ApplicationService(store, settings, history)
        service.admission = AdmissionView(store, settings.prefix, seal_key(settings))
        archiver = Archiver(store, settings, history) if history is not None else None
        etcd_space = SpaceMonitor(store)
        metrics = ServerMetrics(store, settings.prefix, settings.queues.default_queue, hosts,
                                archiver.lag if archiver is not None else lambda: None,
                                etcd_space)
        server = ApiServer(service, hosts, auth, metrics.api_call)
        try:
            port = server.listen(listen, _credentials(tls) if tls is not None else None)
        except RuntimeError as exc:
            raise ServerError(f"cannot listen on {listen}: {exc}") from exc
        address = f"{listen.rsplit(':', 1)[0]}:{port}"
        await server.start()
        runners: list[web.AppRunner] = []
        ui_url = metrics_url = ""
        if ui_listen is not None:
            runner, ui_url = await _start_http(
                serve_metrics(ui.create_app(service, hosts, auth, ui_tls is not None,
                                            etcd_space, metrics.fold.samples), metrics, auth),
                "web UI", ui_listen, ui_tls)
            runners.append(runner)
        if metrics_listen is not None:
            runner, metrics_url = await _start_http(metrics_app(metrics, auth), "metrics",
                                                    metrics_listen, ui_tls)
            runners.append(runner)
        logger.info("serving the Primus API on %s (%s) for %s", address,
                    "TLS" + (", client certificates required" if tls and tls.client_ca else "")
                    if tls else "plaintext", settings.prefix)
        if auth.open_as is not None:
            logger.warning("no client CA and no tokens file: every caller acts as %s, an "
                           "admin (give --client-ca or --tokens to identify callers)",
                           auth.open_as)
        else:
            logger.info("callers identified by %s; %d token(s), %d admin(s)",
                        "client certificate or token" if tls and tls.client_ca else "token",
                        len(auth.tokens), len(auth.admins))
        info = ServerInfo(pid=os.getpid(), address=address, started=time.time(),
                          tls=tls is not None, client_auth=bool(tls and tls.client_ca),
                          ui_url=ui_url, metrics_url=metrics_url and f"{metrics_url}metrics")

        def record(site_notice: str) -> None:
            if state_file is not None:
                write_private(state_file, json.dumps(asdict(replace(
                    info, site_notice=site_notice)), indent=2).encode())

        record("")
        # Every server stands for admission leadership; one process of the deployment leads,
        # with the queues of this server's site configuration.
        await publish_queues(store, settings)
        admission = asyncio.ensure_future(AdmissionLeader(store, settings.prefix, settings,
                                                           seal_key(settings)).run())
        # And follows admission's keys for the queue and the hosts' usage it shows.
        following = asyncio.ensure_future(service.admission.run())
        # And for the AM keeper's: one server starts an AM for an application whose AM died.
        keeping = asyncio.ensure_future(AmKeeper(service).run())
        # Where applications have identities of their own, for counting their budgets of etcd.
        budgeting = asyncio.ensure_future(BudgetKeeper(service).run()) \
            if settings.accounts is not None else None
        # Every server archives too: a pass is idempotent, so several may run at once.
        archiving = asyncio.ensure_future(archiver.run()) if archiver is not None else None
        # And keeps its metrics, from its own watch, and etcd's space, read every 15 s.
        measuring = asyncio.gather(metrics.run(), etcd_space.run())
        # And stands for autosizing the roles that ask for it, from its metrics' figures.
        autosizing = asyncio.ensure_future(Autosizer(service, metrics.fold).run())
        # And stands for sending the webhooks' notifications.
        ensure_job_key(settings)
        notifier = Notifier(store, settings)
        notifying = asyncio.ensure_future(notifier.run())
        # And takes a changed site file's notify: from the next pass on.
        reloading = asyncio.ensure_future(SiteReloader(
            watched_site_file(loaded, os.environ) if reread is not None else None, loaded,
            reread or (lambda: loaded), lambda current: notifier.use(current.notify),
            record).run())
        await stop.wait()
        admission.cancel()
        following.cancel()
        keeping.cancel()
        if budgeting is not None:
            budgeting.cancel()
        measuring.cancel()
        notifying.cancel()
        autosizing.cancel()
        reloading.cancel()
        logger.info("stopping: running calls have %gs to finish", STOP_GRACE)
        await server.stop(STOP_GRACE)
        for runner in runners:
            await runner.cleanup()
        for task in (measuring, notifying, autosizing, reloading):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for task in (admission, following):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(asyncio.CancelledError):
            await keeping
        if budgeting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await budgeting
        if archiving is not None:
            archiving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await archiving
        if history is not None:
            await history.close()
        await service.close()
    finally:
        await store.close()

