"""The standard scenarios of docs/accuracy.md, and the tables made from them.

Every scenario is a seeded trace and the same limit, 100 per minute per key, enforced by each
algorithm in turn; the tables are markdown, written between markers in the page by
``scripts/accuracy.py`` (``regenerate``), and a test checks that the page holds what the
simulator gives now. The small scenarios run in about a second; the Cloudflare-like experiment
(``cloudflare``) takes minutes and is refreshed only on demand.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.limits import Limit
from ratekeeper.simulate import generators
from ratekeeper.simulate.report import share, table
from ratekeeper.simulate.simulation import Simulation, simulate
from ratekeeper.simulate.trace import IMMEDIATELY, Event, Trace

AMOUNT, PERIOD = 100, 60.0

#: The catalogue's five algorithms (its "leaking bucket" is a FIFO at a constant outflow:
#: ratekeeper's shaper; its policing twin, the leaky bucket, rejects instead of queueing), what
#: the catalogue says of their space and bursts, and ratekeeper's three others.
CATALOGUE: list[tuple[str, Algorithm, str, str]] = [
    ("Token bucket", Algorithm.TOKEN_BUCKET, "Yes", "Yes, within the bucket"),
    ("Leaking bucket (FIFO)", Algorithm.LEAKY_SHAPER, "Yes", "No"),
    ("Leaking bucket (policing)", Algorithm.LEAKY_BUCKET, "—", "—"),
    ("Fixed window counter", Algorithm.FIXED_WINDOW, "Yes", "Yes, at the window edge"),
    ("Sliding window log", Algorithm.SLIDING_LOG, "No", "No"),
    ("Sliding window counter", Algorithm.SLIDING_COUNTER, "Yes (a little more)", "Smooths it"),
    ("Bucketed sliding window", Algorithm.BUCKETED_WINDOW, "—", "—"),
    ("GCRA", Algorithm.GCRA, "—", "—"),
]

LIMITS = [Limit(AMOUNT, PERIOD, algorithm) for _, algorithm, _, _ in CATALOGUE]


@dataclass(frozen=True)
class Scenario:
    """A standard scenario: its marker ``name``, its ``title`` in the tables, its ``trace``,
    and the call that makes it as the page shows it (``call``)."""

    name: str
    title: str
    trace: Callable[[], Trace]
    call: str


SCENARIOS = [
    Scenario(
        "edge",
        "window edge",
        lambda: generators.window_edge(AMOUNT, PERIOD),
        "window_edge(100, 60)",
    ),
    Scenario(
        "steady",
        "steady 1.5x",
        lambda: generators.poisson(2.5, 1_200, seed=1),
        "poisson(2.5, 1200)",
    ),
    Scenario(
        "bursts",
        "bursts",
        lambda: generators.bursts(10, 20, 100, 3_600, seed=2),
        "bursts(10, on=20, off=100, seconds=3600)",
    ),
    Scenario(
        "diurnal", "diurnal", lambda: generators.diurnal(4, 7_200, seed=3), "diurnal(4, 7200)"
    ),
    Scenario(
        "zipf",
        "1,000 Zipf keys",
        lambda: generators.zipf(1_000, 50, 600, seed=4),
        "zipf(1000, 50, 600)",
    ),
    Scenario(
        "storm",
        "retry storm",
        lambda: generators.retry_storm(3, 600, after=IMMEDIATELY, gap=0.5, seed=5),
        "retry_storm(3, 600, after='immediately', gap=0.5)",
    ),
]


def run_all() -> dict[str, Simulation]:
    """Every standard scenario through every limit."""
    return {scenario.name: simulate(scenario.trace(), LIMITS) for scenario in SCENARIOS}


def comparison(results: dict[str, Simulation]) -> str:
    """The catalogue's table, extended with measured columns."""
    edge, bursts = results["edge"], results["bursts"]
    rows = []
    for index, (name, algorithm, space, burst) in enumerate(CATALOGUE):
        cells = [name, f"`{algorithm.value}`", space, burst]
        for result in (edge, bursts):
            peak = result.measures[index].peak
            cells.append(f"{peak} ({peak / AMOUNT:.2f}x)")
        errors = [results[s.name].measures[index].error_share for s in SCENARIOS[1:]]
        cells.append(f"{share(min(errors))} to {share(max(errors))}")
        rows.append(cells)
    headers = [
        "algorithm",
        "ratekeeper",
        "space efficient (catalogue)",
        "allows burst? (catalogue)",
        "most in one window: edge attack",
        "most in one window: bursts",
        "error, other scenarios",
    ]
    return table(headers, rows)


def errors(results: dict[str, Simulation]) -> str:
    """False allows / false refusals, as shares of the requests, per scenario."""
    rows = []
    for index, (_, algorithm, _, _) in enumerate(CATALOGUE):
        cells = [f"`{algorithm.value}`"]
        for scenario in SCENARIOS:
            measures = results[scenario.name].measures[index]
            cells.append(
                f"{share(measures.false_allow_share)} / {share(measures.false_refusal_share)}"
            )
        rows.append(cells)
    return table(["algorithm", *(scenario.title for scenario in SCENARIOS)], rows)


def scenarios_table(results: dict[str, Simulation]) -> str:
    """What each scenario is: its events, keys and duration."""
    rows = [
        [
            scenario.title,
            f"`{scenario.call}`",
            f"{results[scenario.name].events:,}",
            f"{results[scenario.name].keys:,}",
            f"{results[scenario.name].duration:,.0f} s",
        ]
        for scenario in SCENARIOS
    ]
    return table(["scenario", "trace", "events", "keys", "duration"], rows)


def others(results: dict[str, Simulation]) -> str:
    """Delays (the shaper), fairness (Zipf keys), and the retry storm's requests."""
    rows = []
    for index, (_, algorithm, _, _) in enumerate(CATALOGUE):
        delays = results["bursts"].measures[index].delays
        zipf = results["zipf"].measures[index]
        storm = results["storm"].measures[index]
        rows.append(
            [
                f"`{algorithm.value}`",
                f"{delays.p50:.2f} / {delays.p99:.2f} / {delays.max:.2f}",
                f"{zipf.fairness:.3f}",
                f"{zipf.peaks['p50']:g} / {zipf.peaks['p99']:g} / {zipf.peaks['max']:g}",
                f"{storm.requests:,} ({storm.retries:,})",
                f"{storm.admitted:,}",
            ]
        )
    headers = [
        "algorithm",
        "bursts: delay p50 / p99 / max (s)",
        "Zipf: fairness",
        "Zipf: key peak p50 / p99 / max",
        "storm: requests (retries)",
        "storm: admitted",
    ]
    return table(headers, rows)


def shaper(results: dict[str, Simulation]) -> str:
    """The shaper per scenario: its refusals of hits its queue could not hold (its bound, not
    errors), as shares of the requests, and how long its admitted hits waited."""
    index = next(i for i, row in enumerate(CATALOGUE) if row[1] is Algorithm.LEAKY_SHAPER)
    full = ["refused: its queue full"]
    waits = ["admitted hits' wait, p50 / max (s)"]
    for scenario in SCENARIOS:
        measures = results[scenario.name].measures[index]
        full.append(share(measures.full_queue / measures.requests))
        waits.append(f"{measures.delays.p50:.2f} / {measures.delays.max:.2f}")
    return table(["`leaky_shaper`", *(scenario.title for scenario in SCENARIOS)], [full, waits])


#: The fast tables, by marker name.
FAST: dict[str, Callable[[dict[str, Simulation]], str]] = {
    "scenarios": scenarios_table,
    "comparison": comparison,
    "errors": errors,
    "shaper": shaper,
    "others": others,
}


#: The Cloudflare-like experiment: many sources, a sliding counter at a realistic limit.
SOURCES = 100_000
REQUESTS = 10_000_000
HOURS = 1.0


def cloudflare_events(requests: int = REQUESTS, sources: int = SOURCES) -> Iterator[Event]:
    """``requests`` over ``HOURS`` hours from ``sources`` of Zipf popularity, made a million at
    a time so that they need not all be in memory."""
    seconds = HOURS * 3_600
    rate = requests / seconds
    parts = max(requests // 1_000_000, 1)
    span = seconds / parts
    return chain.from_iterable(
        generators.zipf(sources, rate, span, seed=100 + part, start=generators.START + part * span)
        for part in range(parts)
    )


def cloudflare(requests: int = REQUESTS, sources: int = SOURCES) -> str:
    """The table of the Cloudflare-like experiment."""
    limits = [Limit(AMOUNT, PERIOD, "sliding_counter"), Limit(AMOUNT, PERIOD, "sliding_log")]
    result = simulate(cloudflare_events(requests, sources), limits)
    exact = result.measures[-1].refused
    rows = [
        [
            f"`{measures.algorithm}` {AMOUNT}/minute",
            f"{measures.requests:,}",
            f"{measures.refused:,}",
            share(abs(measures.refused - exact) / measures.requests),
            f"{measures.false_allows:,}",
            f"{measures.false_refusals:,}",
            share(measures.error_share),
        ]
        for measures in result.measures
    ]
    rows.append(
        ["Cloudflare (2017), its sliding counter", "400,000,000", "—", "—", "—", "—", "0.003%"]
    )
    headers = [
        "limit",
        "requests",
        "refused",
        "refused, off the log's count",
        "false allows",
        "false refusals",
        "wrongly allowed or refused",
    ]
    return (
        f"{result.events:,} requests from {result.keys:,} sources (Zipf popularity, exponent "
        f"1.1) over {HOURS:g} hour, every source limited to {AMOUNT} per minute.\n\n"
        + table(headers, rows)
    )


def regenerate(page: str, tables: dict[str, str]) -> str:
    """``page`` with the text between ``<!-- name:start -->`` and ``<!-- name:end -->``
    replaced by ``tables[name]``, for each name given. Raises ``ValueError`` for a marker
    missing from the page."""
    for name, text in tables.items():
        pattern = re.compile(
            rf"(<!-- {re.escape(name)}:start -->\n)(?:.*?\n)?(<!-- {re.escape(name)}:end -->)",
            re.S,
        )
        found = pattern.search(page)
        if found is None:
            raise ValueError(f"no {name}:start / {name}:end markers in the page")
        page = page[: found.start()] + found[1] + text + "\n" + found[2] + page[found.end() :]
    return page


def fast_tables() -> dict[str, str]:
    """The tables of the small scenarios, by marker name."""
    results = run_all()
    return {name: render(results) for name, render in FAST.items()}
