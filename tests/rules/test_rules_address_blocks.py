"""A descriptor whose value is a client's address counts it by its block (``ipv6_prefix``,
``ipv4_prefix``): the rules match the address as sent, the counter is the network's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ratekeeper import MemoryStore
from ratekeeper.core.networks import Prefixes
from ratekeeper.engine import AsyncEngine, Engine
from ratekeeper.rules import parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

RULES = parse_rules(
    """
domain: edge
descriptors:
  - key: remote_address       # Envoy's remote_address, nginx's $remote_addr
    ipv6_prefix: 64
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: office
    ipv4_prefix: 24           # IPv6 keeps its default /64
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: exact
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: client
        ipv6_prefix: 48
        ipv4_prefix: 16
        descriptors:
          - key: path
            rate_limit: {unit: hour, requests_per_unit: 2}
""",
    "edge.yaml",
)


def counted(key: str, value: str) -> tuple[tuple[str, str], ...]:
    rule, entries = RULES.lookup("edge", ((key, value),))
    assert rule is not None
    return tuple(entries)


def test_the_block_stands_for_the_address() -> None:
    assert counted("remote_address", "2001:db8:1:2::5") == (
        ("remote_address", "2001:db8:1:2::/64"),
    )
    assert counted("remote_address", "2001:db8:1:2:aaaa::9") == (
        ("remote_address", "2001:db8:1:2::/64"),
    )
    assert counted("remote_address", "203.0.113.7") == (("remote_address", "203.0.113.7"),)
    assert counted("remote_address", "::ffff:203.0.113.7") == (("remote_address", "203.0.113.7"),)
    assert counted("office", "203.0.113.7") == (("office", "203.0.113.0/24"),)
    assert counted("office", "2001:db8:1:2::5") == (("office", "2001:db8:1:2::/64"),)
    # Without the option, every address is its own key, as in Envoy's service.
    assert counted("exact", "2001:db8:1:2::5") == (("exact", "2001:db8:1:2::5"),)


def test_locate_names_the_entries_with_their_blocks_only() -> None:
    """What the engine keys a plan and looks up an override by: the blocks, not the
    ``share_threshold`` patterns; the entries themselves when no address changes."""
    rules = parse_rules(
        """
domain: edge
descriptors:
  - key: office
    ipv4_prefix: 24
    descriptors:
      - key: share
        value: "doc-*"
        share_threshold: true
        rate_limit: {unit: hour, requests_per_unit: 4}
  - key: remote_address
    ipv6_prefix: 64
    rate_limit: {unit: hour, requests_per_unit: 2}
""",
        "edge.yaml",
    )
    entries = (("office", "203.0.113.7"), ("share", "doc-1"))
    rule, found, blocked = rules.locate("edge", entries)
    assert rule is not None and rule.path == "office/share=doc-*"
    assert found == (("office", "203.0.113.0/24"), ("share", "doc-*"))
    assert blocked == (("office", "203.0.113.0/24"), ("share", "doc-1"))
    same = (("remote_address", "2001:db8:1:2::/64"),)  # already its block
    assert rules.locate("edge", same) == (rules.match("edge", same), same, same)
    assert rules.locate("edge", same)[2] is same
    unknown = (("nothing", "2001:db8:1:2::5"),)
    assert rules.locate("edge", unknown) == (None, unknown, unknown)


def test_a_value_that_is_no_address_counts_as_given() -> None:
    entries = (("remote_address", "unix:"),)
    rule, found = RULES.lookup("edge", entries)
    assert rule is not None and found is entries


def test_a_block_at_an_inner_level() -> None:
    entries = (("tenant", "acme"), ("client", "2001:db8:1:2::5"), ("path", "/a"))
    rule, found = RULES.lookup("edge", entries)
    assert rule is not None and rule.path == "tenant/client/path"
    assert found == (("tenant", "acme"), ("client", "2001:db8:1::/48"), ("path", "/a"))
    rule, found = RULES.lookup("edge", (("tenant", "acme"), ("client", "10.1.2.3"), ("path", "/a")))
    assert found == (("tenant", "acme"), ("client", "10.1.0.0/16"), ("path", "/a"))


def decisions(engine: Engine, key: str, values: list[str]) -> list[tuple[bool, int, str]]:
    results = []
    for value in values:
        status = engine.check("edge", [[(key, value)]]).statuses[0]
        results.append((status.allowed, status.remaining, status.identity))
    return results


@pytest.fixture
def engine() -> Engine:
    return Engine(MemoryStore(clock=FakeClock()), rules=RULES)


def test_two_addresses_of_one_64_share_a_limit_and_two_64s_do_not(engine: Engine) -> None:
    first, second = "edge/remote_address:2001:db8:1:2::/64", "edge/remote_address:2001:db8:1:3::/64"
    assert decisions(
        engine,
        "remote_address",
        ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3", "2001:db8:1:3::1"],
    ) == [(True, 1, first), (True, 0, first), (False, 0, first), (True, 1, second)]


def test_an_ipv4_mapped_address_counts_as_its_ipv4_address(engine: Engine) -> None:
    key = "edge/remote_address:203.0.113.7"
    assert decisions(
        engine, "remote_address", ["203.0.113.7", "::ffff:203.0.113.7", "::ffff:cb00:7107"]
    ) == [(True, 1, key), (True, 0, key), (False, 0, key)]
    # IPv4 keeps its /32 here: the next address is another client.
    assert decisions(engine, "remote_address", ["203.0.113.8"]) == [
        (True, 1, "edge/remote_address:203.0.113.8")
    ]


def test_an_ipv4_24_groups(engine: Engine) -> None:
    block = "edge/office:203.0.113.0/24"
    assert decisions(
        engine, "office", ["203.0.113.1", "203.0.113.254", "::ffff:203.0.113.9", "203.0.114.1"]
    ) == [
        (True, 1, block),
        (True, 0, block),
        (False, 0, block),
        (True, 1, "edge/office:203.0.114.0/24"),
    ]


def test_values_that_are_no_address_get_no_extra_capacity(engine: Engine) -> None:
    # Counted under themselves, as without the option: the same text, the same counter.
    assert decisions(engine, "remote_address", ["unknown", "unknown", "unknown"]) == [
        (True, 1, "edge/remote_address:unknown"),
        (True, 0, "edge/remote_address:unknown"),
        (False, 0, "edge/remote_address:unknown"),
    ]
    # A network already made into a block (by the web layer, say) counts with its addresses.
    assert decisions(engine, "remote_address", ["2001:db8:9::/64", "2001:db8:9::1"]) == [
        (True, 1, "edge/remote_address:2001:db8:9::/64"),
        (True, 0, "edge/remote_address:2001:db8:9::/64"),
    ]


def test_the_async_engine_counts_the_same_blocks() -> None:
    clock = FakeClock()
    twin = AsyncEngine(AsyncMemoryStore(MemoryStore(clock=clock)), rules=RULES)
    values = ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::3"]

    async def run() -> list[tuple[bool, str]]:
        found = []
        for value in values:
            verdict = await twin.check("edge", [[("remote_address", value)]])
            found.append((verdict.allowed, verdict.statuses[0].identity))
        return found

    block = "edge/remote_address:2001:db8:1:2::/64"
    assert asyncio.run(run()) == [(True, block), (True, block), (False, block)]


DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize(
    ("page", "heading"), [("rules.md", "### Address blocks"), ("service.md", "## Client addresses")]
)
def test_the_examples_in_the_docs_count_as_documented(page: str, heading: str) -> None:
    section = (DOCS / page).read_text().split(heading, 1)[1]
    rules = parse_rules(section.split("```yaml\n", 1)[1].split("```", 1)[0], page)
    found = [
        rules.lookup("edge", (("remote_address", value),))[1]
        for value in ["2001:db8:1:2::5", "2001:DB8:1:2:ffff::9", "::ffff:203.0.113.7", "unix:"]
    ]
    assert [entries[0][1] for entries in found] == [
        "2001:db8:1:2::/64",
        "2001:db8:1:2::/64",
        "203.0.113.7",
        "unix:",
    ]


def test_the_table_in_the_docs_holds() -> None:
    blocks = Prefixes(ipv4=24, ipv6=64)
    table = {
        "2001:db8:1:2::5": "2001:db8:1:2::/64",
        "2001:DB8:1:2:ffff::9": "2001:db8:1:2::/64",
        "203.0.113.7": "203.0.113.0/24",
        "::ffff:203.0.113.7": "203.0.113.0/24",
        "fe80::1%eth0": "fe80::/64",
        "2001:db8:1:2::/64": "2001:db8:1:2::/64",
        "2001:db8:1:2:3::/80": "2001:db8:1:2::/64",
        "unix:": "unix:",
        "unknown": "unknown",
    }
    assert {value: blocks.key(value) for value in table} == table
