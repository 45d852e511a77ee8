"""The engine's own verbs beside check and is_allowed: hit, peek, reset; and its observer.

Every surface calls the engine; these are what a surface needs that ``check`` and
``is_allowed`` do not give. On a fake clock, so each sequence is exact.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

from ratekeeper import (
    AsyncDecider,
    AsyncEngine,
    AsyncLimiter,
    Decider,
    Engine,
    InvalidInputError,
    InvalidLimitError,
    Limit,
    Limiter,
    MemoryStore,
    Status,
)
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.rules import parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: plan
    value: free
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
"""


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


def test_hit_counts_a_given_limit_and_shares_the_counter_of_an_equal_override(
    store: MemoryStore,
) -> None:
    config = open_config_store("sqlite://:memory:")
    config.set("user:1", Override(3, 60, "fixed_window"))
    engine = Engine(store, config=config)
    three = Limit(3, 60)
    assert [engine.hit("user:1", three).remaining for _ in range(2)] == [2, 1]
    assert engine.decide("user:1").remaining == 0  # the override's limit: the same counter
    assert not engine.hit("user:1", "3/minute").allowed
    assert engine.hit("user:2", "3/minute", 3).allowed
    engine.close()


def test_peek_counts_nothing_and_reset_forgets(store: MemoryStore) -> None:
    engine = Engine(store, default=Limit(2, 60, "gcra"))
    assert engine.peek("k").remaining == 2
    assert engine.decide("k").allowed
    assert [engine.peek("k").remaining for _ in range(3)] == [1, 1, 1]
    engine.reset("k")
    assert engine.peek("k").remaining == 2
    assert engine.hit("k", "1/minute").allowed
    assert engine.peek("k", "1/minute").remaining == 0
    engine.reset("k", "1/minute")
    assert engine.peek("k", "1/minute").remaining == 1
    engine.reset("no-limit-here")  # a key no limit applies to: nothing to forget


@pytest.mark.parametrize("limit", [None, 5, "5/minute; 9/hour", "nonsense"], ids=repr)
def test_hit_refuses_what_is_not_one_limit(store: MemoryStore, limit: object) -> None:
    engine = Engine(store)
    with pytest.raises(InvalidLimitError):
        engine.hit("k", limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(("key", "cost"), [("", 1), (None, 1), ("k", -1), ("k", 1.5)])
def test_hit_refuses_bad_input(store: MemoryStore, key: object, cost: object) -> None:
    engine = Engine(store)
    with pytest.raises(InvalidInputError):
        engine.hit(key, "5/minute", cost)  # type: ignore[arg-type]
    assert len(store) == 0


def test_the_observer_hears_every_decision_in_order(store: MemoryStore) -> None:
    heard: list[tuple[str, tuple[Status, ...]]] = []
    engine = Engine(
        store,
        rules=parse_rules(RULES, "rules.yaml"),
        default=Limit(1, 60),
        domain="keys",
        observer=lambda domain, statuses: heard.append((domain, statuses)),
    )
    engine.check("api", [[("user", "a")]])  # the one-descriptor fast path once cached
    engine.check("api", [[("user", "a")]])
    engine.check("api", [[("user", "a")], [("plan", "free")], [("other", "x")]])
    engine.decide("k")
    engine.decide("k")
    engine.hit("k", "5/minute")
    got = [
        (domain, [(s.allowed, s.shadowed, s.rule.name if s.rule else None) for s in statuses])
        for domain, statuses in heard
    ]
    assert got == [
        ("api", [(True, False, "per_user")]),
        ("api", [(True, False, "per_user")]),
        ("api", [(False, False, "per_user"), (True, False, None), (True, False, None)]),
        ("keys", [(True, False, None)]),
        ("keys", [(False, False, None)]),
        ("keys", [(True, False, None)]),
    ]
    # The free plan's shadow rule allowed its first hit; a second is refused but shadowed.
    engine.check("api", [[("plan", "free")]])
    assert [(s.allowed, s.shadowed) for s in heard[-1][1]] == [(True, True)]


def test_the_async_engine_has_the_same_verbs(clock: FakeClock) -> None:
    heard: list[str] = []

    async def scenario() -> list[int]:
        engine = AsyncEngine(
            AsyncMemoryStore(clock=clock),
            default=Limit(2, 60, "gcra"),
            observer=lambda domain, statuses: heard.append(domain),
        )
        remaining = [(await engine.hit("k", "3/minute")).remaining]
        remaining.append((await engine.peek("k", "3/minute")).remaining)
        await engine.reset("k", "3/minute")
        remaining.append((await engine.peek("k", "3/minute")).remaining)
        remaining.append((await engine.decide("d")).remaining)
        await engine.reset("d")
        remaining.append((await engine.peek("d")).remaining)
        await engine.close()
        return remaining

    assert asyncio.run(scenario()) == [2, 2, 3, 1, 2]
    assert heard == [""] * 2  # the hit and the decision: a peek only looks, and tells nothing


def test_limiters_and_engines_are_deciders() -> None:
    assert isinstance(Limiter(), Decider) and isinstance(Engine(), Decider)
    assert isinstance(AsyncLimiter(), AsyncDecider) and isinstance(AsyncEngine(), AsyncDecider)
    for sync, twin in ((Limiter, AsyncLimiter), (Engine, AsyncEngine)):
        for name in ("hit", "peek", "reset"):
            assert not inspect.iscoroutinefunction(getattr(sync, name))
            assert inspect.iscoroutinefunction(getattr(twin, name))


def test_is_allowed_answers_as_decide_on_every_path(clock: FakeClock) -> None:
    """is_allowed takes decide's hot path itself (a cached plan, no observer): each case
    below, cached or not, limited or not, observed or not, answers as decide does, and a bad
    key or cost is refused alike, counting nothing."""
    config = open_config_store("sqlite://:memory:")
    config.set("few", Override(2, 60, "gcra"))  # any other key: no limit (no default)
    heard: list[str] = []

    def sequence(engine: Engine) -> list[object]:
        answers: list[object] = []
        for key, cost in [("few", 1), ("few", 1), ("few", 1), ("few", 0), ("free", 5)]:
            answers.append(engine.is_allowed(key, cost))
        answers.append(engine.is_allowed("free"))
        for key, cost in [(42, 1), ("", 1), ("few", -1), ("few", 1.5), ("free", -1)]:
            with pytest.raises(InvalidInputError):
                engine.is_allowed(key, cost)  # type: ignore[arg-type]
        answers.append(engine.decide("few", 0).remaining)
        return answers

    plain = Engine(MemoryStore(clock=clock), config=config)
    observed = Engine(
        MemoryStore(clock=clock), config=config, observer=lambda domain, _: heard.append(domain)
    )
    expected = [True, True, False, True, True, True, 0]
    try:
        assert sequence(plain) == expected
        assert sequence(observed) == expected
        assert len(heard) == 5  # every decision, the refused one too; no look, no bad input
    finally:
        plain.close()
        observed.close()


def test_the_async_is_allowed_answers_as_decide(clock: FakeClock) -> None:
    async def scenario() -> list[bool]:
        engine = AsyncEngine(AsyncMemoryStore(clock=clock), default=Limit(2, 60, "gcra"))
        answers = [await engine.is_allowed("k") for _ in range(3)]
        with pytest.raises(InvalidInputError):
            await engine.is_allowed("k", -1)
        answers.append((await engine.decide("k", 0)).allowed)
        await engine.close()
        return answers

    assert asyncio.run(scenario()) == [True, True, False, True]
