"""The Lua scripts refuse what is not a count, on a server other clients share.

Each script is called directly with redis-py, as any client of the server could, with costs
(and slots to release) that are not non-negative integers of at most 16 digits: a sign, a
fraction, an exponent, ``nan``, ``inf``, nothing. Each call gets the error reply
``ratekeeper: invalid cost <text>`` (``slots`` for a release), and the key is left exactly as
it was: no write at all, so no ``nan`` can be stored under a key and admit everything after.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.limits import Limit
from ratekeeper.core.store_keys import state_key
from ratekeeper.stores.redis import RedisStore
from ratekeeper.stores.redis.scripts import (
    REFUND,
    RELEASE,
    SINGLE,
    SOURCE,
    arguments,
    limit_args,
    now_arg,
)
from tests.servers import RedisServer

T0 = 1_700_000_000.0
PREFIX = "scripts"
BAD = ["-1", "nan", "inf", "-inf", "1.5", "1e3", "", " 1", "1 ", "0x10", "+1", "9" * 17, "x" * 60]
LIMITS = [Limit(3, 10, algorithm) for algorithm in Algorithm]

_keys = itertools.count()


@pytest.fixture(scope="module")
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def store(client: redis.Redis) -> RedisStore:
    return RedisStore(client, prefix=PREFIX)


def changes(client: redis.Redis) -> int:
    """Writes the server applied so far (every write command counts, even a same-value one)."""
    return int(client.info("persistence")["rdb_changes_since_last_save"])


def charged_key(store: RedisStore, limit: Limit) -> str:
    """A key of ``limit`` holding a state (one hit of cost 1), and its Redis name."""
    key = f"k{next(_keys)}"
    store.apply(key, limit, 1, T0)
    return state_key(limit, key, PREFIX)


def assert_refused(client: redis.Redis, names: list[str], call: Any, message: str) -> None:
    """``call()`` gets the error reply ``message`` and writes nothing under ``names``."""
    dumps = [client.dump(name) for name in names]
    before = changes(client)
    with pytest.raises(redis.ResponseError) as refused:
        call()
    assert str(refused.value) == message
    assert changes(client) == before
    assert [client.dump(name) for name in names] == dumps


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.algorithm.value)
def test_the_single_hit_script_refuses_a_bad_cost(
    client: redis.Redis, store: RedisStore, limit: Limit
) -> None:
    script = client.register_script(SINGLE[limit.algorithm])
    names = [charged_key(store, limit), state_key(limit, f"new{next(_keys)}", PREFIX)]
    for name in names:
        for bad in BAD:
            args = [now_arg(T0 + 0.5), bad, *limit_args(limit)]
            assert_refused(
                client,
                [name],
                lambda: script([name], args),  # noqa: B023 - called at once
                f"ratekeeper: invalid cost {bad[:40]}",
            )
    assert not client.exists(names[1])


@pytest.mark.parametrize("mode", ["0", "1", "2"])
@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.algorithm.value)
def test_the_batch_script_refuses_a_bad_cost_before_any_write(
    client: redis.Redis, store: RedisStore, limit: Limit, mode: str
) -> None:
    """A good hit first and a bad one after: the good one is not applied either."""
    script = client.register_script(SOURCE)
    first, second = charged_key(store, limit), charged_key(store, limit)
    for bad in BAD:
        argv = arguments([(limit, 1), (limit, 1)], T0 + 0.5, mode != "0", with_now=mode == "2")
        argv[-1] = bad
        assert_refused(
            client,
            [first, second],
            lambda: script([first, second], argv),  # noqa: B023 - called at once
            f"ratekeeper: invalid cost {bad[:40]}",
        )


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.algorithm.value)
def test_the_refund_script_refuses_a_bad_cost(
    client: redis.Redis, store: RedisStore, limit: Limit
) -> None:
    script = client.register_script(REFUND)
    name = charged_key(store, limit)
    for bad in BAD:
        argv = arguments([(limit, 1), (limit, 1)], T0, False)
        argv[-1] = bad
        assert_refused(
            client,
            [name],
            lambda: script([name, name], argv),  # noqa: B023 - called at once
            f"ratekeeper: invalid cost {bad[:40]}",
        )


def test_the_release_script_refuses_slots_that_are_not_a_positive_integer(
    client: redis.Redis, store: RedisStore
) -> None:
    limit = Limit(3, 10, "concurrency")
    script = client.register_script(RELEASE)
    name = charged_key(store, limit)
    for bad in [*BAD, "0", "000"]:
        args = [now_arg(T0 + 0.5), bad, *limit_args(limit)]
        assert_refused(
            client,
            [name],
            lambda: script([name], args),  # noqa: B023 - called at once
            f"ratekeeper: invalid slots {bad[:40]}",
        )
    assert script([name], [now_arg(T0 + 0.5), "1", *limit_args(limit)])[6] == 1
    assert not client.exists(name)


def test_a_nan_cost_cannot_open_a_token_bucket(client: redis.Redis, store: RedisStore) -> None:
    """The poisoning this guards against: a refused ``nan`` leaves the bucket empty."""
    limit = Limit(2, 3600, "token_bucket")
    key = f"k{next(_keys)}"
    assert [store.apply(key, limit, 1, T0).allowed for _ in range(3)] == [True, True, False]
    script = client.register_script(SINGLE[limit.algorithm])
    name = state_key(limit, key, PREFIX)
    with pytest.raises(redis.ResponseError, match=r"^ratekeeper: invalid cost nan$"):
        script([name], [now_arg(T0), "nan", *limit_args(limit)])
    assert [store.apply(key, limit, 1, T0 + 1).allowed for _ in range(3)] == [False] * 3
