"""An opt-in local cache of denials, to keep abusive traffic off a shared store.

When the store denies a hit with ``retry_after`` T, nothing of that cost or more can pass on
that key before T, so the cache answers such hits itself until then, without a round trip. It
trades exactness in one respect only: capacity that other processes free early (a ``reset``)
is seen when the cached denial expires. Concurrency limits free slots early by design, so
their denials are never cached; a hit of a non-zero cost under a limit with debt must be
counted even when refused, so it always goes to the store. Hits given an explicit ``now``
(replays, tests) bypass it.

``OverLimitCache`` and ``AsyncOverLimitCache`` are twins: only I/O differs.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Unpack, cast

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.leases import Taken
from ratekeeper.core.decisions import Decision
from ratekeeper.core.inputs import check_hit
from ratekeeper.core.limits import Limit
from ratekeeper.stores.contract import (
    Admitted,
    AsyncLeasingStore,
    Health,
    Hit,
    LeaseTerms,
    LeasingStore,
    Sharded,
    is_sharded,
)


class _Denials:
    """``(limit id, key) -> (until, cost, decision)``, bounded, least recently used first out."""

    def __init__(self, max_keys: int, clock: Callable[[], float]) -> None:
        self.max_keys = max_keys
        self.clock = clock
        self.entries: OrderedDict[tuple[str, str], tuple[float, int, Decision]] = OrderedDict()
        self.answered = 0  # hits answered locally

    def lookup(self, key: str, limit: Limit, cost: int) -> Decision | None:
        entry = self.entries.get((limit.id, key))
        if entry is None:
            return None
        until, denied_cost, decision = entry
        left = until - self.clock()
        if left <= 0:
            del self.entries[(limit.id, key)]
            return None
        if cost < denied_cost or (cost and limit.debt):
            return None
        self.answered += 1
        return decision._replace(retry_after=left, reset_after=max(decision.reset_after, left))

    def remember(self, key: str, limit: Limit, cost: int, decision: Decision) -> None:
        if decision.allowed or limit.algorithm is Algorithm.CONCURRENCY:
            return
        wait = min(decision.retry_after, limit.period)  # an impossible cost: recheck each period
        if wait <= 0:
            return
        self.entries[(limit.id, key)] = (self.clock() + wait, cost, decision)
        self.entries.move_to_end((limit.id, key))
        if len(self.entries) > self.max_keys:
            self.entries.popitem(last=False)


class OverLimitCache:
    """Wrap ``store``; answer known denials locally until their ``retry_after``."""

    def __init__(
        self,
        store: LeasingStore,
        *,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.denials = _Denials(max_keys, clock)
        self.sharded: bool = is_sharded(store)

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        key, cost = check_hit(key, cost)
        if now is None:
            cached = self.denials.lookup(key, limit, cost)
            if cached is not None:
                return cached
        decision: Decision = self.store.apply(key, limit, cost, now)
        self.denials.remember(key, limit, cost, decision)
        return decision

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        decisions: list[Decision] = self.store.apply_many(
            hits, all_or_nothing=all_or_nothing, now=now
        )
        for (key, limit, cost), decision in zip(hits, decisions, strict=True):
            self.denials.remember(key, limit, cost, decision)
        return decisions

    def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        admitted: list[Admitted] = self.store.admit(hits, all_or_nothing=all_or_nothing)
        for (key, limit, cost), (decision, _) in zip(hits, admitted, strict=True):
            self.denials.remember(key, limit, cost, decision)
        return admitted

    def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        """The store's ``refund``; a denial cached for the key is forgotten (room freed)."""
        self.store.refund(key, limit, cost, at)
        self.denials.entries.pop((limit.id, key), None)

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        return self.store.release(key, limit, slots, now)

    def lease(self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]) -> Taken:
        return self.store.lease(key, limit, want, **terms)

    def reset(self, key: str, limit: Limit) -> None:
        self.denials.entries.pop((limit.id, key), None)
        self.store.reset(key, limit)

    def shard_of(self, key: str, limit: Limit) -> str:
        """The store's ``shard_of``, asked only of a store that is ``sharded``."""
        return cast(Sharded, self.store).shard_of(key, limit)

    def ping(self) -> Health:
        return self.store.ping()

    def close(self) -> None:
        self.store.close()


class AsyncOverLimitCache:
    """The asyncio twin of ``OverLimitCache``."""

    def __init__(
        self,
        store: AsyncLeasingStore,
        *,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.denials = _Denials(max_keys, clock)
        self.sharded: bool = is_sharded(store)

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        key, cost = check_hit(key, cost)
        if now is None:
            cached = self.denials.lookup(key, limit, cost)
            if cached is not None:
                return cached
        decision: Decision = await self.store.apply(key, limit, cost, now)
        self.denials.remember(key, limit, cost, decision)
        return decision

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        decisions: list[Decision] = await self.store.apply_many(
            hits, all_or_nothing=all_or_nothing, now=now
        )
        for (key, limit, cost), decision in zip(hits, decisions, strict=True):
            self.denials.remember(key, limit, cost, decision)
        return decisions

    async def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        admitted: list[Admitted] = await self.store.admit(hits, all_or_nothing=all_or_nothing)
        for (key, limit, cost), (decision, _) in zip(hits, admitted, strict=True):
            self.denials.remember(key, limit, cost, decision)
        return admitted

    async def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        await self.store.refund(key, limit, cost, at)
        self.denials.entries.pop((limit.id, key), None)

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        return await self.store.release(key, limit, slots, now)

    async def lease(self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]) -> Taken:
        return await self.store.lease(key, limit, want, **terms)

    async def reset(self, key: str, limit: Limit) -> None:
        self.denials.entries.pop((limit.id, key), None)
        await self.store.reset(key, limit)

    def shard_of(self, key: str, limit: Limit) -> str:
        """The store's ``shard_of``, asked only of a store that is ``sharded``."""
        return cast(Sharded, self.store).shard_of(key, limit)

    async def ping(self) -> Health:
        return await self.store.ping()

    async def close(self) -> None:
        await self.store.close()
