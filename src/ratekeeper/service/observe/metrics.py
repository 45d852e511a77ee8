"""The decision service's Prometheus metrics, in a registry of their own.

``Metrics`` is an engine observer: it counts every decision the engine makes, by domain, rule
and result. It also holds the decision-latency histogram the surfaces feed, and reads the rest
when scraped, so that a decision pays for none of it: the request store's errors, breaker
openings and degraded decisions (``store.ping()``), rule reloads and their errors, the
configuration store's errors and the plan cache (``ratekeeper.service.observe.scraped``). Wiring::

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

``Metrics(multiprocess=True)`` is for a service of many worker processes: each counts into
prometheus_client's multiprocess files and every scrape reports the whole service (see
``ratekeeper.service.observe.multiprocess``).

Needs the ``server`` extra (``prometheus-client``); ``import ratekeeper`` never imports it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ratekeeper.core.errors import MissingExtraError, RatekeeperError
from ratekeeper.core.moved import deprecated_name
from ratekeeper.engine import AsyncEngine, Engine
from ratekeeper.stores.health import Health

if TYPE_CHECKING:
    from ratekeeper.service.inflight import InFlightBound

try:
    from prometheus_client import (
        CollectorRegistry,
        Counter,
        Histogram,
        generate_latest,
    )
    from prometheus_client.exposition import choose_encoder
except ImportError as error:  # pragma: no cover - exercised in a subprocess without the extra
    raise MissingExtraError("prometheus-client", "server") from error

from ratekeeper.service.observe import scraped
from ratekeeper.service.observe.exposition import MetricsApp
from ratekeeper.service.observe.latency import Latency
from ratekeeper.service.observe.multiprocess import (
    PUBLISH_INTERVAL,
    Published,
    SharedCollector,
    directory,
    drop_gauges,
)
from ratekeeper.service.surfaces import SURFACES

if TYPE_CHECKING:
    from ratekeeper.engine import Status

log = logging.getLogger("ratekeeper.service")

#: The content type of ``Metrics.text()``: Prometheus's text format, as prometheus_client
#: names it.
CONTENT_TYPE = choose_encoder("")[1]

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
#: Seconds a scrape waits for the request store's ping before it reports the store down.
PING_TIMEOUT = 2.0

_UNTRACKED = object()  # the default limit while no engine is tracked: any limit may be it


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

    With ``multiprocess``, the counts and the latency histogram are written into
    prometheus_client's multiprocess files as they are made, in the directory
    ``PROMETHEUS_MULTIPROC_DIR`` names (set before prometheus_client was imported, else
    ``ValueError``), and a scrape reads every process's files: the service's totals. What is
    read when scraped is published into them by ``publish()``, at every scrape and every
    second in ``publish_every()``; ``close()`` as the process stops. ``max_label_sets``
    bounds each process's label sets. ``decisions()`` stays this process's. One per process:
    two would write the same counts over each other.
    """

    def __init__(self, *, max_label_sets: int = 1000, multiprocess: bool = False) -> None:
        if max_label_sets < 1:
            raise ValueError(f"max_label_sets must be at least 1, not {max_label_sets!r}")
        self.max_label_sets = max_label_sets
        self.multiprocess = multiprocess
        shared = directory() if multiprocess else None
        self.registry = CollectorRegistry()
        self.engine: Engine | AsyncEngine | None = None
        self._counts: dict[tuple[str, str, str], int] = {}
        self._domains: set[str] = set()  # domains a rule of has matched
        self._default: object = _UNTRACKED
        self._lock = threading.Lock()
        self._health: Health | None = None  # an async store's, as the last refresh() found it
        self._hits = 0  # the plan cache's hits, as last reported: a counter never goes down
        #: The service's bound on decisions in flight, whose shed requests are reported.
        self.in_flight_bound: InFlightBound | None = None
        latency = Histogram(
            "ratekeeper_decision_seconds",
            "Time to decide one request, by the surface that received it.",
            ["surface"],
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self._latency = {surface: latency.labels(surface) for surface in SURFACES}
        self._latency_histogram = Latency(latency, SURFACES, bulk=not multiprocess)
        if not multiprocess:
            self.registry.register(self._latency_histogram)
        self._observers = {
            surface: self._latency_histogram.observer(surface) for surface in SURFACES
        }
        # With many processes, each label set's counter child, made once: a decision adds 1.
        self._children: dict[tuple[str, str, str], Counter] | None = None
        self._published: Published | None = None
        self._publishing = threading.Lock()
        if shared is None:
            self.registry.register(scraped.Collector(self))
        else:
            self._decisions = Counter(
                scraped.DECISIONS, scraped.DECISIONS_HELP, scraped.DECISION_LABELS, registry=None
            )
            self._children = {}
            self._published = Published()
            self._directory = shared
            self.registry.register(SharedCollector(shared, self.publish))
        self.app = MetricsApp(self.registry, self.refresh)

    @property
    def admission(self) -> InFlightBound | None:
        """The old name of ``in_flight_bound``; deprecated, removed in 0.3.0."""
        deprecated_name("Metrics.admission", "Metrics.in_flight_bound")
        return self.in_flight_bound

    @admission.setter
    def admission(self, bound: InFlightBound | None) -> None:
        deprecated_name("Metrics.admission", "Metrics.in_flight_bound")
        self.in_flight_bound = bound

    def __call__(self, domain: str, statuses: tuple[Status, ...]) -> None:
        counts = self._counts
        children = self._children
        default = self._default
        with self._lock:
            for status in statuses:
                allowed, decision, limit, rule, overridden, shadowed, _ = status
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
                    if children is not None:
                        children[key].inc()

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
        children = self._children
        if children is not None:
            child = children.get(key)
            if child is None:
                child = children[key] = self._decisions.labels(*key)
            child.inc()

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
        self.latency_observer(surface)(seconds)

    def latency_observer(self, surface: str) -> Callable[[float], None]:
        """``observe_latency`` of ``surface`` (one of ``SURFACES``, else ``ValueError``) as a
        function of the seconds alone, for a hot path."""
        try:
            return self._observers[surface]
        except KeyError:
            raise ValueError(
                f"surface must be one of {', '.join(SURFACES)}, not {surface!r}"
            ) from None

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
        does this first; a sync engine's store is pinged when scraped). A store that does not
        answer within ``PING_TIMEOUT`` seconds is reported down, so that no scrape waits on
        it for longer."""
        engine = self.engine
        if not isinstance(engine, AsyncEngine):
            return
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                self._health = await engine.store.ping()
        except TimeoutError:
            self._health = Health(False, error=f"no answer within {PING_TIMEOUT:g} s")
        except RatekeeperError as error:
            self._health = Health(False, error=str(error))

    def text(self) -> bytes:
        """The metrics in Prometheus's text format (of content type ``CONTENT_TYPE``)."""
        return generate_latest(self.registry)

    def publish(self) -> None:
        """With ``multiprocess``, write what is read when scraped (``scraped.families``) into
        this process's files, as it is now; without, nothing. A scrape calls it first."""
        published = self._published
        if published is not None:
            with self._publishing:
                published.publish(scraped.families(self))

    async def publish_every(self, seconds: float = PUBLISH_INTERVAL) -> None:
        """With ``multiprocess``, ``refresh()`` and ``publish()`` every ``seconds`` until
        cancelled, so that a scrape another process answers is at most that old; a failure
        is logged once, when it starts. Without, return at once. ``seconds`` must be a
        positive finite number (else ``ValueError``)."""
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if not (number and 0 < seconds < math.inf):
            raise ValueError(f"seconds must be a positive finite number, not {seconds!r}")
        if self._published is None:
            return
        failing = False
        while True:
            try:
                await self.refresh()
                self.publish()
            except Exception:
                if not failing:
                    log.exception(
                        "could not publish this worker's metrics; trying every %g s", seconds
                    )
                failing = True
            else:
                if failing:
                    log.info("publishing this worker's metrics again")
                failing = False
            await asyncio.sleep(seconds)

    def close(self) -> None:
        """With ``multiprocess``, publish this process's last figures and drop its gauges
        from the files, as it stops: its counts stay in the totals; without, nothing."""
        if self._published is not None:
            self.publish()
            drop_gauges(os.getpid(), self._directory)

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
        """A copy of this process's decision counts, by ``(domain, rule, result)``."""
        with self._lock:
            return dict(self._counts)

    def latency_counts(self) -> dict[str, list[int]]:
        """This process's decision latencies so far: per surface, how many fell in each bucket
        of ``LATENCY_BUCKETS`` (the last count is those above the largest), not cumulated."""
        found = {surface: [0] * (len(LATENCY_BUCKETS) + 1) for surface in SURFACES}
        for metric in self._latency_histogram.collect():
            for sample in metric.samples:
                if sample.name.endswith("_bucket"):
                    bound = float(sample.labels["le"])
                    index = (
                        len(LATENCY_BUCKETS) if bound == math.inf else LATENCY_BUCKETS.index(bound)
                    )
                    found[sample.labels["surface"]][index] = int(sample.value)
        for counts in found.values():  # prometheus counts each bucket with those below it
            for index in range(len(counts) - 1, 0, -1):
                counts[index] -= counts[index - 1]
        return found

    def cache_hits(self, misses: int) -> int:
        """The plan cache's hits: the decisions made by a plan, less the ``misses`` that
        loaded one; never less than last reported."""
        planned = sum(n for (_, name, _), n in self.decisions().items() if name != "given")
        with self._lock:
            if planned - misses > self._hits:
                self._hits = planned - misses
            return self._hits
