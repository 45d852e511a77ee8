"""Concurrency limiter: slots taken, released, and expiring on their own."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.concurrency import refund
from ratekeeper.core.limits import Limit
from tests.algorithms.refunds import assert_refund_undoes
from tests.algorithms.replay import BASES, Row, replay
from tests.strategies import limits

# 2 slots, each expiring 30 s after it is taken.
SLOTS: list[Row] = [
    (0, 1, True, 1, 30.0, 0.0, 1),
    (1, 1, True, 0, 30.0, 0.0, 1),
    (2, 1, False, 0, 29.0, 28.0, 0),  # full: the first slot expires at 30
    (3, -1, True, 1, 28.0, 0.0, -1),  # release drops the earliest-expiring slot
    (4, 1, True, 0, 30.0, 0.0, 1),
    (5, 0, True, 0, 29.0, 0.0, 0),  # cost 0 looks
    (31, 0, True, 1, 3.0, 0.0, 0),  # the slot taken at 1 was never released: gone at 31
    (31, 1, True, 0, 30.0, 0.0, 1),
    (32, 2, False, 0, 29.0, 29.0, 0),  # both must expire first
    (32, -5, True, 2, 0.0, 0.0, -2),  # releases no more than are held
    (32, -1, True, 2, 0.0, 0.0, 0),
    (33, 3, False, 2, 0.0, math.inf, 0),  # more than the slots: never allowed
    (33, 2, True, 0, 30.0, 0.0, 2),  # cost > 1 takes that many slots
    (40, 3, False, 0, 23.0, math.inf, 0),  # more than there are slots, some held
]


@pytest.mark.parametrize("base", BASES)
def test_decisions(base: float) -> None:
    limit = Limit(2, 30, algorithm="concurrency")
    replay(limit, base, SLOTS, reported=limit.amount)


def test_peek_on_a_new_key_keeps_no_state() -> None:
    limit = Limit(5, 10, algorithm="concurrency")
    state, decision = limit.step(None, 1_700_000_000.0, 0, limit)
    assert state is None
    assert decision == (True, 5, 5, 0.0, 0.0, 0.0, 0, False)


def test_slots_stay_sorted_when_the_clock_steps_back() -> None:
    limit = Limit(3, 30, algorithm="concurrency")
    now = 1_700_000_000.0
    state, _ = limit.step(None, now + 10, 1, limit)
    state, decision = limit.step(state, now, 2, limit)
    assert state == (now + 30, now + 30, now + 40)
    assert decision == (True, 3, 0, 40.0, 0.0, 0.0, 2, False)
    state, decision = limit.step(state, now + 1, -1, limit)
    assert state == (now + 30, now + 40)
    assert decision == (True, 3, 1, 39.0, 0.0, 0.0, -1, False)


def test_exact_under_a_frozen_clock() -> None:
    limit = Limit(10_000, 86_400, algorithm="concurrency")
    now = 1_700_000_000.0
    state: Any = None
    admitted = []
    for _ in range(40_000):
        state, decision = limit.step(state, now, 1, limit)
        if decision.allowed:
            admitted.append(decision.remaining)
    assert admitted == list(range(9_999, -1, -1))
    assert decision.retry_after == 86_400.0
    _, decision = limit.step(state, now + 86_400, 1, limit)
    assert decision.allowed
    assert decision.remaining == 9_999


# ---------------------------------------------------------------------------------------------
# Properties over random acquires, releases and looks.

PROPERTY = settings(max_examples=200, deadline=None)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Limit, list[tuple[float, int]]]:
    amount = draw(st.integers(1, 20))
    period = draw(st.floats(1, 100))
    limit = Limit(amount, period, algorithm="concurrency")
    now = draw(st.sampled_from(BASES)) + draw(st.floats(0, 1e6))
    gap = st.one_of(st.just(0.0), st.floats(0, period / amount), st.floats(0, 2 * period))
    ops = []
    for _ in range(draw(st.integers(0, 60))):
        now += draw(gap)
        ops.append((now, draw(st.integers(-5, 5))))
    return limit, ops


@PROPERTY
@given(scenarios())
def test_matches_a_model_and_never_exceeds_the_slots(
    scenario: tuple[Limit, list[tuple[float, int]]],
) -> None:
    limit, ops = scenario
    amount = limit.amount
    state: Any = None
    model: list[float] = []  # expiry of every slot held, as the model sees it
    for now, cost in ops:
        before = state
        state, decision = limit.step(state, now, cost, limit)
        live = sorted(expiry for expiry in model if expiry > now)
        if cost > 0:
            fits = len(live) + cost <= amount
            assert decision.allowed == fits
            assert decision.granted == (cost if fits else 0)
            if fits:
                live += [now + limit.period] * cost
            else:
                assert state is before
        elif cost < 0:
            released = min(-cost, len(live))
            assert decision.allowed
            assert decision.granted == -released
            live = live[released:]
        else:
            assert decision.allowed
            assert decision.granted == 0
        model = live
        assert len(model) <= amount
        assert decision.remaining == amount - len(model)
        assert decision.reset_after == (model[-1] - now if model else 0.0)
        assert [expiry for expiry in state or () if expiry > now] == model


@PROPERTY
@given(scenarios())
def test_retry_after_is_when_the_slots_free_up(
    scenario: tuple[Limit, list[tuple[float, int]]],
) -> None:
    limit, ops = scenario
    margin = 1e-4
    state: Any = None
    for now, cost in ops:
        before = state
        state, decision = limit.step(state, now, cost, limit)
        if cost > limit.amount:
            assert not decision.allowed
            assert decision.retry_after == math.inf
            continue
        if decision.allowed:
            continue
        assert decision.retry_after < math.inf
        _, later = limit.step(before, now + decision.retry_after + margin, cost, limit)
        assert later.allowed
        if decision.retry_after > margin:
            _, sooner = limit.step(before, now + decision.retry_after - margin, cost, limit)
            assert not sooner.allowed


# --- Refund ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_right_after_the_hit_is_as_if_it_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.CONCURRENCY)), data, later=False)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_refund_after_more_hits_is_as_if_the_hit_never_happened(data: st.DataObject) -> None:
    assert_refund_undoes(data.draw(limits(Algorithm.CONCURRENCY)), data, later=True)


def test_a_refund_removes_the_slots_the_hit_took() -> None:
    limit = Limit(3, 30, "concurrency")
    t0 = BASES[1]
    state, _ = limit.step(None, t0, 1, limit)
    state, _ = limit.step(state, t0 + 1, 2, limit)
    assert state == (t0 + 30, t0 + 31, t0 + 31)
    assert refund(state, t0 + 1, 1, limit) == (t0 + 30, t0 + 31)
    assert refund(state, t0 + 1, 5, limit) == (t0 + 30,)  # only those it took
    assert refund(state, t0 + 2, 1, limit) == state  # none taken then
    assert refund((t0 + 30,), t0, 1, limit) is None
