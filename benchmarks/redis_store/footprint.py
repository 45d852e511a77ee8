"""Part 4 of the Redis benchmarks: Redis memory per key after one hit on each of many keys."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks import report
from benchmarks.contenders import (
    PEER_LIBRARIES,
    RATEKEEPER,
    SHARED,
    Contender,
)
from benchmarks.redis_store.peers import (
    SYNC,
)
from benchmarks.redis_store.server import RedisServer
from benchmarks.redis_store.trials import RedisSizes, describe
from benchmarks.report import Output
from benchmarks.trials import (
    BenchmarkError,
)

#: Keys sampled with ``MEMORY USAGE`` in part 4.
MEMORY_SAMPLE = 200


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
                notes.append(f"- {algorithm} / {library}: {describe(error)}")
                continue
            cells.append(f"{taken.used:,.0f} / {taken.usage:,.0f}")
            if algorithm == "concurrency" and library == RATEKEEPER:
                notes.append(
                    "- concurrency: each key takes a slot and gives it back; an idle key holds "
                    f"no slot, and {taken.keys:.2f} Redis keys per key remain"
                )
            elif abs(taken.keys - 1) > 0.01:
                notes.append(f"- {algorithm} / {library}: {taken.keys:.2f} Redis keys per key")
        rows.append([algorithm, *cells])
    out.emit(*report.table(["algorithm", RATEKEEPER, *PEER_LIBRARIES], rows))
    if notes:
        out.emit("", *notes)
