"""``python -m tests.chaos.failover_minute`` at the load it documents, cut to 10 s after the
kill: three instances that count themselves hold the hot key to the ``local`` policy's bound,
each within its third while degraded, and no key on a healthy master is degraded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.chaos.failover_minute import HOT_LIMIT, measure

pytestmark = pytest.mark.chaos


def test_the_minute_of_a_failover(tmp_path: Path) -> None:
    result = asyncio.run(measure(tmp_path, fourth=False, full_coverage="no", seconds=10))
    assert result["instances_seen_2s_after_kill"] == [{"size": 3, "source": "counted"}] * 3
    assert set(result["statuses"]) <= {"200", "429"}, result
    assert result["hot_admitted_in_the_minute_of_the_kill"] <= 2 * HOT_LIMIT, result
    assert all(n <= HOT_LIMIT // 3 for n in result["hot_admitted_while_degraded_per_instance"])
    assert result["healthy_masters_degraded"].startswith("0 of "), result
    degraded, _, answered = result["dead_master_degraded"].partition(" of ")
    assert int(degraded) > 0 and int(answered) > 0, result  # the kill was felt
