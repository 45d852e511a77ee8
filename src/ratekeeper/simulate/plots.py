"""The plots of a simulation, drawn with matplotlib (``pip install 'ratekeeper[plot]'``).

The figures, each returned as the path written:

- ``admitted``: one panel per limit: per time bin, the most units one key held in one window
  of the limit's period, against the limit, graded by how far over it went, a short attack
  close up and the window boundaries marked (``ratekeeper.simulate.admitted``);
- ``errors``: false allows and false refusals per limit, as shares of the requests, and a
  shaper's refusals for a full queue apart (its bound, not an error);
- ``delays``: the distribution of the shaper's delays (every limit whose hits waited);
- ``leases`` (a simulation with leases only): units admitted per window of each limit's
  period, exact and leased, against the limit.

Every series carries a ``gid`` (``admitted-<limit>``, ``over-<limit>`` and the others of
``ratekeeper.simulate.admitted``, ``false-allows-<limit>``, ``false-refusals-<limit>``,
``full-queue-<limit>``, ``delays-<limit>``, ``exact-<limit>``, ``leased-<horizon>-<limit>``,
``limit-<limit>``), which an SVG keeps as the ``id`` of its group, so that a reader or a test
can find it. Figures are made with ``matplotlib.figure.Figure`` (no pyplot, no global state)
and matplotlib is imported only when a plot is drawn (``ratekeeper.simulate.canvas``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from textwrap import fill
from typing import TYPE_CHECKING

from ratekeeper.core.wording import many
from ratekeeper.simulate.admitted import figure as admitted_figure
from ratekeeper.simulate.canvas import new_figure, require, save, series_id
from ratekeeper.simulate.leases import LeaseMeasures
from ratekeeper.simulate.simulation import Simulation

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "admitted",
    "delays",
    "draw_all",
    "errors",
    "errors_figure",
    "leases",
    "require",
    "series_id",
]

#: Why a shaper's refusals for a full queue are not errors, under the errors plot.
QUEUE_NOTE = (
    "A shaper (leaky_shaper) queues what it cannot pass at once and lets it through at its "
    "rate; it refuses, by design, what its queue cannot hold (hatched). It is judged when its "
    "hits leave the queue: a refusal is false only if the queue had room and the sliding log "
    "would have let the hit through. Its waits are in the delays plot."
)


def admitted(simulation: Simulation, folder: Path, image: str = "svg") -> Path:
    """One panel per limit: per time bin, the most units one key held in one window of the
    limit's period ending at a unit admitted in the bin (``Measures.fullest``), graded against
    the limit, a short attack close up and the window boundaries marked (see
    ``ratekeeper.simulate.admitted``). A limit that keeps its promise never shows amber or red,
    whatever the bins' width; a shaper's delayed hits count when they proceed."""
    return save(admitted_figure(simulation), folder, "admitted", image)


def errors(simulation: Simulation, folder: Path, image: str = "svg") -> Path:
    """False allows and false refusals per limit, as percentages of its requests; a shaper's
    refusals for a full queue stacked on its false refusals, hatched, and why under the axes."""
    return save(errors_figure(simulation), folder, "errors", image)


def errors_figure(simulation: Simulation) -> Figure:
    """The figure of ``errors``, not yet saved."""
    figure = new_figure()
    axes = figure.add_subplot()
    measures = simulation.measures
    labels = [m.limit for m in measures]
    places = list(range(len(labels)))
    refusals = [m.false_refusal_share * 100 for m in measures]
    for offset, name, values in (
        (-0.2, "false-allows", [m.false_allow_share * 100 for m in measures]),
        (0.2, "false-refusals", refusals),
    ):
        bars = axes.bar(
            [place + offset for place in places], values, width=0.4, label=name.replace("-", " ")
        )
        for bar, label in zip(bars, labels, strict=True):
            bar.set_gid(series_id(name, label))
    shapers = [i for i, m in enumerate(measures) if m.algorithm == "leaky_shaper"]
    if shapers:
        bars = axes.bar(
            [places[i] + 0.2 for i in shapers],
            [measures[i].full_queue / measures[i].requests * 100 for i in shapers],
            width=0.4,
            bottom=[refusals[i] for i in shapers],
            color="none",
            edgecolor="0.35",
            hatch="///",
            linewidth=0.8,
            label="refused: a shaper's queue full (by design)",
        )
        for bar, i in zip(bars, shapers, strict=True):
            bar.set_gid(series_id("full-queue", labels[i]))
        note = axes.set_xlabel(fill(QUEUE_NOTE, 105), fontsize="small", loc="left")
        note.set_gid("note-queue")
    axes.set_xticks(places, labels, rotation=30, ha="right", fontsize="small")
    axes.set_ylabel("% of requests")
    axes.set_title(f"Error against the exact sliding log: {simulation.name}")
    axes.set_ylim(0, max(1.0, axes.get_ylim()[1]) * 1.2)  # a row above the bars for the legend
    axes.legend(loc="upper center", ncols=3, fontsize="small", frameon=False)
    return figure


def delays(simulation: Simulation, folder: Path, image: str = "svg") -> Path:
    """The distribution (CDF) of the delays of admitted hits, per limit whose hits waited."""
    figure = new_figure()
    axes = figure.add_subplot()
    drawn = False
    for tally, measures in zip(simulation.replay.tallies, simulation.measures, strict=True):
        waited = sorted(tally.delays)
        if not waited:
            continue
        drawn = True
        zeros = measures.admitted - len(waited)
        total = measures.admitted
        axes.step(
            [0.0, *waited],
            [zeros / total, *((zeros + i + 1) / total for i in range(len(waited)))],
            where="post",
            label=measures.limit,
            gid=series_id("delays", measures.limit),
        )
    if not drawn:
        axes.text(0.5, 0.5, "no admitted hit waited", ha="center", transform=axes.transAxes)
    else:
        axes.legend(fontsize="small", loc="lower right")
    axes.set_xlabel("seconds an admitted hit waited before it proceeded")
    axes.set_ylabel("share of admitted hits that waited at most that")
    axes.set_title(f"Delays of admitted hits: {simulation.name}")
    return save(figure, folder, "delays", image)


def leases(
    simulations: Simulation | Sequence[Simulation],
    folder: Path,
    image: str = "svg",
    name: str = "leases",
) -> Path:
    """Units admitted per window of each limit's period, exact and leased, against the limit;
    one panel per limit. Given several simulations of one trace (the same limits, other lease
    options), one leased line per simulation, labelled by its options."""
    runs = [simulations] if isinstance(simulations, Simulation) else list(simulations)
    leased = [run for run in runs if run.leases is not None]
    if not leased:
        raise ValueError("no leased run to plot: simulate with leases=LeaseOptions(...)")
    first = leased[0]
    assert first.leases is not None
    count = len(first.leases.measures)
    figure = new_figure()
    figure.set_size_inches(8, 1.5 + 3.5 * count)
    for index, axes in enumerate(figure.subplots(count, 1, squeeze=False)[:, 0]):
        exact = first.leases.measures[index]
        axes.step(
            _edges(exact),
            _closed([units for _, units, _ in exact.windows]),
            where="post",
            color="black",
            linewidth=2.5,
            alpha=0.35,
            label="exact, one store",
            gid=series_id("exact", exact.limit),
        )
        for run in leased:
            assert run.leases is not None
            measures = run.leases.measures[index]
            options = run.leases.options
            label = f"leased, horizon {options.horizon:g} s" + (
                "" if len(leased) == 1 else f" ({measures.ratio:.2%} of exact)"
            )
            axes.step(
                _edges(measures),
                _closed([units for _, _, units in measures.windows]),
                where="post",
                linewidth=1,
                label=label,
                gid=series_id(f"leased-{options.horizon:g}", measures.limit),
            )
        if first.keys == 1:
            axes.axhline(
                exact.amount * exact.window / exact.period,
                color="tab:red",
                linestyle="--",
                linewidth=1,
                label="limit",
                gid=series_id("limit", exact.limit),
            )
        axes.set_title(
            f"{exact.limit}: {many(first.leases.instances, 'instance')}, ttl "
            f"{first.leases.options.ttl:g} s, share {first.leases.options.share:g}",
            fontsize="medium",
        )
        axes.set_xlabel("seconds from the first event")
        axes.set_ylabel(f"units admitted per {exact.window:g} s window")
        axes.legend(fontsize="small", loc="best", framealpha=0.9)
    figure.suptitle(f"Exact and leased, per window: {first.name}")
    return save(figure, folder, name, image)


def _edges(measures: LeaseMeasures) -> list[float]:
    """Where each window of ``measures`` starts, and where the last ends."""
    times = [t for t, _, _ in measures.windows]
    return [*times, times[-1] + measures.window] if times else [0.0]


def _closed(values: list[int]) -> list[int]:
    """``values`` with the last repeated, so that a step plot draws the last window too."""
    return [*values, values[-1]] if values else [0]


def draw_all(simulation: Simulation, folder: str | Path, *, image: str = "svg") -> list[Path]:
    """All three plots into ``folder``, as ``image`` files (``svg`` or ``png``), and the
    leased runs' (``leases``) when there are any."""
    target = Path(folder)
    drawn = [
        admitted(simulation, target, image),
        errors(simulation, target, image),
        delays(simulation, target, image),
    ]
    if simulation.leases is not None:
        drawn.append(leases(simulation, target, image))
    return drawn
