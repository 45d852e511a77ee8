"""The sliding window counter, driven through ``Limit.step`` with a chosen clock."""

from __future__ import annotations

from collections import defaultdict
from math import inf
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.sliding_counter import refund
from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from tests.algorithms.refunds import assert_refund_undoes
from tests.algorithms.replay import Hit, Outcome, rows, run
from tests.strategies import limits

T0 = 1_700_000_040.0  # a whole minute after the epoch


def counter_limit(amount: int, period: float) -> Limit:
    return Limit(amount, period, algorithm="sliding_counter")


def test_the_source_example() -> None:
    # 100/minute; 88 hits in 01:00-02:00, 12 in 02:00-02:11, then one at 02:15:
    # estimate = 88 * (60 - 15) / 60 + 12 = 78, so it is allowed and 100 - 79 = 21 remain.
    limit = counter_limit(100, 60)
    previous = [(T0 + 60 + 0.5 * i, 1) for i in range(88)]
    current = [(T0 + 120 + i, 1) for i in range(12)]
    state, decisions = run(limit, [*previous, *current])
    assert all(d.allowed for d in decisions)
    assert state == (T0 + 120, 88, 12)
    state, decision = limit.step(state, T0 + 135, 1, limit)
    assert rows([decision]) == [(True, 21, 105.0, 0.0)]
    assert state == (T0 + 120, 88, 13)


@pytest.mark.parametrize(
    ("hits", "expected"),
    [
        pytest.param(
            [
                *[(0, 1)] * 10,
                (30, 1),
                (66, 1),
                (66, 1),
                (72, 1),
                (90, 0),
                (200, 1),
            ],
            [
                *[(True, 9 - i, 120.0, 0.0) for i in range(10)],
                # Full for this window; in the next, 10 * (60 - w) / 60 + 1 <= 10 at w = 6.
                (False, 0, 90.0, 36.0),
                (True, 0, 114.0, 0.0),  # estimate 10 * 54 / 60 = 9, then 10
                # 10 * (54 - w) / 60 + 1 + 1 <= 10 at w = 6.
                (False, 0, 114.0, 6.0),
                (True, 0, 108.0, 0.0),  # 10 * 48 / 60 + 1 = 9, then 10
                (True, 3, 90.0, 0.0),  # 10 * 30 / 60 + 2 = 7
                (True, 9, 100.0, 0.0),  # two windows on: both counts reset
            ],
            id="one-at-a-time",
        ),
        pytest.param(
            [(0, 0), (0, 11), (30, 4), (45, 7), (75, 7), (130, 1), (185, 0)],
            [
                (True, 10, 0.0, 0.0),
                (False, 10, 0.0, inf),  # more than the amount can never fit
                (True, 6, 90.0, 0.0),
                # Not in this window (4 + 7 > 10); in the next, 4 * (60 - w) / 60 + 7 <= 10
                # at w = 15.
                (False, 6, 75.0, 30.0),
                (True, 0, 105.0, 0.0),
                (True, 3, 110.0, 0.0),  # 7 * 50 / 60 + 1 = 6.83
                (True, 9, 55.0, 0.0),  # only the previous count left: 1 * 55 / 60
            ],
            id="cost-above-one",
        ),
    ],
)
def test_decisions(hits: list[Hit], expected: list[Outcome]) -> None:
    _, decisions = run(counter_limit(10, 60), [(T0 + t, cost) for t, cost in hits])
    assert rows(decisions) == expected


@pytest.mark.parametrize(
    ("state", "now", "expected"),
    [
        pytest.param((T0, 3, 5), T0 + 10, (T0, 3, 6), id="same-window"),
        pytest.param((T0, 3, 5), T0 + 70, (T0 + 60, 5, 1), id="next-window"),
        pytest.param((T0, 3, 5), T0 + 130, (T0 + 120, 0, 1), id="two-windows-on"),
        pytest.param((T0, 3, 5), T0 - 10, (T0, 3, 6), id="clock-backwards"),
    ],
)
def test_window_advance(state: Any, now: float, expected: Any) -> None:
    limit = counter_limit(10, 60)
    assert limit.step(state, now, 1, limit)[0] == expected


def test_denied_hit_consumes_nothing() -> None:
    limit = counter_limit(2, 10)
    state, _ = run(limit, [(T0, 2)])
    new, decision = limit.step(state, T0 + 5, 1, limit)
    assert not decision.allowed
    assert decision.granted == 0
    assert new is state
    assert state == (T0, 0, 2)


def test_peek_reports_without_consuming() -> None:
    limit = counter_limit(5, 10)
    state, _ = run(limit, [(T0, 2)])
    for _ in range(3):
        state, decision = limit.step(state, T0 + 1, 0, limit)
        assert decision == Decision(True, 5, 3, 19.0, 0.0, 0.0, 0, False)
    assert state == (T0, 0, 2)


# Random arrivals: non-decreasing times from non-negative gaps, costs 1..5.
gaps = st.one_of(st.just(0.0), st.floats(0, 5), st.floats(0, 150))
arrivals = st.lists(st.tuples(gaps, st.integers(1, 5)), min_size=1, max_size=60)
bases = st.sampled_from([0.0, 1_000.25, T0])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.integers(1, 100), bases, arrivals)
def test_admitted_stay_within_the_approximate_bounds(
    amount: int, period: int, base: float, steps: list[tuple[float, int]]
) -> None:
    limit = counter_limit(amount, period)
    state: Any = None
    now = base
    admitted: list[tuple[float, int]] = []
    per_window: defaultdict[int, int] = defaultdict(int)
    for gap, cost in steps:
        now += gap
        new, decision = limit.step(state, now, cost, limit)
        if decision.allowed:
            admitted.append((now, cost))
            per_window[round((now - now % period) / period)] += cost
            assert decision.granted == cost
        else:
            assert new is state
            assert decision.granted == 0
        assert 0 <= decision.remaining <= amount
        state = new
    # Every aligned window admits at most the amount.
    assert all(units <= amount for units in per_window.values())
    # A rolling window (t - period, t] overshoots by at most the previous window's count times
    # the fraction of the current window elapsed at t: always under twice the amount.
    for end, _ in admitted:
        start = end - end % period
        previous = per_window[round(start / period) - 1]
        rolling = sum(c for t, c in admitted if end - period < t <= end)
        assert rolling <= amount + previous * (end - start) / period + 1e-6
        assert rolling <= 2 * amount


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.integers(1, 100), arrivals)
def test_retry_after_is_the_earliest_success(
    amount: int, period: int, steps: list[tuple[float, int]]
) -> None:
    limit = counter_limit(amount, period)
    state: Any = None
    now = 0.0
    for gap, cost in steps:
        now += gap
        new, decision = limit.step(state, now, cost, limit)
        assert limit.step(state, now, 0, limit)[1].allowed  # a peek is always allowed
        if not decision.allowed and cost <= amount:
            retry = decision.retry_after
            assert limit.step(state, now + retry, cost, limit)[1].allowed
            if retry > 1e-3:
                assert not limit.step(state, now + retry / 2, cost, limit)[1].allowed
        state = new


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.SLIDING_COUNTER)), data, later=False)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_after_more_hits_is_as_if_the_hit_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.SLIDING_COUNTER)), data, later=True)


def test_a_refund_takes_back_from_the_window_the_hit_went_into() -> None:
    limit = Limit(10, 10, "sliding_counter")
    start = T0 - T0 % 10
    state = (start, 4, 3)
    assert refund(state, start + 5, 2, limit) == (start, 4, 1)  # the current window
    assert refund(state, start - 5, 3, limit) == (start, 1, 3)  # the state moved on: previous
    assert refund(state, start - 15, 3, limit) == state  # out of the estimate already
    assert refund((start, 0, 2), start + 1, 5, limit) is None  # never below 0
