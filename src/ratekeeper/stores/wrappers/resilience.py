"""What a limiter does when its request store fails.

A limiter protects a service; it must not take it down. ``Resilient`` wraps any store: when the
store raises ``StoreError`` (every Redis call has a timeout, so a store that hangs raises too),
it answers by the policy ``on_store_error``:

``local`` (the default)
    fall back to an in-process ``MemoryStore``: limits stay enforced per process. With
    ``instances=N`` (the number of processes sharing the store), each process enforces its
    share of each limit, ``share_of(limit, N)``: 1/N of its amount and burst, at least 1.
``allow``
    fail open: the hit is allowed;
``deny``
    fail closed: the hit is refused, with ``retry_after`` the time until the store is tried
    again.

Such decisions have ``degraded=True``. The bound of ``local``: while a shard is failing, each
instance admits at most its share per window per key, so the fleet admits at most about one
limit per window beyond what the store had counted (the local counts start empty; with fewer
units in a limit than instances, each instance still admits 1). ``allow`` has no bound.

A circuit breaker stops waiting on a store that is down: after ``failures`` consecutive errors
it stops calling the store for ``cooldown`` seconds, then lets one call through to probe it,
and closes again (recovers by itself) on the first success. A store made of shards (a Redis
Cluster: one shard per master) says which shard holds a hit (``store.sharded`` and
``store.shard_of(key, limit)``), and each shard has its own breaker, so a dead master degrades
only the keys it holds. A batch is split by shard: the shards whose breaker is open are
answered by the policy, the others go to the store, and a shard that fails fails only its own
hits. An ``all_or_nothing`` batch over several shards stays one atomic store call: it goes to
the store only when every one of its shards' breakers lets it through, else the policy answers
all of it; its failure counts against the shard that failed (every shard of the batch when the
store does not say which). After a failover the promoted node is a shard of a new name, with a
fresh breaker: the store's slot map, refreshed by the failed calls and probes, sends the keys
there by itself. Every transition of a breaker is logged (``ratekeeper.store``) and counted,
every opening too (a re-opening after a failed probe as well), and ``ping()`` reports the
breakers with the counts (``Health``).

Only store failures (``StoreError``: a refused connection, a timeout, a server error) count
toward the breaker and are answered by the policy. A caller's mistake (``InvalidInputError``,
``InvalidLimitError``) and a misconfigured store (``StoreConfigError``: bad credentials, an
unknown database) are raised to the caller and leave the breaker as it was: neither would be
cured by waiting, and failing open on them would switch limiting off.

A refund (``refund``, giving back what ``admit`` granted) goes to the store through the same
breakers; one the store cannot take is logged (``ratekeeper.store``, throttled) and dropped,
never raised: its units stay counted until their window or bucket frees them. A decision the
policy made (``degraded``) is not for refunding: the policy kept its own count, if any.

``Resilient`` and ``AsyncResilient`` are twins: only I/O differs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreConfigError, StoreError
from ratekeeper.core.inputs import check_hits, check_key
from ratekeeper.core.limits import Limit, share_of
from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.core.wording import many
from ratekeeper.stores.contract import Admitted, Health, Hit, check_release
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.stores.wrappers.breakers import Breakers, CircuitBreaker

#: Refunds the store could not take: logged, throttled, never raised.
_unrefunded = LogThrottle(logging.getLogger("ratekeeper.store"))
UNREFUNDED = "could not refund %s of %r (they stay counted): %s"

T = TypeVar("T")

POLICIES = ("allow", "deny", "local")

#: The local policy's scaled limits kept at most (they are few: one per limit in use).
MAX_SHARES = 10_000


def check_instances(instances: Any) -> int:
    """``instances``: an ``int`` (not ``bool``) of at least 1, else ``StoreConfigError``."""
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise StoreConfigError(f"instances must be an integer of at least 1, not {instances!r}")
    return int(instances)


class _Policy:
    """The fallback decisions, shared by the twins."""

    def __init__(self, on_store_error: str, local: MemoryStore | None, instances: int) -> None:
        if on_store_error not in POLICIES:
            raise StoreConfigError(
                f"on_store_error must be one of {', '.join(POLICIES)}, not {on_store_error!r}"
            )
        self.on_store_error = on_store_error
        self.instances = check_instances(instances)
        self.local = local if local is not None else MemoryStore()
        self.errors = 0  # decisions made by the policy since start
        self._shares: dict[Limit, Limit] = {}

    def share(self, limit: Limit) -> Limit:
        """``limit`` as this instance enforces it alone (``share_of``), cached."""
        if self.instances == 1:
            return limit
        shared = self._shares.get(limit)
        if shared is None:
            if len(self._shares) >= MAX_SHARES:
                self._shares.clear()
            shared = self._shares[limit] = share_of(limit, self.instances)
        return shared

    def decide(
        self, hits: Sequence[Hit], all_or_nothing: bool, breaker: CircuitBreaker
    ) -> list[Decision]:
        """The policy's decisions for ``hits`` (checked here: the store never saw them)."""
        hits = check_hits(hits)
        self.errors += len(hits)
        if self.on_store_error == "local":
            if self.instances > 1:
                hits = [(key, self.share(limit), cost) for key, limit, cost in hits]
            decided = self.local.apply_many(hits, all_or_nothing=all_or_nothing)
            return [decision._replace(degraded=True) for decision in decided]
        if self.on_store_error == "allow":
            return [
                Decision(
                    True, limit.capacity, max(limit.capacity - cost, 0), 0.0, 0.0, 0.0, cost, True
                )
                for _, limit, cost in hits
            ]
        wait = breaker.retry_after()
        return [
            Decision(False, limit.capacity, 0, wait, wait, 0.0, 0, True) for _, limit, _ in hits
        ]

    def release(self, key: str, limit: Limit, slots: int) -> Decision:
        """A release the store could not take: the policy's local store takes it, if any;
        else the leases expire by themselves."""
        key, slots = check_key(key), check_release(limit, slots)
        if self.on_store_error == "local":
            return self.local.release(key, self.share(limit), slots)._replace(degraded=True)
        return Decision(True, limit.capacity, 0, 0.0, 0.0, 0.0, 0, True)

    def reset(self, key: str, limit: Limit) -> None:
        self.local.reset(key, self.share(limit))


def _shards(shard_of: Callable[[str, Limit], str], hits: Sequence[Hit]) -> dict[str, list[int]]:
    """The indexes of ``hits`` by shard, in order."""
    groups: dict[str, list[int]] = {}
    for index, (key, limit, _) in enumerate(hits):
        groups.setdefault(shard_of(key, limit), []).append(index)
    return groups


def _place(size: int, parts: list[tuple[list[int], list[Decision]]]) -> list[Decision]:
    results: list[Any] = [None] * size
    for indexes, decided in parts:
        for index, decision in zip(indexes, decided, strict=True):
            results[index] = decision
    return results


def _timed(decisions: list[Decision], local: MemoryStore) -> list[Admitted]:
    """The policy's ``decisions`` as ``Admitted``, at the policy's clock (never refunded)."""
    now = local.clock()
    return [Admitted(decision, now) for decision in decisions]


def _admit_all(breakers: list[CircuitBreaker]) -> bool:
    """Whether every one of ``breakers`` lets a call through (probes taken are given back
    when one does not)."""
    taken: list[CircuitBreaker] = []
    for breaker in breakers:
        if not breaker.allows_call():
            for probe in taken:
                probe.abandon()
            return False
        taken.append(breaker)
    return True


def _blamed(error: StoreError, shards: dict[str, CircuitBreaker]) -> list[CircuitBreaker]:
    """The breakers a failure of a call over ``shards`` counts against: the shard the store
    names (``error.shard``), else every one."""
    named = getattr(error, "shard", None)
    if named in shards:
        return [shards[named]]
    return list(shards.values())


def _count_failure(error: StoreError, shards: dict[str, CircuitBreaker]) -> None:
    """A failed call over ``shards``: it counts against the breakers it blames (``_blamed``);
    the others give back the probe they may hold."""
    blamed = _blamed(error, shards)
    for breaker in shards.values():
        if breaker in blamed:
            breaker.failed(error)
        else:
            breaker.abandon()


def _sharding(store: Any) -> Callable[[str, Limit], str] | None:
    """``store.shard_of`` when the store is made of shards, else None (one breaker)."""
    if getattr(store, "sharded", False) is True:
        shard_of: Callable[[str, Limit], str] = store.shard_of
        return shard_of
    return None


class Resilient:
    """A store that answers by ``on_store_error`` whenever ``store`` (or one of its shards)
    fails; ``instances`` is the number of processes sharing ``store`` (an int of at least 1,
    else ``StoreConfigError``), ``clock`` the breakers' clock. ``breaker`` is the breaker of a
    store without shards; ``breakers`` holds every shard's."""

    def __init__(
        self,
        store: Any,
        *,
        on_store_error: str = "local",
        local: MemoryStore | None = None,
        instances: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.policy = _Policy(on_store_error, local, instances)
        self.breakers = Breakers(clock)
        self.breaker = self.breakers.get("")
        self._shard_of = _sharding(store)

    def _through(self, breaker: CircuitBreaker, call: Callable[[], T]) -> T | None:
        """``call()`` on the store, unless ``breaker`` is open; None when it was not called
        or failed (the policy answers). Any other exception is the caller's: it propagates."""
        if not breaker.allows_call():
            return None
        try:
            result = call()
        except StoreError as error:
            breaker.failed(error)
            return None
        except BaseException:
            breaker.abandon()
            raise
        breaker.succeeded()
        return result

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        shard_of = self._shard_of
        breaker = self.breaker if shard_of is None else self.breakers.get(shard_of(key, limit))
        decision: Decision | None = self._through(
            breaker, lambda: self.store.apply(key, limit, cost, now)
        )
        if decision is None:
            return self.policy.decide([(key, limit, cost)], False, breaker)[0]
        return decision

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        shard_of = self._shard_of
        if shard_of is None:
            return self._many(self.breaker, hits, all_or_nothing, now)
        hits = check_hits(hits)
        groups = _shards(shard_of, hits)
        if len(groups) == 1:
            return self._many(self.breakers.get(next(iter(groups))), hits, all_or_nothing, now)
        if all_or_nothing:
            return self._across(hits, {shard: self.breakers.get(shard) for shard in groups}, now)
        parts = []
        for shard, indexes in groups.items():
            part = [hits[index] for index in indexes]
            parts.append((indexes, self._many(self.breakers.get(shard), part, False, now)))
        return _place(len(hits), parts)

    def _many(
        self,
        breaker: CircuitBreaker,
        hits: Sequence[Hit],
        all_or_nothing: bool,
        now: float | None,
    ) -> list[Decision]:
        decisions: list[Decision] | None = self._through(
            breaker, lambda: self.store.apply_many(hits, all_or_nothing=all_or_nothing, now=now)
        )
        if decisions is None:
            return self.policy.decide(hits, all_or_nothing, breaker)
        return decisions

    def _across(
        self, hits: Sequence[Hit], shards: dict[str, CircuitBreaker], now: float | None
    ) -> list[Decision]:
        """An all_or_nothing batch over several shards: one store call, or the policy's."""
        breakers = list(shards.values())
        if _admit_all(breakers):
            try:
                decisions: list[Decision] = self.store.apply_many(
                    hits, all_or_nothing=True, now=now
                )
            except StoreError as error:
                _count_failure(error, shards)
            except BaseException:
                for breaker in breakers:
                    breaker.abandon()
                raise
            else:
                for breaker in breakers:
                    breaker.succeeded()
                return decisions
        return self.policy.decide(hits, True, max(breakers, key=CircuitBreaker.retry_after))

    def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        """The store's ``admit`` in one call over every shard of ``hits``, when all their
        breakers let it through; else (or when it fails) the policy's decisions."""
        hits = check_hits(hits)
        shards = self._shards_of(hits)
        breakers = list(shards.values())
        if _admit_all(breakers):
            try:
                admitted: list[Admitted] = self.store.admit(hits, all_or_nothing=all_or_nothing)
            except StoreError as error:
                _count_failure(error, shards)
            except BaseException:
                for breaker in breakers:
                    breaker.abandon()
                raise
            else:
                for breaker in breakers:
                    breaker.succeeded()
                return admitted
        worst = max(breakers, key=CircuitBreaker.retry_after)
        return _timed(self.policy.decide(hits, all_or_nothing, worst), self.policy.local)

    def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        """The store's ``refund`` through the key's breaker; one that fails is logged."""
        shard_of = self._shard_of
        breaker = self.breaker if shard_of is None else self.breakers.get(shard_of(key, limit))
        if self._through(breaker, lambda: self.store.refund(key, limit, cost, at) or True) is None:
            _unrefunded.log(
                logging.WARNING, UNREFUNDED, many(cost, "unit"), key, "the store failed"
            )

    def _shards_of(self, hits: Sequence[Hit]) -> dict[str, CircuitBreaker]:
        shard_of = self._shard_of
        if shard_of is None:
            return {"": self.breaker}
        return {shard: self.breakers.get(shard) for shard in _shards(shard_of, hits)}

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        shard_of = self._shard_of
        breaker = self.breaker if shard_of is None else self.breakers.get(shard_of(key, limit))
        decision: Decision | None = self._through(
            breaker, lambda: self.store.release(key, limit, slots, now)
        )
        if decision is None:
            return self.policy.release(key, limit, slots)
        return decision

    def reset(self, key: str, limit: Limit) -> None:
        self.policy.reset(key, limit)
        self.store.reset(key, limit)

    def ping(self) -> Health:
        """The store's own ping (not through the breakers), with the breakers' state and
        counts."""
        answered: Health = self.store.ping()
        return self.breakers.health(answered, self.policy.errors)

    def close(self) -> None:
        self.store.close()


class AsyncResilient:
    """The asyncio twin of ``Resilient``."""

    def __init__(
        self,
        store: Any,
        *,
        on_store_error: str = "local",
        local: MemoryStore | None = None,
        instances: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.policy = _Policy(on_store_error, local, instances)
        self.breakers = Breakers(clock)
        self.breaker = self.breakers.get("")
        self._shard_of = _sharding(store)

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
        groups = _shards(shard_of, hits)
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
        return _place(len(hits), list(zip(groups.values(), decided, strict=True)))

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
        if _admit_all(breakers):
            try:
                decisions: list[Decision] = await self.store.apply_many(
                    hits, all_or_nothing=True, now=now
                )
            except StoreError as error:
                _count_failure(error, shards)
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
        if _admit_all(breakers):
            try:
                admitted: list[Admitted] = await self.store.admit(
                    hits, all_or_nothing=all_or_nothing
                )
            except StoreError as error:
                _count_failure(error, shards)
            except BaseException:
                for breaker in breakers:
                    breaker.abandon()
                raise
            else:
                for breaker in breakers:
                    breaker.succeeded()
                return admitted
        worst = max(breakers, key=CircuitBreaker.retry_after)
        return _timed(self.policy.decide(hits, all_or_nothing, worst), self.policy.local)

    async def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        shard_of = self._shard_of
        breaker = self.breaker if shard_of is None else self.breakers.get(shard_of(key, limit))

        async def call() -> bool:
            await self.store.refund(key, limit, cost, at)
            return True

        if await self._through(breaker, call) is None:
            _unrefunded.log(
                logging.WARNING, UNREFUNDED, many(cost, "unit"), key, "the store failed"
            )

    def _shards_of(self, hits: Sequence[Hit]) -> dict[str, CircuitBreaker]:
        shard_of = self._shard_of
        if shard_of is None:
            return {"": self.breaker}
        return {shard: self.breakers.get(shard) for shard in _shards(shard_of, hits)}

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
        return self.breakers.health(answered, self.policy.errors)

    async def close(self) -> None:
        await self.store.close()
