"""Run the benchmarks and print the results as markdown: ``python -m benchmarks``.

Without options, the in-memory benchmarks; ``--redis`` runs only the Redis benchmarks (on a
redis-server they start on a free port and stop), ``--engine`` only the decision engine's,
``--simulate`` only the simulator's, ``--all`` runs those four. ``--service`` runs only the
decision service under load (``ratekeeper serve`` against a hello world on the same server
stack, driven by wrk and h2load; see ``benchmarks.service_suite``), ``--web`` only the web
integrations' overhead per request. ``--quick`` for a short smoke run, ``--output FILE`` to
also write the markdown.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

from benchmarks import memory, report
from benchmarks.peers import (
    FACTORIES,
    PATHS,
    PEER_LIBRARIES,
    RATE_STRING,
    RATEKEEPER,
    SHARED,
    ratekeeper,
    ratekeeper_algorithms,
)
from benchmarks.report import Output
from benchmarks.scenarios import QUICK, SCENARIOS, Sizes, build, plan, run_row

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
                f"{row_plan.amount:,} slots, a lease of one hour; {row_plan.calls:,} times a "
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
        f"each key under a limit of {memory.AMOUNT}/hour. The caller's key strings are built "
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
            value = memory.bytes_per_key(FACTORIES[library], algorithm, sizes.keys)
            gc.collect()
            cells.append(f"{value:,.0f}")
        rows.append([algorithm, *cells])
    out.emit(*report.table(["algorithm", RATEKEEPER, *PEER_LIBRARIES], rows))
    out.emit(
        "",
        "- concurrency: each key takes a slot and gives it back (an idle key holds no lease).",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", type=Path, help="also write the markdown results here")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--redis",
        action="store_true",
        help="run only the Redis benchmarks (on a redis-server they start and stop)",
    )
    which.add_argument(
        "--engine", action="store_true", help="run only the decision engine's benchmarks"
    )
    which.add_argument(
        "--simulate", action="store_true", help="run only the simulator's benchmarks"
    )
    which.add_argument(
        "--service",
        action="store_true",
        help="run only the decision service under load (wrk, h2load; a redis-server)",
    )
    which.add_argument(
        "--all", action="store_true", help="run the in-memory, Redis, engine and simulator ones"
    )
    which.add_argument("--web", action="store_true", help="run only the web integrations' ones")
    args = parser.parse_args(argv)

    out = Output()
    try:
        if args.service:
            from benchmarks import service_suite

            service_suite.run(
                out, service_suite.SERVICE_QUICK if args.quick else service_suite.ServiceSizes()
            )
        elif args.redis:
            out.emit("# ratekeeper benchmarks: Redis", "", *report.machine())
        elif args.engine:
            out.emit("# ratekeeper benchmarks: decision engine", "", *report.machine())
        elif args.simulate:
            out.emit("# ratekeeper benchmarks: simulator", "", *report.machine())
        elif args.web:
            from benchmarks import web_suite

            out.emit("# ratekeeper benchmarks: web integrations", "", *report.machine())
            web_suite.run(out, web_suite.WEB_QUICK if args.quick else web_suite.WebSizes())
        else:
            in_memory(out, QUICK if args.quick else Sizes())
        if args.redis or args.all:
            from benchmarks import redis_suite

            redis_suite.run(
                out, redis_suite.REDIS_QUICK if args.quick else redis_suite.RedisSizes(), args.redis
            )
        if args.engine or args.all:
            from benchmarks import engine_suite

            engine_suite.run(
                out, engine_suite.ENGINE_QUICK if args.quick else engine_suite.EngineSizes()
            )
        if args.simulate or args.all:
            from benchmarks import simulate_suite

            simulate_suite.run(
                out,
                simulate_suite.SIMULATE_QUICK if args.quick else simulate_suite.SimulateSizes(),
            )
        elapsed = time.perf_counter() - out.started
        out.emit("", f"Total runtime: {elapsed:.0f} s. Load average at end: {report.load()}.")
    finally:
        if args.output is not None:
            args.output.write_text("\n".join(out.lines) + "\n")
    return 0


def in_memory(out: Output, sizes: Sizes) -> None:
    """Every in-memory benchmark: parts 1 to 3."""
    out.emit(*report.header())
    available, missing = ratekeeper_algorithms()
    if missing:
        out.emit("", f"Skipped ratekeeper algorithms (module missing): {', '.join(missing)}")
    ratios, costs = compare(out, sizes, available)
    summarise(out, ratios, costs, sizes)
    alone(out, sizes, available, missing)
    footprint(out, sizes, available)


if __name__ == "__main__":
    sys.exit(main())
