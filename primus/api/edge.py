"""Wrapping a gRPC method's behaviour, whatever its kind (unary or streaming), in an async
context entered for each call: how the interceptors (``primus/api/auth.py``) run code around
every call."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

Around = Callable[[grpc.aio.ServicerContext], contextlib.AbstractAsyncContextManager[None]]
"""What a call runs inside of, given its context."""


def wrap_handler(handler: grpc.RpcMethodHandler, around: Around) -> grpc.RpcMethodHandler:
    """``handler`` with each call's behaviour run inside ``around(context)`` (in the task of
    the call: a context variable set on entering is seen by the behaviour)."""

    def wrap(behaviour: Callable[..., Any], streams: bool) -> Callable[..., Any]:
        if streams:
            async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                async with around(context):
                    result = behaviour(request, context)
                    if inspect.isasyncgen(result):
                        async for message in result:
                            yield message
                    else:
                        await result
            return stream

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            async with around(context):
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


class WrappingInterceptor(grpc.aio.ServerInterceptor):
    """An interceptor that runs each call of a method inside :meth:`around`'s context; each
    method's handler is wrapped once (it is the same for every call of the method)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def around(self, method: str) -> Around | None:
        """What calls of ``method`` (``/package.Service/Method``) run inside; ``None``: they
        run as they are."""
        raise NotImplementedError

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method: str = details.method  # type: ignore[attr-defined]
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        around = self.around(method)
        if handler is None or around is None:
            return handler
        wrapped = self._wrapped[method] = wrap_handler(handler, around)
        return wrapped
