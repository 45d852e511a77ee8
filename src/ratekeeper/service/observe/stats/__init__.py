"""envoyproxy/ratelimit's statistics: counted under its names, sent as it sends them.

``ReferenceStats`` (``counts``) counts every check of an engine as the reference does;
``Publisher`` hands the counts to StatsD and DogStatsD (``sinks``) every flush interval and
at the stop, and to the Prometheus listener (``exporter``), which maps them as statsd_exporter
does (``mapper``). ``StatsOptions`` says which; ``start`` wires them over an engine.
"""

from ratekeeper.service.observe.stats.counts import NEAR_LIMIT_RATIO, ReferenceStats
from ratekeeper.service.observe.stats.publish import Publisher, StatsOptions, start

__all__ = ["NEAR_LIMIT_RATIO", "Publisher", "ReferenceStats", "StatsOptions", "start"]
