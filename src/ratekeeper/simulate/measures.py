"""The measures of a simulation: what each limit admitted, and how far from exact.

``measure`` turns a ``Replay``'s tallies into one ``Measures`` per limit; nothing here replays
or reads a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from math import ceil
from typing import Any

from ratekeeper.simulate.replay import Replay
from ratekeeper.simulate.tallies import LimitTally

#: The percentiles reported of the per-key peaks.
PEAK_PERCENTILES = (50, 90, 99)


def percentile(ordered: Sequence[float], share: float) -> float:
    """The nearest-rank percentile ``share`` (0 to 100) of ``ordered``, sorted; 0 when empty."""
    if not ordered:
        return 0.0
    rank = ceil(share / 100 * len(ordered))
    return float(ordered[max(rank, 1) - 1])


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index of ``values``: 1 when all are equal, down to ``1/n``; 1 when
    empty or all zero."""
    square = sum(value * value for value in values)
    if not square:
        return 1.0
    total = sum(values)
    return total * total / (len(values) * square)


@dataclass(frozen=True)
class Delays:
    """Seconds the admitted hits waited (the leaky-bucket shaper; 0 for the others)."""

    p50: float = 0.0
    p99: float = 0.0
    max: float = 0.0
    waited: int = 0  # admitted hits that waited at all


@dataclass(frozen=True)
class Measures:
    """What one limit did with a trace, judged against the exact reference (a sliding log of
    the same amount and period applied to the limit's own admitted history; see
    ``ratekeeper.simulate.tallies``).

    ``requests`` counts the trace's hits plus the ``retries`` its refused clients made.
    ``false_allows`` and ``false_refusals`` are counts, and ``..._share`` their share of
    ``requests``. ``full_queue`` counts a shaper's refusals of hits its queue could not hold:
    its bound, by design, neither false nor counted in ``false_refusals`` (0 for the other
    algorithms). ``peak`` is the most units admitted in any window of the period's length,
    for any key; ``peaks`` the percentiles of each key's own peak (``"p50"``, ``"p90"``,
    ``"p99"``, ``"max"``), in units per period. ``fairness`` is Jain's index over the keys of
    each key's admitted units divided by its fair share, ``min(its demand, amount x
    max(duration, period) / period)``: 1 when every key got the same part of what it was due.

    ``series`` is the units admitted per time bin, as ``(seconds from the first event,
    units)``; ``fullest`` the most units one key held in one window of the period ending at a
    unit admitted in the bin (0 where none was), the quantity the limit promises to keep at
    ``amount``: its largest value is ``peak``. ``zoom`` is ``fullest`` in the finer bins of the
    close-up of a short attack (``Simulation.zoom``), empty without one.
    """

    limit: str
    algorithm: str
    amount: int
    period: float
    requests: int
    retries: int
    admitted: int
    refused: int
    admitted_units: int
    false_allows: int
    false_refusals: int
    full_queue: int
    false_allow_share: float
    false_refusal_share: float
    peak: int
    peaks: dict[str, float]
    fairness: float
    delays: Delays
    series: list[tuple[float, int]] = field(repr=False)
    fullest: list[tuple[float, int]] = field(repr=False, default_factory=list)
    zoom: list[tuple[float, int]] = field(repr=False, default_factory=list)

    @property
    def error_share(self) -> float:
        """False allows and false refusals together, as a share of the requests."""
        return self.false_allow_share + self.false_refusal_share

    def to_dict(self, series: bool = False) -> dict[str, Any]:
        """The measures as JSON-ready data; with ``series``, the time series too."""
        data = asdict(self)
        del data["series"], data["fullest"], data["zoom"]
        data["error_share"] = self.error_share
        if series:
            data["series"] = [list(point) for point in self.series]
            data["fullest"] = [list(point) for point in self.fullest]
            if self.zoom:
                data["zoom"] = [list(point) for point in self.zoom]
        return data


def _measures(tally: LimitTally, replay: Replay, slots: range, close: range) -> Measures:
    limit = tally.limit
    keys = tally.keys.values()
    requests = tally.requests + tally.retries
    peaks = sorted(key.peak for key in keys)
    due = limit.amount * max(replay.last - replay.first, limit.period) / limit.period
    shares = [key.admitted / min(key.requested, due) for key in keys if key.requested]
    delays = sorted(tally.delays)
    waited = len(delays)
    zeros = tally.admitted - waited  # the admitted hits that did not wait

    def delay(share: float) -> float:
        rank = max(ceil(share / 100 * tally.admitted), 1)
        return 0.0 if rank <= zeros else float(delays[rank - zeros - 1])

    start = replay.first
    return Measures(
        limit=str(limit),
        algorithm=limit.algorithm.value,
        amount=limit.amount,
        period=limit.period,
        requests=requests,
        retries=tally.retries,
        admitted=tally.admitted,
        refused=requests - tally.admitted,
        admitted_units=sum(key.admitted for key in keys),
        false_allows=tally.false_allows,
        false_refusals=tally.false_refusals,
        full_queue=tally.full_queue,
        false_allow_share=tally.false_allows / requests if requests else 0.0,
        false_refusal_share=tally.false_refusals / requests if requests else 0.0,
        peak=peaks[-1] if peaks else 0,
        peaks={
            **{f"p{share}": percentile(peaks, share) for share in PEAK_PERCENTILES},
            "max": float(peaks[-1]) if peaks else 0.0,
        },
        fairness=jain(shares),
        delays=Delays(
            p50=delay(50) if tally.admitted else 0.0,
            p99=delay(99) if tally.admitted else 0.0,
            max=delays[-1] if delays else 0.0,
            waited=waited,
        ),
        series=dense(tally.series, slots, replay.width, start),
        fullest=dense(tally.fullest, slots, replay.width, start),
        zoom=[] if replay.zoom is None else dense(tally.zoom, close, replay.zoom.width, start),
    )


def dense(bins: dict[int, int], span: range, width: float, start: float) -> list[tuple[float, int]]:
    """``bins`` as ``(seconds from start, units)`` for every bin of ``span``, 0 where empty."""
    get = bins.get
    return [(slot * width - start, get(slot, 0)) for slot in span]


def measure(replay: Replay) -> list[Measures]:
    """One ``Measures`` per limit of ``replay``, in its order."""
    span = replay.span()
    zoom = replay.zoom
    close = range(0) if zoom is None else zoom_slots(zoom.start, zoom.end, zoom.width)
    return [_measures(tally, replay, span, close) for tally in replay.tallies]


def zoom_slots(start: float, end: float, width: float) -> range:
    """The bins of ``width`` seconds from ``start`` to ``end``, both on a bin's edge."""
    return range(round(start / width), round(end / width))
