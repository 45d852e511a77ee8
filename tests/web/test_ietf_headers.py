"""The IETF httpapi draft's ``RateLimit`` and ``RateLimit-Policy`` fields: Structured Field
lists of one item, a String naming the policy, with integer parameters."""

from __future__ import annotations

import re

from ratekeeper.core.decisions import Decision
from ratekeeper.rules.model import UNITS
from ratekeeper.wire.headers import rate_limit_headers
from ratekeeper.wire.statuses import OK, OVER_LIMIT, Limited, WireStatus

#: One Structured Field String (RFC 9651 section 3.3.3) and its integer parameters.
SF_STRING = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\\"])*"'
POLICY = re.compile(rf"^{SF_STRING};q=\d+(;w=\d+)?$")
STATE = re.compile(rf"^{SF_STRING};r=\d+;t=\d+$")


def ietf(status: WireStatus | Decision) -> tuple[str, str]:
    headers = rate_limit_headers([status], ietf=True)
    return headers["RateLimit-Policy"], headers["RateLimit"]


def test_a_rules_status_names_its_rule() -> None:
    status = WireStatus(OK, Limited(100, "MINUTE", "everyone"), 42, 17.2)
    assert ietf(status) == ('"everyone";q=100;w=60', '"everyone";r=42;t=18')


def test_a_window_longer_than_a_day_is_given_whole() -> None:
    month = WireStatus(OVER_LIMIT, Limited(3, "MONTH", "stories"), 0, 2_000_000.5, 2_000_000.5)
    policy, state = ietf(month)
    assert policy == f'"stories";q=3;w={int(UNITS["month"])}'
    assert state == '"stories";r=0;t=2000001'
    headers = rate_limit_headers([month], ietf=True)
    assert headers["Retry-After"] == "86400"  # Retry-After alone stops at a day


def test_a_bare_decision_has_no_window_and_the_default_name() -> None:
    assert ietf(Decision(True, 10, 7, 3.5, 0.0)) == ('"default";q=10', '"default";r=7;t=4')


def test_any_rule_name_gives_a_valid_structured_field_string() -> None:
    for name in ('say "hi"', "back\\slash", "caf\u00e9", "tab\there", "100%", "\U0001f600", ""):
        policy, state = ietf(WireStatus(OK, Limited(5, "SECOND", name), 4, 1.0))
        assert POLICY.match(policy), policy
        assert STATE.match(state), state
    policy, _ = ietf(WireStatus(OK, Limited(5, "SECOND", 'a"b\\c'), 4, 1.0))
    assert policy == '"a\\"b\\\\c";q=5;w=1'
    policy, _ = ietf(WireStatus(OK, Limited(5, "SECOND", "caf\u00e9 100%"), 4, 1.0))
    assert policy == '"caf%C3%A9 100%25";q=5;w=1'
