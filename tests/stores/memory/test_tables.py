"""The memory store drops expired keys a few at a time, as new keys arrive, and nothing live.

Every test runs on a fake clock. The keys of each limit sit in a table of their own, least
recently used first. A key has expired once looks at it (steps of cost 0) find its limit fully
available again, and ``LINGER`` seconds before too. Each new key looks at up to
``EXPIRE_PER_INSERT`` keys at the front of its own table, and as many at the front of one other
table in turn, dropping the expired ones; a key still in use at the front stops the look, and
its table is not looked at again before that key could go.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper import Limit, MemoryStore
from ratekeeper.stores.memory import EXPIRE_PER_INSERT, LINGER
from ratekeeper.testing import FakeClock
from tests.conftest import T0

SHORT = Limit(1, 4, "gcra")  # a key hit at T0 + 0.25 is free again at T0 + 4.25
LONG = Limit(1, 3600, "gcra")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0 + 0.25)


def kept(store: MemoryStore) -> int:
    """How many keys the store keeps, checked against its tables."""
    tables = store._tables
    assert sum(len(table) for table in tables.values()) == len(store)
    assert all(tables.values())  # an emptied table is dropped with its limit
    assert sorted(tables) == sorted(store._due)
    turns = [limit.id for limit, table in store._turns if tables.get(limit.id) is table]
    assert sorted(turns) == sorted(tables)  # each table has one turn; a dropped one's is stale
    assert all(state is not None for table in tables.values() for state in table.values())
    return len(store)


def counted(store: MemoryStore, key: str, limit: Limit) -> bool:
    """Whether ``key`` still holds a hit under ``limit`` (a look: it changes nothing)."""
    return store.apply(key, limit, 0).remaining < limit.amount


def test_inserts_drop_expired_keys_a_few_at_a_time(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(100):
        store.apply(f"old:{number}", SHORT)
    clock.advance(4.0 + LINGER)  # every one of them has been free for LINGER seconds
    inserts = -(-100 // EXPIRE_PER_INSERT)  # inserts needed to drop the 100 expired keys
    for number in range(inserts - 1):
        store.apply(f"new:{number}", SHORT)
        assert len(store) == 100 - (number + 1) * EXPIRE_PER_INSERT + number + 1
    store.apply("last", SHORT)  # drops the last 4, then stops at the live "new:0"
    assert kept(store) == inserts
    assert not counted(store, "old:0", SHORT)
    assert counted(store, "new:0", SHORT)


def test_a_live_key_at_the_front_holds_back_the_expired_only_until_it_is_free(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock)
    bucket = Limit(4, 4, "gcra")  # a hit frees up in 1 s; times below from the first hit
    store.apply("old", bucket, 4)  # the least recently used key, free again at 4 s
    for number in range(10):
        store.apply(f"short:{number}", bucket)  # each free again at 1 s
    clock.advance(1.0)
    store.apply("new", bucket)  # looks at "old" only: it may go at 4 s + LINGER
    assert kept(store) == 12
    clock.advance(2.5)
    store.apply("newer", bucket)  # at 3.5 s: no look
    assert kept(store) == 13
    clock.advance(2.5)  # 6 s: "old" has been free for LINGER seconds
    store.apply("newest", bucket)  # drops "old" and 7 short keys
    assert kept(store) == 14 - EXPIRE_PER_INSERT
    store.apply("last", bucket)  # drops the 3 short keys left and "new"; stops at "newer"
    assert kept(store) == 3
    assert list(store._tables[bucket.id]) == ["newer", "newest", "last"]


def test_the_keys_of_a_limit_no_longer_used_are_dropped_by_the_others(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(20):
        store.apply(f"short:{number}", SHORT)
    clock.advance(4.0 + LINGER)
    for number, left in enumerate([12, 4, 0]):  # each insert of a LONG key looks at SHORT's
        store.apply(f"long:{number}", LONG)
        assert kept(store) == left + number + 1
    assert list(store._tables) == [LONG.id]


def test_a_key_hit_since_it_was_first_is_kept_with_its_state(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    bucket = Limit(4, 4, "token_bucket")  # a token a second; times below from the first hit
    store.apply("busy", bucket, 4)  # empty: full again at 4 s
    store.apply("idle", bucket, 1)  # full at 1 s; looks at "busy": it may go at 4 s + LINGER
    clock.advance(3.0)
    store.apply("busy", bucket, 2)  # 1 token left, full again at 6 s; "idle" is now first
    store.apply("new", bucket)  # at 3 s: no look
    assert kept(store) == 3
    clock.advance(3.0)
    store.apply("newer", bucket)  # at 6 s: drops "idle", stops at "busy": it may go at 8 s
    assert list(store._tables[bucket.id]) == ["busy", "new", "newer"]
    assert store._tables[bucket.id]["busy"] == (1.0, clock() - 3.0)
    clock.advance(2.0)
    store.apply("newest", bucket)  # at 8 s: drops "busy" and "new"; "newer" is full since 7 s
    assert list(store._tables[bucket.id]) == ["newer", "newest"]
    assert kept(store) == 2


def test_a_busy_key_of_a_fast_limit_is_updated_in_place(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    fast = Limit(1_000_000, 1, "gcra")  # free again a microsecond after each hit
    store.apply("busy", fast)
    for number in range(15):
        clock.advance(0.1)  # free since its last hit, for less than LINGER
        store.apply(f"new:{number}", fast)  # looks at the first keys: none free for LINGER
        assert len(store) == number + 2  # "busy" is kept, and every new key
        store.apply("busy", fast)  # updated in place
    clock.advance(LINGER + 0.1)  # every key has been free for LINGER seconds
    store.apply("later", fast)  # drops 8 of them
    store.apply("later2", fast)  # and the other 8, "busy" the last
    assert list(store._tables[fast.id]) == ["later", "later2"]


def test_size_stays_bounded_under_a_stream_of_new_keys(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    step = 1 / 64
    most = 0
    for number in range(20_000):
        store.apply(f"client:{number}", SHORT)
        clock.advance(step)
        most = max(most, len(store))
    # A key is free 4 s after its hit, and dropped LINGER seconds later, by the new key then.
    assert (4 + LINGER) / step <= most <= (4 + LINGER) / step + 1
    assert kept(store) == most


def test_evicted_and_reset_keys_leave_no_trace(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock, max_keys=10)
    for number in range(30):
        store.apply(f"short:{number}", SHORT)
    store.reset("short:29", SHORT)
    store.reset("short:29", SHORT)  # twice: nothing more to forget
    assert kept(store) == 9
    clock.advance(4.0 + LINGER)
    store.apply("new", LONG)  # looks at SHORT's: drops 8
    store.apply("newer", LONG)  # drops the last one, and SHORT's table with it
    assert kept(store) == 2
    store.reset("new", LONG)
    store.reset("newer", LONG)
    assert kept(store) == 0
    assert not store._tables


def test_a_limit_below_its_share_evicts_from_the_limit_holding_the_most(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock, max_keys=10)
    other = Limit(1, 3600, "fixed_window")
    for number in range(9):
        store.apply(f"a:{number}", LONG)
    for number in range(10):
        store.apply(f"b:{number}", other)
        assert kept(store) == min(10, 10 + number)
    # "b" took keys from "a" until both held 5, then its own least recently used.
    assert [counted(store, f"a:{number}", LONG) for number in range(9)] == [False] * 4 + [True] * 5
    assert [counted(store, f"b:{number}", other) for number in range(10)] == [False] * 5 + [
        True
    ] * 5


def test_sweep_drops_every_expired_key_at_once(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(50):
        store.apply(f"short:{number}", SHORT)
    store.apply("long", LONG)
    clock.advance(4.0)
    assert store.sweep() == 50
    assert kept(store) == 1
    store.apply("new", LONG)
    assert kept(store) == 2


def test_clear_forgets_the_tables_too(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(20):
        store.apply(f"short:{number}", SHORT)
    store.clear()
    assert kept(store) == 0
    clock.advance(5.0)
    store.apply("new", SHORT)
    assert kept(store) == 1


LIMITS = [
    Limit(2, 1, "gcra"),
    Limit(3, 2, "token_bucket"),
    Limit(2, 1, "fixed_window"),
    Limit(3, 2, "sliding_counter"),
    Limit(2, 3, "sliding_log"),
    Limit(4, 2, "bucketed_window", granularity=0.5),
    Limit(2, 1, "leaky_bucket"),
    Limit(2, 1, "leaky_shaper"),
    Limit(2, 1, "concurrency"),
    Limit(2, 60, "gcra"),
]

operations = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.integers(0, len(LIMITS) - 1),
        st.integers(0, 3),  # cost (0 looks)
        st.sampled_from([0.0, 0.0, 0.0, 0.0625, 0.25, 0.5, 1.0, 2.0, 4.0]),  # then advance
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_expiry_never_changes_a_decision(script: list[tuple[str, int, int, float]]) -> None:
    """Decisions with expiry equal those of a store that keeps every state forever."""
    clock = FakeClock(1_700_000_000.0)
    store = MemoryStore(clock=clock)
    forever: dict[tuple[str, str], Any] = {}
    for fresh, (key, which, cost, advance) in enumerate(script):
        limit = LIMITS[which]
        slot = (limit.id, key)
        state, expected = limit.step(forever.get(slot), clock(), cost, limit)
        if cost and state is not None:
            forever[slot] = state
        assert store.apply(key, limit, cost) == expected
        store.apply(f"fresh:{fresh}", LIMITS[fresh % len(LIMITS)])  # drops what has expired
        clock.advance(advance)
    kept(store)


def test_limits_whose_keys_all_expire_leave_no_table_behind(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(200):
        store.apply("k", Limit(1, 1 + number % 20, "gcra"))  # 20 limits, a key each
        store.apply(f"long:{number}", LONG)  # each insert looks at one other table
        clock.advance(1.0)
    clock.advance(20.0 + LINGER)
    for number in range(40):
        store.apply(f"later:{number}", LONG)
    assert list(store._tables) == [LONG.id]
    assert kept(store) == 240
    assert len(store._turns) <= 20  # the turns of dropped tables go as they come


def test_many_small_limits_evict_from_the_one_holding_the_most(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock, max_keys=100)
    for number in range(100):
        store.apply(f"big:{number}", LONG)
    small = [Limit(1, 3601 + number, "gcra") for number in range(30)]
    for limit in small:
        store.apply("k", limit)  # each evicts the least recently used key of LONG
    assert kept(store) == 100
    assert len(store._tables[LONG.id]) == 70
    assert not counted(store, "big:29", LONG) and counted(store, "big:30", LONG)
    assert all(counted(store, "k", limit) for limit in small)
