"""The engine's ``quota_mode``: every descriptor in quota mode, as Envoy's reference service
decides with ``QUOTA_MODE=true`` (``isQuotaMode := globalQuotaMode || limit.QuotaMode``): a
request is refused only when every descriptor but the unlimited ones is over its limit, and each
descriptor's own status is left as it is. On both twins, on a fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ratekeeper import ConfigError, MemoryStore
from ratekeeper.engine import AsyncEngine, Engine, Verdict
from ratekeeper.rules import parse_rules
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: internal
    rate_limit: {unlimited: true}
"""

USED = [("user", "used")]  # over its limit of 1 once the test has spent it
FRESH = [("user", "fresh")]
BANNED = [("path", "/banned")]
UNLIMITED = [("internal", "x")]
UNMATCHED = [("nothing", "x")]


def engine_of(clock: FakeClock, *, quota_mode: bool) -> Engine:
    engine = Engine(
        MemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"), quota_mode=quota_mode
    )
    assert engine.check("api", [USED]).allowed  # the one hit it allows this minute
    return engine


def outcome(verdict: Verdict) -> tuple[bool, list[bool]]:
    return verdict.allowed, [status.allowed for status in verdict.statuses]


@pytest.mark.parametrize(
    ("descriptors", "enforcing", "in_quota_mode"),
    [
        # Every descriptor over: refused either way.
        ([USED], (False, [False]), (False, [False])),
        ([USED, BANNED], (False, [False, False]), (False, [False, False])),
        # One over, one not: only quota mode lets the request through.
        ([USED, FRESH], (False, [False, True]), (True, [False, True])),
        ([BANNED, FRESH], (False, [False, True]), (True, [False, True])),
        # A descriptor no limit applies to is never over, so it lets the request through...
        ([USED, UNMATCHED], (False, [False, True]), (True, [False, True])),
        # ... but an unlimited one is no quota descriptor at all.
        ([USED, UNLIMITED], (False, [False, True]), (False, [False, True])),
        ([UNLIMITED, UNLIMITED], (True, [True, True]), (True, [True, True])),
    ],
)
def test_quota_mode_refuses_only_when_every_descriptor_is_over(
    clock: FakeClock,
    descriptors: list[list[tuple[str, str]]],
    enforcing: tuple[bool, list[bool]],
    in_quota_mode: tuple[bool, list[bool]],
) -> None:
    assert outcome(engine_of(clock, quota_mode=False).check("api", descriptors)) == enforcing
    assert outcome(engine_of(clock, quota_mode=True).check("api", descriptors)) == in_quota_mode


def test_quota_mode_counts_as_usual(clock: FakeClock) -> None:
    engine = engine_of(clock, quota_mode=True)
    verdicts = [engine.check("api", [USED, FRESH]) for _ in range(2)]
    assert [outcome(v) for v in verdicts] == [(True, [False, True]), (False, [False, False])]
    assert [v.statuses[1].remaining for v in verdicts] == [0, 0]
    clock.advance(60)
    assert outcome(engine.check("api", [USED, FRESH])) == (True, [True, True])


def test_the_async_twin_decides_alike(clock: FakeClock) -> None:
    async def run() -> list[tuple[bool, list[bool]]]:
        engine = AsyncEngine(
            AsyncMemoryStore(MemoryStore(clock=clock)),
            rules=parse_rules(RULES, "rules.yaml"),
            quota_mode=True,
        )
        try:
            return [
                outcome(await engine.check("api", descriptors))
                for descriptors in ([USED], [USED, FRESH], [USED, UNLIMITED], [USED, UNMATCHED])
            ]
        finally:
            await engine.close()

    assert asyncio.run(run()) == [
        (True, [True]),
        (True, [False, True]),
        (False, [False, True]),
        (True, [False, True]),
    ]


@pytest.mark.parametrize("value", ["yes", 1, None])
@pytest.mark.parametrize("twin", [Engine, AsyncEngine])
def test_quota_mode_takes_only_true_or_false(
    twin: type[Engine] | type[AsyncEngine], value: Any
) -> None:
    with pytest.raises(ConfigError, match="quota_mode must be True or False"):
        twin(quota_mode=value)
