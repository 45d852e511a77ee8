"""A simulation's numbers: a table for the terminal, and a report directory (JSON and plots)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ratekeeper.simulate.simulation import Simulation

HEADERS = (
    "limit",
    "admitted",
    "refused",
    "false allows",
    "false refusals",
    "error",
    "peak/window",
    "delay p50/p99/max",
    "fairness",
    "key peak p50/p99",
)


def share(value: float) -> str:
    """A share as a percentage with up to four decimals, ``0%`` only when exactly 0."""
    if not value:
        return "0%"
    for decimals in (1, 2, 3, 4):
        text = f"{value * 100:.{decimals}f}%"
        if text.strip("0.%"):
            return text
    return f"{value * 100:.1e}%"


def seconds(value: float) -> str:
    return "0" if not value else f"{value:.3g}s"


def rows(simulation: Simulation) -> list[list[str]]:
    """The table's rows, one per limit."""
    result = []
    for measures in simulation.measures:
        delays = measures.delays
        result.append(
            [
                measures.limit,
                f"{measures.admitted:,}",
                f"{measures.refused:,}",
                f"{measures.false_allows:,}",
                f"{measures.false_refusals:,}",
                share(measures.error_share),
                f"{measures.peak:,} ({measures.peak / measures.amount:.2f}x)",
                "/".join(seconds(value) for value in (delays.p50, delays.p99, delays.max)),
                f"{measures.fairness:.3f}",
                f"{measures.peaks['p50']:g}/{measures.peaks['p99']:g}",
            ]
        )
    return result


def table(headers: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A markdown table; every column but the first right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *body, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(width) if index == 0 else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * width if i == 0 else "-" * (width - 1) + ":" for i, width in enumerate(widths)]
    return "\n".join([line(headers), "| " + " | ".join(rule) + " |", *map(line, body)])


LEASE_HEADERS = (
    "limit",
    "admitted exact",
    "admitted leased",
    "difference",
    "ratio",
    "round trips exact",
    "round trips leased",
    "peak/window exact",
    "peak/window leased",
)


def lease_rows(simulation: Simulation) -> list[list[str]]:
    """The rows of the leased runs' table, one per limit (none without leases)."""
    if simulation.leases is None:
        return []
    return [
        [
            measures.limit,
            f"{measures.exact:,}",
            f"{measures.admitted:,}",
            f"{measures.difference:+,}",
            f"{measures.ratio:.4f}",
            f"{measures.decisions:,}",
            f"{measures.exchanges:,}",
            f"{measures.exact_peak:,} ({measures.exact_peak / measures.amount:.2f}x)",
            f"{measures.peak:,} ({measures.peak / measures.amount:.2f}x)",
        ]
        for measures in simulation.leases.measures
    ]


def summary(simulation: Simulation) -> str:
    """What was replayed, and the table of measures (and of the leased runs, if any)."""
    retried = sum(measures.retries for measures in simulation.measures)
    head = (
        f"{simulation.name}: {simulation.events:,} events, {simulation.keys:,} keys, "
        f"{simulation.duration:,.1f} s" + (f" (and {retried:,} retries in all)" if retried else "")
    )
    text = head + "\n\n" + table(HEADERS, rows(simulation))
    leases = simulation.leases
    if leases is not None:
        options = leases.options
        text += (
            f"\n\nLeased: {leases.instances:,} instances ({leases.route}) sharing one store, "
            f"ttl {options.ttl:g} s, horizon {options.horizon:g} s, share {options.share:g}; "
            "admitted in units, against the same limit exact on one store\n\n"
            + table(LEASE_HEADERS, lease_rows(simulation))
        )
    return text


def write(
    simulation: Simulation,
    directory: str | Path,
    *,
    plots: bool = True,
    extra: dict[str, Any] | None = None,
    image: str = "svg",
) -> list[Path]:
    """Write ``results.json`` (the numbers, with ``extra`` merged in) and, with ``plots``, the
    plots (see ``ratekeeper.simulate.plots``) into ``directory``; return the paths written."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    data = simulation.to_dict()
    if extra:
        data.update(extra)
    path = folder / "results.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    written = [path]
    if plots:
        from ratekeeper.simulate import plots as drawing

        written.extend(drawing.draw_all(simulation, folder, image=image))
    return written
