"""A misconfigured store is loud, and every store URL opens and fails alike.

Real servers: a Redis that requires a password, Redis Clusters and Sentinels that are not
there. A wrong password or database raises ``StoreConfigError`` on first use under every
policy (it never fails open); a store that is down is answered by the policy, counted, logged
and reported by ``ping()``; opening never touches the network.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterator

import pytest

from ratekeeper import (
    AsyncLimiter,
    Limit,
    Limiter,
    MemoryStore,
    StoreConfigError,
    StoreError,
    open_async_store,
    open_store,
)
from ratekeeper.stores.wrappers.deferred import Deferred
from ratekeeper.stores.wrappers.resilience import Resilient
from ratekeeper.testing import FakeClock
from tests.servers import RedisCluster, RedisServer, command, free_ports

LIMIT = Limit(1, 60, "gcra")
POLICIES = ["allow", "deny", "local"]


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("locked"))
    command(server.port, "CONFIG", "SET", "requirepass", "s3cret")  # once it is ready
    yield server
    server.stop()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    ("auth", "db", "problem"),
    [
        ("", "0", "authenticat|HELLO"),
        (":wrong@", "0", "invalid username-password pair"),
        ("nobody:s3cret@", "0", "invalid username-password pair"),
        (":s3cret@", "99", "DB index is out of range"),
    ],
)
def test_a_misconfigured_redis_raises_and_never_admits(
    locked: RedisServer, policy: str, auth: str, db: str, problem: str
) -> None:
    url = f"redis://{auth}127.0.0.1:{locked.port}/{db}"
    limiter = Limiter(open_store(url, on_store_error=policy))  # opening touches nothing
    for _ in range(5):
        with pytest.raises(StoreConfigError, match=problem) as info:
            limiter.hit("k", LIMIT)
        assert "s3cret" not in str(info.value) and "wrong" not in str(info.value)
    with pytest.raises(StoreConfigError):
        limiter.store.ping()
    limiter.close()


def test_the_right_password_decides(locked: RedisServer) -> None:
    limiter = Limiter(open_store(f"redis://:s3cret@127.0.0.1:{locked.port}/0", on_store_error=None))
    assert [limiter.hit("right", LIMIT).allowed for _ in range(2)] == [True, False]
    assert limiter.store.ping().ok
    limiter.close()


def test_an_async_misconfigured_redis_raises_too(locked: RedisServer) -> None:
    async def main() -> None:
        limiter = AsyncLimiter(f"redis://:wrong@127.0.0.1:{locked.port}/0")
        for _ in range(3):
            with pytest.raises(StoreConfigError, match="invalid username-password pair"):
                await limiter.hit("k", LIMIT)
        await limiter.close()

    asyncio.run(main())


def test_a_refused_port_is_answered_by_the_policy_and_loud(
    caplog: pytest.LogCaptureFixture,
) -> None:
    (port,) = free_ports(1)
    limiter = Limiter(open_store(f"redis://127.0.0.1:{port}/0", on_store_error="allow"))
    with caplog.at_level(logging.ERROR, logger="ratekeeper.store"):
        decisions = [limiter.hit("k", LIMIT) for _ in range(20)]
    assert all(d.allowed and d.degraded for d in decisions)
    health = limiter.store.ping()
    assert not health.ok and health.breaker == "open"
    assert "Connection refused" in (health.error or "")
    assert (health.failures, health.opened, health.degraded) == (3, 1, 20)
    assert any("circuit open" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_unreachable_cluster_opens_and_fails_like_any_store(asynchronous: bool) -> None:
    ports = free_ports(2)
    url = "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports)
    if asynchronous:

        async def main() -> list[bool]:
            limiter = AsyncLimiter(open_async_store(url, on_store_error="deny"))
            decided = [await limiter.hit("k", LIMIT) for _ in range(4)]
            assert not (await limiter.store.ping()).ok
            await limiter.close()
            return [d.allowed or not d.degraded for d in decided]

        assert asyncio.run(main()) == [False] * 4
        return
    limiter = Limiter(open_store(url, on_store_error="deny"))  # no exception here
    decided = [limiter.hit("k", LIMIT) for _ in range(4)]
    assert [d.allowed or not d.degraded for d in decided] == [False] * 4
    assert not limiter.store.ping().ok
    limiter.close()


def test_a_cluster_store_is_opened_on_first_use(redis_cluster: RedisCluster) -> None:
    store = open_store(redis_cluster.url, on_store_error=None)
    deferred = store.store  # type: ignore[attr-defined]
    assert isinstance(deferred, Deferred) and deferred._store is None
    limiter = Limiter(store)
    assert [limiter.hit("first-use", LIMIT).allowed for _ in range(2)] == [True, False]
    assert store.ping().ok
    limiter.close()


def test_a_store_that_failed_to_open_is_opened_again_on_a_later_call(clock: FakeClock) -> None:
    attempts: list[int] = []

    def opener() -> MemoryStore:
        attempts.append(1)
        if len(attempts) == 1:
            raise StoreError("redis: cluster cannot be connected")
        return MemoryStore(clock=clock)

    store = Resilient(Deferred(opener), on_store_error="deny")
    assert store.apply("k", LIMIT).degraded
    decided = store.apply("k", LIMIT)
    assert decided.allowed and not decided.degraded and len(attempts) == 2


def test_unreachable_sentinels_honour_the_timeout() -> None:
    ports = free_ports(2)
    url = "redis+sentinel://" + ",".join(f"127.0.0.1:{port}" for port in ports) + "/primary"
    limiter = Limiter(open_store(url, on_store_error=None, timeout=0.25))
    for _ in range(3):
        started = time.monotonic()
        with pytest.raises(StoreError, match="No master found"):
            limiter.hit("k", LIMIT)
        # Two refused sentinels, no retries with backoff (which took 3 to 9 s a call).
        assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    "url", ["memory://", "redis://127.0.0.1:6379/0", "redis+sentinel://127.0.0.1:26379/primary"]
)
@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_option_a_store_does_not_take_is_refused_when_it_is_opened(
    url: str, asynchronous: bool
) -> None:
    opener = open_async_store if asynchronous else open_store
    with pytest.raises(StoreConfigError, match="unexpected keyword argument 'socket_timeuot'"):
        opener(url, socket_timeuot=1)


@pytest.mark.parametrize("url", ["memory://?max_keys=10", "memory://localhost", "memory:///x"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_memory_url_with_more_than_its_scheme_is_refused(url: str, asynchronous: bool) -> None:
    """``memory://?max_keys=10`` would otherwise quietly keep the default bound."""
    opener = open_async_store if asynchronous else open_store
    with pytest.raises(StoreConfigError, match="memory:// takes no host, path or query"):
        opener(url)


@pytest.mark.parametrize("bad", [0, -1, "many", 2.5, True])
def test_a_memory_store_refuses_a_bad_size(bad: object) -> None:
    with pytest.raises(StoreConfigError, match="max_keys must be an integer of at least 1"):
        open_store("memory://", max_keys=bad)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"on_store_error": "maybe"},
            "on_store_error must be one of allow, deny, local, not 'maybe'",
        ),
        ({"tag": "user"}, "tag must be 'limit' or 'identity', not 'user'"),
        ({"prefix": ""}, "prefix must be a non-empty string without '{' or '}', not ''"),
        ({"prefix": "a{b}"}, "prefix must be a non-empty string without '{' or '}', not 'a{b}'"),
        ({"prefix": 5}, "prefix must be a non-empty string without '{' or '}', not 5"),
    ],
)
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_bad_redis_option_is_a_store_config_error(
    redis_server: RedisServer, options: dict[str, object], problem: str, asynchronous: bool
) -> None:
    opener = open_async_store if asynchronous else open_store
    with pytest.raises(StoreConfigError, match=re.escape(problem)):
        opener(redis_server.url, **options)


@pytest.mark.parametrize("policy", [*POLICIES, None])
def test_a_cluster_url_for_a_server_not_in_cluster_mode_raises_and_never_admits(
    redis_server: RedisServer, policy: str | None
) -> None:
    url = f"redis+cluster://127.0.0.1:{redis_server.port}"
    limiter = Limiter(open_store(url, on_store_error=policy))
    for _ in range(3):
        with pytest.raises(StoreConfigError, match="Cluster mode is not enabled"):
            limiter.hit("k", LIMIT)
    limiter.close()

    async def main() -> None:
        limiter = AsyncLimiter(open_async_store(url, on_store_error=policy))
        with pytest.raises(StoreConfigError, match="Cluster mode is not enabled"):
            await limiter.hit("k", LIMIT)
        await limiter.close()

    asyncio.run(main())
