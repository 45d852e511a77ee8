"""The names of the per-descriptor statistics, as envoyproxy/ratelimit's config tests assert them.

Each case is one of ``test/config/config_test.go``'s (``TestBasicConfig``,
``TestWildcardConfig``, ``TestDetailedMetric``, ``TestValueToMetric_*``, ``TestShareThreshold``,
``TestWildcardStatsBehavior``), over the fixture copies of its files where it loads one and its
descriptors written as YAML where it builds them in Go.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ratekeeper.rules import load_rules, parse_rules
from ratekeeper.rules.stat_keys import rule_key, sanitized, sent_key, stat_key

ENVOY = Path(__file__).resolve().parent.parent / "fixtures" / "rules" / "envoy"


@pytest.mark.parametrize(
    ("entries", "key"),
    [
        ((("key1", "value1"), ("subkey1", "something")), "test-domain.key1_value1.subkey1"),
        (
            (("key1", "value1"), ("subkey1", "subvalue1")),
            "test-domain.key1_value1.subkey1_subvalue1",
        ),
        ((("key2", "something"),), "test-domain.key2"),
        ((("key2", "value2"),), "test-domain.key2_value2"),
        ((("key1", "something"),), None),
        ((("key1", "value1"),), None),  # no rate_limit at that level
        ((("key2", "value2"), ("subkey", "subvalue")), None),  # deeper than the rule
    ],
)
def test_basic_config(entries: tuple[tuple[str, str], ...], key: str | None) -> None:
    rules = load_rules([ENVOY / "basic_config.yaml"])
    assert stat_key(rules, "test-domain", entries) == key
    assert stat_key(rules, "foo_domain", entries) is None


@pytest.mark.parametrize(
    ("entries", "key"),
    [
        ((("noVal", "foo1"),), "test-domain.noVal"),
        ((("wild", "foo1"),), "test-domain.wild_foo*"),
        ((("wild", "foo2"),), "test-domain.wild_foo*"),
        ((("nestedWild", "val1"), ("wild", "goo2")), "test-domain.nestedWild_val1.wild_goo*"),
        ((("midWild", "barab"),), "test-domain.midWild_bar*b"),
        ((("midWild", "bar123b"),), "test-domain.midWild_bar*b"),
        ((("multiWild", "foo123bar456baz"),), "test-domain.multiWild_foo*bar*baz"),
        ((("wild", "bar"),), None),
        ((("midWild", "xbarb"),), None),
    ],
)
def test_wildcards_keep_their_pattern(entries: tuple[tuple[str, str], ...], key: str) -> None:
    assert stat_key(load_rules([ENVOY / "wildcard.yaml"]), "test-domain", entries) == key


@pytest.mark.parametrize(
    ("entries", "key"),
    [
        ((("files", "files/a.txt"),), "test-domain.files_files/*"),
        ((("route", "api/v1"), ("method", "GET")), "test-domain.route_api/*.method"),
        ((("service", "svc/user"), ("endpoint", "get")), "test-domain.service_svc/*.endpoint_get"),
        (
            (("nested", "parent"), ("files", "nested/file1.txt")),
            "test-domain.nested_parent.files_nested/*",
        ),
        (
            (("files", "top/file1.txt"), ("files", "nested/file1.txt")),
            "test-domain.files_top/*.files_nested/*",
        ),
        (
            (("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")),
            "test-domain.path_path/*.file_file/*.type",
        ),
        (
            (("user", "user/alice"), ("resource", "res/file1"), ("action", "read")),
            "test-domain.user_user/*.resource_res/*.action",
        ),
        ((("file", "test1"),), "test-domain.file_test1"),
        ((("file", "test2"),), "test-domain.file_test*"),
    ],
)
def test_share_threshold(entries: tuple[tuple[str, str], ...], key: str) -> None:
    assert stat_key(load_rules([ENVOY / "share_threshold.yaml"]), "test-domain", entries) == key


NESTED = """
domain: nested
descriptors:
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
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {requests_per_unit: 5, unit: minute}
"""


@pytest.mark.parametrize(
    ("text", "entries", "key"),
    [
        (
            "domain: nested\ndescriptors:\n  - key: key-1\n    detailed_metric: {detailed}\n"
            "    rate_limit: {{requests_per_unit: 100, unit: minute}}\n    descriptors:\n"
            "      - key: key-2\n        rate_limit: {{requests_per_unit: 5, unit: minute}}\n",
            (("key-1", "value-1"),),
            {True: "nested.key-1_value-1", False: "nested.key-1"},
        ),
        (
            "domain: nested\ndescriptors:\n  - key: key-1\n    detailed_metric: {detailed}\n"
            "    rate_limit: {{requests_per_unit: 100, unit: minute}}\n    descriptors:\n"
            "      - key: key-2\n        detailed_metric: {detailed}\n"
            "        rate_limit: {{requests_per_unit: 5, unit: minute}}\n",
            (("key-1", "value-1"), ("key-2", "value-2")),
            {True: "nested.key-1_value-1.key-2_value-2", False: "nested.key-1.key-2"},
        ),
    ],
)
def test_detailed_metric_names_the_request(
    text: str, entries: tuple[tuple[str, str], ...], key: dict[bool, str]
) -> None:
    for detailed in (True, False):
        rules = parse_rules(text.format(detailed=str(detailed).lower()))
        assert stat_key(rules, "nested", entries) == key[detailed]


@pytest.mark.parametrize(
    ("entries", "key"),
    [
        ((("key_1", "value-for-key-1"),), "nested.key_1_value-for-key-1"),
        ((("key_2", "key-2-value"),), "nested.key_2_key-2-value"),
        (
            (("key_2", "key-2-value"), ("key_3", "requested-key3-value")),
            "nested.key_2_key-2-value.key_3_requested-key3-value",
        ),
    ],
)
def test_detailed_metric_nested(entries: tuple[tuple[str, str], ...], key: str) -> None:
    assert stat_key(parse_rules(NESTED), "nested", entries) == key


def _three(route: str, method: str, subject: str) -> str:
    return (
        "domain: domain\ndescriptors:\n"
        f"  - key: route\n{route}    descriptors:\n"
        f"      - key: http_method\n{method}        descriptors:\n"
        f"          - key: subject_id\n{subject}"
        "            rate_limit: {requests_per_unit: 60, unit: minute}\n"
    )


VALUED = "    value_to_metric: true\n"
DEEP_VALUED = "        value_to_metric: true\n"
DETAILED = "            detailed_metric: true\n"


@pytest.mark.parametrize(
    ("text", "entries", "key"),
    [
        (
            _three(VALUED, DEEP_VALUED, ""),
            (("route", "draw"), ("http_method", "GET"), ("subject_id", "123")),
            "domain.route_draw.http_method_GET.subject_id",
        ),
        (
            _three(VALUED, DEEP_VALUED, DETAILED),
            (("route", "draw"), ("http_method", "GET"), ("subject_id", "123")),
            "domain.route_draw.http_method_GET.subject_id_123",
        ),
        (
            _three(VALUED, DEEP_VALUED, ""),
            (("route", ""), ("http_method", "GET"), ("subject_id", "123")),
            "domain.route.http_method_GET.subject_id",
        ),
        (
            _three(VALUED, DEEP_VALUED, ""),
            (("route", "draw"), ("http_method", ""), ("subject_id", "123")),
            "domain.route_draw.http_method.subject_id",
        ),
        (
            _three("", DEEP_VALUED, ""),
            (("route", "X"), ("http_method", "Y"), ("subject_id", "Z")),
            "domain.route.http_method_Y.subject_id",
        ),
        (
            _three("", "", ""),
            (("route", "X"), ("http_method", "Y"), ("subject_id", "Z")),
            "domain.route.http_method.subject_id",
        ),
    ],
)
def test_value_to_metric(text: str, entries: tuple[tuple[str, str], ...], key: str) -> None:
    assert stat_key(parse_rules(text), "domain", entries) == key


def test_value_to_metric_with_configured_values_and_wildcards() -> None:
    configured = parse_rules(
        "domain: test-domain\ndescriptors:\n  - key: route\n    value_to_metric: true\n"
        "    descriptors:\n"
        "      - key: http_method\n        value: GET\n        value_to_metric: true\n"
        "        descriptors:\n          - key: subject_id\n"
        "            rate_limit: {requests_per_unit: 60, unit: minute}\n"
    )
    entries = (("route", "api"), ("http_method", "GET"), ("subject_id", "user123"))
    key = "test-domain.route_api.http_method_GET.subject_id"
    assert stat_key(configured, "test-domain", entries) == key
    wildcard = parse_rules(
        "domain: domain\ndescriptors:\n  - key: user\n    value_to_metric: true\n"
        "    descriptors:\n"
        "      - key: action\n        value: read*\n        value_to_metric: true\n"
        "        descriptors:\n          - key: resource\n"
        "            rate_limit: {requests_per_unit: 100, unit: minute}\n"
    )
    for user, action in (("alice", "readfile"), ("bob", "readdata")):
        entries = (("user", user), ("action", action), ("resource", "documents"))
        key = f"domain.user_{user}.action_{action}.resource"
        assert stat_key(wildcard, "domain", entries) == key


def test_wildcard_without_flags_keeps_the_pattern_beside_value_to_metric() -> None:
    rules = parse_rules(
        "domain: test-domain\ndescriptors:\n  - key: wild\n    value: foo*\n    descriptors:\n"
        "      - key: other\n        value_to_metric: true\n        descriptors:\n"
        "          - key: limit\n            rate_limit: {requests_per_unit: 5, unit: minute}\n"
    )
    entries = (("wild", "foo1"), ("other", "bar"), ("limit", "x"))
    assert stat_key(rules, "test-domain", entries) == "test-domain.wild_foo*.other_bar.limit"


def test_sent_and_rule_keys_and_sanitizing() -> None:
    entries = (("key1", "value1"), ("subkey1", "something"))
    assert sent_key("test-domain", entries) == "test-domain.key1_value1.subkey1_something"
    assert (
        sent_key("d", (("remote_address", "10.0.0.1"), ("k", ""))) == "d.remote_address_10_0_0_1.k"
    )
    assert sanitized("d.a:b|c.1.2.3.4") == "d.a_b_c.1_2_3_4"
    rules = load_rules([ENVOY / "basic_config.yaml"])
    assert sorted(rule_key(rule) for rule in rules)[:2] == [
        "test-domain.key1_value1.subkey1",
        "test-domain.key1_value1.subkey1_subvalue1",
    ]
