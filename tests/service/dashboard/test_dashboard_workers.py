"""The dashboard of the real ``ratekeeper serve --workers 2`` on Redis counts every worker:
whichever worker answers ``/v1/stats``, its decisions per second and its keys add up exactly
to what the clients were answered."""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import RedisServer, wait_until
from tests.service.served import Served
from tests.service.workers import (
    fresh,
    metrics_directory,
    on_each_worker,
    published_at,
    worker_pids,
)

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
@pytest.mark.serial
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


# Each key's newest decision, whichever worker made it.

NEWEST_RULES = """
domain: {domain}
descriptors:
  - key: user
    rate_limit: {{unit: day, requests_per_unit: 5, name: per_user}}
"""
#: Users decided once on a connection held by one worker, then 9 times on one held by the
#: other: every user is decided by both, its newest decision on the second.
USERS = 12
#: Looks at ``/v1/top``, each on a connection of its own: both workers answer some.
LOOKS = 16


def _check(http: httpx.Client, domain: str, name: str, path: str = "/v1/check") -> httpx.Response:
    body = {"domain": domain, "descriptors": [{"entries": [{"key": "user", "value": name}]}]}
    return http.post(path, json=body)


def _post(connection: http.client.HTTPConnection, domain: str, name: str) -> int:
    """The status of one ``/v1/check`` for ``name`` on ``connection``."""
    body = {"domain": domain, "descriptors": [{"entries": [{"key": "user", "value": name}]}]}
    connection.request("POST", "/v1/check", json.dumps(body), {"Content-Type": "application/json"})
    answer = connection.getresponse()
    answer.read()
    return answer.status


def _decided_by(directory: Path, pid: int) -> set[str]:
    """The keys whose latest decision worker ``pid`` has published, in any of its files."""
    found: set[str] = set()
    for path in directory.glob(f"dashboard_{pid}*.json"):
        record = json.loads(path.read_text())
        slots = record["slots"].values() if "slots" in record else [record]
        for slot in slots:
            found.update(identity.partition("/")[2] for identity in slot["latest"])
    return found


@pytest.mark.slow
@pytest.mark.serial
def test_each_key_shows_its_newest_decision_whichever_worker_answers(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    domain = f"newest-{uuid.uuid4().hex[:12]}"
    (tmp_path / "rules.yaml").write_text(NEWEST_RULES.format(domain=domain))
    served = Served(
        tmp_path,
        *("--workers", "2", "--store", redis_server.url, "--rules", "rules.yaml"),
        *("--dashboard", "--admin-token", TOKEN),
    )
    try:
        pids = worker_pids(served)
        assert len(pids) == 2
        directory = metrics_directory(pids[0])
        names = [f"n{index}" for index in range(USERS)]
        held = on_each_worker(served.url, pids)
        try:
            for index, name in enumerate(names):
                first, second = (held[pid] for pid in (pids if index % 2 else pids[::-1]))
                assert _post(first, domain, name) == 200  # 4 left
                codes = [_post(second, domain, name) for _ in range(9)]
                assert codes == [200] * 4 + [429] * 5  # none left, refused
        finally:
            for connection in held.values():
                connection.close()
        decided = time.time()
        wait_until(
            lambda: all(published_at(directory, pid) > decided for pid in pids),
            30,
            "each worker's record of every decision",
        )
        by_both = set.intersection(*(_decided_by(directory, pid) for pid in pids))
        assert {f"user:{name}" for name in names} <= by_both, "a user not decided by both"
        with fresh(served.url) as http:
            looks = []
            for _ in range(LOOKS):
                answer = http.get(f"/v1/top?n={USERS}", headers=BEARER)
                assert answer.status_code == 200, answer.text
                looks.append(answer.json())
            peeked = {}  # after the looks: a peek is a decision the dashboard shows too
            for name in names:
                answer = _check(http, domain, name, "/v1/peek")
                assert answer.status_code == 200, answer.text
                peeked[f"user:{name}"] = answer.json()["statuses"][0]["remaining"]
        assert set(peeked.values()) == {0}
        for body in looks:
            shown = {one["key"]: one for one in body["requests"]["keys"]}
            assert set(shown) == set(peeked)
            for key, remaining in peeked.items():
                newest = (shown[key]["remaining"], shown[key]["allowed"])
                assert newest == (remaining, False), (key, shown[key])
    finally:
        assert served.stop() == 0
