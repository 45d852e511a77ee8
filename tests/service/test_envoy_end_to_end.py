"""A real Envoy, in front of a real application, with ratekeeper as its rate-limit service.

Envoy runs the shipped ``deploy/envoy/envoy.yaml`` (rendered with free loopback ports); ratekeeper
serves Envoy's gRPC protocol (``service.grpc.serve_grpc``) over an ``AsyncEngine`` on its own
event loop, or as ``ratekeeper serve --envoy-headers``. Requests within the limit reach the
application; the one over it gets Envoy's 429 with ``x-envoy-ratelimited``; the
``x-ratelimit-*`` headers and ``Retry-After`` that ratekeeper puts in its answers
(``response_headers_to_add``) reach the client once each, on the 429 and on the application's
answers; with ratekeeper stopped, ``failure_mode_deny`` decides.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.grpc import serve_grpc
from ratekeeper.service.runtime.values import ENVOY_HEADER_NAMES
from tests.gateways import EnvoyServer, Response, UpstreamServer, envoy_config, http_request
from tests.service.served import Served

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
            serve_grpc(self.engine, "127.0.0.1:0", header_names=ENVOY_HEADER_NAMES), self.loop
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
        assert [a.headers.get("x-ratelimit-limit") for a in answers] == ["3"] * 4
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


#: For ``ratekeeper serve --envoy-headers``: everyone 100 an hour; alice 3 an hour (GCRA: a
#: slot every 1200 s, no window edge); bob 2 a second (a fixed window, whose edge is never more
#: than 1 s away).
SERVED_RULES = """
domain: edge
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: gcra, name: everyone}
    descriptors:
      - key: user
        value: alice
        rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra, name: alice}
      - key: user
        value: bob
        rate_limit: {unit: second, requests_per_unit: 2, name: bob}
"""


def rate_headers(answer: Response) -> dict[str, str]:
    """The rate-limit headers of ``answer``; one repeated would show as ``"a, b"``."""
    names = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after")
    return {name: answer.headers[name] for name in names if name in answer.headers}


def test_envoys_429_carries_retry_after_and_ratekeepers_headers(
    tmp_path: Path, upstream: UpstreamServer
) -> None:
    rules = tmp_path / "edge.yaml"
    rules.write_text(SERVED_RULES)
    service = Served(tmp_path, "--rules", str(rules), "--envoy-headers")
    try:
        config = envoy_config(upstream_port=upstream.port, ratekeeper_port=service.grpc)
        envoy = EnvoyServer(tmp_path / "envoy", config)
        try:
            started = time.monotonic()
            alice = [
                http_request(envoy.port, f"/alice/{n}", headers={"X-User": "alice"})
                for n in range(4)
            ]
            took = time.monotonic() - started
            bob = []
            for n in range(20):  # until refused: two hits within one second
                bob.append(http_request(envoy.port, f"/bob/{n}", headers={"X-User": "bob"}))
                if bob[-1].status == 429:
                    break
        finally:
            envoy.stop()
    finally:
        assert service.stop() == 0
    # alice: the status closest to its limit is hers (everyone's has 97 and more left)
    assert [a.status for a in alice] == [200, 200, 200, 429]
    assert [a.headers["x-ratelimit-limit"] for a in alice] == ["3"] * 4
    assert [a.headers["x-ratelimit-remaining"] for a in alice] == ["2", "1", "0", "0"]
    assert ["retry-after" in a.headers for a in alice] == [False, False, False, True]
    # GCRA: each hit takes 1200 s; the reset counts from the first, less the time since
    # (``took`` bounds it, and is well under a second, so these are the exact values)
    resets = [int(a.headers["x-ratelimit-reset"]) for a in alice]
    assert resets[0] == 1200
    for reset, full in zip(resets[1:], [2400, 3600, 3600], strict=True):
        assert math.ceil(full - took) <= reset <= full
    retry_after = int(alice[3].headers["retry-after"])  # the next slot
    assert math.ceil(1200 - took) <= retry_after <= 1200
    assert 1 <= retry_after <= 3600  # at least a second, at most the window
    # each header comes once: Envoy adds none of its own beside them
    assert [rate_headers(a) for a in alice] == [
        {
            "x-ratelimit-limit": "3",
            "x-ratelimit-remaining": remaining,
            "x-ratelimit-reset": str(reset),
            **({"retry-after": str(retry_after)} if n == 3 else {}),
        }
        for n, (remaining, reset) in enumerate(zip(["2", "1", "0", "0"], resets, strict=True))
    ]
    assert alice[3].headers.get("x-envoy-ratelimited") == "true"
    # bob: a second's window resets in 1 s, never 0, and the 429 says to retry in 1 s
    assert bob[-1].status == 429
    assert all(a.status == 200 for a in bob[:-1])
    assert {a.headers["x-ratelimit-limit"] for a in bob} == {"2"}
    assert {a.headers["x-ratelimit-reset"] for a in bob} == {"1"}
    assert {a.headers["x-ratelimit-remaining"] for a in bob[:-1]} <= {"0", "1"}
    assert rate_headers(bob[-1])["retry-after"] == "1"
    assert all("retry-after" not in a.headers for a in [*alice[:3], *bob[:-1]])
    # the application answered the allowed requests, and Envoy added the headers to its answers
    reached = [r["path"] for r in upstream.requests()]
    assert reached == [
        *(f"/alice/{n}" for n in range(3)),
        *(f"/bob/{n}" for n in range(len(bob) - 1)),
    ]
