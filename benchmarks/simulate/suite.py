"""The simulator's speed: events per second through ``ratekeeper.simulate.simulate``.

Each row replays one generated trace through one limit and measures it against the exact
reference, as ``simulate`` always does: the decisions by the algorithm's own ``step``, the
judgment of every decision, the per-key peaks and the time series. Two traces: one hot key
(Poisson arrivals at 1.5 times the limit, so that both paths are taken) and 1,000 keys of Zipf
popularity. The target: 1,000,000 events per second for the O(1) algorithms, in one process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

from benchmarks import report
from benchmarks.report import Output
from benchmarks.trials import timed
from ratekeeper import Algorithm, Limit
from ratekeeper.simulate import Trace, simulate
from ratekeeper.simulate import generators as traces

#: Events per second per algorithm, for the O(1) ones.
TARGET = 1_000_000
CONSTANT = (
    Algorithm.FIXED_WINDOW,
    Algorithm.SLIDING_COUNTER,
    Algorithm.TOKEN_BUCKET,
    Algorithm.GCRA,
    Algorithm.LEAKY_BUCKET,
    Algorithm.LEAKY_SHAPER,
)


@dataclass(frozen=True)
class SimulateSizes:
    events: int = 1_000_000
    repeats: int = 3
    keys: int = 1_000


SIMULATE_QUICK = SimulateSizes(events=100_000, repeats=1)

#: The limit: 100 per second per key.
AMOUNT, PERIOD = 100, 1.0


def workloads(sizes: SimulateSizes) -> dict[str, Trace]:
    rate = 1.5 * AMOUNT / PERIOD
    hot = traces.poisson(rate, sizes.events / rate, seed=1)
    many = traces.zipf(sizes.keys, rate * 10, sizes.events / (rate * 10), seed=1)
    return {"one hot key": hot, f"{sizes.keys:,} Zipf keys": many}


def run(out: Output, sizes: SimulateSizes) -> None:
    out.emit(
        "",
        "## Simulator: events per second",
        "",
        f"`simulate(trace, [limit])` on about {sizes.events:,} events, best of {sizes.repeats} "
        "(wall clock, `time.perf_counter`, the garbage collector off; the CPU seconds of the "
        "same run beside it, which the other processes on the machine do not inflate). Each "
        "event is decided by the algorithm's `step` and judged against the exact sliding "
        f"log. Limit {AMOUNT} per {PERIOD:g} s per key; one hot key at 1.5 times the limit, "
        f"and {sizes.keys:,} keys of Zipf popularity (exponent 1.1) at 15 times it in all. "
        f"The target: {TARGET:,} events/s for the O(1) algorithms.",
        "",
    )
    loads = workloads(sizes)
    rows = []
    for algorithm in Algorithm:
        limit = Limit(AMOUNT, PERIOD, algorithm)
        cells = []
        for name, trace in loads.items():
            out.progress(f"simulate: {algorithm.value}, {name}")
            best = cpu_best = 0.0
            for _ in range(sizes.repeats):
                cpu = time.process_time()
                seconds = timed(partial(simulate, trace, [limit]))
                cpu = time.process_time() - cpu
                best = max(best, len(trace) / seconds)
                cpu_best = max(cpu_best, len(trace) / cpu)
            cells.append((best, cpu_best))
        hot = cells[0][0]
        met = report.MISSING
        if algorithm in CONSTANT:
            met = "yes" if hot >= TARGET else f"no ({hot / TARGET:.0%} of it)"
        rows.append(
            [
                algorithm.value,
                *(f"{report.rate(wall)} ({report.rate(cpu)} CPU)" for wall, cpu in cells),
                f"{TARGET:,}" if algorithm in CONSTANT else report.MISSING,
                met,
            ]
        )
    out.emit(
        *report.table(
            ["algorithm", *(f"{name}, events/s" for name in loads), "target", "met (hot key)"],
            rows,
        )
    )
