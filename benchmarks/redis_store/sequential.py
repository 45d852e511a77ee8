"""Part 1 of the Redis benchmarks: one hot key, allow path, one call at a time."""

from __future__ import annotations

from typing import Any

from benchmarks import report
from benchmarks.contenders import (
    PEER_LIBRARIES,
    RATEKEEPER,
    SHARED,
)
from benchmarks.redis_store.peers import (
    BASELINE,
    SAME_WORK,
    SYNC,
    SyncFactory,
)
from benchmarks.redis_store.server import RedisServer
from benchmarks.redis_store.tables import (
    SEQUENTIAL_PEER_TARGET,
    SEQUENTIAL_TARGET,
    SERVER_TARGET,
    Ratios,
    allow_amount,
    errors,
    fastest_peer,
    mark,
    peer_makers,
    peer_names,
    rate,
    ratio,
    us,
)
from benchmarks.redis_store.trials import RedisSizes, run_row
from benchmarks.report import Output
from benchmarks.trials import (
    Plan,
)


def sequential(out: Output, server: RedisServer, sizes: RedisSizes) -> tuple[Ratios, ...]:
    """Part 1: one hot key, allow path, one call at a time. Returns ratekeeper / EVALSHA,
    ratekeeper / the same-work floor, ratekeeper / fastest peer, and ratekeeper's server time
    / the same-work floor's."""
    url = server.url
    out.emit("", "## Redis 1. Sequential: one hot key, allow path, one call at a time", "")
    out.emit(
        "Decisions per second, each call one round trip to Redis. `EVALSHA return 1` is "
        '`client.execute_command("EVALSHA", sha, 0)` of `return 1`, called in the same loop on '
        "a client opened as ratekeeper opens its own "
        "(`ratekeeper.stores.redis.clients.open_client`: the same connection class, command "
        "packer and parser), which is how ratekeeper sends its "
        "scripts: the floor of any script round trip. `same-work floor` is, sent the same way, "
        "a script doing the least a decision on a stored state can: one `GET`, one `SET ... PX` "
        "of 16 bytes, a two-element reply (`benchmarks/redis_store/peers.py`: `SAME_WORK_SCRIPT`). "
        "ratekeeper is "
        "`Limiter(open_store(url, on_store_error=None)).hit(key, limit)`. The peers' Redis "
        "backends for each algorithm:",
        "",
    )
    peer_names(out)
    rows, server_rows, notes = [], [], []
    ratios: Ratios = {}
    to_work: Ratios = {}
    to_peers: Ratios = {}
    to_same_work: Ratios = {}
    for algorithm in SHARED:
        amount = allow_amount(algorithm)
        plan = Plan(amount, 1, sizes.warmup, True, setup_cost=1)

        def bind(make: SyncFactory, algorithm: str = algorithm, amount: int = amount) -> Any:
            return lambda namespace: make(url, algorithm, amount, namespace)

        makers = {
            RATEKEEPER: bind(SYNC[RATEKEEPER]),
            BASELINE: bind(SYNC[BASELINE]),
            SAME_WORK: bind(SYNC[SAME_WORK]),
            **peer_makers(algorithm, SYNC, bind),
        }
        out.progress(f"redis sequential: {algorithm} ({', '.join(makers)})")
        results = run_row(server, makers, plan, sizes, f"sequential / {algorithm}")
        mine, floor = results.get(RATEKEEPER), results.get(BASELINE)
        to_floor = ratio(mine, floor.rate if floor else None)
        ratios[algorithm] = to_floor
        fastest = fastest_peer(results)
        to_peer = to_peers[algorithm] = ratio(mine, fastest[1] if fastest else None)
        work = results.get(SAME_WORK)
        to_work[algorithm] = ratio(mine, work.rate if work else None)
        server_ratio = to_same_work[algorithm] = (
            mine.server_us / work.server_us
            if mine and work and mine.server_us and work.server_us
            else None
        )
        rows.append(
            [
                algorithm,
                rate(mine),
                rate(floor),
                rate(work),
                mark(to_work[algorithm], SEQUENTIAL_TARGET),
                mark(to_floor, SEQUENTIAL_TARGET),
                *(rate(results.get(library)) for library in PEER_LIBRARIES),
                f"{mark(to_peer, SEQUENTIAL_PEER_TARGET)} ({fastest[0]})"
                if fastest
                else report.MISSING,
            ]
        )
        server_rows.append(
            [
                algorithm,
                us(mine),
                us(floor),
                us(work),
                report.MISSING
                if server_ratio is None
                else report.ratio(server_ratio) + (" ✓" if server_ratio <= SERVER_TARGET else " ✗"),
                *(us(results.get(library)) for library in PEER_LIBRARIES),
            ]
        )
        notes.extend(errors(algorithm, results))
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
