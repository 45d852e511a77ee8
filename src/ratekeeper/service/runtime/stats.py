"""The service's envoyproxy/ratelimit statistics (``service.observe.stats``), as its settings
ask: counted by each process over its engine and flushed to StatsD and DogStatsD, and served
to Prometheus by the process that listens for them.

With one process, it counts, flushes and serves. With ``--workers N``, each worker counts and
flushes its own counts (StatsD adds them up) and writes its totals into the run's directory;
the process that starts the workers serves their sum (``workers_exporter``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ratekeeper.core.errors import ConfigError
from ratekeeper.service.observe.stats.publish import Publisher, StatsOptions, serve_prometheus

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.service.observe.stats.exporter import Exporter
    from ratekeeper.service.runtime.settings import ListenAddress, Settings

log = logging.getLogger("ratekeeper.service")


def _pair(address: ListenAddress | None) -> tuple[str, int] | None:
    return None if address is None else (address.host, address.port)


def stats_options(settings: Settings) -> StatsOptions:
    """What ``settings`` ask of the reference's statistics."""
    return StatsOptions(
        statsd=_pair(settings.statsd),
        dogstatsd=_pair(settings.dogstatsd),
        mogrifiers=settings.dogstatsd_mogrifiers,
        tags=settings.stats_tags,
        flush_interval=settings.stats_flush_interval,
        prometheus=_pair(settings.stats_prometheus),
        prometheus_path=settings.stats_prometheus_path,
        mapper=settings.stats_prometheus_mapper,
        near_limit_ratio=settings.near_limit_ratio,
    )


def require_stats_extra(settings: Settings) -> None:
    """Raise ``MissingExtraError`` when StatsD or DogStatsD is asked for without
    ``ratekeeper[statsd]``: before any worker starts, rather than in each of them."""
    from ratekeeper.service.observe.stats.sinks import require

    if settings.statsd is not None:
        require("statsd.client.stream")
    if settings.dogstatsd is not None:
        require("datadog.dogstatsd.base")


def start_stats(engine: AsyncEngine, settings: Settings) -> Publisher | None:
    """Count ``engine``'s checks as the reference does and publish them as ``settings`` ask;
    None when nothing is asked. Raises ``ConfigError`` for a listener that cannot listen or a
    bad mapper, ``MissingExtraError`` without ``ratekeeper[statsd]`` for StatsD."""
    from ratekeeper.service.observe.stats import start

    options = stats_options(settings)
    if not options.wanted:
        return None
    directory = None
    if settings.workers > 1:
        from ratekeeper.service.observe.multiprocess import directory as run_directory

        directory = run_directory()
    try:
        publisher = start(engine, options, directory=directory)
    except (OSError, ValueError) as error:
        raise ConfigError(_why(settings, error)) from None
    _say(settings, options, served=directory is None)
    return publisher


def _why(settings: Settings, error: OSError | ValueError) -> str:
    if isinstance(error, OSError):
        where = settings.sources.get("stats_prometheus", "--stats-prometheus")
        return f"{where}: cannot listen on {settings.stats_prometheus}: {error.strerror or error}"
    return f"envoyproxy/ratelimit's statistics: {error}"


def _say(settings: Settings, options: StatsOptions, *, served: bool) -> None:
    every = f"every {options.flush_interval:g}s and at the stop"
    if settings.statsd is not None:
        log.info("statistics: StatsD to %s over TCP, %s", settings.statsd, every)
    if settings.dogstatsd is not None:
        log.info("statistics: DogStatsD to %s over UDP, %s", settings.dogstatsd, every)
    if settings.stats_prometheus is not None and served:
        log.info(
            "statistics: Prometheus at http://%s%s",
            settings.stats_prometheus,
            settings.stats_prometheus_path,
        )


@contextmanager
def workers_exporter(settings: Settings, run: str) -> Iterator[Exporter | None]:
    """With many workers: the Prometheus listener of their statistics, serving the totals
    they write into ``run``, while the block runs; None when none is asked for."""
    from ratekeeper.service.observe.stats.exporter import read_totals

    options = stats_options(settings)
    if options.prometheus is None:
        yield None
        return
    try:
        exporter = serve_prometheus(options, lambda: read_totals(run))
    except (OSError, ValueError) as error:
        raise ConfigError(_why(settings, error)) from None
    log.info(
        "statistics: Prometheus at http://%s%s, the workers' totals",
        settings.stats_prometheus,
        settings.stats_prometheus_path,
    )
    try:
        yield exporter
    finally:
        exporter.close()
