"""Exactness across processes: 8 processes x 2,000 attempts on one key, limit 1,000 per day.

Each process opens its own store from the URL, as separate application servers would, and
they start together. Every exact algorithm must admit exactly 1,000 on a standalone Redis and
on a Redis Cluster. The sliding counter is approximate in general; its count is reported.
Afterwards a SCAN of every server finds no key without a TTL.
"""

from __future__ import annotations

import multiprocessing
import uuid
from typing import Any

import pytest
import redis

from ratekeeper import Algorithm, Limit, Limiter, open_store

PROCESSES = 8
ATTEMPTS = 2_000
AMOUNT = 1_000
APPROXIMATE = {Algorithm.SLIDING_COUNTER}


def _worker(url: str, prefix: str, algorithm: str, start: Any, out: Any) -> None:
    limiter = Limiter(open_store(url, prefix=prefix, on_store_error=None, timeout=5.0))
    limit = Limit(AMOUNT, 86_400, algorithm)
    start.wait()
    out.put(sum(limiter.hit("hot", limit).allowed for _ in range(ATTEMPTS)))
    limiter.close()


def admitted_across_processes(url: str, algorithm: Algorithm) -> int:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    out = context.Queue()
    prefix = f"exact-{uuid.uuid4().hex[:8]}"
    workers = [
        context.Process(target=_worker, args=(url, prefix, algorithm.value, start, out))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    start.set()
    counts = [out.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    return sum(counts)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(Algorithm))
@pytest.mark.parametrize("server", ["redis_server", "redis_cluster"])
def test_processes_admit_exactly_the_limit(
    request: pytest.FixtureRequest,
    record_property: Any,
    server: str,
    algorithm: Algorithm,
) -> None:
    url = request.getfixturevalue(server).url
    admitted = admitted_across_processes(url, algorithm)
    record_property(f"{server}-{algorithm.value}-admitted", admitted)
    if algorithm in APPROXIMATE:
        print(f"{algorithm.value} on {server}: {admitted} admitted of limit {AMOUNT}")
        assert 0 < admitted <= 2 * AMOUNT
    else:
        assert admitted == AMOUNT


def _keys_without_ttl(client: Any) -> list[bytes]:
    return [key for key in client.scan_iter(count=1000) if client.pttl(key) < 0]


@pytest.mark.slow
def test_no_key_without_a_ttl(request: pytest.FixtureRequest) -> None:
    """The TTL audit: after a load of every algorithm (and whatever the session ran before),
    a SCAN of the standalone server and of every cluster master finds no immortal key."""
    standalone = request.getfixturevalue("redis_server")
    cluster = request.getfixturevalue("redis_cluster")
    for url in (standalone.url, cluster.url):
        limiter = Limiter(open_store(url, prefix="audit", on_store_error=None))
        for algorithm in Algorithm:
            limit = Limit(3, 60, algorithm)
            for number in range(50):
                limiter.hit(f"user:{number}", limit, 1 + number % 4)
        limiter.close()
    client = redis.Redis.from_url(standalone.url)
    assert client.dbsize() > 0
    assert _keys_without_ttl(client) == []
    client.close()
    for node in cluster.masters():
        client = redis.Redis(host="127.0.0.1", port=node.port)
        assert client.dbsize() > 0
        assert _keys_without_ttl(client) == []
        client.close()
