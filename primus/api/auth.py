"""Authentication at the gRPC edge: an interceptor that identifies every caller.

Every call but the health service's is identified with :func:`primus.client.access.identify`
from the client certificate and the ``authorization`` metadata; an unknown caller ends with
UNAUTHENTICATED before the method runs. The identity is handed to the method in
:data:`CALLER` (the method runs in the task the wrapper runs in). Tokens are never logged.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from primus.api.edge import Around, wrap_handler
from primus.client.access import AuthConfig, Identity, bearer_token, identify

CALLER: contextvars.ContextVar[Identity] = contextvars.ContextVar("primus_api_caller")
"""The identity of the caller of the running RPC."""

_UNAUTHENTICATED = ("no identity: present a client certificate the server trusts or a bearer "
                    "token it issued (`authorization: Bearer <token>`)")


def caller_of(config: AuthConfig, context: grpc.aio.ServicerContext) -> Identity | None:
    """Who makes this call, or ``None``."""
    names = [n.decode(errors="replace")
             for n in context.auth_context().get("x509_common_name") or []]
    authorization = next((value for key, value in context.invocation_metadata() or ()
                          if key == "authorization"), None)
    token = bearer_token(authorization if isinstance(authorization, str) else None)
    return identify(config, names, token)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Identifies callers of every service but those in ``exempt`` (full service names)."""

    def __init__(self, config: AuthConfig, exempt: frozenset[str]) -> None:
        self.config = config
        self.exempt = exempt
        # Each method's handler, wrapped once: it is the same for every call of the method.
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method: str = details.method  # type: ignore[attr-defined]
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        service = method.lstrip("/").split("/", 1)[0]
        if handler is None or service in self.exempt:
            return handler
        wrapped = self._wrapped[method] = wrap_handler(handler, self._admitted)
        return wrapped

    @contextlib.asynccontextmanager
    async def _admitted(self, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        """Runs the call only for a known caller, as :data:`CALLER`."""
        identity = caller_of(self.config, context)
        if identity is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
        CALLER.set(identity)
        yield


class MeasuringInterceptor(grpc.aio.ServerInterceptor):
    """Reports every call's method (its short name), status code and duration to
    ``record``; placed first, it measures the calls authentication refuses too."""

    def __init__(self, record: Callable[[str, str, float], None]) -> None:
        self.record = record
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method: str = details.method  # type: ignore[attr-defined]
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None:
            return handler
        wrapped = self._wrapped[method] = wrap_handler(handler, self._measured(
            method.rsplit("/", 1)[-1]))
        return wrapped

    def _measured(self, name: str) -> Around:
        @contextlib.asynccontextmanager
        async def measured(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
            started = time.perf_counter()
            failed = False
            try:
                yield
            except grpc.aio.AbortError:
                raise
            except BaseException:
                failed = True
                raise
            finally:
                code = context.code()
                name_of = code.name if isinstance(code, grpc.StatusCode) else \
                    "UNKNOWN" if failed else "OK"
                self.record(name, name_of, time.perf_counter() - started)
        return measured
