"""The targets of the Redis benchmarks, and the cells of their tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks import report
from benchmarks.contenders import (
    PEER_LIBRARIES,
    PYRATE,
    SHARED,
    Contender,
)
from benchmarks.redis_store.trials import Result
from benchmarks.report import Output
from benchmarks.trials import (
    LOG_ALGORITHMS,
    LOG_AMOUNT,
    UNREACHABLE,
)

#: pyrate-limiter's Redis buckets for each algorithm ratekeeper shares with it.
PYRATE_REDIS = {
    "fixed_window": "RedisBucket + FixedWindow",
    "sliding_log": "RedisBucket (sliding log)",
    "token_bucket": "StateBucket + TokenBucket + RedisStateStore",
    "gcra": "StateBucket + GCRA + RedisStateStore",
}

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


Ratios = dict[str, float | None]


def rate(result: Result | None) -> str:
    if result is None:
        return report.MISSING
    if result.error is not None:
        return "error"
    return report.rate(result.rate)


def us(result: Result | None) -> str:
    if result is None or result.server_us is None:
        return report.MISSING
    return f"{result.server_us:.1f}"


def mark(value: float | None, target: float) -> str:
    if value is None:
        return report.MISSING
    return report.ratio(value) + (" ✓" if value >= target else " ✗")


def fastest_peer(results: dict[str, Result]) -> tuple[str, float] | None:
    rates = {
        library: result.rate
        for library, result in results.items()
        if library in PEER_LIBRARIES and result.rate is not None
    }
    if not rates:
        return None
    fastest = max(rates, key=rates.__getitem__)
    return fastest, rates[fastest]


def ratio(result: Result | None, other: float | None) -> float | None:
    if result is None or result.rate is None or not other:
        return None
    return result.rate / other


def errors(algorithm: str, results: dict[str, Result]) -> list[str]:
    lines = []
    for library, result in results.items():
        if result.error is not None:
            lines.append(f"- {algorithm} / {library}: {result.error}")
        lines.extend(
            f"- {algorithm} / {library}: a measurement was redone after {why}"
            for why in result.redone
        )
    return lines


def peer_makers(
    algorithm: str, factories: dict[str, Any], bind: Callable[[Any], Callable[[str], Contender]]
) -> dict[str, Callable[[str], Contender]]:
    return {
        library: bind(factories[library])
        for library in PEER_LIBRARIES
        if library in SHARED[algorithm] and library in factories
    }


def allow_amount(algorithm: str) -> int:
    return LOG_AMOUNT if algorithm in LOG_ALGORITHMS else UNREACHABLE


def peer_names(out: Output) -> None:
    for algorithm, peers in SHARED.items():
        names = []
        for library in PEER_LIBRARIES:
            if library in peers:
                name = PYRATE_REDIS[algorithm] if library == PYRATE else peers[library]
                names.append(f"{library}: `{name}`")
        out.emit(f"- {algorithm}: {'; '.join(names)}")
