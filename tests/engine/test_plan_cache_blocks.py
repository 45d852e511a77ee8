"""The plan cache by address block: a descriptor whose address is counted by its block
(``ipv6_prefix``, ``ipv4_prefix``) is planned by that block, its plan cached and its override
looked up once for the whole block, not once per address. Exact sequences on a fake clock,
against a real SQLite configuration store that counts the lookups it answers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratekeeper import MemoryStore
from ratekeeper.config.sqlite import SQLiteConfigStore
from ratekeeper.core.overrides import Override
from ratekeeper.engine import AsyncEngine, Engine
from ratekeeper.rules import parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

RULES = """
domain: edge
descriptors:
  - key: remote_address
    ipv6_prefix: 64
    rate_limit: {unit: hour, requests_per_unit: 600}
  - key: office
    ipv4_prefix: 24
    descriptors:
      - key: share
        value: "doc-*"
        share_threshold: true
        rate_limit: {unit: hour, requests_per_unit: 4}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
"""
BLOCK = "2001:db8:1:2::/64"


class Counting(SQLiteConfigStore):
    """A SQLite configuration store that remembers every key it was asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.asked: list[tuple[str, str]] = []

    def get(self, key: str, domain: str = "") -> Override | None:
        self.asked.append((domain, key))
        return super().get(key, domain)


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Counting]:
    store = Counting(tmp_path / "config.db")
    yield store
    store.close()


def addresses(count: int, block: str = "2001:db8:1:2") -> list[str]:
    """``count`` distinct addresses of one /64, as a client rotating through it sends them."""
    return [f"{block}:{n >> 16:x}:{n & 0xFFFF:x}:{n * 7 & 0xFFFF:x}:1" for n in range(count)]


def engine_of(config: Counting, clock: FakeClock) -> Engine:
    rules = parse_rules(RULES, "edge.yaml")
    return Engine(MemoryStore(clock=clock), rules=rules, config=config, reload_interval=None)


def test_a_thousand_addresses_of_one_block_cost_one_lookup(
    config: Counting, clock: FakeClock
) -> None:
    engine = engine_of(config, clock)
    try:
        verdicts = [engine.check("edge", [[("remote_address", ip)]]) for ip in addresses(1000)]
        assert [v.allowed for v in verdicts] == [True] * 600 + [False] * 400
        assert {v.statuses[0].identity for v in verdicts} == {f"edge/remote_address:{BLOCK}"}
        assert config.asked == [("edge", f"remote_address:{BLOCK}")]
        assert len(engine.planner.cache) == 1 and engine.planner.cache_misses == 1
        # Another /64 is another client: its own plan, its own lookup, its own counter.
        other = engine.check("edge", [[("remote_address", "2001:db8:1:3::1")]])
        assert other.allowed and other.statuses[0].remaining == 599
        assert config.asked[1:] == [("edge", "remote_address:2001:db8:1:3::/64")]
    finally:
        engine.close()


def test_an_override_is_set_for_the_block(config: Counting, clock: FakeClock) -> None:
    """The block's counter has one limit: the override set for the block. One set for a single
    address of it is not looked up (the counter it would limit is the block's)."""
    config.set(f"remote_address:{BLOCK}", Override(3, 3600), domain="edge")
    config.set("remote_address:2001:db8:1:2::5", Override(1000, 3600), domain="edge")
    engine = engine_of(config, clock)
    try:
        sent = ["2001:db8:1:2::5", *addresses(4)]
        verdicts = [engine.check("edge", [[("remote_address", ip)]]) for ip in sent]
        assert [v.allowed for v in verdicts] == [True, True, True, False, False]
        assert all(v.statuses[0].overridden for v in verdicts)
        assert config.asked == [("edge", f"remote_address:{BLOCK}")]
        # A change of the block's override reaches the next decision.
        config.set(f"remote_address:{BLOCK}", Override(10, 3600), domain="edge")
        after = engine.check("edge", [[("remote_address", "2001:db8:1:2::77")]])
        assert after.allowed and after.statuses[0].limit == Override(10, 3600).limit
        assert config.asked[1:] == [("edge", f"remote_address:{BLOCK}")]
    finally:
        engine.close()


def test_keys_without_blocks_are_planned_as_before(config: Counting, clock: FakeClock) -> None:
    """An entry without prefixes, or an address already in its block's form, keeps one plan
    per value; a block nested under a shared wildcard is keyed by the block and the value
    sent, and counted under the pattern."""
    engine = engine_of(config, clock)
    try:
        for user in ("ann", "bob", "ann"):
            assert engine.check("edge", [[("user", user)]]).allowed
        assert config.asked == [("edge", "user:ann"), ("edge", "user:bob")]
        config.asked.clear()
        shared = [
            engine.check("edge", [[("office", ip), ("share", doc)]])
            for ip, doc in [
                ("203.0.113.7", "doc-1"),
                ("203.0.113.9", "doc-1"),
                ("203.0.113.9", "doc-2"),
                ("203.0.113.0/24", "doc-3"),
                ("203.0.113.200", "doc-1"),
            ]
        ]
        assert [v.allowed for v in shared] == [True, True, True, True, False]
        assert {v.statuses[0].identity for v in shared} == {
            "edge/office:203.0.113.0/24|share:doc-*"
        }
        assert config.asked == [
            ("edge", "office:203.0.113.0/24|share:doc-1"),
            ("edge", "office:203.0.113.0/24|share:doc-2"),
            ("edge", "office:203.0.113.0/24|share:doc-3"),
        ]
    finally:
        engine.close()


def test_the_async_engine_loads_a_blocks_plan_once(config: Counting, clock: FakeClock) -> None:
    rules = parse_rules(RULES, "edge.yaml")

    async def scenario() -> list[bool]:
        engine = AsyncEngine(
            AsyncMemoryStore(clock=clock), rules=rules, config=config, reload_interval=None
        )
        try:
            allowed = []
            for ip in addresses(700):
                allowed.append((await engine.check("edge", [[("remote_address", ip)]])).allowed)
            # Cached by its block: a new address is not sent away to be loaded.
            new = ((("remote_address", "2001:db8:1:2:ffff::1"),), None, 1)
            assert engine.planner.missing("edge", [new]) == []
            return allowed
        finally:
            await engine.close()

    assert asyncio.run(scenario()) == [True] * 600 + [False] * 100
    assert config.asked == [("edge", f"remote_address:{BLOCK}")]


def test_new_rules_plan_by_their_own_blocks(config: Counting, clock: FakeClock) -> None:
    """The blocks the engine remembered go with the rules they came from: under a /48, two
    /64s of one site are one plan, one lookup and one counter."""
    engine = engine_of(config, clock)
    try:
        assert engine.check("edge", [[("remote_address", "2001:db8:1:2::1")]]).allowed
        engine.planner.set_rules(
            parse_rules(RULES.replace("ipv6_prefix: 64", "ipv6_prefix: 48"), "edge.yaml")
        )
        config.asked.clear()
        sent = ["2001:db8:1:2::1", "2001:db8:1:3::1", "2001:db8:1:2::1"]
        verdicts = [engine.check("edge", [[("remote_address", ip)]]) for ip in sent]
        assert [v.statuses[0].remaining for v in verdicts] == [599, 598, 597]
        assert {v.statuses[0].identity for v in verdicts} == {"edge/remote_address:2001:db8:1::/48"}
        assert config.asked == [("edge", "remote_address:2001:db8:1::/48")]
    finally:
        engine.close()


def test_a_long_descriptor_with_a_block_is_decided_but_not_remembered(
    config: Counting, clock: FakeClock
) -> None:
    """As the cache keeps no plan of a descriptor past ``MAX_CACHED_KEY``, the planner keeps
    no block of one: memory does not grow with what requests say."""
    engine = engine_of(config, clock)
    try:
        long = "doc-" + "x" * 5_000
        sent = [[("office", f"203.0.113.{n}"), ("share", long)] for n in range(6)]
        verdicts = [engine.check("edge", [entries]) for entries in sent]
        assert [v.allowed for v in verdicts] == [True] * 4 + [False] * 2
        assert {v.statuses[0].identity for v in verdicts} == {
            "edge/office:203.0.113.0/24|share:doc-*"
        }
        assert engine.planner.blocks == {} and len(engine.planner.cache) == 0
        assert len(config.asked) == 6  # made anew each time, as any long descriptor's
    finally:
        engine.close()
