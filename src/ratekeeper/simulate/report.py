"""A simulation's numbers: a table for the terminal, and a report directory (JSON and plots)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ratekeeper.core.wording import many
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
        f"{simulation.name}: {many(simulation.events, 'event')}, {many(simulation.keys, 'key')}, "
        f"{simulation.duration:,.1f} s"
        + (f" (and {many(retried, 'retry', 'retries')} in all)" if retried else "")
    )
    text = head + "\n\n" + table(HEADERS, rows(simulation))
    leases = simulation.leases
    if leases is not None:
        options = leases.options
        text += (
            f"\n\nLeased: {many(leases.instances, 'instance')} ({leases.route}) sharing one store, "
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
    per_event: bool = False,
) -> list[Path]:
    """Write ``results.json`` (the summaries, with ``extra`` merged in; with ``per_event``, the
    time series and each event's decisions too: see ``Simulation.to_dict``) and, with
    ``plots``, the plots (see ``ratekeeper.simulate.plots``) into ``directory``; return the
    paths written.

    All or nothing: matplotlib is checked before anything is written (``MissingExtraError``),
    the files are written into a new folder beside ``directory`` and moved into it only once
    all are written; on any error the folder made is removed, and ``directory`` is left as it
    was (not created, if it did not exist)."""
    folder = Path(directory).absolute()
    if plots:
        from ratekeeper.simulate import plots as drawing

        drawing.require()
    data = simulation.to_dict(per_event=per_event)
    if extra:
        data.update(extra)
    text = json.dumps(data, indent=None if per_event else 2) + "\n"
    base = folder.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    # A new folder of a random name, made as any folder is here (mkdtemp's would be 0o700).
    staging = base / f".{folder.name}.{uuid.uuid4().hex[:12]}"
    staging.mkdir()
    try:
        (staging / "results.json").write_text(text)
        names = ["results.json"]
        if plots:
            names.extend(path.name for path in drawing.draw_all(simulation, staging, image=image))
        if folder.exists():
            for name in names:
                os.replace(staging / name, folder / name)
            staging.rmdir()
        else:
            folder.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [Path(directory) / name for name in names]
