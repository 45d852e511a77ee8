"""A concurrency waiter gets a slot soon after its holder releases it, within its timeout.

Real threads, real processes and a real Redis: a holder keeps the only slot for 0.15 s of a
5 s lease; the waiter must get it once released, not when the lease would have expired.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time

import pytest

from ratekeeper import (
    AsyncLimiter,
    InvalidInputError,
    Limit,
    Limiter,
    MemoryStore,
    RateLimitExceeded,
    open_store,
)
from ratekeeper.testing import FakeClock
from tests.servers import RedisServer

SLOT = Limit(1, 5, "concurrency")  # one slot, expiring 5 s after it is taken
HOLD = 0.15


def hold(limiter: Limiter, key: str, held: threading.Event) -> None:
    with limiter.concurrency(key, SLOT):
        held.set()
        time.sleep(HOLD)


@pytest.mark.parametrize("timeout", [1.0, None])
def test_a_waiter_gets_the_slot_soon_after_it_is_released(timeout: float | None) -> None:
    limiter = Limiter()
    held = threading.Event()
    holder = threading.Thread(target=hold, args=(limiter, "jobs", held))
    holder.start()
    held.wait()
    started = time.monotonic()
    with limiter.concurrency("jobs", SLOT, timeout=timeout) as decision:
        waited = time.monotonic() - started
        assert decision.allowed
    holder.join()
    # Released after HOLD; the lease would have lasted 5 s. (Bounds are behaviour, not speed.)
    assert waited < 1.0


def test_a_waiter_gives_up_at_its_timeout() -> None:
    limiter = Limiter()
    assert limiter.hit("busy", SLOT).allowed  # never released within the test
    started = time.monotonic()
    with pytest.raises(RateLimitExceeded), limiter.concurrency("busy", SLOT, timeout=0.2):
        pass
    assert 0.2 <= time.monotonic() - started < 1.0


def test_timeout_zero_does_not_wait_and_a_bad_timeout_is_refused(clock: FakeClock) -> None:
    limiter = Limiter(MemoryStore(clock=clock), sleep=clock.sleep)
    assert limiter.hit("busy", SLOT).allowed
    with pytest.raises(RateLimitExceeded), limiter.concurrency("busy", SLOT):
        pass
    assert clock.slept == []
    for bad in (-1, float("nan"), "1"):
        with (
            pytest.raises(ValueError, match="timeout must be None or seconds >= 0"),
            limiter.concurrency("busy", SLOT, timeout=bad),  # type: ignore[arg-type]
        ):
            pass


def test_release_is_its_own_verb_and_takes_only_positive_slots() -> None:
    store = MemoryStore()
    slots = Limit(3, 60, "concurrency")
    assert store.apply("k", slots, 3).allowed
    released = store.release("k", slots, 2)
    assert (released.granted, released.remaining) == (2, 2)
    assert store.release("k", slots, 5).granted == 1  # only what is held
    for bad in (0, -1, 1.5):
        with pytest.raises(InvalidInputError):
            store.release("k", slots, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="release needs a concurrency limit, not gcra"):
        store.release("k", Limit(3, 60, "gcra"))


def test_an_async_waiter_gets_the_slot_soon_after_it_is_released() -> None:
    async def main() -> float:
        limiter = AsyncLimiter()

        async def holder() -> None:
            async with limiter.concurrency("jobs", SLOT):
                await asyncio.sleep(HOLD)

        task = asyncio.create_task(holder())
        await asyncio.sleep(0.01)
        started = time.monotonic()
        async with limiter.concurrency("jobs", SLOT, timeout=1.0):
            waited = time.monotonic() - started
        await task
        return waited

    assert asyncio.run(main()) < 1.0


def _hold_on_redis(url: str, held: multiprocessing.synchronize.Event) -> None:
    limiter = Limiter(open_store(url, on_store_error=None))
    with limiter.concurrency("redis-jobs", SLOT):
        held.set()
        time.sleep(HOLD)
    limiter.close()


def test_a_waiter_in_another_process_gets_the_slot_on_redis(redis_server: RedisServer) -> None:
    context = multiprocessing.get_context("spawn")
    held = context.Event()
    holder = context.Process(target=_hold_on_redis, args=(redis_server.url, held))
    holder.start()
    try:
        assert held.wait(30)
        limiter = Limiter(open_store(redis_server.url, on_store_error=None))
        started = time.monotonic()
        with limiter.concurrency("redis-jobs", SLOT, timeout=2.0) as decision:
            waited = time.monotonic() - started
            assert decision.allowed and not decision.degraded
        limiter.close()
        assert waited < 2.0  # released after HOLD; the lease lasts 5 s
    finally:
        holder.join(30)
    assert holder.exitcode == 0
