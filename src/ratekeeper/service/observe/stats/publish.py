"""The reference's statistics flushed: to StatsD and DogStatsD every flush interval and at the
stop, as gostats' store flushes them, and to the Prometheus listener.

``StatsOptions`` are what ``ratekeeper serve`` is told (``--statsd``, ``--dogstatsd``,
``--stats-prometheus`` and the others, or the reference's variables); ``start(engine,
options)`` makes the ``ReferenceStats`` the engine's tally and starts the ``Publisher``, whose
``close()`` flushes what is left (a SIGTERM'd service loses nothing it counted). With many
workers, ``directory`` is the run's: each worker writes its totals there at every flush, for
the one listener (``exporter``) of the process that started them.

Every sink gets the same counts: StatsD, DogStatsD and Prometheus may all be on at once (the
reference refuses more than one; ratekeeper has no reason to).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from ratekeeper.service.observe.stats.counts import NEAR_LIMIT_RATIO, ReferenceStats
from ratekeeper.service.observe.stats.exporter import Exporter, write_totals
from ratekeeper.service.observe.stats.mapper import Mapper, default_mapper_text
from ratekeeper.service.observe.stats.sinks import DogStatsdSink, Sink, StatsdSink, mogrifiers

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine, Engine

log = logging.getLogger("ratekeeper.service")

#: The reference's ``STATS_FLUSH_INTERVAL``, in seconds.
FLUSH_INTERVAL = 10.0


class StatsOptions(NamedTuple):
    """Which of the reference's statistics to send, and where; each address ``(host, port)``.

    ``prometheus`` is the listener of the mapped names (None: none); ``mapper`` a
    statsd_exporter mapping file (None: the reference's default, without its timer's scale
    when ``milliseconds``)."""

    statsd: tuple[str, int] | None = None
    dogstatsd: tuple[str, int] | None = None
    mogrifiers: tuple[str, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()
    flush_interval: float = FLUSH_INTERVAL
    prometheus: tuple[str, int] | None = None
    prometheus_path: str = "/metrics"
    mapper: str | None = None
    milliseconds: bool = False
    near_limit_ratio: float = NEAR_LIMIT_RATIO

    @property
    def wanted(self) -> bool:
        """Whether anything is sent or served."""
        return bool(self.statsd or self.dogstatsd or self.prometheus)


def mapper_of(options: StatsOptions) -> Mapper:
    """The mapper ``options`` name; ``ValueError`` for a file that is no mapper."""
    if options.mapper:
        return Mapper.from_file(options.mapper)
    return Mapper(default_mapper_text(options.milliseconds), "the default mapper")


def sinks_of(options: StatsOptions) -> list[Sink]:
    """The StatsD and DogStatsD sinks ``options`` ask for."""
    sinks: list[Sink] = []
    if options.statsd is not None:
        sinks.append(StatsdSink(*options.statsd))
    if options.dogstatsd is not None:
        sinks.append(DogStatsdSink(*options.dogstatsd, mogrifiers(options.mogrifiers)))
    return sinks


class Publisher:
    """Flushes ``stats`` to ``sinks`` every ``interval`` seconds in a thread of its own, and
    writes its totals into ``directory`` (with many workers) at each flush."""

    def __init__(
        self,
        stats: ReferenceStats,
        sinks: list[Sink],
        interval: float,
        directory: str | None = None,
        exporter: Exporter | None = None,
    ) -> None:
        self.stats, self.sinks, self.interval = stats, sinks, interval
        self.directory, self.exporter = directory, exporter
        self._stop = threading.Event()
        self._flushing = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ratekeeper-stats", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()

    def flush(self) -> None:
        """Send what was counted since the last flush; never raises."""
        with self._flushing:
            try:
                taken = self.stats.take()
                if taken:
                    for sink in self.sinks:
                        sink.send(taken)
                if self.directory is not None:
                    write_totals(self.directory, self.stats.totals)
            except Exception:
                log.exception("envoyproxy/ratelimit's statistics: a flush failed")

    def close(self) -> None:
        """Stop, after a last flush of everything counted; then close the sinks."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self.flush()
        for sink in self.sinks:
            sink.close()
        if self.exporter is not None:
            self.exporter.close()


def start(
    engine: Engine | AsyncEngine,
    options: StatsOptions,
    *,
    directory: str | None = None,
) -> Publisher:
    """Count ``engine``'s checks as the reference does and publish them as ``options`` say.

    Without ``directory`` (one process), the Prometheus listener, if asked for, serves this
    process's totals; with it (a worker), the process that started the workers serves them
    (``serve_prometheus``). Raises ``MissingExtraError`` when StatsD or DogStatsD is asked for
    without ``ratekeeper[statsd]``, ``ValueError`` for a bad mapper or mogrifier, ``OSError``
    when the listener's address is taken."""
    stats = ReferenceStats(
        engine, near_limit_ratio=options.near_limit_ratio, tags=dict(options.tags)
    )
    sinks = sinks_of(options)
    exporter = None
    if options.prometheus is not None and directory is None:
        exporter = serve_prometheus(options, stats.snapshot)
    stats.track()
    return Publisher(stats, sinks, options.flush_interval, directory, exporter)


def serve_prometheus(options: StatsOptions, source: Callable[[], Mapping[str, int]]) -> Exporter:
    """The listener of ``options.prometheus`` over the totals ``source()`` gives."""
    host, port = options.prometheus or ("", 9090)
    return Exporter(host, port, options.prometheus_path, mapper_of(options), source)
