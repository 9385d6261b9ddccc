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
from collections.abc import AsyncIterator, Callable

import grpc

from primus.api.edge import Around, WrappingInterceptor
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


class AuthInterceptor(WrappingInterceptor):
    """Identifies callers of every service but those in ``exempt`` (full service names)."""

    def __init__(self, config: AuthConfig, exempt: frozenset[str]) -> None:
        super().__init__()
        self.config = config
        self.exempt = exempt

    def around(self, method: str) -> Around | None:
        return None if method.lstrip("/").split("/", 1)[0] in self.exempt else self._admitted

    @contextlib.asynccontextmanager
    async def _admitted(self, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        """Runs the call only for a known caller, as :data:`CALLER`."""
        identity = caller_of(self.config, context)
        if identity is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
            raise AssertionError("unreachable: abort raises, ending the call")
        CALLER.set(identity)
        yield


class MeasuringInterceptor(WrappingInterceptor):
    """Reports every call's method (its short name), status code and duration to
    ``record``; placed first, it measures the calls authentication refuses too."""

    def __init__(self, record: Callable[[str, str, float], None]) -> None:
        super().__init__()
        self.record = record

    def around(self, method: str) -> Around:
        name = method.rsplit("/", 1)[-1]

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
                named = code.name if isinstance(code, grpc.StatusCode) else \
                    "UNKNOWN" if failed else "OK"
                self.record(name, named, time.perf_counter() - started)
        return measured
