"""How a Redis row is measured: each contender sized from a timed warm-up, taking turns.

A ``RedisTrial`` is a ``benchmarks.trials.Trial`` whose measurements last about
``RedisSizes.seconds``, checked the same way (a sample of hits before and after must all be
allowed, or all denied), with the server's ``INFO commandstats`` reset and read around each
timed run for the server's own time per decision. ``run_row`` measures one row's contenders.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from benchmarks.contenders import (
    RATEKEEPER_CACHED,
    Contender,
)
from benchmarks.redis_store.server import RedisServer, server_usec
from benchmarks.trials import (
    BenchmarkError,
    Plan,
    Trial,
)


@dataclass(frozen=True)
class RedisSizes:
    """How much work one Redis run does: ``--quick`` shrinks every number."""

    seconds: float = 0.4  # target length of one timed measurement
    warmup: int = 200  # calls of the timed warm-up that sizes the measurements (sequential)
    async_warmup: int = 8  # calls per caller of the asyncio warm-up
    repeats: int = 5
    memory_keys: int = 10_000


REDIS_QUICK = RedisSizes(seconds=0.1, warmup=100, async_warmup=4, repeats=2, memory_keys=2_000)


@dataclass
class Result:
    """One contender's outcome in one row."""

    rate: float | None = None  # best decisions/s
    server_us: float | None = None  # server µs per decision (median over the repeats)
    batch: float | None = None  # decisions per server call (median)
    error: str | None = None
    redone: list[str] = field(default_factory=list)  # why measurements were redone


@dataclass
class RedisTrial(Trial):
    """A ``Trial`` sized from a timed warm-up, reading the server's commandstats as it goes."""

    server: RedisServer | None = None
    seconds: float = 0.5
    multiple: int = 1  # calls per measurement are a multiple of this (the asyncio callers)
    server_us: list[float] = field(default_factory=list)
    batches: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # measurements redone
    _sized: bool = False

    _usec: float = 0.0
    _server_calls: int = 0

    def measure(self) -> None:
        if not self._sized:
            self._size()
        super().measure()

    def _before_timing(self) -> None:
        assert self.server is not None
        self.server.reset_stats()

    def _after_timing(self) -> None:
        assert self.server is not None
        self._usec, self._server_calls = server_usec(self.server.commandstats())

    def _record(self, elapsed: float, decisions: int) -> None:
        self.rates.append(decisions / elapsed)
        self.server_us.append(self._usec / decisions)
        if self._server_calls:
            self.batches.append(decisions / self._server_calls)

    def _size(self) -> None:
        """Time ``plan.calls`` warm-up calls, then size the measurements to ``seconds``."""
        self._setup()
        start = time.perf_counter()
        self.contender.run(self._calls)
        elapsed = time.perf_counter() - start
        if not self._sample_holds():
            raise BenchmarkError(f"{self.label}: the warm-up left the path it is meant to time")
        calls = max(self.plan.calls, int(len(self._calls) / elapsed * self.seconds))
        calls = -(-calls // self.multiple) * self.multiple
        self.plan = replace(self.plan, calls=calls)
        self._ready = False
        self._sized = True

    def result(self) -> Result:
        return Result(
            rate=max(self.rates),
            server_us=statistics.median(self.server_us),
            batch=statistics.median(self.batches) if self.batches else None,
            redone=self.failures,
        )


def describe(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"error: {type(error).__name__}: {text[:160]}"


def run_row(
    server: RedisServer,
    makers: dict[str, Callable[[str], Contender]],
    plan: Plan,
    sizes: RedisSizes,
    label: str,
    *,
    multiple: int = 1,
) -> dict[str, Result]:
    """Measure the contenders ``makers`` build (by library), taking turns repeat by repeat.

    The database is emptied first. A measurement that fails is redone once (and the failure
    noted); a contender that fails again, or cannot be built, is reported with its error and
    left out of the rest of the row.
    """
    server.flush()
    results: dict[str, Result] = {}
    trials: list[RedisTrial] = []
    for library, make in makers.items():
        namespace = "rkc" if library == RATEKEEPER_CACHED else "bench"
        try:
            contender = make(namespace)
        except Exception as error:
            results[library] = Result(error=describe(error))
            continue
        trial = RedisTrial(contender, plan, f"{label} / {library}")
        trial.server, trial.seconds, trial.multiple = server, sizes.seconds, multiple
        trials.append(trial)
    try:
        for _ in range(sizes.repeats):
            for trial in trials:
                library = trial.contender.library
                if library in results:
                    continue
                for attempt in range(2):  # a transient failure (a timeout) is redone once
                    try:
                        trial.measure()
                        break
                    except Exception as error:
                        if attempt:
                            results[library] = Result(error=describe(error))
                        else:
                            trial.failures.append(describe(error))
                            trial._ready = False
        for trial in trials:
            if trial.contender.library not in results:
                results[trial.contender.library] = trial.result()
    finally:
        for trial in trials:
            try:
                trial.contender.close()
            except Exception as error:  # closing must not lose the row
                print(f"closing {trial.label}: {error!r}", file=sys.stderr)
        gc.collect()
    return {library: results[library] for library in makers if library in results}
