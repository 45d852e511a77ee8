"""``ratekeeper demo``: live decisions of every algorithm on the same bursty traffic.

It drives one in-memory ``Limiter`` with synthetic clients, a steady one and a bursty one, and
prints once per second what each algorithm admitted, so the differences between the
algorithms can be seen rather than read about.
"""

from __future__ import annotations

import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

from ratekeeper.algorithms import Algorithm
from ratekeeper.limit import Limit
from ratekeeper.limiter import Limiter
from ratekeeper.rates import parse

#: Algorithms shown by default; concurrency needs releases and is shown with its own traffic.
SHOWN = [a for a in Algorithm if a is not Algorithm.CONCURRENCY]


@dataclass
class Tally:
    offered: int = 0
    admitted: dict[Algorithm, int] = field(default_factory=dict)


def _arrivals(rng: random.Random, second: int, rate: float) -> int:
    """Offered hits in one tick: a steady stream plus a burst every fifth second."""
    steady = rng.randint(int(rate * 0.6), int(rate * 1.2))
    burst = int(rate * 3) if second % 5 == 4 else 0
    return steady + burst


def run(
    rate: str = "20/second",
    seconds: float = 10.0,
    seed: int = 7,
    out: TextIO = sys.stdout,
    stop: threading.Event | None = None,
) -> dict[Algorithm, int]:
    """Run the demo; return the total admitted per algorithm."""
    stop = stop or threading.Event()
    base = parse(rate)
    limits = {algorithm: Limit(base.amount, base.period, algorithm) for algorithm in SHOWN}
    limiter = Limiter()
    rng = random.Random(seed)
    totals: dict[Algorithm, int] = dict.fromkeys(SHOWN, 0)
    per_second = base.amount / base.period
    names = [algorithm.value for algorithm in SHOWN]
    out.write(
        f"ratekeeper demo: {base.amount} per {base.period:g}s, one in-memory store, "
        f"{len(SHOWN)} algorithms side by side; Ctrl-C stops\n"
    )
    out.write("  t  offered  " + "  ".join(names) + "\n")
    start = time.monotonic()
    tick = 0
    while tick < seconds and not stop.is_set():
        offered = _arrivals(rng, tick, per_second)
        tally = Tally(offered, dict.fromkeys(SHOWN, 0))
        for index in range(offered):
            for algorithm, limit in limits.items():
                if limiter.hit("client:demo", limit).allowed:
                    tally.admitted[algorithm] += 1
            # Spread the tick's hits over the second.
            pause = start + tick + (index + 1) / offered - time.monotonic()
            if pause > 0 and stop.wait(pause):
                break
        for algorithm in SHOWN:
            totals[algorithm] += tally.admitted[algorithm]
        row = "  ".join(f"{tally.admitted[a]:>{len(a.value)}}" for a in SHOWN)
        out.write(f"{tick + 1:>3}  {offered:>7}  {row}\n")
        out.flush()
        tick += 1
    out.write("total        " + "  ".join(f"{totals[a]:>{len(a.value)}}" for a in SHOWN) + "\n")
    return totals


def main(rate: str, seconds: float, seed: int) -> int:
    stop = threading.Event()

    def finish(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, finish)
    try:
        run(rate, seconds, seed, stop=stop)
    except KeyboardInterrupt:
        sys.stdout.write("\nstopped\n")
    return 0
