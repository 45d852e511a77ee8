"""Metrics that add up across worker processes.

Processes counting into one multiprocess directory read as one service: counters summed,
each gauge combined as it says, the gauges of an ended process dropped and its counts kept.
Then the real ``ratekeeper serve --workers N`` on Redis, under load from several threads while
Prometheus-like scrapes arrive on fresh connections (any worker may answer each): no counter
ever goes down, and the totals are exactly the decisions the clients saw.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from ratekeeper import Engine, Limit
from ratekeeper.service.inflight import DEFAULT_MAX_IN_FLIGHT, InFlightBound
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.observe.multiprocess import VARIABLE, shared_directory
from ratekeeper.service.observe.scraped import COMBINE, COMBINED
from tests.servers import RedisServer, wait_until
from tests.service.served import Served
from tests.service.workers import (
    Samples,
    decisions_by_worker,
    fresh,
    metrics_directory,
    parse,
    worker_pids,
)

ROOT = Path(__file__).resolve().parents[3]


def by_result(samples: Samples) -> Counter[str]:
    """``ratekeeper_decisions_total`` summed by result."""
    counted: Counter[str] = Counter()
    for (name, labels), value in samples.items():
        if name == "ratekeeper_decisions_total":
            counted[dict(labels)["result"]] += int(value)
    return counted


# Processes sharing one directory, each with its own store health, in-flight bound and decisions.


class Worker:
    """A ``tests.service.observe.metrics_worker`` process counting into ``directory``."""

    def __init__(self, directory: Path, **spec: Any) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.service.observe.metrics_worker", json.dumps(spec)],
            cwd=ROOT,
            env={**os.environ, VARIABLE: str(directory)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        return stdout.readline().rstrip("\n")

    def _send(self, command: str) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(command + "\n")
        stdin.flush()

    def scrape(self) -> Samples:
        """What this process answers a scrape with: every process's figures."""
        self._send("text")
        lines = []
        while (line := self._line()) != "END":
            lines.append(line)
        return parse("\n".join(lines) + "\n")[0]

    def close(self) -> None:
        self._send("close")
        assert self._line() == "closed"

    def kill(self) -> None:
        self.process.kill()
        self.stop()

    def stop(self) -> None:
        """End it (its input closed) and close its pipes."""
        self.process.communicate(timeout=10)


UP = {"ok": True}
DOWN = {
    "ok": False,
    "breaker": "open",
    "failures": 5,
    "opened": 1,
    "degraded": 2,
    "open_shards": ["a:1", "b:2"],
}


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def figures(samples: Samples) -> dict[str, float]:
    """The samples the combining test reads, by name (and ``state``, ``result``)."""
    named = {
        "up": ("ratekeeper_store_up", ()),
        "closed": ("ratekeeper_store_breaker_state", (("state", "closed"),)),
        "open": ("ratekeeper_store_breaker_state", (("state", "open"),)),
        "half-open": ("ratekeeper_store_breaker_state", (("state", "half-open"),)),
        "shards open": ("ratekeeper_store_shards_open", ()),
        "errors": ("ratekeeper_store_errors_total", ()),
        "openings": ("ratekeeper_store_breaker_openings_total", ()),
        "degraded": ("ratekeeper_store_degraded_decisions_total", ()),
        "in flight": ("ratekeeper_decisions_in_flight", ()),
        "in flight max": ("ratekeeper_decisions_in_flight_max", ()),
        "shed": ("ratekeeper_requests_shed_total", (("surface", "http"),)),
        "entries": ("ratekeeper_plan_cache_entries", ()),
        "misses": ("ratekeeper_plan_cache_misses_total", ()),
        "hits": ("ratekeeper_plan_cache_hits_total", ()),
        "reloads": ("ratekeeper_rule_reloads_total", ()),
    }
    found = {what: samples[key] for what, key in named.items()}
    for result, count in by_result(samples).items():
        found[result] = count
    return found


def test_processes_sharing_a_directory_read_as_one_service(
    tmp_path: Path, workers: list[Worker]
) -> None:
    first = Worker(tmp_path, health=UP, keys=["a", "a"], limit=10, enter=2)
    workers.append(first)
    second = Worker(tmp_path, health=DOWN, keys=["a", "a", "a", "b"], limit=3, enter=5)
    workers.append(second)
    both = {
        "up": 0,  # the least: one store is down
        "closed": 1,  # the most: a state some worker's breaker is in
        "open": 1,
        "half-open": 0,
        "shards open": 2,  # the most
        "errors": 5,  # counters: summed
        "openings": 1,
        "degraded": 2,
        "in flight": 2 + 3,  # the sum
        "in flight max": 10 + 3,
        "shed": 2,
        "entries": 1 + 2,
        "misses": 1 + 2,
        "hits": 1 + 2,
        "reloads": 0,
        "allowed": 2 + 3,
        "limited": 1,
    }
    assert figures(first.scrape()) == both
    assert figures(second.scrape()) == both  # whichever process answers

    second.kill()  # no goodbye: its gauges are dropped by the next scrape, its counts kept
    alone = {
        **both,
        "up": 1,
        "open": 0,
        "shards open": 0,
        "in flight": 2,
        "in flight max": 10,
        "entries": 1,
    }
    assert figures(first.scrape()) == alone

    third = Worker(tmp_path, health=UP, keys=["c"], limit=4, enter=0)  # a replacement
    workers.append(third)
    assert figures(first.scrape()) == {
        **alone,
        "in flight max": 10 + 4,
        "entries": 1 + 1,
        "misses": 3 + 1,
        "allowed": 5 + 1,
    }
    third.close()  # a graceful stop: its gauges go at once, its counts stay
    assert figures(first.scrape()) == {**alone, "misses": 3 + 1, "allowed": 5 + 1}


def test_a_worker_publishes_increases_and_never_takes_a_count_back(
    tmp_path: Path, workers: list[Worker]
) -> None:
    worker = Worker(tmp_path, health=DOWN, keys=[], limit=1, enter=0)
    workers.append(worker)
    for _ in range(3):  # published at every scrape: the same figure, not added again
        assert worker.scrape()["ratekeeper_store_errors_total", ()] == 5


def test_every_gauge_says_how_it_combines() -> None:
    metrics = Metrics()
    metrics.track(Engine(default=Limit(1, 60)))
    metrics.in_flight_bound = InFlightBound(4)
    _, families = parse(metrics.text().decode())
    gauges = {
        name: help
        for name, (kind, help) in families.items()
        if kind == "gauge" and not name.endswith("_created")  # the text format's timestamps
    }
    assert set(gauges) == set(COMBINE)
    for name, help in gauges.items():
        assert help.endswith(COMBINED[COMBINE[name]]), name


def test_docs_give_each_gauge_its_combination() -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    section = doc.split("## Many workers", 1)[1].split("\n## ", 1)[0]
    words = {"livemin": "least", "livemax": "most", "livesum": "sum"}
    rows = {
        line.split("`")[1]: line.split("|")[2].strip()
        for line in section.splitlines()
        if line.startswith("| `")
    }
    assert rows == {name: words[mode] for name, mode in COMBINE.items()}


def test_many_processes_need_the_directory_before_prometheus_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    with pytest.raises(ValueError, match="PROMETHEUS_MULTIPROC_DIR must name a directory"):
        Metrics(multiprocess=True)
    monkeypatch.setenv(VARIABLE, str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="PROMETHEUS_MULTIPROC_DIR must name a directory"):
        Metrics(multiprocess=True)
    monkeypatch.setenv(VARIABLE, str(tmp_path))  # too late: prometheus_client is imported
    with pytest.raises(ValueError, match="imported before PROMETHEUS_MULTIPROC_DIR was set"):
        Metrics(multiprocess=True)
    assert os.listdir(tmp_path) == []


def test_one_process_publishes_nothing_and_writes_no_file(tmp_path: Path) -> None:
    metrics = Metrics()
    assert not metrics.multiprocess
    metrics.publish()
    metrics.close()
    asyncio.run(metrics.publish_every())  # returns at once
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seconds", [0, -1.0, math.nan, math.inf, "1", True])
def test_the_publishing_period_is_a_positive_number_of_seconds(seconds: Any) -> None:
    with pytest.raises(ValueError, match="seconds must be a positive finite number"):
        asyncio.run(Metrics().publish_every(seconds))


def test_the_shared_directory_lives_for_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "/somewhere/else")
    with shared_directory() as path:
        assert os.environ[VARIABLE] == path
        assert os.stat(path).st_mode & 0o777 == 0o700
        Path(path, "counter_1.db").write_bytes(b"")
    assert os.environ[VARIABLE] == "/somewhere/else"
    assert not os.path.exists(path)
    monkeypatch.delenv(VARIABLE)
    with shared_directory():
        pass
    assert VARIABLE not in os.environ


# The real service, its workers answering the scrapes in turn.

RULES = """
domain: {domain}
descriptors:
  - key: user
    rate_limit: {{unit: hour, requests_per_unit: 60, name: per_user}}
"""
REQUESTS = 600
SCRAPES = 20
CLIENTS = 4


def scrape(client: httpx.Client) -> Samples:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    return parse(answer.text)[0]


def never_down(scrapes: list[Samples]) -> None:
    """Every counter and histogram sample of each scrape is at least the previous scrape's,
    and the sum of the decisions too."""
    for before, after in itertools.pairwise(scrapes):
        for key, value in before.items():
            name = key[0]
            if name.endswith(("_total", "_bucket", "_count", "_sum")):
                assert after.get(key, -1) >= value, (key, value, after.get(key))
        assert sum(by_result(after).values()) >= sum(by_result(before).values())


def body(domain: str, n: int) -> dict[str, Any]:
    """Every other request by a rule of the domain, the others a key with its own limit."""
    if n % 2 == 0:
        return {
            "domain": domain,
            "descriptors": [{"entries": [{"key": "user", "value": f"u{n % 3}"}]}],
        }
    return {"key": f"{domain}:k{n % 3}", "limit": "40/hour"}


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("count", [2, 4])
def test_every_scrape_of_many_workers_reports_the_whole_service(
    tmp_path: Path, redis_server: RedisServer, count: int
) -> None:
    domain = f"workers-{uuid.uuid4().hex[:12]}"  # fresh counts in the shared store
    (tmp_path / "rules.yaml").write_text(RULES.format(domain=domain))
    served = Served(
        tmp_path,
        *("--workers", str(count), "--store", redis_server.url, "--rules", "rules.yaml"),
    )
    try:
        pids = worker_pids(served)
        assert len(pids) == count
        directory = metrics_directory(pids[0])
        bound = count * DEFAULT_MAX_IN_FLIGHT  # once every worker has published its own
        with fresh(served.url) as http:
            wait_until(
                lambda: scrape(http)["ratekeeper_decisions_in_flight_max", ()] == bound,
                60,
                "every worker's gauges",
            )
        seen: Counter[tuple[int, bool]] = Counter()
        lock = threading.Lock()
        numbers = iter(range(REQUESTS))  # next() under the GIL: each number taken once

        def client() -> None:
            with fresh(served.url) as http:
                while (n := next(numbers, None)) is not None:
                    answer = http.post("/v1/check", json=body(domain, n))
                    degraded = answer.headers.get("x-ratelimit-degraded") == "true"
                    with lock:
                        seen[answer.status_code, degraded] += 1

        scrapes: list[Samples] = []

        def scraper() -> None:  # spread over the run: one per REQUESTS / SCRAPES answered
            with fresh(served.url) as http:
                for k in range(SCRAPES):
                    while answered() < k * REQUESTS // SCRAPES:
                        time.sleep(0.002)
                    scrapes.append(scrape(http))

        def answered() -> int:
            with lock:
                return sum(seen.values())

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        threads.append(threading.Thread(target=scraper))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        assert not any(thread.is_alive() for thread in threads)
        with fresh(served.url) as http:
            finals = [scrape(http) for _ in range(2 * count)]  # each worker may answer
        by_worker = decisions_by_worker(directory, pids)
    finally:
        status = served.stop()
    assert status == 0
    assert sum(seen.values()) == REQUESTS
    assert set(seen) <= {(200, False), (429, False), (200, True), (429, True)}
    assert len(scrapes) == SCRAPES
    never_down(scrapes + finals)
    during = [sum(by_result(samples).values()) for samples in scrapes]
    assert during[0] < during[-1], during  # taken while the decisions were made
    for final in finals:
        assert by_result(final) == {
            result: n
            for result, n in {
                "allowed": seen[200, False],
                "limited": seen[429, False],
                "degraded": seen[200, True] + seen[429, True],
            }.items()
            if n
        }
        assert final["ratekeeper_decision_seconds_count", (("surface", "http"),)] == REQUESTS
    assert seen[429, False] > 0  # the limits were reached
    assert sum(by_worker.values()) == REQUESTS
    assert sum(1 for n in by_worker.values() if n > 0) >= 2, by_worker  # shared out
    assert not directory.exists()  # removed at exit


@pytest.mark.slow
@pytest.mark.serial
def test_a_worker_killed_and_replaced_takes_no_count_away(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    domain = f"killed-{uuid.uuid4().hex[:12]}"
    served = Served(
        tmp_path, "--workers", "2", "--store", redis_server.url, "--max-in-flight", "50"
    )
    try:
        check = {"key": f"{domain}:k", "limit": "1000/hour"}
        with fresh(served.url) as http:
            for _ in range(100):
                assert http.post("/v1/check", json=check).status_code == 200
            before = worker_pids(served)
            wait_until(
                lambda: scrape(http)["ratekeeper_decisions_in_flight_max", ()] == 2 * 50,
                60,
                "both workers' gauges",
            )
            directory = metrics_directory(before[0])
            counted = decisions_by_worker(directory, before)
            assert sum(counted.values()) == 100
            victim = max(before, key=lambda pid: counted[pid])  # the one that decided most
            os.kill(victim, signal.SIGKILL)
            scrapes = []

            def replaced() -> bool:
                scrapes.append(scrape(http))
                pids = worker_pids(served)
                return len(pids) == 2 and victim not in pids

            wait_until(replaced, 60, "uvicorn to replace the killed worker")
            for _ in range(100):
                assert http.post("/v1/check", json=check).status_code == 200
            # the dead worker's gauge dropped, the new one's counted once it has published
            wait_until(  # a bound on the replacement's start, not a timing
                lambda: scrape(http)["ratekeeper_decisions_in_flight_max", ()] == 2 * 50,
                60,
                "the replacement's gauges and none of the killed worker's",
            )
            finals = [scrape(http) for _ in range(4)]
    finally:
        status = served.stop()
    assert status == 0
    never_down(scrapes + finals)
    for samples in scrapes:
        assert sum(by_result(samples).values()) >= 100
    for final in finals:
        assert by_result(final) == {"allowed": 200}
