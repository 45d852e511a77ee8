"""A stored override that no longer validates (written by plain SQL, or by another version) is a
configuration-store failure for its key: the engine logs it, counts it and decides by the last
limit it knew for the key, else the rules, else its default. It never raises into a decision."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratekeeper import Limit, MemoryStore
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.engine import Engine
from ratekeeper.rules import parse_rules
from ratekeeper.testing import FakeClock

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
"""
INVALID = '{"capacity": 0, "time_window_sec": 1}'


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "config.db"


@pytest.fixture
def engine(path: Path, clock: FakeClock) -> Iterator[Engine]:
    config = open_config_store(f"sqlite:///{path}")
    config.set("user:known", Override(3, 60, "fixed_window"))
    config.set("user:known", Override(3, 60, "fixed_window"), "api")
    engine = Engine(
        MemoryStore(clock=clock),
        rules=parse_rules(RULES, "rules.yaml"),
        config=config,
        default="10/minute",
        cache_ttl=3600,
        clock=clock,
    )
    yield engine
    engine.close()


def corrupt(path: Path, domain: str, key: str) -> None:
    """Replace the key's stored override with one that does not validate, by plain SQL."""
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT OR REPLACE INTO overrides (domain, key, config, updated_at)"
            " VALUES (?, ?, ?, 0)",
            (domain, key, INVALID),
        )
    db.close()


def test_an_invalid_override_falls_back_to_the_last_known_limit(
    engine: Engine, path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert engine.decide("user:known", cost=0).limit == 3
    assert engine.check("api", [[("user", "known")]], hits=0).statuses[0].limit == Limit(3, 60)
    corrupt(path, "", "user:known")
    corrupt(path, "api", "user:known")
    engine.planner.cache.expire()  # as the cache's TTL, or the store's change poll, does
    with caplog.at_level(logging.WARNING, logger="ratekeeper.engine"):
        assert engine.decide("user:known", cost=0).limit == 3
        status = engine.check("api", [[("user", "known")]], hits=0).statuses[0]
        assert status.limit == Limit(3, 60) and status.overridden
        assert engine.decide("user:known", cost=0).limit == 3  # cached: read, logged once
    assert engine.planner.config_errors == 2
    assert caplog.text.count("invalid override in the configuration store") == 2
    assert "override 'user:known': capacity must be a positive integer, not 0" in caplog.text


def test_an_invalid_override_never_seen_falls_back_to_the_rules_else_the_default(
    engine: Engine, path: Path
) -> None:
    corrupt(path, "", "user:new")
    corrupt(path, "api", "user:new")
    assert engine.decide("user:new", cost=0).limit == 10  # the engine's default
    status = engine.check("api", [[("user", "new")]], hits=0).statuses[0]
    assert status.limit == Limit(2, 60) and not status.overridden  # the rule
    assert engine.planner.config_errors == 2
    # The rest of the store is still used.
    assert engine.decide("user:known", cost=0).limit == 3


def test_a_fixed_override_applies_again(engine: Engine, path: Path) -> None:
    corrupt(path, "", "user:new")
    assert engine.decide("user:new", cost=0).limit == 10
    assert engine.config is not None
    engine.config.set("user:new", Override(4, 60))
    assert engine.decide("user:new", cost=0).limit == 4


def test_a_key_holding_nul_is_decided_by_the_rules_without_asking_the_store(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A request can send a NUL ("%00" in a path); no override can be stored under it, so the
    store is not asked, nothing is logged per request, and the plan is cached as any other."""
    with caplog.at_level(logging.WARNING, logger="ratekeeper.engine"):
        decided = [engine.check("api", [[("user", "a\x00b")]]).allowed for _ in range(3)]
        assert engine.decide("k\x00").allowed  # the engine's default, 10 a minute
    assert decided == [True, True, False]  # the rule: 2 a minute
    assert caplog.records == []
    assert engine.planner.config_errors == 0
    assert engine.planner.cache_misses == 2  # one load each, then the cache
