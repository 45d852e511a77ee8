"""The time bins of a simulation's series: a few dozen, of a width a person reads at a glance.

``readable_width(span)`` is the narrowest width of ``WIDTHS`` that cuts ``span`` seconds into
at most ``BINS`` bins: 0.05 s for a trace of 1.2 s, 2 s for a minute, 2 minutes for an hour.
Bins start at whole multiples of their width (seconds since the epoch), so a window boundary
of a usual period falls on a bin's edge.
"""

from __future__ import annotations

from math import ceil, isfinite

#: The most bins a default series has.
BINS = 40

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
