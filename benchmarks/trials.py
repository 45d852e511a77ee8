"""The measurement of decisions per second that every table is made of.

A measurement times a fixed number of calls with ``time.perf_counter``, the garbage collector
off as ``timeit`` does (garbage is collected between rows). A row keeps each contender's best
of its repeats, and the contenders of a row take turns repeat by repeat, so that a disturbance
of the machine hits them all alike.

No measurement can time the wrong path. Before the timed calls, every key is set up through the
library's own call (a first hit on the allow path, a hit costing the whole amount on the deny
path), every setup hit must have been allowed, and a sample of hits must all be allowed (allow
path) or all denied (deny path). The same sample is checked again after the timed calls; a
measurement whose state drifted meanwhile (a fixed window rolling over, say) is discarded and
redone on fresh keys.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from benchmarks.contenders import PERIOD, Contender

#: Hits per sample in the checks made before and after each measurement.
SAMPLE = 20

#: Attempts at one measurement before a drifting state is reported as an error.
ATTEMPTS = 3

#: Calls between two looks at the clock while warming up.
WARMUP_CHUNK = 1_000

#: The amount of an allow-path limit that no run can exhaust.
UNREACHABLE = 1_000_000_000

#: The amount of a log-based allow-path limit: a realistic log, which a run stays below.
LOG_AMOUNT = 300_000

#: The amount of a deny-path limit, exhausted before timing.
DENY_AMOUNT = 10

#: Algorithms whose state holds one entry per admitted unit.
LOG_ALGORITHMS = frozenset({"sliding_log"})


def timed(run: Callable[[], object]) -> float:
    """Seconds ``run()`` takes, the garbage collector off as ``timeit`` does."""
    gc.disable()
    try:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    finally:
        gc.enable()


class BenchmarkError(RuntimeError):
    """A contender is not on the path its scenario is meant to time."""


@dataclass(frozen=True)
class Plan:
    """One row's parameters: the limit, the keys and the calls."""

    amount: int
    keys: int  # distinct keys; 1 is the hot key
    calls: int
    allow: bool
    setup_cost: int  # cost of the untimed first hit on every key
    fresh: bool = False  # new keys for every repeat (a hot log must not grow across repeats)
    period: int = PERIOD  # the limit's window, in seconds
    warmup: float = 0.0  # seconds of untimed calls after setup: a log brought to its steady state

    def describe(self) -> str:
        path = "allow" if self.allow else "deny"
        per = "hour" if self.period == PERIOD else f"{self.period}s"
        text = f"limit {self.amount:,}/{per}, {self.calls:,} calls per measurement, {path} path"
        if self.warmup:
            text += (
                f"; a fresh key per repeat, hit for {self.warmup:g}s (a whole window) before "
                "timing, so that its log is at its steady state: entries leave the window as "
                "fast as they come, and every library pays for its expiry"
            )
        return text


@dataclass
class Trial:
    """One contender measured repeatedly under one plan."""

    contender: Contender
    plan: Plan
    label: str
    rates: list[float] = field(default_factory=list)
    _generation: int = 0
    _ready: bool = False
    _sample: list[str] = field(default_factory=list)
    _calls: list[str] = field(default_factory=list)

    @property
    def best(self) -> float:
        return max(self.rates)

    def measure(self) -> None:
        """Add one measurement of decisions per second to ``rates``."""
        contender = self.contender
        for _ in range(ATTEMPTS):
            if self.plan.fresh or not self._ready or not self._sample_holds():
                self._setup()
            calls = self._calls
            self._before_timing()
            elapsed = timed(partial(contender.run, calls))
            self._after_timing()
            contender.settle()
            if self._sample_holds():
                self._record(elapsed, len(calls) * contender.decisions_per_key)
                return
            self._ready = False
        path = "allow" if self.plan.allow else "deny"
        raise BenchmarkError(
            f"{self.label}: {ATTEMPTS} measurements in a row left the {path} path "
            "(a limit the run exhausts, or a store that drops keys)"
        )

    def _before_timing(self) -> None:
        """Called just before the timed calls (a subclass resets server statistics)."""

    def _after_timing(self) -> None:
        """Called just after the timed calls (a subclass reads server statistics)."""

    def _record(self, elapsed: float, decisions: int) -> None:
        """Keep a measurement whose path held: ``decisions`` made in ``elapsed`` seconds."""
        self.rates.append(decisions / elapsed)

    def _setup(self) -> None:
        """Fresh keys, each hit once untimed; then the sample must hold."""
        plan, hit = self.plan, self.contender.hit
        self._generation += 1
        if plan.keys == 1:
            keys = [f"user:hot:{self._generation}"]
            self._sample = keys * SAMPLE
            self._calls = keys * plan.calls
        else:
            keys = [f"user:{self._generation}:{i}" for i in range(plan.keys)]
            self._sample = keys[:: max(1, plan.keys // SAMPLE)][:SAMPLE]
            self._calls = [keys[i % plan.keys] for i in range(plan.calls)]
        allowed = sum(hit(key, plan.setup_cost) for key in keys)
        if allowed != len(keys):
            raise BenchmarkError(
                f"{self.label}: only {allowed} of {len(keys)} setup hits of cost "
                f"{plan.setup_cost} were allowed"
            )
        if plan.warmup:
            run, chunk = self.contender.run, self._calls[:WARMUP_CHUNK]
            deadline = time.perf_counter() + plan.warmup
            while time.perf_counter() < deadline:
                run(chunk)
        self.contender.settle()
        if not self._sample_holds():
            path = "allow" if plan.allow else "deny"
            raise BenchmarkError(f"{self.label}: after setup, the sample is not on the {path} path")
        self._ready = True

    def _sample_holds(self) -> bool:
        hit = self.contender.hit
        allowed = sum(hit(key, 1) for key in self._sample)
        self.contender.settle()  # the next contender's timing must not pay for these hits
        return allowed == (len(self._sample) if self.plan.allow else 0)


def run_row(
    contenders: Sequence[Contender], plan: Plan, repeats: int, label: str
) -> dict[str, float]:
    """Measure ``contenders`` in turn, ``repeats`` times; return each library's best rate."""
    trials = [Trial(c, plan, f"{label} / {c.library}") for c in contenders]
    for _ in range(repeats):
        for trial in trials:
            trial.measure()
    return {trial.contender.library: trial.best for trial in trials}


def build(
    factories: dict[str, Callable[..., Contender]],
    algorithm: str,
    amount: int,
    period: int = PERIOD,
) -> list[Contender]:
    """One contender per library in ``factories``, for a limit of ``amount`` per ``period``
    seconds (a factory is given the period only when it is not the usual hour)."""
    if period == PERIOD:
        return [make(algorithm, amount) for make in factories.values()]
    return [make(algorithm, amount, period) for make in factories.values()]


def positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse ``type``: a ``kind`` above 0 and finite, else argparse's error."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}")
        return value

    return parse
