"""What nginx's auth_request asks, as descriptors, and the only statuses nginx understands."""

from __future__ import annotations

import pytest

from ratekeeper import Engine, InvalidInputError, MemoryStore
from ratekeeper.rules import parse_rules
from ratekeeper.service.nginx import REFUSED, call_of, status_of
from ratekeeper.service.translate import WireDescriptor, decide
from ratekeeper.testing import FakeClock

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
