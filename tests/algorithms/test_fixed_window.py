"""The fixed window counter, driven through ``Limit.step`` with a chosen clock."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from math import inf
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.fixed_window import refund
from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from tests.algorithms.refunds import assert_refund_undoes
from tests.algorithms.replay import Hit, Outcome, rows, run
from tests.strategies import limits

T0 = 1_700_000_040.0  # a whole minute (and ten seconds) after the epoch
DAY = 86_400.0


def utc(stamp: str) -> float:
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def test_window_edge_lets_twice_the_amount_through() -> None:
    # 10/minute: 10 hits in 01:30-01:59 and 10 in 02:00-02:30, 20 in one rolling minute.
    limit = Limit(10, 60)
    first = [T0 + 90 + 3 * i for i in range(10)]
    second = [T0 + 120 + 3 * i for i in range(10)]
    _, decisions = run(limit, [(t, 1) for t in first + second])
    assert rows(decisions) == [
        *[(True, 9 - i, T0 + 120 - t, 0.0) for i, t in enumerate(first)],
        *[(True, 9 - i, T0 + 180 - t, 0.0) for i, t in enumerate(second)],
    ]


@pytest.mark.parametrize(
    ("hits", "expected"),
    [
        pytest.param(
            [(0, 1), (1, 1), (2, 1), (3, 1), (9.5, 1), (10, 1)],
            [
                (True, 2, 10.0, 0.0),
                (True, 1, 9.0, 0.0),
                (True, 0, 8.0, 0.0),
                (False, 0, 7.0, 7.0),
                (False, 0, 0.5, 0.5),
                (True, 2, 10.0, 0.0),
            ],
            id="one-at-a-time",
        ),
        pytest.param(
            [(0, 2), (1, 2), (1, 1), (5, 0), (12, 3)],
            [
                (True, 1, 10.0, 0.0),
                (False, 1, 9.0, 9.0),
                (True, 0, 9.0, 0.0),
                (True, 0, 5.0, 0.0),
                (True, 0, 8.0, 0.0),
            ],
            id="cost-above-one",
        ),
        pytest.param(
            [(0, 0), (0, 4), (3, 3), (4, 0)],
            [
                (True, 3, 0.0, 0.0),
                (False, 3, 0.0, inf),  # more than the amount can never fit
                (True, 0, 7.0, 0.0),
                (True, 0, 6.0, 0.0),
            ],
            id="peek-and-cost-above-amount",
        ),
    ],
)
def test_decisions(hits: list[Hit], expected: list[Outcome]) -> None:
    _, decisions = run(Limit(3, 10), [(T0 + t, cost) for t, cost in hits])
    assert rows(decisions) == expected


def test_denied_hit_consumes_nothing() -> None:
    limit = Limit(2, 10)
    state, _ = run(limit, [(T0, 1), (T0 + 1, 1)])
    new, decision = limit.step(state, T0 + 2, 1, limit)
    assert not decision.allowed
    assert decision.granted == 0
    assert new is state
    assert state == (T0, 2)


def test_peek_reports_without_consuming() -> None:
    limit = Limit(5, 10)
    state, _ = run(limit, [(T0, 2)])
    for _ in range(3):
        state, decision = limit.step(state, T0 + 1, 0, limit)
        assert decision == Decision(True, 5, 3, 9.0, 0.0, 0.0, 0, False)
    assert state == (T0, 2)


@pytest.mark.parametrize(
    ("period", "hits", "expected"),
    [
        pytest.param(
            2_592_000,
            [
                (utc("2024-01-31 23:59:59"), 3),
                (utc("2024-01-31 23:59:59"), 1),
                (utc("2024-02-01 00:00:00"), 1),
            ],
            [(True, 0, 1.0, 0.0), (False, 0, 1.0, 1.0), (True, 2, 29 * DAY, 0.0)],
            id="month-edge-leap-february",
        ),
        pytest.param(
            2_592_000,
            [(utc("2023-02-15 12:00:00"), 1), (utc("2023-12-31 18:00:00"), 1)],
            [(True, 2, 13.5 * DAY, 0.0), (True, 2, 0.25 * DAY, 0.0)],
            id="month-ends",
        ),
        pytest.param(
            31_536_000,
            [
                (utc("2024-07-01 00:00:00"), 3),
                (utc("2024-12-31 23:59:59"), 1),
                (utc("2025-01-01 00:00:00"), 1),
            ],
            [(True, 0, 184 * DAY, 0.0), (False, 0, 1.0, 1.0), (True, 2, 365 * DAY, 0.0)],
            id="year",
        ),
        pytest.param(
            604_800,
            [
                (utc("2024-01-08 00:00:00"), 2),  # Monday 00:00
                (utc("2024-01-10 12:00:00"), 1),  # Wednesday noon
                (utc("2024-01-14 23:59:59"), 1),  # Sunday, the same week
                (utc("2024-01-15 00:00:00"), 1),  # Monday, a new week
            ],
            [
                (True, 1, 7 * DAY, 0.0),
                (True, 0, 4.5 * DAY, 0.0),
                (False, 0, 1.0, 1.0),
                (True, 2, 7 * DAY, 0.0),
            ],
            id="iso-week-from-monday",
        ),
        pytest.param(
            86_400,
            [(utc("2024-03-09 23:59:59"), 3), (utc("2024-03-10 00:00:00"), 1)],
            [(True, 0, 1.0, 0.0), (True, 2, DAY, 0.0)],
            id="day",
        ),
    ],
)
def test_calendar_windows(period: int, hits: list[Hit], expected: list[Outcome]) -> None:
    _, decisions = run(Limit(3, period, calendar=True), hits)
    assert rows(decisions) == expected


def test_plain_week_is_epoch_aligned_but_calendar_week_starts_monday() -> None:
    # 1970-01-01 was a Thursday: a plain 604_800 s window runs Thursday to Thursday.
    sunday, monday = utc("2024-01-14 23:59:59"), utc("2024-01-15 00:00:00")
    plain, calendar = Limit(1, 604_800), Limit(1, 604_800, calendar=True)
    assert [d.allowed for d in run(plain, [(sunday, 1), (monday, 1)])[1]] == [True, False]
    assert [d.allowed for d in run(calendar, [(sunday, 1), (monday, 1)])[1]] == [True, True]


# Random arrivals: non-decreasing times from non-negative gaps, costs 1..5.
gaps = st.one_of(st.just(0.0), st.floats(0, 5), st.floats(0, 150))
arrivals = st.lists(st.tuples(gaps, st.integers(1, 5)), min_size=1, max_size=60)
bases = st.sampled_from([0.0, 1_000.25, T0])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20), st.integers(1, 100), bases, arrivals)
def test_admitted_never_exceed_amount_per_window(
    amount: int, period: int, base: float, steps: list[tuple[float, int]]
) -> None:
    limit = Limit(amount, period)
    state: Any = None
    now = base
    admitted: defaultdict[float, int] = defaultdict(int)
    for gap, cost in steps:
        now += gap
        new, decision = limit.step(state, now, cost, limit)
        start = now - now % period
        if decision.allowed:
            admitted[start] += cost
            assert decision.granted == cost
            assert decision.remaining == amount - admitted[start]
        else:
            assert new is state
            assert decision.granted == 0
            assert admitted[start] + cost > amount  # exact: denied only when it must be
        assert admitted[start] <= amount
        state = new


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.FIXED_WINDOW)), data, later=False)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_after_more_hits_is_as_if_the_hit_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.FIXED_WINDOW)), data, later=True)


def test_a_refund_takes_back_only_from_the_window_of_the_hit() -> None:
    limit = Limit(3, 10, "fixed_window")
    start = T0 - T0 % 10
    state, _ = limit.step(None, start + 1, 2, limit)
    assert refund(state, start + 1, 1, limit) == (start, 1)
    assert refund(state, start + 9, 2, limit) is None  # nothing left counted
    later, _ = limit.step(state, start + 11, 1, limit)
    assert refund(later, start + 1, 2, limit) == later  # its window has gone
    assert refund(None, start + 1, 1, limit) is None
