"""The engine's leased limits on a real Redis, meeting a change of a key's override.

Threads decide one key under a leased override of 1,000 a day while the override changes to
100 a day. Every verdict names the limit it was decided under; each limit counts in its own
state, so what the threads admitted under each is read back from the store exactly, once the
old limit's slice has gone back.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from ratekeeper import Limit, Limiter, open_store
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from ratekeeper.engine import Engine
from tests.servers import RedisServer, wait_until

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 50, sync: leased}
"""
REQUEST = [[("user", "alice")]]
DAY = 86_400
THREADS = 4


def test_a_leased_key_follows_its_override_and_gives_the_old_slice_back(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    config = open_config_store(f"sqlite:///{tmp_path / 'config.db'}")
    config.set("user:alice", Override(1_000, DAY, "fixed_window", sync="leased"), domain="api")
    prefix = f"override-{uuid.uuid4().hex[:8]}"
    store = open_store(redis_server.url, prefix=prefix, on_store_error=None, timeout=5.0)
    engine = Engine(store, rules=rules, config=config)
    verdicts: list[tuple[bool, int, str]] = []  # allowed, the limit's amount, the identity
    lock = threading.Lock()

    def decide() -> None:
        """Decide until refused under the new limit with nothing left (bounded in time)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            (status,) = engine.check("api", REQUEST).statuses
            assert status.limit is not None and status.decision is not None
            with lock:
                verdicts.append((status.allowed, status.limit.amount, status.identity))
            spent = not status.allowed and status.decision.remaining == 0
            if spent and status.limit.amount == 100:
                return

    def admitted(amount: int) -> int:
        with lock:
            return sum(allowed for allowed, limit, _ in verdicts if limit == amount)

    threads = [threading.Thread(target=decide) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    wait_until(lambda: admitted(1_000) >= 300, 60, "300 admitted under the first override")
    config.set("user:alice", Override(100, DAY, "fixed_window", sync="leased"), domain="api")
    for thread in threads:
        thread.join(90)
        assert not thread.is_alive()
    assert {limit for _, limit, _ in verdicts} == {1_000, 100}
    (identity,) = {identity for _, _, identity in verdicts}
    assert admitted(100) == 100  # never more under the new limit, and all of it when asked

    checker = Limiter(open_store(redis_server.url, prefix=prefix, on_store_error=None))

    def counted(amount: int) -> int:
        return amount - checker.peek(identity, Limit(amount, DAY, "fixed_window")).remaining

    assert counted(100) == 100  # the new limit's own state
    old = admitted(1_000)
    assert 300 <= old <= 1_000
    # The old limit's slice is idle now: the sweep gives back what it did not grant.
    wait_until(lambda: counted(1_000) == old, 10, "the old limit's slice to go back")
    engine.close()
    assert (counted(1_000), counted(100)) == (old, 100)
    checker.close()
