"""Kill the Redis Cluster master that owns a hot key's slot under a bounded load over the hot
key and background keys on every master: only the dead shard's keys are degraded, the hot
key's admissions stay within the policy's bound, and decisions are exact again by themselves.

The cluster answers for the slots it still covers (``cluster-require-full-coverage no``): with
Redis's default, every master refuses every key between the failure's detection and the
replica's promotion, and every key is then degraded, each master's breaker opening on its own.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from pathlib import Path

import pytest

from ratekeeper import Decision, Limit, StoreError
from ratekeeper.stores import open_async_store
from ratekeeper.stores.redis import AsyncRedisStore
from ratekeeper.stores.wrappers.breakers import STALE_COOLDOWNS
from tests.servers import RedisCluster, command

HOT = Limit(300, 3600, "gcra")  # the hot key: far more hits than this
BACKGROUND = Limit(1_000_000, 3600, "gcra")  # never refuses: each answer shows its shard's health
FRESH = Limit(20, 3600, "gcra")


def partial_coverage(cluster: RedisCluster) -> None:
    for node in cluster.nodes:
        command(node.port, "CONFIG", "SET", "cluster-require-full-coverage", "no")


async def failover_under_load(cluster: RedisCluster, policy: str) -> dict[str, object]:
    store = open_async_store(cluster.url, on_store_error=policy, timeout=0.5, prefix="sf")
    inner: AsyncRedisStore = store.store  # type: ignore[attr-defined]
    try:
        await store.apply("warm-up", BACKGROUND)  # the client learns the slot map
        background = [f"user:{n}" for n in range(60)]
        shard_at_kill = {key: inner.shard_of(key, BACKGROUND) for key in background}
        hot_shard = inner.shard_of("hot", HOT)
        assert len(set(shard_at_kill.values())) == 3, "background keys on every master"
        victim = next(node for node in cluster.nodes if hot_shard.endswith(f":{node.port}"))

        admitted = 0
        for _ in range(4):  # the store counts the hot key up to its limit, and beyond
            decided = await asyncio.gather(*(store.apply("hot", HOT) for _ in range(100)))
            admitted += sum(d.allowed for d in decided)
        assert admitted == HOT.amount
        # The bound below counts the hot key's state as on the replica when its master dies:
        # a replica still in its first sync when the master dies would have none.
        cluster.wait_for_replicas(victim)

        degraded: Counter[str] = Counter()  # per shard at the kill: "dead" or "healthy"
        answers: Counter[str] = Counter()
        hot_degraded_admitted = 0
        started = time.monotonic()
        cluster.kill(victim)
        failover = asyncio.ensure_future(asyncio.to_thread(cluster.wait_for_failover, victim))
        exact_since: float | None = None
        while time.monotonic() - started < 30:
            hot = [store.apply("hot", HOT) for _ in range(5)]
            rest = [store.apply(key, BACKGROUND) for key in background]
            decided: list[Decision] = await asyncio.gather(*hot, *rest)
            for decision in decided[:5]:
                admitted += decision.allowed
                hot_degraded_admitted += decision.allowed and decision.degraded
                degraded["hot"] += decision.degraded
            for key, decision in zip(background, decided[5:], strict=True):
                where = "dead" if shard_at_kill[key] == hot_shard else "healthy"
                answers[where] += 1
                degraded[where] += decision.degraded
                assert decision.allowed
            if any(d.degraded for d in decided):
                exact_since = None
            elif exact_since is None:
                exact_since = time.monotonic()
            if failover.done() and exact_since and time.monotonic() - exact_since > 2:
                break
            await asyncio.sleep(0.005)
        promoted = await failover
        elapsed = time.monotonic() - started
        assert exact_since is not None, "never exact again after the failover"

        # Exact again, by itself: a fresh limit in the failed-over slot admits exactly its amount.
        decided = [await store.apply("hot", FRESH) for _ in range(25)]
        assert not any(d.degraded for d in decided)
        assert sum(d.allowed for d in decided) == FRESH.amount
        health = await store.ping()
        # The dead master's breaker closes if a call still routed to it was redirected to the
        # promoted replica and answered; else it stays listed until, unasked for
        # STALE_COOLDOWNS cooldowns, it is retired. Then nothing is open.
        assert health.open_shards in ((), (hot_shard,)), health.open_shards
        breakers = store.breakers  # type: ignore[attr-defined]
        clock = breakers.clock
        breakers.clock = lambda: clock() + STALE_COOLDOWNS * 1.0 + 1.0
        later = await store.ping()
        breakers.clock = clock
        return {
            "promoted": promoted.port,
            "victim": victim.port,
            "elapsed": elapsed,
            "admitted": admitted,
            "hot_degraded_admitted": hot_degraded_admitted,
            "degraded": dict(degraded),
            "answers": dict(answers),
            "opened": health.opened,
            "open_shards": later.open_shards,
        }
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("policy", ["local", "allow"])
def test_a_dead_master_degrades_only_its_own_keys(tmp_path: Path, policy: str) -> None:
    cluster = RedisCluster(tmp_path)
    try:
        partial_coverage(cluster)
        seen = asyncio.run(failover_under_load(cluster, policy))
    finally:
        cluster.stop()
    print(f"\n{policy}: {seen}")
    degraded, answers = seen["degraded"], seen["answers"]
    assert isinstance(degraded, dict) and isinstance(answers, dict)
    assert degraded["healthy"] == 0, "a key on a healthy master was degraded"
    assert answers["healthy"] > 0
    assert degraded["dead"] > 0 and degraded["hot"] > 0, "the kill went unnoticed"
    assert seen["open_shards"] == ()
    admitted = seen["admitted"]
    assert isinstance(admitted, int)
    if policy == "local":
        # The bound: the store's limit, plus the instance's share (here all of it) in the
        # process while the shard failed; GCRA frees HOT.rate a second on each side.
        elapsed = seen["elapsed"]
        assert isinstance(elapsed, float)
        assert admitted <= 2 * HOT.amount + 2 * math.ceil(elapsed * HOT.rate)


@pytest.mark.slow
@pytest.mark.serial
def test_a_batch_fails_only_the_calls_of_the_dead_shard(tmp_path: Path) -> None:
    """One event-loop tick's calls over every master go as one batch, one run per slot: the
    dead master's calls fail, the others are decided."""
    cluster = RedisCluster(tmp_path)

    async def main() -> tuple[list[str], list[str]]:
        store = open_async_store(cluster.url, on_store_error=None, timeout=0.5, prefix="bf")
        assert isinstance(store.store, AsyncRedisStore)  # type: ignore[attr-defined]
        try:
            await store.apply("warm-up", BACKGROUND)
            keys = [f"user:{n}" for n in range(30)]
            dead = store.shard_of(keys[0], BACKGROUND)
            victim = next(node for node in cluster.nodes if dead.endswith(f":{node.port}"))
            on_dead = [key for key in keys if store.shard_of(key, BACKGROUND) == dead]
            cluster.kill(victim)
            outcomes = await asyncio.gather(
                *(store.apply(key, BACKGROUND) for key in keys), return_exceptions=True
            )
            failed = [
                key
                for key, one in zip(keys, outcomes, strict=True)
                if not isinstance(one, Decision)
            ]
            for key, one in zip(keys, outcomes, strict=True):
                assert isinstance(one, Decision | StoreError), (key, one)
            await asyncio.to_thread(cluster.wait_for_failover, victim)
            deadline = time.monotonic() + 15
            while True:  # until the client has found the promoted replica
                try:
                    await store.apply(on_dead[0], BACKGROUND)
                    break
                except StoreError:
                    assert time.monotonic() < deadline, "never found the promoted replica"
                    await asyncio.sleep(0.1)
            return failed, on_dead
        finally:
            await store.close()

    try:
        partial_coverage(cluster)
        failed, on_dead = asyncio.run(main())
    finally:
        cluster.stop()
    assert failed == on_dead and on_dead
