"""The Redis store calls its function library (Redis 7 ``FCALL``), loads it when the server
has lost it, and falls back to the scripts on a server that has no functions."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio

from ratekeeper import Limit
from ratekeeper.stores.redis import AsyncRedisStore, RedisStore
from ratekeeper.stores.redis.scripts import FUNCTIONS
from tests.servers import RedisServer

LIMIT = Limit(100, 3600, "gcra")
_prefixes = itertools.count()


def prefix() -> str:
    return f"fn{next(_prefixes)}"


async def three_hits(astore: AsyncRedisStore) -> list[int]:
    """The remaining of three hits on one key: one alone (``now`` given), then two batched;
    the store closed after."""
    decided = [await astore.apply("k", LIMIT, now=time.time())]
    decided += await asyncio.gather(*(astore.apply("k", LIMIT) for _ in range(2)))
    await astore.close()
    return [one.remaining for one in decided]


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {"calls": 0})
    return int(stats["calls"])


@pytest.fixture(scope="module")
def without_functions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server on which FCALL is no command, as on a server older than Redis 7."""
    server = RedisServer(
        Path(tmp_path_factory.mktemp("nofcall")), None, "--rename-command", "FCALL", ""
    )
    yield server
    server.stop()


def test_decisions_are_function_calls(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    store = RedisStore(redis.Redis.from_url(redis_server.url), prefix=prefix())
    store.apply("warm", LIMIT)  # loads the library, if no other test did
    before = calls(client, "fcall"), calls(client, "evalsha")
    assert store.apply("k", LIMIT).remaining == 99
    assert [d.remaining for d in store.apply_many([("k", LIMIT, 1), ("j", LIMIT, 2)])] == [98, 98]
    assert (calls(client, "fcall") - before[0], calls(client, "evalsha") - before[1]) == (2, 0)
    assert set(FUNCTIONS) == {algorithm.value for algorithm in LIMIT.algorithm.__class__} | {
        "batch"
    }


def test_the_library_is_loaded_again_after_a_function_flush(redis_server: RedisServer) -> None:
    """A restarted or failed-over server, or FUNCTION FLUSH: each call loads it, once."""
    client = redis.Redis.from_url(redis_server.url)
    store = RedisStore(redis.Redis.from_url(redis_server.url), prefix=prefix())
    assert store.apply("k", LIMIT).remaining == 99
    client.function_flush()
    assert store.apply("k", LIMIT).remaining == 98
    client.function_flush()
    assert [d.remaining for d in store.apply_many([("k", LIMIT, 1), ("j", LIMIT, 1)])] == [97, 99]

    async def main() -> list[int]:
        astore = AsyncRedisStore(redis.asyncio.Redis.from_url(redis_server.url), prefix=prefix())
        client.function_flush()
        first = await astore.apply("k", LIMIT, now=time.time())  # the single-hit entry
        client.function_flush()
        second = await astore.apply("k", LIMIT)  # the batch entry
        await astore.close()
        return [first.remaining, second.remaining]

    assert asyncio.run(main()) == [99, 98]
    client.close()


def test_a_server_without_functions_is_sent_the_scripts(without_functions: RedisServer) -> None:
    client = redis.Redis.from_url(without_functions.url)
    store = RedisStore(redis.Redis.from_url(without_functions.url), prefix=prefix())
    assert [store.apply("k", LIMIT).remaining for _ in range(3)] == [99, 98, 97]
    assert [d.remaining for d in store.apply_many([("k", LIMIT, 1), ("j", LIMIT, 1)])] == [96, 99]
    assert store._call == "EVALSHA"
    client.script_flush()  # and the scripts are loaded again as before
    assert store.apply("k", LIMIT).remaining == 95

    astore = AsyncRedisStore(redis.asyncio.Redis.from_url(without_functions.url), prefix=prefix())
    assert asyncio.run(three_hits(astore)) == [99, 98, 97]
    client.close()


def test_a_client_that_decodes_its_replies_gets_the_same_decisions(
    redis_server: RedisServer,
) -> None:
    """The replies are packed decisions, read as bytes whatever the client decodes."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    store = RedisStore(client, prefix=prefix())
    assert store.apply("k", LIMIT).remaining == 99
    assert [d.remaining for d in store.apply_many([("k", LIMIT, 1), ("j", LIMIT, 1)])] == [98, 99]

    aclient = redis.asyncio.Redis.from_url(redis_server.url, decode_responses=True)
    assert asyncio.run(three_hits(AsyncRedisStore(aclient, prefix=prefix()))) == [99, 98, 97]
    client.close()
