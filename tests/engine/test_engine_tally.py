"""The engine's tally: told of every check that counted, with each descriptor's entries, the
limit sent with it and its cost, beside the observer; nothing on a look."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ratekeeper.core.limits import Limit
from ratekeeper.engine import AsyncEngine, Descriptor, Engine, Status
from ratekeeper.rules import parse_rules

RULES = parse_rules(
    "domain: api\ndescriptors:\n  - key: user\n"
    "    rate_limit: {requests_per_unit: 2, unit: minute}\n"
)


class Told:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any], list[bool]]] = []

    def __call__(self, domain: str, requests: Sequence[Any], statuses: tuple[Status, ...]) -> None:
        self.calls.append((domain, list(requests), [one.allowed for one in statuses]))


def test_the_tally_gets_the_entries_and_costs_of_every_check() -> None:
    engine = Engine(rules=RULES)
    told = engine.tally = Told()
    sent = Limit(5, 60)
    engine.check("api", [[("user", "a")]])  # the hot path: one descriptor, a list
    engine.check("api", [(("user", "a"),)], hits=2)  # over: 3 of 2
    engine.check("api", [[("user", "b")], Descriptor((("x", "1"),), limit=sent, hits=0)])
    engine.check("api", [[("user", "c")]], hits=0)  # a look: no decision
    assert told.calls == [
        ("api", [((("user", "a"),), None, 1)], [True]),
        ("api", [((("user", "a"),), None, 2)], [False]),
        ("api", [((("user", "b"),), None, 1)], [True]),  # the look left out
    ]


def test_the_async_engine_tells_its_tally_beside_its_observer() -> None:
    async def run() -> tuple[Told, list[str]]:
        engine = AsyncEngine(rules=RULES)
        observed: list[str] = []
        engine.observer = lambda domain, statuses: observed.append(domain)
        told = engine.tally = Told()
        await engine.check("api", [[("user", "a")]])
        await engine.check("api", [[("user", "a")], [("user", "b")]], hits=2)
        await engine.close()
        return told, observed

    told, observed = asyncio.run(run())
    assert observed == ["api", "api"]
    assert told.calls == [
        ("api", [((("user", "a"),), None, 1)], [True]),
        ("api", [((("user", "a"),), None, 2), ((("user", "b"),), None, 2)], [False, True]),
    ]
