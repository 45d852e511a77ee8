"""The generated gRPC code serves and calls Envoy's method path over a real loopback connection.

A minimal rate-limit service written here (OK, one status per descriptor) and the standard
health service from grpcio-health-checking run in one ``grpc.aio`` server on a free 127.0.0.1
port. The client calls ``/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`` by its
path, sending the request's bytes as Envoy would, and through the generated stub. This tests
the generated code and the packaging, not ratekeeper's decisions.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
#: Seconds any one call may take before the test fails; loopback answers in milliseconds.
TIMEOUT = 10.0

Response = rls_pb2.RateLimitResponse


class AlwaysOk(rls_pb2_grpc.RateLimitServiceServicer):
    """Answers OK, with one OK status per descriptor, and keeps every request it was sent."""

    def __init__(self) -> None:
        self.requests: list[rls_pb2.RateLimitRequest] = []

    async def ShouldRateLimit(
        self, request: rls_pb2.RateLimitRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> rls_pb2.RateLimitResponse:
        self.requests.append(request)
        return Response(
            overall_code=Response.OK,
            statuses=[Response.DescriptorStatus(code=Response.OK) for _ in request.descriptors],
        )


def envoy_request() -> rls_pb2.RateLimitRequest:
    """What Envoy sent for a route with a generic_key and an x-user request_headers action."""
    entry = ratelimit_pb2.RateLimitDescriptor.Entry
    return rls_pb2.RateLimitRequest(
        domain="test",
        descriptors=[
            ratelimit_pb2.RateLimitDescriptor(entries=[entry(key="generic_key", value="default")]),
            ratelimit_pb2.RateLimitDescriptor(
                entries=[
                    entry(key="generic_key", value="default"),
                    entry(key="user", value="alice"),
                ]
            ),
        ],
    )


async def round_trip() -> tuple[AlwaysOk, list[Response], list[int]]:
    """Serve on loopback, make the calls, stop; the servicer, the answers and health statuses."""
    servicer = AlwaysOk()
    server = grpc.aio.server()
    rls_pb2_grpc.add_RateLimitServiceServicer_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            # By the path alone, with raw bytes on the wire, as a client with no stub would.
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(METHOD)
            raw = await call(envoy_request().SerializeToString(), timeout=TIMEOUT)
            stub = rls_pb2_grpc.RateLimitServiceStub(channel)
            typed = await stub.ShouldRateLimit(envoy_request(), timeout=TIMEOUT)
            checker = health_pb2_grpc.HealthStub(channel)
            statuses = [
                (
                    await checker.Check(
                        health_pb2.HealthCheckRequest(service=name), timeout=TIMEOUT
                    )
                ).status
                for name in ("", SERVICE)
            ]
    finally:
        await server.stop(None)
    return servicer, [Response.FromString(raw), typed], statuses


def test_the_service_answers_envoys_method_path_and_health_on_loopback() -> None:
    servicer, responses, statuses = asyncio.run(round_trip())
    assert servicer.requests == [envoy_request(), envoy_request()]
    ok = Response.DescriptorStatus(code=Response.OK)
    assert responses == [Response(overall_code=Response.OK, statuses=[ok, ok])] * 2
    assert statuses == [health_pb2.HealthCheckResponse.SERVING] * 2
