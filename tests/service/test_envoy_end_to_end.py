"""A real Envoy, in front of a real application, with ratekeeper as its rate-limit service.

Envoy runs the shipped ``deploy/envoy/envoy.yaml`` (rendered with free loopback ports); ratekeeper
serves Envoy's gRPC protocol (``service.grpc.serve_grpc``) over an ``AsyncEngine`` on its own
event loop. Requests within the limit reach the application; the one over it gets Envoy's 429
with ``x-envoy-ratelimited``; Envoy's ``x-ratelimit-*`` headers carry ratekeeper's numbers; with
ratekeeper stopped, ``failure_mode_deny`` decides.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.grpc import serve_grpc
from tests.gateways import EnvoyServer, UpstreamServer, envoy_config, http_request

#: The domain of the shipped Envoy file; three requests an hour for everyone (GCRA: no window
#: edge, so the test never straddles one).
RULES = """
domain: edge
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra, name: everyone}
"""


class GrpcService:
    """ratekeeper's gRPC service over a fresh engine, on an event loop in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.engine = AsyncEngine(rules=parse_rules(RULES, "edge.yaml"))
        started = asyncio.run_coroutine_threadsafe(
            serve_grpc(self.engine, "127.0.0.1:0"), self.loop
        )
        self.server, self.port = started.result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(10)
        asyncio.run_coroutine_threadsafe(self.engine.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


def test_envoy_limits_with_ratekeepers_decisions(tmp_path: Path, upstream: UpstreamServer) -> None:
    service = GrpcService()
    config = envoy_config(upstream_port=upstream.port, ratekeeper_port=service.port)
    envoy = EnvoyServer(tmp_path / "envoy", config)
    try:
        answers = [http_request(envoy.port, f"/orders/{n}") for n in range(4)]
        assert [a.status for a in answers] == [200, 200, 200, 429]
        assert [r["path"] for r in upstream.requests()] == ["/orders/0", "/orders/1", "/orders/2"]
        assert [a.headers.get("x-ratelimit-remaining") for a in answers] == ["2", "1", "0", "0"]
        assert all(a.headers["x-ratelimit-limit"].startswith("3, 3;w=3600") for a in answers)
        assert answers[3].headers.get("x-envoy-ratelimited") == "true"
    finally:
        envoy.stop()
        service.stop()


@pytest.mark.parametrize(("deny", "status"), [(True, 500), (False, 200)])
def test_with_ratekeeper_stopped_failure_mode_deny_decides(
    tmp_path: Path, upstream: UpstreamServer, deny: bool, status: int
) -> None:
    service = GrpcService()
    config = envoy_config(
        upstream_port=upstream.port, ratekeeper_port=service.port, failure_mode_deny=deny
    )
    envoy = EnvoyServer(tmp_path / "envoy", config)
    try:
        assert http_request(envoy.port, "/before").status == 200  # ratekeeper answers
        service.stop()
        assert http_request(envoy.port, "/after").status == status
        reached = [r["path"] for r in upstream.requests()]
        assert reached == (["/before"] if deny else ["/before", "/after"])
    finally:
        envoy.stop()
