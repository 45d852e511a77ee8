"""A misconfigured request store behind the service: a clear 503 naming the problem, never a
500, never a fail-open 200; and readiness says so. On every surface: Envoy's ``POST /json``
and nginx's ``auth_request`` answer it as unavailable too (not as a bad request, nor as a
refusal), and gRPC as ``UNAVAILABLE``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from ratekeeper import AsyncEngine, open_async_store
from ratekeeper.rules import parse_rules
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.app import create_app
from tests.servers import RedisServer, command, free_port
from tests.service.asgi import AppClient

RULES = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
"""
WRONG = "invalid username-password pair"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[AppClient, int]]:
    """The app (and its gRPC port) over a Redis store given a wrong password."""
    server = RedisServer(tmp_path)
    try:
        command(server.port, "CONFIG", "SET", "requirepass", "s3cret")
        store = open_async_store(
            f"redis://:wrong@127.0.0.1:{server.port}/0", on_store_error="allow"
        )
        engine = AsyncEngine(store, rules=parse_rules(RULES, "edge.yaml"))
        port = free_port()
        app = create_app(engine, close_engine=True, grpc_address=f"127.0.0.1:{port}")
        with AppClient(app) as client:
            yield client, port
    finally:
        server.stop()


def unavailable(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert WRONG in answer.json()["detail"]
    assert "wrong" not in answer.text


def test_a_wrong_redis_password_is_a_503_under_the_allow_policy(
    served: tuple[AppClient, int],
) -> None:
    client, _ = served
    unavailable(client.post("/v1/check", json={"key": "k", "limit": "5/minute"}))
    assert client.get("/readyz").status_code == 503


def test_envoys_json_and_nginx_answer_it_as_unavailable(served: tuple[AppClient, int]) -> None:
    client, _ = served
    body = {"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address"}]}]}
    unavailable(client.post("/json", json=body))
    headers = {"X-RateLimit-Domain": "edge", "X-Real-IP": "10.0.0.1"}
    unavailable(client.get("/v1/nginx", headers=headers))  # nginx's own failure mode decides


def test_grpc_answers_it_as_unavailable(served: tuple[AppClient, int]) -> None:
    _, port = served
    descriptor = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="remote_address", value="10.0.0.1")]
    )
    request = rls_pb2.RateLimitRequest(domain="edge", descriptors=[descriptor])
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ShouldRateLimit(request, timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert WRONG in (raised.value.details() or "")
