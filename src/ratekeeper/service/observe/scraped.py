"""What the service's metrics read when scraped, rather than count as decisions are made.

``families(metrics)`` builds them from the engine a ``Metrics`` tracks and the in-flight
bound it reports (any ``Source``): the request store's health (``store.ping()``, as the
metrics last found it), the rule reloads and their errors, the configuration store's errors,
the plan cache and the requests shed. Each is this process's own figure. With many worker
processes, the counters are summed over the workers, and each gauge combines as ``COMBINE``
says, in a sentence its help text ends with (see ``ratekeeper.service.observe.multiprocess``).
``Collector`` is what one process's registry reads: its decision counts, then the families.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine, Engine
    from ratekeeper.service.inflight import InFlightBound
    from ratekeeper.stores.health import Health

#: The ways a gauge combines over the workers, prometheus_client's multiprocess modes (``live``:
#: the gauges of a process that has ended are left out).
Mode = Literal["livemin", "livemax", "livesum"]

#: How each gauge combines over the live worker processes.
COMBINE: dict[str, Mode] = {
    "ratekeeper_store_up": "livemin",
    "ratekeeper_store_breaker_state": "livemax",
    "ratekeeper_store_shards_open": "livemax",
    "ratekeeper_store_instances": "livemax",
    "ratekeeper_decisions_in_flight": "livesum",
    "ratekeeper_decisions_in_flight_max": "livesum",
    "ratekeeper_event_loop_lag_seconds": "livemax",
    "ratekeeper_decisions_admitted_share": "livemin",
    "ratekeeper_plan_cache_entries": "livesum",
}

#: The sentence a gauge's help text ends with, by its mode.
COMBINED: dict[Mode, str] = {
    "livemin": "With many workers: the least over the live workers.",
    "livemax": "With many workers: the most over the live workers.",
    "livesum": "With many workers: the sum over the live workers.",
}

#: The states of ``ratekeeper_store_breaker_state``.
BREAKER_STATES = ("closed", "open", "half-open")

#: The counter of decisions (``ratekeeper_decisions_total``): its name, help and labels.
DECISIONS = "ratekeeper_decisions"
DECISIONS_HELP = "Decisions, one per descriptor, by domain, rule and result."
DECISION_LABELS = ("domain", "rule", "result")


class Source(Protocol):
    """What the families are read from: a ``Metrics``."""

    in_flight_bound: InFlightBound | None
    engine: Engine | AsyncEngine | None

    def health(self) -> Health | None:
        """The tracked engine's store's health; None if unknown."""

    def cache_hits(self, misses: int) -> int:
        """The plan cache's hits, given its ``misses``; never less than last reported."""


class Counted(Source, Protocol):
    """A ``Source`` that also counts the decisions of its process: a ``Metrics``."""

    def decisions(self) -> dict[tuple[str, str, str], int]:
        """A copy of this process's decision counts, by ``(domain, rule, result)``."""


def families(metrics: Source) -> Iterator[Metric]:
    """The families ``metrics`` reads when scraped: the in-flight bound's, if it has one, then the
    tracked engine's, if it tracks one."""
    if metrics.in_flight_bound is not None:
        yield from _in_flight(metrics.in_flight_bound)
    engine = metrics.engine
    if engine is None:
        return
    yield from _store(metrics.health())
    watcher, planner = engine.watcher, engine.planner
    yield _counter("ratekeeper_rule_reloads", "Rule reloads applied.", watcher.reloads)
    yield _counter(
        "ratekeeper_rule_reload_errors",
        "Rule reloads refused: a rule file did not validate, the previous rules stayed.",
        watcher.errors,
    )
    yield _counter(
        "ratekeeper_config_store_errors",
        "Configuration store failures and invalid overrides.",
        planner.config_errors,
    )
    misses = planner.cache_misses
    yield _counter("ratekeeper_plan_cache_misses", "Plans loaded on a cache miss.", misses)
    yield _counter(
        "ratekeeper_plan_cache_hits",
        "Decisions made by a cached plan (decisions by a plan less the misses).",
        metrics.cache_hits(misses),
    )
    yield _gauge("ratekeeper_plan_cache_entries", "Plans cached now.", len(planner.cache))


def _store(health: Health | None) -> Iterator[Metric]:
    if health is None:
        return
    yield _gauge(
        "ratekeeper_store_up", "1 when the request store answered a ping.", 1 if health.ok else 0
    )
    breaker = _gauge(
        "ratekeeper_store_breaker_state",
        "The request store's circuit breaker: 1 for its current state.",
        labels=["state"],
    )
    for state in BREAKER_STATES:
        breaker.add_metric([state], 1 if health.breaker == state else 0)
    yield breaker
    yield _gauge(
        "ratekeeper_store_shards_open",
        "Shards of the request store (a Redis Cluster's masters) whose breaker is not closed.",
        len(health.open_shards),
    )
    yield _gauge(
        "ratekeeper_store_instances",
        "Processes sharing the request store, as the local failure policy divides each limit "
        "by them: configured, or counted through the store (the last count while it fails).",
        health.instances,
    )
    yield _counter("ratekeeper_store_errors", "Request store failures.", health.failures)
    yield _counter(
        "ratekeeper_store_breaker_openings",
        "Times a circuit breaker opened, a re-opening after a failed probe included.",
        health.opened,
    )
    yield _counter(
        "ratekeeper_store_degraded_decisions",
        "Decisions the failure policy made instead of the request store.",
        health.degraded,
    )


def _in_flight(bound: InFlightBound) -> Iterator[Metric]:
    shed = CounterMetricFamily(
        "ratekeeper_requests_shed",
        "Requests turned away at once, the most decisions in flight being under way or "
        "requests waiting longer than --max-wait (503 overloaded, gRPC UNAVAILABLE); no "
        "store error.",
        labels=["surface"],
    )
    for surface, count in bound.shed.items():
        shed.add_metric([surface], count)
    yield shed
    yield _gauge("ratekeeper_decisions_in_flight", "Decisions under way now.", bound.in_flight)
    yield _gauge(
        "ratekeeper_decisions_in_flight_max",
        "The most decisions under way at once (--max-in-flight).",
        bound.limit,
    )
    yield _gauge(
        "ratekeeper_event_loop_lag_seconds",
        "How far behind the event loop ran at its last reading: about how long a request "
        "waits for it (--max-wait bounds it).",
        bound.waiting.lag,
    )
    yield _gauge(
        "ratekeeper_decisions_admitted_share",
        "The share of decision requests let in, from 0.01 to 1; the rest are shed while "
        "requests wait longer than --max-wait.",
        bound.waiting.admitting,
    )


def _counter(name: str, documentation: str, value: int) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _gauge(
    name: str,
    documentation: str,
    value: float | None = None,
    labels: Sequence[str] | None = None,
) -> GaugeMetricFamily:
    """A gauge whose help text ends with how it combines over many workers."""
    combined = f"{documentation} {COMBINED[COMBINE[name]]}"
    return GaugeMetricFamily(name, combined, value=value, labels=labels)


class Collector:
    """What the ``Metrics`` of one process read when scraped: their decision counts, and the
    families above."""

    def __init__(self, metrics: Counted) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        decisions = CounterMetricFamily(DECISIONS, DECISIONS_HELP, labels=DECISION_LABELS)
        for labels, count in sorted(metrics.decisions().items()):
            decisions.add_metric(labels, count)
        yield decisions
        yield from families(metrics)
