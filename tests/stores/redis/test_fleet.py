"""The fleet's roll call on a real Redis and a real Redis Cluster: processes sharing a store
count themselves through it (``instances="auto"``), and the ``local`` policy divides each limit
by the last count while the store fails."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from ratekeeper import Limit
from ratekeeper.stores import open_async_store
from ratekeeper.stores.redis import AsyncRedisStore
from ratekeeper.stores.redis.fleet import roll_keys
from ratekeeper.stores.wrappers.async_resilience import AsyncResilient
from ratekeeper.stores.wrappers.fleet import Fleet
from tests.servers import RedisCluster, RedisServer, command


def opened(url: str, prefix: str) -> tuple[AsyncResilient, AsyncRedisStore]:
    store = open_async_store(url, instances="auto", prefix=prefix, timeout=0.25)
    assert isinstance(store, AsyncResilient)
    assert store.fleet is not None
    inner = store.fleet.store
    assert isinstance(inner, AsyncRedisStore)
    return store, inner


def test_processes_count_themselves_and_leave(redis_server: RedisServer) -> None:
    prefix = f"fleet-{uuid.uuid4().hex[:8]}"

    async def main() -> list[int | None]:
        store, inner = opened(redis_server.url, prefix)
        fleets = [Fleet(inner, ttl=30) for _ in range(3)]  # three processes, one client
        try:
            counts = [await fleet.call() for fleet in fleets]  # each sees those before it
            counts.append(await fleets[0].call())  # a second call changes nothing
            await fleets[2].leave()
            counts.append(await fleets[0].call())
            await fleets[1].leave()
            counts.append(await fleets[0].call())
            return counts
        finally:
            await store.close()

    assert asyncio.run(main()) == [1, 2, 3, 3, 2, 1]


def test_a_member_not_renewed_expires(redis_server: RedisServer) -> None:
    prefix = f"fleet-{uuid.uuid4().hex[:8]}"

    async def main() -> tuple[int | None, int | None]:
        store, inner = opened(redis_server.url, prefix)
        gone = Fleet(inner, ttl=0.3)  # a process killed: it never leaves
        staying = Fleet(inner, ttl=30)
        try:
            await gone.call()
            before = await staying.call()
            await asyncio.sleep(0.5)
            return before, await staying.call()
        finally:
            await store.close()

    assert asyncio.run(main()) == (2, 1)


def test_the_local_policy_divides_each_limit_by_the_last_count(tmp_path: Path) -> None:
    """Four processes counted; the store's server then stops: each admits a quarter of the
    limit, exactly, and says where the figure comes from."""
    server = RedisServer(tmp_path / "redis")
    limit = Limit(100, 3600)

    async def main() -> tuple[list[int | None], int | None, int, list[tuple[int, str]]]:
        store, inner = opened(server.url, "fleet")
        assert store.fleet is not None
        others = [Fleet(inner, ttl=30) for _ in range(3)]
        healths = [await store.ping()]
        counts = [await other.call() for other in others] + [await store.fleet.call()]
        healths.append(await store.ping())
        server.stop()
        failed = await store.fleet.call()  # the last count stays
        admitted = sum([(await store.apply("k", limit)).allowed for _ in range(60)])
        healths.append(await store.ping())
        await store.close()
        return counts, failed, admitted, [(h.instances, h.instances_source) for h in healths]

    try:
        counts, failed, admitted, healths = asyncio.run(main())
    finally:
        server.stop()
    assert counts == [1, 2, 3, 4]
    assert failed is None
    assert admitted == 25
    assert healths == [(1, "unknown"), (4, "counted"), (4, "counted")]


def test_a_configured_count_is_used_as_given(redis_server: RedisServer) -> None:
    async def main() -> tuple[int, str, object]:
        store = open_async_store(redis_server.url, instances=3)
        try:
            health = await store.ping()
            return health.instances, health.instances_source, getattr(store, "fleet", None)
        finally:
            await store.close()

    assert asyncio.run(main()) == (3, "configured", None)


@pytest.mark.parametrize("value", ["many", 0, -1, 2.5, True, float("nan")])
def test_instances_is_auto_or_a_whole_number(redis_server: RedisServer, value: object) -> None:
    from ratekeeper import StoreConfigError

    with pytest.raises(StoreConfigError, match="instances must be an integer of at least 1"):
        open_async_store(redis_server.url, instances=value)


def test_auto_is_for_asyncio_stores(redis_server: RedisServer) -> None:
    from ratekeeper import StoreConfigError
    from ratekeeper.stores import open_store

    with pytest.raises(StoreConfigError, match=r"counts the processes through an asyncio store"):
        open_store(redis_server.url, instances="auto")


def served_by(port: int, key: str) -> int:
    """The port of the master that serves ``key``, as the cluster itself says."""
    slot = int(command(port, "CLUSTER", "KEYSLOT", key))
    for low, high, master, *_ in command(port, "CLUSTER", "SLOTS"):
        if int(low) <= slot <= int(high):
            return int(master[1])
    raise AssertionError(f"no master serves {key}")


@pytest.mark.serial
def test_the_roll_is_on_every_master_and_outlives_one(tmp_path: Path) -> None:
    """A cluster keeps the roll on each master: one SIGKILLed, the count still answers from
    the others, and a process that starts meanwhile is counted by every process."""
    cluster = RedisCluster(tmp_path / "cluster")
    try:
        for node in cluster.nodes:
            command(node.port, "CONFIG", "SET", "cluster-require-full-coverage", "no")

        async def main() -> tuple[int, list[int | None]]:
            store, inner = opened(cluster.url, "fleet")
            assert (await store.ping()).warnings == ()  # every master: full coverage no
            where = roll_keys(inner.client, inner.prefix, inner._owner)
            owners = {served_by(cluster.nodes[0].port, key) for _, key in where}
            assert owners == {node.port for node, _ in where}
            first, second = Fleet(inner, ttl=30), Fleet(inner, ttl=30)
            counts = [await first.call(), await second.call()]
            victim = next(node for node in cluster.masters() if node.port in owners)
            cluster.kill(victim)
            third = Fleet(inner, ttl=30)  # starts while the master is down
            counts += [await third.call(), await first.call()]
            await store.close()
            return len(owners), counts

        masters, counts = asyncio.run(main())
        assert masters == 3
        assert counts == [1, 2, 3, 3]
    finally:
        cluster.stop()


def test_a_cluster_that_requires_full_coverage_is_named(redis_cluster: RedisCluster) -> None:
    """Redis's default, ``cluster-require-full-coverage yes``: the store's health warns of it,
    on every master; a CLUSTERDOWN is named as the cluster's refusal."""
    from redis.exceptions import ClusterDownError

    from ratekeeper.stores.redis.errors import failure

    async def main() -> tuple[str, ...]:
        store = open_async_store(redis_cluster.url)
        try:
            return (await store.ping()).warnings
        finally:
            await store.close()

    (warning,) = asyncio.run(main())
    assert warning.startswith("cluster-require-full-coverage is yes on 3 of 3 masters (127.0.0.1:")
    assert "refuses every key on every master (CLUSTERDOWN)" in warning
    assert "not only a failing shard's" in str(failure(ClusterDownError("The cluster is down")))


def test_a_misconfigured_store_fails_the_roll_call_quietly(redis_server: RedisServer) -> None:
    """An unknown database: the roll call answers None (the count stays unknown) instead of
    ending the task that makes it; the decisions say what is wrong."""
    url = redis_server.url.replace("/0", "/99")

    async def main() -> tuple[int | None, str]:
        store, _ = opened(url, "fleet")
        try:
            assert store.fleet is not None
            counted = await store.fleet.call()
            await store.fleet.leave()  # nothing to take off, nothing raised
            return counted, store.policy.fleet.source  # type: ignore[attr-defined]
        finally:
            await store.close()

    assert asyncio.run(main()) == (None, "unknown")


@pytest.mark.parametrize("spelling", ["auto", "AUTO", " Auto "])
def test_auto_is_read_as_the_command_line_reads_it(
    redis_server: RedisServer, spelling: str
) -> None:
    store = open_async_store(redis_server.url, instances=spelling)
    assert getattr(store, "fleet", None) is not None
    asyncio.run(store.close())


def test_a_fleet_of_more_than_ten_million_processes_is_refused(redis_server: RedisServer) -> None:
    from ratekeeper import StoreConfigError

    with pytest.raises(
        StoreConfigError, match=r"instances must be at most 10,000,000, not 100000000"
    ):
        open_async_store(redis_server.url, instances=100_000_000)
