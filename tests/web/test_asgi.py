"""The ASGI middleware in front of real Starlette apps, in-process."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from ratekeeper import AsyncLimiter, AsyncMemoryStore, InvalidLimitError, Limit, Limiter
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, Reply, keys
from ratekeeper.web.asgi import RateLimitMiddleware
from tests.web.asgi_client import get_all, run


async def home(request: StarletteRequest) -> Response:
    return PlainTextResponse("home")


async def item(request: StarletteRequest) -> Response:
    return PlainTextResponse(f"item {request.path_params['id']}")


async def echo(request: StarletteRequest) -> Response:
    return Response(await request.body(), media_type=request.headers.get("content-type"))


async def form(request: StarletteRequest) -> Response:
    fields = parse_qs((await request.body()).decode())
    return JSONResponse({name: values[0] for name, values in fields.items()})


async def socket(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("hello")
    await websocket.close()


ROUTES = [
    Route("/", home),
    Route("/health", home),
    Route("/items/{id}", item),
    Route("/echo", echo, methods=["POST"]),
    Route("/form", form, methods=["POST"]),
    WebSocketRoute("/ws", socket),
]


def app_with(decider: Any, limits: list[RateLimit], **options: Any) -> Starlette:
    app = Starlette(routes=ROUTES)
    app.add_middleware(RateLimitMiddleware, decider=decider, limits=limits, **options)
    return app


def limiter(clock: FakeClock) -> AsyncLimiter:
    return AsyncLimiter(AsyncMemoryStore(clock=clock))


def test_a_refused_request_is_a_429_problem_with_retry_after(clock: FakeClock) -> None:
    app = app_with(limiter(clock), [RateLimit(Limit(2, 60, "sliding_log"))])
    first, second, third = get_all(app, ["/", "/", "/"])
    assert [first.status_code, second.status_code, third.status_code] == [200, 200, 429]
    assert first.text == "home"
    assert first.headers["x-ratelimit-limit"] == "2"
    assert first.headers["x-ratelimit-remaining"] == "1"
    assert first.headers["x-ratelimit-reset"] == "60"
    assert "retry-after" not in first.headers
    assert second.headers["x-ratelimit-remaining"] == "0"
    assert third.headers["content-type"] == "application/problem+json"
    assert third.headers["retry-after"] == "60"
    assert third.headers["x-ratelimit-remaining"] == "0"
    assert third.json() == {
        "type": "urn:ratekeeper:problem:rate-limited",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "Too many requests; retry after 60 seconds.",
        "retry_after": 60,
    }
    clock.advance(60)
    assert get_all(app, ["/"])[0].status_code == 200


def test_each_client_address_counts_apart(clock: FakeClock) -> None:
    app = app_with(limiter(clock), [RateLimit("1/minute")])
    assert get_all(app, ["/", "/"], peer="10.0.0.1")[1].status_code == 429
    assert get_all(app, ["/"], peer="10.0.0.2")[0].status_code == 200


def test_the_route_key_counts_a_template_together(clock: FakeClock) -> None:
    app = app_with(limiter(clock), [RateLimit("2/minute", key=keys.route())])
    answers = get_all(app, ["/items/1", "/items/2", "/items/3", "/"])
    assert [a.status_code for a in answers] == [200, 200, 429, 200]


def test_exempt_paths_and_other_scopes_pass_through_uncounted(clock: FakeClock) -> None:
    app = app_with(limiter(clock), [RateLimit("1/minute")], exempt=["/health", "/items/*"])
    answers = get_all(app, ["/health", "/health", "/items/1", "/items/2", "/", "/"])
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 200, 429]
    assert "x-ratelimit-limit" not in answers[0].headers

    async def lifespan_and_websocket() -> list[Any]:
        # The lifespan and websocket scopes go to the app untouched, over the limit or not.
        sent: list[Any] = []
        messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

        async def receive() -> Any:
            return next(messages)

        async def send(message: Any) -> None:
            sent.append(message["type"])

        await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
        socket_messages = iter([{"type": "websocket.connect"}, {"type": "websocket.disconnect"}])

        async def socket_receive() -> Any:
            return next(socket_messages)

        scope = {
            "type": "websocket",
            "path": "/ws",
            "raw_path": b"/ws",
            "root_path": "",
            "headers": [],
            "query_string": b"",
            "client": ("127.0.0.1", 1),
            "subprotocols": [],
        }
        await app(scope, socket_receive, send)
        return sent

    sent = asyncio.run(lifespan_and_websocket())
    assert sent[:2] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert sent[2:4] == ["websocket.accept", "websocket.send"]


def test_the_body_read_for_a_key_reaches_the_app_unchanged(clock: FakeClock) -> None:
    limits = [RateLimit("2/minute", key=keys.field("username"), methods=["POST"])]
    app = app_with(limiter(clock), limits)

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        return [
            await client.post("/form", data={"username": "alice", "password": "x"}),
            await client.post("/echo", json={"username": "alice", "n": 1}),
            await client.post("/echo", json={"username": "alice"}),
            await client.post("/echo", json={"username": "bob"}),
            await client.post("/echo", content=b"not json", headers={"content-type": "text/plain"}),
        ]

    answers = run(app, steps)
    assert [a.status_code for a in answers] == [200, 200, 429, 200, 200]
    assert answers[0].json() == {"username": "alice", "password": "x"}
    assert answers[1].json() == {"username": "alice", "n": 1}
    assert answers[4].content == b"not json"
    assert "x-ratelimit-limit" not in answers[4].headers  # no username: not counted


def test_a_json_body_no_key_can_hold_is_still_counted(clock: FakeClock) -> None:
    app = app_with(limiter(clock), [RateLimit("1/minute", key=keys.field("username"))])
    lone = b'{"username": "\\ud800"}'  # a lone surrogate: no valid key as it is

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        headers = {"content-type": "application/json"}
        return [await client.post("/echo", content=lone, headers=headers) for _ in range(2)]

    answers = run(app, steps)
    assert [a.status_code for a in answers] == [200, 429]
    assert answers[0].content == lone


def test_a_body_too_long_to_read_for_a_key_is_a_413(clock: FakeClock) -> None:
    limits = [RateLimit("2/minute", key=keys.field("username"))]
    app = app_with(limiter(clock), limits, max_body=10)

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/echo", data={"username": "a-rather-long-name"})

    answer = run(app, steps)
    assert answer.status_code == 413
    assert answer.json()["type"] == "urn:ratekeeper:problem:too-large"


def test_costs_ietf_fields_and_the_app_headers_win(clock: FakeClock) -> None:
    async def own(request: StarletteRequest) -> Response:
        return PlainTextResponse("own", headers={"X-RateLimit-Limit": "mine"})

    app = Starlette(routes=[Route("/", home), Route("/own", own)])
    cost = RateLimit(Limit(10, 60, "sliding_log"), cost=lambda request: 4, scope="s")
    app.add_middleware(RateLimitMiddleware, decider=limiter(clock), limits=[cost], ietf=True)
    first, second, third, own_answer = get_all(app, ["/", "/", "/", "/own"])
    assert first.headers["x-ratelimit-remaining"] == "6"
    assert first.headers["ratelimit-policy"] == '"default";q=10'
    assert first.headers["ratelimit"] == '"default";r=6;t=60'
    assert second.headers["x-ratelimit-remaining"] == "2"
    assert third.status_code == 429
    assert own_answer.status_code == 429  # the 4th would cost 4 more, with 2 left

    clock.advance(60)
    assert get_all(app, ["/own"])[0].headers["x-ratelimit-limit"] == "mine"


def test_headers_false_leaves_admitted_responses_alone(clock: FakeClock) -> None:
    app = app_with(limiter(clock), [RateLimit("1/minute")], headers=False)
    first, second = get_all(app, ["/", "/"])
    assert "x-ratelimit-limit" not in first.headers
    # A fixed window ends at the next whole minute of the epoch: 40 s after the fake clock's T0.
    assert second.status_code == 429 and second.headers["retry-after"] == "40"


def test_on_refused_answers_in_its_own_way(clock: FakeClock) -> None:
    def teapot(request: Any, outcome: Any) -> Reply:
        return Reply(418, [("Content-Type", "text/plain")], f"slow down, {request.client}".encode())

    app = app_with(limiter(clock), [RateLimit("1/minute")], on_refused=teapot)
    answer = get_all(app, ["/", "/"])[1]
    assert answer.status_code == 418
    assert answer.text == "slow down, 127.0.0.1"
    assert answer.headers["retry-after"] == "40"
    assert answer.headers["content-type"] == "text/plain"

    def unsure(request: Any, outcome: Any) -> Any:
        return (418, [], b"a tuple, not a Reply")

    app = app_with(limiter(clock), [RateLimit("1/minute")], on_refused=unsure)
    with pytest.raises(TypeError, match="on_refused returns a Reply"):
        get_all(app, ["/", "/"])


def test_several_limits_all_or_nothing(clock: FakeClock) -> None:
    minute = RateLimit("3/minute", key=keys.client_ip())
    app_limit = RateLimit("4/minute", key=keys.generic(), scope="everyone")
    app = app_with(limiter(clock), [minute, app_limit])
    answers = get_all(app, ["/"] * 4, peer="10.0.0.1")
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    # The refused 4th consumed nothing of the shared limit: another client has 1 left.
    assert [a.status_code for a in get_all(app, ["/", "/"], peer="10.0.0.2")] == [200, 429]


def test_shadow_limits_count_and_log_but_never_refuse(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    decider = limiter(clock)
    app = app_with(decider, [RateLimit("1/minute", shadow=True)])
    with caplog.at_level(logging.INFO, logger="ratekeeper.web"):
        answers = get_all(app, ["/", "/", "/"])
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert "x-ratelimit-limit" not in answers[2].headers
    refusals = [r for r in caplog.records if "shadow mode" in r.getMessage()]
    assert len(refusals) == 2


SHAPER = Limit(2, 1, "leaky_shaper")  # 2 requests per second leave the queue


def test_a_shaper_route_waits_for_its_delay(clock: FakeClock) -> None:
    app = app_with(limiter(clock), [RateLimit(SHAPER)], max_delay=1.0, sleep=clock.async_sleep)
    started = clock()
    answers = get_all(app, ["/"] * 5)
    assert [a.status_code for a in answers] == [200] * 5
    assert clock.slept == [0.5, 0.5, 0.5, 0.5]  # paced at the outflow, not refused
    assert clock() - started == 2.0


def test_a_delay_beyond_max_delay_is_refused(clock: FakeClock) -> None:
    app = app_with(limiter(clock), [RateLimit(SHAPER)], max_delay=0.25, sleep=clock.async_sleep)
    answers = get_all(app, ["/"] * 2)
    assert [a.status_code for a in answers] == [200, 429]
    assert answers[1].headers["retry-after"] == "1"
    assert clock.slept == []


def test_a_store_failure_is_answered_by_the_policy_and_marked(clock: FakeClock) -> None:
    from tests.servers import free_port

    down = f"redis://127.0.0.1:{free_port()}/0"
    app = app_with(AsyncLimiter(_store(down, "allow")), [RateLimit("1/minute")])
    answers = get_all(app, ["/", "/"])
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].headers["x-ratelimit-degraded"] == "true"

    deny = AsyncLimiter(_store(down, "deny"))
    refused = get_all(app_with(deny, [RateLimit("1/minute")]), ["/"])[0]
    assert refused.status_code == 429 and refused.headers["x-ratelimit-degraded"] == "true"

    raising = AsyncLimiter(_store(down, None))
    failed = get_all(app_with(raising, [RateLimit("1/minute")]), ["/"])[0]
    assert failed.status_code == 503
    assert failed.json()["type"] == "urn:ratekeeper:problem:unavailable"


def _store(url: str, policy: str | None) -> Any:
    from ratekeeper import open_async_store

    return open_async_store(url, on_store_error=policy)


def test_options_are_checked_when_the_middleware_is_built() -> None:
    app = Starlette()
    with pytest.raises(TypeError, match="blocks"):
        RateLimitMiddleware(app, Limiter(), [RateLimit("1/minute")])
    with pytest.raises(InvalidLimitError):
        RateLimit("1/fortnight")
    with pytest.raises(TypeError, match="RateLimit"):
        RateLimitMiddleware(app, AsyncLimiter(), ["1/minute"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="domain"):
        RateLimitMiddleware(app, AsyncLimiter(), descriptors=[keys.path()])
    with pytest.raises(TypeError, match="Engine"):
        RateLimitMiddleware(app, AsyncLimiter(), domain="api", descriptors=[keys.path()])
    with pytest.raises(ValueError, match="max_delay"):
        RateLimitMiddleware(app, AsyncLimiter(), max_delay=-1)
    with pytest.raises(ValueError, match="exempt"):
        RateLimitMiddleware(app, AsyncLimiter(), exempt=["health"])
    with pytest.raises(TypeError):
        RateLimitMiddleware(app, AsyncLimiter(), unknown=True)
    with pytest.raises(ValueError, match="network"):
        keys.client_ip(trusted=["10.0.0.0/33"])


def test_every_option_is_checked_when_built_not_on_a_request() -> None:
    app = Starlette()
    decider = AsyncLimiter()
    for bad in [None, "redis://127.0.0.1:6379/0"]:
        with pytest.raises(TypeError, match="decider"):
            RateLimitMiddleware(app, bad)
    with pytest.raises(TypeError, match="list of RateLimit"):
        RateLimitMiddleware(app, decider, RateLimit("1/minute"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of RateLimit"):
        RateLimitMiddleware(app, decider, None)  # type: ignore[arg-type]
    for name in ["X Degraded", "X-Dégradé", 5, ""]:
        with pytest.raises(ValueError, match="degraded_header"):
            RateLimitMiddleware(app, decider, degraded_header=name)  # type: ignore[arg-type]
    for option in ["headers", "ietf"]:
        with pytest.raises(TypeError, match=option):
            RateLimitMiddleware(app, decider, **{option: "yes"})
    with pytest.raises(TypeError, match="sleep"):
        RateLimitMiddleware(app, decider, sleep=5)
    with pytest.raises(TypeError, match="exempt"):
        RateLimitMiddleware(app, decider, exempt=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="domain"):
        RateLimitMiddleware(app, decider, domain="")
    # A cost of the middleware's own is the descriptors'; each RateLimit has its own.
    with pytest.raises(ValueError, match="RateLimit its own cost"):
        RateLimitMiddleware(app, decider, [RateLimit("1/minute")], cost=5)
