"""The bound on decisions in flight: exact counts with a gate the test holds, on every surface.

A store whose calls wait at a gate keeps decisions in flight for as long as the test says. With
the bound reached, each decision route answers at once (HTTP 503 ``overloaded`` with
``Retry-After``, gRPC ``UNAVAILABLE``), counted by surface; health and metrics still answer;
once the gate opens, the admitted decisions are answered as usual and the bound is free again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import httpx
import pytest

from ratekeeper import AsyncEngine
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import ConfigError
from ratekeeper.core.limits import Limit
from ratekeeper.rules import parse_rules
from ratekeeper.service.grpc import serve_grpc
from ratekeeper.service.inflight import (
    DEFAULT_MAX_IN_FLIGHT,
    MOST_IN_FLIGHT,
    QUIET,
    InFlightBound,
    check_limit,
)
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores import Health, Hit
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from tests.service.runtime.command_line import read

RULES = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
"""
OVERLOADED = "urn:ratekeeper:problem:overloaded"


class Gated:
    """A memory store whose decisions wait until ``gate`` is set; ``waiting`` counts them."""

    def __init__(self, store: AsyncMemoryStore, gate: asyncio.Event) -> None:
        self.store = store
        self.gate = gate
        self.waiting = 0

    async def _wait(self) -> None:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        await self._wait()
        return await self.store.apply(key, limit, cost, now)

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        await self._wait()
        return await self.store.apply_many(hits, all_or_nothing=all_or_nothing, now=now)

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        return await self.store.release(key, limit, slots, now)

    async def reset(self, key: str, limit: Limit) -> None:
        await self.store.reset(key, limit)

    async def ping(self) -> Health:
        return await self.store.ping()

    async def close(self) -> None:
        await self.store.close()


def gated_engine(gate: asyncio.Event) -> tuple[AsyncEngine, Gated]:
    clock = FakeClock()
    store = Gated(AsyncMemoryStore(clock=clock), gate)
    return AsyncEngine(store, rules=parse_rules(RULES, "rules.yaml"), clock=clock), store


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition()`` holds (at most 2,000 turns)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


# -- The bound itself ---------------------------------------------------------------------------


def test_admits_up_to_its_bound_and_counts_each_refusal_by_surface() -> None:
    bound = InFlightBound(3)
    assert [bound.enter("http") for _ in range(3)] == [True] * 3
    assert [bound.enter(surface) for surface in ("http", "nginx", "grpc", "grpc")] == [False] * 4
    assert (bound.in_flight, bound.shed) == (3, {"http": 1, "nginx": 1, "grpc": 2})
    bound.leave()
    assert bound.enter("grpc") and not bound.enter("http")
    for _ in range(3):
        bound.leave()
    assert (bound.in_flight, bound.shed) == (0, {"http": 2, "nginx": 1, "grpc": 2})


def test_shedding_is_logged_once_as_it_starts_and_once_when_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(0)
    bound = InFlightBound(1, clock=clock)
    caplog.set_level(logging.INFO, "ratekeeper.service")
    assert bound.enter("http")
    for _ in range(50):
        assert not bound.enter("http")
    clock.advance(QUIET / 2)
    assert not bound.enter("nginx")
    bound.leave()  # shed QUIET / 2 ago: still shedding
    clock.advance(QUIET)
    assert bound.enter("http")
    bound.leave()  # nothing shed for QUIET: over
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith("overloaded: 1 decision in flight, ")
    assert messages[1] == f"no longer overloaded: 51 requests shed in {QUIET / 2:.1f} s"
    assert [record.levelname for record in caplog.records] == ["WARNING", "INFO"]


@pytest.mark.parametrize(
    "value",
    [0, -1, MOST_IN_FLIGHT + 1, True, 1.5, float("nan"), float("inf"), "0", "-5", "+5", "1e3",
     "1_000", "5.0", "", " ", "²", "ten", None, [5]],
)  # fmt: skip
def test_a_bound_that_is_not_a_whole_number_from_1_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match=f"expected a whole number from 1 to {MOST_IN_FLIGHT}"):
        check_limit(value)
    with pytest.raises(ValueError):
        InFlightBound(value)


def test_a_bound_in_digits_or_an_int_is_taken() -> None:
    assert [check_limit(value) for value in (1, "1", " 250 ", "1000000", MOST_IN_FLIGHT)] == [
        1, 1, 250, 1_000_000, MOST_IN_FLIGHT,
    ]  # fmt: skip


def test_the_setting_from_its_flag_or_its_variable_else_the_default() -> None:
    assert read([]).max_in_flight == DEFAULT_MAX_IN_FLIGHT
    assert read(["--max-in-flight", "64"]).max_in_flight == 64
    assert read([], {"RATEKEEPER_MAX_IN_FLIGHT": "128"}).max_in_flight == 128
    assert read(["--max-in-flight", "8"], {"RATEKEEPER_MAX_IN_FLIGHT": "128"}).max_in_flight == 8


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1.5", "many", "", "10000001"])
def test_a_bad_setting_is_named_with_its_flag_and_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=r"--max-in-flight: expected a whole number"):
        read(["--max-in-flight", value])
    with pytest.raises(
        ConfigError, match=r"--max-in-flight \(from \$RATEKEEPER_MAX_IN_FLIGHT\): expected"
    ):
        read([], {"RATEKEEPER_MAX_IN_FLIGHT": value})


# -- HTTP --------------------------------------------------------------------------------------

CHECK = {"key": "user:1", "limit": "10/minute"}
ENVOY = {"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "a"}]}]}
NGINX = {"X-Real-IP": "10.0.0.1", "X-Original-URI": "/x"}


async def shed_over_http() -> tuple[list[httpx.Response], dict[str, httpx.Response], Any]:
    gate = asyncio.Event()
    engine, store = gated_engine(gate)
    metrics = Metrics()
    metrics.track(engine)
    bound = InFlightBound(3)
    app = create_app(engine, metrics=metrics, in_flight_bound=bound)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rk") as client:
        held = [
            asyncio.ensure_future(client.post("/v1/check", json=CHECK)),
            asyncio.ensure_future(client.post("/v1/check/batch", json=[CHECK])),
            asyncio.ensure_future(client.get("/v1/nginx", headers=NGINX)),
        ]
        await until(lambda: store.waiting == 3)
        turned_away = {
            "check": await client.post("/v1/check", json=CHECK),
            "batch": await client.post("/v1/check/batch", json=[CHECK]),
            "peek": await client.post("/v1/peek", json=CHECK),
            "json": await client.post("/json", json=ENVOY),
            "nginx": await client.get("/v1/nginx", headers=NGINX),
            "healthz": await client.get("/healthz"),
            "readyz": await client.get("/readyz"),
            "metrics": await client.get("/metrics"),
        }
        gate.set()
        answered = list(await asyncio.gather(*held))
        after = await client.post("/v1/check", json=CHECK)
    return [*answered, after], turned_away, bound


def test_http_answers_past_the_bound_at_once_and_the_admitted_as_usual() -> None:
    answered, turned_away, bound = asyncio.run(shed_over_http())
    assert [one.status_code for one in answered] == [200, 200, 200, 200]
    for route in ("check", "batch", "peek", "json", "nginx"):
        one = turned_away[route]
        assert one.status_code == 503, route
        assert one.headers["retry-after"] == "1"
        assert one.headers["content-type"] == "application/problem+json"
        body = one.json()
        assert body["type"] == OVERLOADED and body["status"] == 503
        assert "deciding 3 requests, the most it takes at once" in body["detail"]
    assert [turned_away[route].status_code for route in ("healthz", "readyz", "metrics")] == [
        200
    ] * 3
    scraped = turned_away["metrics"].text
    assert 'ratekeeper_requests_shed_total{surface="http"} 4.0' in scraped
    assert 'ratekeeper_requests_shed_total{surface="nginx"} 1.0' in scraped
    assert "ratekeeper_decisions_in_flight 3.0" in scraped
    assert "ratekeeper_decisions_in_flight_max 3.0" in scraped
    assert (bound.in_flight, bound.shed) == (0, {"http": 4, "nginx": 1, "grpc": 0})


# -- gRPC --------------------------------------------------------------------------------------


async def shed_over_grpc() -> tuple[Any, grpc.aio.AioRpcError, InFlightBound]:
    gate = asyncio.Event()
    engine, store = gated_engine(gate)
    bound = InFlightBound(1)
    server, port = await serve_grpc(engine, "127.0.0.1:0", None, bound)
    entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="remote_address", value="a")
    request = rls_pb2.RateLimitRequest(
        domain="edge", descriptors=[ratelimit_pb2.RateLimitDescriptor(entries=[entry])]
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = rls_pb2_grpc.RateLimitServiceStub(channel)
            held = asyncio.ensure_future(stub.ShouldRateLimit(request, timeout=10))
            for _ in range(500):  # the call crosses a real connection: give it real time
                if store.waiting:
                    break
                await asyncio.sleep(0.01)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ShouldRateLimit(request, timeout=10)
            gate.set()
            answered = await held
    finally:
        await server.stop(None)
    return answered, caught.value, bound


def test_grpc_answers_past_the_bound_unavailable_at_once() -> None:
    answered, refused, bound = asyncio.run(shed_over_grpc())
    assert answered.overall_code == rls_pb2.RateLimitResponse.OK
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.details().startswith("overloaded: the service is deciding 1 request, ")
    assert dict(refused.trailing_metadata() or ())["retry-after"] == "1"
    assert (bound.in_flight, bound.shed) == (0, {"http": 0, "nginx": 0, "grpc": 1})


def test_the_json_problem_kind_is_listed() -> None:
    from ratekeeper.wire.problems import KINDS

    assert KINDS["overloaded"] == (503, OVERLOADED)
