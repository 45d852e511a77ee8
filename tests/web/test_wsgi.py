"""The WSGI middleware around a plain WSGI app, called as a WSGI server calls it."""

from __future__ import annotations

import json
import logging

import pytest

from ratekeeper import AsyncLimiter, Limit, Limiter, MemoryStore, open_store
from ratekeeper.testing import FakeClock
from ratekeeper.web import RateLimit, keys
from ratekeeper.web.wsgi import RateLimitMiddleware
from tests.servers import free_port
from tests.web.wsgi_calls import call, echo


def limiter(clock: FakeClock) -> Limiter:
    return Limiter(MemoryStore(clock=clock))


def test_refusals_headers_and_exemptions(clock: FakeClock) -> None:
    app = RateLimitMiddleware(
        echo, limiter(clock), [RateLimit(Limit(2, 60, "sliding_log"))], exempt=["/health"]
    )
    answers = [call(app) for _ in range(3)]
    assert [a.status for a in answers] == [200, 200, 429]
    assert answers[0].body == b"echo:"
    assert answers[0].headers["x-ratelimit-remaining"] == "1"
    assert answers[2].headers["content-type"] == "application/problem+json"
    assert answers[2].headers["retry-after"] == "60"
    assert json.loads(answers[2].body)["retry_after"] == 60
    assert call(app, "/health").status == 200


def test_the_body_read_for_a_key_reaches_the_app(clock: FakeClock) -> None:
    limits = [RateLimit("1/minute", key=keys.field("username"))]
    app = RateLimitMiddleware(echo, limiter(clock), limits, max_body=64)
    form = {"CONTENT_TYPE": "application/x-www-form-urlencoded"}
    first = call(app, method="POST", body=b"username=alice&x=1", **form)
    assert first.status == 200 and first.body == b"echo:username=alice&x=1"
    assert call(app, method="POST", body=b"username=alice", **form).status == 429
    assert call(app, method="POST", body=b"username=bob", **form).status == 200
    long = call(app, method="POST", body=b"username=" + b"x" * 64, **form)
    assert long.status == 413
    # A Content-Length that is no length declares no body: nothing is read past max_body.
    for length in ["-1", "many"]:
        odd = call(app, method="POST", body=b"username=" + b"x" * 64, length=length, **form)
        assert odd.status == 200 and odd.body == b"echo:"
        assert "x-ratelimit-limit" not in odd.headers  # no username: not counted


def test_shadow_mode_counts_and_logs(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    app = RateLimitMiddleware(echo, limiter(clock), [RateLimit("1/minute", shadow=True)])
    with caplog.at_level(logging.INFO, logger="ratekeeper.web"):
        assert [call(app).status for _ in range(3)] == [200, 200, 200]
    assert sum("shadow mode" in r.getMessage() for r in caplog.records) == 2


def test_a_shaper_waits_up_to_max_delay(clock: FakeClock) -> None:
    shaper = RateLimit(Limit(4, 1, "leaky_shaper"))
    app = RateLimitMiddleware(echo, limiter(clock), [shaper], max_delay=0.5, sleep=clock.sleep)
    assert [call(app).status for _ in range(4)] == [200] * 4
    assert clock.slept == [0.25, 0.25, 0.25]
    strict = RateLimitMiddleware(echo, limiter(clock), [shaper], max_delay=0.1, sleep=clock.sleep)
    assert [call(strict).status for _ in range(2)] == [200, 429]


def test_a_failed_store_keeps_the_app_serving_and_says_so() -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    app = RateLimitMiddleware(echo, Limiter(down), [RateLimit("1/minute")], ietf=True)
    answer = call(app)
    assert answer.status == 200 and answer.body == b"echo:"
    assert answer.headers["x-ratelimit-degraded"] == "true"
    raising = RateLimitMiddleware(echo, Limiter(open_store(down, on_store_error=None)))
    assert call(raising).status == 200  # no limit applies: the store is never asked
    raising = RateLimitMiddleware(
        echo, Limiter(open_store(down, on_store_error=None)), [RateLimit("1/minute")]
    )
    failed = call(raising)
    assert failed.status == 503
    assert json.loads(failed.body)["type"] == "urn:ratekeeper:problem:unavailable"


def test_options_are_checked_when_built() -> None:
    with pytest.raises(TypeError, match="asyncio"):
        RateLimitMiddleware(echo, AsyncLimiter(), [RateLimit("1/minute")])
    with pytest.raises(ValueError, match="max_body"):
        RateLimitMiddleware(echo, Limiter(), max_body=-1)
    with pytest.raises(TypeError, match="decider"):
        RateLimitMiddleware(echo, None, [RateLimit("1/minute")])
