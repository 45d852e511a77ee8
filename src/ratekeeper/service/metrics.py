"""The decision service's Prometheus metrics, in a registry of their own.

``Metrics`` is an engine observer: it counts every decision the engine makes, by domain, rule
and result. It also holds the decision-latency histogram the surfaces feed, and reads the rest
when scraped, so that a decision pays for none of it: the request store's errors, breaker
openings and degraded decisions (``store.ping()``), rule reloads and their errors, the
configuration store's errors and the plan cache. Wiring::

    metrics = Metrics()
    engine = AsyncEngine(rules="ratelimit.yaml", observer=metrics)
    metrics.track(engine)
    routes.append(Mount("/metrics", app=metrics.app))  # any ASGI router
    with metrics.timed("http"):
        verdict = await engine.check(domain, descriptors)

Every ``Metrics`` has its own ``CollectorRegistry``, never the global one, so two services in
one process do not clash. Label values are bounded: a domain the rules do not name is counted
as ``"unknown"``, no label holds a key or a descriptor value, and past ``max_label_sets``
label sets new ones are counted under ``"other"``.

Needs the ``server`` extra (``prometheus-client``); ``import ratekeeper`` never imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ratekeeper.core.errors import MissingExtraError, RatekeeperError
from ratekeeper.engine import AsyncEngine, Engine
from ratekeeper.stores.health import Health

if TYPE_CHECKING:
    from ratekeeper.service.admission import Admission

try:
    from prometheus_client import CollectorRegistry, Histogram, generate_latest, make_asgi_app
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.exposition import choose_encoder
except ImportError as error:  # pragma: no cover - exercised in a subprocess without the extra
    raise MissingExtraError("prometheus-client", "server") from error

if TYPE_CHECKING:
    from ratekeeper.engine import Status

#: The content type of ``Metrics.text()``: Prometheus's text format, as prometheus_client
#: names it.
CONTENT_TYPE = choose_encoder("")[1]

#: The surfaces whose decision latency is measured.
SURFACES = ("http", "grpc", "nginx", "library")

#: Seconds; a decision takes microseconds in memory and a round trip to Redis, up to a timeout.
LATENCY_BUCKETS = (
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)

#: The ``result`` label of a decision.
ALLOWED, LIMITED, SHADOWED, DEGRADED = "allowed", "limited", "shadowed", "degraded"
#: The ``domain`` label of a domain the rules do not name.
UNKNOWN = "unknown"
#: The ``domain`` and ``rule`` labels of decisions past ``max_label_sets``.
OTHER = "other"

_UNTRACKED = object()  # the default limit while no engine is tracked: any limit may be it

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Metrics:
    """Prometheus metrics of one decision service: an engine ``Observer`` and its registry.

    Called as ``metrics(domain, statuses)`` after every decision, it counts each status in
    ``ratekeeper_decisions_total{domain, rule, result}``. ``result`` is ``degraded`` when the
    store failed and the failure policy decided, else ``shadowed`` when a shadow-mode rule let
    a refused hit through, else ``allowed`` or ``limited``. ``rule`` is the matching rule's
    name, else its path; with no rule, ``override`` (a limit from the configuration store),
    ``default`` (the engine's default limit), ``given`` (a limit the caller gave: ``hit``, or a
    limit sent with a descriptor) or ``none`` (no limit applied). ``max_label_sets`` bounds
    the label sets of that counter; past it, new ones count as domain and rule ``other``.

    ``track(engine)`` adds what is read when scraped, and tells which domains the rules name
    (until then, only the domain of a rule that matched is known: the others count as
    ``unknown``). Thread-safe; the observer never raises.
    """

    def __init__(self, *, max_label_sets: int = 1000) -> None:
        if max_label_sets < 1:
            raise ValueError(f"max_label_sets must be at least 1, not {max_label_sets!r}")
        self.max_label_sets = max_label_sets
        self.registry = CollectorRegistry()
        self.engine: Engine | AsyncEngine | None = None
        self._counts: dict[tuple[str, str, str], int] = {}
        self._domains: set[str] = set()  # domains a rule of has matched
        self._default: object = _UNTRACKED
        self._lock = threading.Lock()
        self._health: Health | None = None  # an async store's, as the last refresh() found it
        self._hits = 0  # the plan cache's hits, as last reported: a counter never goes down
        #: The service's bound on decisions in flight, whose shed requests are reported.
        self.admission: Admission | None = None
        latency = Histogram(
            "ratekeeper_decision_seconds",
            "Time to decide one request, by the surface that received it.",
            ["surface"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._latency = {surface: latency.labels(surface) for surface in SURFACES}
        self.registry.register(_Collector(self))
        self.app = MetricsApp(self)

    def __call__(self, domain: str, statuses: tuple[Status, ...]) -> None:
        counts = self._counts
        default = self._default
        with self._lock:
            for status in statuses:
                allowed, decision, limit, rule, overridden, shadowed = status
                if decision is not None and decision.degraded:
                    result = DEGRADED
                elif shadowed:
                    result = SHADOWED
                elif allowed:
                    result = ALLOWED
                else:
                    result = LIMITED
                if rule is not None:
                    name = rule.name or rule.path
                elif overridden:
                    name = "override"
                elif limit is None:
                    name = "none"
                elif limit is default or default is _UNTRACKED:
                    name = "default"
                else:
                    name = "given"
                key = (domain, name, result)
                count = counts.get(key)
                if count is None:
                    self._count_new(key, rule is not None)
                else:
                    counts[key] = count + 1

    def _count_new(self, key: tuple[str, str, str], matched: bool) -> None:
        """Count a label set not counted yet: under ``unknown`` when its domain is not one of
        the rules', under ``other`` when there are already ``max_label_sets`` (lock held)."""
        domain, name, result = key
        if matched:
            self._domains.add(domain)
        elif not self._known(domain):
            key = (UNKNOWN, name, result)
        counts = self._counts
        if key not in counts and len(counts) >= self.max_label_sets:
            key = (OTHER, OTHER, result)
        counts[key] = counts.get(key, 0) + 1

    def _known(self, domain: str) -> bool:
        if domain in self._domains:
            return True
        engine = self.engine
        return engine is not None and (
            domain in engine.rules.domains or domain == engine.planner.domain
        )

    def track(self, engine: Engine | AsyncEngine) -> None:
        """Report ``engine``'s request store, rule reloads, configuration store and plan
        cache when scraped, and count its decisions: its observer becomes this ``Metrics``.

        Raises ``ValueError`` when the engine has another observer, or this ``Metrics``
        already tracks another engine.
        """
        if engine.observer is not None and engine.observer is not self:
            raise ValueError("this engine already has an observer")
        if self.engine is not None and self.engine is not engine:
            raise ValueError("these metrics already track another engine")
        with self._lock:
            self.engine = engine
            self._default = engine.planner.default
        engine.observer = self

    def observe_latency(self, surface: str, seconds: float) -> None:
        """Record that ``surface`` (one of ``SURFACES``) took ``seconds`` to decide."""
        self._histogram(surface).observe(seconds)

    def timed(self, surface: str) -> AbstractContextManager[Any]:
        """A context manager recording the time its block takes as ``surface``'s latency."""
        return self._histogram(surface).time()

    def _histogram(self, surface: str) -> Histogram:
        try:
            return self._latency[surface]
        except KeyError:
            raise ValueError(
                f"surface must be one of {', '.join(SURFACES)}, not {surface!r}"
            ) from None

    async def refresh(self) -> None:
        """Ping an ``AsyncEngine``'s store, for the next scrape to report (``MetricsApp``
        does this first; a sync engine's store is pinged when scraped)."""
        engine = self.engine
        if not isinstance(engine, AsyncEngine):
            return
        try:
            self._health = await engine.store.ping()
        except RatekeeperError as error:
            self._health = Health(False, error=str(error))

    def text(self) -> bytes:
        """The metrics in Prometheus's text format (of content type ``CONTENT_TYPE``)."""
        return generate_latest(self.registry)

    def health(self) -> Health | None:
        """The tracked engine's store's health, as a scrape reports it; None if unknown."""
        engine = self.engine
        if engine is None:
            return None
        if isinstance(engine, AsyncEngine):
            return self._health
        try:
            answered: Health = engine.store.ping()
        except RatekeeperError as error:
            return Health(False, error=str(error))
        return answered

    def decisions(self) -> dict[tuple[str, str, str], int]:
        """A copy of the decision counts, by ``(domain, rule, result)``."""
        with self._lock:
            return dict(self._counts)

    def cache_hits(self, misses: int) -> int:
        """The plan cache's hits: the decisions made by a plan, less the ``misses`` that
        loaded one; never less than last reported."""
        planned = sum(n for (_, name, _), n in self.decisions().items() if name != "given")
        with self._lock:
            if planned - misses > self._hits:
                self._hits = planned - misses
            return self._hits


class _Collector:
    """What ``Metrics`` reads when scraped: its decision counts and the tracked engine."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        decisions = CounterMetricFamily(
            "ratekeeper_decisions",
            "Decisions, one per descriptor, by domain, rule and result.",
            labels=["domain", "rule", "result"],
        )
        for labels, count in sorted(metrics.decisions().items()):
            decisions.add_metric(labels, count)
        yield decisions
        if metrics.admission is not None:
            yield from _admission(metrics.admission)
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
        entries = GaugeMetricFamily("ratekeeper_plan_cache_entries", "Plans cached now.")
        entries.add_metric([], len(planner.cache))
        yield entries


def _store(health: Health | None) -> Iterator[Metric]:
    if health is None:
        return
    up = GaugeMetricFamily("ratekeeper_store_up", "1 when the request store answered a ping.")
    up.add_metric([], 1 if health.ok else 0)
    yield up
    breaker = GaugeMetricFamily(
        "ratekeeper_store_breaker_state",
        "The request store's circuit breaker: 1 for its current state.",
        labels=["state"],
    )
    for state in ("closed", "open", "half-open"):
        breaker.add_metric([state], 1 if health.breaker == state else 0)
    yield breaker
    shards = GaugeMetricFamily(
        "ratekeeper_store_shards_open",
        "Shards of the request store (a Redis Cluster's masters) whose breaker is not closed.",
    )
    shards.add_metric([], len(health.open_shards))
    yield shards
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


def _admission(admission: Admission) -> Iterator[Metric]:
    shed = CounterMetricFamily(
        "ratekeeper_requests_shed",
        "Requests turned away at once, the most decisions in flight being under way "
        "(503 overloaded, gRPC UNAVAILABLE); no store error.",
        labels=["surface"],
    )
    for surface, count in admission.shed.items():
        shed.add_metric([surface], count)
    yield shed
    in_flight = GaugeMetricFamily("ratekeeper_decisions_in_flight", "Decisions under way now.")
    in_flight.add_metric([], admission.in_flight)
    yield in_flight
    most = GaugeMetricFamily(
        "ratekeeper_decisions_in_flight_max",
        "The most decisions under way at once (--max-in-flight).",
    )
    most.add_metric([], admission.limit)
    yield most


def _counter(name: str, documentation: str, value: int) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


class MetricsApp:
    """An ASGI application serving ``metrics`` to Prometheus: mount it at ``/metrics``.

    ``GET`` answers in the format the scraper's ``Accept`` asks for (Prometheus text, else
    OpenMetrics), gzipped when accepted, as prometheus_client serves them; any other method
    gets 405. An async engine's store is pinged first.
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._serve = make_asgi_app(metrics.registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError(f"the metrics app serves HTTP, not {scope['type']!r}")
        if scope["method"] != "GET":
            await send(
                {
                    "type": "http.response.start",
                    "status": 405,
                    "headers": [(b"allow", b"GET"), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await self.metrics.refresh()
        await self._serve(scope, receive, send)


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop: acknowledge, so that the app also runs on its own."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
