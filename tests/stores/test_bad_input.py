"""Bad keys and costs are refused before anything is counted, by every store and every surface.

Each test first gives bystander keys of every algorithm some state, then sends bad input, then
checks that the bad input raised ``InvalidInputError`` and that no stored state moved at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from ratekeeper import (
    Algorithm,
    Descriptor,
    Engine,
    InvalidInputError,
    InvalidLimitError,
    Limit,
    Limiter,
    Store,
)
from ratekeeper.core.inputs import MAX_COST
from ratekeeper.stores.redis import RedisStore
from tests.conftest import T0

BAD_COSTS: list[Any] = [
    -1,
    -1000,
    MAX_COST + 1,
    1.5,
    1.0,
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
    None,
    "1",
    b"1",
    [1],
]
BAD_KEYS: list[Any] = [None, b"k", ("k",), 42, 4.2, "", "\udc80", "ok\ud800", ["k"], True]
BYSTANDERS = [Limit(5, 60, algorithm) for algorithm in Algorithm]


def snapshot(store: Store) -> dict[Any, Any]:
    """Every piece of state the store holds, exactly."""
    if isinstance(store, RedisStore):
        client = store.client
        return {key: client.dump(key) for key in client.scan_iter(f"{store.prefix}:*")}
    tables = store._tables  # type: ignore[attr-defined]
    return {
        (limit_id, key): repr(state)
        for limit_id, table in tables.items()
        for key, state in table.items()
    }


@pytest.fixture
def busy(store: Store) -> Store:
    """The store with bystander keys of every algorithm partly used."""
    for limit in BYSTANDERS:
        assert store.apply("bystander", limit, 2, T0).allowed
    return store


def refused_without_a_trace(store: Store, call: Callable[..., object], *args: Any) -> str:
    before = snapshot(store)
    with pytest.raises(InvalidInputError) as info:
        call(*args)
    assert snapshot(store) == before
    return str(info.value)


@pytest.mark.parametrize("cost", BAD_COSTS, ids=repr)
def test_a_bad_cost_is_refused_and_changes_nothing(busy: Store, cost: Any) -> None:
    for limit in BYSTANDERS:
        message = refused_without_a_trace(busy, busy.apply, "bystander", limit, cost, T0)
        assert "cost must be an integer from 0 to 9007199254740991" in message
        assert repr(cost)[:20] in message
        batch = [("x", limit, 1), ("bystander", limit, cost)]
        refused_without_a_trace(busy, lambda: busy.apply_many(batch, now=T0))  # noqa: B023


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_a_bad_key_is_refused_and_changes_nothing(busy: Store, key: Any) -> None:
    for limit in BYSTANDERS:
        message = refused_without_a_trace(busy, busy.apply, key, limit, 1, T0)
        assert message.startswith("key must")
        batch = [("x", limit, 1), (key, limit, 1)]
        refused_without_a_trace(busy, lambda: busy.apply_many(batch, now=T0))  # noqa: B023


BAD_TIMES: list[Any] = [math.nan, math.inf, -math.inf, True, None.__class__, "1", b"1", [1.0]]


@pytest.mark.parametrize("now", BAD_TIMES, ids=repr)
def test_a_bad_time_is_refused_and_changes_nothing(busy: Store, now: Any) -> None:
    """A NaN or infinite ``now`` written into a key's state would make its next hits start
    afresh; it is refused like a bad cost."""
    for limit in BYSTANDERS:
        message = refused_without_a_trace(busy, busy.apply, "bystander", limit, 1, now)
        assert message.startswith("now must be finite seconds since the epoch")
        batch = [("x", limit, 1), ("bystander", limit, 1)]
        refused_without_a_trace(busy, lambda: busy.apply_many(batch, now=now))  # noqa: B023
    concurrency = Limit(5, 60, "concurrency")
    refused_without_a_trace(busy, busy.release, "bystander", concurrency, 1, now)


def test_a_releasing_cost_is_refused_so_no_limit_can_be_switched_off(busy: Store) -> None:
    limit = Limit(5, 3600)
    assert busy.apply("k", limit, 5, T0).allowed
    refused_without_a_trace(busy, lambda: busy.apply("k", limit, -1000, T0))
    assert not busy.apply("k", limit, 1, T0).allowed


def test_keys_that_were_refused_before_now_count_as_themselves(store: Store) -> None:
    limit = Limit(1, 60)
    assert store.apply("42", limit, 1, T0).allowed
    with pytest.raises(InvalidInputError):
        store.apply(42, limit, 1, T0)  # type: ignore[arg-type]
    assert not store.apply("42", limit, 1, T0).allowed


def test_a_cost_above_capacity_is_valid_and_never_fits(store: Store) -> None:
    for limit in BYSTANDERS:
        decision = store.apply("big", limit, MAX_COST, T0)
        assert not decision.allowed
        assert decision.retry_after == math.inf


@pytest.mark.parametrize("cost", [-1, 1.5, math.nan, True, None], ids=repr)
def test_every_limiter_entry_point_refuses_a_bad_cost(busy: Store, cost: Any) -> None:
    limiter = Limiter(busy)
    limit = Limit(5, 60, "gcra")
    for call in (
        lambda: limiter.hit("bystander", limit, cost),
        lambda: limiter.hit("bystander", "5/minute", cost),
        lambda: limiter.hit_many([("bystander", limit, cost)]),
        lambda: limiter.hit_many([("x", limit), ("bystander", "5/minute; 9/hour", cost)]),
        lambda: limiter.acquire("bystander", limit, cost, timeout=0),
        lambda: limiter.limit(limit, cost=cost),  # refused when decorating
    ):
        refused_without_a_trace(busy, call)


@pytest.mark.parametrize("key", [None, "", 42, b"k", "\udc80"], ids=repr)
def test_every_limiter_entry_point_refuses_a_bad_key(busy: Store, key: Any) -> None:
    limiter = Limiter(busy)
    limit = Limit(5, 60, "gcra")

    @limiter.limit(limit, key=lambda: key)
    def decorated() -> None:
        raise AssertionError("a refused key must not reach the function")

    for call in (
        lambda: limiter.hit(key, limit),
        lambda: limiter.peek(key, limit),
        lambda: limiter.hit_many([(key, limit)]),
        lambda: limiter.acquire(key, limit, timeout=0),
        decorated,
    ):
        refused_without_a_trace(busy, call)


@pytest.mark.parametrize("limit", [None, 5, ["5/minute"], {"amount": 5}], ids=repr)
def test_a_limit_that_is_neither_a_limit_nor_a_rate_string_is_refused(limit: Any) -> None:
    with pytest.raises(InvalidLimitError, match="a limit is a Limit or a rate string"):
        Limiter().hit("k", limit)


@pytest.mark.parametrize("hit", [("k",), ("k", "5/minute", 1, 2), "k", None], ids=repr)
def test_a_malformed_batch_hit_is_refused(hit: Any) -> None:
    with pytest.raises(InvalidInputError, match="each hit is"):
        Limiter().hit_many([("x", "5/minute"), hit])


@pytest.mark.parametrize("cost", [-3, -1, 2.5, math.nan, True, "1"], ids=repr)
def test_every_engine_entry_point_refuses_a_bad_cost(busy: Store, cost: Any) -> None:
    engine = Engine(busy, default=Limit(5, 60, "gcra"))
    limit = Limit(5, 60)
    for call in (
        lambda: engine.is_allowed("bystander", cost),
        lambda: engine.decide("bystander", cost),
        lambda: engine.check("d", [[("k", "v")]], cost),
        lambda: engine.check("d", [Descriptor((("k", "v"),), limit, cost)]),
        lambda: engine.check("d", [[("a", "b")], Descriptor((("k", "v"),), limit, cost)]),
    ):
        refused_without_a_trace(busy, call)


@pytest.mark.parametrize(
    "descriptors",
    [
        [],
        "k=v",
        None,
        [[("k",)]],
        [[("k", "v", "w")]],
        [[(1, "v")]],
        [[("k", None)]],
        [[("", "v")]],
        [["kv"]],
        [Descriptor((("k", "v"),), "5/minute")],  # type: ignore[arg-type]
        [[("k", "\udc80")]],
    ],
    ids=repr,
)
def test_a_malformed_descriptor_is_refused(busy: Store, descriptors: Any) -> None:
    engine = Engine(busy, default=Limit(5, 60))
    refused_without_a_trace(busy, lambda: engine.check("d", descriptors))


@pytest.mark.parametrize("key", [None, "", 42, b"k", "\udc80"], ids=repr)
def test_the_engine_refuses_a_bad_key(busy: Store, key: Any) -> None:
    engine = Engine(busy, default=Limit(5, 60))
    refused_without_a_trace(busy, lambda: engine.is_allowed(key))
    refused_without_a_trace(busy, lambda: engine.decide(key))
    if key != "":  # the empty domain is valid
        refused_without_a_trace(busy, lambda: engine.check(key, [[("k", "v")]]))
