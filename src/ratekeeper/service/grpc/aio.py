"""Envoy's rate-limit service and the standard health service on grpc.aio.

``serve_grpc`` starts a grpc.aio server with the ``RateLimitServicer`` (``servicer``), each
request parsed so that bytes that are no ``RateLimitRequest`` are answered
``INVALID_ARGUMENT``, and the health service reporting SERVING for the overall server
(``""``), the rate-limit service by its full name, and ``ratelimit``, the name Envoy's own
rate-limit service registers (the last two NOT_SERVING while a health check followed fails).
The asyncio server lets concurrent requests share the request store's batching. With ``tls``
(a ``tls.GrpcTls``) it serves TLS, or mutual TLS, and checks the client certificate's SAN on
every call of both services; ``unix:PATH`` is a Unix socket.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ratekeeper.core.moved import keywords_renamed
from ratekeeper.service.grpc.servicer import (
    FOLLOWING,
    HEALTH_NAMES,
    SERVICE,
    RateLimitServicer,
    _parse,
)
from ratekeeper.service.proto import rls_pb2

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.service.grpc.tls import GrpcTls
    from ratekeeper.service.healthcheck import HealthCheck
    from ratekeeper.service.inflight import InFlightBound
    from ratekeeper.service.observe.access import AccessLog
    from ratekeeper.service.observe.metrics import Metrics
    from ratekeeper.service.observe.tracing import Tracing

log = logging.getLogger("ratekeeper.service")

NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _add_servicer(
    servicer: RateLimitServicer,
    server: grpc.aio.Server,
    access_log: AccessLog | None = None,
    tracing: Tracing | None = None,
) -> None:
    """``rls_pb2_grpc.add_RateLimitServiceServicer_to_server``, but the requests parsed by
    ``_parse`` (and each call logged by ``access_log`` and traced by ``tracing``, if given)."""
    method: Callable[[Any, Any], Awaitable[Any]] = servicer.ShouldRateLimit
    if access_log is not None:
        method = access_log.grpc(method)
    if tracing is not None:
        method = tracing.grpc(method)
    methods = {
        "ShouldRateLimit": grpc.unary_unary_rpc_method_handler(
            method,
            request_deserializer=_parse,
            response_serializer=rls_pb2.RateLimitResponse.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    server.add_registered_method_handlers(SERVICE, methods)


@keywords_renamed("serve_grpc", {"admission": "in_flight_bound"})
async def serve_grpc(
    engine: AsyncEngine,
    address: str,
    metrics: Metrics | None = None,
    in_flight_bound: InFlightBound | None = None,
    *,
    header_names: tuple[str, str, str] | None = None,
    access_log: AccessLog | None = None,
    tls: GrpcTls | None = None,
    tracing: Tracing | None = None,
    dynamic_metadata: bool = False,
    health_check: HealthCheck | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Start the rate-limit and health services on ``address`` (``host:port``, port 0 picking
    a free one, or ``unix:PATH``); return the started server and the port it listens on (1 on
    a Unix socket). ``metrics`` records each call's time as the ``grpc`` surface's;
    ``in_flight_bound`` bounds the calls in flight; ``header_names`` (limit, remaining, reset)
    puts the rate-limit headers in every answer; ``access_log`` logs each call; ``tracing``
    traces each; ``tls`` serves TLS (mTLS with its client CA); ``dynamic_metadata`` puts the
    dynamic metadata in every answer; the health service's ``ratelimit`` and service names
    follow ``health_check``, if given (``ratekeeper.service.healthcheck``). Raises ``OSError``
    when it cannot listen there."""
    server = grpc.aio.server(interceptors=() if tls is None else tls.interceptors())
    servicer = RateLimitServicer(
        engine, metrics, in_flight_bound, header_names, dynamic_metadata=dynamic_metadata
    )
    _add_servicer(servicer, server, access_log, tracing)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, tls.credentials())
    except RuntimeError:  # grpcio's "Failed to bind"; older ones return 0
        port = 0
    if port == 0:
        raise OSError(f"gRPC cannot listen on {address}: in use, or not this host's address")
    await server.start()
    for name in HEALTH_NAMES:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    if health_check is not None:

        async def follow(healthy: bool) -> None:
            status = health_pb2.HealthCheckResponse.SERVING if healthy else NOT_SERVING
            for name in FOLLOWING:
                await health_servicer.set(name, status)

        health_check.listeners.append(follow)
        await follow(health_check.healthy)
    if not address.startswith("unix:") and address.endswith(":0"):
        address = f"{address[:-2]}:{port}"  # the port it picked
    log.info(
        "gRPC (Envoy's rate-limit protocol, health) listening on %s%s",
        address,
        "" if tls is None else f" ({tls})",
    )
    return server, port
