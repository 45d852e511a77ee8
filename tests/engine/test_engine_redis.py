"""The engine on a real Redis: every limit of a check goes out in one store call."""

from __future__ import annotations

import asyncio
import uuid

import redis

from ratekeeper import open_async_store, open_store
from ratekeeper.engine import AsyncEngine, Engine
from ratekeeper.rules import parse_rules
from tests.servers import RedisServer

RULES = parse_rules(
    """
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_log}
  - key: path
    value: /health
  - key: plan
    value: free
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: token_bucket}
""",
    "rules.yaml",
)
REQUEST = [
    [("remote_address", "10.0.0.1")],
    [("user", "alice")],
    [("path", "/health")],
    [("plan", "free")],
]


def script_runs(client: redis.Redis) -> int:
    """The store's script runs so far: EVALSHA, or FCALL of its function library."""
    stats = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{command}", {"calls": 0})["calls"])
        for command in ("evalsha", "fcall")
    )


def test_a_check_is_one_round_trip(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    engine = Engine(open_store(redis_server.url, prefix=prefix), rules=RULES)
    try:
        engine.check("api", REQUEST)  # loads the script once
        before = script_runs(client)
        verdicts = [engine.check("api", REQUEST) for _ in range(3)]
        assert script_runs(client) - before == 3
        assert [verdict.allowed for verdict in verdicts] == [True, False, False]
        assert [status.remaining for status in verdicts[0].statuses][:2] == [1, 0]
        assert [status.allowed for status in verdicts[1].statuses] == [True, False, True, True]
        keys = list(client.scan_iter(f"{prefix}:*"))
        assert len(keys) == 3  # remote_address, user and plan; /health is whitelisted
        assert all(client.pttl(key) > 0 for key in keys)
    finally:
        engine.close()
        client.close()


def test_the_async_engine_on_redis_decides_like_the_engine(redis_server: RedisServer) -> None:
    sync_prefix, async_prefix = f"s{uuid.uuid4().hex[:8]}", f"a{uuid.uuid4().hex[:8]}"
    engine = Engine(open_store(redis_server.url, prefix=sync_prefix), rules=RULES)
    expected = [engine.check("api", REQUEST).allowed for _ in range(5)]
    engine.close()

    async def run() -> list[bool]:
        twin = AsyncEngine(open_async_store(redis_server.url, prefix=async_prefix), rules=RULES)
        try:
            return [(await twin.check("api", REQUEST)).allowed for _ in range(5)]
        finally:
            await twin.close()

    assert asyncio.run(run()) == expected == [True, True, False, False, False]
