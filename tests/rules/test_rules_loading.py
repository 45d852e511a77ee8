"""Loading and strict validation of Envoy rate-limit service rule files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.errors import ConfigError, MissingExtraError
from ratekeeper.core.limits import Limit
from ratekeeper.rules import Rule, RuleSet, load_rules, parse_rules
from ratekeeper.rules.schema import DESCRIPTOR_FIELDS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rules"
INVALID = FIXTURES / "invalid"
UNITS = "second, minute, hour, day, week, month, year"
ALGORITHMS = ", ".join(a.value for a in Algorithm)


def errors_of(*paths: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_rules(paths)
    return info.value.errors


# Every invalid fixture and the exact messages it gives, without the leading "<file>: ".
CASES = {
    "invalid_unit": [
        f"descriptors[0].rate_limit.unit: invalid unit 'fortnight'; expected one of {UNITS}",
    ],
    "syntax_error": [
        "line 6, column 6: invalid YAML: while parsing a block mapping: "
        "expected <block end>, but found '<block mapping start>'",
    ],
    "duplicate_descriptor": [
        "descriptors[0].descriptors[1]: duplicate descriptor composite key "
        "'api.generic_key_default.user' (already defined at descriptors[0].descriptors[0])",
        "descriptors[1]: duplicate descriptor composite key 'api.generic_key_default' "
        "(already defined at descriptors[0])",
    ],
    "empty_domain": ["domain: empty domain"],
    "empty_key": ["descriptors[0].key: empty key", "descriptors[1]: missing 'key'"],
    "unknown_key": [
        "descriptors[0].ratelimit: unknown key 'ratelimit'; did you mean 'rate_limit'?",
        "descriptors[1].rate_limit.requestsperunit: unknown key 'requestsperunit'; "
        "did you mean 'requests_per_unit'?",
        "descriptors[1].rate_limit: missing 'requests_per_unit'",
        "descriptors[2].colour: unknown key 'colour'; expected one of key, value, rate_limit, "
        "descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, "
        "share_threshold, metadata, ipv4_prefix, ipv6_prefix",
    ],
    "list_item_not_map": [
        "descriptors[1]: expected a descriptor (a mapping), got a string 'user'",
    ],
    "key_not_string": [
        "descriptors[0]: a key must be a string, got an integer 1",
        "descriptors[0]: a key must be a string, got a boolean true",
    ],
    "empty_replaces": [
        "descriptors[0].rate_limit.replaces[0].name: empty name in replaces entry",
        "descriptors[0].rate_limit.replaces[1]: replaces entry without 'name'",
    ],
    "replaces_self": [
        "descriptors[0].rate_limit.replaces[0].name: "
        "a rule cannot replace itself ('per_user' is its name)",
    ],
    "unlimited_with_unit": [
        "descriptors[0].rate_limit: 'unit' cannot be combined with 'unlimited: true'",
    ],
    "unlimited_with_extensions": [
        "descriptors[0].rate_limit: 'algorithm' cannot be combined with 'unlimited: true'",
        "descriptors[0].rate_limit: 'period' cannot be combined with 'unlimited: true'",
    ],
    "bad_period": [
        "descriptors[0].rate_limit.period: unknown unit 'fortnights' in '5 fortnights'; "
        "expected one of ms, second, minute, hour, day, week, month, year "
        "(or s, m, h, d, w, mo, y)",
        *(
            f"descriptors[{index}].rate_limit.period: expected a period such as '5m' or a "
            f"positive, finite number of seconds, got {value}"
            for index, value in [
                (1, "an integer -3"),
                (2, "a number .inf"),
                (3, "a number .nan"),
                (4, "an integer 0"),
            ]
        ),
    ],
    "bad_algorithm_parameter": [
        "descriptors[0].rate_limit: burst does not apply to fixed_window",
        f"descriptors[1].rate_limit.algorithm: unknown algorithm 'token_bukket'; "
        f"expected one of {ALGORITHMS}",
    ],
    "bad_calendar": [
        "descriptors[0].rate_limit: calendar windows need a period of exactly one day, week, "
        "month or year, not 3600s",
        "descriptors[1].rate_limit: granularity must be positive and at most the period (60s), "
        "not 120.0",
    ],
    "bad_debt": [
        "descriptors[0].rate_limit: debt does not apply to sliding_log: its log keeps one entry "
        "per unit counted, at most the amount, and a debt would grow it without bound; "
        "bucketed_window or sliding_counter hold one in a count",
        "descriptors[1].rate_limit.debt: expected true or false, got a string 'yes'",
        "descriptors[2].rate_limit: 'debt' cannot be combined with 'requests_per_unit: 0' "
        "(every hit is refused)",
        "descriptors[3].rate_limit: debt does not apply to concurrency: it holds slots, which "
        "are given back, not paid back over time",
    ],
    "requests_per_unit": [
        "descriptors[0].rate_limit: missing 'requests_per_unit'",
        "descriptors[1].rate_limit.requests_per_unit: expected an integer from 0 up to "
        "4294967295, got an integer -1",
        "descriptors[2].rate_limit.requests_per_unit: expected an integer from 0 up to "
        "4294967295, got a string 'ten'",
    ],
    "no_unit_or_period": [
        f"descriptors[0].rate_limit: missing 'unit' (one of {UNITS}) or 'period'",
        "descriptors[1].rate_limit: give either 'unit' or 'period', not both",
    ],
    "duplicate_key": ["descriptors[0].rate_limit.unit: duplicate key (lines 5 and 6)"],
    "wrong_types": [
        "descriptors[0].key: expected a string, got a list",
        "descriptors[0].shadow_mode: expected true or false, got a string 'yes'",
        "descriptors[0].rate_limit: expected a rate_limit mapping, got a string 'every second'",
        "descriptors[1].descriptors: expected a list of descriptors, got a mapping",
    ],
    "bad_address_prefix": [
        "descriptors[0].ipv4_prefix: expected an integer from 0 up to 32, got an integer 33",
        "descriptors[0].ipv6_prefix: expected an integer from 0 up to 128, got an integer -1",
        "descriptors[1].ipv6_prefix: expected an integer from 0 up to 128, got a number .nan",
        "descriptors[2].ipv4_prefix: expected an integer from 0 up to 32, got a boolean true",
        "descriptors[3].ipv6_prefix: expected an integer from 0 up to 128, got a string '64'",
        "descriptors[4]: share_threshold counts every value under the pattern; it cannot be "
        "combined with ipv4_prefix or ipv6_prefix",
    ],
    "not_a_mapping": ["expected a mapping with 'domain' and 'descriptors', got a list"],
    "empty_file": ["the file is empty; expected a mapping with 'domain' and 'descriptors'"],
}


def test_every_invalid_fixture_has_a_case() -> None:
    names = {path.stem for path in INVALID.glob("*.yaml")}
    assert names - {"duplicate_domain_a", "duplicate_domain_b"} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_invalid_fixture_gives_exact_messages(name: str) -> None:
    path = INVALID / f"{name}.yaml"
    assert errors_of(path) == [f"{path}: {message}" for message in CASES[name]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_parse_rules_gives_the_same_messages(name: str) -> None:
    text = (INVALID / f"{name}.yaml").read_text()
    with pytest.raises(ConfigError) as info:
        parse_rules(text, "inline.yaml")
    assert info.value.errors == [f"inline.yaml: {message}" for message in CASES[name]]


def test_duplicate_domain_across_files_names_both() -> None:
    first, second = INVALID / "duplicate_domain_a.yaml", INVALID / "duplicate_domain_b.yaml"
    assert errors_of(first, second) == [
        f"{second}: domain: duplicate domain 'shared' (already defined in {first})"
    ]


def test_errors_from_several_files_are_all_collected_in_order() -> None:
    unit, key = INVALID / "invalid_unit.yaml", INVALID / "empty_key.yaml"
    errors = errors_of(unit, key)
    assert [error.split(": ")[0] for error in errors] == [str(unit), str(key), str(key), str(key)]
    # A file with errors still claims its valid domain.
    assert errors[-1] == f"{key}: domain: duplicate domain 'api' (already defined in {unit})"
    with pytest.raises(ConfigError) as info:
        load_rules([unit, key])
    assert str(info.value) == "\n".join(errors)


def test_missing_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    assert errors_of(path) == [f"{path}: cannot read: No such file or directory"]


def test_file_that_is_not_utf8_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"domain: caf\xe9\n")
    assert errors_of(path) == [f"{path}: not UTF-8 text (invalid continuation byte at byte 11)"]


def test_missing_pyyaml_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'ratekeeper\[rules\]'"):
        parse_rules("domain: api\n")


def test_envoy_example_loads_unchanged() -> None:
    path = FIXTURES / "envoy_example.yaml"
    rules = load_rules([path])
    assert rules.sources == (str(path),)
    assert set(rules.domains) == {"envoy_example"}
    assert len(rules) == 12
    by_path = {rule.path: rule for rule in rules}
    assert list(by_path) == [
        "to_number",
        "message_type=marketing/to_number",
        "remote_address",
        "remote_address=10.0.0.1",
        "path=%2Fapi%2Fv1%2F*",
        "path=%2Fapi%2F*%2Fhealth",
        "path=%2Flogin",
        "key1=value1/subkey1",
        "key1=value1/subkey2",
        "key1/subkey1=*",
        "status=429",
        "quota",
    ]
    assert by_path["to_number"] == Rule(
        domain="envoy_example",
        path="to_number",
        limit=Limit(100, 86_400),
        unlimited=False,
        name=None,
        replaces=(),
        shadow_mode=False,
        detailed_metric=False,
        unit="day",
        requests_per_unit=100,
    )
    unlimited = by_path["remote_address=10.0.0.1"]
    assert (unlimited.unlimited, unlimited.limit, unlimited.unit) == (True, None, None)
    assert unlimited.requests_per_unit == 0
    assert by_path["path=%2Fapi%2Fv1%2F*"].unit == "minute"  # written MINUTE
    assert by_path["path=%2Fapi%2F*%2Fhealth"].limit == Limit(1000, 1)  # written Second
    assert by_path["path=%2Flogin"].shadow_mode
    assert by_path["key1=value1/subkey1"].name == "key1_subkey1"
    assert by_path["key1=value1/subkey2"].replaces == ("key1_subkey1",)
    assert by_path["key1=value1/subkey2"].detailed_metric
    assert by_path["status=429"].limit == Limit(10, 30 * 86_400)
    assert by_path["quota"].limit == Limit(1_000_000, 365 * 86_400)


@pytest.mark.parametrize(
    ("rate_limit", "limit"),
    [
        ("{unit: minute, requests_per_unit: 5}", Limit(5, 60)),
        ("{unit: minute, requests_per_unit: 5, unit_multiplier: 5}", Limit(5, 300)),
        ("{period: 5m, requests_per_unit: 5}", Limit(5, 300)),
        ("{period: 90, requests_per_unit: 5}", Limit(5, 90)),
        ("{period: 0.5, requests_per_unit: 5}", Limit(5, 0.5)),
        ("{unit: second, requests_per_unit: 5, algorithm: gcra}", Limit(5, 1, "gcra")),
        (
            "{unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 20}",
            Limit(5, 1, "token_bucket", burst=20),
        ),
        (
            "{period: 1h, requests_per_unit: 5, algorithm: bucketed_window, granularity: 5m}",
            Limit(5, 3600, "bucketed_window", granularity=300),
        ),
        (
            "{period: 1h, requests_per_unit: 5, algorithm: bucketed_window, granularity: 10}",
            Limit(5, 3600, "bucketed_window", granularity=10),
        ),
        ("{unit: day, requests_per_unit: 5, calendar: true}", Limit(5, 86_400, calendar=True)),
        ("{unit: month, requests_per_unit: 5, calendar: true}", Limit(5, "month", calendar=True)),
        ("{unit: minute, requests_per_unit: 5, debt: true}", Limit(5, 60, debt=True)),
        ("{unit: minute, requests_per_unit: 5, debt: false}", Limit(5, 60)),
        (
            "{period: 1m, requests_per_unit: 5, algorithm: gcra, burst: 2, debt: true}",
            Limit(5, 60, "gcra", burst=2, debt=True),
        ),
    ],
)
def test_extensions_build_the_limit(rate_limit: str, limit: Limit) -> None:
    rules = parse_rules(f"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n")
    (rule,) = rules
    assert rule.limit == limit
    assert rule.requests_per_unit == 5


def test_a_rule_with_debt_shares_its_counters_with_one_without() -> None:
    text = (
        "domain: d\ndescriptors:\n"
        "  - {key: a, rate_limit: {unit: minute, requests_per_unit: 5, debt: true}}\n"
        "  - {key: b, rate_limit: {unit: minute, requests_per_unit: 5}}\n"
    )
    owing, plain = (rule.limit for rule in parse_rules(text))
    assert owing is not None and plain is not None
    assert (owing.debt, plain.debt) == (True, False)
    assert owing.id == plain.id


def test_period_rule_has_no_unit() -> None:
    text = "domain: d\ndescriptors: [{key: k, rate_limit: {period: 5m, requests_per_unit: 3}}]"
    (rule,) = parse_rules(text)
    assert (rule.unit, rule.requests_per_unit) == (None, 3)


def test_several_files_and_domains_load_together(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yml"
    rule = "descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: %d}}]"
    a.write_text("domain: one\n" + rule % 1)
    b.write_text("domain: two\n" + rule % 2)
    rules = load_rules([a, str(b)])
    assert rules.sources == (str(a), str(b))
    assert set(rules.domains) == {"one", "two"}
    assert [(rule.domain, rule.requests_per_unit) for rule in rules] == [("one", 1), ("two", 2)]


def test_directory_means_its_yaml_files_sorted(tmp_path: Path) -> None:
    for name, domain in [("b.yml", "b"), ("a.yaml", "a"), ("c.yaml", "c")]:
        (tmp_path / name).write_text(f"domain: {domain}\n")
    (tmp_path / "notes.txt").write_text("not a rule file")
    (tmp_path / ".hidden.yaml").write_text("domain: [broken\n")
    (tmp_path / "sub.yaml").mkdir()
    rules = load_rules([tmp_path])
    assert rules.sources == tuple(str(tmp_path / name) for name in ("a.yaml", "b.yml", "c.yaml"))
    assert list(rules.domains) == ["a", "b", "c"]
    assert len(rules) == 0


def test_directory_and_file_report_duplicate_domain(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    inside = tmp_path / "rules" / "api.yaml"
    inside.write_text("domain: api\n")
    outside = tmp_path / "extra.yaml"
    outside.write_text("domain: api\n")
    assert errors_of(tmp_path / "rules", outside) == [
        f"{outside}: domain: duplicate domain 'api' (already defined in {inside})"
    ]


def test_scalar_keys_and_values_are_read_as_written() -> None:
    rules = parse_rules(
        "domain: d\ndescriptors:\n"
        "  - {key: code, value: 010, rate_limit: {unit: second, requests_per_unit: 1}}\n"
        "  - {key: flag, value: yes, rate_limit: {unit: second, requests_per_unit: 2}}\n"
        "  - {key: empty, value: '', rate_limit: {unit: second, requests_per_unit: 3}}\n"
    )
    assert [rule.path for rule in rules] == ["code=010", "flag=yes", "empty"]


def test_anchors_and_merge_keys_work_as_in_yaml() -> None:
    rules = parse_rules(
        "domain: d\n"
        "descriptors:\n"
        "  - key: a\n"
        "    rate_limit: &base {unit: second, requests_per_unit: 10}\n"
        "  - key: b\n"
        "    rate_limit:\n"
        "      <<: *base\n"
        "      requests_per_unit: 20\n"
    )
    assert [(rule.path, rule.limit) for rule in rules] == [
        ("a", Limit(10, 1)),
        ("b", Limit(20, 1)),
    ]


def test_self_including_alias_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_rules("domain: d\ndescriptors: &d\n  - key: a\n    descriptors: *d\n", "x.yaml")
    assert info.value.errors == [
        "x.yaml: " + ".".join(["descriptors[0]"] * 32) + ".descriptors: "
        "descriptors nested more than 32 levels deep"
    ]


def test_path_escapes_separators_so_paths_stay_unique() -> None:
    rules = parse_rules(
        "domain: d\ndescriptors:\n"
        "  - {key: a, value: b/c, rate_limit: {unit: second, requests_per_unit: 1}}\n"
        "  - key: a\n    value: b\n    descriptors:\n"
        "      - {key: c, rate_limit: {unit: second, requests_per_unit: 1}}\n"
        "  - {key: 'x=y', rate_limit: {unit: second, requests_per_unit: 1}}\n"
        "  - {key: '%', value: '=', rate_limit: {unit: second, requests_per_unit: 1}}\n"
    )
    assert [rule.path for rule in rules] == ["a=b%2Fc", "a=b/c", "x%3Dy", "%25=%3D"]


def test_domain_without_descriptors_loads() -> None:
    rules = parse_rules("domain: quiet\n")
    assert list(rules.domains) == ["quiet"]
    assert len(rules) == 0
    assert rules.sources == ("<rules>",)


def test_empty_rule_set() -> None:
    rules = RuleSet.empty()
    assert (len(rules), list(rules), dict(rules.domains), rules.sources) == (0, [], {}, ())
    assert rules.match("any", [("k", "v")]) is None


@pytest.mark.parametrize(
    ("rate_limit", "message"),
    [
        ("{unit: '', requests_per_unit: 3}", f"missing 'unit' (one of {UNITS}) or 'period'"),
        ("{unit: [second], requests_per_unit: 3}", "unit: expected a string, got a list"),
        (
            "{unit: second, requests_per_unit: 3, algorithm: token_bucket, burst: many}",
            "burst: expected a positive integer, got a string 'many'",
        ),
        (
            "{unit: second, requests_per_unit: 3, algorithm: token_bucket, burst: 0}",
            "burst must be an integer from 1 to 9007199254740991, not 0",
        ),
        (
            "{unit: second, requests_per_unit: 3, calendar: 1}",
            "calendar: expected true or false, got an integer 1",
        ),
        (
            "{unit: second, requests_per_unit: 4294967296}",
            "requests_per_unit: expected an integer from 0 up to 4294967295, "
            "got an integer 4294967296",
        ),
        (
            "{unlimited: 'yes', unit: second, requests_per_unit: 1}",
            "unlimited: expected true or false, got a string 'yes'",
        ),
        (
            "{unit: minute, requests_per_unit: 3, unit_multiplier: 0}",
            "unit_multiplier: expected a positive integer up to 4294967295, got an integer 0",
        ),
        (
            "{period: 1m, requests_per_unit: 3, unit_multiplier: 2}",
            "'unit_multiplier' applies to 'unit', not to 'period'",
        ),
        (
            "{unit: second, requests_per_unit: 3, replaces: daily}",
            "replaces: expected a list of {name: ...} entries, got a string 'daily'",
        ),
    ],
)
def test_more_rate_limit_errors(rate_limit: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_rules(f"domain: d\ndescriptors: [{{key: k, rate_limit: {rate_limit}}}]\n", "f.yaml")
    (error,) = info.value.errors
    assert error.startswith("f.yaml: descriptors[0].rate_limit")
    assert error.endswith(message)


def test_empty_unit_is_allowed_with_unlimited_as_in_envoy() -> None:
    (rule,) = parse_rules("domain: d\ndescriptors: [{key: k, rate_limit: {unit: '', "
                          "unlimited: true, requests_per_unit: 7}}]\n")  # fmt: skip
    assert (rule.unlimited, rule.limit, rule.unit, rule.requests_per_unit) == (True, None, None, 0)


def test_public_names() -> None:
    import ratekeeper.rules

    assert ratekeeper.rules.__all__ == ["Rule", "RuleSet", "load_rules", "parse_rules"]


def test_importing_the_package_does_not_need_pyyaml() -> None:
    import subprocess

    code = (
        "import sys; sys.modules['yaml'] = None\n"
        "import ratekeeper.rules as r\n"
        "assert r.RuleSet.empty().match('d', [('k', 'v')]) is None\n"
        "try:\n    r.load_rules([])\nexcept ImportError as e:\n    print(e)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == (
        "PyYAML is not installed; install it with: pip install 'ratekeeper[rules]'"
    )


def test_bad_merge_key_is_reported() -> None:
    with pytest.raises(ConfigError) as info:
        parse_rules("domain: d\ndescriptors:\n  - key: k\n    <<: 5\n", "m.yaml")
    assert info.value.errors == [
        "m.yaml: descriptors[0]: invalid merge: "
        "expected a mapping or list of mappings for merging, but found scalar"
    ]


def test_envoy_descriptor_fields_are_accepted() -> None:
    (rule,) = parse_rules(
        "domain: d\ndescriptors:\n"
        "  - key: k\n    value: 'a*'\n    quota_mode: true\n    detailed_metric: true\n"
        "    value_to_metric: true\n    share_threshold: true\n"
        "    metadata: {owner: {team: [a, b]}, n: 1}\n"
        "    rate_limit: {unit: second, requests_per_unit: 1}\n"
    )
    assert (rule.quota_mode, rule.detailed_metric) == (True, True)
    assert rule.metadata == {"owner": {"team": ["a", "b"]}, "n": 1}


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("quota_mode: 'yes'", "quota_mode: expected true or false, got a string 'yes'"),
        ("value_to_metric: 1", "value_to_metric: expected true or false, got an integer 1"),
        ("share_threshold: []", "share_threshold: expected true or false, got a list"),
        ("metadata: [a]", "metadata: expected a mapping, got a list"),
        ("metadata: {[a]: 1}", "metadata: invalid metadata: found unhashable key"),
    ],
)
def test_envoy_descriptor_fields_are_checked(field: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_rules(f"domain: d\ndescriptors:\n  - key: k\n    {field}\n", "f.yaml")
    assert info.value.errors == [f"f.yaml: descriptors[0].{message}"]


def test_long_values_are_cut_in_messages() -> None:
    long = "x" * 10_000
    text = (
        "domain: d\ndescriptors:\n"
        f"  - key: k\n    ? {long}\n    : 1\n"
        f"  - {{key: k2, rate_limit: {{unit: {long}, requests_per_unit: {'9' * 5000}}}}}\n"
        f"  - {{key: k3, rate_limit: {{period: '{long}', requests_per_unit: 1}}}}\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_rules(text, "f.yaml")
    cut, nines = "x" * 80 + "…", "9" * 80 + "…"
    expected = f"expected one of {', '.join(DESCRIPTOR_FIELDS)}"
    assert info.value.errors == [
        f"f.yaml: descriptors[0].{cut}: unknown key '{cut}'; {expected}",
        f"f.yaml: descriptors[1].rate_limit.unit: invalid unit '{cut}'; expected one of {UNITS}",
        "f.yaml: descriptors[1].rate_limit.requests_per_unit: expected an integer from 0 up to "
        f"4294967295, got an integer {nines}",
        "f.yaml: descriptors[2].rate_limit.period: expected a period such as '5m' or a positive, "
        f"finite number of seconds, got a string '{cut}'",
    ]


@pytest.mark.parametrize("period", ["1.0e+400", "-.inf", "1" + "0" * 400])
def test_periods_too_large_for_a_number_are_refused(period: str) -> None:
    text = f"domain: d\ndescriptors: [{{key: k, rate_limit: {{period: {period}, "
    with pytest.raises(ConfigError) as info:
        parse_rules(text + "requests_per_unit: 1}}]\n", "f.yaml")
    (error,) = info.value.errors
    assert error.startswith(
        "f.yaml: descriptors[0].rate_limit.period: expected a period such as '5m' or a positive,"
    )


def test_requests_per_unit_zero_loads_as_always_over() -> None:
    (rule,) = parse_rules(
        "domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 0}}]\n"
    )
    assert (rule.limit, rule.unlimited, rule.always_over) == (None, False, True)
    assert (rule.unit, rule.requests_per_unit) == ("hour", 0)


@pytest.mark.slow
def test_a_ten_megabyte_file_loads(tmp_path: Path) -> None:
    """The file ``python -m benchmarks.engine.rules_load`` times: it loads whole and matches."""
    from benchmarks.engine.rules_load import RULES_PER_BLOCK, rule_file

    text, blocks = rule_file(10_000_000)
    path = tmp_path / "big.yaml"
    path.write_text(text)
    rules = load_rules([path])
    assert len(rules) == blocks * RULES_PER_BLOCK
    last = f"tenant-{blocks - 1}"
    user = rules.match("big", [("tenant", last), ("user", "alice")])
    robot, counted = rules.lookup("big", [("tenant", last), ("user", "robot-7")])
    assert user is not None
    assert user.name == f"user-{blocks - 1}"
    assert robot is not None
    assert robot.always_over
    assert list(counted) == [("tenant", last), ("user", "robot-*")]
