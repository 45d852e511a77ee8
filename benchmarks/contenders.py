"""The libraries measured and the ``Contender`` every benchmark times, whatever its store.

The peer libraries, the algorithms each shares with ratekeeper (and its name for them),
ratekeeper's limit for an algorithm and amount, and ``limiter_contender``: a ``Limiter`` on any
store driven through ``Limiter.hit`` (``verb_contender``: through ``hit`` or ``charge``, with a
rate string, for the charges' rows, which no peer has). The in-memory adapters are in
``benchmarks.memory.peers``, the Redis ones in ``benchmarks.redis_store.peers``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import ratekeeper as rk
from ratekeeper.core.limits import NO_DEBT

#: Every limit in the benchmarks is per hour, but for the steady-state sliding log's, per second.
PERIOD = 3600
RATEKEEPER = "ratekeeper"
#: ratekeeper on Redis with its over-limit cache, a contender of its own on the deny path.
RATEKEEPER_CACHED = "ratekeeper + over-limit cache"
LIMITS = "limits"
PYRATE = "pyrate-limiter"
THROTTLED = "throttled-py"
PEER_LIBRARIES = (LIMITS, PYRATE, THROTTLED)

#: The key capacity given to every store that has one (ratekeeper's default).
MAX_KEYS = 1_000_000

#: Algorithms whose bucket size is a parameter; it is set to ``amount`` everywhere.
BURST_ALGORITHMS = frozenset({"token_bucket", "gcra", "leaky_bucket", "leaky_shaper"})

#: ratekeeper algorithm -> {peer library: the peer's name for the same algorithm}.
SHARED: dict[str, dict[str, str]] = {
    "fixed_window": {
        LIMITS: "FixedWindowRateLimiter",
        PYRATE: "InMemoryBucket + FixedWindow",
        THROTTLED: "fixed_window",
    },
    "sliding_log": {LIMITS: "MovingWindowRateLimiter", PYRATE: "InMemoryBucket (sliding log)"},
    "sliding_counter": {LIMITS: "SlidingWindowCounterRateLimiter", THROTTLED: "sliding_window"},
    "token_bucket": {PYRATE: "StateBucket + TokenBucket", THROTTLED: "token_bucket"},
    "leaky_bucket": {THROTTLED: "leaking_bucket"},
    "gcra": {PYRATE: "StateBucket + GCRA", THROTTLED: "gcra"},
}


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Contender:
    """One library configured for one algorithm and one limit.

    ``run(keys)`` makes one public call per key: it is the only thing timed. ``hit(key, cost)``
    makes one call of ``cost`` and says whether it was allowed (for setup and checks).
    ``settle()`` waits for background work the library started, so that it does not spill
    into the next measurement. ``decisions_per_key`` is how many decisions ``run`` makes per key.
    ``close()`` releases what the contender holds (connections, for the Redis benchmarks).
    """

    library: str
    run: Callable[[Sequence[str]], None]
    hit: Callable[[str, int], bool]
    settle: Callable[[], None] = _nothing
    decisions_per_key: int = 1
    close: Callable[[], None] = _nothing


def ratekeeper_algorithms() -> tuple[list[str], dict[str, str]]:
    """The ratekeeper algorithms that can be built now, and why each other one cannot."""
    available: list[str] = []
    missing: dict[str, str] = {}
    for algorithm in rk.Algorithm:
        try:
            rk.Limit(1, PERIOD, algorithm)
        except Exception as error:  # a module not written yet, or half-written
            missing[algorithm.value] = f"{type(error).__name__}: {error}"
        else:
            available.append(algorithm.value)
    return available, missing


def ratekeeper_limit(algorithm: str, amount: int, period: int = PERIOD) -> rk.Limit:
    """ratekeeper's limit of ``amount`` per ``period`` seconds, its burst (where it has one)
    ``amount``."""
    options = {"burst": amount} if algorithm in BURST_ALGORITHMS else {}
    return rk.Limit(amount, period, algorithm, **options)


def limiter_contender(
    limiter: rk.Limiter,
    algorithm: str,
    amount: int,
    library: str = RATEKEEPER,
    close: Callable[[], None] = _nothing,
    *,
    period: int = PERIOD,
) -> Contender:
    """``limiter.hit(key, limit)``, whatever store the limiter is on."""
    limit = ratekeeper_limit(algorithm, amount, period)
    hit = limiter.hit

    if algorithm == "concurrency":
        release = limiter.store.release

        # A slot is taken and given back: the pattern ``Limiter.concurrency`` makes.
        def run_pairs(keys: Sequence[str]) -> None:
            for key in keys:
                hit(key, limit)
                release(key, limit, 1)

        def check_pair(key: str, cost: int) -> bool:
            decision = hit(key, limit, cost)
            if decision.granted:
                release(key, limit, decision.granted)
            return decision.allowed

        return Contender(library, run_pairs, check_pair, decisions_per_key=2, close=close)

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            hit(key, limit)

    def check(key: str, cost: int) -> bool:
        return hit(key, limit, cost).allowed

    return Contender(library, run, check, close=close)


#: The two verbs of the charges' rows: a hit, and a charge of work already done.
HIT, CHARGE = "Limiter.hit", "Limiter.charge"


def debt_algorithms() -> list[str]:
    """The algorithms whose limits can hold a debt (and so be charged), in ``Algorithm`` order."""
    return [algorithm.value for algorithm in rk.Algorithm if algorithm not in NO_DEBT]


def verb_contender(
    limiter: rk.Limiter, verb: str, amount: int, close: Callable[[], None] = _nothing
) -> Contender:
    """``limiter.hit(key, "<amount>/hour")`` or ``limiter.charge(key, "<amount>/hour")`` (by
    ``verb``, ``HIT`` or ``CHARGE``), as the README calls them, whatever store the limiter is on.
    Its ``hit`` is a call of the same verb with a cost."""
    rate = f"{amount}/hour"
    call = limiter.hit if verb == HIT else limiter.charge

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            call(key, rate)

    def check(key: str, cost: int) -> bool:
        return call(key, rate, cost).allowed

    return Contender(verb, run, check, close=close)


def versions() -> dict[str, str]:
    """The installed version of each library ("not installed" for a peer the ``bench`` extra
    would bring: the service and charge rows run without them)."""
    found = {RATEKEEPER: rk.__version__}
    for library, package in (
        (LIMITS, "limits"),
        (PYRATE, "pyrate-limiter"),
        (THROTTLED, "throttled-py"),
    ):
        try:
            found[library] = version(package)
        except PackageNotFoundError:
            found[library] = "not installed"
    return found
