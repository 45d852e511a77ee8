"""What the failure policy of ``resilience``'s twins shares (no I/O): its own decisions, made
when the store fails (``Policy``), and its circuit breakers by shard: which shard a hit goes to,
a batch split by shard and put back in order, a call over several shards' breakers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import StoreConfigError, StoreError
from ratekeeper.core.inputs import check_hits, check_key
from ratekeeper.core.limits import Limit
from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.stores.contract import Admitted, Hit, check_release, is_sharded
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.stores.wrappers.breakers import CircuitBreaker
from ratekeeper.stores.wrappers.fleet import FleetSize

#: Refunds the store could not take: logged, throttled, never raised.
unrefunded = LogThrottle(logging.getLogger("ratekeeper.store"))
UNREFUNDED = "could not refund %s of %r (they stay counted): %s"

POLICIES = ("allow", "deny", "local")


#: The most processes a fleet may be told it has: more is a typo, not a fleet.
MAX_INSTANCES = 10_000_000


def check_instances(instances: Any) -> int:
    """``instances``: an ``int`` (not ``bool``) from 1 to ``MAX_INSTANCES``, else
    ``StoreConfigError``."""
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise StoreConfigError(f"instances must be an integer of at least 1, not {instances!r}")
    if instances > MAX_INSTANCES:
        raise StoreConfigError(f"instances must be at most {MAX_INSTANCES:,}, not {instances!r}")
    return int(instances)


class Policy:
    """The fallback decisions, shared by the twins; ``instances`` is the number of processes
    sharing the store, or a ``FleetSize`` that counts them (``wrappers.fleet``)."""

    def __init__(
        self, on_store_error: str, local: MemoryStore | None, instances: int | FleetSize
    ) -> None:
        if on_store_error not in POLICIES:
            raise StoreConfigError(
                f"on_store_error must be one of {', '.join(POLICIES)}, not {on_store_error!r}"
            )
        self.on_store_error = on_store_error
        self.fleet = (
            instances if isinstance(instances, FleetSize) else FleetSize(check_instances(instances))
        )
        self.local = local if local is not None else MemoryStore()
        self.errors = 0  # decisions made by the policy since start

    @property
    def instances(self) -> int:
        """The processes sharing the store, as the policy divides its limits now."""
        return self.fleet.size

    def decide(
        self, hits: Sequence[Hit], all_or_nothing: bool, breaker: CircuitBreaker
    ) -> list[Decision]:
        """The policy's decisions for ``hits`` (checked here: the store never saw them)."""
        hits = check_hits(hits)
        self.errors += len(hits)
        if self.on_store_error == "local":
            instances = self.fleet.size
            if instances == 1:
                decided = self.local.apply_many(hits, all_or_nothing=all_or_nothing)
                return [decision._replace(degraded=True) for decision in decided]
            weighed = [(key, limit, weigh(cost, limit, instances)) for key, limit, cost in hits]
            decided = self.local.apply_many(weighed, all_or_nothing=all_or_nothing)
            return [
                shown(decision, cost, weight, instances)
                for decision, (_, _, cost), (_, _, weight) in zip(
                    decided, hits, weighed, strict=True
                )
            ]
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
        else the slots expire by themselves."""
        key, slots = check_key(key), check_release(limit, slots)
        if self.on_store_error == "local":
            instances = self.fleet.size
            weight = weigh(slots, limit, instances)
            decision = self.local.release(key, limit, weight)
            return shown(decision, slots, weight, instances)
        return Decision(True, limit.capacity, 0, 0.0, 0.0, 0.0, 0, True)

    def reset(self, key: str, limit: Limit) -> None:
        self.local.reset(key, limit)


def weigh(cost: int, limit: Limit, instances: int) -> int:
    """What a hit of ``cost`` counts in the local store, where each of ``instances`` processes
    holds its share of ``limit``: ``instances`` times its cost, so that each admits 1/``instances``
    of the limit (``share_of``), but no more than the limit's capacity, so that each still
    admits one hit a window when the limit is smaller than the fleet. The local count is kept
    in the limit's own units: when the fleet's count changes, what each process admitted so far
    stays counted against its new share."""
    if instances == 1 or cost > limit.capacity:
        return cost  # refused whatever the fleet (unless in debt: then counted as it is)
    return min(cost * instances, limit.capacity)


def shown(decision: Decision, cost: int, weight: int, instances: int) -> Decision:
    """A local decision on weighed hits, told in the caller's units: the limit as this
    process's share, what remains of it, and what was granted of ``cost``."""
    if instances == 1:
        return decision._replace(degraded=True)
    granted = decision.granted
    return decision._replace(
        limit=max(decision.limit // instances, 1),
        remaining=decision.remaining // instances,
        granted=cost if granted >= weight else granted // instances,
        degraded=True,
    )


def by_shard(shard_of: Callable[[str, Limit], str], hits: Sequence[Hit]) -> dict[str, list[int]]:
    """The indexes of ``hits`` by shard, in order."""
    groups: dict[str, list[int]] = {}
    for index, (key, limit, _) in enumerate(hits):
        groups.setdefault(shard_of(key, limit), []).append(index)
    return groups


def place(size: int, parts: list[tuple[list[int], list[Decision]]]) -> list[Decision]:
    results: list[Any] = [None] * size
    for indexes, decided in parts:
        for index, decision in zip(indexes, decided, strict=True):
            results[index] = decision
    return results


def timed(decisions: list[Decision], local: MemoryStore) -> list[Admitted]:
    """The policy's ``decisions`` as ``Admitted``, at the policy's clock (never refunded)."""
    now = local.clock()
    return [Admitted(decision, now) for decision in decisions]


def admit_all(breakers: list[CircuitBreaker]) -> bool:
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


def blamed_by(error: StoreError, shards: dict[str, CircuitBreaker]) -> list[CircuitBreaker]:
    """The breakers a failure of a call over ``shards`` counts against: the shard the store
    names (``error.shard``), else every one."""
    named = getattr(error, "shard", None)
    if named in shards:
        return [shards[named]]
    return list(shards.values())


def count_failure(error: StoreError, shards: dict[str, CircuitBreaker]) -> None:
    """A failed call over ``shards``: it counts against the breakers it blames (``blamed_by``);
    the others give back the probe they may hold."""
    blamed = blamed_by(error, shards)
    for breaker in shards.values():
        if breaker in blamed:
            breaker.failed(error)
        else:
            breaker.abandon()


def sharding(store: object) -> Callable[[str, Limit], str] | None:
    """``store.shard_of`` when the store is made of shards, else None (one breaker)."""
    if is_sharded(store):
        return store.shard_of
    return None
