"""Traces in the test process, through the OpenTelemetry SDK and its in-memory exporter: the
span's status follows the answer (an error for a 5xx or a gRPC status a server fails with), a
decision of the failure policy is ``degraded``, the access log and the traces see the same
requests, and both doors go through them."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ratekeeper.service.grpc import serve_grpc
from ratekeeper.service.observe.access import AccessLog
from ratekeeper.service.observe.tracing import Tracing
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores.wrappers.resilience import AsyncResilient
from ratekeeper.testing import FakeClock
from tests.service.asgi import AppClient
from tests.service.observe.logged import SECRET, Down, check, engine_of


def traced(engine: Any) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(engine, provider.get_tracer("test"), provider), exporter


def summary(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, Any, StatusCode]]:
    """Each span's name, its answer's status and the decision's result, and its status."""
    found = []
    for span in spans:
        attributes = dict(span.attributes or {})
        for value in attributes.values():
            assert SECRET not in str(value)
        answer = attributes.get("http.response.status_code", attributes.get("rpc.grpc.status_code"))
        found.append(
            (span.name, (answer, attributes.get("ratekeeper.result")), span.status.status_code)
        )
    return found


def test_a_5xx_is_an_error_and_a_failure_policys_decision_is_degraded(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ratekeeper.access")
    down = engine_of(clock, Down(clock=clock))  # no failure policy: 503
    tracing, exporter = traced(down)
    access_log = AccessLog(down)
    with AppClient(
        create_app(down, close_engine=True, access_log=access_log, tracing=tracing)
    ) as client:
        assert client.post("/v1/check", json=check(("user", "a-secret"))).status_code == 503
        assert client.post("/v1/check", json={"key": ""}).status_code == 422
        assert client.get("/healthz").status_code == 200
    degraded = engine_of(clock, AsyncResilient(Down(clock=clock), on_store_error="allow"))
    tracing_degraded, exporter_degraded = traced(degraded)
    with AppClient(create_app(degraded, close_engine=True, tracing=tracing_degraded)) as client:
        assert client.post("/v1/check", json=check(("user", "b-secret"))).status_code == 200
    assert summary(exporter.get_finished_spans()) == [
        ("POST /v1/check", (503, None), StatusCode.ERROR),
        ("POST /v1/check", (422, None), StatusCode.UNSET),
    ]
    assert summary(exporter_degraded.get_finished_spans()) == [
        ("POST /v1/check", (200, "degraded"), StatusCode.UNSET)
    ]
    # the access log, inside the traces, saw the same two requests
    assert [
        record.getMessage() for record in caplog.records if record.name == "ratekeeper.access"
    ] == [
        "POST /v1/check",
        "POST /v1/check",
    ]


def test_grpc_statuses_a_server_fails_with_are_errors(clock: FakeClock) -> None:
    Descriptor = ratelimit_pb2.RateLimitDescriptor

    def request(*values: str) -> rls_pb2.RateLimitRequest:
        descriptors = [Descriptor(entries=[Descriptor.Entry(key="user", value=v)]) for v in values]
        return rls_pb2.RateLimitRequest(domain="api", descriptors=descriptors)

    async def main(engine: Any, tracing: Tracing) -> list[Any]:
        server, port = await serve_grpc(engine, "127.0.0.1:0", tracing=tracing)
        codes: list[Any] = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = rls_pb2_grpc.RateLimitServiceStub(channel)
                for one in (request("c-secret"), request()):  # the store fails; no descriptors
                    try:
                        await stub.ShouldRateLimit(one)
                    except grpc.aio.AioRpcError as error:
                        codes.append(error.code())
        finally:
            await server.stop(None)
            await engine.close()
        return codes

    engine = engine_of(clock, Down(clock=clock))
    tracing, exporter = traced(engine)
    codes = asyncio.run(main(engine, tracing))
    assert codes == [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INVALID_ARGUMENT]
    name = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    assert summary(exporter.get_finished_spans()) == [
        (name, (14, None), StatusCode.ERROR),
        (name, (3, None), StatusCode.UNSET),
    ]
