"""What the README and docs/engine.md promise about decisions holds, recipes included."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ratekeeper import Decision, Limiter
from ratekeeper.engine import UNLIMITED, Engine
from ratekeeper.rules import parse_rules

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
ENGINE_DOC = (ROOT / "docs" / "engine.md").read_text(encoding="utf-8")


def retry_after_header(decision: Decision) -> dict[str, str]:
    """The README's ``Retry-After`` recipe, evaluated as written there."""
    line = next(line for line in README.splitlines() if '{"Retry-After":' in line)
    expression = line[line.index("{") : line.rindex("}") + 1]
    result: dict[str, str] = eval(expression, {"math": math, "decision": decision})
    return result


@pytest.mark.parametrize(
    ("retry_after", "header"),
    [(0.001, "1"), (0.5, "1"), (1.0, "1"), (59.2, "60"), (86_400.0, "86400"), (1e9, "86400")],
)
def test_the_retry_after_recipe_rounds_up_whole_seconds(retry_after: float, header: str) -> None:
    assert retry_after_header(Decision(False, 10, 0, 60.0, retry_after)) == {"Retry-After": header}


def test_the_retry_after_recipe_survives_a_cost_that_never_fits() -> None:
    decision = Limiter().hit("user:1", "10/minute", cost=11)
    assert not decision.allowed and decision.retry_after == math.inf
    assert retry_after_header(decision) == {"Retry-After": "86400"}


def test_no_limit_is_limit_0_and_unlimited_remaining() -> None:
    assert UNLIMITED == 4_294_967_295
    assert "remaining=4294967295" in README and "remaining=4294967295" in ENGINE_DOC
    engine = Engine(rules=parse_rules("domain: api\ndescriptors:\n  - key: path\n", "r.yaml"))
    try:
        assert engine.decide("user:1", cost=3) == Decision(
            allowed=True, limit=0, remaining=UNLIMITED, reset_after=0, retry_after=0, granted=3
        )
        for domain in ("api", "unknown"):  # a whitelisting descriptor, an unknown domain
            status = engine.check(domain, [[("path", "/")]]).statuses[0]
            assert status.allowed and status.decision is None and status.limit is None
            assert status.remaining == UNLIMITED
    finally:
        engine.close()
