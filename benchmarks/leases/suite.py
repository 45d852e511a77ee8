"""The leased-quota benchmarks, run by ``python -m benchmarks --leases``: the library's runs
(``benchmarks.leases.library``), then the service's (``benchmarks.leases.service``), on one
redis-server started for them and stopped by pid; the tables and the targets as markdown."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from benchmarks import report
from benchmarks.leases import library, service
from benchmarks.leases.library import ALGORITHMS, LEASES_QUICK, Checks, LeaseSizes
from benchmarks.leases.service import ServiceRun
from benchmarks.leases.workers import Workers
from benchmarks.redis_store.server import RedisServer
from benchmarks.report import Output

#: Targets: leased ÷ exact decisions/s; Redis commands per decision when leased; the share of
#: the limit admitted in the worst full window at 2x demand.
RATIO_TARGET = 10.0
COMMANDS_TARGET = 0.05
DEMAND_TARGET = 0.97


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def run(out: Output, sizes: LeaseSizes, alone: bool) -> None:
    """Every leased-quota benchmark, on a redis-server of their own (``alone``: the run's
    header is printed already)."""
    run_id = uuid.uuid4().hex[:6]
    with RedisServer() as server, tempfile.TemporaryDirectory(prefix="rk-leases-") as place:
        if not alone:
            out.emit("", "# Leased quotas")
        out.emit(
            f"- Redis: redis-server {server.version()} on 127.0.0.1:{server.port}, started by "
            "the benchmark, persistence off, on the same machine as the clients",
        )
        with Workers(sizes.workers) as workers:
            checks = [
                library.measure(
                    server, workers, sizes, algorithm, run_id=run_id, progress=out.progress
                )
                for algorithm in ALGORITHMS
            ]
        _library_tables(out, sizes, checks)
        served = service.measure(
            server, sizes.service_amount, sizes.service_seconds, Path(place), out.progress
        )
        _service_table(out, sizes, served)
    _targets(out, sizes, checks, served)


def _library_tables(out: Output, sizes: LeaseSizes, checks: list[Checks]) -> None:
    limit = f"{sizes.amount:,} per {sizes.period:g} s"
    out.emit(
        "",
        "## 1. The library: 4 processes, one hot key",
        "",
        f"{sizes.workers} processes (multiprocessing spawn), each "
        "`Limiter(open_store(url, prefix=..., on_store_error=None))`, hit one key under "
        f"`Limit({sizes.amount}, {sizes.period:g}, algorithm)` ({limit}), exact and then "
        f'`sync="leased"`, as fast as they can for {sizes.seconds:g} s each, on a fresh key '
        "prefix each. *decisions/s* counts every answer, allowed or refused; *admitted/s* the "
        "allowed ones. *commands per decision* is every command the server ran for the workers "
        "(`INFO commandstats` deltas, a script's inner commands included, the benchmark's own "
        "reads taken out) over the decisions; *script calls* counts the script runs alone.",
        "",
    )
    rows = []
    for one in checks:
        rows.append([
            one.algorithm,
            report.rate(one.exact.rate),
            report.rate(one.leased.rate),
            report.rate(one.leased.granted / one.leased.elapsed),
            f"{report.ratio(one.ratio)} {_mark(one.ratio >= RATIO_TARGET)}",
            f"{one.exact.per_decision:.3f}",
            f"{one.leased.per_decision:.4f} {_mark(one.leased.per_decision <= COMMANDS_TARGET)}",
            f"{one.exact.scripts_per_decision:.3f}",
            f"{one.leased.scripts_per_decision:.5f}",
        ])  # fmt: skip
    out.emit(
        *report.table(
            [
                "algorithm",
                "exact decisions/s",
                "leased decisions/s",
                "leased admitted/s",
                f"leased ÷ exact (≥ {RATIO_TARGET:g}x)",
                "commands per decision, exact",
                f"leased (≤ {COMMANDS_TARGET:g})",
                "script calls per decision, exact",
                "leased",
            ],
            rows,
        )
    )
    out.emit(
        "",
        "### Admitted ≤ the limit, from the store's counts and the clients'",
        "",
        "Over both leased runs (hammering and paced). *store*: the key's state read straight "
        "from Redis every 5 ms; for the fixed window the largest count it held in a window "
        f"(≤ {sizes.amount:,}), for the buckets the largest (tokens in the bucket, as stored, "
        "+ units held in slices, `<state key>:s`) ÷ capacity, read in one MULTI (≤ 1). "
        "*clients*: the units the workers were granted, by wall-clock window "
        "(`time.time() // period`); for the fixed window the most in one window, leaving out "
        "the calls that began in one window and ended in the next (*straddling*); for the "
        "buckets the largest share of `burst + rate * span` granted since the run began.",
        "",
    )
    rows = []
    for one in checks:
        store, (clients, bound) = one.store_worst(), one.client_worst()
        fixed = one.algorithm == "fixed_window"
        clients_ok = clients <= bound
        rows.append([
            one.algorithm,
            f"{store:,.0f}" if fixed else f"{store:.4f}",
            _mark(one.store_holds()),
            f"{clients:,.0f}" if fixed else f"{clients:.4f}",
            _mark(clients_ok),
            str(one.leased.straddled + one.paced.straddled),
            str(one.leased.sampler.reads + one.paced.sampler.reads),
            "—" if fixed else f"{max(one.leased.sampler.held, one.paced.sampler.held):,}",
        ])  # fmt: skip
    out.emit(
        *report.table(
            [
                "algorithm",
                "store: most counted / fullest",
                "≤ limit",
                "clients: most granted",
                "≤ limit",
                "straddling grants",
                "store reads",
                "most units held in slices",
            ],
            rows,
        )
    )
    out.emit(
        "",
        f"### Demand at {sizes.demand:g}x the limit",
        "",
        f"The {sizes.workers} processes paced to ask {sizes.demand:g}x the limit together "
        f"({sizes.demand * sizes.amount / sizes.period:,.0f}/s: each its share, in groups of "
        f"20 with a sleep between) for {sizes.paced_seconds:g} s, leased. *worst window*: the "
        "fewest units the clients were granted in a full wall-clock window of the run (for the "
        "buckets the first partial second holds the initial burst and is left out with the "
        f"other partial ones), as a share of the limit (≥ {DEMAND_TARGET:.0%}).",
        "",
    )
    rows = []
    for one in checks:
        worst = one.demand_worst()
        windows = one.paced.windows(straddled=True)
        shares = ", ".join(
            f"{windows[window] / sizes.amount:.1%}"
            for window in one.paced.full_windows(sizes.period)
        )
        rows.append([
            one.algorithm,
            report.rate(one.paced.rate),
            report.rate(one.paced.granted / one.paced.elapsed),
            "—" if worst is None else f"{worst[1]:.1%} {_mark(worst[1] >= DEMAND_TARGET)}",
            shares,
            f"{one.paced.per_decision:.4f}",
            str(sum(tally.exchanges for tally in one.paced.tallies)),
        ])  # fmt: skip
    out.emit(
        *report.table(
            [
                "algorithm",
                "asked/s",
                "admitted/s",
                f"worst window (≥ {DEMAND_TARGET:.0%})",
                "each full window",
                "commands per decision",
                "exchanges",
            ],
            rows,
        )
    )
    notes = [note for one in checks for note in one.notes]
    if notes:
        out.emit("", *(f"- {note}" for note in notes))


def _service_table(out: Output, sizes: LeaseSizes, runs: list[ServiceRun]) -> None:
    out.emit(
        "",
        f"## 2. The service: {service.INSTANCES} `ratekeeper serve` behind nginx",
        "",
        f"{service.INSTANCES} `ratekeeper serve --store redis://... --instances "
        f"{service.INSTANCES}` sharing the Redis, behind nginx running the shipped "
        "`deploy/nginx/ratekeeper.conf` (only its addresses set: one `server` line per "
        "instance). wrk sends `GET /` to nginx for "
        f"{sizes.service_seconds} s on {service.CONNECTIONS} connections; each request is one "
        "`auth_request` to `/v1/nginx` on an instance, whose rule (domain `edge`, "
        f"`remote_address`: {sizes.service_amount:,} per second, `sync: exact` or `sync: "
        "leased`) counts the hot key 127.0.0.1. Requests are bounded by the service's HTTP "
        "speed, not by Redis, so the ratio of requests/s is small; the commands per decision "
        "are where leasing shows. *store*: the most the key's state counted in a window "
        f"(≤ {sizes.service_amount:,}); *nginx*: the most requests it let through (200) in a "
        "whole second, by the time each ended (so a request decided just before a second's "
        "edge may count in the next).",
        "",
    )
    rows = [
        [
            one.sync,
            report.rate(one.rate),
            f"{one.refused:,} of {one.requests:,}",
            f"{one.per_decision:.4f}",
            f"{one.scripts_per_decision:.4f}",
            f"{one.store_worst:,.0f} {_mark(one.store_worst <= sizes.service_amount)}",
            f"{one.passed_worst:,} over {one.passed_seconds} s",
        ]
        for one in runs
    ]
    exact, leased = runs
    rows.append([
        "leased ÷ exact",
        report.ratio(leased.rate / exact.rate),
        "",
        report.ratio(leased.per_decision / exact.per_decision),
        "",
        "",
        "",
    ])  # fmt: skip
    out.emit(
        *report.table(
            [
                "sync",
                "requests/s",
                "refused (429)",
                "commands per decision",
                "script calls per decision",
                "store: most in a window",
                "nginx: most 200s in 1 s",
            ],
            rows,
        )
    )


def _targets(out: Output, sizes: LeaseSizes, checks: list[Checks], runs: list[ServiceRun]) -> None:
    ratios = [one.ratio for one in checks]
    per = [one.leased.per_decision for one in checks] + [one.paced.per_decision for one in checks]
    held = [one.store_holds() and one.client_worst()[0] <= one.client_worst()[1] for one in checks]
    served = [one.store_worst <= sizes.service_amount for one in runs]
    demand = [worst[1] for one in checks if (worst := one.demand_worst()) is not None]
    rows = [
        [
            f"leased ÷ exact decisions/s ≥ {RATIO_TARGET:g}x",
            f"{min(ratios):.1f}x to {max(ratios):.1f}x",
            f"{sum(r >= RATIO_TARGET for r in ratios)} of {len(ratios)}",
        ],
        [
            f"Redis commands per decision, leased, ≤ {COMMANDS_TARGET:g}",
            f"{min(per):.4f} to {max(per):.4f}",
            f"{sum(p <= COMMANDS_TARGET for p in per)} of {len(per)}",
        ],
        [
            "admitted ≤ limit in every window (store and clients)",
            "",
            f"{sum(held)} of {len(held)}; service {sum(served)} of {len(served)}",
        ],
        [
            f"admitted ≥ {DEMAND_TARGET:.0%} of the limit at {sizes.demand:g}x demand",
            f"worst {min(demand):.1%}" if demand else report.MISSING,
            f"{sum(d >= DEMAND_TARGET for d in demand)} of {len(checks)}",
        ],
    ]
    out.emit("", "## Targets", "", *report.table(["target", "measured", "met"], rows))


__all__ = ["LEASES_QUICK", "LeaseSizes", "run"]
