"""``AsyncResilient``: the asyncio twin of ``resilience.Resilient`` (see that module): only I/O
differs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreError
from ratekeeper.core.inputs import check_hits
from ratekeeper.core.limits import Limit
from ratekeeper.core.wording import many
from ratekeeper.stores.contract import Admitted, AsyncStore, Health, Hit
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.stores.wrappers.breakers import Breakers, CircuitBreaker
from ratekeeper.stores.wrappers.fleet import Fleet, FleetSize
from ratekeeper.stores.wrappers.policy import (
    UNREFUNDED,
    Policy,
    admit_all,
    by_shard,
    count_failure,
    place,
    sharding,
    timed,
    unrefunded,
)

T = TypeVar("T")


class AsyncResilient:
    """The asyncio twin of ``Resilient``."""

    def __init__(
        self,
        store: AsyncStore,
        *,
        on_store_error: str = "local",
        local: MemoryStore | None = None,
        instances: int | FleetSize = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.policy = Policy(on_store_error, local, instances)
        self.breakers = Breakers(clock)
        self.breaker = self.breakers.get("")
        self._shard_of = sharding(store)
        #: The roll calls that count the fleet (``instances="auto"``), run by whoever serves
        #: the store (``ratekeeper serve`` does); None when ``instances`` is configured.
        self.fleet: Fleet | None = None

    async def _through(self, breaker: CircuitBreaker, call: Callable[[], Awaitable[T]]) -> T | None:
        if not breaker.allows_call():
            return None
        try:
            result = await call()
        except StoreError as error:
            breaker.failed(error)
            return None
        except BaseException:
            breaker.abandon()
            raise
        breaker.succeeded()
        return result

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        shard_of = self._shard_of
        breaker = self.breaker if shard_of is None else self.breakers.get(shard_of(key, limit))
        decision: Decision | None = await self._through(
            breaker, lambda: self.store.apply(key, limit, cost, now)
        )
        if decision is None:
            return self.policy.decide([(key, limit, cost)], False, breaker)[0]
        return decision

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        shard_of = self._shard_of
        if shard_of is None:
            return await self._many(self.breaker, hits, all_or_nothing, now)
        hits = check_hits(hits)
        groups = by_shard(shard_of, hits)
        if len(groups) == 1:
            breaker = self.breakers.get(next(iter(groups)))
            return await self._many(breaker, hits, all_or_nothing, now)
        if all_or_nothing:
            shards = {shard: self.breakers.get(shard) for shard in groups}
            return await self._across(hits, shards, now)
        decided = await asyncio.gather(
            *(
                self._many(self.breakers.get(shard), [hits[i] for i in indexes], False, now)
                for shard, indexes in groups.items()
            )
        )
        return place(len(hits), list(zip(groups.values(), decided, strict=True)))

    async def _many(
        self,
        breaker: CircuitBreaker,
        hits: Sequence[Hit],
        all_or_nothing: bool,
        now: float | None,
    ) -> list[Decision]:
        decisions: list[Decision] | None = await self._through(
            breaker, lambda: self.store.apply_many(hits, all_or_nothing=all_or_nothing, now=now)
        )
        if decisions is None:
            return self.policy.decide(hits, all_or_nothing, breaker)
        return decisions

    async def _across(
        self, hits: Sequence[Hit], shards: dict[str, CircuitBreaker], now: float | None
    ) -> list[Decision]:
        breakers = list(shards.values())
        if admit_all(breakers):
            try:
                decisions: list[Decision] = await self.store.apply_many(
                    hits, all_or_nothing=True, now=now
                )
            except StoreError as error:
                count_failure(error, shards)
            except BaseException:
                for breaker in breakers:
                    breaker.abandon()
                raise
            else:
                for breaker in breakers:
                    breaker.succeeded()
                return decisions
        return self.policy.decide(hits, True, max(breakers, key=CircuitBreaker.retry_after))

    async def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        hits = check_hits(hits)
        shards = self._shards_of(hits)
        breakers = list(shards.values())
        if admit_all(breakers):
            try:
                admitted: list[Admitted] = await self.store.admit(
                    hits, all_or_nothing=all_or_nothing
                )
            except StoreError as error:
                count_failure(error, shards)
            except BaseException:
                for breaker in breakers:
                    breaker.abandon()
                raise
            else:
                for breaker in breakers:
                    breaker.succeeded()
                return admitted
        worst = max(breakers, key=CircuitBreaker.retry_after)
        return timed(self.policy.decide(hits, all_or_nothing, worst), self.policy.local)

    async def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        shard_of = self._shard_of
        breaker = self.breaker if shard_of is None else self.breakers.get(shard_of(key, limit))

        async def call() -> bool:
            await self.store.refund(key, limit, cost, at)
            return True

        if await self._through(breaker, call) is None:
            unrefunded.log(logging.WARNING, UNREFUNDED, many(cost, "unit"), key, "the store failed")

    def _shards_of(self, hits: Sequence[Hit]) -> dict[str, CircuitBreaker]:
        shard_of = self._shard_of
        if shard_of is None:
            return {"": self.breaker}
        return {shard: self.breakers.get(shard) for shard in by_shard(shard_of, hits)}

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        shard_of = self._shard_of
        breaker = self.breaker if shard_of is None else self.breakers.get(shard_of(key, limit))
        decision: Decision | None = await self._through(
            breaker, lambda: self.store.release(key, limit, slots, now)
        )
        if decision is None:
            return self.policy.release(key, limit, slots)
        return decision

    async def reset(self, key: str, limit: Limit) -> None:
        self.policy.reset(key, limit)
        await self.store.reset(key, limit)

    async def ping(self) -> Health:
        answered: Health = await self.store.ping()
        size = self.policy.fleet
        return self.breakers.health(answered, self.policy.errors)._replace(
            instances=size.size, instances_source=size.source
        )

    async def close(self) -> None:
        await self.store.close()
