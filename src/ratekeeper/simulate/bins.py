"""The time bins of a simulation's series: a few dozen, of a width a person reads at a glance.

``readable_width(span)`` is the narrowest width of ``WIDTHS`` that cuts ``span`` seconds into
at most ``BINS`` bins: 0.05 s for a trace of 1.2 s, 2 s for a minute, 2 minutes for an hour.
Bins start at whole multiples of their width (seconds since the epoch), so a window boundary
of a usual period falls on a bin's edge.

An attack narrower than ``CLOSE`` bins would vanish into one or two of them (the window-edge
attack's 1.2 s in bins of 2 s): ``zoom(marks, width)`` is the close-up its plot shows, in
bins fine enough to see it by, that merge whole into the bins of ``width``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil, floor, isfinite

#: The most bins a default series has.
BINS = 40

#: An attack narrower than this many bins is also shown close up (``zoom``).
CLOSE = 4

#: How much of the attack's length a close-up shows before and after it.
MARGIN = 0.25

#: The widths bins may have, in seconds: 1, 2 and 5 times a power of ten below a second, then
#: the seconds, minutes and hours a clock shows, then whole days.
WIDTHS: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
    1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 900.0, 1_800.0,
    3_600.0, 7_200.0, 10_800.0, 21_600.0, 43_200.0,
    *(float(m * 10**e * 86_400) for e in range(5) for m in (1, 2, 5)),
)  # fmt: skip


def readable_width(span: float, most: int = BINS) -> float:
    """The narrowest of ``WIDTHS`` cutting ``span`` seconds into at most ``most`` bins (1 s for
    a span of 0; the widest for a span past them all). Example::

        readable_width(1.2), readable_width(60), readable_width(3_600)  # 0.05, 2.0, 120.0
    """
    if not (isfinite(span) and span >= 0):
        raise ValueError(f"span must be finite seconds >= 0, not {span!r}")
    if span == 0:
        return 1.0
    for width in WIDTHS:
        if ceil(round(span / width, 9)) <= most:
            return width
    return WIDTHS[-1]


def coarser(width: float, first: int, last: int, most: int = BINS) -> int:
    """The least whole factor by which bins of ``width`` seconds, numbered ``first`` to
    ``last``, merge into at most ``most`` bins of a readable width (one of ``WIDTHS``, a whole
    multiple of ``width``); 1 when they are at most ``most`` already, or no such width exists.
    Example::

        coarser(2.0, 0, 1_799)  # 60: an hour of 2 s bins makes 30 bins of 2 minutes
    """
    if last - first + 1 <= most:
        return 1
    for wider in WIDTHS:
        factor = round(wider / width)
        whole = factor > 1 and abs(factor * width - wider) <= 1e-6 * width
        if whole and last // factor - first // factor + 1 <= most:
            return factor
    return 1


@dataclass(frozen=True)
class Zoom:
    """A close-up: from ``start`` to ``end`` seconds, in bins of ``width`` seconds."""

    start: float
    end: float
    width: float


def zoom(marks: Sequence[tuple[float, float]], width: float) -> Zoom | None:
    """The close-up of the first of ``marks`` (``(start, end)`` seconds since the epoch) when
    it spans fewer than ``CLOSE`` bins of ``width``: the mark and ``MARGIN`` of its length on
    each side, cut on whole bins of the narrowest of ``WIDTHS`` that makes at most ``BINS`` of
    them and divides ``width`` whole. ``None`` without a mark, for a mark of no length or one
    already wide enough, or when no finer width divides ``width``. Example::

        zoom([(START + 119.4, START + 120.6)], 2.0)  # 0.05 s bins from 119.1 s to 120.9 s
    """
    if not marks:
        return None
    begin, end = marks[0]
    span = end - begin
    if not (isfinite(span) and 0 < span < CLOSE * width):
        return None
    margin = MARGIN * span
    fine = readable_width(span + 2 * margin)
    for candidate in WIDTHS[WIDTHS.index(fine) :]:
        if candidate >= width:
            return None
        parts = width / candidate
        if abs(parts - round(parts)) <= 1e-9 * parts:
            first = floor(round((begin - margin) / candidate, 6))
            last = ceil(round((end + margin) / candidate, 6))
            return Zoom(first * candidate, last * candidate, candidate)
    return None
