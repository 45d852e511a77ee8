"""GCRA: burst, spacing, and the promise it keeps over any interval."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.gcra import refund
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

# burst=5 at 1 per second: five at once, the sixth waits a second, then one per second.
BURST: list[Row] = [
    (0, 1, True, 4, 1.0, 0.0, 1),
    (0, 1, True, 3, 2.0, 0.0, 1),
    (0, 1, True, 2, 3.0, 0.0, 1),
    (0, 1, True, 1, 4.0, 0.0, 1),
    (0, 1, True, 0, 5.0, 0.0, 1),
    (0, 1, False, 0, 5.0, 1.0, 0),
    (0.5, 1, False, 0, 4.5, 0.5, 0),
    (1, 1, True, 0, 5.0, 0.0, 1),
    (1, 1, False, 0, 5.0, 1.0, 0),
    (2, 1, True, 0, 5.0, 0.0, 1),
    (3, 1, True, 0, 5.0, 0.0, 1),
    (3, 0, True, 0, 5.0, 0.0, 0),  # cost 0 looks
    (10, 0, True, 5, 0.0, 0.0, 0),  # drained: the whole burst is back
    (10, 2, True, 3, 2.0, 0.0, 2),  # cost > 1
    (10, 4, False, 3, 2.0, 1.0, 0),  # would overflow by one interval
    (10, 6, False, 3, 2.0, math.inf, 0),  # more than the burst: never allowed
    (10, 3, True, 0, 5.0, 0.0, 3),
]

# 2 per 10 s without a burst: T = 5 s, tolerance 10 s.
SPACING: list[Row] = [
    (0, 1, True, 1, 5.0, 0.0, 1),
    (0, 1, True, 0, 10.0, 0.0, 1),
    (0, 1, False, 0, 10.0, 5.0, 0),
    (5, 1, True, 0, 10.0, 0.0, 1),
    (7, 1, False, 0, 8.0, 3.0, 0),
    (10, 1, True, 0, 10.0, 0.0, 1),
    (30, 0, True, 2, 0.0, 0.0, 0),
    (30, 3, False, 2, 0.0, math.inf, 0),  # more than the burst: never allowed
]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize(
    ("limit", "rows"),
    [
        pytest.param(Limit(1, 1, algorithm="gcra", burst=5), BURST, id="burst"),
        pytest.param(Limit(2, 10, algorithm="gcra"), SPACING, id="spacing"),
    ],
)
def test_decisions(limit: Limit, rows: list[Row], base: float) -> None:
    replay(limit, base, rows)


def test_peek_on_a_new_key_reports_an_empty_bucket() -> None:
    limit = Limit(5, 10, algorithm="gcra")
    _, decision = limit.step(None, 1_700_000_000.0, 0, limit)
    assert decision == (True, 5, 5, 0.0, 0.0, 0.0, 0, False)


def test_a_denied_hit_consumes_nothing() -> None:
    limit = Limit(2, 10, algorithm="gcra")
    now = 1_700_000_000.0
    state, _ = limit.step(None, now, 2, limit)
    for _ in range(5):
        again, decision = limit.step(state, now + 1, 1, limit)
        assert not decision.allowed
        assert again is state
    _, decision = limit.step(state, now + 5, 1, limit)
    assert decision.allowed
    assert decision.remaining == 0


def test_remaining_is_never_negative_when_the_clock_steps_back() -> None:
    limit = Limit(1, 1, algorithm="gcra", burst=5)
    now = 1_700_000_000.0
    state: Any = None
    for _ in range(5):
        state, _ = limit.step(state, now, 1, limit)
    assert state == (5.0, now)  # the burst is full
    # 3 s behind, the backlog is 8 s: over the burst, but nothing is owed below zero.
    again, decision = limit.step(state, now - 3, 1, limit)
    assert again is state
    assert decision == pytest.approx((False, 5, 0, 8.0, 4.0, 0.0, 0, False))
    for offset in (-10.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 10.0):
        for cost in range(7):
            _, decision = limit.step(state, now + offset, cost, limit)
            assert 0 <= decision.remaining <= limit.capacity, (offset, cost)


@pytest.mark.parametrize("amount", [10_000, 9_999, 12_345])
def test_exact_under_a_frozen_clock(amount: int) -> None:
    limit = Limit(amount, 86_400, algorithm="gcra")
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
@given(scenarios("gcra"))
def test_never_exceeds_capacity_plus_rate_times_interval(
    scenario: Scenario,
) -> None:
    assert_within_capacity_plus_rate(scenario)


@PROPERTY
@given(scenarios("gcra"))
def test_retry_after_is_when_the_hit_would_succeed(
    scenario: Scenario,
) -> None:
    assert_retry_after_is_when_the_hit_would_succeed(scenario)


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.GCRA)), data, later=False)


def test_a_refund_moves_the_tat_back_down_to_0() -> None:
    limit = Limit(2, 10, "gcra")  # T = 5 s
    assert refund((7.5, BASES[1]), BASES[1], 1, limit) == (2.5, BASES[1])
    assert refund((7.5, BASES[1]), BASES[1], 2, limit) == (0.0, BASES[1])
    assert refund(None, BASES[1], 1, limit) is None
