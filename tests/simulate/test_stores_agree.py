"""The simulator decides exactly as the stores: a trace replayed through ``simulate`` and, hit
by hit, through ``Limiter`` on a ``MemoryStore`` driven by a ``FakeClock`` gives the same
decisions (and the shaper the same delays), for every algorithm."""

from __future__ import annotations

import pytest

from ratekeeper import Limit, Limiter, MemoryStore
from ratekeeper.simulate import simulate
from ratekeeper.testing import FakeClock
from tests.simulate.mixed import LIMITS, mixed_trace


@pytest.mark.parametrize("limit", LIMITS, ids=str)
def test_the_simulator_and_the_memory_store_decide_alike(limit: Limit) -> None:
    trace = mixed_trace()
    result = simulate(trace, [limit], record=True)
    tally = result.replay.tallies[0]
    assert tally.decisions is not None and tally.delay_of is not None
    clock = FakeClock()
    limiter = Limiter(MemoryStore(clock=clock), sleep=clock.sleep)
    allowed, delays = [], []
    for now, key, cost in trace:
        clock.set(now)
        decision = limiter.hit(key, limit, cost)
        allowed.append(int(decision.allowed))
        delays.append(decision.delay)
    assert list(tally.decisions) == allowed
    assert list(tally.delay_of) == delays  # bit for bit
    assert 0 < sum(allowed) < len(allowed)  # both outcomes were exercised
