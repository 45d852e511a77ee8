"""``Limiter.charge`` and its twin: a charge for work already done, counted even past the
limit, on the counters ``hit`` uses, on every store; and exact totals under real concurrency.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from ratekeeper import (
    AsyncLimiter,
    AsyncMemoryStore,
    InvalidLimitError,
    Limit,
    Limiter,
    MemoryStore,
    Store,
)
from ratekeeper.core.store_keys import state_key
from ratekeeper.stores.redis import AsyncRedisStore, RedisStore
from ratekeeper.stores.wrappers.overlimit import OverLimitCache
from ratekeeper.testing import FakeClock
from tests.servers import RedisCluster, RedisServer

_prefixes = itertools.count()

#: The count a store holds for ``key`` under a fixed window: ``count(key, limit)``.
Counter = Callable[[str, Limit], int]


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def counted(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[tuple[Store, Counter]]:
    """A store, and how to read a fixed window's count straight from what it stores."""
    kind = request.param
    if kind == "memory":
        store = MemoryStore(clock=clock)

        def count_in_memory(key: str, limit: Limit) -> int:
            state = store._tables.get(limit.id, {}).get(key)
            return 0 if state is None else int(state[1])

        yield store, count_in_memory
        return
    prefix = f"charge{next(_prefixes)}"
    client: Any
    if kind == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        client = redis.Redis.from_url(server.url)
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        client = redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup_nodes]
        )

    def count_in_redis(key: str, limit: Limit) -> int:
        raw = client.get(state_key(limit, key, prefix))
        return 0 if raw is None else int(struct.unpack("<dd", raw)[1])

    yield RedisStore(client, prefix=prefix), count_in_redis
    client.close()


def test_a_charge_counts_past_the_limit(counted: tuple[Store, Counter]) -> None:
    store, count = counted
    limiter = Limiter(store)
    limit = Limit(5, 3600)
    first = limiter.charge("user", limit, 4)
    assert (first.allowed, first.remaining, first.granted) == (True, 1, 4)
    second = limiter.charge("user", limit, 4)
    assert (second.allowed, second.remaining, second.granted) == (False, 0, 4)
    assert second.retry_after == second.reset_after > 0  # when the window ends
    assert count("user", limit) == 8
    # The same counters as hit: a hit, and a look, are refused until the window ends.
    assert not limiter.hit("user", limit).allowed
    assert not limiter.peek("user", "5/hour").allowed
    assert count("user", limit) == 8
    # A charge above the limit is counted too, and never fits.
    huge = limiter.charge("other", "5/hour", 7)
    assert (huge.allowed, huge.granted, huge.retry_after) == (False, 7, float("inf"))
    assert count("other", limit) == 7


def test_all_or_nothing_keeps_the_hits_with_debt(counted: tuple[Store, Counter]) -> None:
    """A refused batch takes back the hits without debt and keeps those with it (on a
    cluster, the two keys are in two slots: the part that admitted is refunded, but for its
    hits with debt)."""
    store, count = counted
    limiter = Limiter(store)
    plain, owing = Limit(2, 3600), Limit(2, 3600, debt=True)
    decisions = limiter.hit_many(
        [("address", plain, 1), ("user", owing, 1), ("user", owing, 2), ("name", plain, 3)]
    )
    assert [(d.allowed, d.granted) for d in decisions] == [
        (True, 0),
        (True, 1),
        (False, 2),
        (False, 0),
    ]
    assert (count("address", plain), count("user", plain), count("name", plain)) == (0, 3, 0)
    decisions = limiter.hit_many([("address", owing, 1), ("name", owing, 3)])
    assert [(d.allowed, d.granted) for d in decisions] == [(True, 1), (False, 3)]
    assert (count("address", plain), count("name", plain)) == (1, 3)


def test_a_charge_is_paid_back_at_the_exact_time(clock: FakeClock) -> None:
    limiter = Limiter(MemoryStore(clock=clock))
    limit = Limit(10, 60, "gcra")  # one unit every 6 s
    assert limiter.charge("k", limit, 13).granted == 13  # 3 past the burst of 10
    assert limiter.peek("k", limit).retry_after == pytest.approx(18.0)
    clock.advance(17.999)
    assert not limiter.peek("k", limit).allowed
    clock.advance(0.001)
    assert limiter.peek("k", limit).allowed
    assert not limiter.hit("k", limit).allowed
    clock.advance(6)
    assert limiter.hit("k", limit).allowed


def test_limits_that_cannot_hold_a_debt_are_refused() -> None:
    limiter = Limiter()
    with pytest.raises(InvalidLimitError, match="debt does not apply to sliding_log"):
        Limiter(algorithm="sliding_log").charge("k", "5/minute")
    with pytest.raises(InvalidLimitError, match="debt does not apply to concurrency"):
        limiter.charge("k", Limit(2, 30, "concurrency"))
    with pytest.raises(InvalidLimitError, match="debt does not combine with partial"):
        limiter.charge("k", Limit(2, 30, "token_bucket", partial=True))


def test_the_async_twin_charges_alike(clock: FakeClock) -> None:
    async def scenario() -> list[tuple[bool, int]]:
        limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
        answers = [await limiter.charge("k", "3/minute", 2) for _ in range(3)]
        answers.append(await limiter.peek("k", "3/minute"))
        return [(one.allowed, one.granted) for one in answers]

    assert asyncio.run(scenario()) == [(True, 2), (False, 2), (False, 2), (False, 0)]


THREADS = 8
CHARGES = 150
LIMIT = 500


def test_threads_charge_exact_totals(counted: tuple[Store, Counter]) -> None:
    """8 threads charging at once: every charge is counted, the stored count is their sum,
    and exactly the limit's worth of them fitted."""
    store, count = counted
    limiter = Limiter(store)
    limit = Limit(LIMIT, 86_400)
    fitted = [0] * THREADS
    charged = [0] * THREADS
    start = threading.Barrier(THREADS)

    def worker(index: int) -> None:
        start.wait()
        for _ in range(CHARGES):
            decision = limiter.charge("hot", limit)
            fitted[index] += decision.allowed
            charged[index] += decision.granted

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(charged) == THREADS * CHARGES
    assert count("hot", limit) == THREADS * CHARGES
    assert sum(fitted) == LIMIT


def test_asyncio_tasks_charge_exact_totals_through_redis_batches(
    redis_server: RedisServer,
) -> None:
    """Concurrent charges on one event loop share Redis round trips (the store's batches):
    each is counted once."""
    prefix = f"charge{next(_prefixes)}"
    limit = Limit(LIMIT, 86_400)

    async def main() -> list[tuple[int, int]]:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        limiter = AsyncLimiter(AsyncRedisStore(client, prefix=prefix))

        async def task() -> tuple[int, int]:
            fitted = charged = 0
            for _ in range(CHARGES):
                decision = await limiter.charge("hot", limit, 2)
                fitted += decision.allowed
                charged += decision.granted
            return fitted, charged

        totals = await asyncio.gather(*(task() for _ in range(THREADS)))
        await client.aclose()
        return totals

    totals = asyncio.run(main())
    assert sum(charged for _, charged in totals) == THREADS * CHARGES * 2
    assert sum(fitted for fitted, _ in totals) == LIMIT // 2
    with redis.Redis.from_url(redis_server.url) as client:
        raw = client.get(state_key(limit, "hot", prefix))
    assert struct.unpack("<dd", raw)[1] == THREADS * CHARGES * 2


def test_the_over_limit_cache_never_answers_a_charge(clock: FakeClock) -> None:
    """A denial kept locally answers the hits it can, but a charge must be counted: each one
    reaches the store."""
    memory = MemoryStore(clock=clock)
    limiter = Limiter(OverLimitCache(memory, clock=clock))
    limit = Limit(2, 3600)
    assert [limiter.charge("bot", limit, 2).allowed for _ in range(3)] == [True, False, False]
    assert memory._tables[limit.id]["bot"][1] == 6
    assert not limiter.hit("bot", limit).allowed  # refused, and kept in the cache
    assert not limiter.charge("bot", limit).allowed
    assert memory._tables[limit.id]["bot"][1] == 7
