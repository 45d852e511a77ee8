"""The in-memory store: bounded memory, expiry, and the clock it is given."""

from __future__ import annotations

from typing import Any

import pytest

from ratekeeper import InvalidInputError, InvalidLimitError, Limit, MemoryStore
from ratekeeper.testing import FakeClock


def test_uses_the_injected_clock(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    limit = Limit(1, 1, "gcra")
    assert store.apply("k", limit).allowed
    assert not store.apply("k", limit).allowed
    clock.advance(1.0)
    assert store.apply("k", limit).allowed


def test_max_keys_evicts_least_recently_used(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock, max_keys=3)
    limit = Limit(1, 3600)
    for key in "abc":
        store.apply(key, limit)
    store.apply("a", limit)  # "a" is now the most recently used; "b" the least
    store.apply("d", limit)
    assert len(store) == 3
    # "b" was evicted, so it is fresh again; "a", "c" and "d" are still counted.
    assert [store.apply(key, limit).allowed for key in "acdb"] == [False, False, False, True]


def test_idle_keys_expire_once_fully_available(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    short = Limit(1, 5, "gcra")
    long = Limit(1, 3600, "gcra")
    for key in range(100):
        store.apply(f"s{key}", short)
    store.apply("long", long)
    assert len(store) == 101
    assert store.sweep() == 0  # nothing is idle yet
    clock.advance(5.0)
    assert store.sweep() == 100
    assert len(store) == 1
    assert not store.apply("long", long).allowed  # the live key kept its state


def test_peek_of_unknown_key_stores_nothing(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    assert store.apply("ghost", Limit(3, 60), 0).remaining == 3
    assert len(store) == 0


def test_clear(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    store.apply("k", Limit(1, 60))
    store.clear()
    assert len(store) == 0


def test_rejects_a_useless_bound() -> None:
    with pytest.raises(ValueError, match="max_keys must be an integer of at least 1"):
        MemoryStore(max_keys=0)


@pytest.mark.slow
def test_a_million_keys_stay_within_max_keys(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock, max_keys=100_000)
    limit = Limit(10, 3600, "gcra")
    apply = store.apply
    for number in range(1_000_000):
        apply(f"client:{number}", limit)
        if number % 250_000 == 0:
            assert len(store) <= 100_000
    assert len(store) == 100_000
    # The survivors are exactly the 100,000 most recent keys.
    assert not store.apply("client:999999", limit, 10).allowed
    assert store.apply("client:899999", limit, 10).allowed


@pytest.mark.parametrize("key", ["", None, b"k", "\udcff"])
def test_reset_refuses_a_key_that_is_no_key(clock: FakeClock, key: Any) -> None:
    store = MemoryStore(clock=clock)
    store.apply("k", Limit(1, 60))
    with pytest.raises(InvalidInputError, match="key must"):
        store.reset(key, Limit(1, 60))
    assert len(store) == 1


def test_release_of_a_limit_that_is_not_concurrency_is_an_invalid_limit(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock)
    with pytest.raises(InvalidLimitError, match="release needs a concurrency limit, not gcra"):
        store.release("k", Limit(1, 60, "gcra"))
