"""Leaky bucket as a shaper: FIFO delays at a constant outflow, and a bounded queue."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.leaky_shaper import refund
from ratekeeper.core.limits import Limit
from tests.algorithms.properties import (
    PROPERTY,
    SLACK,
    Scenario,
    assert_retry_after_is_when_the_hit_would_succeed,
    assert_within_capacity_plus_rate,
    scenarios,
)
from tests.algorithms.refunds import assert_refund_undoes
from tests.algorithms.replay import BASES, ShapedRow, replay
from tests.strategies import limits

# 5 per 5 s, queue of 5: one departure a second.
BURST: list[ShapedRow] = [
    (0, 1, True, 4, 1.0, 0.0, 0.0, 1),  # the queue is empty: no wait
    (0, 1, True, 3, 2.0, 0.0, 1.0, 1),
    (0, 1, True, 2, 3.0, 0.0, 2.0, 1),
    (0, 1, True, 1, 4.0, 0.0, 3.0, 1),
    (0, 1, True, 0, 5.0, 0.0, 4.0, 1),
    (0, 1, False, 0, 5.0, 1.0, 0.0, 0),  # the queue is full
    (2.5, 1, True, 1, 3.5, 0.0, 2.5, 1),  # drained by 2.5 s: a shorter wait
]

# 4 per 2 s (T = 0.5 s), queue of 3.
FIFO: list[ShapedRow] = [
    (0, 1, True, 2, 0.5, 0.0, 0.0, 1),
    (0, 1, True, 1, 1.0, 0.0, 0.5, 1),
    (0, 1, True, 0, 1.5, 0.0, 1.0, 1),
    (0, 1, False, 0, 1.5, 0.5, 0.0, 0),
    (0.25, 1, False, 0, 1.25, 0.25, 0.0, 0),  # fits in a quarter second
    (0.5, 1, True, 0, 1.5, 0.0, 1.0, 1),
    (1.25, 1, True, 0, 1.25, 0.0, 0.75, 1),
    (1.25, 2, False, 0, 1.25, 0.75, 0.0, 0),
    (2, 2, True, 0, 1.5, 0.0, 0.5, 2),  # cost > 1 queues c * T of work
    (2, 0, True, 0, 1.5, 0.0, 1.5, 0),  # cost 0 looks: the wait a hit would face
    (10, 0, True, 3, 0.0, 0.0, 0.0, 0),
    (10, 4, False, 3, 0.0, math.inf, 0.0, 0),  # more than the queue: never allowed
    (10, 3, True, 0, 1.5, 0.0, 0.0, 3),
]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize(
    ("limit", "rows"),
    [
        pytest.param(Limit(5, 5, algorithm="leaky_shaper"), BURST, id="burst"),
        pytest.param(Limit(4, 2, algorithm="leaky_shaper", burst=3), FIFO, id="fifo"),
    ],
)
def test_decisions(limit: Limit, rows: list[ShapedRow], base: float) -> None:
    replay(limit, base, rows, delays=True)


def test_peek_on_a_new_key_reports_an_empty_queue() -> None:
    limit = Limit(5, 10, algorithm="leaky_shaper")
    _, decision = limit.step(None, 1_700_000_000.0, 0, limit)
    assert decision == (True, 5, 5, 0.0, 0.0, 0.0, 0, False)


def test_a_denied_hit_consumes_nothing() -> None:
    limit = Limit(2, 10, algorithm="leaky_shaper")
    now = 1_700_000_000.0
    state, _ = limit.step(None, now, 2, limit)
    for _ in range(5):
        again, decision = limit.step(state, now + 1, 1, limit)
        assert not decision.allowed
        assert again is state
    _, decision = limit.step(state, now + 5, 1, limit)
    assert decision == pytest.approx((True, 2, 0, 10.0, 0.0, 5.0, 1, False))


def test_a_clock_that_steps_back_waits_for_the_queue() -> None:
    limit = Limit(1, 1, algorithm="leaky_shaper", burst=5)
    now = 1_700_000_000.0
    state, _ = limit.step(None, now, 2, limit)
    # 1 s behind, the queue's work still ends at now + 2: the wait is 3 s.
    _, decision = limit.step(state, now - 1, 1, limit)
    assert decision == pytest.approx((True, 5, 1, 4.0, 0.0, 3.0, 1, False))


@pytest.mark.parametrize("amount", [10_000, 9_999, 12_345])
def test_exact_under_a_frozen_clock(amount: int) -> None:
    limit = Limit(amount, 86_400, algorithm="leaky_shaper")
    now = 1_700_000_000.0
    state: Any = None
    admitted = []
    for _ in range(4 * amount):
        state, decision = limit.step(state, now, 1, limit)
        if decision.allowed:
            admitted.append(decision.remaining)
    assert admitted == list(range(amount - 1, -1, -1))
    assert decision.reset_after == pytest.approx(86_400.0)


# ---------------------------------------------------------------------------------------------
# Properties over random arrivals.


@PROPERTY
@given(scenarios("leaky_shaper"))
def test_admits_no_more_than_capacity_plus_rate_times_interval(
    scenario: Scenario,
) -> None:
    assert_within_capacity_plus_rate(scenario, delays=True)


@PROPERTY
@given(scenarios("leaky_shaper"))
def test_departures_are_fifo_at_the_outflow_rate(
    scenario: Scenario,
) -> None:
    limit, hits = scenario
    interval = limit.interval
    state: Any = None
    previous: tuple[float, int] | None = None  # (departure, cost) of the last admitted hit
    for now, cost in hits:
        state, decision = limit.step(state, now, cost, limit)
        if not decision.allowed:
            continue
        assert 0.0 <= decision.delay <= (limit.capacity - cost) * interval + SLACK
        departure = (now - hits[0][0]) + decision.delay
        if previous is not None:
            # The hit ahead left at previous[0] and holds the outflow for its cost * T.
            assert departure >= previous[0] + previous[1] * interval - SLACK
        previous = (departure, cost)


@PROPERTY
@given(scenarios("leaky_shaper"))
def test_retry_after_is_when_the_hit_would_fit(
    scenario: Scenario,
) -> None:
    assert_retry_after_is_when_the_hit_would_succeed(scenario)


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.LEAKY_SHAPER)), data, later=False)


def test_a_refund_shortens_the_queue_down_to_0() -> None:
    limit = Limit(2, 10, "leaky_shaper")  # T = 5 s
    assert refund((7.5, BASES[1]), BASES[1], 1, limit) == (2.5, BASES[1])
    assert refund((7.5, BASES[1]), BASES[1], 2, limit) == (0.0, BASES[1])
    assert refund(None, BASES[1], 1, limit) is None
