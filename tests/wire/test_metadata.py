"""The dynamic metadata of Envoy's answer, as the reference builds it (``ratelimitToMetadata``).

The first four cases are the reference's own (``TestRatelimitToMetadata`` in its
``src/service/ratelimit_test.go``), each with the structure it expects, decided here by the
engine over rules that give the reference's limits; the others follow its code: which
descriptors count as passed, the merge of their rules' metadata (the first passing one wins),
and the fields of the descriptors (a sent limit in protobuf's text format, a descriptor's own
``hitsAddend``, 0 included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ratekeeper import Engine, MemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.wire.metadata import limit_text
from ratekeeper.wire.translate import Call, WireDescriptor, decide

RULES = """
domain: quota-domain
descriptors:
  - key: quota_key
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {name: service_1}
---
domain: mixed-domain
descriptors:
  - key: regular_key
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {name: service_1}
  - key: quota_key
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {name: service_2}
  - key: another_quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {name: service_3}
---
domain: addend-domain
descriptors:
  - key: test_key
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
---
domain: rl
descriptors:
  - key: first
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      route: {cluster: one, tags: [a, b]}
      weight: 1
  - key: second
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      route: {cluster: two, zone: east, deep: {x: 1}}
      owner: team-2
  - key: third
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      route: {deep: {x: 3, y: 3}}
      weight: 3
  - key: full
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {never: full}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {from: shadow}
  - key: free
    rate_limit: {unlimited: true}
    metadata: {from: unlimited}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {from: detailed}
  - key: named
    rate_limit: {unit: minute, requests_per_unit: 5, name: replaced}
    metadata: {from: replaced}
  - key: replacing
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces: [{name: replaced}]
"""


def engine_of(clock: FakeClock, directory: Path, *, shadow: bool = False) -> Engine:
    """An engine over ``RULES``, one file a domain in ``directory``."""
    for number, text in enumerate(RULES.split("---\n")):
        (directory / f"{number}.yaml").write_text(text)
    return Engine(MemoryStore(clock=clock), rules=directory, reload_interval=None, shadow=shadow)


@pytest.fixture
def engine(clock: FakeClock, tmp_path: Path) -> Engine:
    return engine_of(clock, tmp_path)


def call(domain: str, *descriptors: WireDescriptor, hits_addend: int = 0) -> Call:
    return Call(domain, descriptors, hits_addend)


def one(key: str, value: str, **fields: Any) -> WireDescriptor:
    return WireDescriptor(((key, value),), **fields)


def metadata_of(engine: Engine, sent: Call) -> dict[str, Any] | None:
    return decide(engine, sent, metadata=True).metadata


def test_single_descriptor_with_single_entry_no_quota_violations(engine: Engine) -> None:
    assert metadata_of(engine, call("fake-domain", one("key1", "val1"))) == {
        "descriptors": [{"entries": ["key1=val1"]}],
        "domain": "fake-domain",
    }


def test_single_descriptor_with_quota_mode_violation(engine: Engine) -> None:
    assert metadata_of(engine, call("quota-domain", one("quota_key", "quota_val"))) == {
        "descriptors": [{"entries": ["quota_key=quota_val"]}],
        "domain": "quota-domain",
        "metadata": {"name": "service_1"},
    }


def test_multiple_descriptors_with_mixed_quota_violations(engine: Engine) -> None:
    sent = call(
        "mixed-domain",
        one("regular_key", "regular_val"),
        one("quota_key", "quota_val"),
        one("another_quota", "another_val"),
    )
    found = decide(engine, sent, metadata=True)
    assert found.code == "OVER_LIMIT"  # the regular descriptor refuses, and does not pass
    assert found.metadata == {
        "descriptors": [
            {"entries": ["regular_key=regular_val"]},
            {"entries": ["quota_key=quota_val"]},
            {"entries": ["another_quota=another_val"]},
        ],
        "domain": "mixed-domain",
        "metadata": {"name": "service_2"},
    }


def test_request_with_hits_addend(engine: Engine) -> None:
    sent = call("addend-domain", one("test_key", "test_val"), hits_addend=5)
    assert metadata_of(engine, sent) == {
        "descriptors": [{"entries": ["test_key=test_val"]}],
        "domain": "addend-domain",
        "hitsAddend": 5,
    }


def test_the_first_passing_descriptor_wins_and_objects_merge_level_by_level(
    engine: Engine,
) -> None:
    sent = call("rl", one("first", "x"), one("second", "x"), one("third", "x"))
    assert metadata_of(engine, sent) == {
        "domain": "rl",
        "descriptors": [
            {"entries": ["first=x"]},
            {"entries": ["second=x"]},
            {"entries": ["third=x"]},
        ],
        "metadata": {
            "route": {
                "cluster": "one",
                "tags": ["a", "b"],
                "zone": "east",
                "deep": {"x": 1, "y": 3},
            },
            "weight": 1,
            "owner": "team-2",
        },
    }
    # The rules' own metadata is left as it was.
    rule = engine.rules.match("rl", [("first", "x")])
    assert rule is not None and rule.metadata == {
        "route": {"cluster": "one", "tags": ["a", "b"]},
        "weight": 1,
    }


def test_a_descriptor_over_its_limit_brings_none_and_no_metadata_is_left_out(
    engine: Engine,
) -> None:
    sent = call("rl", one("full", "x"))
    first, second = (metadata_of(engine, sent) for _ in range(2))
    assert first == {
        "domain": "rl",
        "descriptors": [{"entries": ["full=x"]}],
        "metadata": {"never": "full"},
    }
    assert second == {"domain": "rl", "descriptors": [{"entries": ["full=x"]}]}


@pytest.mark.parametrize(
    ("key", "brings"),
    [
        ("shadow", True),  # over its limit, but its own shadow_mode answers OK: passed
        ("free", False),  # unlimited: never counted as passed
        ("detailed", False),  # the reference builds a detailed_metric limit without metadata
        ("named", False),  # replaced: no limit applies, nothing to bring
    ],
)
def test_which_passing_descriptors_bring_their_rules_metadata(
    engine: Engine, key: str, brings: bool
) -> None:
    sent = call("rl", one(key, "x"), one("replacing", "x"))
    answers = [decide(engine, sent, metadata=True) for _ in range(2)]  # shadow: over at 2
    assert [a.code for a in answers] == ["OK", "OK"]
    for answer in answers:
        assert answer.metadata is not None
        assert answer.metadata.get("metadata") == ({"from": key} if brings else None)


def test_the_services_shadow_mode_lets_through_but_does_not_pass(
    clock: FakeClock, tmp_path: Path
) -> None:
    engine = engine_of(clock, tmp_path, shadow=True)
    sent = call("rl", one("full", "x"))
    answers = [decide(engine, sent, metadata=True) for _ in range(2)]
    assert [a.code for a in answers] == ["OK", "OK"]
    assert [a.metadata and a.metadata.get("metadata") for a in answers] == [
        {"never": "full"},
        None,
    ]


def test_the_descriptors_limit_and_hits_addend(engine: Engine) -> None:
    sent = call(
        "rl",
        one("first", "x", limit=(10, "minute"), hits_addend=0),
        one("second", "x", limit=(0, "hour")),
        one("third", "x", hits_addend=2),
        hits_addend=3,
    )
    found = decide(engine, sent, metadata=True)
    assert found.code == "OVER_LIMIT"  # a limit of 0 refuses every hit
    assert found.metadata == {
        "domain": "rl",
        "descriptors": [
            {"entries": ["first=x"], "limit": "requests_per_unit:10 unit:MINUTE", "hitsAddend": 0},
            {"entries": ["second=x"], "limit": "unit:HOUR"},
            {"entries": ["third=x"], "hitsAddend": 2},
        ],
        "hitsAddend": 3,
        # a descriptor with a limit of its own brings none; the third passes
        "metadata": {"route": {"deep": {"x": 3, "y": 3}}, "weight": 3},
    }


@pytest.mark.parametrize(
    ("amount", "unit", "text"),
    [
        (10, "MINUTE", "requests_per_unit:10 unit:MINUTE"),
        (1, "second", "requests_per_unit:1 unit:SECOND"),
        (0, "DAY", "unit:DAY"),
        (5, "UNKNOWN", "requests_per_unit:5"),
        (0, "UNKNOWN", ""),
    ],
)
def test_a_sent_limit_in_protobufs_text_format(amount: int, unit: str, text: str) -> None:
    assert limit_text(amount, unit) == text


def test_no_metadata_unless_asked(engine: Engine) -> None:
    assert decide(engine, call("rl", one("first", "x"))).metadata is None
