"""All-or-nothing batches across the slots of a real Redis Cluster (the login check).

An address limit and a username limit live in different slots, so a batch over both is two
script runs. Each run is all or nothing within its slot; when one refuses, the store refunds
the other, so that a refused attempt has consumed nothing once the call returns. The module
checks the decisions and the counters left behind, the round trips (one per slot when all is
allowed), a part that fails and a refund that fails, and the login example of the engine under
8 processes at once: the exact number admitted, no degraded decision, and counters that hold
exactly the admitted attempts.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from ratekeeper import Limit, StoreError, open_store
from ratekeeper.core.store_keys import state_key
from ratekeeper.engine import Engine
from ratekeeper.rules import parse_rules
from ratekeeper.stores.redis import AsyncRedisStore, RedisStore
from ratekeeper.stores.redis.scripts import REFUND
from tests.servers import RedisCluster, RedisServer, free_port

T0 = 1_700_000_000.0
PER_IP = Limit(3, 60, "fixed_window")
PER_USER = Limit(2, 60, "sliding_log")
_prefixes = itertools.count()


def prefix() -> str:
    return f"aon{next(_prefixes)}"


def cluster_client(cluster: RedisCluster) -> redis.cluster.RedisCluster:
    return redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup_nodes]
    )


@pytest.fixture
def store(redis_cluster: RedisCluster) -> Iterator[RedisStore]:
    store = RedisStore(cluster_client(redis_cluster), prefix=prefix())
    yield store
    store.close()


def login(ip: str, user: str) -> list[tuple[str, Limit, int]]:
    return [(f"ip:{ip}", PER_IP, 1), (f"user:{user}", PER_USER, 1)]


def evalsha_calls(cluster: RedisCluster) -> int:
    """Script runs so far, over every master."""
    total = 0
    for node in cluster.masters():
        client = redis.Redis(port=node.port)
        stats = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0})
        total += int(stats["calls"])
        client.close()
    return total


def test_the_address_and_the_username_sit_in_different_slots(store: RedisStore) -> None:
    ip, user = (state_key(limit, key, store.prefix) for key, limit, _ in login("10.0.0.1", "a"))
    assert key_slot(ip.encode()) != key_slot(user.encode())


def test_a_login_across_slots_is_all_or_nothing(
    redis_cluster: RedisCluster, store: RedisStore
) -> None:
    """The username runs out first: the third attempt is refused, and its address hit is
    refunded; every decision of a refused attempt has granted 0."""
    for _ in range(3):  # loads both scripts: the batch script, and the refund script
        store.apply_many(login("10.0.0.9", "warm"), all_or_nothing=True, now=T0)
    before = evalsha_calls(redis_cluster)
    first = store.apply_many(login("10.0.0.1", "alice"), all_or_nothing=True, now=T0)
    assert evalsha_calls(redis_cluster) - before == 2  # one round trip per slot
    second = store.apply_many(login("10.0.0.1", "alice"), all_or_nothing=True, now=T0)
    assert [(d.allowed, d.granted) for d in first + second] == [(True, 1)] * 4
    before = evalsha_calls(redis_cluster)
    third = store.apply_many(login("10.0.0.1", "alice"), all_or_nothing=True, now=T0)
    assert evalsha_calls(redis_cluster) - before == 3  # and the address's refund
    assert [(d.allowed, d.granted, d.remaining) for d in third] == [(True, 0, 0), (False, 0, 0)]
    assert store.apply("ip:10.0.0.1", PER_IP, 0, T0).remaining == 1  # refunded
    # The address now runs out: refused for another user, whose hit is refunded in turn.
    assert all(
        d.allowed for d in store.apply_many(login("10.0.0.1", "bob"), all_or_nothing=True, now=T0)
    )
    refused = store.apply_many(login("10.0.0.1", "bob"), all_or_nothing=True, now=T0)
    assert [(d.allowed, d.granted) for d in refused] == [(False, 0), (True, 0)]
    assert store.apply("user:bob", PER_USER, 0, T0).remaining == 1
    assert store.apply("ip:10.0.0.1", PER_IP, 0, T0).remaining == 0


def test_the_async_twin_refunds_the_same(redis_cluster: RedisCluster) -> None:
    async def main() -> tuple[list[list[bool]], int, int]:
        client = redis.asyncio.RedisCluster(
            startup_nodes=[
                redis.asyncio.cluster.ClusterNode(h, p) for h, p in redis_cluster.startup_nodes
            ]
        )
        store = AsyncRedisStore(client, prefix=prefix())
        outcomes = []
        for _ in range(4):
            decided = await store.apply_many(login("10.0.0.2", "carol"), all_or_nothing=True)
            outcomes.append([d.allowed for d in decided])
        ip = await store.apply("ip:10.0.0.2", PER_IP, 0)
        user = await store.apply("user:carol", PER_USER, 0)
        await store.close()
        return outcomes, ip.remaining, user.remaining

    outcomes, ip, user = asyncio.run(main())
    assert outcomes == [[True, True], [True, True], [True, False], [True, False]]
    assert (ip, user) == (1, 0)


def test_a_part_that_fails_refunds_the_others_and_raises(
    redis_cluster: RedisCluster, store: RedisStore
) -> None:
    """The username's key holds a value of another type (a write by some other client): its
    script run fails, the address's hit is refunded, and the call raises StoreError."""
    client = cluster_client(redis_cluster)
    wrong = state_key(PER_USER, "user:dave", store.prefix)
    client.hset(wrong, "x", "1")
    client.expire(wrong, 60)  # every key in the servers has a TTL, even this one
    with pytest.raises(StoreError, match="WRONGTYPE"):
        store.apply_many(login("10.0.0.3", "dave"), all_or_nothing=True, now=T0)
    assert not client.exists(state_key(PER_IP, "ip:10.0.0.3", store.prefix))
    client.close()


def test_the_async_twin_refunds_a_part_that_fails(redis_cluster: RedisCluster) -> None:
    client = cluster_client(redis_cluster)
    name = prefix()
    wrong = state_key(PER_USER, "user:frank", name)
    client.hset(wrong, "x", "1")
    client.expire(wrong, 60)  # every key in the servers has a TTL, even this one

    async def main() -> None:
        store = AsyncRedisStore(
            redis.asyncio.RedisCluster(
                startup_nodes=[
                    redis.asyncio.cluster.ClusterNode(h, p) for h, p in redis_cluster.startup_nodes
                ]
            ),
            prefix=name,
        )
        with pytest.raises(StoreError, match="WRONGTYPE"):
            await store.apply_many(login("10.0.0.5", "frank"), all_or_nothing=True, now=T0)
        await store.close()

    asyncio.run(main())
    assert not client.exists(state_key(PER_IP, "ip:10.0.0.5", name))
    client.close()


def test_a_refund_that_fails_still_refuses_and_is_logged(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The refund goes to a server that is gone: the attempt is still refused, and the error
    names the keys left counted."""
    store = RedisStore(redis.Redis.from_url(redis_server.url), prefix=prefix())
    store.clustered = True  # split by slot, as a cluster client is
    gone = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    store._refund_script = gone.register_script(REFUND)  # a real connection refused
    store.apply_many(login("10.0.0.4", "erin") * 2, all_or_nothing=True, now=T0)
    with caplog.at_level(logging.ERROR, logger="ratekeeper.store"):
        refused = store.apply_many(login("10.0.0.4", "erin"), all_or_nothing=True, now=T0)
    assert [(d.allowed, d.granted) for d in refused] == [(True, 0), (False, 0)]
    [record] = caplog.records
    assert "could not refund" in record.getMessage()
    assert state_key(PER_IP, "ip:10.0.0.4", store.prefix) in record.getMessage()
    store.close()
    gone.close()


def test_the_async_twin_logs_a_refund_that_fails(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> list[tuple[bool, int]]:
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(redis_server.url), prefix=prefix())
        store.clustered = True
        gone = redis.asyncio.Redis(port=free_port(), retry=AsyncRetry(NoBackoff(), 0))
        store._refund_script = gone.register_script(REFUND)
        await store.apply_many(login("10.0.0.6", "gina") * 2, all_or_nothing=True, now=T0)
        refused = await store.apply_many(login("10.0.0.6", "gina"), all_or_nothing=True, now=T0)
        await store.close()
        await gone.aclose()
        return [(d.allowed, d.granted) for d in refused]

    with caplog.at_level(logging.ERROR, logger="ratekeeper.store"):
        assert asyncio.run(main()) == [(True, 0), (False, 0)]
    [record] = caplog.records
    assert "could not refund" in record.getMessage()


# --- The login example under 8 processes -----------------------------------------------------

PROCESSES = 8
ATTEMPTS = 40

#: One address, several usernames: the address's 20 an hour is the tighter limit.
ONE_ADDRESS = """
domain: auth
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 20, algorithm: bucketed_window}
  - key: username
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log}
"""
#: One username, one address per process: the username's 12 an hour is the tighter limit.
ONE_USERNAME = """
domain: auth
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: concurrency}
  - key: username
    rate_limit: {unit: hour, requests_per_unit: 12, algorithm: gcra}
"""


def attempts(scenario: str, worker: int) -> list[tuple[str, str]]:
    """The (address, username) of each attempt of one process."""
    if scenario == "one address":
        return [("198.51.100.7", f"user{(worker + i) % 6}") for i in range(ATTEMPTS)]
    return [(f"203.0.113.{worker}", "alice") for _ in range(ATTEMPTS)]


def _worker(url: str, prefix: str, scenario: str, worker: int, *, start: Any, out: Any) -> None:
    rules = ONE_ADDRESS if scenario == "one address" else ONE_USERNAME
    engine = Engine(
        open_store(url, prefix=prefix, timeout=5.0), rules=parse_rules(rules, "auth rules")
    )
    start.wait()
    results = []
    for ip, user in attempts(scenario, worker):
        verdict = engine.check(
            "auth", [[("remote_address", ip)], [("username", user)]], all_or_nothing=True
        )
        results.append((ip, user, verdict.allowed, verdict.degraded))
    out.put(results)
    engine.close()


def run_processes(url: str, prefix: str, scenario: str) -> list[tuple[str, str, bool, bool]]:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    out = context.Queue()
    workers = [
        context.Process(
            target=_worker, args=(url, prefix, scenario, n), kwargs={"start": start, "out": out}
        )
        for n in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    start.set()
    results = [result for _ in workers for result in out.get(timeout=120)]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    return results


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["one address", "one username"])
def test_login_under_8_processes_admits_exactly_the_tighter_limit(
    redis_cluster: RedisCluster, scenario: str
) -> None:
    prefix = f"login-{uuid.uuid4().hex[:8]}"
    results = run_processes(redis_cluster.url, prefix, scenario)
    assert len(results) == PROCESSES * ATTEMPTS
    assert not any(degraded for _, _, _, degraded in results)
    by_ip = Counter(ip for ip, _, allowed, _ in results if allowed)
    by_user = Counter(user for _, user, allowed, _ in results if allowed)
    rules = ONE_ADDRESS if scenario == "one address" else ONE_USERNAME
    engine = Engine(
        open_store(redis_cluster.url, prefix=prefix, on_store_error=None),
        rules=parse_rules(rules, "auth rules"),
    )

    def look(key: str, value: str) -> Any:
        [status] = engine.check("auth", [[(key, value)]], hits=0).statuses
        return status.decision

    if scenario == "one address":
        assert sum(by_ip.values()) == 20  # the address's limit, though the usernames allow 30
        assert look("remote_address", "198.51.100.7").remaining == 0
        for n in range(6):  # each username's log holds exactly its admitted attempts
            assert look("username", f"user{n}").remaining == 5 - by_user[f"user{n}"]
    else:
        assert sum(by_user.values()) == 12  # the username's limit, though the addresses allow 24
        for n in range(PROCESSES):  # each address holds a slot per admitted attempt
            ip = f"203.0.113.{n}"
            assert look("remote_address", ip).remaining == 3 - by_ip[ip]
        decision = look("username", "alice")
        # Exactly 12 units in the GCRA: 12 emission intervals of 300 s, less the time passed.
        assert decision.remaining == 0
        assert 12 * 300 - 60 < decision.reset_after <= 12 * 300
    engine.close()
