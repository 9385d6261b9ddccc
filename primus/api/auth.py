"""Authentication at the gRPC edge: an interceptor that identifies every caller.

Every call but the health service's is identified with :func:`primus.client.access.identify`
from the client certificate and the ``authorization`` metadata; an unknown caller ends with
UNAUTHENTICATED before the method runs. The identity is handed to the method in
:data:`CALLER` (the method runs in the task the wrapper runs in). Tokens are never logged.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

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
        wrapped = self._wrapped[method] = _authenticated(handler, self.config)
        return wrapped


def _authenticated(handler: grpc.RpcMethodHandler, config: AuthConfig) -> grpc.RpcMethodHandler:
    """``handler`` with its behaviour run only for a known caller, as :data:`CALLER`."""

    async def admit(context: grpc.aio.ServicerContext) -> None:
        identity = caller_of(config, context)
        if identity is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
        else:
            CALLER.set(identity)

    def wrap(behaviour: Callable[..., Any], streams: bool) -> Callable[..., Any]:
        if streams:
            async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await admit(context)
                result = behaviour(request, context)
                if inspect.isasyncgen(result):
                    async for message in result:
                        yield message
                else:
                    await result

            return stream

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await admit(context)
            result = behaviour(request, context)
            return await result if inspect.isawaitable(result) else result

        return unary

    kinds = {"unary_unary": (grpc.unary_unary_rpc_method_handler, False),
             "unary_stream": (grpc.unary_stream_rpc_method_handler, True),
             "stream_unary": (grpc.stream_unary_rpc_method_handler, False),
             "stream_stream": (grpc.stream_stream_rpc_method_handler, True)}
    for kind, (make, streams) in kinds.items():
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            return make(wrap(behaviour, streams),
                        request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
    return handler
