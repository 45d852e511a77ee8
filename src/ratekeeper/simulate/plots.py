"""The plots of a simulation, drawn with matplotlib (``pip install 'ratekeeper[plot]'``).

The figures, each returned as the path written:

- ``admitted``: units admitted over time per limit, against what was offered and, for a trace
  of one key, the limit's sustained rate;
- ``errors``: false allows and false refusals per limit, as shares of the requests;
- ``delays``: the distribution of the shaper's delays (every limit whose hits waited);
- ``leases`` (a simulation with leases only): units admitted per window of each limit's
  period, exact and leased, against the limit.

Every series carries a ``gid`` (``admitted-<limit>``, ``offered``, ``limit``,
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
from ratekeeper.simulate.leases import LeaseMeasures
from ratekeeper.simulate.simulation import Simulation

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure() -> Figure:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("matplotlib", "plot") from None
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
    """Units admitted per time bin for each limit, with the offered load and (one key) the
    limit's sustained rate per bin."""
    figure = _figure()
    axes = figure.add_subplot()
    width = simulation.width
    offered = simulation.offered
    axes.step(
        [t for t, _ in offered],
        [units for _, units in offered],
        where="post",
        color="0.75",
        label="offered",
        gid="offered",
    )
    for measures in simulation.measures:
        axes.step(
            [t for t, _ in measures.series],
            [units for _, units in measures.series],
            where="post",
            label=measures.limit,
            gid=series_id("admitted", measures.limit),
        )
    if simulation.keys == 1 and simulation.measures:
        first = simulation.measures[0]
        level = first.amount * width / first.period
        axes.axhline(
            level,
            color="black",
            linestyle="--",
            linewidth=1,
            label="limit (sustained)",
            gid="limit",
        )
    axes.set_xlabel("seconds from the first event")
    axes.set_ylabel(f"units per {width:.3g} s")
    axes.set_title(f"Admitted over time: {simulation.name}")
    axes.legend(fontsize="small", loc="upper right")
    return _save(figure, folder, "admitted", image)


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
    axes.set_xlabel("delay (s)")
    axes.set_ylabel("share of admitted hits")
    axes.set_title(f"Delays: {simulation.name}")
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
            f"{exact.limit}: {first.leases.instances} instances, ttl "
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
