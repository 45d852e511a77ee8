"""Per-route limits as FastAPI dependencies, and the middleware on a FastAPI app."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import Depends, FastAPI
from starlette.responses import PlainTextResponse

from ratekeeper import AsyncLimiter, AsyncMemoryStore, Limit
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.asgi import RateLimitMiddleware
from ratekeeper.web.fastapi import RateLimiter
from tests.web.asgi_client import get_all, run


def build(clock: FakeClock, install: bool = True) -> FastAPI:
    app = FastAPI()
    limiter = RateLimiter(AsyncLimiter(AsyncMemoryStore(clock=clock)))
    if install:
        limiter.install(app)
    per_app = RateLimit(Limit(2, 60, "sliding_log"), key=keys.header("X-Client-App", "client_app"))
    uploads = limiter.limit(
        RateLimit(Limit(3, 3600, "sliding_log"), key=keys.user(lambda r: r.header("x-user"))),
        scope="uploads",
    )

    @app.post("/orders", dependencies=[Depends(limiter.limit(per_app))])
    async def order() -> dict[str, str]:
        return {"order": "placed"}

    @app.get("/items/{item_id}", dependencies=[Depends(limiter.limit(RateLimit("1/hour")))])
    async def item(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.post("/photos", dependencies=[Depends(uploads)])
    async def photo() -> dict[str, str]:
        return {"kind": "photo"}

    @app.post("/videos", dependencies=[Depends(uploads)])
    async def video() -> dict[str, str]:
        return {"kind": "video"}

    both = limiter.limit(
        RateLimit(
            Limit(5, 60, "sliding_log"),
            key=keys.field("username", str.casefold),
            scope="login-user",
        ),
        RateLimit(Limit(3, 60, "sliding_log"), scope="login-ip"),
    )

    @app.post("/login", dependencies=[Depends(both)])
    async def login(body: dict[str, Any]) -> dict[str, Any]:
        return {"welcome": body["username"]}

    @app.get("/raw", dependencies=[Depends(limiter.limit(RateLimit("5/hour")))])
    async def raw() -> PlainTextResponse:
        return PlainTextResponse("raw")

    return app


def test_a_route_dependency_limits_and_sets_headers(clock: FakeClock) -> None:
    app = build(clock)

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        own = {"X-Client-App": "app-42"}
        other = {"X-Client-App": "app-7"}
        return [
            await client.post("/orders", headers=own),
            await client.post("/orders", headers=own),
            await client.post("/orders", headers=own),
            await client.post("/orders", headers=other),
        ]

    answers = run(app, steps)
    assert [a.status_code for a in answers] == [200, 200, 429, 200]
    assert answers[0].json() == {"order": "placed"}
    assert answers[0].headers["x-ratelimit-remaining"] == "1"
    assert answers[2].headers["content-type"] == "application/problem+json"
    assert answers[2].headers["retry-after"] == "60"
    assert answers[2].json()["type"] == "urn:ratekeeper:problem:rate-limited"


def test_a_route_counts_by_its_template_and_apart_from_other_routes(clock: FakeClock) -> None:
    answers = get_all(build(clock), ["/items/1", "/items/2", "/raw"])
    assert [a.status_code for a in answers] == [200, 429, 200]
    assert answers[2].headers["x-ratelimit-remaining"] == "4"  # a Response of its own is told


def test_routes_sharing_a_scope_share_their_counters(clock: FakeClock) -> None:
    async def steps(client: httpx.AsyncClient) -> list[int]:
        alice = {"X-User": "alice"}
        statuses = []
        for path in ["/photos", "/videos", "/photos", "/videos"]:
            statuses.append((await client.post(path, headers=alice)).status_code)
        statuses.append((await client.post("/videos", headers={"X-User": "bob"})).status_code)
        return statuses

    assert run(build(clock), steps) == [200, 200, 200, 429, 200]


def test_several_limits_on_one_route_with_a_json_body(clock: FakeClock) -> None:
    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        names = ["Alice", "alice", "bob", "carol"]
        return [await client.post("/login", json={"username": n}) for n in names]

    answers = run(build(clock), steps)
    assert [a.status_code for a in answers] == [200, 200, 200, 429]  # 3 per IP
    assert answers[0].json() == {"welcome": "Alice"}  # the body still reached the route


def test_without_install_fastapi_answers_its_own_json(clock: FakeClock) -> None:
    answers = get_all(build(clock, install=False), ["/items/1", "/items/1", "/raw"])
    assert answers[1].status_code == 429
    assert "x-ratelimit-limit" not in answers[2].headers  # a Response of its own is left alone
    # "1/hour" is a fixed window: it ends at the next whole hour, 2800 s after the clock's T0.
    assert answers[1].json() == {"detail": "Too many requests; retry after 2800 seconds."}
    assert answers[1].headers["retry-after"] == "2800"
    assert answers[1].headers["content-type"] == "application/json"


def test_a_body_declared_longer_than_max_body_is_a_413_unread(clock: FakeClock) -> None:
    app = FastAPI()
    limiter = RateLimiter(AsyncLimiter(AsyncMemoryStore(clock=clock)), max_body=32)
    limiter.install(app)
    by_name = limiter.limit(RateLimit("5/minute", key=keys.field("username")))

    @app.post("/login", dependencies=[Depends(by_name)])
    async def login() -> dict[str, str]:
        return {"ok": "yes"}

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        form = {"content-type": "application/x-www-form-urlencoded", "content-length": "4096"}
        return await client.post("/login", content=b"username=alice", headers=form)

    answer = run(app, steps)
    assert answer.status_code == 413
    assert answer.json()["type"] == "urn:ratekeeper:problem:too-large"


def test_the_middleware_on_a_fastapi_app(clock: FakeClock) -> None:
    app = FastAPI()

    @app.get("/")
    async def home() -> dict[str, str]:
        return {"ok": "yes"}

    decider = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app.add_middleware(RateLimitMiddleware, decider=decider, limits=[RateLimit("1/hour")])
    answers = get_all(app, ["/", "/", "/docs"])
    assert [a.status_code for a in answers] == [200, 429, 429]
