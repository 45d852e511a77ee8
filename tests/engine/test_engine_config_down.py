"""The engine keeps deciding while its PostgreSQL configuration store is down, and recovers."""

from __future__ import annotations

import time

from ratekeeper import Limit
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.engine import Engine
from ratekeeper.engine.plans import RETRY_AFTER_ERROR
from tests.servers import PostgresServer, wait_until

#: The store's own bound per call (PostgreSQL's connect timeout cannot go below 2 s).
TIMEOUT = 2.0


def test_decisions_go_on_by_the_last_known_limits_and_recover() -> None:
    server = PostgresServer()  # its own server: this test stops it
    engine = None
    try:
        config = open_config_store(server.url, table="down", timeout=TIMEOUT)
        config.set("user:known", Override(3, 60, "fixed_window"))
        engine = Engine(config=config, default="10/minute")
        assert engine.decide("user:known", cost=0).limit == 3  # now cached

        server.stop()
        engine.planner.cache.expire()  # the cache's TTL passes while the store is down
        started = time.monotonic()
        slowest = 0.0
        for _ in range(200):
            before = time.monotonic()
            assert engine.decide("user:known", cost=0).limit == 3  # the last known limit
            assert engine.decide("user:new", cost=0).limit == 10  # no override known: default
            slowest = max(slowest, time.monotonic() - before)
        elapsed = time.monotonic() - started
        assert engine.planner.config_errors >= 1
        # Only the first call after each RETRY_AFTER_ERROR waits on the store.
        assert slowest <= TIMEOUT + 1.0
        assert engine.planner.config_errors <= 1 + elapsed / RETRY_AFTER_ERROR

        server.start()
        config.set("user:new", Override(4, 60, "fixed_window"))
        wait_until(lambda: engine.decide("user:new", cost=0).limit == 4, 10.0, "recovery")
        assert engine.check("", [[("user", "known")]], hits=0).statuses[0].limit == Limit(3, 60)
    finally:
        if engine is not None:
            engine.close()
        server.remove()
