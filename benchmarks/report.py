"""Markdown for the results: the machine header, tables and number formats."""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import ratekeeper
from benchmarks.contenders import versions
from benchmarks.trials import SAMPLE
from ratekeeper.simulate.report import table as markdown_table

MISSING = "—"


def command() -> str:
    """The command line that started this run."""
    return shlex.join([sys.executable, "-m", "benchmarks", *sys.argv[1:]])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    try:
        return ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def source() -> str:
    """A fingerprint of the ratekeeper source measured: its files change between runs."""
    root = Path(ratekeeper.__file__).parent
    files = sorted([*root.rglob("*.py"), *root.rglob("*.lua")])
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    newest = max(path.stat().st_mtime for path in files)
    changed = datetime.fromtimestamp(newest, UTC).isoformat(timespec="seconds")
    return f"sha256 {digest.hexdigest()[:12]} over {len(files)} files, newest change {changed}"


def machine() -> list[str]:
    """Where this run was made, as markdown bullets."""
    library_versions = ", ".join(f"{name} {number}" for name, number in versions().items())
    return [
        f"- Command: `{command()}`",
        f"- Date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        f"- Python: {platform.python_implementation()} {sys.version}",
        f"- Platform: {platform.platform()}",
        f"- CPU: {os.cpu_count()} x {_cpu_model()}",
        f"- Libraries: {library_versions}",
        f"- ratekeeper source: {source()}",
        f"- Load average at start: {load()}",
    ]


def header() -> list[str]:
    """Where and how this run was made (the in-memory benchmarks)."""
    return [
        "# ratekeeper benchmarks",
        "",
        *machine(),
        "",
        "Single-threaded, one process, one run. Each number is decisions per second through the "
        "library's public per-hit call: the best of the repeats, each a fixed number of calls "
        "timed with `time.perf_counter` with the garbage collector off (as `timeit` does). The "
        "libraries of a row take turns repeat by repeat. Before and after each measurement a "
        f"sample of {SAMPLE} hits is checked to be all allowed (allow path) or all denied "
        "(deny path), so that no measurement times the wrong path. "
        "Absolute numbers depend on the machine and its load; the ratios measured in the same "
        "run are what count.",
    ]


def rate(value: float | None) -> str:
    return MISSING if value is None else f"{value:,.0f}"


def ratio(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}x"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table, as lines; every column but the first is right-aligned."""
    return markdown_table(headers, rows).split("\n")


class Output:
    """Markdown printed as it is produced and kept for ``--output``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.started = time.perf_counter()

    def emit(self, *lines: str) -> None:
        for text in lines:
            print(text, flush=True)
        self.lines.extend(lines)

    def progress(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f}s] {text}", file=sys.stderr, flush=True)

    def finish(self, path: Path | None) -> None:
        """The load average at the end and the run's length emitted, and everything emitted
        written to ``path`` (``--output``), if given."""
        self.emit(f"Load average at the end {load()}; {time.perf_counter() - self.started:.0f} s.")
        if path is not None:
            path.write_text("\n".join(self.lines) + "\n")
