"""The engine's configuration cache: oldest first out, expiry (by the planner's ticker), and what it
keeps aside as stale."""

from __future__ import annotations

import time

import pytest

from ratekeeper.config import open_config_store
from ratekeeper.engine.cache import TTLCache
from ratekeeper.engine.plans import Planner
from ratekeeper.rules import RuleSet
from tests.servers import wait_until


def test_a_full_cache_drops_its_oldest_entry_and_a_hit_keeps_no_order() -> None:
    cache: TTLCache[int] = TTLCache(3, 60.0)
    for number, key in enumerate("abc"):
        cache.put(key, number)
    assert cache.get("a") == 0  # a hit writes nothing: a stays the oldest
    cache.put("d", 3)
    assert [cache.get(key) for key in "abcd"] == [None, 1, 2, 3]
    cache.put("b", 10)  # put again: b is now the newest
    cache.put("e", 4)
    assert [cache.get(key) for key in "bcde"] == [10, None, 3, 4]
    assert len(cache) == 3


def test_expiry_empties_the_cache_but_keeps_the_last_values_aside() -> None:
    cache: TTLCache[str] = TTLCache(10, 60.0)
    cache.put("user:1", "five per second")
    cache.expire()
    assert cache.get("user:1") is None
    assert cache.stale("user:1") == "five per second"
    cache.put("user:1", "seven per second")
    assert cache.stale("user:1") == "seven per second"
    cache.clear()  # a change: the old values are known to be wrong
    assert cache.stale("user:1") is None


def test_no_entry_outlives_the_ttl() -> None:
    config = open_config_store("sqlite://:memory:")
    planner = Planner(
        RuleSet.empty(), config=config, default=None, domain="", cache_size=10, cache_ttl=0.05
    )
    planner.start()
    try:
        planner.load_key("k")
        assert planner.cache.get("k") is not None
        started = time.monotonic()
        wait_until(lambda: planner.cache.get("k") is None, 2.0, "expiry")
        assert time.monotonic() - started <= 1.0
    finally:
        planner.close()
        config.close()


@pytest.mark.parametrize(("size", "ttl"), [(0, 1.0), (1, 0.0), (1, -1.0)])
def test_bad_sizes_are_refused(size: int, ttl: float) -> None:
    with pytest.raises(ValueError, match="cache"):
        TTLCache(size, ttl)


def test_discard_forgets_a_key_and_its_stale_value() -> None:
    cache: TTLCache[str] = TTLCache(10, 60.0)
    cache.put("user:1", "five per second")
    cache.put("user:2", "two per second")
    cache.expire()
    cache.put("user:1", "five per second")
    cache.discard("user:1")
    assert cache.get("user:1") is None and cache.stale("user:1") is None
    assert cache.stale("user:2") == "two per second"


def test_stale_values_count_against_the_size_and_go_first() -> None:
    cache: TTLCache[int] = TTLCache(4, 60.0)
    for number, key in enumerate("abcd"):
        cache.put(key, number)
    cache.expire()  # a, b, c, d kept aside: the cache holds 4
    assert (len(cache), cache.stale_count) == (0, 4)
    cache.put("b", 10)  # b's own stale value goes: still 4
    assert (len(cache), cache.stale_count) == (1, 3)
    assert cache.stale("b") == 10
    cache.put("e", 4)  # one stale value goes to make room
    assert (len(cache), cache.stale_count) == (2, 2)
    for key in "fg":
        cache.put(key, 5)
    assert (len(cache), cache.stale_count) == (4, 0)
    cache.put("h", 6)  # no stale value left: the oldest fresh entry goes
    assert [cache.get(key) for key in "behfg"] == [None, 4, 6, 5, 5]
    assert len(cache) + cache.stale_count == 4


def test_the_cache_holds_at_most_its_size_across_expiries() -> None:
    cache: TTLCache[int] = TTLCache(100, 60.0)
    held = []
    for number in range(1000):
        cache.put(f"user:{number}", number)
        if number % 150 == 149:
            cache.expire()
        held.append(len(cache) + cache.stale_count)
    assert max(held) == 100
    assert held[-1] == 100
