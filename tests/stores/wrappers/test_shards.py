"""A breaker per shard, under a fake clock, over a store whose shards fail on command; the local
policy's share of each limit (``instances``); every opening counted."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from typing import Any

import pytest

from ratekeeper import Decision, Health, Limit, MemoryStore, StoreConfigError, StoreError
from ratekeeper.core.limits import share_of
from ratekeeper.stores import open_async_store, open_store
from ratekeeper.stores.memory import Hit
from ratekeeper.stores.wrappers.resilience import AsyncResilient, Resilient
from ratekeeper.testing import FakeClock

LIMIT = Limit(2, 60, "gcra")


class ShardFailure(StoreError):
    """A failure that names its shard, as a Redis Cluster store's does."""

    def __init__(self, shard: str) -> None:
        super().__init__(f"shard {shard} is down")
        self.shard = shard


class Shards:
    """A real MemoryStore cut into shards by the key's prefix (``"a:1"`` is on ``a``): a call
    touching a shard in ``down`` raises. ``moved`` renames a shard, as a failover does."""

    sharded = True

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.down: set[str] = set()
        self.moved: dict[str, str] = {}
        self.calls: list[tuple[str, ...]] = []  # the shards each call touched

    def shard_of(self, key: str, limit: Limit) -> str:
        shard = key.partition(":")[0]
        return self.moved.get(shard, shard)

    def _enter(self, keys: Sequence[tuple[str, Limit]]) -> None:
        shards = tuple(sorted({self.shard_of(key, limit) for key, limit in keys}))
        self.calls.append(shards)
        for shard in shards:
            if shard in self.down:
                raise ShardFailure(shard)

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        self._enter([(key, limit)])
        return self.inner.apply(key, limit, cost, now)

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        self._enter([(key, limit) for key, limit, _ in hits])
        return self.inner.apply_many(hits, all_or_nothing=all_or_nothing, now=now)

    def release(self, key: str, limit: Limit, slots: int = 1, now: float | None = None) -> Decision:
        self._enter([(key, limit)])
        return self.inner.release(key, limit, slots, now)

    def reset(self, key: str, limit: Limit) -> None:
        self.inner.reset(key, limit)

    def ping(self) -> Health:
        return Health(True)

    def close(self) -> None:
        pass


class AsyncShards:
    """The asyncio face of ``Shards``."""

    sharded = True

    def __init__(self, shards: Shards) -> None:
        self.shards = shards

    def shard_of(self, key: str, limit: Limit) -> str:
        return self.shards.shard_of(key, limit)

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        return self.shards.apply(key, limit, cost, now)

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        await asyncio.sleep(0)
        return self.shards.apply_many(hits, all_or_nothing=all_or_nothing, now=now)

    async def ping(self) -> Health:
        return Health(True)


def sharded(policy: str, clock: FakeClock, instances: int = 1) -> tuple[Resilient, Shards]:
    shards = Shards()
    return Resilient(shards, on_store_error=policy, instances=instances, clock=clock), shards


def outcome(decision: Decision) -> str:
    """One decision in a word: where it came from and what it said."""
    return ("degraded " if decision.degraded else "") + ("allow" if decision.allowed else "deny")


def test_a_dead_shard_degrades_only_its_own_keys(clock: FakeClock) -> None:
    store, shards = sharded("local", clock)
    shards.down = {"a"}
    answers = [(outcome(store.apply("a:1", LIMIT)), outcome(store.apply("b:1", LIMIT)))]
    answers += [(outcome(store.apply("a:1", LIMIT)), outcome(store.apply("b:1", LIMIT)))]
    answers += [(outcome(store.apply("a:1", LIMIT)), outcome(store.apply("b:1", LIMIT)))]
    assert answers == [
        ("degraded allow", "allow"),
        ("degraded allow", "allow"),
        ("degraded deny", "deny"),
    ]
    assert store.breakers.get("a").state == "open" and store.breakers.get("b").state == "closed"
    assert shards.calls == [("a",), ("b",)] * 3
    store.apply("a:1", LIMIT)  # open: the store is not called
    assert shards.calls[-1] == ("b",)
    health = store.ping()
    assert (health.breaker, health.open_shards, health.failures, health.opened) == (
        "open",
        ("a",),
        3,
        1,
    )
    assert health.degraded == 4


def test_a_batch_is_split_by_shard_and_a_failing_shard_fails_only_its_hits(
    clock: FakeClock,
) -> None:
    store, shards = sharded("deny", clock)
    shards.down = {"a"}
    hits = [("a:1", LIMIT, 1), ("b:1", LIMIT, 1), ("a:2", LIMIT, 1), ("c:1", LIMIT, 1)]
    assert [outcome(d) for d in store.apply_many(hits)] == [
        "degraded deny",
        "allow",
        "degraded deny",
        "allow",
    ]
    assert sorted(shards.calls) == [("a",), ("b",), ("c",)]
    for _ in range(2):
        store.apply_many(hits)
    assert store.breakers.get("a").state == "open"
    shards.calls.clear()
    assert [outcome(d) for d in store.apply_many(hits)] == [
        "degraded deny",
        "deny",  # b:1 and c:1 have used their 2 in the four batches
        "degraded deny",
        "deny",
    ]
    assert sorted(shards.calls) == [("b",), ("c",)]  # the open shard is not called


def test_all_or_nothing_over_shards_is_one_call_or_the_policys(clock: FakeClock) -> None:
    store, shards = sharded("local", clock)
    hits = [("a:1", LIMIT, 1), ("b:1", LIMIT, 1)]
    assert [outcome(d) for d in store.apply_many(hits, all_or_nothing=True)] == ["allow"] * 2
    assert shards.calls == [("a", "b")]
    shards.down = {"b"}
    for _ in range(3):  # the failure names shard b: only its breaker counts it
        decided = store.apply_many(hits, all_or_nothing=True)
        assert all(d.degraded for d in decided)
    assert store.breakers.get("b").state == "open"
    assert store.breakers.get("a").state == "closed" and store.breakers.get("a").failures == 0
    shards.calls.clear()
    decided = store.apply_many(hits, all_or_nothing=True)
    assert [outcome(d) for d in decided] == ["degraded deny"] * 2  # local: a:1 used 2 of 2
    assert shards.calls == []  # a shard of the batch is open: the policy answers all of it
    assert [outcome(d) for d in store.apply_many([("a:2", LIMIT, 1)])] == ["allow"]


def test_a_failover_moves_the_keys_to_a_fresh_breaker(clock: FakeClock) -> None:
    store, shards = sharded("local", clock)
    shards.down = {"a"}
    for _ in range(3):
        assert store.apply("a:1", Limit(100, 60)).degraded
    assert store.ping().open_shards == ("a",)
    shards.moved = {"a": "a2"}  # the replica is promoted; the slot map names it
    decision = store.apply("a:1", Limit(100, 60))
    assert not decision.degraded
    assert store.breakers.get("a2").state == "closed"
    clock.advance(1.0)
    assert store.ping().breaker == "half-open"  # the old node's breaker, no longer used
    assert store.ping().open_shards == ("a",)
    clock.advance(30.0)
    health = store.ping()  # retired, its counts kept
    assert (health.breaker, health.open_shards, health.failures, health.opened) == (
        "closed",
        (),
        3,
        1,
    )
    assert "a" not in store.breakers.by_shard


def test_a_reopening_after_a_failed_probe_is_an_opening_counted_and_logged(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store, shards = sharded("allow", clock)
    caplog.set_level(logging.INFO, logger="ratekeeper.store")
    shards.down = {"a"}
    for _ in range(3):
        store.apply("a:1", LIMIT)
    for _ in range(4):  # four failed probes, each opening the circuit again
        clock.advance(1.0)
        store.apply("a:1", LIMIT)
    shards.down = set()
    clock.advance(1.0)
    assert not store.apply("a:1", LIMIT).degraded
    assert [record.getMessage() for record in caplog.records] == [
        "request store shard a failed 3 times in a row (shard a is down); circuit open, the "
        "failure policy answers for 1.0s",
        # the re-openings, counted in the line of the recovery
        "request store shard a reachable again after 5.0 s (from its first failed call; its "
        "last failed 1.0 s ago; 4 re-openings not logged); circuit closed",
    ]
    assert 1 + 4 == 5 == store.ping().opened
    assert store.ping().failures == 7 and store.ping().open_shards == ()


@pytest.mark.parametrize(
    ("limit", "instances", "share"),
    [
        (Limit(100, 60), 3, Limit(33, 60)),
        (Limit(100, 60, "gcra", burst=20), 3, Limit(33, 60, "gcra", burst=6)),
        (Limit(2, 60, "token_bucket"), 5, Limit(1, 60, "token_bucket")),
        (Limit(60, 60, "bucketed_window"), 2, Limit(30, 60, "bucketed_window", granularity=1)),
        (Limit(7, 3600, calendar=False), 1, Limit(7, 3600)),
    ],
)
def test_share_of(limit: Limit, instances: int, share: Limit) -> None:
    assert share_of(limit, instances) == share


@pytest.mark.parametrize(
    ("limit", "instances", "admitted"),
    [
        (Limit(10, 60), 3, 3),
        (Limit(10, 60, "token_bucket", burst=4), 2, 2),
        (Limit(2, 60, "sliding_counter"), 5, 1),  # at least 1
        (Limit(10, 60), 1, 10),
    ],
)
def test_local_enforces_each_instances_share(
    clock: FakeClock, limit: Limit, instances: int, admitted: int
) -> None:
    store, shards = sharded("local", clock, instances)
    shards.down = {"a"}
    answers = [outcome(store.apply("a:1", limit)) for _ in range(admitted + 2)]
    assert answers == ["degraded allow"] * admitted + ["degraded deny"] * 2
    batch = store.apply_many([("a:2", limit, 1)] * (admitted + 1))
    assert [d.allowed for d in batch] == [True] * admitted + [False]
    assert not store.apply("b:1", limit).degraded  # a healthy shard keeps the whole limit


def test_local_share_of_concurrency_slots_and_their_release(clock: FakeClock) -> None:
    slots = Limit(4, 60, "concurrency")
    store, shards = sharded("local", clock, instances=2)
    shards.down = {"a"}
    assert [outcome(store.apply("a:jobs", slots)) for _ in range(3)] == [
        "degraded allow",
        "degraded allow",
        "degraded deny",
    ]
    assert store.release("a:jobs", slots).granted == 1
    assert store.apply("a:jobs", slots).allowed


def test_local_is_the_default_policy(clock: FakeClock) -> None:
    shards = Shards()
    store = Resilient(shards, clock=clock)
    shards.down = {"a"}
    assert [outcome(store.apply("a:1", LIMIT)) for _ in range(3)] == [
        "degraded allow",
        "degraded allow",
        "degraded deny",
    ]
    assert store.policy.on_store_error == "local"
    assert AsyncResilient(AsyncShards(shards)).policy.on_store_error == "local"


def test_a_store_without_shards_has_one_breaker(clock: FakeClock) -> None:
    store = Resilient(MemoryStore(), clock=clock)
    assert store.apply("a:1", LIMIT).allowed
    assert store.apply_many([("a:1", LIMIT, 1), ("b:1", LIMIT, 1)])[1].allowed
    assert list(store.breakers.by_shard) == [""] and store.ping().open_shards == ()


class Whole(Shards):
    """``Shards`` as one store: it names no shard, and fails as a whole."""

    sharded = False


def test_a_store_without_shards_names_none_when_its_breaker_opens(clock: FakeClock) -> None:
    whole = Whole()
    store = Resilient(whole, clock=clock)
    whole.down = {"a"}
    assert [outcome(store.apply("a:1", LIMIT)) for _ in range(3)] == ["degraded allow"] * 2 + [
        "degraded deny"
    ]
    health = store.ping()
    assert (health.breaker, health.open_shards, health.failures) == ("open", (), 3)
    clock.advance(1.0)
    assert (store.ping().breaker, store.ping().open_shards) == ("half-open", ())


def test_the_async_twin_splits_by_shard_too(clock: FakeClock) -> None:
    shards = Shards()
    shards.down = {"a"}
    store = AsyncResilient(AsyncShards(shards), on_store_error="deny", instances=2, clock=clock)
    hits = [("a:1", LIMIT, 1), ("b:1", LIMIT, 1)]

    async def main() -> list[list[str]]:
        rounds = []
        for _ in range(4):
            rounds.append([outcome(d) for d in await store.apply_many(hits)])
        rounds.append([outcome(await store.apply(key, LIMIT)) for key in ("a:1", "b:1")])
        return rounds

    assert asyncio.run(main()) == [
        ["degraded deny", "allow"],
        ["degraded deny", "allow"],
        ["degraded deny", "deny"],
        ["degraded deny", "deny"],
        ["degraded deny", "deny"],
    ]
    assert store.breakers.get("a").state == "open" and store.breakers.get("b").failures == 0
    assert sorted(shards.calls) == [("a",)] * 3 + [("b",)] * 5


BAD_INSTANCES: list[Any] = [0, -1, True, False, 1.0, 2.5, math.nan, math.inf, "2", None]


@pytest.mark.parametrize("bad", BAD_INSTANCES, ids=repr)
def test_bad_instances_are_refused_everywhere(bad: Any) -> None:
    message = f"instances must be an integer of at least 1, not {bad!r}"
    with pytest.raises(StoreConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Resilient(MemoryStore(), instances=bad)
    with pytest.raises(StoreConfigError, match="instances must be an integer"):
        AsyncResilient(MemoryStore(), instances=bad)
    with pytest.raises(StoreConfigError, match="instances must be an integer"):
        open_store("redis://127.0.0.1:1/0", instances=bad)
    with pytest.raises(StoreConfigError, match="instances must be an integer"):
        open_async_store("redis://127.0.0.1:1/0", instances=bad)


def test_a_cluster_store_is_sharded_through_its_wrappers_without_touching_the_network() -> None:
    store = open_store("redis+cluster://127.0.0.1:1", over_limit_cache=True)
    assert isinstance(store, Resilient)
    assert store._shard_of is not None  # the cache and the deferred opening say so
    assert store._shard_of("k", LIMIT) == ""  # not opened yet: the whole store's breaker
    standalone = open_store("redis://127.0.0.1:1/0", over_limit_cache=True)
    assert isinstance(standalone, Resilient) and standalone._shard_of is None
