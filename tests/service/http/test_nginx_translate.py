"""What nginx's auth_request asks, as descriptors, and the only statuses nginx understands."""

from __future__ import annotations

import pytest

from ratekeeper import Engine, InvalidInputError, MemoryStore
from ratekeeper.rules import parse_rules
from ratekeeper.service.http.nginx import REFUSED, call_of, status_of
from ratekeeper.testing import FakeClock
from ratekeeper.wire.translate import WireDescriptor, decide

RULES = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: gcra}
  - key: method
    value: POST
    descriptors:
      - key: path
        value: /login
        rate_limit: {unit: hour, requests_per_unit: 1, algorithm: gcra}
"""


def test_headers_become_descriptors() -> None:
    call = call_of(
        {
            "X-RateLimit-Domain": "edge",
            "X-Real-IP": "10.0.0.7",
            "x-user": "alice",
            "X-Original-URI": "/orders/1?page=2",
            "X-Original-Method": "get",
        }
    )
    assert call.domain == "edge"
    assert call.descriptors == (
        WireDescriptor((("remote_address", "10.0.0.7"),)),
        WireDescriptor((("user", "alice"),)),
        WireDescriptor((("path", "/orders/1"),)),
        WireDescriptor((("method", "GET"), ("path", "/orders/1"))),
    )
    assert [d.entries[0][0] for d in call_of({"X-Real-IP": "1.2.3.4"}).descriptors] == [
        "remote_address",
        "path",
        "method",
    ]


@pytest.mark.parametrize(
    "uri",
    [
        "/api/login",
        "/api/login?next=/",
        "/%61pi/login",  # percent-encoded
        "/api%2Flogin",
        "//api//login",  # slashes doubled
        "/api/./login",  # dot segments
        "/x/../api/login",
        "/../api/login",
        "/%2e%2e/api/login",
        "http://example.com/api/login?x=1",  # the absolute form of a request line
    ],
)
def test_every_spelling_of_a_path_is_the_path_nginx_routes(uri: str) -> None:
    call = call_of({"X-Real-IP": "10.0.0.7", "X-Original-URI": uri})
    assert call.descriptors[1] == WireDescriptor((("path", "/api/login"),))


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("/", "/"),
        ("", "/"),
        ("/api/login/", "/api/login/"),  # a trailing slash is another resource
        ("/a/b/..", "/a/"),
        ("/api/login%3Fnext", "/api/login?next"),  # an encoded ? is part of the path
        ("/%ff", "/\ufffd"),  # not UTF-8: replaced, still a valid descriptor value
    ],
)
def test_paths_keep_what_tells_them_apart(uri: str, path: str) -> None:
    call = call_of({"X-Real-IP": "10.0.0.7", "X-Original-URI": uri})
    assert call.descriptors[1] == WireDescriptor((("path", path),))


def test_a_path_rule_counts_every_spelling_of_its_path(clock: FakeClock) -> None:
    engine = Engine(MemoryStore(clock=clock), rules=parse_rules(RULES, "edge.yaml"))
    spellings = ["/login", "/%6cogin", "//login", "/x/../login", "/./login?again"]
    headers = [
        {"X-Real-IP": f"10.0.0.{n}", "X-Original-URI": uri, "X-Original-Method": "POST"}
        for n, uri in enumerate(spellings)
    ]
    assert [status_of(decide(engine, call_of(h))) for h in headers] == [200] + [REFUSED] * 4


def test_without_the_clients_address_it_is_a_bad_request() -> None:
    with pytest.raises(InvalidInputError, match="X-Real-IP"):
        call_of({"X-Original-URI": "/"})


def test_decisions_answer_200_or_403(clock: FakeClock) -> None:
    engine = Engine(MemoryStore(clock=clock), rules=parse_rules(RULES, "edge.yaml"))
    login = {"X-Real-IP": "10.0.0.7", "X-Original-URI": "/login", "X-Original-Method": "POST"}
    page = {**login, "X-Original-Method": "GET", "X-Original-URI": "/"}
    assert [status_of(decide(engine, call_of(h))) for h in (login, login)] == [200, REFUSED]
    other = {**page, "X-Real-IP": "10.0.0.8"}
    assert [status_of(decide(engine, call_of(h))) for h in (other, other, other)] == [
        200,
        200,
        REFUSED,
    ]
