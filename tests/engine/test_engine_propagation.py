"""Two engines share one configuration store: a change made through one reaches the other.

The second engine has the old limit cached; the change must reach it within a second, on SQLite
(polled data version) and on a real PostgreSQL (LISTEN/NOTIFY).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from ratekeeper import Limit
from ratekeeper.config import ConfigStore, open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.engine import Engine
from tests.servers import PostgresServer

#: What the issue asks: a change is seen by the other instance within one second.
PROPAGATION = 1.0


@pytest.fixture(params=["sqlite", "postgresql"])
def open_config(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], ConfigStore]:
    """Opens one more instance of a configuration store the test's engines share."""
    if request.param == "sqlite":
        return lambda: open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    table = f"engine_{uuid.uuid4().hex[:8]}"
    return lambda: open_config_store(server.url, table=table)


def seen_after(engine: Engine, key: str, expected: Limit | None) -> float:
    """Seconds until ``engine`` decides ``key`` under ``expected`` (polled every 5 ms)."""
    started = time.monotonic()
    while time.monotonic() - started < 5.0:
        if engine.decide(key, cost=0).limit == (expected.amount if expected else 0):
            return time.monotonic() - started
        time.sleep(0.005)
    raise AssertionError(f"{key} never reached {expected}")


def test_a_change_through_one_engine_reaches_the_other_within_a_second(
    open_config: Callable[[], ConfigStore],
) -> None:
    first = Engine(config=open_config())
    second = Engine(config=open_config())
    try:
        key = "user:241531"
        assert second.decide(key, cost=0).limit == 0  # cached: no override
        delays = []
        for capacity in (5, 7, 9):
            first.config.set(key, Override(capacity, 1))  # type: ignore[union-attr]
            delays.append(seen_after(second, key, Limit(capacity, 1)))
        first.config.delete(key)  # type: ignore[union-attr]
        delays.append(seen_after(second, key, None))
        print(f"propagation delays: {', '.join(f'{d * 1000:.0f} ms' for d in delays)}")
        assert max(delays) <= PROPAGATION
    finally:
        first.close()
        second.close()


def test_the_first_engine_sees_its_own_change_at_once(
    open_config: Callable[[], ConfigStore],
) -> None:
    engine = Engine(config=open_config())
    try:
        assert engine.decide("user:1", cost=0).limit == 0
        engine.config.set("user:1", Override(4, 60))  # type: ignore[union-attr]
        assert engine.decide("user:1", cost=0).limit == 4
    finally:
        engine.close()
