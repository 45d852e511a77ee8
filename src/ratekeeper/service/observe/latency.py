"""The decision-latency histogram of one process, observed in bulk.

prometheus_client's ``Histogram.observe`` takes two locks and walks the buckets for every
observation: a few microseconds on every decision. ``Latency`` holds each surface's
observations in a deque (an append is atomic) and adds them to the histogram in bulk: once
``PENDING`` have gathered, and whenever the histogram is read (``collect``, which the registry
and ``Metrics.latency_counts`` call), so that every read sees every observation made before it.
What a scrape shows is what ``observe`` one at a time would have shown, but for the last bits
of ``_sum``, added in another order.

Without ``bulk`` (a process of many workers, whose histogram is written to files that other
processes read), and for a histogram child whose insides are not the ones this knows (another
prometheus_client), each value is observed at once, as before.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import Metric

#: Observations a surface gathers before they are added.
PENDING = 1024


class Latency:
    """``histogram``'s children by surface, one for each of ``surfaces``, observed in bulk;
    ``collect`` and ``describe`` make it the registry's collector in place of
    ``histogram``."""

    def __init__(self, histogram: Histogram, surfaces: Sequence[str], *, bulk: bool) -> None:
        self.histogram = histogram
        self._children = {surface: histogram.labels(surface) for surface in surfaces}
        self._pending: dict[str, deque[float]] = {surface: deque() for surface in surfaces}
        self._lock = threading.Lock()
        sample = next(iter(self._children.values()))
        bounds = getattr(sample, "_upper_bounds", None)
        self._bounds: tuple[float, ...] | None = (
            tuple(bounds)
            if bulk
            and isinstance(bounds, list | tuple)
            and isinstance(getattr(sample, "_buckets", None), list)
            and hasattr(sample, "_sum")
            else None
        )

    def observer(self, surface: str) -> Callable[[float], None]:
        """A function that observes one of ``surface``'s latencies (seconds);
        ``KeyError`` for a surface not given."""
        if self._bounds is None:
            observe: Callable[[float], None] = self._children[surface].observe
            return observe
        pending = self._pending[surface]
        append, flush = pending.append, self.flush

        def observe_later(seconds: float) -> None:
            append(seconds)
            if len(pending) >= PENDING:
                flush()

        return observe_later

    def flush(self) -> None:
        """Add every observation gathered to the histogram."""
        bounds = self._bounds
        if bounds is None:
            return
        with self._lock:
            for surface, pending in self._pending.items():
                if pending:
                    self._add(self._children[surface], pending, bounds)

    @staticmethod
    def _add(child: Any, pending: deque[float], bounds: tuple[float, ...]) -> None:
        counts = [0] * len(bounds)
        total = 0.0
        while True:
            try:
                seconds = pending.popleft()
            except IndexError:
                break
            total += seconds
            if not math.isnan(seconds):  # NaN falls in no bucket, as observe has it
                index = bisect_left(bounds, seconds)  # the first bound at or over it
                if index < len(counts):
                    counts[index] += 1
        child._sum.inc(total)
        for index, count in enumerate(counts):
            if count:
                child._buckets[index].inc(count)

    def collect(self) -> Iterable[Metric]:
        self.flush()
        return self.histogram.collect()

    def describe(self) -> Iterable[Metric]:
        return self.histogram.describe()
