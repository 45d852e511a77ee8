"""Envoy's rule files deciding requests: the engine answers as Envoy's rate-limit service does.

The example configurations of github.com/envoyproxy/ratelimit (``examples/ratelimit/config``,
copied unchanged to ``tests/fixtures/rules/envoy/examples``) run through the scenarios of
that repository's integration scripts (``integration-test/scripts/*.sh``), with the
descriptors its example Envoy (``examples/envoy/proxy.yaml``) sends for each route. One
difference is deliberate and never shows in these scenarios: Envoy counts refused hits too,
ratekeeper does not (a refused hit consumes nothing) unless its limits have debt
(``tests/engine/test_engine_debt.py`` runs the token-quota scenarios, where it shows).
"""

from __future__ import annotations

import asyncio
from math import inf
from pathlib import Path

import pytest

from ratekeeper import Limit, MemoryStore
from ratekeeper.core.errors import ConfigError
from ratekeeper.engine import AsyncEngine, Descriptor, Engine
from ratekeeper.rules import RuleSet, load_rules, parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

EXAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "rules" / "envoy" / "examples"

#: The descriptors of each route of Envoy's example proxy: one list of header names each.
ROUTES = {
    "/twoheader": [["foo", "bar"], ["foo", "baz"]],
    "/fourheader": [["foo", "bar"], ["source_cluster", "destination_cluster"]],
    "/fiveheader": [["foo", "bar"], ["source_cluster", "destination_cluster"], ["category"]],
    "/unspec": [["unspec"]],
}


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def example(store: MemoryStore) -> Engine:
    return Engine(store, rules=load_rules([EXAMPLES / "example.yaml"]))


def request(engine: Engine, route: str, **headers: str) -> bool:
    """What Envoy's example proxy asks for a request to ``route`` with ``headers``: a
    descriptor per rate-limit action whose headers are all present (``request_headers``
    actions skip the descriptor otherwise)."""
    descriptors = [
        [(name, headers[name]) for name in names]
        for names in ROUTES[route]
        if all(name in headers for name in names)
    ]
    return engine.check("rl", descriptors).allowed


def test_example_files_load() -> None:
    rules = load_rules([EXAMPLES])
    assert (len(rules), sorted(rules.domains)) == (19, ["mongo_cps", "rl"])


def test_replaces_script(example: Engine) -> None:
    """integration-test/scripts/replaces.sh."""
    banned = {"foo": "bkthomps", "bar": "banned"}
    # (foo: *), (bar: banned) has requests_per_unit 0: always over the limit.
    assert not request(example, "/twoheader", **banned)
    proxy = {"source_cluster": "proxy"}
    assert not request(example, "/fourheader", **banned, **proxy, destination_cluster="mock")
    # destination_cluster=override replaces banned_limit, and allows 2 a minute itself.
    override = {**banned, **proxy, "destination_cluster": "override"}
    assert [request(example, "/fourheader", **override) for _ in range(3)] == [True, True, False]

    # Replacing does not touch the replaced limit's own counter.
    both = {"foo": "my_foo", "bar": "bkthomps", **proxy}
    assert [
        request(example, "/fourheader", **both, destination_cluster="bkthomps") for _ in range(3)
    ] == [True, True, False]
    assert [
        request(example, "/fourheader", **both, destination_cluster="not_bkthomps")
        for _ in range(2)
    ] == [True, False]
    assert not request(example, "/fourheader", **both, destination_cluster="bkthomps")

    # One rule can replace several.
    five = {**both, "destination_cluster": "fake", "category": "account"}
    assert [request(example, "/fiveheader", **five) for _ in range(5)] == [True] * 4 + [False]
    assert [request(example, "/twoheader", foo="foo_2", bar="bkthomps") for _ in range(2)] == [
        True,
        False,
    ]
    fake = {"foo": "foo_3", "bar": "bar_3", **proxy, "destination_cluster": "fake"}
    assert [request(example, "/fourheader", **fake) for _ in range(3)] == [True, True, False]
    assert not request(example, "/fiveheader", **five)


def test_trigger_ratelimit_script(example: Engine) -> None:
    """integration-test/scripts/trigger-ratelimit.sh: (foo: *), (baz: not-so-shady) 3/min."""
    answers = [request(example, "/twoheader", foo="pelle", baz="not-so-shady") for _ in range(5)]
    assert answers == [True, True, True, False, False]


def test_trigger_shadow_mode_key_script(example: Engine) -> None:
    """integration-test/scripts/trigger-shadow-mode-key.sh: over the limit, yet allowed."""
    answers = [request(example, "/twoheader", foo="pelle", baz="shady") for _ in range(6)]
    assert answers == [True] * 6
    status = example.check("rl", [[("foo", "pelle"), ("baz", "shady")]]).statuses[0]
    assert (status.allowed, status.shadowed, status.remaining) == (True, True, 0)


def test_simple_get_script(example: Engine) -> None:
    """integration-test/scripts/simple-get.sh."""
    assert request(example, "/twoheader", foo="test", baz="shady")


def test_quota_script(example: Engine, clock: FakeClock) -> None:
    """integration-test/scripts/quota.sh: /quota sends (service: service_1) and
    (service: service_2), both in quota mode, 1 and 2 a minute: a request is refused only
    when both are over."""
    quota = [[("service", "service_1")], [("service", "service_2")]]
    verdicts = [example.check("rl", quota) for _ in range(3)]
    assert [verdict.allowed for verdict in verdicts] == [True, True, False]
    assert [status.allowed for status in verdicts[1].statuses] == [False, True]
    clock.advance(60)
    assert example.check("rl", quota).allowed


def test_quota_metadata_is_carried(example: Engine) -> None:
    status = example.check("rl", [[("service", "service_2")]]).statuses[0]
    assert status.rule is not None
    assert status.rule.metadata == {"service_with_quota": {"name": "service_2"}}


def test_unspecified_value_with_detailed_metric(example: Engine) -> None:
    """integration-test/scripts/value-included-in-stats-key-when-unspecified.sh: 2 a minute
    per value (the statistics names it checks are Envoy's)."""
    assert [request(example, "/unspec", unspec="value1") for _ in range(3)] == [True, True, False]
    assert request(example, "/unspec", unspec="value2")


def test_mongo_example(store: MemoryStore) -> None:
    engine = Engine(store, rules=load_rules([EXAMPLES / "config.yaml"]))
    users = [engine.check("mongo_cps", [[("database", "users")]]).allowed for _ in range(501)]
    assert users == [True] * 500 + [False]
    assert engine.check("mongo_cps", [[("database", "other")]]).statuses[0].decision is None


ALWAYS_OVER = """
domain: d
descriptors:
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0, name: banned}
  - key: banned_quietly
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: pardon
    rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: banned}]}
"""


def test_requests_per_unit_zero_refuses_every_hit_without_counting(store: MemoryStore) -> None:
    rules = parse_rules(ALWAYS_OVER)
    (rule, *_) = rules
    assert (rule.limit, rule.unlimited, rule.always_over, rule.unit) == (
        None,
        False,
        True,
        "minute",
    )
    engine = Engine(store, rules=rules)
    for hits in (1, 5, 0):
        verdict = engine.check("d", [[("banned", "x")]], hits=hits)
        assert not verdict.allowed
        (status,) = verdict.statuses
        assert status.decision is not None
        decision = status.decision
        assert (decision.allowed, decision.limit, decision.remaining, decision.granted) == (
            False,
            0,
            0,
            0,
        )
        assert (decision.reset_after, decision.retry_after) == (0.0, inf)
        assert (status.limit, status.rule, status.remaining) == (None, rule, 0)
    # Among other descriptors (the engine's general path), and never in the store.
    verdict = engine.check("d", [[("banned", "x")], [("other", "z")]])
    assert [status.allowed for status in verdict.statuses] == [False, True]
    assert not verdict.allowed
    assert len(store) == 0


def test_requests_per_unit_zero_in_shadow_mode_is_allowed(store: MemoryStore) -> None:
    engine = Engine(store, rules=parse_rules(ALWAYS_OVER))
    verdict = engine.check("d", [[("banned_quietly", "x")]])
    (status,) = verdict.statuses
    assert (verdict.allowed, status.allowed, status.shadowed) == (True, True, True)


def test_requests_per_unit_zero_can_be_replaced(store: MemoryStore) -> None:
    engine = Engine(store, rules=parse_rules(ALWAYS_OVER))
    both = [[("banned", "x")], [("pardon", "y")]]
    verdicts = [engine.check("d", both) for _ in range(3)]
    assert [verdict.allowed for verdict in verdicts] == [True, True, False]
    assert verdicts[0].statuses[0].decision is None


def test_the_async_engine_refuses_alike(clock: FakeClock) -> None:
    async def main() -> list[bool]:
        engine = AsyncEngine(AsyncMemoryStore(clock=clock), rules=parse_rules(ALWAYS_OVER))
        requests = [[[("banned", "x")]], [[("banned", "x")], [("other", "z")]]]
        requests.append([[("banned", "x")], [("pardon", "y")]])
        answers = [(await engine.check("d", descriptors)).allowed for descriptors in requests]
        await engine.close()
        return answers

    assert asyncio.run(main()) == [False, False, True]


@pytest.mark.parametrize("field", ["algorithm: gcra", "burst: 5", "calendar: true"])
def test_requests_per_unit_zero_takes_no_counting_extension(field: str) -> None:
    text = "domain: d\ndescriptors: [{key: k, rate_limit: {unit: day, requests_per_unit: 0, "
    text += f"{field}}}}}]\n"
    with pytest.raises(ConfigError) as info:
        parse_rules(text, "f.yaml")
    name = field.split(":", maxsplit=1)[0]
    assert info.value.errors == [
        f"f.yaml: descriptors[0].rate_limit: '{name}' cannot be combined with "
        "'requests_per_unit: 0' (every hit is refused)"
    ]


QUOTA = """
domain: d
descriptors:
  - {key: q1, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: q2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: q3, quota_mode: true, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: q4, quota_mode: true, rate_limit: {unlimited: true}}
  - {key: plain, rate_limit: {unit: minute, requests_per_unit: 1}}
"""


def test_quota_mode_refuses_only_when_every_quota_descriptor_is_over(store: MemoryStore) -> None:
    engine = Engine(store, rules=parse_rules(QUOTA))

    def allowed(*keys: str) -> bool:
        return engine.check("d", [[(key, "v")] for key in keys]).allowed

    assert allowed("q1", "q2")
    assert allowed("q1", "q2")  # q1 over, q2 not
    assert not allowed("q1", "q2")  # both over
    assert not allowed("q1")  # a lone quota descriptor refuses as any other
    # An unlimited one is no quota descriptor; a shadowed one over the limit passes.
    assert not allowed("q1", "q4")
    assert allowed("q3")
    assert allowed("q1", "q3")
    # Over a limit outside quota mode refuses, whatever the quota descriptors say.
    assert allowed("plain")
    assert not allowed("plain", "q3")


SHARED = """
domain: d
descriptors:
  - {key: file, value: test1, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: file, value: test*, share_threshold: true,
     rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: path, value: test*, rate_limit: {unit: minute, requests_per_unit: 3}}
"""


def test_share_threshold_counts_every_matching_value_once(store: MemoryStore) -> None:
    engine = Engine(store, rules=parse_rules(SHARED))

    def allowed(key: str, value: str) -> bool:
        return engine.check("d", [[(key, value)]]).allowed

    shared = [allowed("file", value) for value in ("test2", "test23", "test123", "test4")]
    assert shared == [True, True, True, False]
    assert [allowed("file", "test1") for _ in range(2)] == [True, False]  # its own counter
    # Without share_threshold each value keeps its counter.
    assert [allowed("path", value) for value in ("test2", "test23", "test123", "test4")] == [
        True
    ] * 4


def test_a_limit_sent_in_an_unknown_domain_is_no_limit(store: MemoryStore) -> None:
    engine = Engine(store, rules=parse_rules(SHARED))
    sent = Descriptor((("user", "alice"),), limit=Limit(1, 60))
    for domain in ("elsewhere", "elsewhere"):
        verdict = engine.check(domain, [sent, sent])
        assert verdict.allowed
        assert [status.decision for status in verdict.statuses] == [None, None]
    assert len(store) == 0
    # In a known domain the sent limit counts, rule or none.
    assert [engine.check("d", [sent]).allowed for _ in range(2)] == [True, False]


def test_a_limit_sent_to_an_engine_without_rules_is_no_limit(store: MemoryStore) -> None:
    engine = Engine(store, rules=RuleSet.empty())
    sent = Descriptor((("user", "alice"),), limit=Limit(1, 60))
    assert all(engine.check("api", [sent]).allowed for _ in range(3))
    assert len(store) == 0
