"""The gate itself, framework-free: what an outcome says, and what is checked before anything
is counted."""

from __future__ import annotations

from ratekeeper import Engine, MemoryStore
from ratekeeper.rules import parse_rules
from ratekeeper.testing import FakeClock
from ratekeeper.web import Gate, Request, keys

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
