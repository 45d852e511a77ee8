"""The store's side of a leased limit: ``exchange``, exact sequences under an explicit clock,
the bound the bucket algorithms keep while units wait in slices, and its Lua twin bit for bit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.leases import Records, exchange
from ratekeeper.core.errors import InvalidInputError, InvalidLimitError
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import spec
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.stores.redis import RedisStore
from tests.servers import RedisServer

T0 = 1_700_000_000.0
LEASABLE = [algorithm for algorithm in Algorithm if not spec(algorithm).no_lease]
HOLDING = [algorithm for algorithm in LEASABLE if spec(algorithm).hold is not None]
_keys = itertools.count()


def test_a_fixed_window_slice_is_counted_before_it_is_granted_and_given_back_after() -> None:
    limit = Limit(10, 60, sync="leased")
    now = T0 - T0 % 60 + 1
    state, records, taken = exchange(None, {}, now, limit, holder="a", want=4, ttl=1.0)
    assert (taken.granted, taken.decision.remaining, state) == (4, 6, (now - 1, 4))
    assert records == {}  # a window's count needs no record of who holds what
    # 6 left: a slice of 4 would leave less than 4 for the others, so half of 6 is given.
    state, _, taken = exchange(state, {}, now + 1, limit, holder="b", want=4, ttl=1.0)
    assert (taken.granted, taken.decision.remaining, state[1]) == (3, 3, 7)
    # "a" used 1 of its 4: 3 go back, and it asks for nothing more.
    state, _, taken = exchange(
        state, {}, now + 2, limit, holder="a", want=0, ttl=1.0, returned=3, taken_at=now
    )
    assert (taken.granted, taken.decision.allowed, state[1]) == (0, True, 4)


def test_a_spent_window_refuses_with_its_end_and_a_late_return_is_forgotten() -> None:
    limit = Limit(5, 10, sync="leased")
    start = T0 - T0 % 10
    state, _, taken = exchange(None, {}, start + 2, limit, holder="a", want=5, ttl=1.0)
    assert taken.granted == 3  # half of 5, rounded up: the budget is low
    state, _, taken = exchange(state, {}, start + 3, limit, holder="b", want=5, ttl=1.0)
    assert taken.granted == 1
    state, _, taken = exchange(state, {}, start + 4, limit, holder="c", want=5, ttl=1.0)
    assert taken.granted == 1
    state, _, taken = exchange(state, {}, start + 4, limit, holder="c", want=1, ttl=1.0)
    assert (taken.granted, taken.decision.allowed) == (0, False)
    assert taken.decision.retry_after == pytest.approx(6.0)
    # Units given back after their window ended go to that window's count, which the next
    # window does not read: they give the next window nothing.
    later, _, taken = exchange(
        state, {}, start + 11, limit, holder="a", want=0, ttl=1.0, returned=2, taken_at=start + 2
    )
    assert later == (start, 3) and taken.decision.remaining == 5
    _, _, taken = exchange(later, {}, start + 11, limit, holder="a", want=9, ttl=1.0)
    assert taken.granted == 3  # half of the new window's 5


def test_a_token_bucket_does_not_refill_what_the_slices_hold() -> None:
    limit = Limit(10, 10, "token_bucket", sync="leased")  # 1 token a second, 10 at most
    state, records, taken = exchange(None, {}, T0, limit, holder="a", want=4, ttl=5.0)
    assert (taken.granted, records) == (4, {"a": (4, T0 + 5.0)})
    assert state == (6.0, T0)
    # 3 s later the bucket would hold 9; "a" still holds 4, so it holds at most 10 - 4 = 6.
    state, records, taken = exchange(state, records, T0 + 3, limit, holder="b", want=2, ttl=5.0)
    assert state == (4.0, T0 + 3) and taken.granted == 2
    assert records == {"a": (4, T0 + 5.0), "b": (2, T0 + 8.0)}
    # "a" gives back 1 unused. Until now both slices held 6: the bucket stayed at 4. Then "a"'s
    # record goes and the bucket takes its token back, under the cap "b" leaves (10 - 2).
    state, records, taken = exchange(
        state, records, T0 + 4, limit, holder="a", want=0, ttl=5.0, returned=1, taken_at=T0
    )
    assert records == {"b": (2, T0 + 8.0)} and state == (5.0, T0 + 4)
    # "b" dies; once its record has expired, nothing holds the bucket back any more.
    state, records, taken = exchange(state, records, T0 + 9, limit, holder="c", want=1, ttl=5.0)
    assert "b" not in records and taken.granted == 1
    assert state == (7.0, T0 + 9)  # refilled to 8, capped by everything held until now: 10 - 2


@pytest.mark.parametrize("algorithm", HOLDING)
def test_nothing_held_leaves_the_state_as_it_is(algorithm: Algorithm) -> None:
    limit = Limit(10, 10, algorithm, sync="leased")
    hold = spec(algorithm).hold
    assert hold is not None
    state, _ = limit.step(None, T0, 3, limit)
    assert hold(state, T0 + 1, 0, limit) is state
    assert hold(None, T0 + 1, 0, limit) is None


@pytest.mark.parametrize(
    "algorithm", [a for a in Algorithm if spec(a).no_lease], ids=lambda a: a.value
)
def test_an_algorithm_that_cannot_lease_says_why(algorithm: Algorithm) -> None:
    with pytest.raises(InvalidLimitError, match=f"does not apply to {algorithm.value}: .+"):
        Limit(10, 10, algorithm, sync="leased")


def test_bad_lease_values_are_refused_before_anything_is_counted() -> None:
    store = MemoryStore()
    limit = Limit(10, 10, sync="leased")
    for want in (-1, 1.5, float("nan"), True, "3"):
        with pytest.raises(InvalidInputError):
            store.lease("k", limit, want, holder="a", ttl=1.0)  # type: ignore[arg-type]
    for ttl in (0, -1, float("nan"), float("inf"), 86_401, "1"):
        with pytest.raises(InvalidInputError, match="lease lifetime"):
            store.lease("k", limit, 1, holder="a", ttl=ttl)  # type: ignore[arg-type]
    for holder in ("", "x" * 201, 3):
        with pytest.raises(InvalidInputError, match="lease holder"):
            store.lease("k", limit, 1, holder=holder, ttl=1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidLimitError, match="does not lease"):
        store.lease("k", Limit(10, 10, "sliding_log"), 1, holder="a", ttl=1.0)
    with pytest.raises(InvalidLimitError):
        Limit(10, 10, "token_bucket", partial=True, sync="leased")
    with pytest.raises(InvalidLimitError, match="sync must be 'exact' or 'leased'"):
        Limit(10, 10, sync="lazy")
    assert len(store) == 0


def test_sync_is_not_part_of_the_counters() -> None:
    exact, leased = Limit(10, 60), Limit(10, 60, sync="leased")
    assert exact.id == leased.id and exact != leased and hash(exact) == hash(leased)
    assert repr(leased) == "Limit(10, 60, 'fixed_window', sync='leased')"
    assert Limit(10, 60, sync="leased") == leased


# -- the bound: what slices hold never lets a bucket pass its limit ------------------------------

operations = st.lists(
    st.tuples(
        st.integers(0, 2),  # the holder
        st.floats(0.0, 3.0),  # seconds since the last operation
        st.integers(0, 12),  # units asked for; 0 grants from the slice instead
        st.integers(0, 12),  # units to grant from the slice when asking for none
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(algorithm=st.sampled_from(HOLDING), ops=operations)
def test_a_bucket_and_its_slices_admit_no_more_than_the_exact_limit(
    algorithm: Algorithm, ops: list[tuple[int, float, int, int]]
) -> None:
    """Three holders take slices and grant from them before their ends, in any order: over any
    span, the units granted stay within the burst plus the refill of the span."""
    limit = Limit(10, 10, algorithm, burst=8, sync="leased")
    ttl = 2.0
    state: object = None
    records: Records = {}
    now = T0
    slices = dict.fromkeys(range(3), (0, 0.0, 0.0))  # holder -> (left, taken_at, until)
    grants: list[tuple[float, int]] = []
    for holder, wait, want, spend in ops:
        now += wait
        left, taken_at, until = slices[holder]
        if want:
            state, records, taken = exchange(
                state,
                records,
                now,
                limit,
                holder=str(holder),
                want=want,
                ttl=ttl,
                returned=left,
                taken_at=taken_at if left else None,
            )
            slices[holder] = (taken.granted, taken.now, now + ttl)
        elif left and now < until:
            used = min(left, spend)
            grants.append((now, used))
            slices[holder] = (left - used, taken_at, until)
    for i, (start, _) in enumerate(grants):
        total = 0
        for end, used in grants[i:]:
            total += used
            assert total <= limit.capacity + limit.rate * (end - start) + 1e-6


# -- the Lua twin ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_store(redis_server: RedisServer) -> Iterator[RedisStore]:
    store = RedisStore(redis.Redis.from_url(redis_server.url), prefix="lease-parity")
    yield store
    store.close()


exchanges = st.lists(
    st.tuples(
        st.integers(0, 2),  # the holder
        st.sampled_from([0.0, 0.001, 0.1, 0.4, 1.3, 7.0]),  # seconds since the last
        st.integers(0, 9),  # units wanted
        st.integers(0, 4),  # units given back, when the holder has a slice
        st.sampled_from([0.5, 2.0]),  # the slice's lifetime
        st.integers(0, 3),  # an exact hit's cost in between (0: none)
        st.integers(1, 3),  # the fewest units worth taking
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(algorithm=st.sampled_from(LEASABLE), ops=exchanges)
def test_the_lua_exchange_decides_as_the_python_one(
    redis_store: RedisStore,
    algorithm: Algorithm,
    ops: list[tuple[int, float, int, int, float, int, int]],
) -> None:
    limit = Limit(20, 10, algorithm, sync="leased")
    memory = MemoryStore()
    key = f"k{next(_keys)}"
    now = T0 + 0.25
    taken_at: dict[int, float] = {}
    for holder, wait, want, returned, ttl, cost, need in ops:
        now += wait
        given_back = returned if holder in taken_at else 0
        options = {
            "holder": f"h{holder}",
            "ttl": ttl,
            "returned": given_back,
            "taken_at": taken_at.get(holder),
            "need": min(need, max(want, 1)),
            "now": now,
        }
        expected = memory.lease(key, limit, want, **options)  # type: ignore[arg-type]
        got = redis_store.lease(key, limit, want, **options)  # type: ignore[arg-type]
        assert got == expected
        assert all(
            math.copysign(1, a) == math.copysign(1, b)
            for a, b in zip(got.decision[3:6], expected.decision[3:6], strict=True)
        )
        if expected.granted:
            taken_at[holder] = expected.now
        if cost:
            assert redis_store.apply(key, limit, cost, now) == memory.apply(key, limit, cost, now)


def test_records_of_a_window_algorithm_are_never_written(redis_store: RedisStore) -> None:
    limit = Limit(20, 10, sync="leased")
    redis_store.lease("windowed", limit, 5, holder="a", ttl=1.0, now=T0)
    keys = {key.decode() for key in redis_store.client.scan_iter("lease-parity:*windowed*")}
    assert len(keys) == 1 and not next(iter(keys)).endswith(":s")
