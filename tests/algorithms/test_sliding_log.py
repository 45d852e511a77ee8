"""The sliding window log, driven through ``Limit.step`` with a chosen clock."""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from copy import copy
from math import inf
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.sliding_log import SHORT, _gone, refund
from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import FakeClock
from tests.algorithms.refunds import assert_refund_undoes
from tests.algorithms.replay import Hit, Outcome, rows, run
from tests.strategies import limits

T0 = 1_700_000_040.0  # a whole minute after the epoch


def log_limit(amount: int, period: float) -> Limit:
    return Limit(amount, period, algorithm="sliding_log")


def test_refuses_the_edge_burst_a_fixed_window_lets_through() -> None:
    # 10/minute: 10 hits in 01:30-01:59 then 10 in 02:00-02:30; the fixed window admits all 20.
    first = [T0 + 90 + 3 * i for i in range(10)]
    second = [T0 + 120 + 3 * i for i in range(10)]
    hits = [(t, 1) for t in first + second]
    assert all(d.allowed for d in run(Limit(10, 60), hits)[1])
    state, decisions = run(log_limit(10, 60), hits)
    assert rows(decisions) == [
        *[(True, 9 - i, 60.0, 0.0) for i in range(10)],
        # Full until the oldest hit, at 01:30, leaves the window at 02:30.
        *[(False, 0, T0 + 177 - t, T0 + 150 - t) for t in second],
    ]
    assert tuple(state) == tuple(first)
    _, (decision,) = run(log_limit(10, 60), [(T0 + 150, 1)], state)
    assert rows([decision]) == [(True, 0, 60.0, 0.0)]


@pytest.mark.parametrize(
    ("hits", "expected"),
    [
        pytest.param(
            [(0, 1), (4, 1), (8, 1), (9, 1), (10, 1)],
            [
                (True, 2, 10.0, 0.0),
                (True, 1, 10.0, 0.0),
                (True, 0, 10.0, 0.0),
                (False, 0, 9.0, 1.0),
                (True, 0, 10.0, 0.0),  # the hit at 0 left (0, 10] exactly at 10
            ],
            id="one-at-a-time",
        ),
        pytest.param(
            [(4, 1), (8, 1), (10, 1), (13, 2), (14, 2), (18, 2)],
            [
                (True, 2, 10.0, 0.0),
                (True, 1, 10.0, 0.0),
                (True, 0, 10.0, 0.0),
                (False, 0, 7.0, 5.0),  # two entries must leave: 4 at 14, then 8 at 18
                (False, 1, 6.0, 4.0),
                (True, 0, 10.0, 0.0),
            ],
            id="cost-above-one",
        ),
        pytest.param(
            [(0, 0), (0, 4), (1, 3), (5, 0), (5, 4), (11, 0)],
            [
                (True, 3, 0.0, 0.0),
                (False, 3, 0.0, inf),  # more than the amount can never fit
                (True, 0, 10.0, 0.0),
                (True, 0, 6.0, 0.0),
                (False, 0, 6.0, inf),
                (True, 3, 0.0, 0.0),
            ],
            id="peek-and-cost-above-amount",
        ),
    ],
)
def test_decisions(hits: list[Hit], expected: list[Outcome]) -> None:
    _, decisions = run(log_limit(3, 10), [(T0 + t, cost) for t, cost in hits])
    assert rows(decisions) == expected


def test_state_is_one_timestamp_per_unit_pruned_to_the_window() -> None:
    limit = log_limit(5, 10)
    state, _ = run(limit, [(T0, 2), (T0 + 3, 1), (T0 + 11, 2)])
    assert tuple(state) == (T0 + 3, T0 + 11, T0 + 11)


def test_a_log_is_a_list_while_short_and_a_deque_once_longer() -> None:
    limit = log_limit(SHORT + 10, 10)
    state, _ = run(limit, [(T0, SHORT)])
    assert isinstance(state, list)
    state, decision = limit.step(state, T0 + 1, 1, limit)
    assert isinstance(state, deque)
    assert decision.remaining == 9
    state, decision = limit.step(state, T0 + 10.5, 1, limit)  # the first SHORT entries left
    assert tuple(state) == (T0 + 1, T0 + 10.5)
    assert decision.remaining == SHORT + 8


def test_denied_hit_consumes_nothing() -> None:
    limit = log_limit(2, 10)
    state, _ = run(limit, [(T0, 2)])
    new, decision = limit.step(state, T0 + 5, 1, limit)
    assert not decision.allowed
    assert decision.granted == 0
    assert new is state
    assert tuple(state) == (T0, T0)


def test_peek_reports_without_consuming() -> None:
    limit = log_limit(5, 10)
    state, _ = run(limit, [(T0, 2)])
    for _ in range(3):
        state, decision = limit.step(state, T0 + 1, 0, limit)
        assert decision == Decision(True, 5, 3, 9.0, 0.0, 0.0, 0, False)
    assert tuple(state) == (T0, T0)


def test_clock_going_backwards_keeps_the_log_sorted() -> None:
    limit = log_limit(3, 10)
    state, decisions = run(limit, [(T0 + 5, 1), (T0 + 2, 1), (T0 + 12, 1), (T0 + 13, 1)])
    assert [d.allowed for d in decisions] == [True, True, True, True]
    assert tuple(state) == (T0 + 5, T0 + 12, T0 + 13)


# Random arrivals: non-decreasing times from non-negative gaps, costs 1..5.
gaps = st.one_of(st.just(0.0), st.floats(0, 5), st.floats(0, 150))
arrivals = st.lists(st.tuples(gaps, st.integers(1, 5)), min_size=1, max_size=60)
bases = st.sampled_from([0.0, 1_000.25, T0])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.integers(1, 100), bases, arrivals)
def test_admits_exactly_what_fits_in_every_rolling_window(
    amount: int, period: int, base: float, steps: list[tuple[float, int]]
) -> None:
    limit = log_limit(amount, period)
    state: Any = None
    now = base
    admitted: list[tuple[float, int]] = []
    for gap, cost in steps:
        now += gap
        before = None if state is None else tuple(state)
        new, decision = limit.step(state, now, cost, limit)
        in_window = sum(c for t, c in admitted if t > now - period)
        assert decision.allowed == (in_window + cost <= amount)
        if decision.allowed:
            admitted.append((now, cost))
            assert decision.remaining == amount - in_window - cost
            assert len(new) <= amount
            assert list(new) == sorted(new)
        else:
            # Refused: the same log, untouched.
            assert new is state
            if before is not None:
                assert tuple(new) == before
            assert decision.granted == 0
            assert decision.remaining == amount - in_window
        state = new
    # No window (t - period, t] holds more than the amount; the fullest ends at an admission.
    for end, _ in admitted:
        assert sum(c for t, c in admitted if end - period < t <= end) <= amount


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 20),
    st.integers(1, 100),
    st.lists(st.tuples(st.integers(0, 30), st.integers(1, 5)), min_size=1, max_size=60),
)
def test_retry_after_is_exact(amount: int, period: int, steps: list[tuple[int, int]]) -> None:
    limit = log_limit(amount, period)
    state: Any = None
    now = T0
    for gap, cost in steps:
        now += gap
        new, decision = limit.step(state, now, cost, limit)
        if not decision.allowed and cost <= amount:
            retry = decision.retry_after
            # The log is updated in place, so each what-if steps on its own copy.
            assert limit.step(copy(state), now + retry, cost, limit)[1].allowed
            assert not limit.step(copy(state), now + retry - 0.5, cost, limit)[1].allowed
        if decision.allowed:
            assert decision.reset_after == period  # the newest entry is this hit
        state = new


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.SLIDING_LOG)), data, later=False)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_after_more_hits_is_as_if_the_hit_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.SLIDING_LOG)), data, later=True)


def test_a_refund_removes_only_entries_stamped_at_the_hit() -> None:
    limit = Limit(5, 10, "sliding_log")
    log = deque([T0, T0 + 1, T0 + 1, T0 + 2])
    assert list(refund(deque(log), T0 + 1, 1, limit) or ()) == [T0, T0 + 1, T0 + 2]
    assert list(refund(deque(log), T0 + 1, 5, limit) or ()) == [T0, T0 + 2]
    assert list(refund(deque(log), T0 + 3, 1, limit) or ()) == list(log)  # none stamped then
    assert refund(deque([T0]), T0, 1, limit) is None


@given(
    stamps=st.lists(st.integers(0, 300), min_size=1, max_size=200),
    start=st.integers(0, 301),
)
def test_the_entries_that_left_are_counted_as_a_bisection_counts_them(
    stamps: list[int], start: int
) -> None:
    ordered = sorted(float(stamp) for stamp in stamps)
    for log in (ordered, deque(ordered)):  # a short log and a long one
        if log[0] <= start:  # as the step calls it: the oldest entry has left
            assert _gone(log, float(start)) == bisect_right(log, float(start))


@pytest.mark.parametrize("amount", [50, 2 * SHORT])  # a list, then a log that grows a deque
def test_a_busy_log_at_its_steady_state_decides_as_an_exact_count(
    clock: FakeClock, amount: int
) -> None:
    """Entries leave one or a few at a time, and now and then many at once."""
    store = MemoryStore(clock=clock)
    limit = Limit(amount, 1.0, "sliding_log")
    admitted: list[float] = []
    refused = 0
    for step in range(3000):
        clock.advance(0.01 if step % 500 else 2.0)  # a pause now and then empties the window
        cost = 1 + step % 3
        inside = sum(1 for stamp in admitted if stamp > clock() - 1.0)
        decision = store.apply("k", limit, cost)
        assert decision.allowed == (inside + cost <= amount)
        if decision.allowed:
            admitted.extend([clock()] * cost)
        else:
            refused += 1
    assert 0 < refused < 3000 - amount
