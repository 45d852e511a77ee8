"""Redis killed for 10 s under load: a few log lines per worker, and ``/readyz`` current at once.

One ``ratekeeper serve --workers 2`` on a redis-server of its own, JSON logs (each line names
its worker's pid). ``THREADS`` threads send ``POST /v1/check``, each on a new connection so
that both workers take a share; after ``WARM`` seconds Redis is SIGKILLed, and restarted on
the same port ``OUTAGE`` seconds later. ``/readyz`` is polled every 100 ms throughout.

What an operator has to read for the outage, per worker, is at most ``MOST_LINES`` lines: the
breaker opening (an error, at once), the latest re-opening with the count of the others, and
the recovery with the outage's length; not a line a second. And ``/readyz`` says what is true
now: 503 with the error while Redis is down, then, within ``FRESH`` s of Redis answering again,
200 and no error (the past failure only under ``last_error``, with its time).
"""

from __future__ import annotations

import calendar
import json
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.load import report
from tests.servers import RedisServer
from tests.service.served import Served

pytestmark = pytest.mark.chaos

THREADS = 4
WARM = 2.0
OUTAGE = 10.0
#: Seconds of polling after Redis is back.
AFTER = 4.0
#: The most lines a worker may log for a 10 s outage: 3 are expected (opening, the latest
#: re-opening with its count, recovery); a person reads 5 at a glance, not one a second.
MOST_LINES = 5
#: Seconds after Redis answers again by which ``/readyz`` is 200 with no error.
FRESH = 1.0
#: The most requests the load sends (it stops with the test in any case).
MOST_REQUESTS = 20_000


def logged_at(line: dict[str, Any]) -> float:
    """The wall-clock time of a JSON log line."""
    stamp, millis = str(line["time"]).rstrip("Z").split(".")
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) + int(millis) / 1000


class Checks:
    """``THREADS`` threads sending checks, each on a new connection, until ``stop()``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: Counter[int | str] = Counter()
        self._sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(THREADS)]
        for thread in self._threads:
            thread.start()

    def _run(self, n: int) -> None:
        headers = {"Connection": "close"}  # a new connection each: both workers get some
        with httpx.Client(base_url=self.url, headers=headers, timeout=5) as client:
            while not self._stop.is_set():
                with self._lock:
                    if self._sent >= MOST_REQUESTS:
                        return
                    self._sent += 1
                    key = f"user-{self._sent % 20}"
                try:
                    status: int | str = client.post(
                        "/v1/check", json={"key": key, "limit": "1000/s"}
                    ).status_code
                except httpx.HTTPError as error:
                    status = type(error).__name__
                with self._lock:
                    self.statuses[status] += 1
                time.sleep(0.005)

    def stop(self) -> Counter[int | str]:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        return self.statuses


def poll_readyz(
    client: httpx.Client, url: str, seconds: float
) -> list[tuple[float, int, dict[str, Any]]]:
    """``/readyz`` every 100 ms for ``seconds``: when each was sent, its status and body."""
    polls = []
    end = time.time() + seconds
    while time.time() < end:
        sent = time.time()
        try:
            response = client.get(f"{url}/readyz")
            polls.append((sent, response.status_code, response.json()))
        except httpx.HTTPError as error:
            polls.append((sent, 0, {"error": type(error).__name__}))
        time.sleep(max(0.0, sent + 0.1 - time.time()))
    return polls


def store_error(body: dict[str, Any]) -> object:
    return body.get("store", {}).get("error", body.get("detail"))


def test_redis_killed_for_10_s_under_load(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis")
    log_path = tmp_path / "serve.log"
    try:
        with log_path.open("wb") as log:
            served = Served(
                tmp_path,
                *("--store", redis.url, "--workers", "2", "--log-format", "json"),
                stderr=log,
            )
        try:
            load = Checks(served.url)
            # a new connection each poll, so that both workers answer some
            with httpx.Client(timeout=2, headers={"Connection": "close"}) as probe:
                time.sleep(WARM)
                killed = time.time()
                redis.kill()
                down = poll_readyz(probe, served.url, OUTAGE)
                redis.start()  # on the same port; returns once it answers
                back = time.time()
                after = poll_readyz(probe, served.url, AFTER)
            statuses = load.stop()
        finally:
            assert served.stop() == 0
    finally:
        redis.stop()

    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    workers = sorted({line["pid"] for line in lines if "request store" in line["message"]})
    outage = [line for line in lines if killed <= logged_at(line) <= back + AFTER]
    per_worker = {pid: [line for line in outage if line["pid"] == pid] for pid in workers}
    counted = {
        pid: sum(
            int(found[1]) for line in mine if (found := re.search(r"… (\d+) more", line["message"]))
        )
        for pid, mine in per_worker.items()
    }
    recovered = {
        pid: [
            float(found[1])
            for line in mine
            if (found := re.search(r"reachable again after ([\d.]+) s", line["message"]))
        ]
        for pid, mine in per_worker.items()
    }
    first_fresh = next(
        (sent - back for sent, status, body in after if status == 200 and not store_error(body)),
        None,
    )
    stale = [
        (round(sent - back, 2), status, store_error(body))
        for sent, status, body in after
        if sent - back >= FRESH and (status != 200 or store_error(body))
    ]
    report(
        "Redis killed for 10 s under load, 2 workers",
        {
            "requests": dict(statuses),
            "log lines for the outage, per worker": {p: len(m) for p, m in per_worker.items()},
            "re-openings counted, not logged, per worker": counted,
            "outage as each worker logged it (s)": recovered,
            "/readyz during the outage": Counter(status for _, status, _ in down),
            "/readyz 200 with no error after Redis answered (s)": first_fresh,
            "first polls after": [
                (round(s - back, 2), st, store_error(b)) for s, st, b in after[:6]
            ],
            "lines": [f"{line['pid']} {line['level']} {line['message']}" for line in outage],
        },
    )

    assert len(workers) == 2, "both workers met the outage"
    assert all(len(mine) <= MOST_LINES for mine in per_worker.values()), per_worker
    for pid, mine in per_worker.items():
        assert mine[0]["level"] == "error" and "circuit open" in mine[0]["message"], mine
        assert counted[pid] >= 3, "the re-openings were counted, not logged"
        (seconds,) = recovered[pid]
        assert OUTAGE - 1 <= seconds <= OUTAGE + 3
    assert not any(line["logger"] == "ratekeeper.access" for line in lines)  # off by default
    assert any(status == 503 and store_error(body) for _, status, body in down)
    assert first_fresh is not None and first_fresh <= FRESH, after[:15]
    assert not stale, stale
    assert any(body.get("store", {}).get("last_error") for _, _, body in after)
    assert set(statuses) <= {200, 429}, statuses
