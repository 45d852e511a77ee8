"""The in-memory benchmarks, ``python -m benchmarks`` with no area flag (``--all`` too).

1. ratekeeper against its peers: decisions per second for every algorithm it shares with
   ``limits``, ``pyrate-limiter`` and ``throttled-py``, in every scenario, on three public paths;
2. ratekeeper alone: every algorithm on a hot key, allow path, against its own target;
3. bytes per idle key, ratekeeper and its peers (``footprint``);
4. ``Limiter.charge`` beside ``Limiter.hit``, ratekeeper alone (``charges``: no peer has it).
"""

from __future__ import annotations

import gc

from benchmarks import report
from benchmarks.contenders import PEER_LIBRARIES, RATEKEEPER, SHARED, ratekeeper_algorithms
from benchmarks.memory.charges import charges
from benchmarks.memory.footprint import AMOUNT, bytes_per_key
from benchmarks.memory.peers import FACTORIES, PATHS, RATE_STRING, ratekeeper
from benchmarks.memory.scenarios import QUICK, SCENARIOS, Sizes, plan
from benchmarks.report import Output
from benchmarks.trials import build, run_row

#: ratekeeper's own target on a hot key, in decisions per second.
TARGET = 1_000_000
TARGET_ALGORITHMS = ("gcra", "token_bucket", "fixed_window")
#: ratekeeper's target against the fastest peer, for every shared algorithm.
PEER_TARGET = 3.0
#: The most a rate string may cost over the equivalent ``Limit``.
STRING_TARGET = 1.10


Ratios = dict[str, dict[str, float]]


def compare(out: Output, sizes: Sizes, available: list[str]) -> tuple[Ratios, dict[str, Ratios]]:
    """Part 1: ratekeeper against its peers; return the ratios by algorithm and scenario, and
    each other public path's time over the ``Limit`` path's (by path, algorithm, scenario)."""
    ratios: Ratios = {algorithm: {} for algorithm in SHARED}
    costs: dict[str, Ratios] = {path: {algorithm: {} for algorithm in SHARED} for path in PATHS}
    out.emit("", "## 1. ratekeeper against its peers", "")
    out.emit(
        "Decisions per second for every algorithm ratekeeper shares with a peer. The peers' "
        "names for each algorithm:",
        "",
    )
    for algorithm, peers in SHARED.items():
        names = "; ".join(f"{library}: `{name}`" for library, name in peers.items())
        out.emit(f"- {algorithm}: {names}")
    out.emit(
        "",
        "pyrate-limiter routes keys through a bucket factory holding one bucket per key "
        "(`Limiter(factory).try_acquire(key, blocking=False)`), its buckets built without the "
        "background leaker thread. limits' `MemoryStorage` runs its own expiry timer thread "
        "while it is hit; that is part of its cost, and it is joined after each measurement. "
        "throttled-py's `MemoryStore` is given the same 1,000,000-key capacity as ratekeeper's "
        "(its default is 1,024).",
        "",
        "ratekeeper is timed on three public paths in every row, taking turns with the peers: "
        "`Limiter.hit(key, limit)` with a `Limit` (the column `ratekeeper`, which the ratios "
        'use); `Limiter(algorithm=...).hit(key, "<amount>/hour")` with a rate string; and a '
        "function decorated with `Limiter.limit(limit, key=lambda key: key)`, called with the "
        "key (each call also runs the key function and the empty function itself; a refused "
        "call raises `RateLimitExceeded`, caught in the loop). *string / Limit* and "
        "*decorator / Limit* are time per decision over the `Limit` path's (target for the "
        f"string: at most {STRING_TARGET:.2f}x).",
    )
    for scenario in SCENARIOS:
        rows, notes = [], {}
        for algorithm, peers in SHARED.items():
            if algorithm not in available:
                notes[algorithm] = "skipped: ratekeeper's module does not exist yet"
                continue
            row_plan = plan(scenario, algorithm, sizes)
            notes[algorithm] = row_plan.describe()
            libraries = [RATEKEEPER, *PATHS, *(lib for lib in PEER_LIBRARIES if lib in peers)]
            out.progress(f"{scenario.name}: {algorithm} ({', '.join(libraries)})")
            contenders = build(
                {lib: FACTORIES[lib] for lib in libraries},
                algorithm,
                row_plan.amount,
                row_plan.period,
            )
            best = run_row(contenders, row_plan, sizes.repeats, f"{scenario.name} / {algorithm}")
            del contenders
            gc.collect()
            peer_rates = {lib: best[lib] for lib in best if lib in PEER_LIBRARIES}
            fastest = max(peer_rates, key=peer_rates.__getitem__)
            ratios[algorithm][scenario.name] = best[RATEKEEPER] / peer_rates[fastest]
            for path in PATHS:
                costs[path][algorithm][scenario.name] = best[RATEKEEPER] / best[path]
            rows.append(
                [
                    algorithm,
                    report.rate(best[RATEKEEPER]),
                    *(report.rate(best.get(lib)) for lib in (*PATHS, *PEER_LIBRARIES)),
                    f"{report.ratio(ratios[algorithm][scenario.name])} ({fastest})",
                    *(report.ratio(costs[path][algorithm][scenario.name]) for path in PATHS),
                ]
            )
        out.emit("", f"### {scenario.title(sizes.keys)}", "")
        out.emit(
            *report.table(
                [
                    "algorithm",
                    RATEKEEPER,
                    *PATHS,
                    *PEER_LIBRARIES,
                    "ratekeeper / fastest peer",
                    *(f"{path.split()[-1]} / Limit" for path in PATHS),
                ],
                rows,
            )
        )
        out.emit("", *(f"- {algorithm}: {note}" for algorithm, note in notes.items()))
    return ratios, costs


def summarise(out: Output, ratios: Ratios, costs: dict[str, Ratios], sizes: Sizes) -> None:
    """The ratios of part 1 in tables: against the fastest peer, and each path's cost."""
    out.emit("", f"### Ratios: ratekeeper / fastest peer (target ≥ {PEER_TARGET:g}x)", "")
    rows = []
    for algorithm, by_scenario in ratios.items():
        cells = []
        for scenario in SCENARIOS:
            value = by_scenario.get(scenario.name)
            mark = "" if value is None else (" ✓" if value >= PEER_TARGET else " ✗")
            cells.append(report.ratio(value) + mark)
        rows.append([algorithm, *cells])
    out.emit(*report.table(["algorithm", *(s.name for s in SCENARIOS)], rows))
    for path in PATHS:
        target = f" (target ≤ {STRING_TARGET:.2f}x)" if path == RATE_STRING else ""
        out.emit("", f"### Time per decision: {path} / Limit{target}", "")
        rows = []
        for algorithm, by_scenario in costs[path].items():
            cells = []
            for scenario in SCENARIOS:
                value = by_scenario.get(scenario.name)
                mark = (
                    ""
                    if value is None or not target
                    else (" ✓" if value <= STRING_TARGET else " ✗")
                )
                cells.append(report.ratio(value) + mark)
            rows.append([algorithm, *cells])
        out.emit(*report.table(["algorithm", *(s.name for s in SCENARIOS)], rows))
    out.emit("", f"Many keys: {sizes.keys:,} distinct keys, round-robin.")


def alone(out: Output, sizes: Sizes, available: list[str], missing: dict[str, str]) -> None:
    """Part 2: every ratekeeper algorithm on a hot key, allow path."""
    hot = SCENARIOS[0]
    out.emit("", "## 2. ratekeeper alone: every algorithm, hot key, allow path", "")
    rows, notes = [], []
    for algorithm in [*available, *missing]:
        if algorithm in missing:
            rows.append([algorithm, "skipped", report.MISSING, report.MISSING])
            notes.append(
                f"- {algorithm}: skipped, the module cannot be built ({missing[algorithm]})"
            )
            continue
        row_plan = plan(hot, algorithm, sizes)
        out.progress(f"ratekeeper alone: {algorithm}")
        only = ratekeeper(algorithm, row_plan.amount, row_plan.period)
        best = run_row([only], row_plan, sizes.repeats, algorithm)
        gc.collect()
        value = best[RATEKEEPER]
        target = met = report.MISSING
        if algorithm in TARGET_ALGORITHMS:
            target = f"{TARGET:,}"
            met = "yes" if value >= TARGET else f"no ({value / TARGET:.0%} of it)"
        rows.append([algorithm, report.rate(value), target, met])
        note = row_plan.describe()
        if algorithm == "concurrency":
            note = (
                f"{row_plan.amount:,} slots, a slot TTL of one hour; {row_plan.calls:,} times a "
                f"slot is taken and given back ({2 * row_plan.calls:,} hits, each a decision) "
                "per measurement"
            )
        notes.append(f"- {algorithm}: {note}")
    out.emit(*report.table(["algorithm", "decisions/s", "target", "met"], rows))
    out.emit("", *notes)


def footprint(out: Output, sizes: Sizes, available: list[str]) -> None:
    """Part 3: bytes per idle key, ratekeeper and its peers."""
    out.emit("", f"## 3. Bytes per idle key ({sizes.keys:,} keys, one hit each)", "")
    out.emit(
        "Measured with `tracemalloc`: (allocated bytes after - before) / keys, after one hit on "
        f"each key under a limit of {AMOUNT}/hour. The caller's key strings are built "
        "beforehand and not counted; the keys a library derives and stores are. Each store "
        "must still deny a second hit on the first and last key.",
        "",
    )
    rows = []
    for algorithm in available:
        cells = []
        for library in (RATEKEEPER, *PEER_LIBRARIES):
            if library != RATEKEEPER and library not in SHARED.get(algorithm, {}):
                cells.append(report.MISSING)
                continue
            out.progress(f"bytes per key: {algorithm} / {library}")
            value = bytes_per_key(FACTORIES[library], algorithm, sizes.keys)
            gc.collect()
            cells.append(f"{value:,.0f}")
        rows.append([algorithm, *cells])
    out.emit(*report.table(["algorithm", RATEKEEPER, *PEER_LIBRARIES], rows))
    out.emit(
        "",
        "- concurrency: each key takes a slot and gives it back (an idle key holds no slot).",
    )


def in_memory(out: Output, sizes: Sizes) -> None:
    """Every in-memory benchmark: parts 1 to 4."""
    out.emit(*report.header())
    available, missing = ratekeeper_algorithms()
    if missing:
        out.emit("", f"Skipped ratekeeper algorithms (module missing): {', '.join(missing)}")
    ratios, costs = compare(out, sizes, available)
    summarise(out, ratios, costs, sizes)
    alone(out, sizes, available, missing)
    footprint(out, sizes, available)
    charges(out, sizes)


__all__ = ["QUICK", "Sizes", "in_memory"]
