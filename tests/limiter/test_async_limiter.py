"""AsyncLimiter: the same behaviour as Limiter, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from ratekeeper import AsyncLimiter, AsyncMemoryStore, Limit, RateLimitExceeded
from ratekeeper.testing import FakeClock

T = TypeVar("T")


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


@pytest.fixture
def limiter(clock: FakeClock) -> AsyncLimiter:
    return AsyncLimiter(AsyncMemoryStore(clock=clock), sleep=clock.async_sleep)


def test_hit_peek_reset(limiter: AsyncLimiter) -> None:
    async def scenario() -> list[bool]:
        seen = [(await limiter.hit("k", "2/minute")).allowed for _ in range(3)]
        assert (await limiter.peek("k", "2/minute")).remaining == 0
        await limiter.reset("k", "2/minute")
        seen.append((await limiter.hit("k", "2/minute")).allowed)
        return seen

    assert run(scenario()) == [True, True, False, True]


def test_hit_many_all_or_nothing(limiter: AsyncLimiter) -> None:
    async def scenario() -> int:
        hits = [("ip", "5/minute"), ("user", "1/minute")]
        await limiter.hit_many(hits)
        refused = await limiter.hit_many(hits)
        assert not refused[1].allowed
        return (await limiter.peek("ip", "5/minute")).remaining

    assert run(scenario()) == 4


def test_acquire_paces(limiter: AsyncLimiter, clock: FakeClock) -> None:
    limit = Limit(1, 2, "gcra")

    async def scenario() -> None:
        for _ in range(3):
            await limiter.acquire("k", limit)

    start = clock()
    run(scenario())
    assert clock() - start == pytest.approx(4.0)


def test_acquire_timeout(limiter: AsyncLimiter) -> None:
    async def scenario() -> None:
        await limiter.hit("k", "1/hour")
        await limiter.acquire("k", "1/hour", timeout=1)

    with pytest.raises(RateLimitExceeded):
        run(scenario())


def test_decorator(limiter: AsyncLimiter) -> None:
    @limiter.limit("1/minute", key=lambda name: f"greet:{name}")
    async def greet(name: str) -> str:
        return f"hello {name}"

    async def scenario() -> None:
        assert await greet("ann") == "hello ann"
        assert await greet("bob") == "hello bob"
        with pytest.raises(RateLimitExceeded) as refused:
            await greet("ann")
        assert refused.value.retry_after > 0

    run(scenario())


def test_decorator_refuses_sync_functions(limiter: AsyncLimiter) -> None:
    with pytest.raises(TypeError, match="decorates async functions"):
        limiter.limit("1/minute")(lambda: None)  # type: ignore[arg-type]


def test_concurrency(limiter: AsyncLimiter) -> None:
    limit = Limit(1, 30, "concurrency")

    async def scenario() -> int:
        async with limiter.concurrency("jobs", limit):
            with pytest.raises(RateLimitExceeded):
                async with limiter.concurrency("jobs", limit):
                    pass
        return (await limiter.peek("jobs", limit)).remaining

    assert run(scenario()) == 1


def test_store_by_url() -> None:
    assert isinstance(AsyncLimiter("memory://").store, AsyncMemoryStore)
