"""Server-side cost of the Lua script per call, per algorithm (a benchmark, not a test).

Runs hits on one hot key per algorithm and reads ``cmdstat_evalsha`` from ``INFO
commandstats``: the microseconds Redis spent running the script, without the network or the
client. The simulated clock advances 1 ms per hit against limits of 500 per second, so about
half of the hits are allowed (the concurrency limiter alternates acquiring and releasing).

    .venv/bin/python -m tests.parity.bench_lua URL [--hits N] [--rounds R] [--variant DIR ...]

Each ``--variant DIR`` also measures a script assembled from ``DIR/prelude.lua``, ``DIR/NAME.lua``
for each algorithm and ``DIR/dispatch.lua``, to compare a change with the installed script.
Variants run interleaved, round after round, and each reports its best round, so that noise
from other processes on the machine hits every variant alike.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import redis

from ratekeeper.algorithms import Algorithm
from ratekeeper.limit import Limit
from ratekeeper.stores.lua import SOURCE, arguments

LIMITS = [Limit(500, 1, algorithm) for algorithm in Algorithm]


def assemble(directory: Path) -> str:
    parts = [(directory / "prelude.lua").read_text()]
    parts += [(directory / f"{algorithm.value}.lua").read_text() for algorithm in Algorithm]
    parts.append((directory / "dispatch.lua").read_text())
    return "\n".join(parts)


def usec_per_call(client: redis.Redis, script: Any, limit: Limit, hits: int) -> float | None:
    key = f"bench:{{{limit.algorithm.value}}}"
    client.delete(key)
    now = 1_700_000_000.0
    try:
        script([key], arguments([(limit, 1)], now, False))
    except redis.ResponseError:
        return None  # a placeholder twin
    client.config_resetstat()
    concurrency = limit.algorithm is Algorithm.CONCURRENCY
    for i in range(hits):
        now += 0.001
        cost = -1 if concurrency and i % 2 else 1
        script([key], arguments([(limit, cost)], now, False))
    stats = client.info("commandstats")["cmdstat_evalsha"]
    client.delete(key)
    return float(stats["usec_per_call"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--hits", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variant", type=Path, action="append", default=[])
    options = parser.parse_args()
    client = redis.Redis.from_url(options.url)
    sources = {"installed": SOURCE} | {str(d): assemble(d) for d in options.variant}
    scripts = {name: client.register_script(source) for name, source in sources.items()}
    best: dict[tuple[str, str], float | None] = {}
    for _ in range(options.rounds):
        for limit in LIMITS:
            for name, script in scripts.items():
                value = usec_per_call(client, script, limit, options.hits)
                cell = (name, limit.algorithm.value)
                old = best.get(cell, value)
                best[cell] = None if value is None or old is None else min(old, value)
    names = list(scripts)
    print(f"{'usec/call':16}" + "".join(f"{name[-24:]:>26}" for name in names))
    for limit in LIMITS:
        row = [best[(name, limit.algorithm.value)] for name in names]
        cells = "".join(f"{'-' if v is None else f'{v:.2f}':>26}" for v in row)
        print(f"{limit.algorithm.value:16}{cells}")


if __name__ == "__main__":
    main()
