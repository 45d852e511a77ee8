"""The engine's own switches: ``shadow`` (every refusal of ``check`` let through) and
``merge_domains`` (rule files sharing a domain), on both twins, on a fake clock."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import ConfigError, Limit, MemoryStore
from ratekeeper.engine import AsyncEngine, Descriptor, Engine, Status
from ratekeeper.rules import parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: path
    value: /banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: plan
    value: free
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - {key: q1, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: q2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 5}}
"""


def engine_of(clock: FakeClock, *, shadow: bool) -> Engine:
    return Engine(MemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"), shadow=shadow)


def outcomes(statuses: tuple[Status, ...]) -> list[tuple[bool, bool, bool | None]]:
    """Each status as (allowed, shadowed, what the store decided)."""
    return [
        (s.allowed, s.shadowed, None if s.decision is None else s.decision.allowed)
        for s in statuses
    ]


def test_shadow_lets_every_refusal_through_and_counts_as_usual(clock: FakeClock) -> None:
    enforcing, shadowing = engine_of(clock, shadow=False), engine_of(clock, shadow=True)
    one_user = [[("user", "alice")]]
    assert [enforcing.check("api", one_user).allowed for _ in range(4)] == [
        True,
        True,
        False,
        False,
    ]
    verdicts = [shadowing.check("api", one_user) for _ in range(4)]
    assert [v.allowed for v in verdicts] == [True, True, True, True]
    assert [outcomes(v.statuses)[0] for v in verdicts] == [
        (True, False, True),
        (True, False, True),
        (True, True, False),
        (True, True, False),
    ]
    # The store counted exactly what it would without shadow: two hits, the refused ones none.
    assert [v.statuses[0].remaining for v in verdicts] == [1, 0, 0, 0]
    clock.advance(60)
    assert shadowing.check("api", one_user).statuses[0].shadowed is False


def test_shadow_covers_every_way_a_descriptor_refuses(clock: FakeClock) -> None:
    engine = engine_of(clock, shadow=True)
    # An always-over rule, a limit sent with the request, and an over-limit count among
    # descriptors that allow: each is let through, the others are left as they were.
    given = Descriptor((("given", "x"),), Limit(1, 60))
    engine.check("api", [[("user", "bob")], [("user", "bob")], given])
    verdict = engine.check(
        "api",
        [
            [("path", "/banned")],
            given,
            [("user", "bob")],
            [("user", "carol")],
        ],
    )
    assert verdict.allowed
    assert [(s.allowed, s.shadowed) for s in verdict.statuses] == [
        (True, True),
        (True, True),
        (True, True),
        (True, False),
    ]


def test_quota_mode_descriptors_that_refuse_are_let_through_too(clock: FakeClock) -> None:
    enforcing, shadowing = engine_of(clock, shadow=False), engine_of(clock, shadow=True)
    both = [[("q1", "a")], [("q2", "a")]]
    for engine in (enforcing, shadowing):
        engine.check("api", both)
    # q1 is over, q2 is not: quota mode allows the request either way, and only under shadow
    # does q1's own status say it was let through.
    assert outcomes(enforcing.check("api", both).statuses) == [
        (False, False, False),
        (True, False, True),
    ]
    assert outcomes(shadowing.check("api", both).statuses) == [
        (True, True, False),
        (True, False, True),
    ]


def test_a_rules_own_shadow_mode_is_unchanged(clock: FakeClock) -> None:
    engine = engine_of(clock, shadow=True)
    statuses = [engine.check("api", [[("plan", "free")]]).statuses[0] for _ in range(2)]
    assert [(s.allowed, s.shadowed) for s in statuses] == [(True, False), (True, True)]


def test_shadow_leaves_the_key_verbs_alone(clock: FakeClock) -> None:
    """``decide`` and ``hit`` answer a ``Decision``, which has no room for "let through"."""
    engine = Engine(MemoryStore(clock=clock), default="1/minute", shadow=True)
    assert [engine.is_allowed("k") for _ in range(2)] == [True, False]
    assert [engine.hit("h", "1/minute").allowed for _ in range(2)] == [True, False]


def test_shadow_is_told_to_the_observer_and_logged(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_of(clock, shadow=True)
    heard: list[tuple[str, tuple[Status, ...]]] = []
    engine.observer = lambda domain, statuses: heard.append((domain, statuses))
    with caplog.at_level(logging.DEBUG, logger="ratekeeper.engine"):
        for _ in range(3):
            engine.check("api", [[("user", "dave")]])
    assert [[s.shadowed for s in statuses] for _, statuses in heard] == [[False], [False], [True]]
    assert caplog.messages == [
        "shadow mode: domain api, rule per_user: over its limit, let through"
    ]


def test_the_async_twin_shadows_alike(clock: FakeClock) -> None:
    async def run() -> list[list[tuple[bool, bool, bool | None]]]:
        engine = AsyncEngine(
            AsyncMemoryStore(MemoryStore(clock=clock)),
            rules=parse_rules(RULES, "rules.yaml"),
            shadow=True,
        )
        try:
            found = []
            for descriptors in ([[("user", "erin")]],) * 3 + ([[("path", "/banned")]],):
                found.append(outcomes((await engine.check("api", descriptors)).statuses))
            return found
        finally:
            await engine.close()

    assert asyncio.run(run()) == [
        [(True, False, True)],
        [(True, False, True)],
        [(True, True, False)],
        [(True, True, False)],
    ]


DOMAIN_A = """
domain: shared
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: %d}
"""
DOMAIN_B = """
domain: shared
descriptors:
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 7}
"""


def test_merge_domains_joins_files_and_keeps_joining_them_on_reload(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(DOMAIN_A % 3)
    (tmp_path / "b.yaml").write_text(DOMAIN_B)
    with pytest.raises(ConfigError, match="duplicate domain 'shared'"):
        Engine(rules=tmp_path, reload_interval=None)
    engine = Engine(rules=tmp_path, reload_interval=None, merge_domains=True)

    def limits() -> list[Limit | None]:
        verdict = engine.check("shared", [[("a", "x")], [("b", "x")]], hits=0)
        return [s.limit for s in verdict.statuses]

    assert limits() == [Limit(3, 60), Limit(7, 60)]
    (tmp_path / "a.yaml").write_text(DOMAIN_A % 4 + "\n# edited\n")
    assert engine.reload()
    assert limits() == [Limit(4, 60), Limit(7, 60)]


@pytest.mark.parametrize("option", ["shadow", "merge_domains"])
@pytest.mark.parametrize("value", ["yes", 1, None])
@pytest.mark.parametrize("twin", [Engine, AsyncEngine])
def test_switches_take_only_true_or_false(
    twin: type[Engine] | type[AsyncEngine], option: str, value: Any
) -> None:
    with pytest.raises(ConfigError, match=f"{option} must be True or False"):
        twin(**{option: value})
