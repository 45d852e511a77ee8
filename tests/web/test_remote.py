"""The middleware over the remote client: limits decided by a real ``ratekeeper serve``, and
the failure policy while it cannot be reached."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratekeeper import Limit
from ratekeeper.client import AsyncRemoteLimiter, RemoteLimiter
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.asgi import RateLimitMiddleware
from ratekeeper.web.wsgi import RateLimitMiddleware as WSGIMiddleware
from tests.servers import free_port
from tests.service.served import Served
from tests.web.asgi_client import run
from tests.web.wsgi_calls import call, echo


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    served = Served(tmp_path_factory.mktemp("service"))
    try:
        yield served.url
    finally:
        served.stop()


async def home(request: Any) -> PlainTextResponse:
    return PlainTextResponse("ok")


def test_asgi_over_the_async_remote_limiter(service: str) -> None:
    app = Starlette(routes=[Route("/", home)])
    limits = [
        RateLimit(Limit(3, 3600, "gcra"), key=keys.client_ip(), scope="remote-asgi"),
        RateLimit(Limit(2, 3600, "sliding_log"), key=keys.header("X-User"), scope="remote-asgi"),
    ]
    decider = AsyncRemoteLimiter(service, timeout=5)
    app.add_middleware(RateLimitMiddleware, decider=decider, limits=limits)

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        alice = {"X-User": "alice"}
        answers = [await client.get("/", headers=alice) for _ in range(4)]
        answers += [await client.get("/") for _ in range(2)]
        await decider.close()
        return answers

    answers = run(app, steps)
    assert [a.status_code for a in answers[:4]] == [200, 200, 429, 429]
    assert answers[0].headers["x-ratelimit-remaining"] == "1"  # the user's 2, closest to refusing
    assert "x-ratelimit-degraded" not in answers[0].headers
    # A remote limiter decides the limits one by one, so each counts even when the other
    # refuses: the refused third request took the address's last of 3.
    assert [a.status_code for a in answers[4:]] == [429, 429]
    assert answers[4].headers["x-ratelimit-remaining"] == "0"


def test_wsgi_over_the_remote_limiter_and_its_failure_policy(service: str) -> None:
    limit = [RateLimit(Limit(1, 3600, "gcra"), scope="remote-wsgi")]
    with RemoteLimiter(service, timeout=5) as decider:
        app = WSGIMiddleware(echo, decider, limit)
        assert [call(app).status for _ in range(2)] == [200, 429]

    with RemoteLimiter(f"http://127.0.0.1:{free_port()}", timeout=1) as away:
        answers = [call(WSGIMiddleware(echo, away, limit)) for _ in range(2)]
    assert [a.status for a in answers] == [200, 200]  # on_store_error="allow"
    assert answers[0].headers["x-ratelimit-degraded"] == "true"
