"""Every algorithm's Lua twin decides exactly as its Python ``step``, bit for bit.

Each example runs one sequence of hits through the Python ``step`` and through the Redis scripts
with the same explicit ``now`` on a fresh key, once through each script a single hit can take
(``RedisStore.apply``: the algorithm's single-hit script; ``apply_many`` of one hit: the batch
script's dispatch), and compares every field
of every decision, the floats by their exact bits (no tolerance: the twins perform the same IEEE
operations in the same order), and the state stored after every hit with the Python state.

The reference threads the Python state the way the Redis script stores it: a hit of cost 0 (a
look) and a denied hit write nothing, so the state only changes on an allowed hit of non-zero
cost; and the step runs on a copy, as the sliding log prunes its deque in place even when it
denies. Batches (``apply_many``, with and without ``all_or_nothing``) are checked the same way.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.algorithms.fixed_window import window
from ratekeeper.decision import Decision
from ratekeeper.keys import state_key
from ratekeeper.limit import CALENDAR_PERIODS, Limit
from ratekeeper.stores.redis import RedisStore
from tests.servers import RedisServer

T0 = 1_700_000_000.0
PREFIX = "parity"
PERIODS = (0.1, 1.0, 7.5, 60.0, 3600.0)
#: Granularities of the bucketed window, as fractions of its period (None: the default 1/60).
FRACTIONS = (None, 1.0, 0.5, 0.3, 0.1, 1 / 7, 0.01)
COSTS = (0, 1, 1, 1, 1, 2, 3, 4, 5)
RELEASES = (-1, -1, -2, -5)
#: Kinds of time step, weighted by repetition.
STEPS = ("zero",) * 3 + ("small",) * 6 + ("grid",) * 3 + ("ulp", "jump")

#: The algorithms whose state is a Redis list.
LISTS = (Algorithm.SLIDING_LOG, Algorithm.CONCURRENCY)

Hit = tuple[float, int]
_keys = itertools.count()


@pytest.fixture(scope="module")
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def store(client: redis.Redis) -> RedisStore:
    return RedisStore(client, prefix=PREFIX)


def fresh_key() -> str:
    return f"k{next(_keys)}"


# --- Strategies ------------------------------------------------------------------------------

amounts = st.integers(1, 20)
periods = st.sampled_from(PERIODS)
bursts = st.none() | st.integers(1, 20)


def limits(algorithm: Algorithm) -> st.SearchStrategy[Limit]:
    """Limits of ``algorithm`` with small amounts and every parameter it takes."""
    if algorithm is Algorithm.FIXED_WINDOW:
        plain = st.builds(Limit, amounts, periods, st.just(algorithm))
        calendar = st.builds(
            lambda amount, period: Limit(amount, period, algorithm, calendar=True),
            amounts,
            st.sampled_from(sorted(CALENDAR_PERIODS)),
        )
        return plain | calendar
    if algorithm is Algorithm.BUCKETED_WINDOW:
        return st.builds(
            lambda amount, period, fraction: Limit(
                amount,
                period,
                algorithm,
                granularity=None if fraction is None else period * fraction,
            ),
            amounts,
            periods,
            st.sampled_from(FRACTIONS),
        )
    if algorithm is Algorithm.TOKEN_BUCKET:
        return st.builds(
            lambda amount, period, burst, partial: Limit(
                amount, period, algorithm, burst=burst, partial=partial
            ),
            amounts,
            periods,
            bursts,
            st.booleans(),
        )
    if algorithm in (Algorithm.GCRA, Algorithm.LEAKY_BUCKET, Algorithm.LEAKY_SHAPER):
        return st.builds(
            lambda amount, period, burst: Limit(amount, period, algorithm, burst=burst),
            amounts,
            periods,
            bursts,
        )
    return st.builds(Limit, amounts, periods, st.just(algorithm))


@st.composite
def timelines(draw: st.DrawFn, limit: Limit) -> list[Hit]:
    """Hits from an epoch-sized start: zero steps, steps of the order of the limit's interval
    (some exactly on its grid), a few steps of one ulp, occasional jumps of several periods and,
    in one example in three, steps back."""
    interval = limit.period / limit.capacity
    now = T0 + draw(st.floats(0, 1e7, allow_nan=False, allow_infinity=False))
    if draw(st.booleans()):  # start on a window edge
        now = window(now, limit)[0]
    kinds = STEPS + ("back",) * 2 if draw(st.integers(0, 2)) == 0 else STEPS
    costs = COSTS + RELEASES if limit.algorithm is Algorithm.CONCURRENCY else COSTS
    hits = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(kinds))
        if kind == "small":
            now += draw(st.floats(0, 3)) * interval
        elif kind == "grid":
            now += draw(st.integers(1, 4)) * interval
        elif kind == "ulp":
            now += draw(st.integers(1, 3)) * math.ulp(now)
        elif kind == "jump":
            now += draw(st.floats(1, 20)) * limit.period
        elif kind == "back":
            now -= draw(st.floats(0, 3)) * interval
        hits.append((now, draw(st.sampled_from(costs))))
    return hits


# --- Running both sides ----------------------------------------------------------------------


def bits(decision: Decision) -> tuple[Any, ...]:
    """The decision's fields, floats by their exact bits."""
    allowed, limit, remaining, reset_after, retry_after, delay, granted, _ = decision
    return (
        bool(allowed),
        int(limit),
        int(remaining),
        float(reset_after).hex(),
        float(retry_after).hex(),
        float(delay).hex(),
        int(granted),
    )


def python_run(limit: Limit, hits: list[Hit]) -> Iterator[tuple[Decision, Any]]:
    """The Python step's decision for each hit, with the state kept after it."""
    state: Any = None
    for now, cost in hits:
        new_state, decision = limit.step(copy.copy(state), now, cost, limit)
        if decision.allowed and cost:
            state = new_state
        yield decision, state


def flat(state: Any, algorithm: Algorithm) -> list[float] | None:
    """A Python state as the numbers the script stores (an empty list is no key)."""
    if algorithm in LISTS:
        return [] if state is None else list(state)
    if state is None:
        return None
    if algorithm is Algorithm.BUCKETED_WINDOW:
        return [number for bucket in state[0] for number in bucket]
    return list(state)


def stored(client: redis.Redis, name: str, algorithm: Algorithm) -> list[float] | None:
    """The numbers the script stored under ``name``."""
    if algorithm in LISTS:
        return [float(word) for word in client.lrange(name, 0, -1)]
    raw = client.get(name)
    return None if raw is None else [float(word) for word in raw.split()]


def single(store: RedisStore, key: str, limit: Limit, cost: int, now: float) -> Decision:
    """A hit through the algorithm's single-hit script."""
    return store.apply(key, limit, cost, now)


def batched(store: RedisStore, key: str, limit: Limit, cost: int, now: float) -> Decision:
    """A hit through the batch script, as a batch of one."""
    return store.apply_many([(key, limit, cost)], now=now)[0]


def assert_parity(client: redis.Redis, store: RedisStore, limit: Limit, hits: list[Hit]) -> None:
    """Same decisions, bit for bit, and the same state stored after every hit, through either
    script."""
    for path in (single, batched):
        key = fresh_key()
        name = state_key(limit, key, PREFIX)
        algorithm = limit.algorithm
        for i, ((now, cost), (want, state)) in enumerate(
            zip(hits, python_run(limit, hits), strict=True)
        ):
            got = path(store, key, limit, cost, now)
            where = f"{path.__name__}: {limit!r}, hit {i} of {hits[: i + 1]}"
            assert bits(got) == bits(want), where
            assert stored(client, name, algorithm) == flat(state, algorithm), where


@pytest.mark.parametrize("algorithm", list(Algorithm), ids=str)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_lua_decides_as_python(
    client: redis.Redis, store: RedisStore, algorithm: Algorithm, data: st.DataObject
) -> None:
    limit = data.draw(limits(algorithm), label="limit")
    hits = data.draw(timelines(limit), label="hits")
    assert_parity(client, store, limit, hits)


def python_batch(
    states: dict[tuple[str, str], Any], batch: list[tuple[str, Limit, int]], now: float, whole: bool
) -> list[Decision]:
    """``apply_many`` on the Python steps: hits in order, each seeing the earlier ones; with
    ``all_or_nothing`` (``whole``), nothing is kept and nothing granted unless all are allowed."""
    pending = dict(states)
    decisions = []
    for key, limit, cost in batch:
        slot = (key, limit.id)
        new_state, decision = limit.step(copy.copy(pending.get(slot)), now, cost, limit)
        if decision.allowed and cost:
            pending[slot] = new_state
        decisions.append(decision)
    if whole and not all(d.allowed for d in decisions):
        return [d._replace(granted=0) if d.allowed else d for d in decisions]
    states.update(pending)
    return decisions


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_batches_decide_as_python(store: RedisStore, data: st.DataObject) -> None:
    """Batches, with and without all_or_nothing, over two identities and one or two limits,
    the same key often twice in a batch."""
    algorithms = data.draw(
        st.lists(st.sampled_from(list(Algorithm)), min_size=1, max_size=2, unique=True)
    )
    chosen = [data.draw(limits(algorithm)) for algorithm in algorithms]
    keys = [fresh_key(), fresh_key()]
    step = min(limit.period / limit.capacity for limit in chosen)
    now = T0 + data.draw(st.floats(0, 1e7))
    states: dict[tuple[str, str], Any] = {}
    for _ in range(data.draw(st.integers(1, 8))):
        now += data.draw(st.floats(0, 2)) * step
        batch = []
        for _ in range(data.draw(st.integers(1, 5))):
            limit = data.draw(st.sampled_from(chosen))
            costs = COSTS + RELEASES if limit.algorithm is Algorithm.CONCURRENCY else COSTS
            batch.append(
                (data.draw(st.sampled_from(keys)), limit, data.draw(st.sampled_from(costs)))
            )
        whole = data.draw(st.booleans())
        expected = [bits(d) for d in python_batch(states, batch, now, whole)]
        actual = [bits(d) for d in store.apply_many(batch, all_or_nothing=whole, now=now)]
        assert actual == expected, (batch, now, whole)


def test_all_or_nothing_sees_a_key_hit_twice(client: redis.Redis, store: RedisStore) -> None:
    """The second hit on a key sees the first, so the batch is refused and nothing is kept."""
    for algorithm in Algorithm:
        limit = Limit(1, 60, algorithm)
        key = fresh_key()
        name = state_key(limit, key, PREFIX)
        store.apply(key, limit, 0, T0)
        decisions = store.apply_many(
            [(key, limit, 1), (key, limit, 1)], all_or_nothing=True, now=T0
        )
        assert [(d.allowed, d.granted) for d in decisions] == [(True, 0), (False, 0)], algorithm
        assert not client.exists(name), algorithm
        store.apply(key, limit, 1, T0)
        dump, ttl = client.dump(name), client.pttl(name)
        decisions = store.apply_many(
            [(key, Limit(5, 60), 1), (key, limit, 1)], all_or_nothing=True, now=T0 + 0.5
        )
        assert [(d.allowed, d.granted) for d in decisions] == [(True, 0), (False, 0)], algorithm
        assert client.dump(name) == dump, algorithm
        assert 0 < client.pttl(name) <= ttl, algorithm
        assert store.apply(key, Limit(5, 60), 0, T0 + 0.5).remaining == 5, algorithm


# --- Table tests -----------------------------------------------------------------------------

#: One limit per algorithm and parameter worth a table row.
LIMITS = [
    Limit(3, 10, "fixed_window"),
    Limit(3, 86_400, "fixed_window", calendar=True),
    Limit(3, 604_800, "fixed_window", calendar=True),
    Limit(3, 2_592_000, "fixed_window", calendar=True),
    Limit(3, 31_536_000, "fixed_window", calendar=True),
    Limit(3, 10, "sliding_log"),
    Limit(3, 10, "sliding_counter"),
    Limit(3, 10, "bucketed_window", granularity=3),
    Limit(3, 10, "token_bucket"),
    Limit(3, 10, "token_bucket", partial=True),
    Limit(3, 10, "leaky_bucket", burst=2),
    Limit(3, 10, "leaky_shaper"),
    Limit(3, 10, "gcra", burst=2),
    Limit(3, 10, "concurrency"),
]


def changes(client: redis.Redis) -> int:
    """Writes the server applied so far (every write command counts, even a same-value one)."""
    return int(client.info("persistence")["rdb_changes_since_last_save"])


@pytest.mark.parametrize("limit", LIMITS, ids=repr)
def test_every_key_written_has_a_ttl(client: redis.Redis, store: RedisStore, limit: Limit) -> None:
    key = fresh_key()
    name = state_key(limit, key, PREFIX)
    hits = [(T0, 1), (T0 + 0.5, 2), (T0 + 1, 1), (T0 + 0.25, 1), (T0 + 7, 1)]
    if limit.algorithm is Algorithm.CONCURRENCY:
        hits += [(T0 + 8, -1)]
    for now, cost in hits:
        decision = store.apply(key, limit, cost, now)
        if decision.allowed and decision.granted:
            assert client.exists(name), (now, cost)
            assert client.pttl(name) > 0, (now, cost)


def test_a_release_of_every_lease_deletes_the_key(client: redis.Redis, store: RedisStore) -> None:
    limit = Limit(3, 10, "concurrency")
    key = fresh_key()
    store.apply(key, limit, 2, T0)
    assert store.apply(key, limit, -5, T0 + 1).granted == -2
    assert not client.exists(state_key(limit, key, PREFIX))


@pytest.mark.parametrize("limit", LIMITS, ids=repr)
def test_a_look_writes_nothing(client: redis.Redis, store: RedisStore, limit: Limit) -> None:
    key = fresh_key()
    name = state_key(limit, key, PREFIX)
    before = changes(client)
    assert store.apply(key, limit, 0, T0).allowed
    assert changes(client) == before
    assert not client.exists(name)
    store.apply(key, limit, 2, T0)
    dump, before = client.dump(name), changes(client)
    for now in (T0, T0 + 0.5, T0 - 0.5, T0 + 5):
        assert store.apply(key, limit, 0, now).granted == 0
    assert changes(client) == before
    assert client.dump(name) == dump


@pytest.mark.parametrize("limit", LIMITS, ids=repr)
def test_a_denied_hit_writes_nothing(client: redis.Redis, store: RedisStore, limit: Limit) -> None:
    key = fresh_key()
    name = state_key(limit, key, PREFIX)
    if not limit.partial:  # a partial token bucket grants what it has
        before = changes(client)
        assert not store.apply(key, limit, 100, T0).allowed
        assert changes(client) == before
        assert not client.exists(name)
    for i in range(3):
        store.apply(key, limit, 1, T0 + i * 0.001)
    dump, before = client.dump(name), changes(client)
    for now, cost in [(T0 + 0.01, 1), (T0 + 0.01, 3), (T0 + 0.01, 100)]:
        assert not store.apply(key, limit, cost, now).allowed
    assert changes(client) == before
    assert client.dump(name) == dump


def _edges() -> list[float]:
    """Calendar edges where the UTC date arithmetic is easiest to get wrong: leap days, the
    turn of centuries, the start of the epoch, and the far future (Python's datetime stops at
    9999, so the year window of 9999 raises there)."""
    months = [
        (1970, 1), (1970, 3), (2000, 2), (2000, 3), (2023, 12), (2024, 1), (2024, 2),
        (2024, 3), (2100, 2), (2100, 3), (2400, 3), (9998, 12),
    ]  # fmt: skip
    return [datetime(year, month, 1, tzinfo=UTC).timestamp() for year, month in months]


@pytest.mark.parametrize("unit", ["day", "week", "month", "year"])
@pytest.mark.parametrize("edge", _edges())
def test_calendar_windows_match_at_the_edges(
    client: redis.Redis, store: RedisStore, unit: str, edge: float
) -> None:
    period = next(p for p, u in CALENDAR_PERIODS.items() if u == unit)
    limit = Limit(2, period, "fixed_window", calendar=True)
    # A fraction within half a microsecond of the next second rounds into it in
    # datetime.fromtimestamp; near an edge that moves the month or year.
    offsets = [0.0, 1e-7, -1e-7, 4e-7, -4e-7, 5e-7, -5e-7, 6e-7, -6e-7, 1e-3, -1e-3, -1.0]
    for offset in offsets:
        now = edge + offset
        if now < 0:
            continue
        for ulps in (-1, 0, 1):
            moment = now + ulps * math.ulp(now)
            hits = [(moment, 1), (moment, 1), (moment, 1), (moment, 0)]
            assert_parity(client, store, limit, hits)


@pytest.mark.parametrize("algorithm", LISTS, ids=str)
def test_lists_take_costs_above_one_rpush(
    client: redis.Redis, store: RedisStore, algorithm: Algorithm
) -> None:
    """Costs of more than 512 entries go in several RPUSH; steps back insert many copies."""
    limit = Limit(1_500, 60, algorithm)
    hits = [(T0, 1_100), (T0 + 1, 100), (T0 + 0.5, 150), (T0 + 2, 200), (T0 + 3, 1), (T0, 0)]
    hits += [(T0 + 60.75, 1_200), (T0 + 61.5, 5)]
    if algorithm is Algorithm.CONCURRENCY:
        hits += [(T0 + 62, -700), (T0 + 61, 10), (T0 + 62, -2_000)]
    assert_parity(client, store, limit, hits)
