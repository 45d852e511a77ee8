"""``ratekeeper demo``: live decisions of every algorithm on the same bursty traffic.

It drives one in-memory ``Limiter`` with synthetic clients, a steady one and a bursty one, and
prints once per second what each algorithm admitted, so the differences between the
algorithms can be seen rather than read about. The work per second is bounded: a rate faster
than ``MAX_SIMULATED_RATE`` per second is scaled down, each simulated hit standing for many.
SIGTERM and Ctrl-C stop it at once.
"""

from __future__ import annotations

import math
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.limits import Limit
from ratekeeper.core.rates import parse
from ratekeeper.limiter import Limiter

#: Algorithms shown by default; concurrency needs releases and is shown with its own traffic.
SHOWN = [a for a in Algorithm if a is not Algorithm.CONCURRENCY]

#: The signals that stop the demo.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The most hits per second the demo simulates; the busiest tick offers 4.2 times as many.
MAX_SIMULATED_RATE = 250


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
    """Run the demo until ``seconds`` have passed or ``stop`` is set; return the total
    admitted per algorithm.

    At most ``MAX_SIMULATED_RATE`` hits per second are simulated: a faster rate is divided by
    a scale, and each simulated hit stands for ``scale`` hits (in the counts shown too).
    """
    stop = stop or threading.Event()
    base = parse(rate)
    per_second = base.amount / base.period
    scale = max(1, math.ceil(per_second / MAX_SIMULATED_RATE))
    amount = max(1, round(base.amount / scale))
    limits = {algorithm: Limit(amount, base.period, algorithm) for algorithm in SHOWN}
    limiter = Limiter()
    rng = random.Random(seed)
    totals: dict[Algorithm, int] = dict.fromkeys(SHOWN, 0)
    names = [algorithm.value for algorithm in SHOWN]
    out.write(
        f"ratekeeper demo: {base.amount} per {base.period:g}s, one in-memory store, "
        f"{len(SHOWN)} algorithms side by side; Ctrl-C stops\n"
    )
    if scale > 1:
        out.write(f"(each simulated hit stands for {scale:,} hits)\n")
    out.write("  t  offered  " + "  ".join(names) + "\n")
    start = time.monotonic()
    tick = 0
    while tick < seconds and not stop.is_set():
        offered = _arrivals(rng, tick, per_second / scale)
        tally = Tally(offered, dict.fromkeys(SHOWN, 0))
        for index in range(offered):
            if stop.is_set():
                break
            for algorithm, limit in limits.items():
                if limiter.hit("client:demo", limit).allowed:
                    tally.admitted[algorithm] += 1
            # Spread the tick's hits over the second.
            pause = start + tick + (index + 1) / offered - time.monotonic()
            if pause > 0 and stop.wait(pause):
                break
        for algorithm in SHOWN:
            totals[algorithm] += tally.admitted[algorithm] * scale
        row = "  ".join(f"{tally.admitted[a] * scale:>{len(a.value)}}" for a in SHOWN)
        out.write(f"{tick + 1:>3}  {offered * scale:>7}  {row}\n")
        out.flush()
        tick += 1
    out.write("total        " + "  ".join(f"{totals[a]:>{len(a.value)}}" for a in SHOWN) + "\n")
    return totals


#: The rules of the engine demo: login attempts limited by address and by username together.
DEMO_RULES = """
domain: login
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 8}
  - key: username
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log}
"""


def engine_demo(config_url: str, out: TextIO = sys.stdout) -> list[bool]:
    """Decide a short login attack through the engine: rules, plus an override in SQLite.

    Returns the verdicts, in order.
    """
    from ratekeeper.config import open_config_store, redacted
    from ratekeeper.core.overrides import Override
    from ratekeeper.engine import Engine
    from ratekeeper.rules import parse_rules

    config = open_config_store(config_url)
    # An operator lets a load-testing account try more often (`ratekeeper limits set`).
    config.set("username:loadtest", Override(50, 3600, "sliding_log"), domain="login")
    engine = Engine(rules=parse_rules(DEMO_RULES, "demo rules"), config=config)
    out.write(
        f"\nthe decision engine: Envoy-style rules, per-key overrides in {redacted(config_url)}\n"
        "  attempt  address      username   verdict  (address left, username left)\n"
    )
    attempts = [(f"10.0.0.{n}", "alice") for n in range(1, 7)]  # one account, many addresses
    attempts += [("192.0.2.7", f"user{n}") for n in range(3)]  # one address, many accounts
    attempts += [("192.0.2.7", "loadtest")] * 6
    verdicts = []
    try:
        for number, (address, username) in enumerate(attempts, 1):
            verdict = engine.check(
                "login", [[("remote_address", address)], [("username", username)]]
            )
            verdicts.append(verdict.allowed)
            left = ", ".join(str(status.remaining) for status in verdict.statuses)
            word = "allowed" if verdict.allowed else "REFUSED"
            out.write(f"  {number:>7}  {address:<11}  {username:<9}  {word}  ({left})\n")
    finally:
        engine.close()
    return verdicts


def main(rate: str, seconds: float, seed: int) -> int:
    """``ratekeeper demo``: the algorithms, then the engine; SIGTERM or Ctrl-C stops it, with
    status 0, within one simulated hit."""
    stop = threading.Event()

    def finish(signum: int, frame: object) -> None:
        stop.set()

    previous = {number: signal.signal(number, finish) for number in STOP_SIGNALS}
    try:
        run(rate, seconds, seed, stop=stop)
        if stop.is_set():
            sys.stdout.write("stopped\n")
        else:
            with tempfile.TemporaryDirectory() as directory:
                engine_demo(f"sqlite:///{directory}/ratekeeper.db")
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 0
