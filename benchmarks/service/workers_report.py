"""The every-core benchmark's results and its tables (``benchmarks.service.workers``).

A ``Result`` is one timed run; a ``Measured`` is a case on one deployment, a result a round;
a ``Rated`` is the run at a fixed share of a case's capacity. ``emit`` prints the summary
(Envoy's door against the HTTP door, per core, with the latency at the fixed rate), the ratios
of two workers to one, and every case's figures.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from benchmarks import report
from benchmarks.report import Output
from benchmarks.service.load import Load
from benchmarks.service.measurement import Rounds
from benchmarks.service.workers_envoy import Deployment

#: The issue's targets: Envoy's door at least this share of the HTTP door's decisions a second
#: per core, and 5,000 a second per core where the HTTP door does about 5,500.
SHARE, TARGET, HTTP_THERE = 0.8, 5_000, 5_500
#: The reference's (envoyproxy/ratelimit's) p99 as its users report it, in ms.
REFERENCE_P99 = 2.0
AIO, PYVOY = "grpc.aio", "pyvoy"
#: How each stack runs: the server, and what its "workers" are.
STACK_LABELS = {AIO: "uvicorn + grpc.aio", PYVOY: "pyvoy"}


@dataclass(frozen=True)
class Result:
    """One timed run: the load, its seconds, the CPU seconds of the server's processes (each)
    and of the others, Redis's commands, and the connections to the server."""

    load: Load
    seconds: float
    server: tuple[float, ...]
    generator: float
    envoy: float
    redis: float
    commands: int
    connections: int

    @property
    def cpu(self) -> float:
        """The server's CPU seconds a request."""
        return sum(self.server) / self.load.requests

    def cores(self, seconds: float) -> float:
        return seconds / self.seconds

    @property
    def busiest(self) -> float:
        """The busiest server process's share of the server's CPU."""
        return max(self.server) / sum(self.server)

    @property
    def commands_each(self) -> float:
        """Redis commands a decision."""
        return self.commands / self.load.requests


@dataclass
class Measured(Rounds[Result]):
    """A case on one deployment: a result a round."""

    @property
    def per_core(self) -> float:
        """Decisions a second per core of the server: the inverse of its least CPU a request."""
        return 1 / self.cpu


@dataclass(frozen=True)
class Rated:
    """A case run at ``target`` requests a second, a share of its ``capacity`` (its best
    round's rate)."""

    capacity: float
    target: float
    result: Result


#: A case's label, each deployment's measurements of it.
Table = Mapping[str, Mapping[Deployment, Measured]]


def deployment_label(deployment: Deployment) -> str:
    stack, workers = deployment
    if stack == PYVOY:
        return f"pyvoy, {workers} instance{'s' if workers > 1 else ''}"
    return f"{STACK_LABELS[stack]}, --workers {workers}"


def _share(value: float | None, base: float | None) -> str:
    """``value`` over ``base``, marked against ``SHARE``."""
    if value is None or base is None:
        return report.MISSING
    return f"{report.ratio(value / base)} {'✓' if value / base >= SHARE else '✗'}"


def _scaled(value: float, base: float | None) -> str:
    """``value`` where ``base`` would be ``HTTP_THERE``, marked against ``TARGET``."""
    if base is None:
        return report.MISSING
    scaled = value * HTTP_THERE / base
    return f"{report.rate(scaled)} {'✓' if scaled >= TARGET else '✗'}"


def _rated(fixed: Rated | None) -> str:
    """The rate a fixed-rate run gave, and its share of the capacity."""
    if fixed is None:
        return report.MISSING
    rate = fixed.result.load.rate
    return f"{report.rate(rate)} ({rate / fixed.capacity:.0%})"


def best(measured: Table, labels: tuple[str, ...], deployment: Deployment) -> float | None:
    """The most decisions a second per core ``deployment`` gave over the cases ``labels``
    (one door at each number of requests in flight); None unless it ran them all."""
    found = [measured.get(label, {}).get(deployment) for label in labels]
    if not labels or any(one is None for one in found):
        return None
    return max(one.per_core for one in found if one is not None)


def summary(
    measured: Table,
    http: str,
    envoy: tuple[str, str],
    rated: Mapping[Deployment, Rated],
    swept: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
) -> Iterator[list[str]]:
    """A row a deployment: the HTTP case ``http`` (uvicorn, as many workers) against the
    Envoy cases ``envoy`` (Envoy's one connection, and many), per core; each door at its best
    over ``swept`` (the HTTP cases' labels, Envoy's); Redis commands a decision, and the run
    at a fixed rate."""
    one, many = (measured[label] for label in envoy)
    for deployment, through in one.items():
        reference = measured[http].get((AIO, deployment[1]))
        base = reference.per_core if reference is not None else None
        spread, fixed = many.get(deployment), rated.get(deployment)
        http_best = best(measured, swept[0], (AIO, deployment[1]))
        envoy_best = best(measured, swept[1], deployment)
        yield [
            deployment_label(deployment), report.rate(base), report.rate(through.per_core),
            _share(through.per_core, base), _scaled(through.per_core, base),
            report.rate(http_best), report.rate(envoy_best),
            _share(envoy_best, http_best),
            _scaled(envoy_best, http_best) if envoy_best is not None else report.MISSING,
            _share(spread.per_core if spread else None, base),
            f"{through.best.commands_each:.2f}",
            f"{reference.best.commands_each:.2f}" if reference else report.MISSING,
            report.rate(fixed.capacity) if fixed else report.MISSING,
            _rated(fixed),
            f"{fixed.result.load.p50 * 1e3:.2f}" if fixed else report.MISSING,
            f"{fixed.result.load.p99 * 1e3:.2f}" if fixed else report.MISSING,
        ]  # fmt: skip


SUMMARY_HEADERS = [
    "deployment", "HTTP decisions/s per core (uvicorn)", "through Envoy, per core",
    f"÷ HTTP (≥ {SHARE:g}x)", f"scaled to HTTP = {HTTP_THERE:,} (≥ {TARGET:,})",
    "HTTP at its best", "through Envoy at its best", f"÷ (≥ {SHARE:g}x)",
    f"scaled (≥ {TARGET:,})", f"÷ HTTP, max_concurrent_streams (≥ {SHARE:g}x)",
    "Redis commands / decision, Envoy",
    "HTTP", "capacity through Envoy (requests/s)", "at 80%: requests/s (share)", "p50 ms", "p99 ms",
]  # fmt: skip
HEADERS = [
    "case", "deployment", "connections to the server", "requests/s", "p50 ms", "p99 ms",
    "server CPU µs / request", "server cores", "decisions/s per core",
    "busiest server process", "load generator cores", "Envoy cores", "redis-server cores",
    "Redis commands / decision", "each round (requests/s)",
]  # fmt: skip
RATIO_HEADERS = [
    "case", "stack", "requests/s, 1 → 2 workers", "2 ÷ 1", "decisions/s per core, 1 → 2",
    "2 ÷ 1", "server cores, 1 → 2", "busiest server process (2 workers)",
]  # fmt: skip


def rows(measured: Table, through_envoy: set[str]) -> Iterator[list[str]]:
    for label, by_deployment in measured.items():
        for deployment, one in by_deployment.items():
            best = one.best
            cores = best.cores
            envoy = f"{cores(best.envoy):.2f}" if label in through_envoy else report.MISSING
            yield [
                label, deployment_label(deployment), str(best.connections),
                report.rate(best.load.rate), f"{best.load.p50 * 1e3:.2f}",
                f"{best.load.p99 * 1e3:.2f}", f"{one.cpu * 1e6:,.0f}",
                f"{cores(sum(best.server)):.2f}", report.rate(one.per_core),
                f"{best.busiest:.0%}", f"{cores(best.generator):.2f}", envoy,
                f"{cores(best.redis):.2f}", f"{best.commands_each:.3f}",
                ", ".join(report.rate(result.load.rate) for result in one.results),
            ]  # fmt: skip


def at_rate(label: str, rated: Mapping[Deployment, Rated]) -> dict[str, dict[Deployment, Measured]]:
    """The fixed-rate runs of the case ``label`` as a case of their own."""
    if not rated:
        return {}
    return {f"{label}, at 80%": {one: Measured([fixed.result]) for one, fixed in rated.items()}}


def ratios(measured: Table) -> Iterator[list[str]]:
    for label, by_deployment in measured.items():
        for stack, stack_label in STACK_LABELS.items():
            one, two = by_deployment.get((stack, 1)), by_deployment.get((stack, 2))
            if one is None or two is None:
                continue
            rate_one, rate_two = one.best.load.rate, two.best.load.rate
            used = [f"{m.best.cores(sum(m.best.server)):.2f}" for m in (one, two)]
            yield [
                label, stack_label, f"{rate_one:,.0f} → {rate_two:,.0f}",
                report.ratio(rate_two / rate_one),
                f"{one.per_core:,.0f} → {two.per_core:,.0f}",
                report.ratio(two.per_core / one.per_core), " → ".join(used),
                f"{two.best.busiest:.0%}",
            ]  # fmt: skip


def emit(
    out: Output,
    measured: Table,
    *,
    http: str,
    envoy: tuple[str, str],
    rated: Mapping[Deployment, Rated],
    through_envoy: set[str],
    swept: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
) -> None:
    through_envoy = through_envoy | set(at_rate(envoy[0], rated))
    out.emit(
        "Envoy's door against the HTTP door, per core of the service's CPU:", "",
        *report.table(SUMMARY_HEADERS, list(summary(measured, http, envoy, rated, swept))), "",
        f"*HTTP*: `{http}` on uvicorn with as many workers. *Through Envoy*: `{envoy[0]}`; "
        "*at its best*: each door's most decisions a second per core over "
        f"{', '.join(f'`{label}`' for label in (*swept[0], *swept[1]))} (its capacity, "
        "wherever it peaks; measured on the deployments of one process). "
        f"*max_concurrent_streams*: `{envoy[1]}`. *Scaled*: the per-core figure through "
        f"Envoy on a machine where the HTTP door does {HTTP_THERE:,} (the issue's target: "
        f"{TARGET:,}). *At 80%*: wrk through Envoy's one connection at 80% of that case's "
        "best rate (each connection pausing a random time between requests), its latency "
        f"percentiles beside the reference's reported p99 of about {REFERENCE_P99:g} ms.", "",
        *report.table(RATIO_HEADERS, list(ratios(measured))), "",
        *report.table(HEADERS, list(rows({**measured, **at_rate(envoy[0], rated)}, through_envoy))),
        "",
        "*Server CPU* is every process of the deployment (the parent, every process it started, "
        "and for pyvoy its Envoy; user and system, from `/proc`) over the timed run, per "
        "request: the least over the rounds; *decisions/s per core* is its inverse, the requests "
        "one core of the server's answers. *Server cores*, the load generator's, Envoy's and "
        "redis-server's are their CPU seconds over the timed run's seconds (best round); the "
        f"machine has {os.cpu_count()}. *Busiest server process*: its share of the server's "
        "CPU. *Connections to the server*: behind Envoy, those Envoy had open to the "
        "deployment's rate-limit cluster at the end of the run.",
    )  # fmt: skip
