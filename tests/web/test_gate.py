"""The gate itself, framework-free: what an outcome says, and what is checked before anything
is counted."""

from __future__ import annotations

import pytest

from ratekeeper import Decision, Engine, InvalidInputError, MemoryStore
from ratekeeper.rules import parse_rules
from ratekeeper.testing import FakeClock
from ratekeeper.web import Gate, RateLimit, Request, keys

RULES = """
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
"""


def engine(clock: FakeClock) -> Engine:
    return Engine(rules=parse_rules(RULES, "edge.yaml"), store=MemoryStore(clock=clock))


def request(**headers: str) -> Request:
    return Request("GET", "/", headers, "10.0.0.1")


def test_a_rule_refusing_says_when_to_retry(clock: FakeClock) -> None:
    gate = Gate(engine(clock), domain="edge", descriptors=[keys.header("User", "user")])
    assert gate.decide(request(user="alice")).allowed
    refused = gate.decide(request(user="alice"))
    # The fixed minute ends 40 s after the fake clock's start: that is the wait, not a day.
    assert not refused.allowed and refused.retry_after == 40.0
    banned = Gate(engine(clock), domain="edge", descriptors=[keys.header("Banned", "banned")])
    assert banned.decide(request(banned="x")).retry_after == float("inf")


def test_a_bad_cost_from_a_function_raises_before_anything_is_counted(clock: FakeClock) -> None:
    decider = engine(clock)  # an Engine decides the limits one by one
    first = RateLimit("2/minute", key=keys.generic(), scope="first")
    bad = RateLimit("2/minute", key=keys.generic(), scope="second", cost=lambda request: -1)
    with pytest.raises(InvalidInputError, match="-1"):
        Gate(decider, [first, bad]).decide(request())
    counted = Gate(decider, [first]).decide(request()).statuses[0]
    assert isinstance(counted, Decision) and counted.remaining == 1  # the first was not counted
    rules = Gate(decider, domain="edge", descriptors=[keys.generic()], cost=lambda r: 2.5)
    with pytest.raises(InvalidInputError, match=r"2\.5"):
        rules.decide(request())
