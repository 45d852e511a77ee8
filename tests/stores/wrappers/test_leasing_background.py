"""``Leasing(background=False)``: no thread sweeps; the caller sweeps on its own clock."""

from __future__ import annotations

import asyncio

import pytest

from ratekeeper import Limit
from ratekeeper.core.errors import StoreConfigError
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore
from ratekeeper.stores.wrappers.leasing import AsyncLeasing, Leasing
from ratekeeper.testing import FakeClock

LIMIT = Limit(100, 1.0, "token_bucket", sync="leased")


def test_without_background_no_thread_runs_and_sweep_gives_back() -> None:
    clock = FakeClock(1_000.0)
    leasing = Leasing(MemoryStore(clock=clock), clock=clock, background=False)
    for _ in range(3):  # the first slice is the hit's own; the next ones follow demand
        clock.advance(0.001)
        assert leasing.apply("a", LIMIT).allowed
    assert not leasing._ticker.running
    assert leasing.slices[(LIMIT.id, "a")].left > 0
    clock.advance(1.5)
    assert leasing.sweep() == 1
    assert leasing.slices[(LIMIT.id, "a")].left == 0
    leasing.close()


def test_without_background_no_task_sweeps() -> None:
    async def scenario() -> None:
        clock = FakeClock(1_000.0)
        leasing = AsyncLeasing(AsyncMemoryStore(clock=clock), clock=clock, background=False)
        assert (await leasing.apply("a", LIMIT)).allowed
        assert leasing._sweeper is None
        await leasing.close()

    asyncio.run(scenario())


def test_background_must_be_a_bool() -> None:
    with pytest.raises(StoreConfigError, match="background is True or False"):
        Leasing(MemoryStore(), background="no")
