"""The rate-limit headers and problem-details bodies every HTTP surface shares."""

from __future__ import annotations

import json
import math

from ratekeeper.core.decisions import Decision
from ratekeeper.wire.headers import rate_limit_headers, seconds, whole_seconds
from ratekeeper.wire.problems import Problem, pointer
from ratekeeper.wire.statuses import OK, OVER_LIMIT, Limited, WireStatus


def test_an_allowed_decision_has_no_retry_after() -> None:
    assert rate_limit_headers([Decision(True, 10, 7, 12.2, 0.0)]) == {
        "X-RateLimit-Limit": "10",
        "X-RateLimit-Remaining": "7",
        "X-RateLimit-Reset": "13",
    }


def test_a_refusal_gives_retry_after_rounded_up() -> None:
    headers = rate_limit_headers([Decision(False, 10, 0, 42.5, 7.2)])
    assert headers["Retry-After"] == "8"
    assert headers["X-RateLimit-Reset"] == "43"


def test_an_infinite_wait_gives_a_day() -> None:
    assert rate_limit_headers([Decision(False, 1, 0, 1.0, math.inf)])["Retry-After"] == "86400"
    assert seconds(10**9) == 86_400
    assert seconds(0.0001) == 1
    assert seconds(-3) == 0


def test_the_reset_is_rounded_up_and_never_cut_at_a_day() -> None:
    month = rate_limit_headers([Decision(False, 3, 0, 2_592_000.0, 2_592_000.0)])
    assert month["X-RateLimit-Reset"] == "2592000"
    assert month["Retry-After"] == "86400"  # Retry-After alone stops at a day
    assert rate_limit_headers([Decision(True, 2, 1, 0.001, 0.0)])["X-RateLimit-Reset"] == "1"
    assert rate_limit_headers([Decision(True, 2, 2, 0.0, 0.0)])["X-RateLimit-Reset"] == "0"
    assert [whole_seconds(v) for v in (1e-9, 1.0, 1.5, 10**9, -1.0, math.nan, math.inf)] == [
        1,
        1,
        2,
        10**9,
        0,
        0,
        86_400,
    ]


def test_the_headers_take_the_names_they_are_given() -> None:
    names = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
    headers = rate_limit_headers([Decision(False, 10, 0, 42.5, 7.2)], names=names)
    assert headers == {
        "RateLimit-Limit": "10",
        "RateLimit-Remaining": "0",
        "RateLimit-Reset": "43",
        "Retry-After": "8",
    }


def test_the_status_closest_to_its_limit_speaks() -> None:
    loose = WireStatus(OK, Limited(100, "HOUR", "hourly"), 90, 3000.0)
    tight = WireStatus(OK, Limited(3, "MINUTE", "minutely"), 1, 40.0)
    unlimited = WireStatus(OK, None, 4_294_967_295, None)
    headers = rate_limit_headers([loose, tight, unlimited], ietf=True)
    assert headers == {
        "X-RateLimit-Limit": "3",
        "X-RateLimit-Remaining": "1",
        "X-RateLimit-Reset": "40",
        "RateLimit-Policy": '"minutely";q=3;w=60',
        "RateLimit": '"minutely";r=1;t=40',
    }


def test_a_refusing_status_wins_and_the_longest_wait_is_sent() -> None:
    refused = WireStatus(OVER_LIMIT, Limited(100, "HOUR"), 0, 3000.0, 2999.5)
    short = WireStatus(OVER_LIMIT, Limited(3, "SECOND"), 0, 1.0, 0.5)
    headers = rate_limit_headers([short, refused])
    assert headers["Retry-After"] == "3000"
    assert headers["X-RateLimit-Limit"] == "100"


def test_no_limit_no_headers() -> None:
    assert rate_limit_headers([WireStatus(OK, None, 4_294_967_295, None)]) == {}
    assert rate_limit_headers([]) == {}


def test_a_problem_names_its_place() -> None:
    problem = Problem(422, "invalid", "cost must be an integer", pointer(["descriptors", 0, "a/b"]))
    assert json.loads(problem.encode()) == {
        "type": "urn:ratekeeper:problem:invalid-input",
        "title": "Unprocessable Entity",
        "status": 422,
        "detail": "cost must be an integer",
        "pointer": "/descriptors/0/a~1b",
    }
