"""One in-memory adapter per library: each builds a ``Contender`` for one algorithm and one limit.

Every contender is driven through its library's public per-hit call, configured as a user would
configure it for in-memory, non-blocking use, with the same amount, period and burst as the
others. The only liberty taken is pyrate-limiter's bucket factory (see ``_PerKeyFactory``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

import limits as limits_lib
import pyrate_limiter as pl
from limits import strategies
from limits.storage import MemoryStorage
from throttled import Throttled, rate_limiter, store

import ratekeeper as rk
from benchmarks.contenders import (
    LIMITS,
    MAX_KEYS,
    PERIOD,
    PYRATE,
    RATEKEEPER,
    SHARED,
    THROTTLED,
    Contender,
    limiter_contender,
    ratekeeper_limit,
)

#: The units of the periods a benchmark uses, as rate strings name them.
UNITS = {3600: "hour", 1: "second"}


def ratekeeper(algorithm: str, amount: int, period: int = PERIOD) -> Contender:
    """``Limiter.hit(key, limit)`` over a ``MemoryStore``."""
    limiter = rk.Limiter(rk.MemoryStore(max_keys=MAX_KEYS))
    return limiter_contender(limiter, algorithm, amount, period=period)


#: ratekeeper's other public paths, timed beside ``Limiter.hit(key, limit)`` in every row.
RATE_STRING = "rate string"
DECORATOR = "decorator"
PATHS = (RATE_STRING, DECORATOR)


def ratekeeper_string(algorithm: str, amount: int, period: int = PERIOD) -> Contender:
    """``Limiter(algorithm=...).hit(key, "<amount>/hour")``: the README's first example."""
    limiter = rk.Limiter(rk.MemoryStore(max_keys=MAX_KEYS), algorithm=algorithm)
    rate = f"{amount}/{UNITS[period]}"
    hit = limiter.hit

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            hit(key, rate)

    def check(key: str, cost: int) -> bool:
        return hit(key, rate, cost).allowed

    return Contender(RATE_STRING, run, check)


def ratekeeper_decorator(algorithm: str, amount: int, period: int = PERIOD) -> Contender:
    """A function decorated with ``Limiter.limit(limit, key=...)``, its key its argument.

    Each call also calls the key function and the (empty) decorated function, which a bare
    ``hit`` does not; a refused call raises ``RateLimitExceeded``, caught in the loop.
    """
    limiter = rk.Limiter(rk.MemoryStore(max_keys=MAX_KEYS))
    limit = ratekeeper_limit(algorithm, amount, period)

    @limiter.limit(limit, key=lambda key: key)
    def guarded(key: str) -> None:
        return None

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            try:  # noqa: SIM105 (contextlib.suppress would time a context manager too)
                guarded(key)
            except rk.RateLimitExceeded:
                pass

    def check(key: str, cost: int) -> bool:
        return limiter.hit(key, limit, cost).allowed

    return Contender(DECORATOR, run, check)


def limits(algorithm: str, amount: int, period: int = PERIOD) -> Contender:
    """``strategy.hit(item, key)`` over ``limits.storage.MemoryStorage``.

    ``MemoryStorage`` expires keys from a ``threading.Timer`` it restarts every 10 ms while it
    is being hit; that thread is part of its cost and is left alone, then joined by ``settle``.
    """
    storage = MemoryStorage()
    strategy = getattr(strategies, SHARED[algorithm][LIMITS])(storage)
    if period == PERIOD:
        item: limits_lib.RateLimitItem = limits_lib.RateLimitItemPerHour(amount)
    else:
        item = limits_lib.RateLimitItemPerSecond(amount, period)
    hit = strategy.hit

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            hit(item, key)

    def check(key: str, cost: int) -> bool:
        return bool(hit(item, key, cost=cost))

    def settle() -> None:
        storage.timer.join()

    return Contender(LIMITS, run, check, settle)


class _PerKeyFactory(pl.BucketFactory):
    """A pyrate-limiter bucket factory with one bucket per key, as its docs show.

    Buckets are built directly rather than through ``BucketFactory.create``, which would
    register every bucket with the background leaker thread; leaking only drops entries older
    than the window (an hour), which no benchmark run reaches. On a one-second window
    (the steady-state sliding log) the log keeps its old entries through a measurement:
    ``put`` on the allow path never looks at them, so an entry costs the same either way.
    """

    def __init__(self, make_bucket: Callable[[], pl.AbstractBucket]) -> None:
        self._make_bucket = make_bucket
        self._buckets: dict[str, pl.AbstractBucket] = {}
        self._now = pl.MonotonicClock().now

    def wrap_item(self, name: str, weight: int = 1) -> pl.RateItem:
        return pl.RateItem(name, self._now(), weight=weight)

    def get(self, item: pl.RateItem) -> pl.AbstractBucket:
        bucket = self._buckets.get(item.name)
        if bucket is None:
            bucket = self._buckets[item.name] = self._make_bucket()
        return bucket


def pyrate(algorithm: str, amount: int, period: int = PERIOD) -> Contender:
    """``Limiter.try_acquire(key, blocking=False)`` over per-key in-memory buckets."""
    rate = pl.Rate(amount, period * 1000, burst=amount)  # the window in milliseconds
    makers: dict[str, Callable[[], pl.AbstractBucket]] = {
        "sliding_log": lambda: pl.InMemoryBucket([rate]),
        "fixed_window": lambda: pl.InMemoryBucket([rate], algorithm=pl.FixedWindow()),
        "token_bucket": lambda: pl.StateBucket([rate], algorithm=pl.TokenBucket()),
        "gcra": lambda: pl.StateBucket([rate], algorithm=pl.GCRA()),
    }
    acquire = pl.Limiter(_PerKeyFactory(makers[algorithm])).try_acquire

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            acquire(key, blocking=False)

    def check(key: str, cost: int) -> bool:
        return acquire(key, cost, blocking=False) is True

    return Contender(PYRATE, run, check)


def throttled(algorithm: str, amount: int, period: int = PERIOD) -> Contender:
    """``Throttled(using=...).limit(key)`` over throttled's ``MemoryStore``.

    The store's capacity is raised from its default of 1,024 keys to ``MAX_KEYS``; with the
    default, 100,000 keys would be evicted and the deny path would silently allow.
    """
    throttle = Throttled(
        using=SHARED[algorithm][THROTTLED],
        quota=rate_limiter.per_duration(timedelta(seconds=period), amount, burst=amount),
        store=store.MemoryStore(options={"MAX_SIZE": MAX_KEYS}),
    )
    limit = throttle.limit

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            limit(key)

    def check(key: str, cost: int) -> bool:
        return not limit(key, cost=cost).limited

    return Contender(THROTTLED, run, check)


FACTORIES: dict[str, Callable[[str, int, int], Contender]] = {
    RATEKEEPER: ratekeeper,
    RATE_STRING: ratekeeper_string,
    DECORATOR: ratekeeper_decorator,
    LIMITS: limits,
    PYRATE: pyrate,
    THROTTLED: throttled,
}
