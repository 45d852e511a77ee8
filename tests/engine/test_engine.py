"""The decision engine: Envoy's matching semantics, overrides over rules, and the twins.

Every test runs on a fake clock, so each sequence of decisions is exact.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import ConfigError, InvalidInputError, Limit, MemoryStore
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.core.store_keys import descriptor_entries
from ratekeeper.engine import UNLIMITED, AsyncEngine, Descriptor, Engine, descriptor_key
from ratekeeper.rules import parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

RULES = """
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: user
    value: "bot-*"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /health
  - key: path
    value: /internal
    rate_limit: {unlimited: true}
  - key: generic_key
    value: default
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 4}
  - key: plan
    value: free
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5, name: tenant_default}
  - key: tenant_vip
    rate_limit:
      unit: minute
      requests_per_unit: 50
      replaces: [{name: tenant_default}]
"""


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def engine(store: MemoryStore) -> Engine:
    return Engine(store, rules=parse_rules(RULES, "rules.yaml"))


def admitted(engine: Engine, descriptor: list[tuple[str, str]], attempts: int = 12) -> int:
    return sum(engine.check("api", [descriptor]).allowed for _ in range(attempts))


def test_exact_value_beats_wildcard_beats_bare_key(engine: Engine) -> None:
    assert admitted(engine, [("user", "vip")]) == 10
    assert admitted(engine, [("user", "bot-7")]) == 1
    assert admitted(engine, [("user", "alice")]) == 2
    assert admitted(engine, [("user", "bob")]) == 2  # the bare key counts per value


def test_a_limit_applies_only_at_the_last_entry(engine: Engine, store: MemoryStore) -> None:
    # remote_address has a limit but no children: with a second entry nothing matches.
    assert admitted(engine, [("remote_address", "10.0.0.1"), ("user", "alice")]) == 12
    # generic_key=default has children but no limit of its own.
    assert admitted(engine, [("generic_key", "default")]) == 12
    assert len(store) == 0
    assert admitted(engine, [("generic_key", "default"), ("user", "alice")]) == 4
    assert admitted(engine, [("remote_address", "10.0.0.1")]) == 3


def test_a_descriptor_with_neither_limit_nor_children_whitelists(
    engine: Engine, store: MemoryStore
) -> None:
    verdict = engine.check("api", [[("path", "/health")]])
    assert verdict.allowed
    (status,) = verdict.statuses
    assert (status.allowed, status.decision, status.limit, status.remaining) == (
        True,
        None,
        None,
        UNLIMITED,
    )
    assert admitted(engine, [("path", "/health")]) == 12
    assert len(store) == 0


def test_unlimited_never_touches_the_store(engine: Engine, store: MemoryStore) -> None:
    assert admitted(engine, [("path", "/internal")], attempts=100) == 100
    status = engine.check("api", [[("path", "/internal")]]).statuses[0]
    assert status.rule is not None and status.rule.unlimited
    assert (status.decision, status.remaining) == (None, UNLIMITED)
    assert len(store) == 0


def test_replaces_drops_the_replaced_limit(engine: Engine) -> None:
    both = [[("tenant", "acme")], [("tenant_vip", "acme")]]
    assert sum(engine.check("api", both).allowed for _ in range(12)) == 12
    statuses = engine.check("api", both).statuses
    assert statuses[0].decision is None  # tenant_default was replaced
    assert statuses[1].decision is not None and statuses[1].decision.remaining == 50 - 13
    # Without the replacing descriptor the default applies again, and it counted nothing.
    assert admitted(engine, [("tenant", "acme")]) == 5


def test_shadow_mode_counts_but_always_allows(engine: Engine) -> None:
    verdicts = [engine.check("api", [[("plan", "free")]]) for _ in range(3)]
    assert [verdict.allowed for verdict in verdicts] == [True, True, True]
    statuses = [verdict.statuses[0] for verdict in verdicts]
    assert [status.shadowed for status in statuses] == [False, True, True]
    assert [status.decision.allowed for status in statuses if status.decision] == [
        True,
        False,
        False,
    ]


def test_an_unknown_domain_means_no_limit(engine: Engine, store: MemoryStore) -> None:
    verdict = engine.check("elsewhere", [[("user", "alice")]] * 3)
    assert verdict.allowed
    assert [status.decision for status in verdict.statuses] == [None, None, None]
    assert len(store) == 0


def test_over_limit_anywhere_refuses_the_request_and_statuses_keep_order(
    engine: Engine,
) -> None:
    request = [[("path", "/health")], [("user", "bot-1")], [("remote_address", "10.0.0.9")]]
    first = engine.check("api", request)
    second = engine.check("api", request)
    assert first.allowed and not second.allowed
    assert [status.allowed for status in second.statuses] == [True, False, True]
    assert [status.remaining for status in second.statuses] == [UNLIMITED, 0, 1]
    assert second.statuses[1].decision is not None
    assert second.statuses[1].decision.retry_after > 0


def test_hits_zero_only_looks_and_descriptors_can_carry_their_own_cost(engine: Engine) -> None:
    for _ in range(5):
        assert engine.check("api", [[("remote_address", "a")]], hits=0).allowed
    verdict = engine.check("api", [Descriptor((("remote_address", "a"),), hits=3)])
    assert verdict.allowed and verdict.statuses[0].remaining == 0
    assert not engine.check("api", [[("remote_address", "a")]]).allowed


def test_a_limit_sent_with_the_request_bypasses_the_rules(engine: Engine) -> None:
    own = Descriptor((("path", "/health"),), limit=Limit(2, 60))
    assert [engine.check("api", [own]).allowed for _ in range(4)] == [True, True, False, False]
    assert engine.check("api", [[("path", "/health")]]).allowed  # the rule still whitelists


def test_overrides_win_over_rules(tmp_path: Path, store: MemoryStore) -> None:
    config = open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    config.set("user:alice", Override(3, 60, "fixed_window"), domain="api")
    engine = Engine(store, rules=parse_rules(RULES, "rules.yaml"), config=config)
    try:
        assert admitted(engine, [("user", "alice")]) == 3
        assert admitted(engine, [("user", "bob")]) == 2
        status = engine.check("api", [[("user", "alice")]]).statuses[0]
        assert status.overridden and status.limit == Limit(3, 60)
        # A change through the engine's own store applies at once.
        config.delete("user:alice", domain="api")
        assert engine.check("api", [[("user", "carol")]]).statuses[0].limit == Limit(2, 60)
        assert not engine.check("api", [[("user", "alice")]]).statuses[0].overridden
    finally:
        engine.close()


def test_a_long_descriptor_counts_exactly_and_is_neither_kept_nor_cached_whole(
    engine: Engine, store: MemoryStore
) -> None:
    """A request may carry a long value (a header, a path): it is counted as any other, under
    a 65-character identity, and its plan is made anew each time rather than cached."""
    long, other = "u" * 5_000, "v" * 5_000
    decided = [engine.check("api", [[("user", value)]]).allowed for value in (long,) * 3]
    assert decided == [True, True, False]  # user: 2 per minute
    assert engine.check("api", [[("user", other)]]).allowed  # another value: its own counter
    keys = [key for table in store._tables.values() for key in table]
    assert sorted(map(len, keys)) == [65, 65]
    assert engine.planner.cache.get(("api", (("user", long),))) is None
    assert engine.check("api", [[("user", "short")]]).allowed
    assert engine.planner.cache.get(("api", (("user", "short"),))) is not None


def test_the_async_engine_loads_a_long_descriptors_plan_once_a_check(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Away from its event loop, and once: the plan it loaded is the one it decides by."""
    config = open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    reads: list[str] = []
    real_get = config.get

    def counted_get(key: str, domain: str = "") -> Override | None:
        reads.append(key)
        return real_get(key, domain)

    config.get = counted_get  # type: ignore[method-assign]
    long = "u" * 5_000
    config.set(f"user:{long}", Override(1, 60, "gcra"), domain="api")

    async def scenario() -> list[bool]:
        engine = AsyncEngine(
            AsyncMemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"), config=config
        )
        try:
            return [(await engine.check("api", [[("user", long)]])).allowed for _ in range(2)]
        finally:
            await engine.close()

    assert asyncio.run(scenario()) == [True, False]  # the override's 1 per minute
    assert reads == [f"user:{long}"] * 2  # one read a check: not cached, not read twice


def test_keys_with_equal_overrides_share_one_limit_and_count_apart(
    tmp_path: Path, clock: FakeClock
) -> None:
    config = open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    keys = [f"user:{n}" for n in range(6)]
    config.set_many([(key, Override(2, 60, "gcra")) for key in keys])
    config.set("user:other", Override(3, 60, "gcra"))
    engine = Engine(MemoryStore(clock=clock), config=config, cache_size=4)
    try:
        decided = [[engine.is_allowed(key) for _ in range(3)] for key in keys]
        assert decided == [[True, True, False]] * 6  # each key its own counter
        assert [engine.is_allowed("user:other") for _ in range(4)] == [True] * 3 + [False]
        plans = [engine.planner.cache.lookup(key) for key in (*keys[-3:], "user:other")]
        limits = [plan.limit for plan in plans if plan is not None]
        assert len(limits) == 4
        assert limits[0] is limits[1] is limits[2]  # one object for the three equal overrides
        assert limits[3] == Limit(3, 60, "gcra")
        config.set_many([(f"d:{n}", Override(10 + n, 60, "gcra")) for n in range(10)])
        assert all(engine.is_allowed(f"d:{n}") for n in range(10))
        assert len(engine.planner._limits) <= 4  # as many distinct limits as the cache holds
    finally:
        engine.close()


def test_is_allowed_takes_the_limit_from_the_configuration_store(
    tmp_path: Path, clock: FakeClock
) -> None:
    config = open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    config.set("user:241531", Override.from_dict({"time_window_sec": 1, "capacity": 5}))
    engine = Engine(MemoryStore(clock=clock), config=config, default="2/minute")
    try:
        assert [engine.is_allowed("user:241531") for _ in range(7)] == [True] * 5 + [False] * 2
        clock.advance(1.0)
        assert engine.is_allowed("user:241531")
        assert [engine.is_allowed("user:1") for _ in range(3)] == [True, True, False]
        decision = engine.decide("user:241531", cost=0)
        assert (decision.limit, decision.remaining) == (5, 4)
    finally:
        engine.close()


def test_without_an_override_or_default_a_key_is_not_limited(store: MemoryStore) -> None:
    engine = Engine(store)
    assert all(engine.is_allowed("user:1") for _ in range(100))
    assert engine.decide("user:1", cost=3).remaining == UNLIMITED
    assert len(store) == 0


def test_is_allowed_and_check_share_the_counter_of_one_override_key(
    tmp_path: Path, store: MemoryStore
) -> None:
    config = open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    config.set("user:241531", Override(3, 60, "fixed_window"))
    engine = Engine(store, config=config)
    try:
        assert engine.is_allowed("user:241531")
        assert engine.check("", [[("user", "241531")]]).statuses[0].remaining == 1
    finally:
        engine.close()


def test_descriptor_keys_cannot_collide() -> None:
    assert descriptor_key([("user", "241531")]) == "user:241531"
    assert descriptor_key([("a", "b|c:d")]) != descriptor_key([("a", "b"), ("c", "d")])
    assert descriptor_key([("a:b", "c")]) != descriptor_key([("a", "b:c")])


def test_the_cache_is_bounded(store: MemoryStore) -> None:
    engine = Engine(store, rules=parse_rules(RULES, "rules.yaml"), cache_size=100)
    for number in range(1_000):
        engine.check("api", [[("user", f"u{number}")]])
    assert len(engine.planner.cache) == 100


def test_async_engine_decides_exactly_like_the_engine(clock: FakeClock) -> None:
    rules = parse_rules(RULES, "rules.yaml")
    requests = [
        [[("user", "alice")], [("remote_address", "10.0.0.1")]],
        [[("plan", "free")]],
        [[("tenant", "acme")], [("tenant_vip", "acme")]],
        [[("path", "/internal")], [("user", "bot-1")]],
    ] * 4
    engine = Engine(MemoryStore(clock=clock), rules=rules)
    twin = AsyncEngine(AsyncMemoryStore(MemoryStore(clock=clock)), rules=rules)

    async def run() -> list[object]:
        return [await twin.check("api", request) for request in requests]

    expected = [engine.check("api", request) for request in requests]
    assert asyncio.run(run()) == expected


def test_the_engines_are_twins() -> None:
    def public(cls: type) -> dict[str, bool]:
        return {
            name: inspect.iscoroutinefunction(member)
            for name, member in vars(cls).items()
            if not name.startswith("_")
        }

    sync, asynchronous = public(Engine), public(AsyncEngine)
    assert sync.keys() == asynchronous.keys()
    for name in ("decide", "is_allowed", "check", "close"):
        assert asynchronous[name] and not sync[name]


def test_descriptor_keys_turn_back_into_their_entries() -> None:
    for entries in [
        (("user", "241531"),),
        (("generic_key", "default"), ("user", "a|b:c%7C")),
        (("a:b", "c"),),
    ]:
        assert descriptor_entries(descriptor_key(entries)) == entries
    assert descriptor_entries("no-colon") is None


def test_a_named_change_drops_only_the_plans_of_its_key(tmp_path: Path, store: MemoryStore) -> None:
    config = open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    engine = Engine(store, rules=parse_rules(RULES, "rules.yaml"), config=config, domain="api")
    try:
        for user in ("alice", "bob"):
            engine.check("api", [[("user", user)]], hits=0)
            engine.decide(f"user:{user}", cost=0)
        assert len(engine.planner.cache) == 4
        config.set("user:alice", Override(3, 60, "fixed_window"), domain="api")
        assert len(engine.planner.cache) == 2  # alice's is_allowed and check plans are gone
        assert engine.check("api", [[("user", "alice")]], hits=0).statuses[0].limit == Limit(3, 60)
        assert engine.decide("user:alice", cost=0).limit == 3
    finally:
        engine.close()


def test_a_domain_and_a_key_never_run_into_each_other(tmp_path: Path, store: MemoryStore) -> None:
    one = Limit(1, 60)
    (tmp_path / "ab.yaml").write_text("domain: a/b\ndescriptors: []\n")
    (tmp_path / "a.yaml").write_text("domain: a\ndescriptors: []\n")
    engine = Engine(store, rules=tmp_path, reload_interval=None)
    request = [Descriptor((("x", "1"),), one)]
    assert engine.check("a/b", request).allowed
    assert engine.check("a", [Descriptor((("b/x", "1"),), one)]).allowed  # counted apart
    assert not engine.check("a/b", request).allowed
    plain, scoped = Engine(store, default=one), Engine(store, default=one, domain="a")
    assert plain.is_allowed("a/b")
    assert scoped.is_allowed("b")  # not "a/b" of the engine without a domain
    assert not plain.is_allowed("a/b") and not scoped.is_allowed("b")


def test_identities_are_built_in_one_place() -> None:
    from ratekeeper.core.store_keys import identity

    assert identity("a/b", "x:1") != identity("a", "b/x:1")
    assert identity("", "a/b") != identity("a", "b")
    assert identity("api", "user:1") == "api/user:1"
    assert identity("10%/x", "k") == "10%25%2Fx/k"


@pytest.mark.parametrize("rules", [5, [None], ["rules.yaml", 5]])
def test_rules_that_are_no_files_are_a_config_error(rules: Any) -> None:
    with pytest.raises(ConfigError, match="rules are a RuleSet, or rule files and directories"):
        Engine(rules=rules)


@pytest.mark.parametrize("domain", [None, 5, "\udcff"])
def test_a_domain_that_is_no_string_is_refused_when_the_engine_is_built(domain: Any) -> None:
    with pytest.raises(InvalidInputError, match="domain must"):
        Engine(domain=domain)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("cache_size", 0),
        ("cache_size", -5),
        ("cache_size", True),
        ("cache_size", "5"),
        ("cache_size", 2.5),
        ("cache_ttl", 0),
        ("cache_ttl", -1),
        ("cache_ttl", math.nan),
        ("cache_ttl", math.inf),
        ("cache_ttl", "60"),
        ("reload_interval", -1),  # was accepted, and reloaded the rule files in a busy loop
        ("reload_interval", 0),
        ("reload_interval", math.nan),
        ("reload_interval", True),
    ],
)
@pytest.mark.parametrize("twin", [Engine, AsyncEngine])
def test_bad_cache_and_reload_options_are_a_config_error(
    twin: type[Engine] | type[AsyncEngine], option: str, value: Any
) -> None:
    with pytest.raises(ConfigError, match=f"{option} must be"):
        twin(**{option: value})
