"""The soak's report: a table per minute, a summary with its verdict, and a plot.

``verdict`` is what the exit status says: every Redis key has a TTL, and no process's RSS grew
more than ``MAX_GROWTH`` from the end of the warm-up to the end of the run (``Soak.growth``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median

from benchmarks.soak.load import Interval
from benchmarks.soak.redis_stats import TtlScan

#: The most a process's RSS may grow after the warm-up, as a fraction.
MAX_GROWTH = 0.10


@dataclass(frozen=True)
class Sample:
    """One interval: its load, and at its end each process's RSS and Redis's memory (MB) and
    key count."""

    minute: int
    load: Interval
    rss: dict[str, float]
    redis_mb: float
    redis_keys: int


@dataclass
class Soak:
    """A whole run: what it was told, its samples, and the TTL scan at the end."""

    settings: dict[str, object]
    warmup: int
    interval: int
    samples: list[Sample] = field(default_factory=list)
    scan: TtlScan | None = None

    def rss_ends(self) -> tuple[dict[str, float], dict[str, float]] | None:
        """Each process's RSS (MB) as the warm-up ends and as the run ends: the median of the
        ``span`` samples from the warm-up's last on, and of the last ``span``, ``span`` a fifth
        of the samples after the warm-up (at least 1). RSS goes up and down by several per cent
        as caches turn over, so one sample at each end would measure that swing. None when
        the run ended within the warm-up."""
        after = len(self.samples) - self.warmup
        if after <= 0:
            return None
        span = max(1, after // 5)
        begin = self.warmup - 1 if self.warmup else 0
        return _medians(self.samples[begin : begin + span]), _medians(self.samples[-span:])

    def growth(self) -> dict[str, float]:
        """Each process's RSS growth after the warm-up (``rss_ends``), as a fraction."""
        ends = self.rss_ends()
        if ends is None:
            return {}
        start, end = ends
        return {name: end[name] / start[name] - 1 for name in start if start[name] and name in end}

    def problems(self) -> list[str]:
        """Why the run failed; empty when it passed."""
        found = []
        if self.scan is not None and self.scan.without_ttl:
            found.append(f"{self.scan.without_ttl} of {self.scan.keys} Redis keys have no TTL")
        for name, grown in self.growth().items():
            if grown > MAX_GROWTH + 1e-9:  # 110 / 100 - 1 is a hair above 0.10 in floats
                found.append(f"{name}'s RSS grew {grown:.1%} after the warm-up")
        return found


def _medians(samples: list[Sample]) -> dict[str, float]:
    """Each process's median RSS over ``samples``."""
    names = [name for name in samples[0].rss if all(name in one.rss for one in samples)]
    return {name: median(one.rss[name] for one in samples) for name in names}


def progress(sample: Sample, interval: int) -> str:
    """The line printed as each interval ends."""
    load = sample.load
    rss = " ".join(f"{size:.0f}" for size in sample.rss.values())
    return (
        f"minute {sample.minute:3d}: {load.requests / interval:7.0f} req/s  allowed "
        f"{load.allowed} limited {load.limited} degraded {load.degraded} errors {load.errors}  "
        f"p50 {load.p50 * 1e3:.1f} ms p99 {load.p99 * 1e3:.1f} ms  RSS MB {rss}  "
        f"redis {sample.redis_mb:.0f} MB {sample.redis_keys} keys"
    )


def markdown(soak: Soak, command: str) -> str:
    samples = soak.samples
    names = list(samples[0].rss) if samples else []
    lines = [
        "# Soak run",
        "",
        f"`{command}`",
        "",
        "| minute | req/s | allowed | limited | degraded | errors | p50 ms | p99 ms | "
        + " | ".join(f"{name} RSS MB" for name in names)
        + " | Redis MB | Redis keys |",
        "|" + "---:|" * (9 + len(names) + 1),
    ]
    for sample in samples:
        load = sample.load
        cells = [
            str(sample.minute),
            f"{load.requests / soak.interval:,.0f}",
            f"{load.allowed:,}",
            f"{load.limited:,}",
            f"{load.degraded:,}",
            f"{load.errors:,}",
            f"{load.p50 * 1e3:.1f}",
            f"{load.p99 * 1e3:.1f}",
            *(f"{sample.rss.get(name, 0):.0f}" for name in names),
            f"{sample.redis_mb:.0f}",
            f"{sample.redis_keys:,}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Summary", "", *summary(soak), ""]
    lines += ["![p50/p99, RSS per process, Redis memory](soak.png)", ""]
    return "\n".join(lines)


def summary(soak: Soak) -> list[str]:
    samples = soak.samples
    if not samples:
        return ["- no interval completed"]
    total = sum(sample.load.requests for sample in samples)
    errors = sum(sample.load.errors for sample in samples)
    degraded = sum(sample.load.degraded for sample in samples)
    first, last = samples[: max(1, soak.warmup)], samples[-max(1, soak.warmup) :]
    lines = [
        f"- {len(samples)} intervals of {soak.interval} s, {total:,} decisions "
        f"({total / (len(samples) * soak.interval):,.0f}/s), {errors:,} errors, "
        f"{degraded:,} degraded",
        f"- p99 first vs last {len(first)} interval(s): {_ms(first)} ms vs {_ms(last)} ms",
    ]
    growth, ends = soak.growth(), soak.rss_ends()
    if growth and ends is not None:
        start, end = ends
        lines.append(
            f"- RSS growth after the warm-up ({soak.warmup} interval(s); medians at each end), "
            f"allowed {MAX_GROWTH:.0%}: "
            + ", ".join(
                f"{name} {start[name]:.0f} → {end[name]:.0f} MB ({grown:+.1%})"
                for name, grown in growth.items()
            )
        )
    else:
        lines.append("- RSS growth: the run ended within the warm-up")
    lines.append(
        f"- Redis at the end: {samples[-1].redis_mb:.0f} MB, {samples[-1].redis_keys:,} keys"
    )
    if soak.scan is not None:
        lines.append(
            f"- TTL scan: {soak.scan.keys:,} keys, {soak.scan.without_ttl} without a TTL"
            + (f" (e.g. {', '.join(soak.scan.examples)})" if soak.scan.examples else "")
        )
    problems = soak.problems()
    lines.append("- verdict: " + ("FAIL: " + "; ".join(problems) if problems else "pass"))
    return lines


def _ms(samples: list[Sample]) -> str:
    return "/".join(f"{sample.load.p99 * 1e3:.0f}" for sample in samples)


def plot(soak: Soak, path: Path) -> None:
    """p50/p99, RSS per process and Redis memory over the run, one panel each, as a PNG."""
    import matplotlib  # the bench extra; imported only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    minutes = [sample.minute for sample in soak.samples]
    figure, (latency, rss, redis) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    latency.plot(minutes, [s.load.p50 * 1e3 for s in soak.samples], marker="o", label="p50")
    latency.plot(minutes, [s.load.p99 * 1e3 for s in soak.samples], marker="o", label="p99")
    latency.set_ylabel("latency (ms)")
    latency.set_ylim(bottom=0)
    latency.legend()
    latency.set_title("ratekeeper soak: latency, memory per process, Redis")
    for name in soak.samples[0].rss if soak.samples else []:
        rss.plot(minutes, [s.rss.get(name, 0) for s in soak.samples], marker="o", label=name)
    if soak.warmup:
        for axes in (latency, rss, redis):
            axes.axvline(soak.warmup + 0.5, color="grey", linestyle=":", linewidth=1)
    rss.set_ylabel("RSS (MB)")
    rss.set_ylim(bottom=0)
    rss.legend()
    redis.plot(minutes, [s.redis_mb for s in soak.samples], marker="o", color="C3")
    redis.set_ylabel("Redis used_memory (MB)", color="C3")
    redis.set_ylim(bottom=0)
    keys = redis.twinx()
    keys.plot(minutes, [s.redis_keys for s in soak.samples], marker=".", color="C4")
    keys.set_ylabel("Redis keys", color="C4")
    keys.set_ylim(bottom=0)
    unit = "minute" if soak.interval == 60 else f"interval of {soak.interval} s"
    redis.set_xlabel(f"{unit}; dotted line: end of the warm-up")
    redis.xaxis.set_major_locator(MaxNLocator(integer=True))
    for axes in (latency, rss, redis):
        axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write(soak: Soak, directory: Path, command: str) -> Path:
    """Write ``report.md``, ``samples.json`` and ``soak.png`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    data = {"settings": soak.settings, "warmup": soak.warmup, "interval": soak.interval}
    data["samples"] = [asdict(sample) for sample in soak.samples]
    data["scan"] = asdict(soak.scan) if soak.scan is not None else None
    (directory / "samples.json").write_text(json.dumps(data, indent=1) + "\n")
    if soak.samples:
        plot(soak, directory / "soak.png")
    report = directory / "report.md"
    report.write_text(markdown(soak, command))
    return report
