"""The plot of what each limit admitted: per time bin, the most units one key held in one window
of the limit's period (``Measures.fullest``), against the limit, graded by how far over it went.

One panel per limit. A bin's bar is blue up to the limit; what passes the limit is amber while
it stays within ``TOLERANCE`` of it (the band shaded above the limit line) and red past it, and
the panel's title is coloured by its worst bin (``grade``): a full bucket and a little refill
(101 of 100 under the window-edge attack) reads as the small excess it is, the fixed window's
200 as the failure it is. An attack too short for the bins (``Simulation.zoom``) is shown
close up beside the whole run, in its finer bins. The window boundaries of each limit's period
(where a fixed window starts afresh) are dotted and named in the close-up, and dotted on the
whole run when there are at most ``BOUNDARIES``.

Every series carries a ``gid``, kept as the ``id`` of its SVG group: ``admitted-``, ``slight-``
and ``over-`` (the whole run's bars: within the limit, within the tolerance, past it),
``zoom-within-``, ``zoom-slight-`` and ``zoom-over-`` (the close-up's), ``peak-`` and
``zoom-peak-`` (the number over the highest bin past the limit), ``limit-``, ``boundary-``, and
``grade-kept-``, ``grade-slight-`` or ``grade-over-`` on the panel's title,
each followed by the limit (``canvas.series_id``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ratekeeper.algorithms.fixed_window import window
from ratekeeper.core.limits import Limit
from ratekeeper.core.periods import spoken
from ratekeeper.simulate.canvas import new_figure, seconds, series_id
from ratekeeper.simulate.measures import Measures
from ratekeeper.simulate.simulation import Simulation

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

#: How far over its limit a window may go and still be drawn as a slight excess: 10%.
TOLERANCE = 0.1

#: The grades of a panel, its worst bin's: at most the limit, within the tolerance, past it.
KEPT, SLIGHT, OVER = "kept", "slight", "over"

#: The bars' colours and the titles', per grade.
BARS = {KEPT: "tab:blue", SLIGHT: "#f0a020", OVER: "tab:red"}
TITLES = {KEPT: "black", SLIGHT: "#9a5b00", OVER: "tab:red"}

#: The most window boundaries drawn on the whole run, and in a close-up (a few dozen bins).
BOUNDARIES, CLOSE_BOUNDARIES = 12, 100

#: The ids of the series of the whole run and of the close-up: within the limit, within the
#: tolerance, past it, and the number over the highest bin.
WHOLE = ("admitted", "slight", "over", "peak")
CLOSE = ("zoom-within", "zoom-slight", "zoom-over", "zoom-peak")

ATTACK = "tab:purple"

#: The legend's entries, row by row, each found by how its label starts (the last: "a minute
#: boundary: ...").
LEGEND = ("within", "up to", "more than", "attack", "the limit", "tolerance", "a ")

#: The legend's columns.
COLUMNS = 4


def grade(peak: int, amount: int) -> str:
    """``KEPT`` when ``peak`` is at most ``amount``, ``SLIGHT`` when it is at most
    ``TOLERANCE`` over it, else ``OVER``. Example::

        grade(100, 100), grade(101, 100), grade(200, 100)  # "kept", "slight", "over"
    """
    if peak <= amount:
        return KEPT
    return SLIGHT if peak <= amount * (1 + TOLERANCE) else OVER


def boundaries(limit: Limit, start: float, end: float, most: int) -> list[float]:
    """The window boundaries of ``limit`` (where a fixed window of its period, or its calendar
    unit, starts afresh) from ``start`` to ``end`` seconds since the epoch; at most ``most``,
    or none when there would be more."""
    found: list[float] = []
    at, after = window(start, limit)
    if at < start:
        at = after
    while at <= end:
        if len(found) == most:
            return []
        found.append(at)
        at = window(at, limit)[1]
    return found


def _bars(
    axes: Axes, points: Sequence[tuple[float, int]], width: float, m: Measures, ids: Sequence[str]
) -> None:
    """The bars of ``points`` (``(seconds, most)`` for consecutive bins of ``width``), each
    series one filled step patch: blue to the limit, then amber or red by the bin's own grade,
    and the highest bin past the limit numbered; ``ids`` are ``WHOLE`` or ``CLOSE``."""
    if not points:
        return
    amount = m.amount
    edges = [t for t, _ in points] + [points[-1][0] + width]
    within = [min(most, amount) for _, most in points]
    tops = {
        kind: [
            most if grade(most, amount) == kind else low
            for (_, most), low in zip(points, within, strict=True)
        ]
        for kind in (SLIGHT, OVER)
    }
    labels = ("within the limit", f"up to {TOLERANCE:.0%} over", f"more than {TOLERANCE:.0%} over")
    for prefix, label, kind in zip(ids[:3], labels, (KEPT, SLIGHT, OVER), strict=True):
        values, bottom = (within, [0] * len(within)) if kind == KEPT else (tops[kind], within)
        if values == bottom:  # nothing to draw: one empty step keeps the series and its id
            values, bottom, edges_drawn = [0], [0], [edges[0], edges[-1]]
        else:
            edges_drawn = edges
        axes.stairs(
            values,
            edges_drawn,
            baseline=bottom,
            fill=True,
            color=BARS[kind],
            linewidth=0,
            label=label,
            gid=series_id(prefix, m.limit),
        )
    start, most = max(points, key=lambda point: point[1])
    if most > amount:  # the excess named, however thin its bar
        axes.annotate(
            f"{most:,}",
            (start + width / 2, most),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize="small",
            fontweight="bold",
            color=TITLES[grade(most, amount)],
            gid=series_id(ids[3], m.limit),
        )


def _backdrop(
    axes: Axes,
    simulation: Simulation,
    index: int,
    span: tuple[float, float],
    most: int,
    *,
    named: bool = False,
) -> None:
    """The attack shaded (a band along the top), the limit, the tolerance band above it and
    at most ``most`` window boundaries of the limit at ``index`` within ``span`` (seconds
    from the first event), each ``named`` beside its line."""
    m = simulation.measures[index]
    limit = simulation.replay.tallies[index].limit
    for begin, end in simulation.marks:
        if end < span[0] or begin > span[1]:
            continue
        axes.axvspan(begin, end, color=ATTACK, alpha=0.10, linewidth=0)
        axes.axvspan(
            begin, end, ymin=0.95, color=ATTACK, alpha=0.6, linewidth=0, zorder=3, label="attack"
        )
    amount = m.amount
    axes.axhspan(
        amount,
        amount * (1 + TOLERANCE),
        color=BARS[SLIGHT],
        alpha=0.18,
        linewidth=0,
        label=f"tolerance: up to {TOLERANCE:.0%} over",
    )
    axes.axhline(
        amount,
        color="black",
        linestyle="--",
        linewidth=1,
        label="the limit",
        gid=series_id("limit", m.limit),
    )
    first = simulation.replay.first
    name = f"{spoken(limit.period)} boundary"
    for at in boundaries(limit, span[0] + first, span[1] + first, most):
        axes.axvline(
            at - first,
            color="0.2",
            linestyle=":",
            linewidth=1.2,
            zorder=4,
            label=f"a {name}: a fixed window starts afresh",
            gid=series_id("boundary", m.limit),
        )
        if named:
            axes.text(
                at - first,
                0.72,
                f"{name} ",
                transform=axes.get_xaxis_transform(),
                rotation=90,
                ha="right",
                va="center",
                fontsize="x-small",
                color="0.2",
            )


def _panel(
    sub: SubFigure, simulation: Simulation, index: int, top: float, bottom: bool
) -> list[Axes]:
    """One limit's panel: its close-up (with a zoom) and the whole run, on ``0..top``."""
    m = simulation.measures[index]
    zoom = simulation.zoom
    if zoom is None:
        drawn = [sub.subplots()]
    else:
        drawn = list(sub.subplots(1, 2, width_ratios=(2, 3), sharey=True))
        close = drawn[0]
        _backdrop(close, simulation, index, (zoom.start, zoom.end), CLOSE_BOUNDARIES, named=True)
        _bars(close, m.zoom, zoom.width, m, CLOSE)
        close.set_xlim(zoom.start, zoom.end)
        if bottom:
            which = "the attack" if len(simulation.marks) == 1 else "the first attack"
            close.set_xlabel(f"{which}, close up (bins of {seconds(zoom.width)})", fontsize="small")
    whole = drawn[-1]
    points = m.fullest
    ends = (points[0][0], points[-1][0] + simulation.width) if points else (0.0, simulation.width)
    _backdrop(whole, simulation, index, ends, BOUNDARIES)
    _bars(whole, points, simulation.width, m, WHOLE)
    whole.margins(x=0.01)
    if bottom:
        whole.set_xlabel(f"the whole run (bins of {seconds(simulation.width)})", fontsize="small")
    kind = grade(m.peak, m.amount)
    verdict = {
        KEPT: "kept",
        SLIGHT: f"{m.peak / m.amount:.2f}x the limit, within {TOLERANCE:.0%}",
        OVER: f"{m.peak / m.amount:.2f}x the limit",
    }[kind]
    sub.suptitle(
        f"{m.algorithm} {m.amount:,}/{spoken(m.period)}: at most {m.peak:,} ({verdict})",
        x=0.01,
        ha="left",
        fontsize="medium",
        color=TITLES[kind],
        fontweight="bold" if kind == OVER else "normal",
        gid=series_id(f"grade-{kind}", m.limit),
    )
    for axes in drawn:
        axes.set_ylim(0, top)
        axes.tick_params(labelsize="small")
        axes.grid(axis="y", color="0.9", linewidth=0.6)
        axes.set_axisbelow(True)
    return drawn


def figure(simulation: Simulation) -> Figure:
    """The figure of ``admitted`` (see the module's docstring), not yet saved."""
    made = new_figure()
    count = max(len(simulation.measures), 1)
    columns = 1 if count < 4 else 2
    rows = -(-count // columns)
    wide = 6.5 if simulation.zoom is not None else 5.0
    made.set_size_inches(wide * columns if columns > 1 else 8, 1.5 + 2.0 * rows)
    subs = made.subfigures(rows, columns, squeeze=False)
    top = 1.2 * max(
        [m.amount * (1 + TOLERANCE) for m in simulation.measures]
        + [m.peak for m in simulation.measures]
        + [1]
    )
    handles: dict[str, Any] = {}
    for index, sub in enumerate(subs.flat):
        if index >= len(simulation.measures):
            continue
        drawn = _panel(
            sub, simulation, index, top, index // columns == rows - 1 or index + columns >= count
        )
        for axes in drawn:
            found, labels = axes.get_legend_handles_labels()
            handles.update(zip(labels, found, strict=True))
    first = simulation.measures[0] if simulation.measures else None
    window_name = spoken(first.period) if first is not None else "period"
    whose = "" if simulation.keys == 1 else ", for any one key"
    made.suptitle(
        f"{simulation.name}: the most admitted in one {window_name}{whose}, against the limit",
        fontsize="large",
    )
    made.supylabel(f"admitted in one {window_name}", fontsize="medium")
    entries = sorted(handles, key=lambda label: [label.startswith(n) for n in LEGEND].index(True))
    order = [label for column in range(COLUMNS) for label in entries[column::COLUMNS]]
    made.legend(
        [handles[label] for label in order],
        order,
        loc="outside lower center",
        ncols=min(len(handles), COLUMNS),
        fontsize="small",
        frameon=False,
    )
    return made
