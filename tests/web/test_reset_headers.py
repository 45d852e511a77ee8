"""The middleware's rate-limit headers, exact under a fake clock: ``X-RateLimit-Reset`` is the
time left in the window rounded up (never 0 while it is open, never cut at a day), and
``Retry-After`` on the refusal as long, at most a day. The same cases as the service's
(``tests/service/test_reset_headers.py``), through the ASGI middleware in front of Starlette.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratekeeper import AsyncLimiter, AsyncMemoryStore, Limit
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit
from ratekeeper.web.asgi import RateLimitMiddleware
from tests.web.asgi_client import get_all

MINUTE = 1_699_999_980.0  # a minute's start (and so a second's)
DAY = 1_699_920_000.0  # a UTC day's start
MONTH = 2_592_000.0


def utc(*fields: int) -> float:
    return datetime(*fields, tzinfo=UTC).timestamp()


#: (limit, now, X-RateLimit-Reset, Retry-After): in the middle of each window and at its edges.
CASES = [
    (Limit(2, 1), MINUTE + 0.25, "1", "1"),
    (Limit(2, 1), MINUTE + 0.999, "1", "1"),  # 1 ms left: 1, not 0
    (Limit(2, 60), MINUTE + 10, "50", "50"),
    (Limit(2, 60), MINUTE + 59.5, "1", "1"),
    (Limit(2, 86_400, calendar=True), DAY + 43_200.5, "43200", "43200"),
    (Limit(2, 86_400, calendar=True), DAY, "86400", "86400"),
    (Limit(2, MONTH, calendar=True), utc(2026, 2, 10, 12), "1598400", "86400"),
    (Limit(2, MONTH, calendar=True), utc(2026, 1, 1), "2678400", "86400"),
    (Limit(2, MONTH, calendar=True), utc(2026, 2, 28, 23, 59, 59) + 0.5, "1", "1"),
    (Limit(2, MONTH, "sliding_log"), utc(2026, 2, 10, 12), "2592000", "86400"),  # the reported case
]


async def home(request: Request) -> Response:
    return PlainTextResponse("home")


@pytest.mark.parametrize(("limit", "now", "reset", "retry_after"), CASES)
def test_the_reset_is_rounded_up_and_uncapped(
    limit: Limit, now: float, reset: str, retry_after: str
) -> None:
    app = Starlette(routes=[Route("/", home)])
    limiter = AsyncLimiter(AsyncMemoryStore(clock=FakeClock(now)))
    app.add_middleware(RateLimitMiddleware, decider=limiter, limits=[RateLimit(limit)])
    answers = get_all(app, ["/", "/", "/"])
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert [a.headers["x-ratelimit-remaining"] for a in answers] == ["1", "0", "0"]
    assert [a.headers["x-ratelimit-reset"] for a in answers] == [reset] * 3
    assert ["retry-after" in a.headers for a in answers] == [False, False, True]
    assert answers[2].headers["retry-after"] == retry_after
    assert answers[2].json()["retry_after"] == int(retry_after)
