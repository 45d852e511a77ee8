"""A trace that exercises every branch of every algorithm: a few keys, bursts and pauses,
costs from 1 to 3, and hits on and around window edges."""

from __future__ import annotations

import random

from ratekeeper import Algorithm, Limit
from ratekeeper.simulate import Trace
from ratekeeper.simulate.generators import START

#: Every algorithm at 5 per 2 seconds (the bucketed window in half-second buckets).
LIMITS = [
    Limit(5, 2.0, algorithm, **({"granularity": 0.5} if algorithm == "bucketed_window" else {}))
    for algorithm in Algorithm
]


def mixed_trace(events: int = 1_500, seed: int = 11, spacing: float = 0.15) -> Trace:
    """``events`` hits on four keys, about ``spacing`` seconds apart on average."""
    rng = random.Random(seed)
    now = START + 0.25
    times, keys, costs = [], [], []
    for _ in range(events):
        pick = rng.random()
        if pick < 0.5:
            pass  # the same instant: a burst
        elif pick < 0.6:
            now += rng.choice((0.5, 1.0, 2.0))  # on a grid, often on a window edge
        elif pick < 0.65:
            now += rng.uniform(2, 8)  # a pause of a few periods
        else:
            now += rng.expovariate(1 / spacing)
        times.append(now)
        keys.append(f"user:{rng.randrange(4)}")
        costs.append(rng.choice((1, 1, 1, 2, 3)))
    return Trace(times, keys, costs, name="mixed")
