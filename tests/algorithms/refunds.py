"""The refund property every algorithm's unit tests check: a hit refunded is a hit that never
happened, to every later decision.

Two runs of one timeline under a ``FakeClock``: one with the hit and, right after it or after
more hits, its ``refund``; one without the hit. Before the refund the runs may decide
differently (the hit is counted in one of them); ``later=True`` draws more hits in between and
keeps only the examples where both runs admitted the same of them. After the refund both runs
must decide every hit alike: the same ``allowed``, ``remaining`` and ``granted``, the same
waits up to float rounding (``tokens - cost + cost`` need not be ``tokens`` bit for bit).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import strategies as st

from ratekeeper.algorithms import refund_function
from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from ratekeeper.testing import FakeClock

T0 = 1_700_000_000.0

gaps = st.sampled_from([0.0, 0.0, 0.001]) | st.floats(0, 2) | st.floats(0, 200)


def _same(got: Decision, want: Decision, where: str) -> None:
    assert (got.allowed, got.remaining, got.granted) == (
        want.allowed,
        want.remaining,
        want.granted,
    ), where
    assert (got.reset_after, got.retry_after, got.delay) == pytest.approx(
        (want.reset_after, want.retry_after, want.delay), rel=1e-9, abs=1e-9
    ), where


def step(limit: Limit, state: Any, now: float, cost: int) -> tuple[Any, Decision]:
    """The step on a copy (the sliding log updates in place), keeping the state on a denial."""
    new, decision = limit.step(copy.copy(state), now, cost, limit)
    return (new if decision.allowed else state), decision


def assert_refund_undoes(limit: Limit, data: st.DataObject, *, later: bool) -> None:
    costs = st.sampled_from([0, 1, 1, 1, 2, 3])
    before = data.draw(st.lists(st.tuples(gaps, costs), max_size=8), label="before")
    hit = data.draw(st.tuples(gaps, st.integers(1, 3)), label="hit")
    between = data.draw(st.lists(st.tuples(gaps, costs), max_size=6 if later else 0))
    after = data.draw(st.lists(st.tuples(gaps, costs), min_size=1, max_size=12), label="after")
    clock = FakeClock(T0 + data.draw(st.floats(0, 1e6), label="start"))
    refund = refund_function(limit.algorithm)
    state: Any = None
    for gap, cost in before:
        clock.advance(gap)
        state = step(limit, state, clock(), cost)[0]
    clock.advance(hit[0])
    at = clock()
    charged, decision = step(limit, state, at, hit[1])
    if not decision.granted:
        return  # nothing admitted, nothing to refund
    for gap, cost in between:
        clock.advance(gap)
        charged, one = step(limit, charged, clock(), cost)
        state, other = step(limit, state, clock(), cost)
        if (one.allowed, one.granted) != (other.allowed, other.granted):
            return  # the hit changed what was admitted meanwhile: the runs have diverged
    charged = refund(copy.copy(charged), at, decision.granted, limit)
    for i, (gap, cost) in enumerate(after):
        clock.advance(gap)
        charged, got = step(limit, charged, clock(), cost)
        state, want = step(limit, state, clock(), cost)
        _same(got, want, f"{limit!r}: hit {i} after the refund")
