"""The engine's repeated errors are logged once a minute with a count, and their end once: a
configuration store that fails every lookup, and a background task that fails every tick."""

from __future__ import annotations

import logging
import re
import threading

import pytest

from ratekeeper.config import open_config_store
from ratekeeper.core.errors import ConfigStoreError
from ratekeeper.core.overrides import Override
from ratekeeper.core.ticker import Ticker
from ratekeeper.engine import Engine
from ratekeeper.testing import FakeClock


class Failing:
    """A SQLite configuration store whose ``get`` fails while ``down``."""

    def __init__(self) -> None:
        self.store = open_config_store("sqlite://:memory:")
        self.down = False
        self.set, self.subscribe, self.close = (
            self.store.set,
            self.store.subscribe,
            self.store.close,
        )

    def get(self, key: str, domain: str = "") -> Override | None:
        if self.down:
            raise ConfigStoreError("configuration store 127.0.0.1:5432: connection refused")
        return self.store.get(key, domain)


def test_a_configuration_store_down_for_five_minutes_is_a_line_a_minute(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ratekeeper.engine")
    config = Failing()
    engine = Engine(config=config, default="10/minute", clock=clock, cache_size=1)  # type: ignore[arg-type]
    try:
        config.down = True
        for second in range(300):  # a new key a second: each looks the store up
            assert engine.decide(f"user:{second}", cost=0).limit == 10
            clock.advance(1.0)
        config.down = False
        engine.decide("user:back", cost=0)
        engine.decide("user:back-again", cost=0)
    finally:
        engine.close()
    failed = "configuration store failed; deciding by the last known limits, else the rules: "
    failed += "configuration store 127.0.0.1:5432: connection refused"
    assert [record.getMessage() for record in caplog.records] == [
        failed,
        *[f"{failed} (… 59 more in the last 60 s)"] * 4,
        f"{failed} (… 58 more in the last 60 s)",  # the latest, when the store answers again
        "configuration store answering again",
    ]
    assert 1 + 4 * 60 + 59 == 300 == engine.planner.config_errors


def test_a_background_task_that_keeps_failing_is_logged_once_then_once_when_it_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="ratekeeper.engine")
    calls = 0
    worked = threading.Event()

    def action() -> None:
        nonlocal calls
        calls += 1
        if calls <= 20:
            raise RuntimeError(f"boom {calls}")
        worked.set()

    ticker = Ticker(0.001, action, "ratekeeper-test")
    ticker.start()
    try:
        assert worked.wait(10)
    finally:
        ticker.stop()
    records = caplog.records
    assert [record.levelname for record in records] == ["ERROR", "ERROR", "WARNING"]
    first, latest, back = (record.getMessage() for record in records)
    assert first == "ratekeeper-test failed; trying again every 0.001s"
    assert "RuntimeError: boom 1" in caplog.text and records[0].exc_info is not None
    assert re.fullmatch(r"ratekeeper-test failed; .* \(… 18 more in the last \d+ s\)", latest)
    assert back == "ratekeeper-test works again"
