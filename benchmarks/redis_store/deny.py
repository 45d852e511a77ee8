"""Part 3 of the Redis benchmarks: one hot key already over its limit, with and without
the over-limit cache."""

from __future__ import annotations

from typing import Any

from benchmarks import report
from benchmarks.contenders import (
    PEER_LIBRARIES,
    RATEKEEPER,
    SHARED,
)
from benchmarks.redis_store.peers import (
    RATEKEEPER_CACHED,
    SYNC,
    SyncFactory,
)
from benchmarks.redis_store.server import RedisServer
from benchmarks.redis_store.tables import (
    DENY_TARGET,
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
    DENY_AMOUNT,
    Plan,
)


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
            **peer_makers(algorithm, SYNC, bind),
        }
        out.progress(f"redis deny: {algorithm} ({', '.join(makers)})")
        results = run_row(server, makers, plan, sizes, f"deny / {algorithm}")
        cached, plain = results.get(RATEKEEPER_CACHED), results.get(RATEKEEPER)
        fastest = fastest_peer(results)
        peer_rate = fastest[1] if fastest else None
        ratios[algorithm] = ratio(cached, peer_rate)
        rows.append(
            [
                algorithm,
                rate(cached),
                rate(plain),
                *(rate(results.get(library)) for library in PEER_LIBRARIES),
                mark(ratios[algorithm], DENY_TARGET) + (f" ({fastest[0]})" if fastest else ""),
                report.ratio(ratio(plain, peer_rate)),
            ]
        )
        server_rows.append(
            [
                algorithm,
                f"{cached.server_us:.3f}"
                if cached and cached.server_us is not None
                else us(cached),
                us(plain),
                *(us(results.get(library)) for library in PEER_LIBRARIES),
            ]
        )
        notes.extend(errors(algorithm, results))
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
