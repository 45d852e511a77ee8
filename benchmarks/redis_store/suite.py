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
   the peers' equivalents;
5. ``Limiter.charge`` beside ``Limiter.hit`` on one hot key, ratekeeper alone (no peer has a
   charge verb), on the allow and deny paths (``charges``).

Every measurement is sized to last about ``RedisSizes.seconds`` from a timed warm-up, and
checked as in ``benchmarks.trials``: a sample of hits before and after must all be allowed
(allow path) or all denied (deny path). Around each timed run the server's ``INFO
commandstats`` is reset and read, which gives the server's own time per decision.
"""

from __future__ import annotations

import signal
import sys
import threading

from benchmarks import report
from benchmarks.contenders import (
    ratekeeper_algorithms,
)
from benchmarks.redis_store.charges import charges
from benchmarks.redis_store.concurrent_callers import concurrent
from benchmarks.redis_store.deny import deny
from benchmarks.redis_store.footprint import memory
from benchmarks.redis_store.peers import (
    CALLERS,
)
from benchmarks.redis_store.sequential import sequential
from benchmarks.redis_store.server import RedisServer
from benchmarks.redis_store.tables import (
    CONCURRENT_PEER_TARGET,
    CONCURRENT_TARGET,
    DENY_TARGET,
    SEQUENTIAL_PEER_TARGET,
    SEQUENTIAL_TARGET,
    SERVER_TARGET,
)
from benchmarks.redis_store.trials import REDIS_QUICK, RedisSizes
from benchmarks.report import Output


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
        charges(out, server, sizes)
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
