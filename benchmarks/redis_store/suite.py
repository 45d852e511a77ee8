"""The Redis benchmarks: ``python -m benchmarks --redis`` (``--all`` runs the in-memory ones too).

In one run, against a redis-server the benchmark starts itself on a free 127.0.0.1 port:

1. sequential decisions/s on one hot key, allow path, through ``Limiter.hit`` on a
   ``RedisStore``, against a raw redis-py ``EVALSHA`` of ``return 1`` (the floor of a script
   round trip) and against the peers' Redis backends;
2. 64 concurrent asyncio callers (``asyncio.gather``), each on its own key, through
   ``AsyncLimiter.hit`` (batching on) against the peers' asyncio Redis APIs;
3. the deny path on one hot key already over its limit, with the over-limit cache, against the
   peers' deny path (ratekeeper without the cache is shown too);
4. Redis memory per key after one hit on each of many keys, for every ratekeeper algorithm and
   the peers' equivalents.

Every measurement is sized to last about ``RedisSizes.seconds`` from a timed warm-up, and
checked as in ``benchmarks.scenarios``: a sample of hits before and after must all be allowed
(allow path) or all denied (deny path). Around each timed run the server's ``INFO
commandstats`` is reset and read, which gives the server's own time per decision.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from benchmarks import report
from benchmarks.peers import (
    PEER_LIBRARIES,
    PYRATE,
    RATEKEEPER,
    SHARED,
    Contender,
    ratekeeper_algorithms,
)
from benchmarks.redis_peers import (
    ASYNC,
    BASELINE,
    CALLERS,
    PYRATE_REDIS,
    RATEKEEPER_CACHED,
    SAME_WORK,
    SYNC,
    AsyncFactory,
    SyncFactory,
)
from benchmarks.redis_server import RedisServer, server_usec
from benchmarks.report import Output
from benchmarks.scenarios import (
    DENY_AMOUNT,
    LOG_ALGORITHMS,
    LOG_AMOUNT,
    UNREACHABLE,
    BenchmarkError,
    Plan,
    Trial,
)

#: Targets: ratekeeper sequential / the same-work floor (and, stricter, / raw EVALSHA of
#: ``return 1``); concurrent / fastest peer and absolute; deny path with the over-limit cache /
#: fastest peer.
SEQUENTIAL_TARGET = 0.9
SEQUENTIAL_PEER_TARGET = 1.0
#: The most server time a decision may take, as a multiple of the same-work floor's.
SERVER_TARGET = 1.3
CONCURRENT_PEER_TARGET = 5.0
CONCURRENT_TARGET = 60_000
DENY_TARGET = 20.0

#: Keys sampled with ``MEMORY USAGE`` in part 4.
MEMORY_SAMPLE = 200


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


def _describe(error: BaseException) -> str:
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
            results[library] = Result(error=_describe(error))
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
                            results[library] = Result(error=_describe(error))
                        else:
                            trial.failures.append(_describe(error))
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


# --- formatting -------------------------------------------------------------------------------


def _rate(result: Result | None) -> str:
    if result is None:
        return report.MISSING
    if result.error is not None:
        return "error"
    return report.rate(result.rate)


def _us(result: Result | None) -> str:
    if result is None or result.server_us is None:
        return report.MISSING
    return f"{result.server_us:.1f}"


def _mark(value: float | None, target: float) -> str:
    if value is None:
        return report.MISSING
    return report.ratio(value) + (" ✓" if value >= target else " ✗")


def _fastest_peer(results: dict[str, Result]) -> tuple[str, float] | None:
    rates = {
        library: result.rate
        for library, result in results.items()
        if library in PEER_LIBRARIES and result.rate is not None
    }
    if not rates:
        return None
    fastest = max(rates, key=rates.__getitem__)
    return fastest, rates[fastest]


def _ratio(result: Result | None, other: float | None) -> float | None:
    if result is None or result.rate is None or not other:
        return None
    return result.rate / other


def _errors(algorithm: str, results: dict[str, Result]) -> list[str]:
    lines = []
    for library, result in results.items():
        if result.error is not None:
            lines.append(f"- {algorithm} / {library}: {result.error}")
        lines.extend(
            f"- {algorithm} / {library}: a measurement was redone after {why}"
            for why in result.redone
        )
    return lines


def _peer_makers(
    algorithm: str, factories: dict[str, Any], bind: Callable[[Any], Callable[[str], Contender]]
) -> dict[str, Callable[[str], Contender]]:
    return {
        library: bind(factories[library])
        for library in PEER_LIBRARIES
        if library in SHARED[algorithm] and library in factories
    }


def _allow_amount(algorithm: str) -> int:
    return LOG_AMOUNT if algorithm in LOG_ALGORITHMS else UNREACHABLE


def _peer_names(out: Output) -> None:
    for algorithm, peers in SHARED.items():
        names = []
        for library in PEER_LIBRARIES:
            if library in peers:
                name = PYRATE_REDIS[algorithm] if library == PYRATE else peers[library]
                names.append(f"{library}: `{name}`")
        out.emit(f"- {algorithm}: {'; '.join(names)}")


# --- part 1 -----------------------------------------------------------------------------------


Ratios = dict[str, float | None]


def sequential(out: Output, server: RedisServer, sizes: RedisSizes) -> tuple[Ratios, ...]:
    """Part 1: one hot key, allow path, one call at a time. Returns ratekeeper / EVALSHA,
    ratekeeper / the same-work floor, ratekeeper / fastest peer, and ratekeeper's server time
    / the same-work floor's."""
    url = server.url
    out.emit("", "## Redis 1. Sequential: one hot key, allow path, one call at a time", "")
    out.emit(
        "Decisions per second, each call one round trip to Redis. `EVALSHA return 1` is "
        '`client.execute_command("EVALSHA", sha, 0)` of `return 1`, called in the same loop on '
        "a client opened as ratekeeper opens its own (`ratekeeper.stores.urls.open_client`: the "
        "same connection class, command packer and parser), which is how ratekeeper sends its "
        "scripts: the floor of any script round trip. `same-work floor` is, sent the same way, "
        "a script doing the least a decision on a stored state can: one `GET`, one `SET ... PX` "
        "of 16 bytes, a two-element reply (`benchmarks/redis_peers.py`: `SAME_WORK_SCRIPT`). "
        "ratekeeper is "
        "`Limiter(open_store(url, on_store_error=None)).hit(key, limit)`. The peers' Redis "
        "backends for each algorithm:",
        "",
    )
    _peer_names(out)
    rows, server_rows, notes = [], [], []
    ratios: Ratios = {}
    to_work: Ratios = {}
    to_peers: Ratios = {}
    to_same_work: Ratios = {}
    for algorithm in SHARED:
        amount = _allow_amount(algorithm)
        plan = Plan(amount, 1, sizes.warmup, True, setup_cost=1)

        def bind(make: SyncFactory, algorithm: str = algorithm, amount: int = amount) -> Any:
            return lambda namespace: make(url, algorithm, amount, namespace)

        makers = {
            RATEKEEPER: bind(SYNC[RATEKEEPER]),
            BASELINE: bind(SYNC[BASELINE]),
            SAME_WORK: bind(SYNC[SAME_WORK]),
            **_peer_makers(algorithm, SYNC, bind),
        }
        out.progress(f"redis sequential: {algorithm} ({', '.join(makers)})")
        results = run_row(server, makers, plan, sizes, f"sequential / {algorithm}")
        mine, floor = results.get(RATEKEEPER), results.get(BASELINE)
        to_floor = _ratio(mine, floor.rate if floor else None)
        ratios[algorithm] = to_floor
        fastest = _fastest_peer(results)
        to_peer = to_peers[algorithm] = _ratio(mine, fastest[1] if fastest else None)
        work = results.get(SAME_WORK)
        to_work[algorithm] = _ratio(mine, work.rate if work else None)
        server_ratio = to_same_work[algorithm] = (
            mine.server_us / work.server_us
            if mine and work and mine.server_us and work.server_us
            else None
        )
        rows.append(
            [
                algorithm,
                _rate(mine),
                _rate(floor),
                _rate(work),
                _mark(to_work[algorithm], SEQUENTIAL_TARGET),
                _mark(to_floor, SEQUENTIAL_TARGET),
                *(_rate(results.get(library)) for library in PEER_LIBRARIES),
                f"{_mark(to_peer, SEQUENTIAL_PEER_TARGET)} ({fastest[0]})"
                if fastest
                else report.MISSING,
            ]
        )
        server_rows.append(
            [
                algorithm,
                _us(mine),
                _us(floor),
                _us(work),
                report.MISSING
                if server_ratio is None
                else report.ratio(server_ratio) + (" ✓" if server_ratio <= SERVER_TARGET else " ✗"),
                *(_us(results.get(library)) for library in PEER_LIBRARIES),
            ]
        )
        notes.extend(_errors(algorithm, results))
        notes.append(f"- {algorithm}: limit {amount:,}/hour, allow path, one hot key")
    out.emit("", "### Decisions per second", "")
    out.emit(
        *report.table(
            [
                "algorithm",
                RATEKEEPER,
                BASELINE,
                SAME_WORK,
                f"ratekeeper / same-work floor (target ≥ {SEQUENTIAL_TARGET:g})",
                f"ratekeeper / EVALSHA (stricter, ≥ {SEQUENTIAL_TARGET:g})",
                *PEER_LIBRARIES,
                f"ratekeeper / fastest peer (target ≥ {SEQUENTIAL_PEER_TARGET:g})",
            ],
            rows,
        )
    )
    out.emit("", *notes)
    out.emit("", "### Server time per decision (µs, from `INFO commandstats`)", "")
    out.emit(
        "The server's own time for the commands a decision sends, per decision. For "
        "ratekeeper it is `cmdstat_fcall` `usec_per_call` (one call of its function library per "
        "decision; `cmdstat_evalsha` on a server without functions); for a "
        "library whose calls run scripts only the scripts count (their time includes the "
        "commands they call); throttled-py's fixed window sends plain `INCRBY`.",
        "",
    )
    out.emit(
        *report.table(
            [
                "algorithm",
                RATEKEEPER,
                BASELINE,
                SAME_WORK,
                f"ratekeeper / same-work floor (target ≤ {SERVER_TARGET:g})",
                *PEER_LIBRARIES,
            ],
            server_rows,
        )
    )
    return ratios, to_work, to_peers, to_same_work


# --- part 2 -----------------------------------------------------------------------------------


def concurrent(
    out: Output, server: RedisServer, sizes: RedisSizes
) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """Part 2: 64 asyncio callers, each on its own key, allow path.

    Returns ratekeeper / fastest peer and ratekeeper's decisions/s, by algorithm.
    """
    url = server.url
    ratios: dict[str, float | None] = {}
    rates: dict[str, float | None] = {}
    out.emit(
        "",
        f"## Redis 2. {CALLERS} concurrent asyncio callers, allow path",
        "",
        f"{CALLERS} tasks gathered with `asyncio.gather` on one event loop, each awaiting one hit "
        "after another on its own key; decisions per second over all of them. ratekeeper is "
        "`AsyncLimiter(open_async_store(url, on_store_error=None)).hit(key, limit)`, which sends "
        "the hits of one event-loop tick as one script run. The peers: limits' "
        '`storage_from_string("async+redis://...", implementation="redispy")` with the '
        "`limits.aio.strategies` (coredis, its default client, is not installed); "
        "pyrate-limiter's buckets on a `redis.asyncio` client, called as `await "
        "limiter.try_acquire(key, blocking=False)` (its `try_acquire_async` holds one "
        "`asyncio.Lock` over every acquisition, which puts the callers in single file and was "
        "slower when tried); throttled-py's `throttled.asyncio.Throttled` on its asyncio "
        "`RedisStore`. Each peer's client opens as many connections as callers wait on it.",
    )
    rows, server_rows, notes = [], [], []
    loop = asyncio.new_event_loop()
    try:
        for algorithm in SHARED:
            amount = _allow_amount(algorithm)
            plan = Plan(amount, CALLERS, CALLERS * sizes.async_warmup, True, setup_cost=1)

            def bind(make: AsyncFactory, algorithm: str = algorithm, amount: int = amount) -> Any:
                return lambda namespace: make(loop, url, algorithm, amount, namespace)

            makers = {
                RATEKEEPER: bind(ASYNC[RATEKEEPER]),
                **_peer_makers(algorithm, ASYNC, bind),
            }
            out.progress(f"redis concurrent: {algorithm} ({', '.join(makers)})")
            results = run_row(
                server, makers, plan, sizes, f"concurrent / {algorithm}", multiple=CALLERS
            )
            mine = results.get(RATEKEEPER)
            fastest = _fastest_peer(results)
            to_peer = _ratio(mine, fastest[1] if fastest else None)
            ratios[algorithm] = to_peer
            rates[algorithm] = mine.rate if mine else None
            absolute = report.MISSING
            if mine is not None and mine.rate is not None:
                absolute = "yes" if mine.rate >= CONCURRENT_TARGET else "no"
            rows.append(
                [
                    algorithm,
                    _rate(mine),
                    *(_rate(results.get(library)) for library in PEER_LIBRARIES),
                    _mark(to_peer, CONCURRENT_PEER_TARGET)
                    + (f" ({fastest[0]})" if fastest else ""),
                    absolute,
                ]
            )
            batch = report.MISSING
            if mine is not None and mine.batch is not None and mine.server_us is not None:
                batch = f"{mine.batch:.1f} ({mine.server_us * mine.batch:.0f} µs per run)"
            server_rows.append(
                [
                    algorithm,
                    _us(mine),
                    batch,
                    *(_us(results.get(library)) for library in PEER_LIBRARIES),
                ]
            )
            notes.extend(_errors(algorithm, results))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    out.emit("", "### Decisions per second", "")
    out.emit(
        *report.table(
            [
                "algorithm",
                RATEKEEPER,
                *PEER_LIBRARIES,
                f"ratekeeper / fastest peer (target ≥ {CONCURRENT_PEER_TARGET:g})",
                f"≥ {CONCURRENT_TARGET:,}/s",
            ],
            rows,
        )
    )
    if notes:
        out.emit("", *notes)
    out.emit("", "### Server time per decision (µs) and ratekeeper's batches", "")
    out.emit(
        *report.table(
            [
                "algorithm",
                RATEKEEPER,
                "ratekeeper decisions per script run",
                *PEER_LIBRARIES,
            ],
            server_rows,
        )
    )
    return ratios, rates


# --- part 3 -----------------------------------------------------------------------------------


def deny(out: Output, server: RedisServer, sizes: RedisSizes) -> dict[str, float | None]:
    """Part 3: one hot key over its limit; returns cached ratekeeper / fastest peer."""
    url = server.url
    ratios: dict[str, float | None] = {}
    out.emit(
        "",
        "## Redis 3. Deny path: one hot key already over its limit",
        "",
        f"A limit of {DENY_AMOUNT}/hour, exhausted by one hit of cost {DENY_AMOUNT} before "
        "timing; every timed hit is denied. `ratekeeper + over-limit cache` is "
        "`Limiter(open_store(url, over_limit_cache=True, on_store_error=None))`: the first "
        "denial goes to Redis and is remembered until its `retry_after`, the rest are answered "
        "locally. Plain ratekeeper (one round trip a denial) is shown for reference; the peers "
        "make a round trip for every denial. So *cached / fastest peer* is a feature "
        "comparison, a local answer against a network round trip, not the same work done "
        "faster; *ratekeeper / fastest peer* compares the same work.",
    )
    rows, server_rows, notes = [], [], []
    plan = Plan(DENY_AMOUNT, 1, sizes.warmup, False, setup_cost=DENY_AMOUNT)
    for algorithm in SHARED:

        def bind(make: SyncFactory, algorithm: str = algorithm) -> Any:
            return lambda namespace: make(url, algorithm, DENY_AMOUNT, namespace)

        makers = {
            RATEKEEPER_CACHED: bind(SYNC[RATEKEEPER_CACHED]),
            RATEKEEPER: bind(SYNC[RATEKEEPER]),
            **_peer_makers(algorithm, SYNC, bind),
        }
        out.progress(f"redis deny: {algorithm} ({', '.join(makers)})")
        results = run_row(server, makers, plan, sizes, f"deny / {algorithm}")
        cached, plain = results.get(RATEKEEPER_CACHED), results.get(RATEKEEPER)
        fastest = _fastest_peer(results)
        peer_rate = fastest[1] if fastest else None
        ratios[algorithm] = _ratio(cached, peer_rate)
        rows.append(
            [
                algorithm,
                _rate(cached),
                _rate(plain),
                *(_rate(results.get(library)) for library in PEER_LIBRARIES),
                _mark(ratios[algorithm], DENY_TARGET) + (f" ({fastest[0]})" if fastest else ""),
                report.ratio(_ratio(plain, peer_rate)),
            ]
        )
        server_rows.append(
            [
                algorithm,
                f"{cached.server_us:.3f}"
                if cached and cached.server_us is not None
                else _us(cached),
                _us(plain),
                *(_us(results.get(library)) for library in PEER_LIBRARIES),
            ]
        )
        notes.extend(_errors(algorithm, results))
    out.emit("", "### Decisions per second", "")
    out.emit(
        *report.table(
            [
                "algorithm",
                RATEKEEPER_CACHED,
                RATEKEEPER,
                *PEER_LIBRARIES,
                f"cached / fastest peer, a feature comparison (target ≥ {DENY_TARGET:g})",
                "ratekeeper / fastest peer",
            ],
            rows,
        )
    )
    if notes:
        out.emit("", *notes)
    out.emit("", "### Server time per decision (µs)", "")
    out.emit(
        *report.table(["algorithm", RATEKEEPER_CACHED, RATEKEEPER, *PEER_LIBRARIES], server_rows)
    )
    return ratios


# --- part 4 -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Footprint:
    used: float  # (used_memory after - before) / identities
    usage: float  # sampled MEMORY USAGE per key x keys per identity
    keys: float  # Redis keys per identity


def footprint_of(
    server: RedisServer, make: Callable[[str], Contender], algorithm: str, identities: int
) -> Footprint:
    """Redis memory per identity after one hit on each of ``identities`` distinct keys."""
    names = [f"user:{i}" for i in range(identities)]
    server.flush()
    admin = server.admin
    contender = make("mem")
    try:
        contender.hit("warm-up", 1)  # scripts loaded, clients connected: not per key
        keys_before, before = admin.dbsize(), server.used_memory()
        contender.run(names)
        after, keys_after = server.used_memory(), admin.dbsize()
        kept = not contender.hit(names[0], 1) and not contender.hit(names[-1], 1)
        if contender.decisions_per_key == 1 and not kept:
            raise BenchmarkError(f"{contender.library} {algorithm}: the keys were not kept")
        sample = []
        for key in admin.scan_iter(count=MEMORY_SAMPLE):
            sample.append(admin.memory_usage(key, samples=0) or 0)
            if len(sample) >= MEMORY_SAMPLE:
                break
    finally:
        contender.close()
    keys = (keys_after - keys_before) / identities
    usage = statistics.mean(sample) * keys if sample else 0.0
    return Footprint((after - before) / identities, usage, keys)


def memory(out: Output, server: RedisServer, sizes: RedisSizes, algorithms: list[str]) -> None:
    """Part 4: Redis memory per key for every ratekeeper algorithm and the peers."""
    url = server.url
    count = sizes.memory_keys
    out.emit(
        "",
        f"## Redis 4. Memory per key ({count:,} keys, one hit each)",
        "",
        f"Each cell is `used / usage`: `used` is (`used_memory` after - before, from `INFO "
        f"memory`) / {count:,}, everything the server allocated for the keys including its "
        "hash tables and TTLs; `usage` is `MEMORY USAGE` (SAMPLES 0) averaged over "
        f"{MEMORY_SAMPLE} keys, times the Redis keys per identity. The limit is 1/hour, so "
        "that the first and last keys must deny a second hit (checked). The database is "
        "emptied before each cell and each library warmed up on another key first.",
        "",
    )
    rows, notes = [], []
    for algorithm in algorithms:
        cells = []
        for library in (RATEKEEPER, *PEER_LIBRARIES):
            if library != RATEKEEPER and library not in SHARED.get(algorithm, {}):
                cells.append(report.MISSING)
                continue
            make = SYNC[library]
            out.progress(f"redis memory: {algorithm} / {library}")
            try:
                taken = footprint_of(
                    server,
                    lambda namespace, make=make, algorithm=algorithm: make(
                        url, algorithm, 1, namespace
                    ),
                    algorithm,
                    count,
                )
            except Exception as error:
                cells.append("error")
                notes.append(f"- {algorithm} / {library}: {_describe(error)}")
                continue
            cells.append(f"{taken.used:,.0f} / {taken.usage:,.0f}")
            if algorithm == "concurrency" and library == RATEKEEPER:
                notes.append(
                    "- concurrency: each key takes a slot and gives it back; an idle key holds "
                    f"no lease, and {taken.keys:.2f} Redis keys per key remain"
                )
            elif abs(taken.keys - 1) > 0.01:
                notes.append(f"- {algorithm} / {library}: {taken.keys:.2f} Redis keys per key")
        rows.append([algorithm, *cells])
    out.emit(*report.table(["algorithm", RATEKEEPER, *PEER_LIBRARIES], rows))
    if notes:
        out.emit("", *notes)


# --- the whole run --------------------------------------------------------------------------


def _stop_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the server is stopped on the way out."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def run(out: Output, sizes: RedisSizes, alone: bool) -> None:
    """Every Redis benchmark, on a server started for them and stopped by pid at the end."""
    _stop_on_sigterm()
    available, _ = ratekeeper_algorithms()
    with RedisServer() as server:
        if not alone:
            out.emit("", "# Redis benchmarks")
        out.emit(
            "",
            f"- Redis: redis-server {server.version()} on 127.0.0.1:{server.port}, started by "
            f"the benchmark (pid {server.process.pid if server.process else '?'}), "
            "persistence off, on the same machine as the client",
            f"- Each measurement: about {sizes.seconds:g} s of calls, sized from a timed "
            f"warm-up; best of {sizes.repeats}, the libraries of a row taking turns",
            "",
            "Redis numbers are round trips: on loopback, client and server share the machine's "
            "cores, so the client's CPU per call, the server's CPU per call and the scheduling "
            "between them all count. The server's own time per decision is given beside each "
            "table. Absolute numbers move with the machine's load; ratios within one run are "
            "what count.",
        )
        to_floor, to_work, to_peers, to_same_work = sequential(out, server, sizes)
        to_peer, rates = concurrent(out, server, sizes)
        cached = deny(out, server, sizes)
        memory(out, server, sizes, available)
    summary(
        out,
        [
            (
                f"1. sequential: ratekeeper / same-work floor ≥ {SEQUENTIAL_TARGET:g}",
                to_work,
                "x",
            ),
            (
                f"1. sequential: ratekeeper / EVALSHA return 1 ≥ {SEQUENTIAL_TARGET:g} (stricter: "
                "a script that does nothing)",
                to_floor,
                "x",
            ),
            (
                f"1. sequential: ratekeeper / fastest peer ≥ {SEQUENTIAL_PEER_TARGET:g}",
                to_peers,
                "x",
            ),
            (
                f"1. server time: ratekeeper / same-work floor ≤ {SERVER_TARGET:g}",
                to_same_work,
                "x",
            ),
            (
                f"2. {CALLERS} concurrent: ratekeeper / fastest peer ≥ {CONCURRENT_PEER_TARGET:g}",
                to_peer,
                "x",
            ),
            (f"2. {CALLERS} concurrent: ≥ {CONCURRENT_TARGET:,} decisions/s", rates, "/s"),
            (
                f"3. deny, over-limit cache (a feature comparison: a local answer against a "
                f"round trip): / fastest peer ≥ {DENY_TARGET:g}",
                cached,
                "x",
            ),
        ],
        [
            SEQUENTIAL_TARGET,
            SEQUENTIAL_TARGET,
            SEQUENTIAL_PEER_TARGET,
            -SERVER_TARGET,
            CONCURRENT_PEER_TARGET,
            CONCURRENT_TARGET,
            DENY_TARGET,
        ],
    )


def summary(
    out: Output,
    lines: list[tuple[str, dict[str, float | None], str]],
    targets: list[float],
) -> None:
    """The Redis targets: the range measured over the algorithms, and how many meet each. A
    negative target is a ceiling: its value met is at most -target."""
    out.emit("", "## Redis targets", "")
    rows = []
    for (name, values, unit), target in zip(lines, targets, strict=True):
        measured = [value for value in values.values() if value is not None]
        if not measured:
            rows.append([name, report.MISSING, report.MISSING])
            continue
        low, high = min(measured), max(measured)
        span = f"{low:.2f}x to {high:.2f}x" if unit == "x" else f"{low:,.0f} to {high:,.0f}/s"
        met = sum(value <= -target if target < 0 else value >= target for value in measured)
        rows.append([name, span, f"{met} of {len(values)}"])
    out.emit(*report.table(["target", "measured (over the algorithms)", "met"], rows))


__all__ = ["REDIS_QUICK", "RedisSizes", "run"]
