"""The worked examples of docs/engine.md, run from the very YAML blocks the page shows."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ratekeeper import MemoryStore
from ratekeeper.engine import Engine
from ratekeeper.rules import RuleSet, parse_rules
from ratekeeper.testing import FakeClock

PAGE = Path(__file__).parents[2] / "docs" / "engine.md"


def examples() -> dict[str, RuleSet]:
    """Each YAML block of the page, by its domain."""
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.DOTALL)
    rules = {}
    for block in blocks:
        domain = re.search(r"^domain: (\S+)", block, re.MULTILINE)
        assert domain is not None
        rules[domain.group(1)] = parse_rules(block, f"engine.md ({domain.group(1)})")
    return rules


@pytest.fixture
def engine_for(clock: FakeClock):  # type: ignore[no-untyped-def]
    rules = examples()

    def make(domain: str) -> Engine:
        return Engine(MemoryStore(clock=clock), rules=rules[domain])

    return make


def test_the_page_has_the_four_examples() -> None:
    assert set(examples()) == {"trading", "rewards", "stories", "login"}


def test_five_orders_per_second_per_client_app(engine_for, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    engine = engine_for("trading")

    def order(app: str) -> bool:
        return engine.check("trading", [[("client_app", app)]]).allowed

    assert [order("app-42") for _ in range(6)] == [True] * 5 + [False]
    assert (
        engine.check("trading", [[("client_app", "app-42")]]).statuses[0].decision.retry_after > 0
    )
    assert [order("app-7") for _ in range(6)] == [True] * 5 + [False]
    # Sliding: 0.5 s later the window still holds the first five.
    clock.advance(0.5)
    assert not order("app-42")
    clock.advance(0.5)
    assert [order("app-42") for _ in range(6)] == [True] * 5 + [False]


def test_monthly_reward_quota_per_user_plus_global(engine_for, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    engine = engine_for("rewards")

    def reward(user: str) -> bool:
        request = [[("user", user)], [("scope", "global")]]
        return engine.check("rewards", request, all_or_nothing=True).allowed

    assert [reward("alice") for _ in range(4)] == [True, True, True, False]
    global_status = engine.check("rewards", [[("scope", "global")]], hits=0).statuses[0]
    assert global_status.remaining == 1000 - 3  # the refused 4th used neither quota
    assert reward("bob")
    # The quota comes back on the 1st of the next month, 00:00 UTC.
    first_of_month = datetime(2023, 12, 1, tzinfo=UTC).timestamp()
    clock.advance(first_of_month - clock() - 1)
    assert not reward("alice")
    clock.advance(1)
    assert reward("alice")


def test_three_premium_stories_a_month_for_free_readers(engine_for) -> None:  # type: ignore[no-untyped-def]
    engine = engine_for("stories")
    store = engine.store

    def read(plan: str, user: str) -> bool:
        return engine.check("stories", [[("plan", plan), ("user", user)]]).allowed

    assert [read("premium", "u2") for _ in range(10)] == [True] * 10
    assert len(store) == 0  # premium reads never touch the store
    assert [read("free", "u1") for _ in range(4)] == [True, True, True, False]
    assert read("free", "u3")


def test_login_attempts_by_ip_and_username_together(engine_for) -> None:  # type: ignore[no-untyped-def]
    engine = engine_for("login")

    def attempt(ip: str, username: str) -> bool:
        request = [[("remote_address", ip)], [("username", username)]]
        return engine.check("login", request).allowed

    # A botnet: one account from many addresses.
    assert [attempt(f"10.0.0.{n}", "alice") for n in range(6)] == [True] * 5 + [False]
    # One address, many accounts.
    assert [attempt("192.0.2.1", f"user{n}") for n in range(21)] == [True] * 20 + [False]
