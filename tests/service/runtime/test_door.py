"""A served process that sheds answers at the door: decisions turned away with 503, probes from
their copies, and both back to the usual way once it no longer sheds.

The service runs on a Redis of its own with ``--max-in-flight 1``. Redis is stopped (SIGSTOP),
so that one decision hangs and fills the bound: the process sheds. A decision on a connection
kept alive is then answered ``503 overloaded`` with ``Retry-After``, and each probe from a copy
the process took of its own answer (an ``Age`` header says how old), ``/readyz`` included,
which says, once a copy taken after the stop is in, that the store does not answer. Once Redis
runs again the hung decision is answered, the process no longer sheds, and the probes go the
usual way (no ``Age``).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.servers import RedisServer, wait_until
from tests.service.served import Served

CHECK = {"key": "door", "limit": {"capacity": 100, "time_window_sec": 60}}


@pytest.fixture
def stopped_store(tmp_path: Path) -> Iterator[tuple[Served, RedisServer]]:
    redis = RedisServer(tmp_path / "redis")
    (tmp_path / "service").mkdir()
    served = Served(
        tmp_path / "service",
        "--store",
        f"{redis.url}?timeout=30",  # the hung decision waits for Redis, not for a timeout
        "--max-in-flight",
        "1",
    )
    try:
        yield served, redis
    finally:
        os.kill(redis.pid, signal.SIGCONT)
        served.stop()
        redis.stop()


def _in_flight(url: str) -> float:
    """The decisions in flight, as ``/metrics`` says (it waits 2 s for the stopped store)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("ratekeeper_decisions_in_flight "):
            return float(line.split()[1])
    raise AssertionError("no ratekeeper_decisions_in_flight in /metrics")


def test_a_shedding_process_answers_decisions_and_probes_at_the_door(
    stopped_store: tuple[Served, RedisServer],
) -> None:
    served, redis = stopped_store
    assert httpx.post(f"{served.url}/v1/check", json=CHECK, timeout=5).status_code == 200
    assert "age" not in httpx.get(f"{served.url}/healthz", timeout=5).headers  # the usual way
    os.kill(redis.pid, signal.SIGSTOP)
    hung: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: hung.append(httpx.post(f"{served.url}/v1/check", json=CHECK, timeout=60))
    )
    thread.start()
    try:
        wait_until(lambda: _in_flight(served.url) == 1, 20, "one decision in flight")
        with httpx.Client(base_url=served.url, timeout=5) as client:
            shed = [client.post("/v1/check", json=CHECK) for _ in range(3)]  # one connection
        assert [answer.status_code for answer in shed] == [503] * 3
        for answer in shed:
            assert answer.headers["retry-after"] == "1"
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["type"].endswith(":overloaded")
            assert "deciding 1 request, the most it takes at once" in answer.json()["detail"]

        def copied(path: str) -> bool:
            return "age" in httpx.get(f"{served.url}{path}", timeout=5).headers

        for path in ("/healthz", "/readyz", "/metrics"):
            wait_until(lambda path=path: copied(path), 15, f"{path} answered from its copy")
        healthz = httpx.get(f"{served.url}/healthz", timeout=5)
        assert (healthz.status_code, healthz.json()) == (200, {"status": "ok"})
        # a copy is at most a few seconds old: the first ones may be from before the stop
        wait_until(
            lambda: httpx.get(f"{served.url}/readyz", timeout=5).status_code == 503,
            15,
            "/readyz's copy saying the store does not answer",
        )
        readyz = httpx.get(f"{served.url}/readyz", timeout=5)
        assert readyz.status_code == 503  # the copy says what the store is: not answering
        assert "did not answer" in readyz.text
        assert 0 <= int(readyz.headers["age"]) <= 5
        metrics = httpx.get(f"{served.url}/metrics", timeout=5)
        assert metrics.status_code == 200
        assert 'ratekeeper_requests_shed_total{surface="http"}' in metrics.text
        closing = httpx.post(
            f"{served.url}/v1/check", json=CHECK, headers={"Connection": "close"}, timeout=5
        )
        assert (closing.status_code, closing.headers["connection"]) == (503, "close")
    finally:
        os.kill(redis.pid, signal.SIGCONT)
        thread.join(timeout=60)
    assert [answer.status_code for answer in hung] == [200]
    wait_until(lambda: not copied("/healthz"), 15, "/healthz answered the usual way again")
    assert httpx.post(f"{served.url}/v1/check", json=CHECK, timeout=5).status_code == 200
