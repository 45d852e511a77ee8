"""The process's side of a leased limit (``Leasing``, ``AsyncLeasing``): slices sized from
demand, granted locally, given back; exact sequences under a fake clock on a memory store
shared by several wrappers, as processes share Redis."""

from __future__ import annotations

import asyncio
import math

import pytest

from ratekeeper import Limit, Limiter
from ratekeeper.core.errors import StoreConfigError
from ratekeeper.stores import open_store
from ratekeeper.stores.memory import AsyncMemoryStore, MemoryStore
from ratekeeper.stores.wrappers.leasing import AsyncLeasing, Leasing
from ratekeeper.testing import FakeClock

HOT = Limit(1000, 10, sync="leased")  # a fixed window: 100/s


class Processes:
    """``n`` wrappers over one memory store, all on one fake clock, no background thread."""

    def __init__(self, n: int, **options: float) -> None:
        self.clock = FakeClock(1_700_000_000.0)
        self.store = MemoryStore(clock=self.clock)
        self.leasing = [Leasing(self.store, clock=self.clock, **options) for _ in range(n)]
        for one in self.leasing:
            one._ticker.start = lambda: None  # type: ignore[method-assign]

    def count(self, limit: Limit = HOT, key: str = "hot") -> int:
        """What the store has counted for ``key`` in the current window."""
        exact = Limit(limit.amount, limit.period, limit.algorithm)
        return limit.amount - self.store.apply(key, exact, 0).remaining


def test_a_hot_key_is_granted_from_slices_that_grow_with_its_demand() -> None:
    world = Processes(1)
    one = world.leasing[0]
    decisions = []
    for _ in range(400):  # 1,000 hits a second
        world.clock.advance(0.001)
        decisions.append(one.apply("hot", HOT))
    assert all(d.allowed for d in decisions)
    # The first slice is the hit's own; the next ones hold 50 ms of demand, at most 10% of
    # the limit: a handful of exchanges for 400 hits.
    assert one.exchanges <= 12 and one.granted == 400
    assert world.count() == 400 + one.slices[(HOT.id, "hot")].left
    last = decisions[-1]
    assert last.remaining == one.slices[(HOT.id, "hot")].left + (1000 - world.count())


def test_what_is_left_goes_back_on_close() -> None:
    world = Processes(1)
    one = world.leasing[0]
    for _ in range(60):
        world.clock.advance(0.001)
        assert one.apply("hot", HOT).allowed
    assert world.count() > 60  # the slice holds more than was granted
    one.close()
    assert world.count() == 60


def test_four_processes_never_pass_the_limit_and_fill_it_at_twice_the_demand() -> None:
    world = Processes(4)
    limit = Limit(2000, 1, sync="leased")
    admitted: dict[int, int] = {}
    for n in range(20_000):  # 4,000 a second, twice the limit, for 5 seconds
        world.clock.advance(0.00025)
        if world.leasing[n % 4].apply("hot", limit).allowed:
            second = int(world.clock() // 1)
            admitted[second] = admitted.get(second, 0) + 1
    full = [admitted[s] for s in sorted(admitted)[1:-1]]
    assert max(admitted.values()) <= 2000
    assert min(full) >= 0.97 * 2000
    exchanges = sum(one.exchanges for one in world.leasing)
    assert exchanges / 20_000 <= 0.05


def test_a_spent_budget_is_refused_locally_until_the_store_could_say_yes() -> None:
    world = Processes(2)
    a, b = world.leasing
    limit = Limit(10, 60, sync="leased")
    granted = sum((a if n % 2 else b).apply("hot", limit).allowed for n in range(40))
    assert granted == 10
    asked = a.exchanges + b.exchanges
    refusal = a.apply("hot", limit)
    assert not refusal.allowed and 0 < refusal.retry_after <= 1.0  # asked again within ttl
    world.clock.advance(0.01)
    assert not a.apply("hot", limit).allowed
    assert a.exchanges + b.exchanges == asked  # answered without the store


def test_a_slice_ends_with_its_window() -> None:
    world = Processes(1)
    one = world.leasing[0]
    limit = Limit(100, 1, sync="leased")
    world.clock.advance(1 - world.clock() % 1 + 0.9)  # 0.9 s into a window
    for _ in range(50):
        world.clock.advance(0.001)
        assert one.apply("hot", limit).allowed
    piece = one.slices[(limit.id, "hot")]
    assert piece.until <= world.clock() - world.clock() % 1 + 1  # not past the window's end
    before = one.exchanges
    world.clock.advance(1 - world.clock() % 1 + 0.01)  # into the next window
    assert one.apply("hot", limit).allowed
    assert one.exchanges == before + 1
    assert world.count(limit) == 1 + one.slices[(limit.id, "hot")].left


def test_the_sweep_gives_back_a_slice_that_ended() -> None:
    world = Processes(1, ttl=1.0)
    one = world.leasing[0]
    for _ in range(30):
        world.clock.advance(0.001)
        one.apply("hot", HOT)
    held = world.count()
    assert held > 30 and one.sweep() == 0  # not ended yet
    world.clock.advance(1.0)
    assert one.sweep() == 1 and world.count() == 30


def test_exact_limits_looks_and_explicit_times_go_to_the_store() -> None:
    world = Processes(1)
    one = world.leasing[0]
    exact = Limit(5, 60)
    assert [one.apply("k", exact).allowed for _ in range(6)] == [True] * 5 + [False]
    assert one.apply("k2", HOT, 0).allowed and one.apply("k3", HOT, 1, now=world.clock()).allowed
    assert one.exchanges == 0 and not one.slices


def test_all_or_nothing_gives_the_slices_units_back_when_the_store_refuses() -> None:
    world = Processes(1)
    one = world.leasing[0]
    tight = Limit(1, 60)
    for _ in range(3):  # a slice that holds more than a hit
        world.clock.advance(0.001)
        one.apply("hot", HOT)
    assert one.apply_many([("hot", HOT, 1), ("k", tight, 1)], all_or_nothing=True)[1].allowed
    left = one.slices[(HOT.id, "hot")].left
    assert left > 1
    refused = one.apply_many([("hot", HOT, 1), ("k", tight, 1)], all_or_nothing=True)
    assert [d.allowed for d in refused] == [True, False] and refused[0].granted == 0
    assert one.slices[(HOT.id, "hot")].left == left  # given back to the slice
    # And when the slice refuses, the store's hits are only looked at.
    spent = Limit(2, 60, sync="leased")
    assert all(d.allowed for d in one.apply_many([("s", spent, 2)]))
    looked = one.apply_many([("s", spent, 1), ("k2", tight, 1)], all_or_nothing=True)
    assert [d.allowed for d in looked] == [False, True] and looked[1].granted == 0
    assert one.apply("k2", tight).allowed  # nothing was counted on it


def test_bad_options_are_refused() -> None:
    store = MemoryStore()
    for options, message in [
        ({"ttl": 0}, "lease_ttl"),
        ({"ttl": math.nan}, "lease_ttl"),
        ({"horizon": -1}, "lease_horizon"),
        ({"share": 1.5}, "lease_share"),
        ({"share": True}, "lease_share"),
        ({"ttl": 0.01, "horizon": 0.05}, "at most lease_ttl"),
    ]:
        with pytest.raises(StoreConfigError, match=message):
            Leasing(store, **options)  # type: ignore[arg-type]
    with pytest.raises(StoreConfigError, match="lease_share"):
        open_store("redis://127.0.0.1:1/0", lease_share=0)


def test_a_memory_store_decides_a_leased_limit_exactly() -> None:
    limiter = Limiter(open_store("memory://"))
    assert [limiter.hit("k", Limit(3, 60, sync="leased")).allowed for _ in range(4)] == [
        True,
        True,
        True,
        False,
    ]


def test_the_async_twin_grants_and_gives_back_alike() -> None:
    clock = FakeClock(1_700_000_000.0)
    store = MemoryStore(clock=clock)

    async def main() -> tuple[int, int, int]:
        one = AsyncLeasing(AsyncMemoryStore(store), clock=clock)
        granted = 0
        for _ in range(200):
            clock.advance(0.001)
            granted += (await one.apply("hot", HOT)).allowed
        results = await asyncio.gather(*(one.apply("hot", HOT) for _ in range(50)))
        granted += sum(d.allowed for d in results)
        exchanges = one.exchanges
        await one.close()
        return granted, exchanges, HOT.amount - store.apply("hot", Limit(1000, 10), 0).remaining

    granted, exchanges, counted = asyncio.run(main())
    assert granted == 250 and exchanges <= 12 and counted == 250
