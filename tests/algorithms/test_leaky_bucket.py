"""Leaky bucket as a meter: leaking, bursts, and the promise it keeps over any interval."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.leaky_bucket import refund
from ratekeeper.core.limits import Limit
from tests.algorithms.properties import (
    PROPERTY,
    Scenario,
    assert_retry_after_is_when_the_hit_would_succeed,
    assert_within_capacity_plus_rate,
    scenarios,
)
from tests.algorithms.refunds import assert_refund_undoes
from tests.algorithms.replay import BASES, Row, replay
from tests.strategies import limits

# Capacity 4 leaking 2 units per second (T = 0.5 s).
METER: list[Row] = [
    (0, 1, True, 3, 0.5, 0.0, 1),
    (0, 1, True, 2, 1.0, 0.0, 1),
    (0, 1, True, 1, 1.5, 0.0, 1),
    (0, 1, True, 0, 2.0, 0.0, 1),
    (0, 1, False, 0, 2.0, 0.5, 0),
    (0.5, 1, True, 0, 2.0, 0.0, 1),  # one unit leaked out
    (0.75, 1, False, 0, 1.75, 0.25, 0),
    (1.75, 2, True, 0, 1.75, 0.0, 2),  # level 1.5: cost > 1 fits
    (1.75, 1, False, 0, 1.75, 0.25, 0),
    (1.75, 0, True, 0, 1.75, 0.0, 0),  # cost 0 looks
    (10, 0, True, 4, 0.0, 0.0, 0),  # empty again
    (10, 5, False, 4, 0.0, math.inf, 0),  # more than the capacity: never allowed
    (10, 4, True, 0, 2.0, 0.0, 4),
]

# The source's example as a meter: capacity 3 leaking 3 per minute (one unit every 20 s).
MINUTE: list[Row] = [
    (0, 1, True, 2, 20.0, 0.0, 1),
    (0, 1, True, 1, 40.0, 0.0, 1),
    (0, 1, True, 0, 60.0, 0.0, 1),
    (0, 1, False, 0, 60.0, 20.0, 0),
    (19, 1, False, 0, 41.0, 1.0, 0),
    (20, 1, True, 0, 60.0, 0.0, 1),
    (20, 1, False, 0, 60.0, 20.0, 0),
    (100, 3, True, 0, 60.0, 0.0, 3),
]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize(
    ("limit", "rows"),
    [
        pytest.param(Limit(2, 1, algorithm="leaky_bucket", burst=4), METER, id="meter"),
        pytest.param(Limit(3, 60, algorithm="leaky_bucket"), MINUTE, id="minute"),
    ],
)
def test_decisions(limit: Limit, rows: list[Row], base: float) -> None:
    replay(limit, base, rows)


def test_a_clock_that_steps_back_is_not_credited_twice() -> None:
    limit = Limit(3, 60, algorithm="leaky_bucket")
    now = 1_700_000_000.0
    state, _ = limit.step(None, now, 1, limit)
    # A caller 30 s behind sees the level as it was 30 s earlier: fuller, not emptier.
    behind, decision = limit.step(state, now - 30, 0, limit)
    assert decision == pytest.approx((True, 3, 0, 50.0, 0.0, 0.0, 0, False))
    _, decision = limit.step(behind, now - 30, 1, limit)
    assert decision == pytest.approx((False, 3, 0, 50.0, 10.0, 0.0, 0, False))
    # Back on time, those 30 s do not leak a second time.
    _, decision = limit.step(behind, now, 0, limit)
    assert decision == pytest.approx((True, 3, 2, 20.0, 0.0, 0.0, 0, False))


def test_peek_on_a_new_key_reports_an_empty_bucket() -> None:
    limit = Limit(5, 10, algorithm="leaky_bucket")
    _, decision = limit.step(None, 1_700_000_000.0, 0, limit)
    assert decision == (True, 5, 5, 0.0, 0.0, 0.0, 0, False)


def test_a_denied_hit_consumes_nothing() -> None:
    limit = Limit(2, 10, algorithm="leaky_bucket")
    now = 1_700_000_000.0
    state, _ = limit.step(None, now, 2, limit)
    for _ in range(5):
        again, decision = limit.step(state, now + 1, 1, limit)
        assert not decision.allowed
        assert again is state
    _, decision = limit.step(state, now + 5, 1, limit)
    assert decision.allowed
    assert decision.remaining == 0


@pytest.mark.parametrize("amount", [10_000, 9_999, 12_345])
def test_exact_under_a_frozen_clock(amount: int) -> None:
    limit = Limit(amount, 86_400, algorithm="leaky_bucket")
    now = 1_700_000_000.0
    state: Any = None
    admitted = []
    for _ in range(4 * amount):
        state, decision = limit.step(state, now, 1, limit)
        if decision.allowed:
            admitted.append(decision.remaining)
    assert admitted == list(range(amount - 1, -1, -1))


# ---------------------------------------------------------------------------------------------
# Properties over random arrivals.


@PROPERTY
@given(scenarios("leaky_bucket"))
def test_never_exceeds_capacity_plus_rate_times_interval(
    scenario: Scenario,
) -> None:
    assert_within_capacity_plus_rate(scenario)


@PROPERTY
@given(scenarios("leaky_bucket"))
def test_retry_after_is_when_the_hit_would_succeed(
    scenario: Scenario,
) -> None:
    assert_retry_after_is_when_the_hit_would_succeed(scenario)


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.LEAKY_BUCKET)), data, later=False)


def test_a_refund_lowers_the_level_down_to_0() -> None:
    limit = Limit(4, 4, "leaky_bucket")
    assert refund((2.5, BASES[1]), BASES[1], 1, limit) == (1.5, BASES[1])
    assert refund((2.5, BASES[1]), BASES[1], 3, limit) == (0.0, BASES[1])
    assert refund(None, BASES[1], 1, limit) is None
