"""``primus server run`` (and ``python -m primus.server run``, which the embedded server and the
deployment start): the server process's command line, parsed and checked before the process is
assembled (:func:`primus.server.grpc_server.serve`).

It is the ``run`` command of the ``primus server`` group, and a command of its own for
``python -m primus.server``, which loads nothing of the ``primus`` command. Under ``primus``,
``--etcd`` and ``--server`` of the root command reach it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import NoReturn

import click

from primus.client.access import unsafe_site_refusal
from primus.client.embedded_server import EmbeddedServer
from primus.client.hosts import is_loopback
from primus.client.server_info import NO_SERVER, ServerTls
from primus.config.site import load_settings
from primus.errors import PrimusError
from primus.process_secrets import make_undumpable

EXIT_USAGE = 2


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_USAGE)


@click.command("run")
@click.option("--listen", default="127.0.0.1:7447", show_default=True, metavar="HOST:PORT",
              help="Address to serve on (port 0: any free port).")
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path),
              help="The server's certificate (PEM).")
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path),
              help="The server certificate's key (PEM).")
@click.option("--client-ca", type=click.Path(dir_okay=False, path_type=Path),
              help="Require client certificates signed by this CA (PEM).")
@click.option("--plaintext", is_flag=True,
              help="Serve without TLS, on loopback only (for a proxy on this host that "
                   "terminates TLS).")
@click.option("--tokens", "tokens_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Tokens file: SHA-256 digests of bearer tokens and their users, and the "
                   "admins (see docs/api.md).")
@click.option("--state-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the pid and address here (0600) once serving.")
@click.option("--ui-listen", default="127.0.0.1:7448", show_default=True, metavar="HOST:PORT",
              help="Address to serve the web UI on (HTTPS with --tls-cert, else plain HTTP, "
                   "on loopback only; port 0: any).")
@click.option("--no-ui", is_flag=True, help="Serve the API only.")
@click.option("--metrics-listen", metavar="HOST:PORT",
              help="Serve the Prometheus metrics (/metrics) here too, as the UI: HTTPS with "
                   "--tls-cert, else plain HTTP, on loopback only (they are always at the UI's "
                   "/metrics).")
@click.pass_context
def server_run(ctx: click.Context, listen: str, tls_cert: Path | None, tls_key: Path | None,
               client_ca: Path | None, plaintext: bool, tokens_file: Path | None,
               state_file: Path | None, ui_listen: str, no_ui: bool,
               metrics_listen: str | None) -> None:
    """Serve the API in the foreground until SIGTERM or Ctrl-C.

    With no etcd configured and no TLS option, it serves TLS with the embedded etcd's
    certificates and admits only the embedded client certificate. The web UI signs viewers in
    with their tokens; on the embedded default, with the token of ``primus ui``'s link.
    """
    options = ctx.find_root().obj or {}
    try:
        _run(options.get("etcd"), options.get("server"), listen, tls_cert, tls_key, client_ca,
             plaintext, tokens_file, state_file, None if no_ui else ui_listen, metrics_listen)
    except PrimusError as exc:
        _fail(str(exc))


def plain_listener_refusal(api: str | None, ui: str | None, metrics: str | None) -> str | None:
    """Why the server may not serve these plain listeners (the API with ``--plaintext``, the UI
    and the metrics without ``--tls-cert``), or ``None``: without TLS, it serves on loopback
    only, where nothing it sends or receives crosses a network. A UI viewer's token (the
    embedded default's signs in as its account) or an API caller's request would otherwise
    cross it readable by anyone on the way, as would every page and figure."""
    for option, listen, what in (("--listen", api, "--plaintext serves the API without TLS"),
                                 ("--ui-listen", ui, "the web UI is plain HTTP without "
                                                     "--tls-cert and --tls-key"),
                                 ("--metrics-listen", metrics, "the metrics are plain HTTP "
                                                               "without --tls-cert and --tls-key")):
        if listen is not None and not is_loopback(listen):
            return (f"{option} {listen}: {what}, so it listens on loopback only; give a "
                    f"loopback address (127.0.0.1:PORT, [::1]:PORT, localhost:PORT), or "
                    f"--tls-cert and --tls-key to serve it over TLS")
    return None


def _run(etcd: str | None, server: str | None, listen: str, tls_cert: Path | None,
         tls_key: Path | None, client_ca: Path | None, plaintext: bool,
         tokens_file: Path | None, state_file: Path | None, ui_listen: str | None,
         metrics_listen: str | None) -> None:
    from primus.server.grpc_server import (  # noqa: PLC0415 - loads gRPC
        auth_config,
        embedded_tls,
        serve,
    )

    # It holds Primus's etcd identity and the key every application's password derives from.
    make_undumpable()

    if server not in (None, NO_SERVER):  # the site's server.address may name this very server
        _fail(f"`primus server run` serves etcd's keys, and --server or $PRIMUS_SERVER "
              f"({server}) sends commands to another server; run it where etcd is, without "
              f"them")
    settings = load_settings(etcd)
    if plaintext and (tls_cert or tls_key or client_ca):
        _fail("--plaintext: cannot be combined with --tls-cert, --tls-key or --client-ca")
    if bool(tls_cert) != bool(tls_key):
        _fail("--tls-cert and --tls-key: give both, or neither")
    if client_ca and not tls_cert:
        _fail("--client-ca: needs --tls-cert and --tls-key")
    if tokens_file is None and settings.server_tokens is not None:
        tokens_file = Path(settings.server_tokens)
    if plaintext and tokens_file:
        _fail(f"--tokens (here {tokens_file}, from --tokens or the site defaults' "
              f"server.tokens): cannot be combined with --plaintext (a token sent without TLS "
              f"can be read on the way); give --tls-cert and --tls-key")
    tls = ServerTls(tls_cert, tls_key, client_ca) if tls_cert and tls_key else None
    refused = plain_listener_refusal(listen if plaintext else None,
                                     None if tls else ui_listen, None if tls else metrics_listen)
    if refused is not None:
        _fail(refused)
    embedded = tls is None and not plaintext
    if embedded:
        if settings.etcd is not None:
            _fail("an etcd is configured: give --tls-cert and --tls-key (and --client-ca to "
                  "require client certificates), or --plaintext")
        tls = embedded_tls(settings)
    ui_token = EmbeddedServer(settings.home).ui_token() \
        if embedded and (ui_listen or metrics_listen) else None
    auth = auth_config(tls, tokens_file, embedded, ui_token)
    client_ca = tls.client_ca if tls is not None and not embedded else None
    unsafe = unsafe_site_refusal(auth, tokens_file, client_ca, settings.source,
                                 settings.accounts is not None, settings.trust)
    if unsafe is not None:
        _fail(unsafe)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(settings, listen, tls, auth, state_file, ui_listen=ui_listen,
                      ui_tls=None if embedded or tls is None else ServerTls(tls.cert, tls.key),
                      metrics_listen=metrics_listen, reread=lambda: load_settings(etcd)))
