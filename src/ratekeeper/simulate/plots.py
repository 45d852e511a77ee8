"""The plots of a simulation, drawn with matplotlib (``pip install 'ratekeeper[plot]'``).

The figures, each returned as the path written:

- ``admitted``: one panel per limit: per time bin, the most units one key held in one window
  of the limit's period, against the limit (what is over it in red), the attack shaded;
- ``errors``: false allows and false refusals per limit, as shares of the requests;
- ``delays``: the distribution of the shaper's delays (every limit whose hits waited);
- ``leases`` (a simulation with leases only): units admitted per window of each limit's
  period, exact and leased, against the limit.

Every series carries a ``gid`` (``admitted-<limit>``, ``over-<limit>``, ``limit-<limit>``,
``false-allows-<limit>``, ``false-refusals-<limit>``, ``delays-<limit>``, ``exact-<limit>``,
``leased-<horizon>-<limit>``, ``limit-<limit>``), which an SVG keeps as
the ``id`` of its group, so that a reader or a test can find it. Figures are made with
``matplotlib.figure.Figure`` (no pyplot, no global state) and matplotlib is imported only here,
when a plot is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.core.periods import spoken
from ratekeeper.core.wording import many
from ratekeeper.simulate.leases import LeaseMeasures
from ratekeeper.simulate.simulation import Simulation

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def require() -> None:
    """Raise ``MissingExtraError`` naming the pip command unless matplotlib can be imported."""
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise MissingExtraError("matplotlib", "plot") from None


def _figure() -> Figure:
    require()
    import matplotlib
    from matplotlib.figure import Figure

    matplotlib.rcParams["svg.hashsalt"] = "ratekeeper"  # the same ids on every run
    return Figure(figsize=(8, 4.5), layout="constrained")


def series_id(prefix: str, label: str) -> str:
    """The ``gid`` of a series: ``prefix-label`` with anything but letters, digits, ``_`` and
    ``-`` replaced by ``_``."""
    clean = "".join(c if c.isalnum() or c in "_-" else "_" for c in label)
    return f"{prefix}-{clean}"


def _save(figure: Figure, folder: Path, name: str, image: str) -> Path:
    path = folder / f"{name}.{image}"
    metadata: dict[str, Any] = {"Date": None} if image in ("svg", "pdf") else {}
    figure.savefig(path, format=image, metadata=metadata)
    return path


def admitted(simulation: Simulation, folder: Path, image: str = "svg") -> Path:
    """One panel per limit, on shared axes: per time bin, the most units one key held in one
    window of the limit's period ending at a unit admitted in the bin (``Measures.fullest``),
    blue up to the limit and red above it, against the limit (a dashed line); the attack the
    generator made (``Simulation.marks``) shaded. A limit that keeps its promise never shows
    red, whatever the bins' width; a shaper's delayed hits count when they proceed."""
    figure = _figure()
    count = max(len(simulation.measures), 1)
    columns = 1 if count < 4 else 2
    rows = -(-count // columns)
    figure.set_size_inches(5 * columns if columns > 1 else 8, 1.3 + 1.9 * rows)
    grid = figure.subplots(rows, columns, squeeze=False, sharex=True, sharey=True)
    width = simulation.width
    one_key = simulation.keys == 1
    for index, axes in enumerate(grid.flat):
        if index >= len(simulation.measures):
            axes.set_visible(False)
            continue
        measures = simulation.measures[index]
        amount = measures.amount
        starts = [t for t, _ in measures.fullest]
        values = [most for _, most in measures.fullest]
        within = [min(most, amount) for most in values]
        over = [max(most - amount, 0) for most in values]
        for begin, end in simulation.marks:  # behind the bars, and a band along the top
            axes.axvspan(begin, end, color="tab:orange", alpha=0.15, linewidth=0)
            axes.axvspan(
                begin, end, ymin=0.93, color="tab:orange", linewidth=0, zorder=3, label="attack"
            )
        axes.bar(
            starts,
            within,
            width=width,
            align="edge",
            color="tab:blue",
            label="within the limit",
            gid=series_id("admitted", measures.limit),
        )
        axes.bar(
            starts,
            over,
            bottom=within,
            width=width,
            align="edge",
            color="tab:red",
            label="over the limit",
            gid=series_id("over", measures.limit),
        )
        axes.axhline(
            amount,
            color="black",
            linestyle="--",
            linewidth=1,
            label="the limit",
            gid=series_id("limit", measures.limit),
        )
        peak = measures.peak
        verdict = f"{peak / amount:.2f}x the limit" if peak > amount else "kept"
        axes.set_title(
            f"{measures.algorithm} {amount:,}/{spoken(measures.period)}: "
            f"at most {peak:,} ({verdict})",
            fontsize="medium",
            color="tab:red" if peak > amount else "black",
            loc="left",
        )
        axes.margins(x=0.01)
        axes.tick_params(labelsize="small")
        axes.grid(axis="y", color="0.9", linewidth=0.6)
        axes.set_axisbelow(True)
    first = simulation.measures[0] if simulation.measures else None
    window = spoken(first.period) if first is not None else "period"
    whose = "" if one_key else ", for any one key"
    figure.suptitle(
        f"{simulation.name}: the most admitted in one {window}{whose}, against the limit",
        fontsize="large",
    )
    for axes in grid[-1]:
        axes.set_xlabel(f"seconds from the first event (bins of {_seconds(width)})")
    figure.supylabel(f"admitted in one {window}", fontsize="medium")
    handles, labels = grid.flat[0].get_legend_handles_labels()
    named = dict(zip(labels, handles, strict=True))
    figure.legend(
        list(named.values()),
        list(named),
        loc="outside lower center",
        ncols=len(named),
        fontsize="small",
        frameon=False,
    )
    return _save(figure, folder, "admitted", image)


def _seconds(value: float) -> str:
    """Seconds as a label: ``0.05 s``, ``2 s``, ``2 minutes``."""
    return f"{value:g} s" if value < 60 else spoken(value)


def errors(simulation: Simulation, folder: Path, image: str = "svg") -> Path:
    """False allows and false refusals per limit, as percentages of its requests."""
    figure = _figure()
    axes = figure.add_subplot()
    labels = [measures.limit for measures in simulation.measures]
    places = list(range(len(labels)))
    for offset, name, values in (
        (-0.2, "false-allows", [m.false_allow_share * 100 for m in simulation.measures]),
        (0.2, "false-refusals", [m.false_refusal_share * 100 for m in simulation.measures]),
    ):
        bars = axes.bar(
            [place + offset for place in places], values, width=0.4, label=name.replace("-", " ")
        )
        for bar, label in zip(bars, labels, strict=True):
            bar.set_gid(series_id(name, label))
    axes.set_xticks(places, labels, rotation=30, ha="right", fontsize="small")
    axes.set_ylabel("% of requests")
    axes.set_title(f"Error against the exact sliding log: {simulation.name}")
    axes.legend(fontsize="small")
    return _save(figure, folder, "errors", image)


def delays(simulation: Simulation, folder: Path, image: str = "svg") -> Path:
    """The distribution (CDF) of the delays of admitted hits, per limit whose hits waited."""
    figure = _figure()
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
    return _save(figure, folder, "delays", image)


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
    figure = _figure()
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
    return _save(figure, folder, name, image)


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
