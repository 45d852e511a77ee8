"""The in-memory benchmarks' scenarios: which keys are hit, on which path, with which limit.

``plan`` gives each row its limit, keys and calls; ``benchmarks.trials`` measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.trials import (
    DENY_AMOUNT,
    LOG_ALGORITHMS,
    LOG_AMOUNT,
    UNREACHABLE,
    Plan,
)

#: The window of the hot sliding log's allow path, in seconds: short, so that entries leave it
#: during a measurement as fast as they come, as in a busy log at its steady state.
STEADY_PERIOD = 1
#: Its amount: more than any library admits in one window, so the path stays allow.
STEADY_AMOUNT = 20_000_000


@dataclass(frozen=True)
class Scenario:
    """Which keys are hit (one hot key, or many cycled round-robin) and on which path."""

    name: str
    hot: bool
    allow: bool

    def title(self, keys: int) -> str:
        which = "One hot key" if self.hot else f"{keys:,} distinct keys round-robin"
        return f"{which}, {'allow' if self.allow else 'deny'} path"


SCENARIOS = (
    Scenario("hot key, allow", hot=True, allow=True),
    Scenario("hot key, deny", hot=True, allow=False),
    Scenario("many keys, allow", hot=False, allow=True),
    Scenario("many keys, deny", hot=False, allow=False),
)


@dataclass(frozen=True)
class Sizes:
    """How much work one run does: ``--quick`` shrinks every number."""

    calls: int = 200_000  # calls per measurement
    log_calls: int = 50_000  # calls per measurement on a hot sliding log
    keys: int = 100_000  # distinct keys in the round-robin scenarios
    repeats: int = 3


QUICK = Sizes(calls=20_000, log_calls=5_000, keys=10_000, repeats=3)


def plan(scenario: Scenario, algorithm: str, sizes: Sizes) -> Plan:
    """The limit and calls for ``algorithm`` in ``scenario``."""
    keys = 1 if scenario.hot else sizes.keys
    if not scenario.allow:
        return Plan(DENY_AMOUNT, keys, sizes.calls, False, setup_cost=DENY_AMOUNT)
    if algorithm in LOG_ALGORITHMS:
        if scenario.hot:
            return Plan(
                STEADY_AMOUNT,
                1,
                sizes.log_calls,
                True,
                setup_cost=1,
                fresh=True,
                period=STEADY_PERIOD,
                warmup=STEADY_PERIOD,
            )
        return Plan(LOG_AMOUNT, keys, sizes.calls, True, setup_cost=1)
    return Plan(UNREACHABLE, keys, sizes.calls, True, setup_cost=1)
