"""Limits on every route of a FastAPI ``APIRouter``, and of the whole app, as dependencies."""

from __future__ import annotations

import logging

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI

from ratekeeper import AsyncLimiter, AsyncMemoryStore, Limit
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit
from ratekeeper.web.fastapi import RateLimiter
from tests.web.asgi_client import run


def minute(amount: int) -> Limit:
    return Limit(amount, 60, "sliding_log")


def build(clock: FakeClock, *router_limits: RateLimit) -> FastAPI:
    """``/api/a``, ``/api/b``, ``/api/health``, ``POST /api/c`` (a limit of its own, 1 a
    minute) and ``/api/roomy`` (its own 10 a minute) on a router limited by
    ``router_limits`` (3 a minute by default); ``/outside`` off the router."""
    app = FastAPI()
    limiter = RateLimiter(AsyncLimiter(AsyncMemoryStore(clock=clock)))
    limiter.install(app)
    limits = router_limits or (RateLimit(minute(3)),)
    shared = limiter.router_limit(*limits, scope="api", exempt=["/api/health"])
    api = APIRouter(prefix="/api", dependencies=[Depends(shared)])

    @api.get("/a")
    async def a() -> dict[str, str]:
        return {"route": "a"}

    @api.get("/b")
    async def b() -> dict[str, str]:
        return {"route": "b"}

    @api.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @api.post("/c", dependencies=[Depends(limiter.limit(RateLimit(minute(1))))])
    async def c() -> dict[str, str]:
        return {"route": "c"}

    @api.get("/roomy", dependencies=[Depends(limiter.limit(RateLimit(minute(10))))])
    async def roomy() -> dict[str, str]:
        return {"route": "roomy"}

    app.include_router(api)

    @app.get("/outside")
    async def outside() -> dict[str, str]:
        return {"route": "outside"}

    return app


def requests(app: FastAPI, calls: list[str]) -> list[httpx.Response]:
    """Each of ``calls`` (``"GET /api/a"``) in turn."""

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        answers = []
        for call in calls:
            method, path = call.split()
            answers.append(await client.request(method, path))
        return answers

    return run(app, steps)


def test_a_router_limit_counts_its_routes_together_and_no_other(clock: FakeClock) -> None:
    calls = ["GET /api/a", "GET /api/b", "GET /outside", "GET /api/a", "GET /api/b"]
    calls += ["GET /api/a", "GET /outside", "GET /outside"]
    app = build(clock)
    answers = requests(app, calls)
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 429, 429, 200, 200]
    assert [a.headers.get("x-ratelimit-remaining") for a in answers[:4]] == ["2", "1", None, "0"]
    refused = answers[4]
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == "60"
    assert refused.headers["x-ratelimit-limit"] == "3"
    assert refused.json()["type"] == "urn:ratekeeper:problem:rate-limited"
    clock.advance(60)  # the window has passed: the router's routes are admitted again
    assert [a.status_code for a in requests(app, ["GET /api/b", "GET /api/a"])] == [200, 200]


def test_an_exempt_path_of_the_router_is_never_counted(clock: FakeClock) -> None:
    calls = ["GET /api/health"] * 4 + ["GET /api/a"] * 4 + ["GET /api/health"]
    answers = requests(build(clock), calls)
    assert [a.status_code for a in answers] == [200] * 7 + [429, 200]
    assert "x-ratelimit-limit" not in answers[0].headers


def test_the_router_limit_and_the_routes_own_both_apply_router_first(clock: FakeClock) -> None:
    calls = ["POST /api/c", "POST /api/c", "GET /api/a", "GET /api/b"]
    answers = requests(build(clock), calls)
    assert [a.status_code for a in answers] == [200, 429, 200, 429]
    # Admitted: the headers show the closer of the two, the route's 1 (none left).
    assert answers[0].headers["x-ratelimit-limit"] == "1"
    assert answers[0].headers["x-ratelimit-remaining"] == "0"
    assert answers[0].headers.get_list("x-ratelimit-limit") == ["1"]
    # Refused by the route's limit, after the router's had counted it: its own headers.
    assert answers[1].headers["x-ratelimit-limit"] == "1"
    assert answers[2].headers["x-ratelimit-limit"] == "3"
    assert answers[2].headers["x-ratelimit-remaining"] == "0"  # c, c and a: 3 of 3


def test_an_admitted_route_tells_of_the_router_limit_when_it_is_the_closer(
    clock: FakeClock,
) -> None:
    answers = requests(build(clock), ["GET /api/a", "GET /api/roomy", "GET /api/roomy"])
    assert [a.status_code for a in answers] == [200, 200, 200]
    # The router's 3 (none left) is closer than the route's 10 (8 left).
    assert answers[2].headers.get_list("x-ratelimit-limit") == ["3"]
    assert answers[2].headers.get_list("x-ratelimit-remaining") == ["0"]
    assert answers[1].headers["x-ratelimit-remaining"] == "1"


def test_a_router_limit_on_some_methods_counts_only_those(clock: FakeClock) -> None:
    app = build(clock, RateLimit(minute(1), methods=["POST"]))
    answers = requests(app, ["GET /api/a"] * 3 + ["POST /api/c", "GET /api/b", "POST /api/c"])
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 200, 429]
    assert "x-ratelimit-limit" not in answers[0].headers


def test_a_shadow_router_limit_logs_and_never_refuses(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = build(clock, RateLimit(minute(2), shadow=True))
    with caplog.at_level(logging.INFO, logger="ratekeeper.web"):
        answers = requests(app, ["GET /api/a", "GET /api/b", "GET /api/a", "GET /api/b"])
    assert [a.status_code for a in answers] == [200] * 4
    assert "x-ratelimit-limit" not in answers[3].headers
    assert len([r for r in caplog.records if "shadow mode" in r.getMessage()]) == 2


def test_an_app_wide_limit_counts_every_route(clock: FakeClock) -> None:
    limiter = RateLimiter(AsyncLimiter(AsyncMemoryStore(clock=clock)))
    everywhere = limiter.router_limit(RateLimit(minute(3)), scope="app")
    app = FastAPI(dependencies=[Depends(everywhere)])
    limiter.install(app)
    api = APIRouter(prefix="/api")

    @api.get("/a")
    async def a() -> dict[str, str]:
        return {"route": "a"}

    app.include_router(api)

    @app.get("/b")
    async def b() -> dict[str, str]:
        return {"route": "b"}

    answers = requests(app, ["GET /api/a", "GET /b", "GET /b", "GET /api/a", "GET /b"])
    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]


def test_a_router_limit_is_checked_when_built() -> None:
    limiter = RateLimiter(AsyncLimiter())
    with pytest.raises(TypeError, match="scope"):
        limiter.router_limit(RateLimit("1/minute"), scope=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scope"):
        limiter.router_limit(RateLimit("1/minute"), scope="")
    with pytest.raises(ValueError, match="at least one"):
        limiter.router_limit(scope="api")
    with pytest.raises(ValueError, match="starts with '/'"):
        limiter.router_limit(RateLimit("1/minute"), scope="api", exempt=["health"])
