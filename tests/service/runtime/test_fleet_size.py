"""Instances of ``ratekeeper serve`` on one Redis, started without ``--instances``, count
themselves through the store: ``/readyz`` and ``/metrics`` say how many they are, an instance
stopped leaves the count at once, and when the store then fails each survivor admits exactly
its share of the last count."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import RedisCluster, RedisServer
from tests.service.served import Served, instances, settle

#: The limit of the key the survivors share once the store is gone.
LIMIT = 60
CHECK = {
    "key": "fleet-hot",
    "limit": {"capacity": LIMIT, "time_window_sec": 3600, "algorithm": "sliding_log"},
}


def gauge(served: Served) -> float:
    text = httpx.get(f"{served.url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        if family.name == "ratekeeper_store_instances":
            return family.samples[0].value
    raise AssertionError("no ratekeeper_store_instances in /metrics")


def admitted(served: Served, tries: int) -> int:
    with httpx.Client(base_url=served.url, timeout=10) as client:
        codes = [client.post("/v1/check", json=CHECK).status_code for _ in range(tries)]
    assert set(codes) <= {200, 429}, codes
    return codes.count(200)


def test_the_fleet_counts_itself_and_each_survivor_keeps_its_share(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis")
    fleet: list[Served] = []
    try:
        for index, flags in enumerate([(), (), ("--workers", "2")]):
            home = tmp_path / f"instance-{index}"
            home.mkdir()
            fleet.append(Served(home, "--store", redis.url, *flags))
        settle(fleet, 4)  # two instances of one process and one of two workers
        assert [gauge(one) for one in fleet[:2]] == [4, 4]

        assert fleet.pop().stop() == 0  # its two workers leave the roll as they stop
        settle(fleet, 2, timeout=5)

        redis.stop()
        # Each survivor, alone now, admits its half of the last count's share: 30 of 60.
        assert [admitted(one, 45) for one in fleet] == [LIMIT // 2, LIMIT // 2]
        for one in fleet:
            ready = httpx.get(f"{one.url}/readyz", timeout=5)
            assert ready.status_code == 503
            assert ready.json()["store"]["instances"] == {"size": 2, "source": "counted"}
    finally:
        for one in fleet:
            one.stop()
        redis.stop()


def test_a_configured_count_is_not_counted(tmp_path: Path, redis_server: RedisServer) -> None:
    served = Served(tmp_path, "--store", redis_server.url, "--instances", "3", "--workers", "2")
    try:
        assert instances(served) == {"size": 6, "source": "configured"}
        assert gauge(served) == 6
    finally:
        served.stop()


def test_a_memory_store_is_one_process(tmp_path: Path) -> None:
    served = Served(tmp_path)
    try:
        assert instances(served) == {"size": 1, "source": "configured"}
    finally:
        served.stop()


def test_a_cluster_that_refuses_every_key_on_failover_is_told(
    tmp_path: Path, redis_cluster: RedisCluster
) -> None:
    """Redis's default ``cluster-require-full-coverage yes``: the start logs it once, and
    ``/readyz`` carries it; the instance counts itself through the cluster."""
    served = Served(tmp_path, "--store", redis_cluster.url, stderr=subprocess.PIPE)
    try:
        store = httpx.get(f"{served.url}/readyz", timeout=5).json()["store"]
        settle([served], 1)
    finally:
        assert served.stop() == 0
    (warning,) = store["warnings"]
    assert warning.startswith("cluster-require-full-coverage is yes on 3 of 3 masters")
    logged = [line for line in served.log().splitlines() if "full-coverage" in line]
    assert len(logged) == 1, logged
    assert "WARNING" in logged[0] and "request store: cluster-require-full-coverage" in logged[0]


def test_an_instance_started_while_the_store_is_down_is_not_ready(tmp_path: Path) -> None:
    """One Redis, down: an instance started then has never counted the fleet. It takes each
    limit whole, as one alone would, and says so: ``/readyz`` answers 503, its count
    ``unknown``, so that a gateway that follows readiness sends it nothing. The two that had
    counted keep their halves."""
    redis = RedisServer(tmp_path / "redis")
    fleet: list[Served] = []
    try:
        for index in range(2):
            home = tmp_path / f"instance-{index}"
            home.mkdir()
            fleet.append(Served(home, "--store", redis.url))
        settle(fleet, 2)
        redis.stop()
        home = tmp_path / "late"
        home.mkdir()
        late = Served(home, "--store", redis.url, ready="/healthz", stderr=subprocess.PIPE)
        fleet.append(late)
        ready = httpx.get(f"{late.url}/readyz", timeout=5)
        assert ready.status_code == 503
        assert ready.json()["store"]["instances"] == {"size": 1, "source": "unknown"}
        assert [admitted(one, 70) for one in fleet] == [LIMIT // 2, LIMIT // 2, LIMIT]
    finally:
        for one in fleet:
            one.stop()
        redis.stop()
    said = [line for line in late.log().splitlines() if "unavailable at start" in line]
    assert len(said) == 1, late.log()
    assert said[0].endswith(
        "request store: unavailable at start (/readyz says 503): redis: Error 111 connecting to "
        f"127.0.0.1:{redis.port}. Connection refused."
    ), said


def test_a_misconfigured_store_leaves_the_count_unknown_and_the_stop_clean(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """An unknown database: the roll calls fail and say so at debug only (the decisions and
    /readyz tell the misconfiguration), and the service stops with no traceback."""
    store = redis_server.url.replace("/0", "/99")
    served = Served(tmp_path, "--store", store, stderr=subprocess.PIPE, ready="/healthz")
    try:
        time.sleep(1.5)  # two roll calls
        ready = httpx.get(f"{served.url}/readyz", timeout=5)
        check = httpx.post(f"{served.url}/v1/check", json=CHECK, timeout=5)
    finally:
        assert served.stop() == 0
    assert ready.status_code == check.status_code == 503
    assert "DB index is out of range" in check.json()["detail"]
    log = served.log()
    assert "Traceback" not in log, log
    assert "request store: unavailable at start (/readyz says 503): " in log, log
