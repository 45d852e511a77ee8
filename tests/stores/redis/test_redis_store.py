"""The Redis store against a real server: batching, the over-limit cache, URLs, server time."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratekeeper import (
    AsyncLimiter,
    InvalidInputError,
    Limit,
    Limiter,
    StoreConfigError,
    StoreError,
    open_async_store,
    open_store,
)
from ratekeeper.stores.redis import MAX_BATCH, AsyncRedisStore, RedisStore
from ratekeeper.stores.wrappers.leasing import Leasing
from ratekeeper.stores.wrappers.overlimit import OverLimitCache
from ratekeeper.stores.wrappers.resilience import AsyncResilient, Resilient
from tests.servers import RedisServer, free_port

_prefixes = itertools.count()


def prefix() -> str:
    return f"it{next(_prefixes)}"


def script_runs(client: redis.Redis) -> int:
    """The store's script runs so far: EVALSHA, or FCALL of its function library."""
    stats = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{command}", {"calls": 0})["calls"])
        for command in ("evalsha", "fcall")
    )


def test_time_comes_from_the_server(redis_server: RedisServer) -> None:
    store = RedisStore(redis.Redis.from_url(redis_server.url), prefix=prefix())
    decision = store.apply("k", Limit(1, 3600, "fixed_window"))
    window_end = time.time() - time.time() % 3600 + 3600
    assert decision.reset_after == pytest.approx(window_end - time.time(), abs=2)


def test_scripts_are_reloaded_after_a_script_flush(redis_server: RedisServer) -> None:
    """A restarted or failed-over server has no scripts: each call loads what it needs, once."""
    client = redis.Redis.from_url(redis_server.url)
    store = open_store(redis_server.url, prefix=prefix(), on_store_error=None)
    limit = Limit(10, 3600, "gcra")
    assert store.apply("k", limit).remaining == 9
    client.script_flush()
    assert store.apply("k", limit).remaining == 8
    client.script_flush()
    assert [d.remaining for d in store.apply_many([("k", limit, 1), ("j", limit, 1)])] == [7, 9]

    async def main() -> list[int]:
        astore = open_async_store(redis_server.url, prefix=prefix(), on_store_error=None)
        client.script_flush()
        first = await astore.apply("k", limit, now=time.time())  # the single-hit script
        client.script_flush()
        second = await astore.apply("k", limit)  # the batch script
        await astore.close()
        return [first.remaining, second.remaining]

    assert asyncio.run(main()) == [9, 8]
    store.close()
    client.close()


def test_async_calls_of_one_tick_share_one_round_trip(redis_server: RedisServer) -> None:
    sync = redis.Redis.from_url(redis_server.url)
    limit = Limit(100, 3600, "gcra")

    async def main() -> list[int]:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = AsyncRedisStore(client, prefix=prefix())
        await store.apply("warm", limit)  # loads the script
        before = script_runs(sync)
        decisions = await asyncio.gather(*(store.apply("k", limit) for _ in range(64)))
        assert script_runs(sync) - before == 1
        await client.aclose()
        return [d.remaining for d in decisions]

    # In call order, exactly as 64 separate calls would have decided.
    assert asyncio.run(main()) == list(range(99, 35, -1))


def test_batching_is_exact_under_many_tasks(redis_server: RedisServer) -> None:
    limit = Limit(500, 86_400, "gcra")

    async def main() -> int:
        store = open_async_store(redis_server.url, prefix=prefix(), on_store_error=None)
        limiter = AsyncLimiter(store)

        async def caller() -> int:
            admitted = 0
            for _ in range(40):
                admitted += (await limiter.hit("hot", limit)).allowed
            return admitted

        admitted = sum(await asyncio.gather(*(caller() for _ in range(32))))
        await store.close()  # type: ignore[attr-defined]
        return admitted

    assert asyncio.run(main()) == 500


def test_calls_made_while_batches_are_in_flight_go_together(tmp_path: Path) -> None:
    """One call per loop turn (as a gRPC server delivers them): the calls made while a batch
    is on its way wait for it and go as the next batch, and each still gets the decision it
    would have had alone, in call order. The server is stopped while they are made, so that
    the first batch is surely still on its way."""
    server = RedisServer(tmp_path)
    sync = redis.Redis.from_url(server.url)
    limit = Limit(100, 3600, "gcra")
    calls = 60

    async def main(piped: bool) -> tuple[list[int], int]:
        client = redis.asyncio.Redis.from_url(server.url)
        store = AsyncRedisStore(client, prefix=prefix())
        await store.apply("warm", limit)  # loads the script
        if piped and store._batcher.opening is not None:
            await store._batcher.opening  # the batches go on the store's pipe
        assert (store._batcher.pipe is not None) is piped
        before = script_runs(sync)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            pending = []
            for _ in range(calls):  # one call started per loop turn
                pending.append(asyncio.ensure_future(store.apply("k", limit)))
                await asyncio.sleep(0)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        decisions = await asyncio.gather(*pending)
        runs = script_runs(sync) - before
        await store.close()
        return [d.remaining for d in decisions], runs

    try:
        for piped in (False, True):
            sync.flushdb()
            remaining, runs = asyncio.run(main(piped))
            assert remaining == list(range(99, 99 - calls, -1))
            assert runs == 2  # the first call, then the 59 made while it was on its way
    finally:
        server.stop()


def test_a_burst_goes_as_batches_of_at_most_max_batch_hits(redis_server: RedisServer) -> None:
    """2,500 calls in one loop turn: three script runs (1,000, 1,000 and 500 hits), one after
    another, and exactly the limit admitted, in call order."""
    sync = redis.Redis.from_url(redis_server.url)
    limit = Limit(1_200, 3600, "sliding_log")
    calls = 2 * MAX_BATCH + 500

    async def main() -> tuple[list[bool], int]:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = AsyncRedisStore(client, prefix=prefix())
        await store.apply("warm", limit)  # loads the script
        before = script_runs(sync)
        decisions = await asyncio.gather(*(store.apply("k", limit) for _ in range(calls)))
        runs = script_runs(sync) - before
        await client.aclose()
        return [d.allowed for d in decisions], runs

    allowed, runs = asyncio.run(main())
    assert allowed == [True] * 1_200 + [False] * (calls - 1_200)
    assert runs == 3


def test_calls_waiting_on_a_batch_that_timed_out_wait_no_longer(tmp_path: Path) -> None:
    """A hung server: the calls made while a batch is in flight fail with it when it times
    out, so that no call waits longer than one timeout (and a little scheduling slack)."""
    timeout, margin = 0.4, 0.25
    server = RedisServer(tmp_path)
    limit = Limit(100, 3600, "gcra")

    async def main() -> list[tuple[str, float]]:
        store = open_async_store(server.url, prefix=prefix(), on_store_error=None, timeout=timeout)

        async def timed(key: str) -> tuple[str, float]:
            start = time.monotonic()
            try:
                await store.apply(key, limit)
                outcome = "decided"
            except StoreError:
                outcome = "StoreError"
            return outcome, time.monotonic() - start

        await store.apply("warm", limit)
        os.kill(server.pid, signal.SIGSTOP)  # alive but silent
        try:
            first = asyncio.ensure_future(timed("a"))
            await asyncio.sleep(0.02)  # the first batch is in flight
            later = [asyncio.ensure_future(timed(f"b{i}")) for i in range(3)]
            results = await asyncio.gather(first, *later)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        await store.close()  # type: ignore[attr-defined]
        return results

    try:
        results = asyncio.run(main())
    finally:
        server.stop()
    assert [outcome for outcome, _ in results] == ["StoreError"] * 4
    assert max(duration for _, duration in results) < timeout + margin


def test_an_idle_store_sends_a_call_in_the_next_turn(redis_server: RedisServer) -> None:
    """Batching never holds back a call when no batch is in flight: one call, one round trip,
    each sent at once."""
    sync = redis.Redis.from_url(redis_server.url)
    limit = Limit(100, 3600, "gcra")

    async def main() -> int:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        store = AsyncRedisStore(client, prefix=prefix())
        await store.apply("warm", limit)
        before = script_runs(sync)
        for _ in range(5):
            await asyncio.wait_for(store.apply("k", limit), timeout=5)
        await client.aclose()
        return script_runs(sync) - before

    assert asyncio.run(main()) == 5


def test_over_limit_cache_answers_denials_locally(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    store = OverLimitCache(RedisStore(client, prefix=prefix()))
    limit = Limit(2, 3600, "gcra")
    assert [store.apply("bot", limit).allowed for _ in range(3)] == [True, True, False]
    before = script_runs(client)
    refused = [store.apply("bot", limit) for _ in range(100)]
    assert script_runs(client) == before  # no round trip
    assert not any(d.allowed for d in refused)
    assert refused[-1].retry_after == pytest.approx(1800, abs=5)
    assert store.apply("other", limit).allowed  # other keys still reach the store
    store.reset("bot", limit)
    assert store.apply("bot", limit).allowed


T0 = 1_700_000_000.0
SLOTS = Limit(3, 60, "concurrency")


def test_release_frees_the_earliest_expiring_slots(redis_server: RedisServer) -> None:
    store = RedisStore(redis.Redis.from_url(redis_server.url), prefix=prefix())
    store.apply("job", SLOTS, 1, T0)  # a slot to T0 + 60
    store.apply("job", SLOTS, 2, T0 + 10)  # two to T0 + 70
    released = store.release("job", SLOTS, 2, T0 + 20)
    assert (released.allowed, released.granted, released.remaining) == (True, 2, 2)
    assert released.reset_after == 50.0  # one slot to T0 + 70 is left
    assert store.release("job", SLOTS, 5, T0 + 20)[2:] == (3, 0.0, 0.0, 0.0, 1, False)
    assert store.release("job", SLOTS, now=T0 + 20).granted == 0  # nothing left to release
    assert store.apply("job", SLOTS, 1).allowed  # the server's time
    assert store.release("job", SLOTS).granted == 1
    store.close()


def test_release_refuses_what_is_not_a_release(redis_server: RedisServer) -> None:
    store = RedisStore(redis.Redis.from_url(redis_server.url), prefix=prefix())
    with pytest.raises(ValueError, match="release needs a concurrency limit, not gcra"):
        store.release("job", Limit(3, 60, "gcra"))
    for slots in (0, -1, 1.0, True):
        with pytest.raises(ValueError, match="slots must be a positive integer"):
            store.release("job", SLOTS, slots)  # type: ignore[arg-type]
    store.close()


def test_release_maps_a_failing_server_to_a_store_error() -> None:
    client = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    store = RedisStore(client, prefix=prefix())
    with pytest.raises(StoreError, match=r"^redis: "):
        store.release("job", SLOTS)
    store.close()


def test_async_release_is_the_twin(redis_server: RedisServer) -> None:
    async def main() -> list[tuple[int, int]]:
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(redis_server.url), prefix=prefix())
        await store.apply("job", SLOTS, 3, T0)
        released = [await store.release("job", SLOTS, 2, T0 + 1)]
        released.append(await store.release("job", SLOTS, 2, T0 + 1))
        with pytest.raises(ValueError, match="concurrency"):
            await store.release("job", Limit(3, 60))
        await store.close()
        return [(d.granted, d.remaining) for d in released]

    assert asyncio.run(main()) == [(2, 2), (1, 3)]


def test_open_store_by_url_wraps_the_policy(redis_server: RedisServer) -> None:
    store = open_store(redis_server.url, on_store_error="deny", over_limit_cache=True)
    assert isinstance(store, Resilient)
    assert isinstance(store.store.store, OverLimitCache)  # type: ignore[attr-defined]
    assert Limiter(store).hit("u", Limit(1, 60, "gcra")).allowed
    async_store = open_async_store(redis_server.url)
    assert isinstance(async_store, AsyncResilient)
    packer = async_store.store.client.connection_pool.connection_class  # type: ignore[attr-defined]
    assert packer.__name__ == "HiredisPackedConnection"
    store.close()
    bare = open_store(redis_server.url, on_store_error=None, prefix="p", tag="identity")
    assert isinstance(bare, Leasing) and isinstance(bare.store, RedisStore)
    assert bare.tag == "identity"


def test_a_bad_url_is_refused() -> None:
    with pytest.raises(ValueError, match="expected host:port in a store URL, not 'nohost'"):
        open_store("redis+cluster://nohost")
    with pytest.raises(
        StoreConfigError, match=r"expected redis\+sentinel://host:port,\.\.\./service"
    ):
        open_store("redis+sentinel://127.0.0.1:26379")
    with pytest.raises(StoreConfigError, match=r"unknown store URL 'mysql://u:\*\*\*@db/x'"):
        open_store("mysql://u:secret@db/x")
    with pytest.raises(StoreConfigError, match="path is a database number") as info:
        open_store("redis://:secret@127.0.0.1:6379/zero")
    assert "secret" not in str(info.value)


def test_the_hiredis_packer_packs_as_redis_py_does(redis_server: RedisServer) -> None:
    """Same bytes as redis-py's own packer, the same error for what Redis cannot take, and a
    command of several words split; the sync client opened by URL uses it."""
    from redis.connection import HiredisRespSerializer

    from ratekeeper.stores.redis.clients import _hiredis_packer

    ours, theirs = _hiredis_packer(), HiredisRespSerializer()
    for args in [
        ("EVALSHA", "a" * 40, 1, "rk:2:{k}", "", "1", 2.5, 1e-9, -0.0, 10**20, "é", b"\x00"),
        ("SCRIPT LOAD", "return 1"),
        ("SET", "k", bytearray(b"x")),
        ("SET", "k", memoryview(b"xy")),
    ]:
        assert ours.pack(*args) == theirs.pack(*args), args
    for bad in (True, None):
        with pytest.raises(redis.DataError):
            ours.pack("SET", "k", bad)
    store = open_store(redis_server.url, on_store_error=None)
    client = store.client  # type: ignore[attr-defined]
    assert client.connection_pool.connection_kwargs["command_packer"] is ours
    assert client.ping()
    store.close()


def test_a_bad_hit_never_fails_the_batch_it_would_have_joined(redis_server: RedisServer) -> None:
    async def main() -> list[object]:
        limiter = AsyncLimiter(
            open_async_store(redis_server.url, prefix="badbatch", on_store_error=None)
        )
        limit = Limit(3, 60, "gcra")
        calls = [limiter.hit(f"user:{n}", limit) for n in range(5)]
        calls.insert(2, limiter.hit("user:x", limit, -5))
        calls.insert(4, limiter.hit(None, limit))  # type: ignore[arg-type]
        results = await asyncio.gather(*calls, return_exceptions=True)
        await limiter.close()
        return [type(result).__name__ for result in results]

    bad = "InvalidInputError"
    assert asyncio.run(main()) == ["Decision"] * 2 + [bad, "Decision", bad] + ["Decision"] * 2


def test_the_async_engine_refuses_bad_input_before_the_store(redis_server: RedisServer) -> None:
    from ratekeeper import AsyncEngine, InvalidInputError

    async def main() -> None:
        engine = AsyncEngine(
            open_async_store(redis_server.url, prefix="badengine"), default=Limit(1, 60)
        )
        for call in (
            lambda: engine.is_allowed("k", -1),
            lambda: engine.decide("", 1),
            lambda: engine.check("d", [[("k", 1)]]),  # type: ignore[list-item]
            lambda: engine.check("d", [[("k", "v")]], 1.5),  # type: ignore[arg-type]
        ):
            with pytest.raises(InvalidInputError):
                await call()
        assert await engine.is_allowed("k")
        assert not await engine.is_allowed("k")
        await engine.close()

    asyncio.run(main())


@pytest.mark.parametrize("key", ["", None, "\udcff"])
def test_reset_refuses_a_key_that_is_no_key(redis_server: RedisServer, key: Any) -> None:
    limit = Limit(1, 60)

    async def main() -> None:
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(redis_server.url), prefix="bad")
        with pytest.raises(InvalidInputError, match="key must"):
            await store.reset(key, limit)
        await store.close()

    client = redis.Redis.from_url(redis_server.url)
    store = RedisStore(client, prefix="bad")
    with pytest.raises(InvalidInputError, match="key must"):
        store.reset(key, limit)
    asyncio.run(main())
    assert client.keys("bad:*") == []
    client.close()
