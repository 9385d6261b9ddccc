"""The client layer (``ApplicationService``) called in this process, as the CLI and the API call
it: no interpreter start-up per call, so a test that polls an application does not load the
machine it measures, and one that waits for the end awaits it (a watch) instead of polling."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from primus.api.client import Client
from primus.cli.output import apps_json, queue_json, status_json
from primus.cli.remote import RemoteService
from primus.client.api import NotStoppedError
from primus.client.queues import waiting_apps
from primus.client.service import ApplicationService
from primus.config.site import Settings, load_settings
from primus.private_files import write_private
from primus.store.api import Coordinator
from primus.store.connect import open_store

T = TypeVar("T")

OBSERVER_TIMEOUT = "20"
"""Seconds the test process's own etcd requests may take (``$PRIMUS_ETCD_REQUEST_TIMEOUT``,
unless the test's environment sets it): on the 2-core CI machine under four workers a read of
the test process waited past etcd's default 5 s while etcd's log showed no slow request (the
test process itself was not run). Primus's own processes keep the default."""


def with_store(env: dict[str, str],
               body: Callable[[Coordinator, Settings], Awaitable[T]]) -> T:
    """Run ``body(store, settings)`` on the etcd and prefix of ``env`` (a ``primus_env``); in a
    thread of its own where this one already runs an event loop (Playwright's synchronous API
    keeps one running while a browser is open)."""
    async def run() -> T:
        store, settings = await open_store(load_settings(
            env={"PRIMUS_ETCD_REQUEST_TIMEOUT": OBSERVER_TIMEOUT, **env}))
        try:
            return await body(store, settings)
        finally:
            await store.close()
    return _outside_loop(run())


def call(env: dict[str, str], operation: str, *args: Any, **kwargs: Any) -> Any:
    """``ApplicationService.<operation>(*args, **kwargs)``, as the CLI would call it: through
    the API server when ``env`` names one (``$PRIMUS_SERVER``, :func:`~tests.support.tokens.
    through_server`), as :class:`~primus.cli.remote.RemoteService`."""
    if env.get("PRIMUS_SERVER"):
        return _outside_loop(_remote_call(env, operation, *args, **kwargs))

    async def body(store: Coordinator, settings: Settings) -> Any:
        service = ApplicationService(store, settings)
        try:
            return await getattr(service, operation)(*args, **kwargs)
        finally:
            await service.close()
    return with_store(env, body)


async def _remote_call(env: dict[str, str], operation: str, *args: Any, **kwargs: Any) -> Any:
    token = Path(env["PRIMUS_HOME"]) / "test-token"
    if not token.exists():
        write_private(token, env["PRIMUS_TOKEN"].encode())
    service = RemoteService(Client(env["PRIMUS_SERVER"], ca_cert=env["PRIMUS_SERVER_CA"],
                                   token_file=token), load_settings(env=env))
    try:
        return await getattr(service, operation)(*args, **kwargs)
    finally:
        await service.close()


def _outside_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end: here, or in a thread where this one runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as beside:
        return beside.submit(asyncio.run, coroutine).result()


def status(env: dict[str, str], app_id: str) -> dict:
    """What ``primus status APP_ID -o json`` prints."""
    return status_json(call(env, "get_app", app_id))


def apps(env: dict[str, str]) -> list[dict]:
    """What ``primus list -o json`` prints for the applications in etcd."""
    return apps_json(call(env, "list_apps", False))


def queue(env: dict[str, str]) -> list[dict]:
    """What ``primus queue -o json`` prints."""
    async def body(store: Coordinator, settings: Settings) -> list[dict]:
        return queue_json((await waiting_apps(store, settings.prefix))[0])
    return with_store(env, body)


def wait_for_end(env: dict[str, str], app_id: str, timeout: float = 60) -> dict:
    """Await the application's end and its AM's exit (``primus submit --wait`` does the same);
    its status as :func:`status` gives it. Fails the test, naming the state it was in, after
    ``timeout`` seconds."""
    if env.get("PRIMUS_SERVER"):
        try:
            return status_json(call(env, "wait_for_end", app_id, timeout=timeout))
        except NotStoppedError:
            state = status(env, app_id)["status"]["state"]
            pytest.fail(f"timed out after {timeout}s waiting for {app_id} to end: still {state}")

    async def body(store: Coordinator, settings: Settings) -> dict | None:
        service = ApplicationService(store, settings)
        try:
            async with asyncio.timeout(timeout):
                return status_json(await service.wait_for_end(app_id))
        except TimeoutError:
            return None
        finally:
            await service.close()
    ended = with_store(env, body)
    if ended is None:
        state = status(env, app_id)["status"]["state"]
        pytest.fail(f"timed out after {timeout}s waiting for {app_id} to end: still {state}")
    return ended
