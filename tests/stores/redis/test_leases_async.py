"""Leased quotas in one asyncio process, on a real Redis: ``AsyncLeasing`` under concurrent tasks.

Fifty tasks hit one leased key until each is refused with nothing left: together they admit
exactly the limit (less than a unit of refill aside). Closing the store gives back every slice,
so the store then counts exactly the hits granted.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis

from ratekeeper import Algorithm, AsyncLimiter, Limit, Limiter, open_async_store, open_store
from ratekeeper.core.store_keys import state_key
from ratekeeper.stores.wrappers.leasing import AsyncLeasing
from tests.servers import RedisServer

TASKS = 50
AMOUNT = 1_000
DAY = 86_400
REFILLS = {Algorithm.TOKEN_BUCKET, Algorithm.GCRA, Algorithm.LEAKY_BUCKET}


def opened(url: str, prefix: str) -> AsyncLimiter:
    return AsyncLimiter(open_async_store(url, prefix=prefix, on_store_error=None, timeout=5.0))


def leasing_of(limiter: AsyncLimiter) -> AsyncLeasing:
    store = limiter.store
    assert isinstance(store, AsyncLeasing)
    return store


async def until_spent(limiter: AsyncLimiter, key: str, limit: Limit) -> int:
    """Hit ``key`` until refused with nothing left, here or in the store (bounded in time)."""
    admitted = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        decision = await limiter.hit(key, limit)
        if decision.allowed:
            admitted += 1
        elif decision.remaining == 0:
            return admitted
        await asyncio.sleep(0)  # a grant from the slice does not yield: let the others run
    raise AssertionError("still refused with budget left after 60s")


@pytest.mark.parametrize(
    "algorithm",
    [Algorithm.FIXED_WINDOW, Algorithm.BUCKETED_WINDOW, Algorithm.TOKEN_BUCKET, Algorithm.GCRA],
)
def test_concurrent_tasks_admit_exactly_the_limit(
    redis_server: RedisServer, algorithm: Algorithm
) -> None:
    prefix = f"async-{uuid.uuid4().hex[:8]}"
    limit = Limit(AMOUNT, DAY, algorithm, sync="leased")

    async def run() -> tuple[int, int]:
        limiter = opened(redis_server.url, prefix)
        counts = await asyncio.gather(*(until_spent(limiter, "hot", limit) for _ in range(TASKS)))
        exchanges = leasing_of(limiter).exchanges
        await limiter.close()
        return sum(counts), exchanges

    began = time.monotonic()
    admitted, exchanges = asyncio.run(run())
    refill = int(AMOUNT / DAY * (time.monotonic() - began)) + 1 if algorithm in REFILLS else 0
    assert AMOUNT <= admitted <= AMOUNT + refill
    assert exchanges < AMOUNT // 2  # the tasks shared slices: far fewer exchanges than hits
    if algorithm not in REFILLS:
        checker = Limiter(open_store(redis_server.url, prefix=prefix, on_store_error=None))
        assert AMOUNT - checker.peek("hot", Limit(AMOUNT, DAY, algorithm)).remaining == admitted
        checker.close()


@pytest.mark.parametrize("algorithm", [Algorithm.FIXED_WINDOW, Algorithm.TOKEN_BUCKET])
def test_close_gives_every_slice_back(redis_server: RedisServer, algorithm: Algorithm) -> None:
    """Fifty tasks hit ten keys twice each: a few exchanges per key take slices, the first its
    hit's own, the next sized from demand; before the close the store counts the slices (at
    least the hits), after it exactly the hits."""
    prefix = f"async-close-{uuid.uuid4().hex[:8]}"
    exact, leased = Limit(AMOUNT, DAY, algorithm), Limit(AMOUNT, DAY, algorithm, sync="leased")
    keys = [f"k{number}" for number in range(10)]
    checker = Limiter(open_store(redis_server.url, prefix=prefix, on_store_error=None))

    def counted() -> list[int]:
        return [AMOUNT - checker.peek(key, exact).remaining for key in keys]

    async def run() -> list[int]:
        limiter = opened(redis_server.url, prefix)

        async def twice(key: str) -> int:
            return sum([(await limiter.hit(key, leased)).allowed for _ in range(2)])

        granted = await asyncio.gather(*(twice(keys[n % 10]) for n in range(TASKS)))
        leasing = leasing_of(limiter)
        assert (leasing.granted, sum(granted)) == (100, 100)
        assert 10 <= leasing.exchanges < 100  # the tasks of a key share its slices
        assert all(count >= 10 for count in counted())  # the slices, counted before granted
        await limiter.close()
        return granted

    asyncio.run(run())
    assert counted() == [10] * 10
    client = redis.Redis.from_url(redis_server.url)
    assert not any(client.exists(state_key(exact, key, prefix) + ":s") for key in keys)
    client.close()
    checker.close()
