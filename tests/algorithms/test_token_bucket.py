"""Token bucket: refill, partial grants, and the promise it keeps over any interval."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.token_bucket import refund
from ratekeeper.core.limits import Limit
from tests.algorithms.refunds import assert_refund_undoes
from tests.algorithms.replay import BASES, Row, replay
from tests.strategies import limits

# The source's example: capacity 3, refilled at 3 tokens per minute (one every 20 s).
REFILL: list[Row] = [
    (0, 1, True, 2, 20.0, 0.0, 1),
    (0, 1, True, 1, 40.0, 0.0, 1),
    (0, 1, True, 0, 60.0, 0.0, 1),
    (0, 1, False, 0, 60.0, 20.0, 0),
    (19, 1, False, 0, 41.0, 1.0, 0),  # 0.95 tokens: not yet
    (20, 1, True, 0, 60.0, 0.0, 1),  # exactly one token back
    (20, 1, False, 0, 60.0, 20.0, 0),
    (80, 0, True, 3, 0.0, 0.0, 0),  # cost 0 looks: full again
    (80, 3, True, 0, 60.0, 0.0, 3),  # cost > 1 takes that many tokens
    (80, 4, False, 0, 60.0, math.inf, 0),  # more than the capacity: never allowed
    (1000, 2, True, 1, 40.0, 0.0, 2),  # refill stops at the capacity
]

PARTIAL: list[Row] = [
    (0, 5, True, 0, 60.0, 0.0, 3),  # cost 5 with 3 tokens grants 3
    (0, 5, False, 0, 60.0, 20.0, 0),  # with 0 tokens: denied until one whole token
    (0, 1, False, 0, 60.0, 20.0, 0),
    (30, 5, True, 0, 50.0, 0.0, 1),  # 1.5 tokens: grants the whole one
    (30, 0, True, 0, 50.0, 0.0, 0),
    (40, 1, True, 0, 60.0, 0.0, 1),  # 0.5 + 0.5 tokens
    (100, 2, True, 1, 40.0, 0.0, 2),  # enough tokens: the full cost
]

# Partial: a denial waits for one whole token, since a partial grant succeeds then, whatever
# the cost (even above the capacity). Without partial, 0.5 tokens and cost 2 would wait 30 s.
PARTIAL_WAIT: list[Row] = [
    (0, 3, True, 0, 60.0, 0.0, 3),
    (0, 1, False, 0, 60.0, 20.0, 0),
    (0, 5, False, 0, 60.0, 20.0, 0),  # above the capacity: still a whole token in 20 s
    (10, 2, False, 0, 50.0, 10.0, 0),  # 0.5 tokens: 10 s to a whole one
    (10, 5, False, 0, 50.0, 10.0, 0),
    (15, 3, False, 0, 45.0, 5.0, 0),  # 0.75 tokens
    (20, 5, True, 0, 60.0, 0.0, 1),  # one whole token: granted
    (20, 2, False, 0, 60.0, 20.0, 0),
]

# A clock that steps back: no refill, and the state's time stays put, so the span is not
# refilled a second time when the clock catches up.
STEP_BACK: list[Row] = [
    (0, 3, True, 0, 60.0, 0.0, 3),
    (20, 1, True, 0, 60.0, 0.0, 1),  # one token refilled, taken: 0 tokens at 20
    (10, 0, True, 0, 70.0, 0.0, 0),  # 10 s behind: no refill, and t stays 20
    (10, 1, False, 0, 70.0, 30.0, 0),  # waits counted from the caller's clock
    (20, 1, False, 0, 60.0, 20.0, 0),  # on time again: 10..20 is not refilled twice
    (30, 1, False, 0, 50.0, 10.0, 0),
    (40, 1, True, 0, 60.0, 0.0, 1),
    (35, 0, True, 0, 65.0, 0.0, 0),
    (100, 0, True, 3, 0.0, 0.0, 0),
]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize(
    ("limit", "rows"),
    [
        pytest.param(Limit(3, 60, algorithm="token_bucket"), REFILL, id="refill"),
        pytest.param(Limit(3, 60, algorithm="token_bucket", partial=True), PARTIAL, id="partial"),
        pytest.param(
            Limit(3, 60, algorithm="token_bucket", partial=True), PARTIAL_WAIT, id="partial-wait"
        ),
        pytest.param(Limit(3, 60, algorithm="token_bucket"), STEP_BACK, id="step-back"),
        pytest.param(
            Limit(1, 1, algorithm="token_bucket", burst=4),
            [
                (0, 4, True, 0, 4.0, 0.0, 4),
                (0, 1, False, 0, 4.0, 1.0, 0),
                (0.5, 1, False, 0, 3.5, 0.5, 0),
                (1, 1, True, 0, 4.0, 0.0, 1),
                (3, 2, True, 0, 4.0, 0.0, 2),
                (3, 5, False, 0, 4.0, math.inf, 0),  # more than the burst: never allowed
            ],
            id="burst",
        ),
    ],
)
def test_decisions(limit: Limit, rows: list[Row], base: float) -> None:
    replay(limit, base, rows)


def test_a_clock_that_steps_back_keeps_the_state_time() -> None:
    limit = Limit(3, 60, algorithm="token_bucket")
    now = 1_700_000_000.0
    state = (1.5, now)
    again, decision = limit.step(state, now - 10, 1, limit)
    assert again == (0.5, now)
    # 50 s until full as of the state's time, which is 10 s ahead of the caller's clock.
    assert decision == pytest.approx((True, 3, 0, 60.0, 0.0, 0.0, 1, False))
    again, decision = limit.step(state, now, 1, limit)
    assert again == (0.5, now)
    again, decision = limit.step(state, now + 10, 1, limit)
    assert again == (1.0, now + 10)


def test_peek_on_a_new_key_reports_a_full_bucket() -> None:
    limit = Limit(5, 10, algorithm="token_bucket")
    _, decision = limit.step(None, 1_700_000_000.0, 0, limit)
    assert decision == (True, 5, 5, 0.0, 0.0, 0.0, 0, False)


def test_a_denied_hit_consumes_nothing() -> None:
    limit = Limit(2, 10, algorithm="token_bucket")
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
    limit = Limit(amount, 86_400, algorithm="token_bucket")
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

PROPERTY = settings(max_examples=200, deadline=None)
SLACK = 1e-6  # units


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Limit, list[tuple[float, int]]]:
    amount = draw(st.integers(1, 20))
    period = draw(st.floats(1, 100))
    burst = draw(st.integers(1, 20))
    partial = draw(st.booleans())
    limit = Limit(amount, period, algorithm="token_bucket", burst=burst, partial=partial)
    now = draw(st.sampled_from(BASES)) + draw(st.floats(0, 1e6))
    gap = st.one_of(st.just(0.0), st.floats(0, 2 * limit.interval), st.floats(0, 2 * period))
    hits = []
    for _ in range(draw(st.integers(0, 60))):
        now += draw(gap)
        hits.append((now, draw(st.integers(1, 5))))
    return limit, hits


@PROPERTY
@given(scenarios())
def test_never_exceeds_capacity_plus_rate_times_interval(
    scenario: tuple[Limit, list[tuple[float, int]]],
) -> None:
    limit, hits = scenario
    state: Any = None
    times, granted = [], []
    for now, cost in hits:
        before = state
        state, decision = limit.step(state, now, cost, limit)
        if decision.allowed:
            assert 0 < decision.granted <= cost
            assert decision.granted == cost or limit.partial
            times.append(now)
            granted.append(decision.granted)
        else:
            assert state is before
            assert decision.granted == 0
        assert 0 <= decision.remaining <= limit.capacity
    for first in range(len(times)):
        total = 0
        for last in range(first, len(times)):
            total += granted[last]
            bound = limit.capacity + limit.rate * (times[last] - times[first]) + SLACK
            assert total <= bound, (first, last)


@PROPERTY
@given(scenarios())
def test_retry_after_is_when_the_hit_would_succeed(
    scenario: tuple[Limit, list[tuple[float, int]]],
) -> None:
    limit, hits = scenario
    margin = 1e-4
    state: Any = None
    for now, cost in hits:
        before = state
        state, decision = limit.step(state, now, cost, limit)
        if cost > limit.capacity and not limit.partial:
            assert not decision.allowed
            assert decision.retry_after == math.inf
            continue
        if decision.allowed:
            continue
        assert decision.retry_after < math.inf
        _, later = limit.step(before, now + decision.retry_after + margin, cost, limit)
        assert later.allowed
        # With partial, the denial waited for one whole token, and a partial grant takes it.
        assert later.granted == (1 if limit.partial else cost)
        if decision.retry_after > margin:
            _, sooner = limit.step(before, now + decision.retry_after - margin, cost, limit)
            assert not sooner.allowed


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.TOKEN_BUCKET)), data, later=False)


def test_a_refund_puts_the_tokens_back_up_to_the_capacity() -> None:
    limit = Limit(5, 5, "token_bucket")
    assert refund((1.0, BASES[1]), BASES[1], 2, limit) == (3.0, BASES[1])
    assert refund((1.0, BASES[1]), BASES[1] - 1, 10, limit) == (5.0, BASES[1])
    assert refund(None, BASES[1], 1, limit) is None  # a new bucket is full
