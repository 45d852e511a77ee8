"""The one translation between a wire request and the engine: costs from ``hits_addend`` as
Envoy counts them, limits sent with descriptors, and Envoy's statuses for each verdict."""

from __future__ import annotations

import asyncio
import math

import pytest

from ratekeeper import AsyncEngine, Engine, InvalidInputError, MemoryStore
from ratekeeper.rules import parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.wire.translate import (
    MAX_REMAINING,
    OK,
    OVER_LIMIT,
    Call,
    Limited,
    WireDescriptor,
    WireStatus,
    answer,
    arguments,
    costs,
    decide,
    decide_async,
    descriptors,
    headers_to_add,
)

RULES = """
domain: test
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: minute, requests_per_unit: 3, name: everyone}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: tenant
    rate_limit: {period: 5m, requests_per_unit: 2}
  - key: probe
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
"""

DEFAULT = (("generic_key", "default"),)


@pytest.fixture
def engine(clock: FakeClock) -> Engine:
    return Engine(MemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"))


def one(entries: tuple[tuple[str, str], ...], **fields: object) -> Call:
    return Call("test", (WireDescriptor(entries, **fields),))  # type: ignore[arg-type]


def test_costs_follow_envoys_hits_addend() -> None:
    d = WireDescriptor(DEFAULT)
    assert costs(Call("test", (d, d))) == [1, 1]  # unset or 0 means 1
    assert costs(Call("test", (d,), hits_addend=4)) == [4]
    own = WireDescriptor(DEFAULT, hits_addend=0)  # a descriptor's own 0 only looks
    assert costs(Call("test", (d, own, WireDescriptor(DEFAULT, hits_addend=7)), 2)) == [2, 0, 7]


def test_statuses_report_envoys_fields(engine: Engine, clock: FakeClock) -> None:
    clock.set(1_699_999_990.0)  # 10 s into a minute
    answers = [decide(engine, one(DEFAULT)) for _ in range(4)]
    assert [a.code for a in answers] == [OK, OK, OK, OVER_LIMIT]
    first = answers[0].statuses[0]
    assert first == WireStatus(OK, Limited(3, "MINUTE", "everyone"), 2, 50.0, 0.0)
    assert answers[3].statuses[0].limit_remaining == 0
    assert answers[3].statuses[0].retry_after == 50.0


def test_unlimited_no_rule_always_over_and_shadow(engine: Engine) -> None:
    unlimited = decide(engine, one((("path", "/health"),))).statuses[0]
    assert unlimited == WireStatus(OK, None, MAX_REMAINING, None)
    nothing = decide(engine, one((("unknown", "x"),))).statuses[0]
    assert nothing == WireStatus(OK, None, 0, None)
    blocked = decide(engine, one((("blocked", "x"),)))
    assert blocked.code == OVER_LIMIT
    assert blocked.statuses[0].current_limit == Limited(0, "HOUR", None)
    assert math.isinf(blocked.statuses[0].retry_after)
    assert decide(engine, one((("probe", "p"),))).code == OK
    shadowed = decide(engine, one((("probe", "p"),)))
    assert shadowed.code == OK and shadowed.statuses[0].limit_remaining == 0


def test_a_period_that_is_no_envoy_unit_is_unknown(engine: Engine) -> None:
    status = decide(engine, one((("tenant", "t"),))).statuses[0]
    assert status.current_limit == Limited(2, "UNKNOWN", None)


def test_a_limit_sent_with_a_descriptor_and_per_descriptor_costs(engine: Engine) -> None:
    sent = one((("anything", "x"),), limit=(5, "SECOND"), hits_addend=2)
    statuses = [decide(engine, sent).statuses[0] for _ in range(3)]
    assert [s.limit_remaining for s in statuses] == [3, 1, 1]
    assert [s.code for s in statuses] == [OK, OK, OVER_LIMIT]
    assert statuses[0].current_limit == Limited(5, "SECOND", None)


def test_a_limit_of_zero_sent_with_a_descriptor_is_always_over_and_counts_nothing(
    engine: Engine,
) -> None:
    zero = WireDescriptor(DEFAULT, limit=(0, "second"))
    counted = WireDescriptor((("anything", "y"),), limit=(2, "SECOND"))
    answers = [decide(engine, Call("test", (counted, zero))) for _ in range(3)]
    assert [a.code for a in answers] == [OVER_LIMIT] * 3
    assert [a.statuses[1] for a in answers] == [
        WireStatus(OVER_LIMIT, Limited(0, "SECOND"), 0, None, float("inf"))
    ] * 3
    # the other descriptor is still counted, as Envoy's service counts every descriptor
    assert [a.statuses[0].code for a in answers] == [OK, OK, OVER_LIMIT]
    assert [a.statuses[0].limit_remaining for a in answers] == [1, 0, 0]
    alone = decide(engine, Call("test", (zero,)))
    assert alone.code == OVER_LIMIT and len(engine.store) == 1  # type: ignore[arg-type]
    # in a domain no rule file names, no limit applies, a sent one included
    assert decide(engine, Call("elsewhere", (zero,))).code == OK


@pytest.mark.parametrize(
    "call",
    [
        Call("", (WireDescriptor(DEFAULT),)),
        Call("test", ()),
        one(DEFAULT, limit=(5, "FORTNIGHT")),
        one(DEFAULT, hits_addend=-1),
        Call("test", (WireDescriptor(DEFAULT),), hits_addend=2**60),
        one((("", "x"),)),
    ],
)
def test_a_bad_call_is_refused_before_anything_is_counted(engine: Engine, call: Call) -> None:
    with pytest.raises(InvalidInputError):
        decide(engine, call)
    assert len(engine.store) == 0  # type: ignore[arg-type]


def test_the_async_path_decides_the_same(clock: FakeClock) -> None:
    rules = parse_rules(RULES, "rules.yaml")
    zero = Call("test", (WireDescriptor(DEFAULT), WireDescriptor(DEFAULT, limit=(0, "HOUR"))))
    calls = [one(DEFAULT), one((*DEFAULT, ("user", "a"))), one(DEFAULT, hits_addend=2), zero] * 2
    sync = Engine(MemoryStore(clock=FakeClock(clock())), rules=rules)
    expected = [decide(sync, call) for call in calls]

    async def run() -> list[object]:
        engine = AsyncEngine(AsyncMemoryStore(clock=FakeClock(clock())), rules=rules)
        return [await decide_async(engine, call) for call in calls]

    assert asyncio.run(run()) == expected


def test_descriptors_carry_their_costs() -> None:
    call = Call("test", (WireDescriptor(DEFAULT), WireDescriptor(DEFAULT, hits_addend=0)), 3)
    assert [d.hits for d in descriptors(call)] == [3, 0]


def test_plain_descriptors_go_to_the_engine_as_bare_entries(
    engine: Engine, clock: FakeClock
) -> None:
    """Descriptors that send no limit and no cost of their own reach the engine as bare entries
    under the request's cost (its fast path); any other as ``Descriptor``s. Same answers."""
    plain = Call("test", (WireDescriptor(DEFAULT), WireDescriptor((("tenant", "t"),))), 2)
    assert arguments(plain) == ([DEFAULT, (("tenant", "t"),)], 2)
    assert arguments(one(DEFAULT)) == ([DEFAULT], 1)
    for own in (one(DEFAULT, hits_addend=2), one(DEFAULT, limit=(5, "SECOND"))):
        assert arguments(own) == (descriptors(own), 1)
    twin = Engine(MemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"))
    for call in [one(DEFAULT), plain, one(DEFAULT)] * 2:
        assert decide(engine, call) == answer(twin.check("test", descriptors(call)))


NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def test_the_headers_to_add_are_those_of_the_status_closest_to_its_limit(
    engine: Engine, clock: FakeClock
) -> None:
    clock.set(1_699_999_990.25)  # 10.25 s into a minute
    call = Call("test", (WireDescriptor(DEFAULT), WireDescriptor((*DEFAULT, ("user", "u")))))
    allowed, refused = decide(engine, call), decide(engine, call)
    assert (allowed.code, refused.code) == (OK, OVER_LIMIT)
    # everyone has 2 left of 3 a minute; the user none of 1 a second, for 0.75 s
    assert headers_to_add(allowed, NAMES) == (
        ("X-RateLimit-Limit", "1"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "1"),
    )
    assert headers_to_add(refused, NAMES) == (
        ("X-RateLimit-Limit", "1"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "1"),
        ("Retry-After", "1"),
    )


def test_the_headers_to_add_take_the_names_they_are_given(engine: Engine) -> None:
    names = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
    added = headers_to_add(decide(engine, one(DEFAULT)), names)
    assert [name for name, _ in added] == list(names)


def test_retry_after_only_when_the_answer_is_over_the_limit(engine: Engine) -> None:
    """A refusing status the answer lets through (shadow mode, quota mode) says what is left
    but no Retry-After; a limit of 0 refuses for ever, said as a day."""
    decide(engine, one((("probe", "p"),)))
    shadowed = decide(engine, one((("probe", "p"),)))
    assert shadowed.code == OK
    assert dict(headers_to_add(shadowed, NAMES))["X-RateLimit-Remaining"] == "0"
    assert "Retry-After" not in dict(headers_to_add(shadowed, NAMES))
    decide(engine, one((("quota", "a"),)))  # a's quota is used; b's is not
    quota = decide(engine, Call("test", tuple(WireDescriptor((("quota", q),)) for q in "ab")))
    assert quota.code == OK and quota.statuses[0].code == OVER_LIMIT
    assert "Retry-After" not in dict(headers_to_add(quota, NAMES))
    blocked = decide(engine, one((("blocked", "x"),)))
    assert dict(headers_to_add(blocked, NAMES))["Retry-After"] == "86400"


def test_no_limit_no_headers_to_add(engine: Engine) -> None:
    assert headers_to_add(decide(engine, one((("path", "/health"),))), NAMES) == ()
    assert headers_to_add(decide(engine, one((("unknown", "x"),))), NAMES) == ()
