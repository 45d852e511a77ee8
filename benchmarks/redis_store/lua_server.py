"""Server-side cost of the Lua script per call, per algorithm (a benchmark, not a test).

Sends hits on one hot key per algorithm through the script and reads ``cmdstat_evalsha`` from
``INFO commandstats``: the microseconds Redis spent running the script, without the network or
the client. The simulated clock advances 1 ms per hit against limits of 500 per second, so
about half of the hits are allowed once past the first second (the concurrency limiter's
slots of a second expire as fast as they are taken).

    .venv/bin/python -m benchmarks.redis_store.lua_server URL
        [--hits N] [--rounds R] [--variant DIR ...]

Each ``--variant DIR`` also measures a script assembled from ``DIR/prelude.lua``, ``DIR/NAME.lua``
for each algorithm and ``DIR/dispatch.lua``, to compare a change with the installed script.
``usec_per_call`` is wall time, which a busy machine inflates whenever it preempts the server;
so every cell runs ``R`` short rounds of ``N`` hits, the variants interleaved, and reports its
best round.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from math import inf
from pathlib import Path
from typing import Any

import redis

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.limits import Limit
from ratekeeper.stores.redis.scripts import SOURCE, arguments, batch_source

START = 1_700_000_000.0
WARM = 2_000  # hits before measuring: 2 simulated seconds, past the limits' first period


@dataclass
class Cell:
    """One variant of the script on one algorithm's hot key."""

    script: Any
    key: str
    limit: Limit
    clock: float = START
    best: float = inf

    def run(self, client: redis.Redis, hits: int) -> float:
        """``usec_per_call`` over ``hits`` more hits, 1 ms apart."""
        client.config_resetstat()
        for _ in range(hits):
            self.script([self.key], arguments([(self.limit, 1)], self.clock, False))
            self.clock += 0.001
        return float(client.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])


def assemble(directory: Path) -> str:
    """A batch script built as ``ratekeeper.stores.redis.scripts.SOURCE`` is, from ``directory``."""
    return batch_source(lambda name: (directory / Path(name).name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--hits", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--variant", type=Path, action="append", default=[])
    options = parser.parse_args()
    client = redis.Redis.from_url(options.url)
    sources = {"installed": SOURCE} | {str(d): assemble(d) for d in options.variant}
    cells: dict[tuple[str, Algorithm], Cell] = {}
    for algorithm in Algorithm:
        for number, (name, source) in enumerate(sources.items()):
            cell = Cell(
                client.register_script(source),
                f"bench:{{{algorithm.value}}}:{number}",
                Limit(500, 1, algorithm),
            )
            client.delete(cell.key)
            try:
                cell.run(client, WARM)  # reach the steady state
            except redis.ResponseError:
                continue  # an algorithm whose script fails is left out
            cells[(name, algorithm)] = cell
    for _ in range(options.rounds):
        for cell in cells.values():
            cell.best = min(cell.best, cell.run(client, options.hits))
    client.delete(*(cell.key for cell in cells.values()))
    print(f"{'usec/call':16}" + "".join(f"{name[-24:]:>26}" for name in sources))
    for algorithm in Algorithm:
        row = "".join(
            f"{cells[(name, algorithm)].best:>26.2f}"
            if (name, algorithm) in cells
            else f"{'-':>26}"
            for name in sources
        )
        print(f"{algorithm.value:16}{row}")


if __name__ == "__main__":
    main()
