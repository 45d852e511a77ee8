"""The rate-limit headers every surface of the service sends, exact under a fake clock.

One fixed-window rule each per second, minute, day and calendar month, limit 2; three hits at
one instant: two allowed (remaining 1, then 0) and one refused. ``X-RateLimit-Reset`` is the
time left in the window, rounded up: never 0 while the window is open (1 ms before a second's
edge says 1), and never cut at a day (a calendar month says its whole length). ``Retry-After``
goes with the refusal, as long as the reset and at most a day. The same values come back over
``POST /v1/check``, nginx's ``GET /v1/nginx``, Envoy's ``POST /json`` (its
``responseHeadersToAdd``) and Envoy's gRPC ``ShouldRateLimit`` (``response_headers_to_add``),
the last two only when ``--envoy-headers`` asks for them, under ``--envoy-header-names``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.app import build_app
from ratekeeper.service.runtime.settings import ListenAddress, Settings
from ratekeeper.testing import FakeClock
from tests.servers import free_port
from tests.service.asgi import AppClient, service_app

RULES = """
domain: edge
descriptors:
  - key: path
    value: /second
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /minute
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /day
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: path
    value: /month
    rate_limit: {unit: month, requests_per_unit: 2, calendar: true}
"""
NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
MINUTE = 1_699_999_980.0  # a minute's start (and so a second's)
DAY = 1_699_920_000.0  # a UTC day's start


def utc(*fields: int) -> float:
    return datetime(*fields, tzinfo=UTC).timestamp()


#: (path, now, X-RateLimit-Reset, Retry-After): in the middle of each window and at its edges.
CASES = [
    ("/second", MINUTE + 0.25, "1", "1"),
    ("/second", MINUTE + 0.999, "1", "1"),  # 1 ms left: 1, not 0
    ("/second", MINUTE, "1", "1"),  # the window just opened
    ("/minute", MINUTE + 10, "50", "50"),
    ("/minute", MINUTE + 59.5, "1", "1"),
    ("/minute", MINUTE, "60", "60"),
    ("/day", DAY + 43_200.5, "43200", "43200"),
    ("/day", DAY, "86400", "86400"),
    ("/day", DAY + 86_399.75, "1", "1"),
    ("/month", utc(2026, 2, 10, 12), "1598400", "86400"),  # 18.5 days to March
    ("/month", utc(2026, 1, 1), "2678400", "86400"),  # all of January's 31 days
    ("/month", utc(2026, 2, 28, 23, 59, 59) + 0.5, "1", "1"),
]


def expected(reset: str, retry_after: str) -> list[dict[str, str]]:
    """The headers of the three hits, in order."""
    return [
        {"x-ratelimit-limit": "2", "x-ratelimit-remaining": "1", "x-ratelimit-reset": reset},
        {"x-ratelimit-limit": "2", "x-ratelimit-remaining": "0", "x-ratelimit-reset": reset},
        {
            "x-ratelimit-limit": "2",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-reset": reset,
            "retry-after": retry_after,
        },
    ]


def rate_headers(pairs: object) -> dict[str, str]:
    """The rate-limit headers among ``pairs`` (name, value), names in lower case."""
    wanted = {*(name.lower() for name in NAMES), "retry-after"}
    found = {str(name).lower(): str(value) for name, value in pairs}  # type: ignore[attr-defined]
    return {name: value for name, value in found.items() if name in wanted}


def by_check(client: AppClient, path: str, _: int) -> tuple[int, dict[str, str]]:
    body = {"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": path}]}]}
    answer = client.post("/v1/check", json=body)
    return answer.status_code, rate_headers(answer.headers.items())


def by_nginx(client: AppClient, path: str, _: int) -> tuple[int, dict[str, str]]:
    headers = {"X-Real-IP": "198.51.100.7", "X-Original-URI": path}
    answer = client.get("/v1/nginx", headers=headers)
    return answer.status_code, rate_headers(answer.headers.items())


def by_envoy_json(client: AppClient, path: str, _: int) -> tuple[int, dict[str, str]]:
    body = {"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": path}]}]}
    answer = client.post("/json", json=body)
    added = answer.json().get("responseHeadersToAdd", [])
    return answer.status_code, rate_headers((one["key"], one["value"]) for one in added)


def by_grpc(client: AppClient, path: str, port: int) -> tuple[int, dict[str, str]]:
    descriptor = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="path", value=path)]
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        sent = rls_pb2.RateLimitRequest(domain="edge", descriptors=[descriptor])
        answer = stub.ShouldRateLimit(sent, timeout=10)
    code = 200 if answer.overall_code == rls_pb2.RateLimitResponse.OK else 429
    return code, rate_headers((one.key, one.value) for one in answer.response_headers_to_add)


Surface = Callable[[AppClient, str, int], tuple[int, dict[str, str]]]
SURFACES: dict[str, tuple[Surface, list[int]]] = {
    "check": (by_check, [200, 200, 429]),
    "nginx": (by_nginx, [200, 200, 403]),
    "envoy-json": (by_envoy_json, [200, 200, 429]),
    "grpc": (by_grpc, [200, 200, 429]),
}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("case", CASES, ids=[f"{path}@{now}" for path, now, *_ in CASES])
def test_every_surface_sends_the_reset_rounded_up_and_uncapped(
    tmp_path: Path, surface: str, case: tuple[str, float, str, str]
) -> None:
    path, now, reset, retry_after = case
    port = free_port()
    app = service_app(
        RULES, tmp_path, FakeClock(now), envoy_headers=NAMES, grpc_address=f"127.0.0.1:{port}"
    )
    ask, statuses = SURFACES[surface]
    with AppClient(app) as client:
        answers = [ask(client, path, port) for _ in range(3)]
    assert [status for status, _ in answers] == statuses
    assert [headers for _, headers in answers] == expected(reset, retry_after)


def test_envoys_answers_carry_no_headers_unless_asked(tmp_path: Path) -> None:
    port = free_port()
    app = service_app(RULES, tmp_path, FakeClock(MINUTE), grpc_address=f"127.0.0.1:{port}")
    with AppClient(app) as client:
        assert by_envoy_json(client, "/minute", port) == (200, {})
        assert by_grpc(client, "/minute", port) == (200, {})


@pytest.mark.parametrize("on", [False, True])
def test_the_settings_name_the_headers_of_envoys_answers(tmp_path: Path, on: bool) -> None:
    """``--envoy-headers`` and ``--envoy-header-names``, from the settings through the app."""
    names = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
    settings = Settings(
        config=f"sqlite:///{tmp_path}/config.db",
        grpc=ListenAddress("127.0.0.1", free_port()),
        envoy_headers=on,
        envoy_header_names=names,
    )
    entries = [{"key": "remote_address", "value": "198.51.100.7"}]
    with AppClient(build_app(settings)) as client:
        answer = client.post(
            "/json", json={"domain": "example", "descriptors": [{"entries": entries}]}
        )
    added = answer.json().get("responseHeadersToAdd", [])
    assert [one["key"] for one in added] == (list(names) if on else [])
    assert [one["value"] for one in added][:2] == (["100", "99"] if on else [])
