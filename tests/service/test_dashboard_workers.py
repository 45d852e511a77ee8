"""The dashboard of the real ``ratekeeper serve --workers 2`` on Redis counts every worker:
whichever worker answers ``/v1/stats``, its decisions per second and its keys add up exactly
to what the clients were answered."""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import RedisServer, wait_until
from tests.service.served import Served
from tests.service.test_metrics_workers import fresh, metrics_directory, worker_pids

TOKEN = "dashboard-workers-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
RULES = """
domain: {domain}
descriptors:
  - key: user
    rate_limit: {{unit: hour, requests_per_unit: 50, name: per_user}}
"""
REQUESTS = 400
CLIENTS = 4


def stats(http: httpx.Client) -> dict[str, Any]:
    answer = http.get("/v1/stats", headers=BEARER)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


@pytest.mark.slow
def test_every_worker_is_counted_whichever_answers(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    domain = f"dashboard-{uuid.uuid4().hex[:12]}"
    (tmp_path / "rules.yaml").write_text(RULES.format(domain=domain))
    served = Served(
        tmp_path,
        *("--workers", "2", "--store", redis_server.url, "--rules", "rules.yaml"),
        *("--dashboard", "--admin-token", TOKEN),
    )
    try:
        pids = worker_pids(served)
        assert len(pids) == 2
        directory = metrics_directory(pids[0])
        wait_until(
            lambda: all((directory / f"dashboard_{pid}.json").exists() for pid in pids),
            30,
            "each worker's record",
        )
        seen: Counter[int] = Counter()
        lock = threading.Lock()
        numbers = iter(range(REQUESTS))

        def client() -> None:
            with fresh(served.url) as http:
                while (n := next(numbers, None)) is not None:
                    name = "hog" if n % 2 == 0 else f"u{n % 7}"  # the hog: 200 of 400
                    check = {
                        "domain": domain,
                        "descriptors": [{"entries": [{"key": "user", "value": name}]}],
                    }
                    answer = http.post("/v1/check", json=check)
                    with lock:
                        seen[answer.status_code] += 1

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert seen == {200: 50 + 200, 429: 150}  # the hog's 50, and every other user's

        def counted(http: httpx.Client) -> bool:
            body = stats(http)
            series = body["series"]
            return sum(series["allowed"]) + sum(series["limited"]) == REQUESTS

        with fresh(served.url) as http:
            wait_until(lambda: counted(http), 30, "every decision in the figures")
            answers = [stats(http) for _ in range(8)]  # a connection each: both workers answer
        for body in answers:
            series = body["series"]
            assert body["workers"] == 2
            assert (sum(series["allowed"]), sum(series["limited"])) == (250, 150)
            top = body["top"]
            assert top["requests"]["total"] == REQUESTS
            assert top["refused"]["total"] == 150
            hog = top["refused"]["keys"][0]
            assert (hog["domain"], hog["key"], hog["count"]) == (domain, "user:hog", 150)
            assert (hog["rule"], hog["limit"], hog["remaining"]) == ("per_user", "50/hour", 0)
            assert top["requests"]["keys"][0]["count"] == 200
            rules = [(row["rule"], sum(row["limited"])) for row in body["rules"]]
            assert rules == [("per_user", 150)]
        for pid in pids:  # each worker decided some of them: the figures are a sum
            record = json.loads((directory / f"dashboard_{pid}.json").read_text())
            assert sum(n for _, counts in record["seconds"] for *_, n in counts) > 0
    finally:
        assert served.stop() == 0
