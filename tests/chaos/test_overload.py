"""More connections than one service can answer, with the probes beside them
(``tests.chaos.overload``, smaller and shorter than its default run).

Every connection is answered (none waits in the kernel's accept queue while the service is
busy), every answer is a decision (200, 429) or ``503 overloaded`` with ``Retry-After``, the
hot key admits exactly its limit of the requests decided, and every probe is answered 200. With
a bound of 100 decisions in flight on Redis the service sheds, at the door; with two workers
the same holds across both. Nothing here is timed but the run itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.overload import CAPACITY, run

pytestmark = pytest.mark.chaos

CONNECTIONS = 3000
SECONDS = 4.0


def _check(report: dict[str, Any]) -> None:
    statuses = {int(status): one["count"] for status, one in report["by_status"].items()}
    assert set(statuses) <= {200, 429, 503}, statuses
    assert report["failed_to_open"] == 0
    assert report["answered_connections"] == CONNECTIONS  # every one accepted and answered
    assert report["unretried_503"] == 0
    decided = statuses.get(200, 0) + statuses.get(429, 0)
    assert statuses.get(200, 0) == min(CAPACITY, decided)  # exact, as the crowd counted
    assert report["hot_key"]["admitted"] == statuses.get(200, 0)  # as the service counted
    assert report["probes"], "no probe ran"
    assert report["probes_failed"] == []


@pytest.mark.parametrize(
    ("store", "flags", "sheds"),
    [
        ("redis", ["--max-in-flight", "100"], True),
        ("redis", ["--workers", "2"], False),
        ("memory", [], False),
    ],
    ids=["redis-bound-100", "redis-w2", "memory"],
)
def test_every_connection_and_probe_is_answered_and_decisions_stay_exact(
    store: str, flags: list[str], sheds: bool
) -> None:
    report = run(CONNECTIONS, SECONDS, store=store, flags=flags)
    _check(report)
    if sheds:
        assert report["by_status"]["503"]["count"] > 0
        assert any("overloaded" in line for line in report["logged"])
