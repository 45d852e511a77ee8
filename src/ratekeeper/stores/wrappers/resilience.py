"""What a limiter does when its request store fails.

A limiter protects a service; it must not take it down. ``Resilient`` wraps any store: when the
store raises ``StoreError`` (every Redis call has a timeout, so a store that hangs raises too),
it answers by the policy ``on_store_error``:

``local`` (the default)
    fall back to an in-process ``MemoryStore``: limits stay enforced per process. With
    ``instances=N`` (the number of processes sharing the store, or a ``fleet.FleetSize`` that
    counts them), each process enforces its share of each limit, as ``share_of(limit, N)``
    would: each hit counts N times in the local store (``policy.weigh``), at most the limit's
    capacity, so that a process admits 1/N of the limit, at least one hit a window, and what it
    admitted stays counted when N changes.
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

``Resilient`` and ``AsyncResilient`` (``async_resilience.py``) are twins: only I/O differs.
What they share, the policy's own decisions and the breakers by shard, is ``policy.py``; the
breakers themselves are ``breakers.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreError
from ratekeeper.core.inputs import check_hits
from ratekeeper.core.limits import Limit
from ratekeeper.core.wording import many
from ratekeeper.stores.contract import Admitted, Health, Hit, Store
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.stores.wrappers.async_resilience import AsyncResilient
from ratekeeper.stores.wrappers.breakers import Breakers, CircuitBreaker
from ratekeeper.stores.wrappers.fleet import FleetSize
from ratekeeper.stores.wrappers.policy import (
    POLICIES,
    UNREFUNDED,
    Policy,
    admit_all,
    by_shard,
    check_instances,
    count_failure,
    place,
    sharding,
    timed,
    unrefunded,
)

__all__ = ["POLICIES", "AsyncResilient", "Resilient", "check_instances"]

T = TypeVar("T")


class Resilient:
    """A store that answers by ``on_store_error`` whenever ``store`` (or one of its shards)
    fails; ``instances`` is the number of processes sharing ``store`` (an int of at least 1,
    else ``StoreConfigError``), ``clock`` the breakers' clock. ``breaker`` is the breaker of a
    store without shards; ``breakers`` holds every shard's."""

    def __init__(
        self,
        store: Store,
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
        groups = by_shard(shard_of, hits)
        if len(groups) == 1:
            return self._many(self.breakers.get(next(iter(groups))), hits, all_or_nothing, now)
        if all_or_nothing:
            return self._across(hits, {shard: self.breakers.get(shard) for shard in groups}, now)
        parts = []
        for shard, indexes in groups.items():
            part = [hits[index] for index in indexes]
            parts.append((indexes, self._many(self.breakers.get(shard), part, False, now)))
        return place(len(hits), parts)

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
        if admit_all(breakers):
            try:
                decisions: list[Decision] = self.store.apply_many(
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

    def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        """The store's ``admit`` in one call over every shard of ``hits``, when all their
        breakers let it through; else (or when it fails) the policy's decisions."""
        hits = check_hits(hits)
        shards = self._shards_of(hits)
        breakers = list(shards.values())
        if admit_all(breakers):
            try:
                admitted: list[Admitted] = self.store.admit(hits, all_or_nothing=all_or_nothing)
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

    def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        """The store's ``refund`` through the key's breaker; one that fails is logged."""
        shard_of = self._shard_of
        breaker = self.breaker if shard_of is None else self.breakers.get(shard_of(key, limit))

        def call() -> bool:
            self.store.refund(key, limit, cost, at)
            return True

        if self._through(breaker, call) is None:
            unrefunded.log(logging.WARNING, UNREFUNDED, many(cost, "unit"), key, "the store failed")

    def _shards_of(self, hits: Sequence[Hit]) -> dict[str, CircuitBreaker]:
        shard_of = self._shard_of
        if shard_of is None:
            return {"": self.breaker}
        return {shard: self.breakers.get(shard) for shard in by_shard(shard_of, hits)}

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
        size = self.policy.fleet
        return self.breakers.health(answered, self.policy.errors)._replace(
            instances=size.size, instances_source=size.source
        )

    def close(self) -> None:
        self.store.close()
