"""The bucketed sliding window, driven through ``Limit.step`` with a chosen clock."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from math import ceil, inf
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.bucketed_window import refund
from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from tests.algorithms.refunds import assert_refund_undoes
from tests.algorithms.replay import Hit, Outcome, rows, run
from tests.strategies import limits

T0 = 1_700_000_040.0  # a whole minute after the epoch


def bucketed(amount: int, period: float, granularity: float | None = None) -> Limit:
    return Limit(amount, period, algorithm="bucketed_window", granularity=granularity)


@pytest.mark.parametrize(
    ("granularity", "hits", "expected"),
    [
        pytest.param(
            10,
            [(9, 3), (25, 2), (59, 1), (60, 3), (60, 1), (80, 0), (80, 2)],
            [
                (True, 2, 51.0, 0.0),  # bucket 0-10, in the window until 60
                (True, 0, 55.0, 0.0),  # bucket 20-30, until 80
                (False, 0, 21.0, 1.0),
                (True, 0, 60.0, 0.0),  # bucket 0-10 slid out whole at 60
                (False, 0, 60.0, 20.0),
                (True, 2, 40.0, 0.0),  # peek: bucket 20-30 slid out
                (True, 0, 60.0, 0.0),
            ],
            id="10s-buckets",
        ),
        pytest.param(
            1,
            [(9.5, 3), (30, 2), (68.5, 1), (69, 3), (69.5, 0), (90, 1)],
            [
                (True, 2, 59.5, 0.0),  # bucket 9-10, in the window until 69
                (True, 0, 60.0, 0.0),
                (False, 0, 21.5, 0.5),
                (True, 0, 60.0, 0.0),
                (True, 0, 59.5, 0.0),
                (True, 1, 60.0, 0.0),
            ],
            id="1s-buckets",
        ),
        pytest.param(
            None,  # period / 60: one-second buckets
            [(0, 5), (59.5, 1), (60, 1)],
            [(True, 0, 60.0, 0.0), (False, 0, 0.5, 0.5), (True, 4, 60.0, 0.0)],
            id="default-granularity",
        ),
    ],
)
def test_buckets_sliding_out(
    granularity: float | None, hits: list[Hit], expected: list[Outcome]
) -> None:
    _, decisions = run(bucketed(5, 60, granularity), [(T0 + t, cost) for t, cost in hits])
    assert rows(decisions) == expected


@pytest.mark.parametrize(
    ("granularity", "early"),
    [pytest.param(10, 9.5, id="10s-buckets"), pytest.param(1, 0.5, id="1s-buckets")],
)
def test_exact_to_one_bucket(granularity: float, early: float) -> None:
    # The hits at 9.5 leave the exact log at 69.5 but their bucket leaves the window at its own
    # end plus the period: up to one bucket early, never later.
    hits = [(T0 + 9.5, 5)]
    after = T0 + 69.5 - early
    bucket, log = bucketed(5, 60, granularity), Limit(5, 60, algorithm="sliding_log")
    bucket_state, _ = run(bucket, hits)
    log_state, _ = run(log, hits)
    assert bucket.step(bucket_state, after, 5, bucket)[1].allowed
    assert not bucket.step(bucket_state, after - 0.25, 5, bucket)[1].allowed
    assert not log.step(log_state, after, 5, log)[1].allowed
    assert log.step(log_state, T0 + 69.5, 5, log)[1].allowed


def test_partial_last_bucket_counts_whole() -> None:
    # 10 s in 3 s buckets: the window is 4 buckets (12 s), erring on the strict side.
    limit = bucketed(4, 10, 3)
    _, decisions = run(limit, [(T0 + 0, 4), (T0 + 11.5, 1), (T0 + 12, 1)])
    assert rows(decisions) == [(True, 0, 12.0, 0.0), (False, 0, 0.5, 0.5), (True, 3, 12.0, 0.0)]


def test_state_keeps_only_the_non_empty_buckets_in_the_window() -> None:
    limit = bucketed(10, 60, 10)
    state, _ = run(limit, [(T0 + 1, 1), (T0 + 21, 2), (T0 + 29, 1), (T0 + 75, 3)])
    assert state == (((T0 + 20, 3), (T0 + 70, 3)), 6)


def test_denied_hit_consumes_nothing() -> None:
    limit = bucketed(2, 10, 1)
    state, _ = run(limit, [(T0, 2)])
    new, decision = limit.step(state, T0 + 5, 1, limit)
    assert not decision.allowed
    assert decision.granted == 0
    assert new is state
    assert state == (((T0, 2),), 2)


def test_peek_reports_without_consuming() -> None:
    limit = bucketed(5, 10, 1)
    state, _ = run(limit, [(T0, 2)])
    for _ in range(3):
        state, decision = limit.step(state, T0 + 1, 0, limit)
        assert decision == Decision(True, 5, 3, 9.0, 0.0, 0.0, 0, False)
    assert state == (((T0, 2),), 2)


def test_cost_above_the_amount_is_denied() -> None:
    limit = bucketed(3, 10, 1)
    state, decision = limit.step(None, T0, 4, limit)
    assert state is None
    assert rows([decision]) == [(False, 3, 0.0, inf)]


# Random arrivals: non-decreasing times from non-negative gaps, costs 1..5.
gaps = st.one_of(st.just(0.0), st.floats(0, 5), st.floats(0, 150))
arrivals = st.lists(st.tuples(gaps, st.integers(1, 5)), min_size=1, max_size=60)
bases = st.sampled_from([0.0, 1_000.25, T0])
GRANULARITIES = [0.1, 0.25, 0.5, 1, 2, 3, 7, 10]


def windows(grid: list[float]) -> st.SearchStrategy[tuple[int, float]]:
    return st.integers(1, 100).flatmap(
        lambda p: st.tuples(st.just(p), st.sampled_from([g for g in [*grid, p] if g <= p]))
    )


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), windows(GRANULARITIES), bases, arrivals)
def test_admits_exactly_what_fits_in_the_last_buckets(
    amount: int, window: tuple[int, float], base: float, steps: list[tuple[float, int]]
) -> None:
    period, width = window
    limit = bucketed(amount, period, width)
    span = ceil(Fraction(period) / Fraction(str(width)))  # buckets per window

    def index(t: float) -> int:
        return round((t - t % width) / width)

    state: Any = None
    now = base
    admitted: defaultdict[int, int] = defaultdict(int)
    times: list[tuple[float, int]] = []
    for gap, cost in steps:
        now += gap
        new, decision = limit.step(state, now, cost, limit)
        k = index(now)
        in_window = sum(admitted.get(i, 0) for i in range(k - span + 1, k + 1))
        assert decision.allowed == (in_window + cost <= amount)
        if decision.allowed:
            admitted[k] += cost
            times.append((now, cost))
            assert decision.remaining == amount - in_window - cost
            assert new[1] == amount - decision.remaining
            assert len(new[0]) <= span
        else:
            assert new is state
            assert decision.granted == 0
            assert decision.remaining == amount - in_window
        state = new
    # Any run of ``span`` consecutive buckets holds at most the amount ...
    for first in list(admitted):
        assert sum(admitted.get(i, 0) for i in range(first, first + span)) <= amount
    # ... so a rolling window exceeds it by at most the bucket its start falls in.
    for end, _ in times:
        rolling = sum(c for t, c in times if end - period < t <= end)
        assert rolling <= amount + admitted.get(index(end) - span, 0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 20),
    windows([1, 2, 3, 5, 10]),
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 5)), min_size=1, max_size=60),
)
def test_retry_after_is_exact(
    amount: int, window: tuple[int, float], steps: list[tuple[int, int]]
) -> None:
    period, width = window
    limit = bucketed(amount, period, width)
    state: Any = None
    now = T0
    for gap, cost in steps:
        now += gap
        new, decision = limit.step(state, now, cost, limit)
        if not decision.allowed and cost <= amount:
            retry = decision.retry_after
            assert limit.step(state, now + retry, cost, limit)[1].allowed
            assert not limit.step(state, now + retry - 0.5, cost, limit)[1].allowed
        state = new


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.BUCKETED_WINDOW)), data, later=False)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_after_more_hits_is_as_if_the_hit_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.BUCKETED_WINDOW)), data, later=True)


def test_a_refund_takes_back_from_the_bucket_of_the_hit() -> None:
    limit = Limit(6, 10, "bucketed_window", granularity=2)
    start = T0 - T0 % 2
    state = (((start, 1), (start + 2, 2), (start + 4, 3)), 6)
    assert refund(state, start + 2.5, 1, limit) == (
        ((start, 1), (start + 2, 1), (start + 4, 3)),
        5,
    )
    assert refund(state, start + 2, 5, limit) == (((start, 1), (start + 4, 3)), 4)
    assert refund(state, start + 6, 1, limit) == state  # no bucket there
    assert refund((((start, 2),), 2), start, 2, limit) is None
