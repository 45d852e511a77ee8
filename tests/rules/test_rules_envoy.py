"""Envoy's own rate-limit service configuration tests, ported.

The files under ``tests/fixtures/rules/envoy/`` are the test configurations of
github.com/envoyproxy/ratelimit, copied unchanged; each test below names the Go test of
``test/config/config_test.go`` it ports. A file the Go service loads must load here and match
as ``GetLimit`` does; a file it rejects must be rejected, with ratekeeper's own message where
the Go test asserts one. The Go assertions about statistics names (``Stats.Key``,
``detailed_metric``, ``value_to_metric``) have no counterpart: ratekeeper does not name
statistics per rule. What ``share_threshold`` changes in decisions (one counter for every
value a wildcard matches) is asserted through ``RuleSet.lookup`` here and through the engine in
``test_rules_envoy_decisions.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ratekeeper.core.errors import ConfigError
from ratekeeper.core.limits import Limit
from ratekeeper.rules import Rule, RuleSet, load_rules, parse_rules

ENVOY = Path(__file__).resolve().parent.parent / "fixtures" / "rules" / "envoy"
UNITS = "second, minute, hour, day, week, month, year"


def load(*names: str, merge_domains: bool = False) -> RuleSet:
    return load_rules([ENVOY / name for name in names], merge_domains=merge_domains)


def errors_of(*names: str, merge_domains: bool = False) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(*names, merge_domains=merge_domains)
    return [error.removeprefix(f"{ENVOY}/") for error in info.value.errors]


def limit_of(rules: RuleSet, domain: str, *entries: tuple[str, str]) -> Rule | None:
    return rules.match(domain, entries)


def test_every_envoy_fixture_is_ported() -> None:
    names = {path.name for path in ENVOY.glob("*.yaml")}
    assert names == set(LOADED) | set(REJECTED) | {"duplicate_domain.yaml"}


#: Files the Go service loads, and the number of rules in each.
LOADED = {
    "basic_config.yaml": 10,
    "merge_domain_key1.yaml": 1,
    "merge_domain_key2.yaml": 1,
    "metadata.yaml": 3,
    "shadowmode_config.yaml": 4,
    "share_threshold.yaml": 13,
    "wildcard.yaml": 6,
}


@pytest.mark.parametrize("name", sorted(LOADED))
def test_files_the_go_service_loads_load(name: str) -> None:
    rules = load(name)
    assert (len(rules), list(rules.domains)) == (LOADED[name], ["test-domain"])


def test_basic_config() -> None:
    """TestBasicConfig."""
    rules = load("basic_config.yaml")
    assert limit_of(rules, "foo_domain") is None
    assert limit_of(rules, "test-domain") is None
    assert limit_of(rules, "test-domain", ("key1", "something")) is None
    assert limit_of(rules, "test-domain", ("key1", "value1")) is None
    assert limit_of(rules, "test-domain", ("key2", "value2"), ("subkey", "subvalue")) is None
    assert limit_of(rules, "test-domain", ("key5", "value5"), ("subkey5", "subvalue")) is None

    def amount(*entries: tuple[str, str]) -> tuple[int, str | None, Limit | None]:
        rule = limit_of(rules, "test-domain", *entries)
        assert rule is not None
        return rule.requests_per_unit, rule.unit, rule.limit

    assert amount(("key1", "value1"), ("subkey1", "something")) == (5, "second", Limit(5, 1))
    assert amount(("key1", "value1"), ("subkey1", "subvalue1")) == (10, "second", Limit(10, 1))
    assert amount(("key2", "something")) == (20, "minute", Limit(20, 60))
    assert amount(("key2", "value2")) == (30, "minute", Limit(30, 60))
    assert limit_of(rules, "test-domain", ("key2", "value3")) is None  # whitelisted
    assert amount(("key3", "foo")) == (1, "hour", Limit(1, 3600))
    key3 = limit_of(rules, "test-domain", ("key3", "foo"))
    assert key3 is not None
    assert key3.name is None
    key4 = limit_of(rules, "test-domain", ("key4", "foo"))
    assert key4 is not None
    assert (key4.name, key4.unit, key4.requests_per_unit) == ("key4_rate_limit", "day", 1)
    key6 = limit_of(rules, "test-domain", ("key6", "foo"))
    assert key6 is not None
    assert (key6.unlimited, key6.limit) == (True, None)
    for value in ("unspecified_value", "another_value"):
        key7 = limit_of(rules, "test-domain", ("key7", value))
        assert key7 is not None
        assert (key7.requests_per_unit, key7.unit, key7.detailed_metric) == (70, "minute", True)


def test_domain_merge() -> None:
    """TestDomainMerge: with merging on, two files of one domain join one tree."""
    rules = load("merge_domain_key1.yaml", "merge_domain_key2.yaml", merge_domains=True)
    assert limit_of(rules, "foo_domain") is None
    assert limit_of(rules, "test-domain") is None
    key1 = limit_of(rules, "test-domain", ("key1", "value1"))
    key2 = limit_of(rules, "test-domain", ("key2", "value2"))
    assert key1 is not None
    assert key2 is not None
    assert (key1.requests_per_unit, key2.requests_per_unit) == (10, 20)
    assert [rule.path for rule in rules] == ["key1=value1", "key2=value2"]


def test_without_merging_a_second_file_of_a_domain_is_refused() -> None:
    assert errors_of("merge_domain_key1.yaml", "merge_domain_key2.yaml") == [
        "merge_domain_key2.yaml: domain: duplicate domain 'test-domain' "
        f"(already defined in {ENVOY / 'merge_domain_key1.yaml'})"
    ]


def test_config_limit_override_needs_a_known_domain() -> None:
    """TestConfigLimitOverride: the domain decides before the limit sent with the request.

    The engine's side (a sent limit counts only in a known domain) is in
    ``test_rules_envoy_decisions.py``; here, the rule the sent limit stands in for.
    """
    rules = load("basic_config.yaml")
    assert "foo_domain" not in rules.domains
    assert "test-domain" in rules.domains


# Files the Go service rejects: its message, and ratekeeper's (after "<file>: ").
REJECTED = {
    # TestEmptyDomain: "config file cannot have empty domain"
    "empty_domain.yaml": ["missing 'domain'"],
    # TestEmptyKey: "descriptor has empty key"
    "empty_key.yaml": ["descriptors[0]: missing 'key'"],
    # TestDuplicateKey: "duplicate descriptor composite key 'test-domain.key1_value1'"
    "duplicate_key.yaml": [
        "descriptors[1]: duplicate descriptor composite key 'test-domain.key1_value1' "
        "(already defined at descriptors[0])"
    ],
    # TestBadLimitUnit: "invalid rate limit unit 'foo'"
    "bad_limit_unit.yaml": [
        f"descriptors[0].rate_limit.unit: invalid unit 'foo'; expected one of {UNITS}"
    ],
    # TestReplacesSelf: "replaces should not contain name of same descriptor"
    "replaces_self.yaml": [
        "descriptors[0].descriptors[0].rate_limit.replaces[0].name: "
        "a rule cannot replace itself ('self' is its name)"
    ],
    # TestReplacesEmpty: "should not have an empty replaces entry"
    "replaces_empty.yaml": [
        "descriptors[0].descriptors[0].rate_limit.replaces[0].name: empty name in replaces entry"
    ],
    # TestBadYaml: "error loading config file: yaml: line 2: found unexpected end of stream"
    "bad_yaml.yaml": [
        "line 2, column 1: invalid YAML: while scanning a quoted scalar: "
        "found unexpected end of stream"
    ],
    # TestMisspelledKey: "config error, unknown key 'ratelimit'"
    "misspelled_key.yaml": [
        "descriptors[0].ratelimit: unknown key 'ratelimit'; did you mean 'rate_limit'?"
    ],
    # TestMisspelledKey: "config error, unknown key 'requestsperunit'"
    "misspelled_key2.yaml": [
        "descriptors[0].rate_limit.requestsperunit: unknown key 'requestsperunit'; "
        "did you mean 'requests_per_unit'?",
        "descriptors[0].rate_limit: missing 'requests_per_unit'",
    ],
    # TestNonStringKey: "config error, key is not of type string: 0.25"
    "non_string_key.yaml": ["a key must be a string, got a number 0.25", "missing 'domain'"],
    # TestNonMapList: "config error, yaml file contains list of type other than map: a"
    "non_map_list.yaml": [
        f"descriptors[{index}]: expected a descriptor (a mapping), got a string '{value}'"
        for index, value in enumerate("abc")
    ],
    # TestUnlimitedWithRateLimitUnit: "should not specify rate limit unit when unlimited"
    "unlimited_with_unit.yaml": [
        "descriptors[0].rate_limit: 'unit' cannot be combined with 'unlimited: true'"
    ],
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_files_the_go_service_rejects_are_rejected(name: str) -> None:
    assert errors_of(name) == [f"{name}: {message}" for message in REJECTED[name]]


def test_duplicate_domain() -> None:
    """TestDuplicateDomain: "duplicate domain 'test-domain' in config file"."""
    assert errors_of("basic_config.yaml", "duplicate_domain.yaml") == [
        "duplicate_domain.yaml: domain: duplicate domain 'test-domain' "
        f"(already defined in {ENVOY / 'basic_config.yaml'})"
    ]


def test_duplicate_key_domain_merge() -> None:
    """TestDuplicateKeyDomainMerge: merging a file with itself defines its descriptors twice."""
    assert errors_of("merge_domain_key1.yaml", "merge_domain_key1.yaml", merge_domains=True) == [
        "merge_domain_key1.yaml: descriptors[0]: duplicate descriptor composite key "
        f"'test-domain.key1_value1' (already defined in {ENVOY / 'merge_domain_key1.yaml'} "
        "at descriptors[0])"
    ]


def test_shadow_mode_config() -> None:
    """TestShadowModeConfig."""
    rules = load("shadowmode_config.yaml")
    cases = [
        ([("key1", "value1"), ("subkey1", "something")], 5, "second", False),
        ([("key1", "value1"), ("subkey1", "subvalue1")], 10, "second", True),
        ([("key2", "something")], 20, "minute", True),
        ([("key2", "value2")], 30, "minute", False),
    ]
    for entries, amount, unit, shadow in cases:
        rule = rules.match("test-domain", entries)
        assert rule is not None
        assert (rule.requests_per_unit, rule.unit, rule.shadow_mode) == (amount, unit, shadow)


def test_wildcard_config() -> None:
    """TestWildcardConfig."""
    rules = load("wildcard.yaml")

    def rule(key: str, value: str) -> Rule | None:
        return rules.match("test-domain", [(key, value)])

    # A bare key matches every value, one rule for all.
    assert rule("noVal", "foo1") is not None
    assert rule("noVal", "foo1") is rule("noVal", "foo2")
    # A trailing wildcard, at the top and nested.
    assert rule("wild", "foo1") is not None
    assert rule("wild", "foo1") is rule("wild", "foo2")
    nested = rules.match("test-domain", [("nestedWild", "val1"), ("wild", "goo2")])
    assert nested is not None
    assert nested.path == "nestedWild=val1/wild=goo*"
    assert rule("wild", "bar") is None
    assert rule("noWild", "foo1") is None  # a value without "*" does not match eagerly
    # A wildcard in the middle: prefix and suffix, "*" matching the empty text too.
    assert rule("midWild", "barab") is not None
    assert rule("midWild", "barab") is rule("midWild", "bar123b")
    assert rule("midWild", "barb") is not None
    assert rule("midWild", "bara") is None
    assert rule("midWild", "xbarb") is None
    # Several wildcards: every part, in order.
    assert rule("multiWild", "foo123bar456baz") is not None
    assert rule("multiWild", "foo123bar456baz") is rule("multiWild", "foobarbaz")
    assert rule("multiWild", "foo123baz") is None
    assert rule("multiWild", "bar456baz") is None


def inline(descriptors: str, domain: str = "test-domain") -> RuleSet:
    return parse_rules(f"domain: {domain}\ndescriptors:\n{descriptors}", "inline.yaml")


def test_wildcard_stats_behaviour_configs_load_and_match() -> None:
    """TestWildcardStatsBehavior: every flag combination loads and matches alike (the stats
    names it asserts are Envoy's own)."""
    for flags in ("", "value_to_metric: true", "share_threshold: true",
                  "share_threshold: true, value_to_metric: true"):  # fmt: skip
        for pattern in ("foo*", "foo*bar*"):
            rules = inline(
                f"  - {{key: wild, value: '{pattern}', {flags}{', ' if flags else ''}\n"
                "     rate_limit: {requests_per_unit: 20, unit: minute}}\n"
            )
            rule = rules.match("test-domain", [("wild", "foo123bar456")])
            assert rule is not None
            assert rule.requests_per_unit == 20
    rules = inline(
        "  - key: wild\n    value: foo*\n    descriptors:\n"
        "      - key: other\n        value_to_metric: true\n        descriptors:\n"
        "          - {key: limit, rate_limit: {requests_per_unit: 20, unit: minute}}\n"
    )
    entries = [("wild", "foo1"), ("other", "bar"), ("limit", "X")]
    assert rules.lookup("test-domain", entries) == (rules.match("test-domain", entries), entries)


DETAILED = """\
  - key: key_1
    detailed_metric: true
    rate_limit: {requests_per_unit: 500, unit: minute}
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {requests_per_unit: 500, unit: minute}
  - key: key_2
    detailed_metric: true
    rate_limit: {requests_per_unit: 5000, unit: minute}
    descriptors:
      - {key: key_3, detailed_metric: true}
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {requests_per_unit: 5, unit: minute}
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: {requests_per_unit: 50000, unit: minute}
    descriptors:
      - {key: key_3, detailed_metric: true}
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {requests_per_unit: 100, unit: minute}
"""


@pytest.mark.parametrize(
    ("entries", "amount"),
    [
        ([("key_1", "value-for-key-1")], 500),
        ([("key_2", "key-2-value")], 5000),
        ([("key_2", "key-2-value"), ("key_3", "requested-key3-value")], 5),
        ([("key_2", "specific-id"), ("key_3", "requested-key3-value")], 100),
    ],
)
def test_detailed_metric(entries: list[tuple[str, str]], amount: int) -> None:
    """TestDetailedMetric: detailed_metric names statistics only; matching is unchanged."""
    rule = inline(DETAILED, "nested").match("nested", entries)
    assert rule is not None
    assert rule.requests_per_unit == amount


VALUE_TO_METRIC = """\
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {requests_per_unit: 60, unit: minute}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {requests_per_unit: 30, unit: minute}
"""


@pytest.mark.parametrize(
    ("entries", "amount"),
    [
        ([("route", "draw"), ("http_method", "GET"), ("subject_id", "123")], 60),
        ([("route", "api"), ("http_method", "POST"), ("subject_id", "user456")], 30),
        ([("route", ""), ("http_method", ""), ("subject_id", "123")], 60),
    ],
)
def test_value_to_metric(entries: list[tuple[str, str]], amount: int) -> None:
    """TestValueToMetric_*: value_to_metric names statistics only; matching is unchanged."""
    rules = inline(VALUE_TO_METRIC)
    rule, counted = rules.lookup("test-domain", entries)
    assert rule is not None
    assert rule.requests_per_unit == amount
    assert counted is entries  # each value keeps its own counter


def test_metadata() -> None:
    """TestMetadata: metadata is carried with the rule as written, and changes nothing else:
    the domain loads, an empty descriptor matches nothing, ``key1_value1.subkey1`` is 5 a
    second with ``{name: service_1}``, ``key2`` 20 a minute with ``{service_with_quota: {name:
    service_2}}`` (an object inside the object), and a rule without metadata has none."""
    rules = load("metadata.yaml")
    assert list(rules.domains) == ["test-domain"]
    assert rules.match("test-domain", []) is None
    subkey = rules.match("test-domain", [("key1", "value1"), ("subkey1", "something")])
    key2 = rules.match("test-domain", [("key2", "something")])
    plain = rules.match("test-domain", [("key1", "value1"), ("subkey1", "subvalue1")])
    assert subkey is not None
    assert key2 is not None
    assert plain is not None
    assert (subkey.requests_per_unit, subkey.unit, subkey.metadata) == (
        5,
        "second",
        {"name": "service_1"},
    )
    assert (key2.requests_per_unit, key2.unit, key2.metadata) == (
        20,
        "minute",
        {"service_with_quota": {"name": "service_2"}},
    )
    assert (plain.requests_per_unit, plain.metadata) == (10, None)


def test_metadata_comes_back_in_the_answer_as_the_reference_builds_it() -> None:
    """The same file's metadata in Envoy's answer (``RESPONSE_DYNAMIC_METADATA``): each
    passing descriptor's rule's, the first one's winning."""
    from ratekeeper import Engine
    from ratekeeper.wire.translate import Call, WireDescriptor, decide

    engine = Engine(rules=load("metadata.yaml"))
    subkey = WireDescriptor((("key1", "value1"), ("subkey1", "something")))
    key2 = WireDescriptor((("key2", "something"),))
    found = decide(engine, Call("test-domain", (subkey, key2)), metadata=True).metadata
    assert found == {
        "domain": "test-domain",
        "descriptors": [
            {"entries": ["key1=value1", "subkey1=something"]},
            {"entries": ["key2=something"]},
        ],
        "metadata": {"name": "service_1", "service_with_quota": {"name": "service_2"}},
    }


SHARE = load("share_threshold.yaml")


@pytest.mark.parametrize(
    ("entries", "amount", "counted"),
    [
        # Case 1: every value under "files/*" counts as "files/*".
        ([("files", "files/a.pdf")], 100, [("files", "files/*")]),
        ([("files", "files/c.txt")], 100, [("files", "files/*")]),
        # Case 2: with value_to_metric, and below the wildcard.
        ([("route", "api/v1"), ("method", "GET")], 60, [("route", "api/*"), ("method", "GET")]),
        ([("service", "svc/user"), ("endpoint", "get")], 80, [("service", "svc/*"),
                                                              ("endpoint", "get")]),
        # Case 3: nested wildcards, with and without share_threshold.
        ([("nested", "parent"), ("files", "nested/file1.txt")], 200,
         [("nested", "parent"), ("files", "nested/*")]),
        ([("files", "top/file1.txt"), ("files", "nested/file1.txt")], 300,
         [("files", "top/*"), ("files", "nested/*")]),
        ([("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")], 120,
         [("path", "path/*"), ("file", "file/doc1"), ("type", "pdf")]),
        ([("user", "user/alice"), ("resource", "res/file1"), ("action", "read")], 150,
         [("user", "user/*"), ("resource", "res/*"), ("action", "read")]),
        # Case 4: an exact value keeps its own counter; the wildcard's values share one.
        ([("file", "test1")], 50, [("file", "test1")]),
        ([("file", "test23")], 100, [("file", "test*")]),
        # Cases 5 to 8: wildcards in the middle, several of them, nested.
        ([("midpath", "/api-beta-v1")], 100, [("midpath", "/api*v1")]),
        ([("multiroute", "svceprpc")], 50, [("multiroute", "svc*ep*rpc")]),
        ([("midroute", "/api/v2")], 80, [("midroute", "/api*v2")]),
        ([("tenant", "t99prod"), ("resource", "resBBBv2")], 60,
         [("tenant", "t*prod"), ("resource", "res*v2")]),
    ],
)  # fmt: skip
def test_share_threshold(
    entries: list[tuple[str, str]], amount: int, counted: list[tuple[str, str]]
) -> None:
    """TestShareThreshold: ShareThresholdKeyPattern is the value each entry counts under."""
    rule, shared = SHARE.lookup("test-domain", entries)
    assert rule is not None
    assert rule.requests_per_unit == amount
    assert list(shared) == counted


def test_share_threshold_non_matching_values() -> None:
    assert SHARE.match("test-domain", [("midpath", "/api/v2")]) is None
    assert SHARE.match("test-domain", [("multiroute", "svcABCrpc")]) is None


def test_share_threshold_needs_a_wildcard() -> None:
    with pytest.raises(ConfigError) as info:
        inline(
            "  - {key: files, value: plain, share_threshold: true,\n"
            "     rate_limit: {unit: minute, requests_per_unit: 1}}\n"
        )
    assert info.value.errors == [
        "inline.yaml: descriptors[0].share_threshold: share_threshold applies only to a "
        "wildcard (a key or value with '*'), not to 'files_plain'"
    ]
