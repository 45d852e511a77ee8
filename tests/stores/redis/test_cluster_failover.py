"""Kill a Redis Cluster master in the middle of a load: the limiter keeps answering under its
policy, raises nothing, and is exact again once the replica is promoted."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from ratekeeper import Limit, Limiter, open_store
from ratekeeper.core.store_keys import state_key
from tests.servers import RedisCluster

LIMIT = Limit(1_000_000, 3600, "gcra")  # never refuses: every answer shows the store's health
FRESH = Limit(20, 3600, "gcra")


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("policy", ["allow", "local"])
def test_master_killed_under_load(tmp_path: Path, policy: str) -> None:
    cluster = RedisCluster(tmp_path)
    try:
        # tag="identity": every limit of "victim" lives in the slot of the master killed below.
        store = open_store(
            cluster.url, on_store_error=policy, timeout=0.5, prefix="fo", tag="identity"
        )
        limiter = Limiter(store)
        client = store.store.client  # type: ignore[attr-defined]
        victim_port = client.get_node_from_key(state_key(LIMIT, "victim", "fo", "identity")).port
        victim = next(node for node in cluster.nodes if node.port == victim_port)
        keys = ["victim", *(f"user:{n}" for n in range(20))]

        outcome: Counter[str] = Counter()
        killed_at = None
        start = time.monotonic()
        while time.monotonic() - start < 12:
            if killed_at is None and time.monotonic() - start > 1:
                cluster.kill(victim)
                killed_at = time.monotonic()
            for key in keys:
                decision = limiter.hit(key, LIMIT)  # must never raise
                outcome["degraded" if decision.degraded else "exact"] += 1
                assert decision.allowed
            if killed_at and outcome["degraded"] and time.monotonic() - killed_at > 8:
                break
        assert outcome["degraded"] > 0, "the kill went unnoticed"
        promoted = cluster.wait_for_failover(victim)
        assert promoted.port != victim.port

        # Exact again: a fresh limit in the failed-over slot admits exactly its amount.
        deadline = time.monotonic() + 15
        while limiter.hit("victim", LIMIT).degraded:
            assert time.monotonic() < deadline, "never recovered after the failover"
            time.sleep(0.1)
        answers = [limiter.hit("victim", FRESH) for _ in range(25)]
        assert not any(d.degraded for d in answers)
        assert sum(d.allowed for d in answers) == 20
        limiter.close()
    finally:
        cluster.stop()
