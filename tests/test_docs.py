"""What the README, docs/library.md and docs/engine.md promise about decisions holds, recipes
included."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import Decision, Limit, Limiter, MemoryStore, RateLimitExceeded
from ratekeeper.engine import UNLIMITED, Engine
from ratekeeper.rules import parse_rules
from ratekeeper.testing import FakeClock

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LIBRARY_DOC = (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
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
    assert "remaining=4294967295" in ENGINE_DOC
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


#: A boundary of the clock's 15-minute windows (a multiple of 900 s since the epoch).
BOUNDARY = 1_700_000_100.0


class WrongPassword(Exception):
    pass


def documented_login(limiter: Limiter, guesses: str | None = None) -> Callable[[str, str], str]:
    """docs/library.md's login limit and decorator, as written there (or with ``guesses`` in
    place of its limit), on ``limiter``, over a real check of the password."""
    lines = LIBRARY_DOC.splitlines()
    namespace: dict[str, Any] = {"Limit": Limit, "limiter": limiter, "WrongPassword": WrongPassword}
    exec(next(line for line in lines if line.startswith("guesses = ")), namespace)
    if guesses is not None:
        namespace["guesses"] = guesses
    decorator = next(line for line in lines if line.startswith("@limiter.limit(guesses"))
    decorate = eval(decorator.removeprefix("@"), namespace)

    @decorate
    def log_in(user: str, password: str) -> str:
        if password != "right":
            raise WrongPassword
        return "session"

    return log_in


def around_an_edge(log_in: Callable[[str, str], str], clock: FakeClock) -> list[str]:
    """An attacker's five wrong guesses a second before a window's boundary and five a second
    after it: what each came to."""

    def guess() -> str:
        try:
            return log_in("alice", "guess")
        except WrongPassword:
            return "wrong"
        except RateLimitExceeded:
            return "refused"

    clock.set(BOUNDARY - 1)
    before = [guess() for _ in range(5)]
    clock.set(BOUNDARY + 1)
    return before + [guess() for _ in range(5)]


def test_the_documented_login_holds_its_limit_across_a_window_edge() -> None:
    clock = FakeClock(BOUNDARY - 1)
    limiter = Limiter(MemoryStore(clock=clock))
    log_in = documented_login(limiter)
    assert around_an_edge(log_in, clock) == ["wrong"] * 5 + ["refused"] * 5
    clock.set(BOUNDARY - 1 + 900)  # 15 minutes after the first guesses: five more
    assert [log_in("alice", "right") for _ in range(3)] == ["session"] * 3


def test_the_default_fixed_window_would_let_twice_the_limit_through_at_its_edge() -> None:
    assert Limiter().algorithm.value == "fixed_window"
    for page in (README, LIBRARY_DOC):
        assert "by default `fixed_window`" in page and "up to 2x the limit" in page
    clock = FakeClock(BOUNDARY - 1)
    log_in = documented_login(Limiter(MemoryStore(clock=clock)), guesses="5/15 minutes")
    assert around_an_edge(log_in, clock) == ["wrong"] * 10
