"""Lifecycle: nothing starts in a constructor, work starts once, close is idempotent.

Engines start their background threads (rule reloading, the plan cache's expiry, the
configuration store's change feed) at the first decision or ``start()``, once however many
threads decide together, and stop them on ``close()`` or on leaving a ``with`` block. Every
limiter, engine and store closes twice without complaint. An ``AsyncLimiter`` works across
two ``asyncio.run`` calls, on memory and on a real Redis.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from ratekeeper import AsyncLimiter, Limit, Limiter
from ratekeeper.config import open_config_store
from ratekeeper.config.changes import Callback
from ratekeeper.core.errors import ConfigStoreError, StoreError
from ratekeeper.core.overrides import Override
from ratekeeper.engine import AsyncEngine, Engine
from ratekeeper.stores import open_async_store, open_store
from ratekeeper.stores.redis import AsyncRedisStore
from tests.servers import RedisServer, command, wait_until

RULES = """\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
"""

#: The engine's own threads; a configuration store may add its own.
ENGINE_THREADS = {"ratekeeper-rules", "ratekeeper-cache"}


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def names(started: set[threading.Thread]) -> list[str]:
    return sorted(thread.name for thread in started if thread.is_alive())


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    return path


@pytest.fixture
def config_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'overrides.db'}"


@pytest.fixture
def engine(rules: Path, config_url: str) -> Iterator[Engine]:
    engine = Engine(rules=rules, config=config_url, reload_interval=0.05)
    yield engine
    engine.close()


def test_an_engine_starts_no_thread_until_its_first_decision(rules: Path, config_url: str) -> None:
    before = threads()
    engine = Engine(rules=rules, config=config_url, reload_interval=0.05)
    try:
        assert threads() == before
        assert engine.check("api", [[("user", "alice")]]).allowed
        assert set(names(threads() - before)) >= ENGINE_THREADS
    finally:
        engine.close()
    assert names(threads() - before) == []


def test_an_explicit_start_starts_once(engine: Engine) -> None:
    before = threads()
    engine.start()
    started = names(threads() - before)
    assert set(started) >= ENGINE_THREADS
    engine.start()
    engine.decide("alice")
    assert names(threads() - before) == started


def test_threads_deciding_together_start_the_engine_once(engine: Engine) -> None:
    before = threads()
    barrier = threading.Barrier(8)

    def decide(number: int) -> None:
        barrier.wait()
        engine.check("api", [[("user", f"user-{number}")]])

    workers = [threading.Thread(target=decide, args=(number,)) for number in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    started = names(threads() - before)
    assert started.count("ratekeeper-rules") == 1
    assert started.count("ratekeeper-cache") == 1


def test_a_started_engine_reloads_its_rules(engine: Engine, rules: Path) -> None:
    assert engine.check("api", [[("user", "alice")]]).statuses[0].limit == Limit(5, 60)
    rules.write_text(RULES.replace("5}", "7}"))
    wait_until(
        lambda: engine.check("api", [[("user", "bob")]], 0).statuses[0].limit == Limit(7, 60),
        5.0,
        "the reloaded rules",
    )


def test_close_twice_and_a_closed_engine_starts_nothing(rules: Path, config_url: str) -> None:
    before = threads()
    engine = Engine(rules=rules, config=config_url, reload_interval=0.05)
    engine.close()
    engine.close()
    assert engine.check("api", [[("user", "alice")]]).allowed  # decides, on its memory store
    assert names(threads() - before) == []
    with pytest.raises(RuntimeError, match="closed"):
        engine.start()


def test_an_engine_is_a_context_manager(rules: Path, config_url: str) -> None:
    before = threads()
    with Engine(rules=rules, config=config_url, reload_interval=0.05) as engine:
        assert engine.decide("alice").allowed
        assert names(threads() - before) != []
    assert names(threads() - before) == []
    assert engine.config is not None
    with pytest.raises(ConfigStoreError):
        engine.config.get("alice")  # closed with the engine
    engine.close()


def test_an_async_engine_is_an_async_context_manager(rules: Path, config_url: str) -> None:
    before = threads()

    async def scenario() -> list[str]:
        async with AsyncEngine(rules=rules, config=config_url, reload_interval=0.05) as engine:
            assert threads() == before
            assert (await engine.check("api", [[("user", "alice")]])).allowed
            running = names(threads() - before)
            await engine.close()
        return running

    assert set(asyncio.run(scenario())) >= ENGINE_THREADS
    assert names(threads() - before) == []


class RefusesOneSubscription:
    """A SQLite configuration store whose first ``subscribe`` fails, as one that is down."""

    def __init__(self, url: str) -> None:
        self.store = open_config_store(url)
        self.refused = 0
        self.get, self.set, self.close = self.store.get, self.store.set, self.store.close

    def subscribe(self, callback: Callback) -> None:
        if not self.refused:
            self.refused += 1
            raise ConfigStoreError("down for now")
        self.store.subscribe(callback)


def test_a_failed_subscription_is_retried_at_the_next_expiry(
    config_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = RefusesOneSubscription(config_url)
    engine = Engine(config=config, default="3/minute", cache_ttl=0.05)  # type: ignore[arg-type]
    try:
        assert engine.decide("alice").limit == 3  # the engine decides all the same
        assert config.refused == 1
        assert "cannot follow the configuration store's changes" in caplog.text
        wait_until(lambda: engine.planner._subscribed, 5.0, "the subscription")
        again = "following the configuration store's changes again"
        wait_until(lambda: again in caplog.text, 5.0, "the subscription logged")
        engine.decide("alice")  # cached again
        config.set("alice", Override(5, 60))
        assert engine.decide("alice").limit == 5
    finally:
        engine.close()


def client_ids(server: RedisServer) -> set[str]:
    """The ids of the clients connected to ``server`` now, but for the one asking."""
    listing = command(server.port, "CLIENT", "LIST")
    text = listing.decode() if isinstance(listing, bytes) else str(listing)
    return {line.split()[0] for line in text.splitlines() if line and "cmd=client|list" not in line}


def test_a_limiter_is_a_context_manager_that_closes_its_store(redis_server: RedisServer) -> None:
    before = client_ids(redis_server)
    with Limiter(open_store(redis_server.url, on_store_error=None)) as limiter:
        assert limiter.hit("lifecycle:with", "5/minute").remaining == 4
        assert client_ids(redis_server) - before
    wait_until(lambda: not client_ids(redis_server) - before, 5.0, "the connection closed")
    limiter.close()


def test_an_async_limiter_is_an_async_context_manager(redis_server: RedisServer) -> None:
    before = client_ids(redis_server)

    async def scenario() -> int:
        async with AsyncLimiter(open_async_store(redis_server.url, on_store_error=None)) as limiter:
            decision = await limiter.hit("lifecycle:async-with", "5/minute")
            assert client_ids(redis_server) - before
        await limiter.close()
        return decision.remaining

    assert asyncio.run(scenario()) == 4
    wait_until(lambda: not client_ids(redis_server) - before, 5.0, "the connection closed")


SYNC_STORES: list[tuple[str, dict[str, Any]]] = [
    ("memory://", {}),
    ("redis", {"on_store_error": None}),
    ("redis", {}),  # wrapped in Resilient
    ("redis", {"on_store_error": None, "over_limit_cache": True}),
    ("redis", {"over_limit_cache": True}),  # both wrappers
]


def url_of(name: str, server: RedisServer) -> str:
    return server.url if name == "redis" else name


@pytest.mark.parametrize(("name", "options"), SYNC_STORES)
def test_every_store_closes_twice(
    redis_server: RedisServer, name: str, options: dict[str, Any]
) -> None:
    store = open_store(url_of(name, redis_server), **options)
    limiter = Limiter(store)
    limiter.hit("lifecycle:twice", "5/minute")
    limiter.close()
    limiter.close()
    store.close()


@pytest.mark.parametrize(("name", "options"), SYNC_STORES)
def test_every_async_store_closes_twice(
    redis_server: RedisServer, name: str, options: dict[str, Any]
) -> None:
    async def scenario() -> None:
        store = open_async_store(url_of(name, redis_server), **options)
        limiter = AsyncLimiter(store)
        await limiter.hit("lifecycle:twice", "5/minute")
        await limiter.close()
        await limiter.close()
        await store.close()

    asyncio.run(scenario())


def across_two_runs(make: Callable[[], AsyncLimiter], key: str) -> list[list[int]]:
    """Three hits on ``key`` in one ``asyncio.run``, three more in another, same limiter."""
    limiter = make()

    async def three() -> list[int]:
        decisions = [await limiter.hit(key, "10/minute") for _ in range(3)]
        assert not any(decision.degraded for decision in decisions)
        return [decision.remaining for decision in decisions]

    return [asyncio.run(three()), asyncio.run(three())]


def test_an_async_limiter_on_memory_works_across_event_loops() -> None:
    assert across_two_runs(AsyncLimiter, "k") == [[9, 8, 7], [6, 5, 4]]


def test_an_async_limiter_on_redis_works_across_event_loops(redis_server: RedisServer) -> None:
    before = client_ids(redis_server)
    key = "lifecycle:loops"

    def make() -> AsyncLimiter:
        return AsyncLimiter(open_async_store(redis_server.url, on_store_error=None))

    assert across_two_runs(make, key) == [[9, 8, 7], [6, 5, 4]]
    # and its default failure policy did not allow them blindly
    assert across_two_runs(lambda: AsyncLimiter(redis_server.url), key) == [[3, 2, 1], [0, 0, 0]]
    # Each loop's connections were closed as the loop shut down, unasked.
    wait_until(lambda: not client_ids(redis_server) - before, 5.0, "the connections closed")


def test_a_store_on_a_given_client_refuses_a_second_loop_clearly(
    redis_server: RedisServer,
) -> None:
    store = AsyncRedisStore(redis.asyncio.Redis.from_url(redis_server.url), prefix="lifecycle")
    limit = Limit(10, 60)
    assert asyncio.run(store.apply("given", limit)).remaining == 9
    with pytest.raises(StoreError, match="belongs to an event loop that has closed"):
        asyncio.run(store.apply("given", limit))


def test_a_store_serves_one_open_loop_at_a_time(redis_server: RedisServer) -> None:
    store = open_async_store(redis_server.url, on_store_error=None, prefix="lifecycle")
    limit = Limit(10, 60)
    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(store.apply("open", limit)).remaining == 9
        with pytest.raises(StoreError, match="one event loop at a time"):
            asyncio.run(store.apply("open", limit))
        first.run_until_complete(store.close())
    finally:
        first.close()
    assert asyncio.run(store.apply("open", limit)).remaining == 8


def test_an_async_redis_store_releases_and_pings_first_thing_on_a_new_loop(
    redis_server: RedisServer,
) -> None:
    store = open_async_store(redis_server.url, prefix="loops-release")
    slot = Limit(1, 60, "concurrency")
    assert asyncio.run(store.apply("job", slot)).allowed
    assert asyncio.run(store.release("job", slot)).granted == 1  # the first call of its loop
    assert asyncio.run(store.ping()).ok
    assert asyncio.run(store.apply("job", slot)).allowed
    asyncio.run(store.close())
