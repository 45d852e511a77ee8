"""The processes that hit the hot key: each ``Limiter(open_store(url, prefix=...))``, started
with multiprocessing's spawn, all released at one instant and stopped at one deadline.

A worker either hammers (one hit after another, as fast as it can) or is paced (asks its
share of a steady demand, in small groups with a sleep between). It counts its decisions and
the units it was granted per wall-clock window (``int(time.time() // period)``; the machine's
clock is Redis's too): a grant is put in the window its call started and ended in, and a call
that started in one window and ended in the next is counted apart (``straddled``, by the window
it started in), since the client cannot tell which window decided it.

The worker closes its store (giving back what its slices hold) only once the parent has read
the server's counters, so that what is measured is the run, not the shutdown.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import ratekeeper as rk
from ratekeeper.core.errors import StoreError
from ratekeeper.stores import open_store

#: The hot key every worker hits.
KEY = "hot"
#: Hits a paced worker asks for between two looks at the clock.
GROUP = 20
#: The longest the parent and the workers wait for one another, in seconds.
WAIT = 120.0
#: How far behind its pace a paced worker may fall before it gives up catching up.
SLACK = 0.05


@dataclass(frozen=True)
class Job:
    """What one worker does: ``rate`` hits per second, or as fast as it can when None."""

    url: str
    prefix: str
    algorithm: str
    amount: int
    period: float
    sync: str
    seconds: float
    rate: float | None = None


@dataclass
class Tally:
    """What one worker did."""

    decisions: int = 0
    granted: int = 0
    errors: int = 0
    exchanges: int = 0  # the lease exchanges it sent (0 when exact)
    seconds: float = 0.0
    windows: Counter[int] = field(default_factory=Counter)  # window -> units granted
    straddled: Counter[int] = field(default_factory=Counter)  # window started in -> units


class Gate:
    """What the parent and the workers meet on, run after run: the jobs, all ready, go at
    ``start``, the tallies, all reported (then the workers close their stores). Barriers,
    which reset once passed, so that the same processes serve every run."""

    def __init__(self, context: Any, workers: int) -> None:
        self.jobs = context.Queue()
        self.ready = context.Barrier(workers + 1)
        self.go = context.Barrier(workers + 1)
        self.done = context.Barrier(workers + 1)
        self.start = context.Value("d", 0.0)
        self.results = context.Queue()


def serve(gate: Gate) -> None:
    """A worker process: run the jobs it is given, one per run, until it is given None."""
    while (job := gate.jobs.get()) is not None:
        work(job, gate)


def work(job: Job, gate: Gate) -> None:
    """One run: open the store, wait for go, hit until the deadline, report, and close the
    store once every worker has reported."""
    store = open_store(job.url, prefix=job.prefix, on_store_error=None)
    limiter = rk.Limiter(store)
    limit = rk.Limit(job.amount, job.period, job.algorithm, sync=job.sync)
    tally = Tally()
    try:
        gate.ready.wait(WAIT)
        gate.go.wait(WAIT)
        start = gate.start.value
        pause = start - time.time()
        if pause > 0:
            time.sleep(pause)
        if job.rate is None:
            _hammer(limiter, limit, start + job.seconds, tally)
        else:
            _paced(limiter, limit, start=start, end=start + job.seconds, rate=job.rate, tally=tally)
        tally.seconds = time.time() - start
        tally.exchanges = getattr(store, "exchanges", 0)
        gate.results.put(tally)
        gate.done.wait(WAIT)
    finally:
        limiter.close()


def _hammer(limiter: rk.Limiter, limit: rk.Limit, end: float, tally: Tally) -> None:
    clock, hit, period = time.time, limiter.hit, limit.period
    windows, straddled = tally.windows, tally.straddled
    decisions = errors = 0
    while True:
        before = clock()
        if before >= end:
            break
        try:
            decision = hit(KEY, limit)
        except StoreError:
            errors += 1
            continue
        decisions += 1
        if decision.allowed:
            opened, closed = before // period, clock() // period
            (windows if opened == closed else straddled)[int(opened)] += decision.granted
    tally.decisions, tally.errors = decisions, errors
    tally.granted = sum(windows.values()) + sum(straddled.values())


def _paced(
    limiter: rk.Limiter, limit: rk.Limit, *, start: float, end: float, rate: float, tally: Tally
) -> None:
    clock, hit, period = time.time, limiter.hit, limit.period
    windows, straddled = tally.windows, tally.straddled
    decisions = errors = 0
    origin, asked = start, 0
    while True:
        now = clock()
        if now >= end:
            break
        due = origin + asked / rate
        if due > now:
            time.sleep(due - now)
        elif now - due > SLACK:  # fell behind: ask at the pace from here, not in a burst
            origin, asked = now, 0
        for _ in range(GROUP):
            before = clock()
            try:
                decision = hit(KEY, limit)
            except StoreError:
                errors += 1
                continue
            decisions += 1
            if decision.allowed:
                opened, closed = before // period, clock() // period
                (windows if opened == closed else straddled)[int(opened)] += decision.granted
        asked += GROUP
    tally.decisions, tally.errors = decisions, errors
    tally.granted = sum(windows.values()) + sum(straddled.values())


class Workers:
    """``count`` worker processes (spawned once, for every run), for a ``with`` block."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.count = count
        self.gate = Gate(context, count)
        self.processes = [
            context.Process(target=serve, args=(self.gate,), daemon=True) for _ in range(count)
        ]
        for process in self.processes:
            process.start()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for _ in self.processes:
            self.gate.jobs.put(None)
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join(10)

    def run(self, job: Job, on_start: Any, on_end: Any) -> tuple[float, list[Tally]]:
        """Every worker runs ``job``, all released at once; return the moment they went
        (``time.time()``) and their tallies.

        ``on_start()`` is called once every worker is ready, just before they go (read the
        server's counters, start a sampler); ``on_end()`` once every worker has reported,
        before any closes its store."""
        gate = self.gate
        for _ in self.processes:
            gate.jobs.put(job)
        gate.ready.wait(WAIT)
        on_start()
        start = gate.start.value = time.time() + 0.2
        gate.go.wait(WAIT)
        tallies = [gate.results.get(timeout=job.seconds + WAIT) for _ in self.processes]
        on_end()
        gate.done.wait(WAIT)
        return start, tallies


__all__ = ["KEY", "Job", "Tally", "Workers"]
