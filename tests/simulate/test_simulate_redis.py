"""The simulator decides exactly as the Redis store: the same trace replayed through
``simulate`` and, hit by hit, through ``RedisStore.apply`` with each hit's time passed as
``now`` (the store takes an explicit time in place of the server's ``TIME``) gives the same
decisions and delays, for every algorithm.

The trace spans far more virtual time than the replay takes, so no key's time to live (set in
real time from its virtual ``reset_after``) runs out while its state is still needed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis

from ratekeeper import Limit
from ratekeeper.simulate import simulate
from ratekeeper.stores.redis import RedisStore
from tests.servers import RedisServer
from tests.simulate.mixed import LIMITS, mixed_trace

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.mark.parametrize("limit", LIMITS, ids=str)
def test_the_simulator_and_the_redis_store_decide_alike(client: redis.Redis, limit: Limit) -> None:
    trace = mixed_trace(events=600)
    result = simulate(trace, [limit], record=True)
    tally = result.replay.tallies[0]
    assert tally.decisions is not None and tally.delay_of is not None
    store = RedisStore(client, prefix=f"sim{next(_prefixes)}")
    allowed, delays = [], []
    for now, key, cost in trace:
        decision = store.apply(key, limit, cost, now=now)
        allowed.append(int(decision.allowed))
        delays.append(decision.delay)
    assert list(tally.decisions) == allowed
    assert list(tally.delay_of) == delays
    assert 0 < sum(allowed) < len(allowed)
