"""Replaying events through limits on a virtual clock, judged against the exact reference.

``replay`` reads a trace a chunk at a time, checks its events, and counts what was offered per
time bin. Keys are independent, so each chunk is grouped by key and each key's events go to
its ``KeyTally`` under each limit (``ratekeeper.simulate.tallies`` decides and judges them);
retries a refused client makes are merged back in time order. At the end the time series are
merged to at most ``MAX_BINS`` bins. A short attack (``bins.zoom``) is replayed in its
close-up's finer bins, whose fullest windows are kept around it before they merge.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from heapq import heappop
from itertools import repeat
from math import inf
from operator import itemgetter
from typing import Any

from ratekeeper.core.errors import TraceError
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import Algorithm
from ratekeeper.simulate.bins import Zoom, coarser, readable_width, zoom
from ratekeeper.simulate.tallies import (
    KeyTally,
    LimitTally,
    Pending,
    bin_admitted,
    replay_key,
    replay_units,
)
from ratekeeper.simulate.trace import Event, Retry, Trace, checked, chunks

#: Events read and grouped at a time from a stream.
CHUNK = 65_536

SHAPER = Algorithm.LEAKY_SHAPER

#: The most bins a time series holds; a longer one is merged (see ``replay``).
MAX_BINS = 100_000


def _with_retries(
    events: Iterable[tuple[float, int, int]], pending: list[Pending], horizon: float
) -> Iterator[tuple[float, int, int]]:
    """``events`` merged in time order with the retries in ``pending`` (which grows as the
    events are decided) up to ``horizon``; a retry is tagged with minus its attempt."""
    for event in events:
        while pending and pending[0][0] <= event[0]:
            when, _, cost, attempt = heappop(pending)
            yield when, cost, -attempt
        yield event
    while pending and pending[0][0] <= horizon:
        when, _, cost, attempt = heappop(pending)
        yield when, cost, -attempt


def _pick(column: Sequence[Any], positions: list[int]) -> Sequence[Any]:
    if len(positions) == 1:
        return [column[positions[0]]]
    return itemgetter(*positions)(column)  # type: ignore[no-any-return]


class Replay:
    """The outcome of ``replay``: a ``LimitTally`` per limit, in the order given, and what
    the trace held."""

    def __init__(self, limits: Sequence[Limit], width: float, retry: Retry | None, record: bool):
        self.tallies = [LimitTally(limit, width, retry, record) for limit in limits]
        self.width = width
        self.events = 0
        self.units = 0
        self.first = inf
        self.last = -inf
        self.offered: dict[int, int] = {}  # time bin -> units requested (retries excluded)
        self.name = "trace"
        self.marks: tuple[tuple[float, float], ...] = ()
        self.zoom: Zoom | None = None  # the close-up of a short attack, in seconds since the epoch

    def offer(self, part: Trace, scaled: Iterable[float]) -> None:
        """Count the events of ``part``, their units and the units offered per time bin
        (``scaled``: their times in bins)."""
        times, costs = part.times, part.costs
        earliest, latest = min(times), max(times)  # the events may be out of order
        self.first = min(self.first, earliest)
        self.last = max(self.last, latest)
        offered = self.offered
        slots = map(int, scaled)
        if costs is None:  # counted in C
            for slot, found in Counter(slots).items():
                offered[slot] = offered.get(slot, 0) + found
        else:
            for slot, cost in zip(slots, costs, strict=False):
                offered[slot] = offered.get(slot, 0) + cost
        self.units += sum(costs) if costs is not None else len(times)

    def span(self) -> range:
        """The time bins from the first offered or admitted to the last."""
        used = [bins for bins in (self.offered, *(tally.series for tally in self.tallies)) if bins]
        if not used:
            return range(0)
        return range(min(min(bins) for bins in used), max(max(bins) for bins in used) + 1)


def _replay_part(tally: LimitTally, part: Trace, groups: dict[str, list[int]], offset: int) -> None:
    """Decide one chunk of events, ``part``, starting at position ``offset`` of the trace, whose
    keys' positions are ``groups``."""
    times, costs = part.times, part.costs
    size = len(times)
    retry = tally.retry
    record = tally.decisions is not None
    if tally.decisions is not None and tally.delay_of is not None:
        tally.decisions.extend(bytes(size))
        tally.delay_of.extend(repeat(0.0, size))
    tallies = tally.keys
    for name, positions in groups.items():
        key = tallies.get(name)
        if key is None:
            key = tallies[name] = KeyTally()
        key_costs: Sequence[int] | Iterable[int]  # a sequence when there are costs
        tags: Iterable[int]
        if len(groups) == 1:
            key_times = times
            key_costs = costs if costs is not None else repeat(1, size)
            tags = range(offset, offset + size)
        else:
            key_times = _pick(times, positions)
            key_costs = _pick(costs, positions) if costs is not None else repeat(1, len(positions))
            # Positions in the trace, used only to record the decisions.
            tags = [offset + position for position in positions] if record else repeat(0)
        tally.requests += len(positions)
        key.requested += len(positions) if costs is None else sum(key_costs)
        if costs is None and retry is None and not record and not tally.shaper:
            replay_units(tally, key, key_times)
            continue
        events: Iterable[tuple[float, int, int]] = zip(key_times, key_costs, tags, strict=False)
        if retry is not None:
            events = _with_retries(events, key.pending, times[-1])
        replay_key(tally, key, events)
    if retry is not None:  # keys absent from this chunk with retries due in it
        for name, key in tallies.items():
            if key.pending and name not in groups and key.pending[0][0] <= times[-1]:
                replay_key(tally, key, _with_retries((), key.pending, times[-1]))


def replay(
    source: Trace | Iterable[Event],
    limits: Sequence[Limit],
    *,
    width: float | None = None,
    record: bool = False,
    progress: Callable[[int], None] | None = None,
    chunk: int = CHUNK,
    feed: Sequence[Callable[[Trace], None]] = (),
) -> Replay:
    """Replay ``source`` (a ``Trace``, or any iterable of events in time order, read ``chunk``
    events at a time) through each of ``limits``; return the tallies.

    ``width`` is the seconds per bin of the time series. By default it is readable and chosen
    from the span (``ratekeeper.simulate.bins``): for a ``Trace``, the readable width that cuts
    its duration (and the longest a shaper may delay a hit past it) into at most ``BINS``
    bins; for a stream, whose span is not known before its end, the shortest period; at the
    end, bins are merged into a readable multiple so that at most ``BINS`` span the series. A
    ``Trace`` whose first attack (``Trace.marks``) spans fewer than ``bins.CLOSE`` bins of the
    chosen width is replayed in the finer bins of its close-up (``Replay.zoom``, see
    ``bins.zoom``); each limit keeps the fullest windows of those bins
    (``LimitTally.zoom``), then they merge into the chosen width. A series longer than
    ``MAX_BINS`` bins (a ``width`` given) is merged by the least whole factor that makes it
    fit. ``Replay.width`` is the width used. ``record`` keeps every event's decision
    (``LimitTally.decisions``). ``progress`` is called with the number of events read so far
    after each chunk. Each of ``feed`` is also given every chunk, checked, in order (the
    leased runs, ``ratekeeper.simulate.leases``). Raises ``TraceError`` naming the first bad
    event (see ``trace.checked``) or a bad ``width``.
    """
    chosen = width is None
    width, close = _width(source, limits, width)
    retry = source.retry if isinstance(source, Trace) else None
    result = Replay(limits, width if close is None else close.width, retry, record)
    if isinstance(source, Trace):
        result.name, result.marks, result.zoom = source.name, source.marks, close
    inverse = 1.0 / result.width
    offset = 0
    for part in chunks(source, chunk):
        if not part.times:
            continue
        scaled, groups = checked(part, inverse, offset + 1)
        result.offer(part, scaled)
        for tally in result.tallies:
            _replay_part(tally, part, groups, offset)
        for consumer in feed:
            consumer(part)
        offset += len(part.times)
        result.events = offset
        if progress is not None:
            progress(offset)
    for tally in result.tallies:
        _finish(tally)
    if close is not None:
        _close_up(result, close, width)
    _merge(result, -(-len(result.span()) // MAX_BINS))
    if chosen and (span := result.span()):
        _merge(result, coarser(result.width, span.start, span.stop - 1))
    return result


def _width(
    source: Trace | Iterable[Event], limits: Sequence[Limit], width: float | None
) -> tuple[float, Zoom | None]:
    """The width of the bins (see ``replay``), and the close-up of a short attack, if any."""
    if width is None:
        if isinstance(source, Trace) and source.duration > 0:
            width = readable_width(source.duration + _longest_delay(limits))
            return width, zoom(source.marks, width)
        return min(limit.period for limit in limits), None  # as fine as a stream affords
    if isinstance(width, bool) or not isinstance(width, int | float) or not 0 < width < inf:
        raise TraceError(f"width must be positive finite seconds, not {width!r}")
    return width, None


def _finish(tally: LimitTally) -> None:
    """After the last event: replay each key's retries still pending, and bin what each key
    admitted into the time series."""
    for key in tally.keys.values():
        if key.pending:
            replay_key(tally, key, _with_retries((), key.pending, inf))
        bin_admitted(tally, key.times, len(key.times))


def _longest_delay(limits: Sequence[Limit]) -> float:
    """The longest a shaper among ``limits`` may delay a hit: its queue drained (0 for none)."""
    return max(
        (limit.capacity * limit.interval for limit in limits if limit.algorithm is SHAPER),
        default=0.0,
    )


def _close_up(result: Replay, close: Zoom, width: float) -> None:
    """Keep each limit's fullest windows in the bins of ``close`` (``LimitTally.zoom``), then
    merge the series into bins of ``width``, a whole multiple of the close-up's."""
    near = range(round(close.start / close.width), round(close.end / close.width))
    for tally in result.tallies:
        tally.zoom = {slot: most for slot, most in tally.fullest.items() if slot in near}
    _merge(result, round(width / close.width))
    result.width = width  # as chosen, not the product of the factor and the finer width


def _merge(result: Replay, factor: int) -> None:
    """Merge the bins of ``result``'s time series by ``factor``."""
    if factor <= 1:
        return
    result.width *= factor
    for bins in (result.offered, *(tally.series for tally in result.tallies)):
        merged = Counter[int]()
        for slot, found in bins.items():
            merged[slot // factor] += found
        bins.clear()
        bins.update(merged)
    for tally in result.tallies:  # the fullest of a merged bin is the fullest of its parts
        fullest: dict[int, int] = {}
        for slot, most in tally.fullest.items():
            if most > fullest.get(slot // factor, 0):
                fullest[slot // factor] = most
        tally.fullest = fullest
