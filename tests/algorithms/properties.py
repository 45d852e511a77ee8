"""Properties over random arrivals that the algorithms with a burst share: GCRA and the leaky
bucket, as a meter and as a shaper.

``scenarios(algorithm)`` draws a limit of that algorithm with a burst, and hits of cost 1 to 5
at non-decreasing times, from either of ``BASES``. Over any run of them:

- ``assert_within_capacity_plus_rate``: what is admitted between any two admitted hits is at
  most the capacity plus the rate times the time between them; a denial grants nothing and
  keeps the state.
- ``assert_retry_after_is_when_the_hit_would_succeed``: a denied hit sent again just after its
  ``retry_after`` is admitted, and just before it is not; a hit above the capacity never is.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from ratekeeper.core.limits import Limit
from tests.algorithms.replay import BASES

PROPERTY = settings(max_examples=200, deadline=None)
SLACK = 1e-6  # units, or seconds

#: A limit, and the hits sent to it: (now, cost).
Scenario = tuple[Limit, list[tuple[float, int]]]


@st.composite
def scenarios(draw: st.DrawFn, algorithm: str) -> Scenario:
    amount = draw(st.integers(1, 20))
    period = draw(st.floats(1, 100))
    burst = draw(st.integers(1, 20))
    limit = Limit(amount, period, algorithm=algorithm, burst=burst)
    now = draw(st.sampled_from(BASES)) + draw(st.floats(0, 1e6))
    gap = st.one_of(st.just(0.0), st.floats(0, 2 * limit.interval), st.floats(0, 2 * period))
    hits = []
    for _ in range(draw(st.integers(0, 60))):
        now += draw(gap)
        hits.append((now, draw(st.integers(1, 5))))
    return limit, hits


def assert_within_capacity_plus_rate(scenario: Scenario, *, delays: bool = False) -> None:
    """``delays``: the limit shapes (its admitted hits wait), so a denied hit must wait 0."""
    limit, hits = scenario
    state: Any = None
    times, granted = [], []
    for now, cost in hits:
        before = state
        state, decision = limit.step(state, now, cost, limit)
        if decision.allowed:
            assert decision.granted == cost
            times.append(now)
            granted.append(cost)
        else:
            assert state is before
            assert decision.granted == 0
            if delays:
                assert decision.delay == 0.0
        assert 0 <= decision.remaining <= limit.capacity
    for first in range(len(times)):
        total = 0
        for last in range(first, len(times)):
            total += granted[last]
            bound = limit.capacity + limit.rate * (times[last] - times[first]) + SLACK
            assert total <= bound, (first, last)


def assert_retry_after_is_when_the_hit_would_succeed(scenario: Scenario) -> None:
    limit, hits = scenario
    margin = 1e-4
    state: Any = None
    for now, cost in hits:
        before = state
        state, decision = limit.step(state, now, cost, limit)
        if cost > limit.capacity:
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
