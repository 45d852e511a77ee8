"""The memory store drops expired keys a few at a time, as new keys arrive, and nothing live.

Every test runs on a fake clock. A key expires ``reset_after`` seconds after its last hit, and
is filed under a later time: the next multiple of a power of two seconds that is more than an
eighth of its time to live (a key living 4 s is filed at the next whole second). The inserts
that come once that time has passed drop it, ``EXPIRE_PER_INSERT`` keys per insert.
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

SHORT = Limit(1, 4, "gcra")  # a key hit at T0 + 0.25 expires at T0 + 4.25, filed for T0 + 5
LONG = Limit(1, 3600, "gcra")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0 + 0.25)


def filed_keys(store: MemoryStore) -> int:
    """How many keys the store has filed for expiry; each kept key exactly once."""
    filed = [slot for keys in store._filed.values() for slot in keys] + list(store._due)
    assert sorted(filed) == sorted(store._entries)
    for slot, entry in store._entries.items():
        assert slot in entry[2]
    return len(filed)


def test_inserts_drop_expired_keys_a_few_at_a_time(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(100):
        store.apply(f"short:{number}", SHORT)
    clock.advance(4.75)
    batches = -(-100 // EXPIRE_PER_INSERT)  # inserts needed to look at the 100 expired keys
    for number in range(batches - 1):
        store.apply(f"long:{number}", LONG)
    assert len(store) == (batches - 1) + 100 - (batches - 1) * EXPIRE_PER_INSERT
    store.apply("last", LONG)
    assert len(store) == batches  # the long keys only
    assert filed_keys(store) == batches


def test_keys_are_not_dropped_before_their_filing_time(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(10):
        store.apply(f"short:{number}", SHORT)
    clock.advance(4.5)  # expired, but filed for 4.75 s after the hit
    store.apply("new", LONG)
    assert len(store) == 11
    clock.advance(0.25)
    store.apply("newer", LONG)
    assert len(store) == 12 - EXPIRE_PER_INSERT


def test_a_live_key_ahead_in_lru_order_does_not_hold_back_the_expired(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    store.apply("old", LONG)  # the least recently used key, and live for an hour
    for number in range(40):
        store.apply(f"short:{number}", SHORT)
    clock.advance(5.0)
    for number in range(5):
        store.apply(f"long:{number}", LONG)
    assert len(store) == 6
    assert not store.apply("old", LONG).allowed  # kept, with its state


def test_a_key_hit_since_it_was_filed_is_kept_with_its_state(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    bucket = Limit(4, 4, "token_bucket")  # a token a second
    store.apply("busy", bucket, 4)  # empty: full again at 4.25, filed for 5
    clock.advance(3.0)
    store.apply("busy", bucket, 2)  # one token left: full again at 6.25
    clock.advance(1.75)  # at its filing time, 5
    store.apply("new", LONG)  # looks at "busy", live: files it again, LINGER (2 s) on: for 7
    assert len(store) == 2
    assert store.apply("busy", bucket, 0).remaining == 2  # 1 left + 1.75 s of refill
    clock.advance(1.25)  # full again at 6.25, but not looked at before 7
    store.apply("newer", LONG)
    assert len(store) == 3
    clock.advance(0.75)
    store.apply("newest", LONG)
    assert len(store) == 3  # "busy" is full again: dropped
    assert filed_keys(store) == 3


def test_a_key_of_a_fast_limit_lingers_so_a_busy_key_is_not_made_anew_each_hit(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock)
    fast = Limit(1_000_000, 1, "gcra")  # free again a microsecond after each hit
    store.apply("busy", fast)
    for number in range(15):
        clock.advance(0.1)  # expired since its last hit
        store.apply(f"new:{number}", LONG)  # inserts look at what is due
        assert ("gcra:1000000/1", "busy") in store._entries  # kept: it is hit again below
        store.apply("busy", fast)
    clock.advance(LINGER)
    store.apply("later", LONG)
    store.apply("later2", LONG)
    assert ("gcra:1000000/1", "busy") not in store._entries  # idle and free: dropped


def test_size_stays_bounded_under_a_stream_of_new_keys(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    step = 1 / 64
    most = 0
    for number in range(20_000):
        store.apply(f"client:{number}", SHORT)
        clock.advance(step)
        most = max(most, len(store))
    # A key lives 4 s (256 steps) and is filed at the next whole second, then dropped by the
    # inserts that follow, 8 each: never more than 5 s of keys plus one second's backlog.
    assert 4 / step <= most <= 6 / step
    assert filed_keys(store) == len(store)


def test_evicted_and_reset_keys_leave_no_trace(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock, max_keys=10)
    for number in range(30):
        store.apply(f"short:{number}", SHORT)
    store.reset("short:29", SHORT)
    store.reset("short:29", SHORT)  # twice: nothing more to forget
    assert len(store) == 9
    assert filed_keys(store) == 9
    clock.advance(5.0)
    store.apply("new", LONG)
    store.apply("newer", LONG)
    assert len(store) == 2
    assert filed_keys(store) == 2


def test_sweep_drops_every_expired_key_at_once(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(50):
        store.apply(f"short:{number}", SHORT)
    store.apply("long", LONG)
    clock.advance(4.0)
    assert store.sweep() == 50
    assert filed_keys(store) == 1
    store.apply("new", LONG)  # the filing times of the swept keys have nothing left
    assert len(store) == 2


def test_clear_forgets_the_filing_too(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    for number in range(20):
        store.apply(f"short:{number}", SHORT)
    store.clear()
    clock.advance(5.0)
    store.apply("new", SHORT)
    assert len(store) == 1
    assert filed_keys(store) == 1


LIMITS = [
    Limit(2, 1, "gcra"),
    Limit(3, 2, "token_bucket"),
    Limit(2, 1, "fixed_window"),
    Limit(3, 2, "sliding_counter"),
    Limit(2, 3, "sliding_log"),
    Limit(4, 2, "bucketed_window", granularity=0.5),
    Limit(2, 1, "leaky_bucket"),
    Limit(2, 60, "gcra"),
]

operations = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.integers(0, len(LIMITS) - 1),
        st.integers(0, 3),  # cost (0 looks)
        st.sampled_from([0.0, 0.0, 0.0625, 0.25, 0.5, 1.0, 2.0, 4.0]),  # then advance
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
        store.apply(f"fresh:{fresh}", LONG)  # an insert: it drops what has expired
        clock.advance(advance)
    filed_keys(store)
