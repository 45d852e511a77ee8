"""How a request's descriptors find their rule: Envoy's rate-limit service semantics."""

from __future__ import annotations

import re
import threading
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.limits import Limit
from ratekeeper.rules import Rule, RuleSet, load_rules, parse_rules
from ratekeeper.rules.model import wildcard_test

EXAMPLE = Path(__file__).resolve().parent.parent / "fixtures" / "rules" / "envoy_example.yaml"

RULES = parse_rules(
    """
domain: api
descriptors:
  - key: user
    value: alice
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    value: a*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    value: "*e"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: user
        value: bob
        rate_limit: {unit: minute, requests_per_unit: 6}
      - key: user
        value: b*
        rate_limit: {unit: minute, requests_per_unit: 7}
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 8}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 9}
  - key: free
  - key: plan
    value: gold
    rate_limit: {unit: second, unlimited: false, requests_per_unit: 10}
    shadow_mode: true
  - key: plan
    value: internal
    rate_limit: {unlimited: true}
  - key: group
    descriptors:
      - key: member
  - key: quota
    value: q1
    rate_limit: {unit: day, requests_per_unit: 100, name: daily}
  - key: quota
    value: q2
    rate_limit: {unit: hour, requests_per_unit: 10, replaces: [{name: daily}]}
  - key: quota
    value: q3
    rate_limit: {unlimited: true, replaces: [{name: daily}, {name: hourly}]}
  - key: quota
    value: q4
    rate_limit: {unit: hour, requests_per_unit: 5, name: hourly}
""",
    "api.yaml",
)


def amount(domain: str, *entries: tuple[str, str]) -> int | None:
    rule = RULES.match(domain, entries)
    return None if rule is None else rule.requests_per_unit


def test_exact_value_beats_wildcard_beats_bare_key() -> None:
    assert amount("api", ("user", "alice")) == 1
    assert amount("api", ("user", "anna")) == 2
    assert amount("api", ("user", "eve")) == 3
    assert amount("api", ("user", "zed")) == 4


def test_first_matching_wildcard_in_file_order_wins() -> None:
    # "amie" matches both "a*" and "*e"; "a*" comes first in the file.
    assert amount("api", ("user", "amie")) == 2


def test_wildcard_matches_an_empty_remainder() -> None:
    assert amount("api", ("user", "a")) == 2


def test_precedence_holds_at_nested_levels() -> None:
    assert amount("api", ("tenant", "acme"), ("user", "bob")) == 6
    assert amount("api", ("tenant", "acme"), ("user", "bill")) == 7
    assert amount("api", ("tenant", "acme"), ("user", "carol")) == 8
    # Another tenant falls back to the bare "tenant" descriptor.
    assert amount("api", ("tenant", "other"), ("user", "bob")) == 9


def test_limit_applies_only_at_the_last_entry() -> None:
    assert amount("api", ("tenant", "acme")) == 5
    # The request is deeper than the rule: no limit.
    assert amount("api", ("user", "alice"), ("extra", "x")) is None
    # The request stops above the rule: the bare "tenant" descriptor has no rate_limit.
    assert amount("api", ("tenant", "other")) is None
    # Deeper than the tree on a branch with children.
    assert amount("api", ("tenant", "acme"), ("user", "bob"), ("extra", "x")) is None


def test_no_match_at_a_level_gives_none() -> None:
    assert amount("api", ("nobody", "x")) is None
    assert amount("api", ("tenant", "acme"), ("device", "d1")) is None
    assert amount("api") is None


def test_descriptor_without_rate_limit_or_children_whitelists() -> None:
    assert RULES.match("api", [("free", "anything")]) is None
    assert RULES.match("api", [("group", "g"), ("member", "m")]) is None


def test_unlimited_rule_has_no_limit() -> None:
    rule = RULES.match("api", [("plan", "internal")])
    assert rule is not None
    assert (rule.unlimited, rule.limit, rule.requests_per_unit, rule.unit) == (True, None, 0, None)


def test_shadow_mode_is_carried() -> None:
    rule = RULES.match("api", [("plan", "gold")])
    assert rule is not None
    assert rule.shadow_mode
    assert rule.limit == Limit(10, 1)
    shadowless = RULES.match("api", [("user", "alice")])
    assert shadowless is not None
    assert not shadowless.shadow_mode


def test_unknown_domain_gives_none() -> None:
    assert RULES.match("elsewhere", [("user", "alice")]) is None
    assert RULES.resolve("elsewhere", [[("user", "alice")], []]) == [None, None]


def test_resolve_matches_each_descriptor_in_order() -> None:
    descriptors = [[("user", "alice")], [("free", "x")], [("tenant", "acme"), ("user", "bob")]]
    assert [rule and rule.requests_per_unit for rule in RULES.resolve("api", descriptors)] == [
        1,
        None,
        6,
    ]


def test_replaces_drops_the_replaced_limit() -> None:
    daily, hourly = RULES.resolve("api", [[("quota", "q1")], [("quota", "q2")]])
    assert daily is None
    assert hourly is not None
    assert hourly.requests_per_unit == 10
    # Without the replacing rule in the same request, the named rule stays.
    (alone,) = RULES.resolve("api", [[("quota", "q1")]])
    assert alone is not None
    assert alone.name == "daily"


def test_unlimited_rule_replaces_too_and_order_does_not_matter() -> None:
    rules = RULES.resolve("api", [[("quota", "q4")], [("quota", "q3")], [("quota", "q1")]])
    assert [rule and rule.path for rule in rules] == [None, "quota=q3", None]


def test_match_does_not_apply_replaces() -> None:
    rule = RULES.match("api", [("quota", "q1")])
    assert rule is not None
    assert rule.name == "daily"


def test_envoy_example_matches_as_envoy_does() -> None:
    rules = load_rules([EXAMPLE])

    def rule(*entries: tuple[str, str]) -> Rule | None:
        return rules.match("envoy_example", entries)

    marketing = rule(("message_type", "marketing"), ("to_number", "2061234567"))
    assert marketing is not None
    assert marketing.limit == Limit(5, 86_400)
    other = rule(("to_number", "2061234567"))
    assert other is not None
    assert other.requests_per_unit == 100
    assert rule(("message_type", "transactional"), ("to_number", "1")) is None
    assert rule(("remote_address", "10.0.0.2")) is None  # whitelisted
    unlimited = rule(("remote_address", "10.0.0.1"))
    assert unlimited is not None
    assert unlimited.unlimited
    api = rule(("path", "/api/v1/users/health"))
    assert api is not None
    assert api.requests_per_unit == 60  # "/api/v1/*" comes first
    health = rule(("path", "/api/v2/health"))
    assert health is not None
    assert health.requests_per_unit == 1000
    assert rule(("path", "/static/x")) is None
    status = rule(("status", "429"))
    assert status is not None
    assert status.unit == "month"
    replaced = rules.resolve(
        "envoy_example",
        [[("key1", "value1"), ("subkey1", "x")], [("key1", "value1"), ("subkey2", "y")]],
    )
    assert [r and r.path for r in replaced] == [None, "key1=value1/subkey2"]
    wildcard = rule(("key1", "value2"), ("subkey1", "anything"))
    assert wildcard is not None
    assert wildcard.path == "key1/subkey1=*"


def test_several_domains_are_kept_apart(tmp_path: Path) -> None:
    rule = "descriptors: [{key: user, rate_limit: {unit: second, requests_per_unit: %d}}]"
    (tmp_path / "one.yaml").write_text("domain: one\n" + rule % 1)
    (tmp_path / "two.yaml").write_text("domain: two\n" + rule % 2)
    rules = load_rules([tmp_path])
    one, two = rules.match("one", [("user", "u")]), rules.match("two", [("user", "u")])
    assert one is not None
    assert two is not None
    assert (one.domain, one.requests_per_unit, two.domain, two.requests_per_unit) == (
        "one",
        1,
        "two",
        2,
    )


def test_match_is_safe_from_many_threads() -> None:
    expected = [amount("api", ("user", name)) for name in ("alice", "anna", "eve", "zed")]
    results: list[list[int | None]] = []

    def work() -> None:
        for _ in range(500):
            got = [amount("api", ("user", name)) for name in ("alice", "anna", "eve", "zed")]
            results.append(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 2000


def test_rule_set_is_read_only() -> None:
    try:
        RULES.domains["new"] = {}  # type: ignore[index]
    except TypeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("domains must not be writable")
    assert "new" not in RULES.domains


def reference_match(pattern: str, value: str) -> bool:
    """``*`` matches any run of characters, everything else itself; plain recursion."""

    @cache
    def go(p: int, v: int) -> bool:
        if p == len(pattern):
            return v == len(value)
        if pattern[p] == "*":
            return go(p + 1, v) or (v < len(value) and go(p, v + 1))
        return v < len(value) and pattern[p] == value[v] and go(p + 1, v + 1)

    return go(0, 0)


PATTERN_TEXT = st.text(alphabet="ab.*?[\\\n", max_size=8)
VALUE_TEXT = st.text(alphabet="ab.*?[\\\n", max_size=10)


@settings(max_examples=300, deadline=None)
@given(PATTERN_TEXT, VALUE_TEXT)
def test_wildcard_matches_like_the_reference(pattern: str, value: str) -> None:
    assert wildcard_test(pattern)(value) == reference_match(pattern, value)


@settings(deadline=None)
@given(st.lists(st.text(alphabet="ab*", min_size=1, max_size=4), max_size=5), VALUE_TEXT)
def test_match_picks_exact_then_first_wildcard_then_bare(patterns: list[str], value: str) -> None:
    unique = list(dict.fromkeys(patterns))
    rule = "  - {key: k, value: '%s', rate_limit: {unit: second, requests_per_unit: %d}}"
    lines = [rule % (p, i) for i, p in enumerate(unique, start=1)]
    lines.append("  - {key: k, rate_limit: {unit: second, requests_per_unit: 999}}")
    rules = parse_rules("domain: d\ndescriptors:\n" + "\n".join(lines) + "\n")
    if value in unique:  # as in Envoy, even a wildcard is found by its own text first
        expected = unique.index(value) + 1
    else:
        wild = [i for i, p in enumerate(unique, start=1) if "*" in p and reference_match(p, value)]
        expected = wild[0] if wild else 999
    rule = rules.match("d", [("k", value)])
    assert rule is not None
    assert rule.requests_per_unit == expected


def test_empty_rule_set_matches_nothing() -> None:
    assert RuleSet.empty().resolve("api", [[("user", "alice")]]) == [None]
    assert re.fullmatch(r"<RuleSet 0 rules in 0 domains>", repr(RuleSet.empty()))


def test_the_repr_counts_one_rule_and_one_domain_in_the_singular() -> None:
    one = parse_rules(
        "domain: d\ndescriptors:\n  - key: k\n"
        "    rate_limit: {unit: second, requests_per_unit: 1}\n"
    )
    assert repr(one) == "<RuleSet 1 rule in 1 domain>"


def test_the_example_in_the_docs_behaves_as_documented() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
    text = docs.read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    rules = parse_rules(text, "rules.md")
    user = rules.match("api", [("generic_key", "default"), ("user", "bob")])
    alice = rules.match("api", [("generic_key", "default"), ("user", "alice")])
    robot = rules.match("api", [("generic_key", "default"), ("user", "robot-7")])
    login = rules.match("api", [("path", "/login")])
    assert user is not None
    assert alice is not None
    assert robot is not None
    assert login is not None
    assert (user.requests_per_unit, alice.requests_per_unit, robot.unlimited) == (100, 1000, True)
    assert login.shadow_mode
    assert rules.match("api", [("path", "/health")]) is None
    upload, premium = rules.resolve("api", [[("upload", "u1")], [("plan", "premium")]])
    assert upload is None
    assert premium is not None
    assert premium.requests_per_unit == 100


COMPOSED = parse_rules(
    """
domain: d
descriptors:
  - {key: wild, value: foo*, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: a_b, rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: us*, rate_limit: {unit: second, requests_per_unit: 3}}
  - {key: v, value: 1.*, rate_limit: {unit: second, requests_per_unit: 4}}
  - {key: blank_, rate_limit: {unit: second, requests_per_unit: 5}}
  - {key: blank, rate_limit: {unit: second, requests_per_unit: 6}}
""",
    "composed.yaml",
)


def composed_amount(*entries: tuple[str, str]) -> int | None:
    rule = COMPOSED.match("d", entries)
    return None if rule is None else rule.requests_per_unit


def test_matching_composes_each_entry_as_key_underscore_value_as_envoy_does() -> None:
    # A wildcard tests the composed "key_value", so "_" and "." in values are plain text...
    assert composed_amount(("wild", "foo1")) == 1
    assert composed_amount(("wild", "foo_bar.baz")) == 1
    # ...and a key that carries the start of the value matches too: "wild_foo_bar".
    assert composed_amount(("wild_foo", "bar")) == 1
    assert composed_amount(("wild_foo", "")) == 1
    assert composed_amount(("wil", "d_foo")) is None
    # A descriptor without a value is found by its key, and by any entry composing to it.
    assert composed_amount(("a", "b")) == 2
    assert composed_amount(("a_b", "anything")) == 2
    # A "*" in a key is a wildcard as well.
    assert composed_amount(("user", "x")) == 3
    assert composed_amount(("us", "")) == 3
    assert composed_amount(("v", "1.5")) == 4
    assert composed_amount(("v", "15")) is None
    # An empty value composes to "key_": that exact key first, else the bare key.
    assert composed_amount(("blank", "")) == 5
    assert composed_amount(("blank", "x")) == 6


def test_two_descriptors_composing_to_one_key_are_duplicates() -> None:
    text = "domain: d\ndescriptors:\n  - {key: a, value: b}\n  - {key: a_b}\n"
    with pytest.raises(ConfigError) as info:
        parse_rules(text, "f.yaml")
    assert info.value.errors == [
        "f.yaml: descriptors[1]: duplicate descriptor composite key 'd.a_b' "
        "(already defined at descriptors[0])"
    ]


@settings(max_examples=300, deadline=None)
@given(PATTERN_TEXT, VALUE_TEXT)
def test_wildcard_matches_like_a_regular_expression(pattern: str, value: str) -> None:
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    assert wildcard_test(pattern)(value) == bool(re.fullmatch(regex, value, re.DOTALL))
