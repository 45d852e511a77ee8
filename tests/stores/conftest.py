"""The store contract suite runs unchanged over every request store.

Each store factory takes a clock; the tests pass ``now`` explicitly wherever time matters, so
that a store whose clock is a server's (Redis) runs them too. Each Redis test writes under its
own key prefix, so tests never see each other's state.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis

from ratekeeper import MemoryStore, Store
from ratekeeper.stores.redis import RedisStore
from ratekeeper.testing import FakeClock

_prefixes = itertools.count()

STORES = ["memory", "redis", "redis-cluster"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Store]:
    kind = request.param
    if kind == "memory":
        yield MemoryStore(clock=clock)
        return
    prefix = f"contract{next(_prefixes)}"
    if kind == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_server").url)
        yield RedisStore(client, prefix=prefix)
    else:
        cluster = request.getfixturevalue("redis_cluster")
        client = redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup_nodes]
        )
        # One slot per identity: a batch over one identity is one atomic script run, a batch
        # over several (an address and a username) one run per slot, with refunds.
        yield RedisStore(client, prefix=prefix, tag="identity")
    client.close()
