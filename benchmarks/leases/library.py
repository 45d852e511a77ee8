"""Leased quotas in the library: 4 processes on one hot key, exact against leased.

For each algorithm, three runs on a fresh key prefix each, side by side in one run of the
benchmark: ``exact`` and ``leased``, the workers hammering the key as fast as they can; then
``leased at 2x``, the workers paced so that together they ask twice the limit. Around each
run the server's ``INFO commandstats`` is read (the sampler's own reads taken out) and the
key's state is sampled straight from Redis (``benchmarks.leases.sampler``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import ratekeeper as rk
from benchmarks.leases.sampler import Sampler, commands, own_commands
from benchmarks.leases.workers import KEY, Job, Tally, Workers
from benchmarks.redis_store.server import RedisServer
from ratekeeper.core.store_keys import state_key

#: The algorithms measured: one that counts per window, two that refill.
ALGORITHMS = ("fixed_window", "token_bucket", "gcra")


@dataclass(frozen=True)
class LeaseSizes:
    """How much work one run does: ``--quick`` shrinks it."""

    amount: int = 20_000  # the hot key's limit, per period
    period: float = 1.0
    workers: int = 4
    seconds: float = 5.0  # each hammering run
    paced_seconds: float = 6.5  # the run at 2x the limit
    demand: float = 2.0  # the paced run's demand, as a multiple of the limit
    service_seconds: int = 8  # each wrk run through nginx
    service_amount: int = 500


LEASES_QUICK = LeaseSizes(seconds=1.5, paced_seconds=3.5, service_seconds=2)


@dataclass
class Run:
    """One run of the workers: their tallies, the workers' Redis commands, and the sampler."""

    tallies: list[Tally]
    start: float
    seconds: float
    commands: int
    scripts: int
    by_name: Counter[str]
    sampler: Sampler

    @property
    def decisions(self) -> int:
        return sum(tally.decisions for tally in self.tallies)

    @property
    def granted(self) -> int:
        return sum(tally.granted for tally in self.tallies)

    @property
    def elapsed(self) -> float:
        return max(tally.seconds for tally in self.tallies)

    @property
    def rate(self) -> float:
        return self.decisions / self.elapsed

    @property
    def per_decision(self) -> float:
        return self.commands / self.decisions if self.decisions else float("nan")

    @property
    def scripts_per_decision(self) -> float:
        return self.scripts / self.decisions if self.decisions else float("nan")

    def windows(self, straddled: bool) -> Counter[int]:
        """Units granted per wall-clock window: those whose call began and ended in it, and
        with ``straddled`` those that began in it and ended in the next as well."""
        total: Counter[int] = Counter()
        for tally in self.tallies:
            total.update(tally.windows)
            if straddled:
                total.update(tally.straddled)
        return total

    @property
    def straddled(self) -> int:
        return sum(sum(tally.straddled.values()) for tally in self.tallies)

    def full_windows(self, period: float) -> list[int]:
        """The windows wholly inside the run."""
        first = int(-(-self.start // period))
        last = int((self.start + self.seconds) // period)
        return list(range(first, last))


@dataclass
class Checks:
    """One algorithm's figures: the hammering runs and the paced one."""

    algorithm: str
    limit: rk.Limit
    exact: Run
    leased: Run
    paced: Run
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.leased.rate / self.exact.rate

    def store_worst(self) -> float:
        """Fixed window: the largest count the store held in a window (of both leased runs);
        buckets: the largest (tokens + held) as a share of the capacity."""
        if self.algorithm == "fixed_window":
            return max(
                max(run.sampler.counts.values(), default=0.0) for run in (self.leased, self.paced)
            )
        return max(self.leased.sampler.fullest, self.paced.sampler.fullest)

    def store_holds(self) -> bool:
        if self.algorithm == "fixed_window":
            return self.store_worst() <= self.limit.amount
        return self.store_worst() <= 1.0 + 1e-9

    def client_worst(self) -> tuple[float, float]:
        """The clients' grants: the largest per window, and its bound; for the buckets the
        largest share of ``burst + rate * span`` granted since the run began (calls counted
        in the window they began in)."""
        period = self.limit.period
        if self.algorithm == "fixed_window":
            worst = max(
                max(run.windows(straddled=False).values(), default=0)
                for run in (self.leased, self.paced)
            )
            return worst, self.limit.amount
        share = 0.0
        for run in (self.leased, self.paced):
            granted = 0
            windows = run.windows(straddled=True)
            for window in sorted(windows):
                granted += windows[window]
                end = min((window + 1) * period, run.start + run.seconds)
                allowed = self.limit.capacity + self.limit.rate * (end - run.start)
                share = max(share, granted / allowed)
        return share, 1.0

    def demand_worst(self) -> tuple[int, float] | None:
        """The paced run's full window with the fewest units granted, and that as a share of
        the limit."""
        windows = self.paced.windows(straddled=True)
        full = self.paced.full_windows(self.limit.period)
        if not full:
            return None
        worst = min(full, key=lambda window: windows[window])
        return worst, windows[worst] / self.limit.amount


def measure(
    server: RedisServer,
    workers: Workers,
    sizes: LeaseSizes,
    algorithm: str,
    *,
    run_id: str,
    progress: Any,
) -> Checks:
    """The three runs of one algorithm."""
    limit = rk.Limit(sizes.amount, sizes.period, algorithm, sync="leased")
    share = sizes.demand * sizes.amount / sizes.period / sizes.workers
    runs: dict[str, Run] = {}
    plans = (
        ("exact", "exact", sizes.seconds, None),
        ("leased", "leased", sizes.seconds, None),
        ("paced", "leased", sizes.paced_seconds, share),
    )
    for name, sync, seconds, rate in plans:
        progress(f"leases: {algorithm}, {name} ({sizes.workers} processes, {seconds:g} s)")
        prefix = f"lb{run_id}-{algorithm}-{name}"
        job = Job(server.url, prefix, algorithm, sizes.amount, sizes.period, sync, seconds, rate)
        runs[name] = one_run(server, workers, job, limit)
    checks = Checks(algorithm, limit, runs["exact"], runs["leased"], runs["paced"])
    for name, run in runs.items():
        errors = sum(tally.errors for tally in run.tallies)
        if errors:
            checks.notes.append(f"{algorithm} / {name}: {errors} hits raised StoreError")
    return checks


def one_run(server: RedisServer, workers: Workers, job: Job, limit: rk.Limit) -> Run:
    key = state_key(limit, KEY, job.prefix)
    sampler = Sampler(
        server.url,
        key,
        algorithm=job.algorithm,
        capacity=limit.capacity,
        interval=limit.interval,
    )
    stats: dict[str, Any] = {}

    def on_start() -> None:
        stats["before"] = server.admin.info("commandstats")
        sampler.__enter__()

    def on_end() -> None:
        sampler.__exit__(None, None, None)
        stats["after"] = server.admin.info("commandstats")

    start, tallies = workers.run(job, on_start, on_end)
    total, scripts, by_name = commands(stats["before"], stats["after"], own_commands(sampler))
    return Run(tallies, start, job.seconds, total, scripts, by_name, sampler)
