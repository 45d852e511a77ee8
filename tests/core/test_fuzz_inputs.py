"""Random keys, costs, limits and call sequences, through ``Limiter`` and ``Engine``.

Whatever a caller sends, on memory or on a real Redis behind the default failure policy: a bad
value raises ``InvalidInputError`` or ``InvalidLimitError`` (nothing else), nothing is ever
admitted beyond a limit, no stored state is corrupted, and the circuit breaker never opens.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratekeeper import (
    Algorithm,
    Engine,
    InvalidInputError,
    InvalidLimitError,
    Limit,
    Limiter,
    MemoryStore,
    Store,
    open_store,
)
from ratekeeper.core.inputs import MAX_COST
from ratekeeper.rules import parse_rules
from ratekeeper.testing import FakeClock
from tests.conftest import T0
from tests.servers import RedisServer

costs = st.one_of(
    st.integers(-3, 4),
    st.integers(MAX_COST - 1, MAX_COST + 2),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(["1", b"1", [1], 2.0]),
)
keys = st.one_of(
    st.sampled_from(["a", "b", "ключ", "{x}:y", "a" * 300]),
    st.sampled_from(["", "\udc80", "k\ud800", b"a", None, 42, ("a",)]),
)
periods = st.one_of(
    st.sampled_from([3600, 7200.0, "1h", "2 hours"]),
    st.sampled_from([0, -1, math.inf, math.nan, 1e300, "forever", True]),
)
amounts = st.one_of(st.integers(1, 5), st.sampled_from([0, -1, 2.5, True, 2**60]))


@st.composite
def limits(draw: st.DrawFn) -> Any:
    algorithm = draw(st.sampled_from([*Algorithm, "nope"]))
    return (draw(amounts), draw(periods), algorithm)


Ops = list[tuple[str, Any, Any, Any]]

operations = st.lists(
    st.tuples(st.sampled_from(["hit", "peek", "many", "check", "allowed"]), keys, limits(), costs),
    min_size=1,
    max_size=25,
)

RULES = """
domain: fuzz
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra}
"""
RULE_AMOUNT = 3


def run(limiter: Limiter, engine: Engine, ops: Ops) -> None:
    """Apply ``ops``; check every outcome and the totals admitted per key and limit."""
    admitted: dict[tuple[str, str], int] = defaultdict(int)
    capacities: dict[tuple[str, str], int] = {}
    for op, key, (amount, period, algorithm), cost in ops:
        try:
            limit = Limit(amount, period, algorithm)
        except InvalidLimitError:
            continue
        try:
            if op == "hit":
                decisions = [(key, limit, limiter.hit(key, limit, cost))]
            elif op == "peek":
                peeked = limiter.peek(key, limit)
                assert peeked.allowed and peeked.granted == 0
                decisions = []
            elif op == "many":
                batch = limiter.hit_many([(key, limit, cost), ("bystander", limit, 1)])
                decisions = [(key, limit, batch[0]), ("bystander", limit, batch[1])]
            elif op == "check":
                verdict = engine.check("fuzz", [[("k", key)]], cost)
                status = verdict.statuses[0]
                assert status.limit is not None and status.decision is not None
                decisions = [(f"rule:{key}", status.limit, status.decision)]
            else:
                decision = engine.decide(key, cost)
                decisions = [(f"default:{key}", limit_default, decision)]
        except InvalidInputError:
            continue
        for name, used, decision in decisions:
            assert not decision.degraded
            assert decision.granted >= 0
            slot = (name, used.id)
            admitted[slot] += decision.granted
            capacities[slot] = used.capacity
    for slot, total in admitted.items():
        assert total <= capacities[slot], slot


limit_default = Limit(2, 3600, "sliding_log")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_no_input_buys_capacity_on_memory(ops: Ops) -> None:
    clock = FakeClock(T0)  # frozen: every limit admits at most its capacity in all
    store = MemoryStore(clock=clock)
    engine = Engine(store, rules=parse_rules(RULES, "fuzz.yaml"), default=limit_default)
    run(Limiter(store), engine, ops)
    for table in store._tables.values():
        for key, state in table.items():
            assert isinstance(key, str) and key
            assert "nan" not in repr(state) and "inf" not in repr(state)


_prefixes = itertools.count()


@pytest.fixture(scope="module")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
def test_no_input_buys_capacity_on_redis(redis_url: str, ops: Ops) -> None:
    prefix = f"fuzz{next(_prefixes)}"
    store: Store = open_store(redis_url, prefix=prefix)  # the default policy
    try:
        engine = Engine(store, rules=parse_rules(RULES, "fuzz.yaml"), default=limit_default)
        run(Limiter(store), engine, ops)
        health = store.ping()
        assert health.ok and health.failures == 0 and health.opened == 0
        client = store.store.client  # type: ignore[attr-defined]
        for name in client.scan_iter(f"{prefix}:*"):
            kind = client.type(name)
            values = [client.get(name)] if kind == b"string" else client.lrange(name, 0, -1)
            for value in values:
                assert b"nan" not in value.lower() and b"inf" not in value.lower(), value
            assert client.pttl(name) > 0
    finally:
        store.close()
