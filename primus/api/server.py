"""A gRPC server carrying the Primus service, the gRPC health service and server reflection.

Here because the health and reflection services are generated code too (STYLE.md rule 1); the
process around it (store, TLS, signals, state file) is ``primus/server/``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from primus.api.auth import AuthInterceptor, MeasuringInterceptor
from primus.api.servicer import PrimusServicer, max_request_bytes
from primus.api.v1 import primus_pb2 as pb
from primus.api.v1 import primus_pb2_grpc as pb_grpc
from primus.client.access import AuthConfig
from primus.client.service import ApplicationService
from primus.config.inventory import Host

PRIMUS_SERVICE = pb.DESCRIPTOR.services_by_name["Primus"].full_name
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class ApiServer:
    """The services on one ``grpc.aio`` server; NOT_SERVING on health until :meth:`start`.

    Args:
        service: The application service over the connected store.
        hosts: The server's inventory (``ListHosts``).
        auth: How callers are identified; every service but health requires an identity.
        measure: Given every call's method, status code and seconds (the server's metrics).
    """

    def __init__(self, service: ApplicationService, hosts: Sequence[Host],
                 auth: AuthConfig,
                 measure: Callable[[str, str, float], None] | None = None) -> None:
        interceptors: list[grpc.aio.ServerInterceptor] = \
            [] if measure is None else [MeasuringInterceptor(measure)]
        interceptors.append(AuthInterceptor(auth, frozenset({HEALTH_SERVICE})))
        self.server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_receive_message_length", max_request_bytes(service.settings)),
            ("grpc.max_send_message_length", MAX_RESPONSE_BYTES)])
        pb_grpc.add_PrimusServicer_to_server(PrimusServicer(service, hosts), self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            [PRIMUS_SERVICE, HEALTH_SERVICE, reflection.SERVICE_NAME], self.server)

    def listen(self, address: str, credentials: grpc.ServerCredentials | None) -> int:
        """Listen on ``address`` (TLS with ``credentials``, else plaintext); return the port.

        Raises:
            RuntimeError: The address cannot be bound.
        """
        if credentials is None:
            return self.server.add_insecure_port(address)
        return self.server.add_secure_port(address, credentials)

    async def start(self) -> None:
        """Start serving; health says SERVING, for the server and the Primus service."""
        await self.server.start()
        for name in ("", PRIMUS_SERVICE):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float) -> None:
        """Say NOT_SERVING, then give running calls ``grace`` seconds and stop."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
