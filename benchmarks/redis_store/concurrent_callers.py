"""Part 2 of the Redis benchmarks: 64 concurrent asyncio callers, allow path."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks import report
from benchmarks.contenders import (
    PEER_LIBRARIES,
    RATEKEEPER,
    SHARED,
)
from benchmarks.redis_store.peers import (
    ASYNC,
    CALLERS,
    AsyncFactory,
)
from benchmarks.redis_store.server import RedisServer
from benchmarks.redis_store.tables import (
    CONCURRENT_PEER_TARGET,
    CONCURRENT_TARGET,
    allow_amount,
    errors,
    fastest_peer,
    mark,
    peer_makers,
    rate,
    ratio,
    us,
)
from benchmarks.redis_store.trials import RedisSizes, run_row
from benchmarks.report import Output
from benchmarks.trials import (
    Plan,
)


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
            amount = allow_amount(algorithm)
            plan = Plan(amount, CALLERS, CALLERS * sizes.async_warmup, True, setup_cost=1)

            def bind(make: AsyncFactory, algorithm: str = algorithm, amount: int = amount) -> Any:
                return lambda namespace: make(loop, url, algorithm, amount, namespace)

            makers = {
                RATEKEEPER: bind(ASYNC[RATEKEEPER]),
                **peer_makers(algorithm, ASYNC, bind),
            }
            out.progress(f"redis concurrent: {algorithm} ({', '.join(makers)})")
            results = run_row(
                server, makers, plan, sizes, f"concurrent / {algorithm}", multiple=CALLERS
            )
            mine = results.get(RATEKEEPER)
            fastest = fastest_peer(results)
            to_peer = ratio(mine, fastest[1] if fastest else None)
            ratios[algorithm] = to_peer
            rates[algorithm] = mine.rate if mine else None
            absolute = report.MISSING
            if mine is not None and mine.rate is not None:
                absolute = "yes" if mine.rate >= CONCURRENT_TARGET else "no"
            rows.append(
                [
                    algorithm,
                    rate(mine),
                    *(rate(results.get(library)) for library in PEER_LIBRARIES),
                    mark(to_peer, CONCURRENT_PEER_TARGET) + (f" ({fastest[0]})" if fastest else ""),
                    absolute,
                ]
            )
            batch = report.MISSING
            if mine is not None and mine.batch is not None and mine.server_us is not None:
                batch = f"{mine.batch:.1f} ({mine.server_us * mine.batch:.0f} µs per run)"
            server_rows.append(
                [
                    algorithm,
                    us(mine),
                    batch,
                    *(us(results.get(library)) for library in PEER_LIBRARIES),
                ]
            )
            notes.extend(errors(algorithm, results))
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
