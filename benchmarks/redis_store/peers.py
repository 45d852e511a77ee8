"""Contenders on Redis: ratekeeper, a raw redis-py baseline, and the peers' Redis backends.

Every contender is a ``benchmarks.contenders.Contender`` driven through its library's public per-hit
call, configured as a user would configure it for Redis, with the same amount, period and burst
as the others. The sync factories take ``(url, algorithm, amount, namespace)``; the asyncio ones
also take the event loop their clients live on, and ``run`` spreads its calls over ``CALLERS``
tasks gathered with ``asyncio.gather`` (task ``i`` makes calls ``i``, ``i + CALLERS``, ...), each
awaiting its hits one after another.

Where a library lets keys be prefixed, each contender gets its own ``namespace``; the benchmark
also empties the database between rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import limits as limits_lib
import pyrate_limiter as pl
import redis
import redis.asyncio
import throttled
import throttled.asyncio
from limits import strategies
from limits.aio import strategies as aio_strategies
from limits.storage import storage_from_string
from pyrate_limiter.buckets.redis_bucket import LuaScript

import ratekeeper as rk
from benchmarks.contenders import (
    LIMITS,
    PERIOD,
    PYRATE,
    RATEKEEPER,
    RATEKEEPER_CACHED,
    SHARED,
    THROTTLED,
    Contender,
    limiter_contender,
    ratekeeper_limit,
)
from ratekeeper.stores import open_async_store, open_store
from ratekeeper.stores.redis.clients import open_client

#: Concurrent callers in the asyncio benchmark.
CALLERS = 64

BASELINE = "EVALSHA return 1"
SAME_WORK = "same-work floor"

#: The least a script deciding on a stored state can do on the server: read the state, write
#: it back with a TTL, reply two numbers. No clock, no arithmetic, no argument parsing.
SAME_WORK_SCRIPT = """local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, 2}"""

SyncFactory = Callable[[str, str, int, str], Contender]
AsyncFactory = Callable[[asyncio.AbstractEventLoop, str, str, int, str], Contender]


# --- sync ---------------------------------------------------------------------------------


def ratekeeper(url: str, algorithm: str, amount: int, namespace: str) -> Contender:
    """``Limiter.hit`` on ``open_store(url, on_store_error=None)``: every hit one round trip."""
    store = open_store(url, on_store_error=None, prefix=namespace)
    return limiter_contender(rk.Limiter(store), algorithm, amount, close=store.close)


def ratekeeper_cached(url: str, algorithm: str, amount: int, namespace: str) -> Contender:
    """As ``ratekeeper``, with ``over_limit_cache=True``: known denials answered locally."""
    store = open_store(url, on_store_error=None, over_limit_cache=True, prefix=namespace)
    limiter = rk.Limiter(store)
    return limiter_contender(limiter, algorithm, amount, RATEKEEPER_CACHED, store.close)


def baseline(url: str, algorithm: str, amount: int, namespace: str) -> Contender:
    """The floor of a script round trip: ``EVALSHA`` of ``return 1``, no key, no argument.

    Sent the way ratekeeper sends its scripts, on a client opened as ratekeeper opens its own
    (``ratekeeper.stores.redis.clients.open_client``: the same connection class, command
    packer, reply parser, socket timeout and retry settings):
    ``client.execute_command("EVALSHA", sha, 0)``.
    It decides nothing, so its ``hit`` always allows: it belongs in allow-path rows only.
    """
    client = open_client(url, asyncio=False)
    sha = client.script_load("return 1")
    execute = client.execute_command

    def run(keys: Sequence[str]) -> None:
        for _ in keys:
            execute("EVALSHA", sha, 0)

    def check(key: str, cost: int) -> bool:
        return bool(execute("EVALSHA", sha, 0) == 1)

    return Contender(BASELINE, run, check, close=client.close)


def same_work(url: str, algorithm: str, amount: int, namespace: str) -> Contender:
    """``SAME_WORK_SCRIPT`` on a key of its own: one ``GET``, one ``SET ... PX`` of a 16-byte
    value (ratekeeper's two packed doubles) and a two-element reply, sent as ``baseline`` is.
    Like ``baseline`` it decides nothing and belongs in allow-path rows only."""
    client = open_client(url, asyncio=False)
    sha = client.script_load(SAME_WORK_SCRIPT)
    execute = client.execute_command
    key, value, ttl = f"{namespace}:{{floor}}", b"\x00" * 16, "3600000"

    def run(keys: Sequence[str]) -> None:
        for _ in keys:
            execute("EVALSHA", sha, 1, key, value, ttl)

    def check(key_: str, cost: int) -> bool:
        return bool(execute("EVALSHA", sha, 1, key, value, ttl) == [1, 2])

    return Contender(SAME_WORK, run, check, close=client.close)


def limits(url: str, algorithm: str, amount: int, namespace: str) -> Contender:
    """``strategy.hit(item, key)`` over ``storage_from_string("redis://...")``."""
    storage: Any = storage_from_string(url, key_prefix=namespace)
    strategy = getattr(strategies, SHARED[algorithm][LIMITS])(storage)
    item = limits_lib.RateLimitItemPerHour(amount)
    hit = strategy.hit

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            hit(item, key)

    def check(key: str, cost: int) -> bool:
        return bool(hit(item, key, cost=cost))

    return Contender(LIMITS, run, check, close=storage.storage.close)


class _RedisPerKeyFactory(pl.BucketFactory):
    """A pyrate-limiter bucket factory with one Redis-backed bucket per key.

    Stamps items with wall-clock milliseconds, the clock of ``RedisBucket.now`` and of
    ``RedisStateStore``, so that every process sharing the Redis agrees. Buckets are not
    registered with the background leaker (see ``benchmarks.memory.peers._PerKeyFactory``).
    """

    def __init__(self, make_bucket: Callable[[str], pl.AbstractBucket]) -> None:
        self._make_bucket = make_bucket
        self._buckets: dict[str, pl.AbstractBucket] = {}
        self._now = pl.WallClock().now

    def wrap_item(self, name: str, weight: int = 1) -> pl.RateItem:
        return pl.RateItem(name, self._now(), weight=weight)

    def get(self, item: pl.RateItem) -> pl.AbstractBucket:
        bucket = self._buckets.get(item.name)
        if bucket is None:
            bucket = self._buckets[item.name] = self._make_bucket(item.name)
        return bucket


def _pyrate_limiter(
    client: Any, script_hash: str, algorithm: str, amount: int, namespace: str
) -> pl.Limiter:
    """A ``pl.Limiter`` with one bucket per key, on a sync or an asyncio redis-py client.

    ``RedisBucket.init`` would load its script once per bucket (a round trip per new key); the
    script is loaded once and its hash given to each bucket instead.
    """
    rate = pl.Rate(amount, pl.Duration.HOUR, burst=amount)
    makers: dict[str, Callable[[str], pl.AbstractBucket]] = {
        "sliding_log": lambda key: pl.RedisBucket(
            [rate], client, f"{namespace}:{key}", script_hash
        ),
        "fixed_window": lambda key: pl.RedisBucket(
            [rate], client, f"{namespace}:{key}", script_hash, pl.FixedWindow()
        ),
        "token_bucket": lambda key: pl.StateBucket(
            [rate], pl.TokenBucket(), pl.RedisStateStore(client, f"{namespace}:{key}")
        ),
        "gcra": lambda key: pl.StateBucket(
            [rate], pl.GCRA(), pl.RedisStateStore(client, f"{namespace}:{key}")
        ),
    }
    return pl.Limiter(_RedisPerKeyFactory(makers[algorithm]))


def pyrate(url: str, algorithm: str, amount: int, namespace: str) -> Contender:
    """``Limiter.try_acquire(key, blocking=False)`` over per-key Redis buckets."""
    client = redis.Redis.from_url(url)
    script_hash = client.script_load(LuaScript.PUT_ITEM)
    acquire = _pyrate_limiter(client, script_hash, algorithm, amount, namespace).try_acquire

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            acquire(key, blocking=False)

    def check(key: str, cost: int) -> bool:
        return acquire(key, cost, blocking=False) is True

    return Contender(PYRATE, run, check, close=client.close)


def throttled_py(url: str, algorithm: str, amount: int, namespace: str) -> Contender:
    """``Throttled(using=..., store=RedisStore(server=url)).limit(key)``."""
    redis_store = throttled.store.RedisStore(server=url)
    throttle = throttled.Throttled(
        using=SHARED[algorithm][THROTTLED],
        quota=throttled.rate_limiter.per_hour(amount, burst=amount),
        store=redis_store,
    )
    limit = throttle.limit

    def run(keys: Sequence[str]) -> None:
        for key in keys:
            limit(f"{namespace}:{key}")

    def check(key: str, cost: int) -> bool:
        return not limit(f"{namespace}:{key}", cost=cost).limited

    def close() -> None:
        redis_store._backend.get_client().close()

    return Contender(THROTTLED, run, check, close=close)


SYNC: dict[str, SyncFactory] = {
    RATEKEEPER: ratekeeper,
    RATEKEEPER_CACHED: ratekeeper_cached,
    BASELINE: baseline,
    SAME_WORK: same_work,
    LIMITS: limits,
    PYRATE: pyrate,
    THROTTLED: throttled_py,
}


# --- asyncio --------------------------------------------------------------------------------


def _async_contender(
    library: str,
    loop: asyncio.AbstractEventLoop,
    call: Callable[[str], Awaitable[Any]],
    check: Callable[[str, int], Coroutine[Any, Any, bool]],
    close: Callable[[], Coroutine[Any, Any, None]],
) -> Contender:
    """A contender whose ``run`` gathers ``CALLERS`` tasks, each awaiting ``call`` in turn."""

    async def caller(keys: Sequence[str]) -> None:
        for key in keys:
            await call(key)

    async def callers(keys: Sequence[str]) -> None:
        await asyncio.gather(*(caller(keys[i::CALLERS]) for i in range(CALLERS)))

    def run(keys: Sequence[str]) -> None:
        loop.run_until_complete(callers(keys))

    def hit(key: str, cost: int) -> bool:
        return loop.run_until_complete(check(key, cost))

    def closing() -> None:
        loop.run_until_complete(close())

    return Contender(library, run, hit, close=closing)


def async_ratekeeper(
    loop: asyncio.AbstractEventLoop, url: str, algorithm: str, amount: int, namespace: str
) -> Contender:
    """``AsyncLimiter.hit`` on ``open_async_store(url, on_store_error=None)`` (batching on)."""
    store = open_async_store(url, on_store_error=None, prefix=namespace)
    limiter = rk.AsyncLimiter(store)
    limit = ratekeeper_limit(algorithm, amount)
    hit = limiter.hit

    def call(key: str) -> Awaitable[Any]:
        return hit(key, limit)

    async def check(key: str, cost: int) -> bool:
        return (await hit(key, limit, cost)).allowed

    return _async_contender(RATEKEEPER, loop, call, check, store.close)


def async_limits(
    loop: asyncio.AbstractEventLoop, url: str, algorithm: str, amount: int, namespace: str
) -> Contender:
    """``await strategy.hit(item, key)`` over ``storage_from_string("async+redis://...")``.

    limits' asyncio Redis storage uses coredis unless told otherwise; coredis is not
    installed, so it is given ``implementation="redispy"`` (redis-py's asyncio client).
    """
    storage: Any = storage_from_string(
        "async+" + url, implementation="redispy", key_prefix=namespace
    )
    strategy = getattr(aio_strategies, SHARED[algorithm][LIMITS])(storage)
    item = limits_lib.RateLimitItemPerHour(amount)
    hit = strategy.hit

    def call(key: str) -> Awaitable[Any]:
        return hit(item, key)

    async def check(key: str, cost: int) -> bool:
        return bool(await hit(item, key, cost=cost))

    async def close() -> None:
        await storage.bridge.storage.aclose()

    return _async_contender(LIMITS, loop, call, check, close)


def async_pyrate(
    loop: asyncio.AbstractEventLoop, url: str, algorithm: str, amount: int, namespace: str
) -> Contender:
    """``await Limiter.try_acquire(key, blocking=False)`` over per-key asyncio Redis buckets.

    With an asyncio bucket, ``try_acquire`` returns an awaitable. pyrate-limiter's other
    asyncio entry point, ``try_acquire_async``, holds one ``asyncio.Lock`` around every
    acquisition, which puts the callers in single file; the faster of the two is measured.
    """
    client = redis.asyncio.Redis.from_url(url)
    script_hash = loop.run_until_complete(client.script_load(LuaScript.PUT_ITEM))
    acquire = _pyrate_limiter(client, script_hash, algorithm, amount, namespace).try_acquire

    def call(key: str) -> Awaitable[Any]:
        return acquire(key, blocking=False)  # type: ignore[return-value]

    async def check(key: str, cost: int) -> bool:
        return await acquire(key, cost, blocking=False) is True  # type: ignore[misc]

    return _async_contender(PYRATE, loop, call, check, client.aclose)


def async_throttled(
    loop: asyncio.AbstractEventLoop, url: str, algorithm: str, amount: int, namespace: str
) -> Contender:
    """``await Throttled(...).limit(key)`` from ``throttled.asyncio`` on its ``RedisStore``."""
    redis_store = throttled.asyncio.store.RedisStore(server=url)
    throttle = throttled.asyncio.Throttled(
        using=SHARED[algorithm][THROTTLED],
        quota=throttled.asyncio.rate_limiter.per_hour(amount, burst=amount),
        store=redis_store,
    )
    limit = throttle.limit

    def call(key: str) -> Awaitable[Any]:
        return limit(f"{namespace}:{key}")

    async def check(key: str, cost: int) -> bool:
        return not (await limit(f"{namespace}:{key}", cost=cost)).limited

    async def close() -> None:
        await redis_store._backend.get_client().aclose()

    return _async_contender(THROTTLED, loop, call, check, close)


ASYNC: dict[str, AsyncFactory] = {
    RATEKEEPER: async_ratekeeper,
    LIMITS: async_limits,
    PYRATE: async_pyrate,
    THROTTLED: async_throttled,
}

__all__ = ["ASYNC", "BASELINE", "CALLERS", "PERIOD", "RATEKEEPER_CACHED", "SAME_WORK", "SYNC"]
