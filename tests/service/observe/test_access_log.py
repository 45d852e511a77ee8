"""The access log: one record a decision request on every surface, with the request, its status,
its time and, once decided, the domain, the deciding rule and the result; never a key or a
descriptor value."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest

from ratekeeper.service.grpc import serve_grpc
from ratekeeper.service.observe.access import AccessLog
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores.wrappers.resilience import AsyncResilient
from ratekeeper.testing import FakeClock
from tests.service.asgi import AppClient
from tests.service.observe.logged import Down, check, engine_of, no_secret


@pytest.fixture(autouse=True)
def _access_records(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ratekeeper.access")


def logged(records: list[logging.LogRecord]) -> list[dict[str, Any]]:
    """Each access record as its message and fields, its time checked and left out."""
    entries = []
    for record in records:
        if record.name != "ratekeeper.access":
            continue
        fields = {
            name: getattr(record, name)
            for name in ("surface", "status", "code", "domain", "rule", "result")
            if hasattr(record, name)
        }
        duration = record.__dict__["duration_ms"]
        assert isinstance(duration, float) and duration >= 0
        assert record.levelno == logging.INFO
        entries.append({"request": record.getMessage(), **fields})
    return entries


def test_every_http_surface_logs_its_requests_with_the_deciding_rule(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_of(clock)
    metrics = Metrics()
    metrics.track(engine)
    app = create_app(engine, close_engine=True, metrics=metrics, access_log=AccessLog(engine))
    user = ("user", "alice-secret")
    with AppClient(app) as client:
        for _ in range(3):
            client.post("/v1/check", json=check(user))
        for _ in range(2):
            client.post("/v1/check", json=check(("plan", "free")))
        client.post("/v1/check", json=check(("path", "/secret-path")))
        client.post("/v1/check", json={"key": "key-secret", "limit": "5/minute"})
        client.post("/v1/check", json={"key": "key-secret-2"})  # the default limit
        client.post("/v1/check", json={"key": "key-secret-2"})
        client.post("/v1/check", json={"key": ""})  # refused before any decision
        client.post("/v1/check/batch", json=[check(("path", "/a-secret")), check(user)])
        client.post("/v1/peek", json=check(("path", "/secret-path")))
        client.post("/json", json=check(("path", "/secret-path")))
        client.get("/v1/nginx", headers={"X-Real-IP": "10.0.0.1", "X-User": "secret-user"})
        client.get("/v1/nginx")  # no address: refused
        client.get("/healthz")
        client.get("/readyz")
        client.get("/metrics")
    assert logged(caplog.records) == [
        {"request": "POST /v1/check", "surface": "http", "status": 200}
        | {"domain": "api", "rule": "per_user", "result": "allowed"},
        {"request": "POST /v1/check", "surface": "http", "status": 200}
        | {"domain": "api", "rule": "per_user", "result": "allowed"},
        {"request": "POST /v1/check", "surface": "http", "status": 429}
        | {"domain": "api", "rule": "per_user", "result": "limited"},
        {"request": "POST /v1/check", "surface": "http", "status": 200}
        | {"domain": "api", "rule": "plan=free", "result": "allowed"},
        {"request": "POST /v1/check", "surface": "http", "status": 200}
        | {"domain": "api", "rule": "plan=free", "result": "shadowed"},
        {"request": "POST /v1/check", "surface": "http", "status": 200}
        | {"domain": "api", "rule": "path", "result": "allowed"},
        {"request": "POST /v1/check", "surface": "http", "status": 200}
        | {"domain": "keys", "rule": "given", "result": "allowed"},
        {"request": "POST /v1/check", "surface": "http", "status": 200}
        | {"domain": "keys", "rule": "default", "result": "allowed"},
        {"request": "POST /v1/check", "surface": "http", "status": 429}
        | {"domain": "keys", "rule": "default", "result": "limited"},
        {"request": "POST /v1/check", "surface": "http", "status": 422},
        # the batch's second check is refused: it decides
        {"request": "POST /v1/check/batch", "surface": "http", "status": 200}
        | {"domain": "api", "rule": "per_user", "result": "limited"},
        {"request": "POST /v1/peek", "surface": "http", "status": 200},  # a look decides nothing
        {"request": "POST /json", "surface": "json", "status": 200}
        | {"domain": "api", "rule": "path", "result": "allowed"},
        {"request": "GET /v1/nginx", "surface": "nginx", "status": 200}
        | {"domain": "edge", "rule": "none", "result": "allowed"},
        {"request": "GET /v1/nginx", "surface": "nginx", "status": 403},
    ]
    no_secret(caplog.records)


def test_of_several_descriptors_the_one_closest_to_its_limit_decides(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_of(clock)
    app = create_app(engine, close_engine=True, access_log=AccessLog(engine))
    body = {
        "domain": "api",
        "descriptors": [
            {"entries": [{"key": "path", "value": "/x"}]},
            {"entries": [{"key": "user", "value": "bob"}]},
        ],
    }
    with AppClient(app) as client:
        client.post("/v1/check", json=body)
    assert [(one["rule"], one["result"]) for one in logged(caplog.records)] == [
        ("per_user", "allowed")
    ]


def test_a_decision_of_the_failure_policy_is_degraded(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_of(clock, AsyncResilient(Down(clock=clock), on_store_error="allow"))
    app = create_app(engine, close_engine=True, access_log=AccessLog(engine))
    with AppClient(app) as client:
        assert client.post("/v1/check", json=check(("user", "a"))).status_code == 200
    assert logged(caplog.records) == [
        {"request": "POST /v1/check", "surface": "http", "status": 200}
        | {"domain": "api", "rule": "per_user", "result": "degraded"}
    ]


def test_grpc_calls_are_logged_with_their_code(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    Descriptor = ratelimit_pb2.RateLimitDescriptor

    def request(domain: str, *values: str) -> rls_pb2.RateLimitRequest:
        descriptors = [
            Descriptor(entries=[Descriptor.Entry(key="user", value=value)]) for value in values
        ]
        return rls_pb2.RateLimitRequest(domain=domain, descriptors=descriptors)

    async def main() -> list[Any]:
        engine = engine_of(clock)
        server, port = await serve_grpc(engine, "127.0.0.1:0", access_log=AccessLog(engine))
        codes: list[Any] = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = rls_pb2_grpc.RateLimitServiceStub(channel)
                for _ in range(3):
                    response = await stub.ShouldRateLimit(request("api", "carol-secret"))
                    codes.append(response.overall_code)
                try:
                    await stub.ShouldRateLimit(request("api"))  # no descriptors
                except grpc.aio.AioRpcError as error:
                    codes.append(error.code())
        finally:
            await server.stop(None)
            await engine.close()
        return codes

    Response = rls_pb2.RateLimitResponse
    codes = asyncio.run(main())
    assert codes == [
        Response.OK,
        Response.OK,
        Response.OVER_LIMIT,
        grpc.StatusCode.INVALID_ARGUMENT,
    ]
    assert logged(caplog.records) == [
        {"request": "ShouldRateLimit", "surface": "grpc", "code": "OK"}
        | {"domain": "api", "rule": "per_user", "result": "allowed"},
        {"request": "ShouldRateLimit", "surface": "grpc", "code": "OK"}
        | {"domain": "api", "rule": "per_user", "result": "allowed"},
        {"request": "ShouldRateLimit", "surface": "grpc", "code": "OK"}
        | {"domain": "api", "rule": "per_user", "result": "limited"},
        {"request": "ShouldRateLimit", "surface": "grpc", "code": "INVALID_ARGUMENT"},
    ]
    no_secret(caplog.records)


def test_off_it_is_not_the_engines_observer_and_logs_nothing(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_of(clock)
    app = create_app(engine, close_engine=True)
    with AppClient(app) as client:
        client.post("/v1/check", json=check(("user", "a")))
    assert engine.observer is None and logged(caplog.records) == []
