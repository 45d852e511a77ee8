"""Every algorithm's Lua twin decides exactly as its Python ``step``, bit for bit.

Each example runs one sequence of hits through the Python ``step`` and through the Redis scripts
with the same explicit ``now`` on a fresh key, once through each script a single hit can take
(``RedisStore.apply``: the algorithm's single-hit script; ``apply_many`` of one hit: the batch
script's dispatch; a concurrency release, a negative cost to the Python step, goes through
``RedisStore.release`` both times), and compares every field of every decision, the floats by
their exact bits (no tolerance: the twins perform the same IEEE operations in the same order),
and the state stored after every hit with the Python state.

The reference threads the Python state the way the Redis script stores it: a hit of cost 0 (a
look) and a denied hit write nothing, so the state only changes on a hit that counted (its
``granted``: an allowed hit of non-zero cost, or a refused one under a limit with debt); and
the step runs on a copy, as the sliding log prunes its deque in place even when it denies. Half
the limits drawn have debt, where the algorithm can hold one. Batches (``apply_many``, with
and without ``all_or_nothing``, mixing a limit with its debt twin on the same counters) are
checked the same way, and so are the refund steps: the refund script against each module's
``refund``, inside random timelines, and a cluster batch over several slots (each slot's
part, then refunds) against the same two phases run on the Python steps.
"""

from __future__ import annotations

import copy
import itertools
import math
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from ratekeeper.algorithms import Algorithm, refund_function
from ratekeeper.algorithms.fixed_window import window
from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import CALENDAR_PERIODS, Limit, with_debt
from ratekeeper.core.store_keys import state_key
from ratekeeper.stores.redis import RedisStore
from ratekeeper.stores.redis.scripts import REFUND, arguments
from tests.servers import RedisServer
from tests.strategies import limits

T0 = 1_700_000_000.0
PREFIX = "parity"
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


@pytest.fixture(scope="module")
def split_store(client: redis.Redis) -> RedisStore:
    """A store that splits every batch by cluster slot, as on a cluster, on one server."""
    store = RedisStore(client, prefix=PREFIX)
    store.clustered = True
    return store


@pytest.fixture(scope="module")
def refunder(client: redis.Redis) -> Any:
    """The refund script, called as ``refunder(keys, argv)``."""
    return client.register_script(REFUND)


def fresh_key() -> str:
    return f"k{next(_keys)}"


# --- Strategies ------------------------------------------------------------------------------


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
        if decision.granted or cost < 0:  # a release drops the expired leases, if none else
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
    if raw is None:
        return None
    if algorithm is Algorithm.BUCKETED_WINDOW:
        return [float(word) for word in raw.split()]
    # Fixed-size states are packed little-endian doubles, 8 bytes each.
    return list(struct.unpack(f"<{len(raw) // 8}d", raw))


def released(store: RedisStore, key: str, limit: Limit, cost: int, now: float) -> Decision:
    """A release of ``-cost`` slots, its ``granted`` negative as the Python step reports it."""
    decision = store.release(key, limit, -cost, now)
    return decision._replace(granted=-decision.granted)


def single(store: RedisStore, key: str, limit: Limit, cost: int, now: float) -> Decision:
    """A hit through the algorithm's single-hit script (a release through ``release``)."""
    if cost < 0:
        return released(store, key, limit, cost, now)
    return store.apply(key, limit, cost, now)


def batched(store: RedisStore, key: str, limit: Limit, cost: int, now: float) -> Decision:
    """A hit through the batch script, as a batch of one (a release through ``release``)."""
    if cost < 0:
        return released(store, key, limit, cost, now)
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
    limit = data.draw(limits(algorithm, debt=True), label="limit")
    hits = data.draw(timelines(limit), label="hits")
    assert_parity(client, store, limit, hits)


def python_batch(
    states: dict[tuple[str, str], Any], batch: list[tuple[str, Limit, int]], now: float, whole: bool
) -> list[Decision]:
    """``apply_many`` on the Python steps: hits in order, each seeing the earlier ones; with
    ``all_or_nothing`` (``whole``), nothing is kept and nothing granted unless all are allowed,
    but for the hits under a limit with debt, then run again alone, in order."""
    pending = dict(states)
    decisions = []
    for key, limit, cost in batch:
        slot = (key, limit.id)
        new_state, decision = limit.step(copy.copy(pending.get(slot)), now, cost, limit)
        if decision.granted or cost < 0:
            pending[slot] = new_state
        decisions.append(decision)
    if whole and not all(d.allowed for d in decisions):
        refused = [d._replace(granted=0) if d.allowed else d for d in decisions]
        if all(limit.debt for _, limit, _ in batch):
            states.update(pending)
            return decisions
        for index, (key, limit, cost) in enumerate(batch):
            if limit.debt:
                refused[index] = python_batch(states, [(key, limit, cost)], now, False)[0]
        return refused
    states.update(pending)
    return decisions


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_batches_decide_as_python(store: RedisStore, data: st.DataObject) -> None:
    """Batches, with and without all_or_nothing, over two identities and one or two limits,
    the same key often twice in a batch."""
    chosen = chosen_limits(data)
    keys = [fresh_key(), fresh_key()]
    step = min(limit.period / limit.capacity for limit in chosen)
    now = T0 + data.draw(st.floats(0, 1e7))
    states: dict[tuple[str, str], Any] = {}
    for _ in range(data.draw(st.integers(1, 8))):
        now += data.draw(st.floats(0, 2)) * step
        batch = []
        for _ in range(data.draw(st.integers(1, 5))):
            limit = data.draw(st.sampled_from(chosen))
            batch.append(
                (data.draw(st.sampled_from(keys)), limit, data.draw(st.sampled_from(COSTS)))
            )
        whole = data.draw(st.booleans())
        expected = [bits(d) for d in python_batch(states, batch, now, whole)]
        actual = [bits(d) for d in store.apply_many(batch, all_or_nothing=whole, now=now)]
        assert actual == expected, (batch, now, whole)


def chosen_limits(data: st.DataObject) -> list[Limit]:
    """One or two limits of distinct algorithms, half of them with debt, and now and then the
    debt twin of the first beside it (the same counters, counted both ways in one batch)."""
    algorithms = data.draw(
        st.lists(st.sampled_from(list(Algorithm)), min_size=1, max_size=2, unique=True)
    )
    chosen = [data.draw(limits(algorithm, debt=True)) for algorithm in algorithms]
    first = chosen[0]
    params = {name: value for name, value in first._params().items() if name != "debt"}
    plain = Limit(first.amount, first.period, first.algorithm, **params)
    twin = plain if first.debt else with_debt(first)
    if twin != first and data.draw(st.booleans()):
        chosen.append(twin)
    return chosen


def refund_state(
    states: dict[tuple[str, str], Any], hit: tuple[str, Limit, int], now: float
) -> None:
    """Take back ``hit`` (its cost: what it was granted) with its module's ``refund``."""
    key, limit, granted = hit
    slot = (key, limit.id)
    refund = refund_function(limit.algorithm)
    states[slot] = refund(copy.copy(states.get(slot)), now, granted, limit)


def python_across(
    states: dict[tuple[str, str], Any], batch: list[tuple[str, Limit, int]], now: float
) -> list[Decision]:
    """``apply_many(all_or_nothing=True)`` on a cluster, on the Python steps: each slot's part
    all or nothing; if one refused, the parts that admitted are refunded, last hit first, and
    every decision is reported with granted 0."""
    groups: dict[int, list[int]] = {}
    for index, (key, limit, _) in enumerate(batch):
        slot = key_slot(state_key(limit, key, PREFIX).encode())
        groups.setdefault(slot, []).append(index)
    results: list[Any] = [None] * len(batch)
    parts = []
    for indexes in groups.values():
        part = [batch[i] for i in indexes]
        decided = python_batch(states, part, now, True)
        for index, one in zip(indexes, decided, strict=True):
            results[index] = one
        parts.append((part, decided))
    if len(groups) == 1 or all(one.allowed for one in results):
        return results
    for part, decided in parts:
        if all(one.allowed for one in decided):
            for (key, limit, _), one in reversed(list(zip(part, decided, strict=True))):
                if one.granted and not limit.debt:
                    refund_state(states, (key, limit, one.granted), now)
    return [
        one._replace(granted=0) if one.granted and not limit.debt else one
        for (_, limit, _), one in zip(batch, results, strict=True)
    ]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_batches_across_slots_decide_as_python(
    client: redis.Redis, split_store: RedisStore, data: st.DataObject
) -> None:
    """All-or-nothing batches over keys in several slots (an address and a username): the
    slots' parts, then the refunds, decide and leave the state exactly as on the Python
    steps, batch after batch."""
    chosen = chosen_limits(data)
    keys = [fresh_key(), fresh_key()]
    step = min(limit.period / limit.capacity for limit in chosen)
    now = T0 + data.draw(st.floats(0, 1e7))
    states: dict[tuple[str, str], Any] = {}
    for _ in range(data.draw(st.integers(1, 8))):
        now += data.draw(st.floats(0, 2)) * step
        batch = [
            (
                data.draw(st.sampled_from(keys)),
                data.draw(st.sampled_from(chosen)),
                data.draw(st.sampled_from(COSTS)),
            )
            for _ in range(data.draw(st.integers(1, 5)))
        ]
        expected = [bits(d) for d in python_across(states, batch, now)]
        actual = [bits(d) for d in split_store.apply_many(batch, all_or_nothing=True, now=now)]
        assert actual == expected, (batch, now)
        for key in keys:
            for limit in chosen:
                name = state_key(limit, key, PREFIX)
                want = flat(states.get((key, limit.id)), limit.algorithm)
                assert stored(client, name, limit.algorithm) == want, (key, limit, batch, now)


@pytest.mark.parametrize("algorithm", list(Algorithm), ids=str)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_refunds_match_python(
    client: redis.Redis,
    store: RedisStore,
    refunder: Any,
    algorithm: Algorithm,
    data: st.DataObject,
) -> None:
    """A random timeline with a refund of one admitted hit somewhere after it (right after, or
    after more hits): the refund script leaves the state the Python ``refund`` leaves, bit for
    bit, and every later decision is the same."""
    limit = data.draw(limits(algorithm, debt=True), label="limit")
    hits = data.draw(timelines(limit), label="hits")
    admitted = [
        (i, (now, decision.granted))
        for i, ((now, cost), (decision, _)) in enumerate(
            zip(hits, python_run(limit, hits), strict=True)
        )
        if cost > 0 and decision.allowed and decision.granted > 0
    ]
    if not admitted:
        return
    hit, (at, granted) = data.draw(st.sampled_from(admitted), label="refunded hit")
    after = data.draw(st.integers(hit, len(hits) - 1), label="refunded after hit")
    key = fresh_key()
    name = state_key(limit, key, PREFIX)
    states: dict[tuple[str, str], Any] = {}
    for i, (now, cost) in enumerate(hits):
        want = python_batch(states, [(key, limit, cost)], now, False)[0]
        got = single(store, key, limit, cost, now)
        where = f"{limit!r}, refund of hit {hit} after hit {after}, hit {i} of {hits[: i + 1]}"
        assert bits(got) == bits(want), where
        if i == after:
            refund_state(states, (key, limit, granted), at)
            refunder([name], arguments([(limit, granted)], at, False))
        assert stored(client, name, algorithm) == flat(states.get((key, limit.id)), algorithm), (
            where
        )


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
        decision = single(store, key, limit, cost, now)
        if decision.allowed and decision.granted:
            assert client.exists(name), (now, cost)
            assert client.pttl(name) > 0, (now, cost)


def test_a_release_of_every_lease_deletes_the_key(client: redis.Redis, store: RedisStore) -> None:
    limit = Limit(3, 10, "concurrency")
    key = fresh_key()
    store.apply(key, limit, 2, T0)
    assert store.release(key, limit, 5, T0 + 1).granted == 2
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


# --- Debt --------------------------------------------------------------------------------------

#: One limit with debt per algorithm that can hold one.
DEBTS = [with_debt(limit) for limit in LIMITS if with_debt(limit).debt]

#: Charges past the limit, looks refused while in debt, a cost that never fits (counted too), a
#: clock that steps back, and the debt paid back.
DEBT_HITS = [
    (T0, 2),
    (T0, 2),
    (T0, 0),
    (T0 + 1, 5),
    (T0 + 2, 0),
    (T0 + 1.5, 1),
    (T0 + 9, 1),
    (T0 + 30, 0),
    (T0 + 30, 3),
    (T0 + 95, 0),
    (T0 + 95, 1),
]


@pytest.mark.parametrize("limit", DEBTS, ids=repr)
def test_debt_is_held_alike(client: redis.Redis, store: RedisStore, limit: Limit) -> None:
    """The same table through both scripts: every refused charge counted, bit for bit."""
    decisions = [decision for decision, _ in python_run(limit, DEBT_HITS)]
    assert [(d.allowed, d.granted) for d in decisions[:4]] == [
        (True, 2),
        (False, 2),
        (False, 0),
        (False, 5),
    ]
    assert decisions[3].retry_after == math.inf
    if limit.period == 10:  # paid back (a calendar window holds its debt until it ends)
        assert decisions[-1].allowed
    assert_parity(client, store, limit, DEBT_HITS)


@pytest.mark.parametrize("limit", DEBTS, ids=repr)
def test_a_refused_charge_is_written_with_a_ttl(
    client: redis.Redis, store: RedisStore, limit: Limit
) -> None:
    key = fresh_key()
    name = state_key(limit, key, PREFIX)
    store.apply(key, limit, 3, T0)
    before = client.dump(name)
    decision = store.apply(key, limit, 2, T0)
    assert (decision.allowed, decision.granted, decision.remaining) == (False, 2, 0)
    assert client.dump(name) != before
    assert client.pttl(name) >= decision.reset_after * 1000


def test_a_refused_batch_keeps_its_debt_hits(client: redis.Redis, store: RedisStore) -> None:
    """all_or_nothing: the hits without debt are taken back, the hits with debt stay counted;
    a batch whose limits all have debt keeps everything."""
    plain, owing = Limit(2, 60), Limit(2, 60, debt=True)
    first, second = fresh_key(), fresh_key()
    decisions = store.apply_many(
        [(first, plain, 1), (second, owing, 2), (second, owing, 1), (first, plain, 5)],
        all_or_nothing=True,
        now=T0,
    )
    assert [(d.allowed, d.granted) for d in decisions] == [
        (True, 0),
        (True, 2),
        (False, 1),
        (False, 0),
    ]
    assert not client.exists(state_key(plain, first, PREFIX))
    assert store.apply(second, plain, 0, T0).remaining == 0
    assert not store.apply(second, owing, 0, T0).allowed  # 3 counted of 2
    decisions = store.apply_many(
        [(first, owing, 1), (second, owing, 1)], all_or_nothing=True, now=T0
    )
    assert [(d.allowed, d.granted) for d in decisions] == [(True, 1), (False, 1)]
    assert store.apply(first, plain, 0, T0).remaining == 1
