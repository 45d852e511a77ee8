"""envoyproxy/ratelimit's statistics from a real ``ratekeeper serve``: StatsD over TCP and
DogStatsD over UDP to real listeners, Prometheus on a listener of its own, one process and two
workers, and the last counts sent at SIGTERM."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.servers import RedisServer, free_ports, wait_until
from tests.service.observe.stats_listeners import TcpLines, UdpLines
from tests.service.served import Served

RULES = """\
domain: rl
descriptors:
  - key: unspec
    value: unspecified_value
    rate_limit: {unit: hour, requests_per_unit: 3}
"""
NAME = "ratelimit.service.rate_limit.rl.unspec_unspecified_value"
LABELS = '{domain="rl",key1="unspec_unspecified_value"}'
BODY = {
    "domain": "rl",
    "descriptors": [{"entries": [{"key": "unspec", "value": "unspecified_value"}]}],
}


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    config = tmp_path / "srv" / "ratelimit" / "config"
    config.mkdir(parents=True)
    (config / "rl.yaml").write_text(RULES)
    return tmp_path / "srv"


@pytest.fixture
def tcp() -> Iterator[TcpLines]:
    listener = TcpLines()
    yield listener
    listener.close()


@pytest.fixture
def udp() -> Iterator[UdpLines]:
    listener = UdpLines()
    yield listener
    listener.close()


def reference(runtime: Path, redis: RedisServer | None = None, **variables: str) -> dict[str, str]:
    """The reference's variables over ``runtime`` (and ``redis``), and ``variables``."""
    environ = {"RUNTIME_ROOT": str(runtime), "RUNTIME_SUBDIRECTORY": "ratelimit"}
    if redis is not None:
        environ.update(REDIS_SOCKET_TYPE="tcp", REDIS_URL=f"127.0.0.1:{redis.port}")
    return {**environ, **variables}


def checked(served: Served, times: int) -> list[int]:
    with httpx.Client(base_url=served.url, timeout=5) as client:
        return [client.post("/json", json=BODY).status_code for _ in range(times)]


def scraped(url: str) -> dict[str, float]:
    samples = {}
    for line in httpx.get(url, timeout=5).text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            samples[series] = float(value)
    return samples


def test_statsd_gets_the_counts_of_a_service_and_its_last_ones_at_sigterm(
    tmp_path: Path, tcp: TcpLines
) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    flags = ("--rules", "rules.yaml", "--statsd", f"127.0.0.1:{tcp.port}")
    served = Served(tmp_path, *flags, "--stats-flush-interval", "3600", stderr=subprocess.PIPE)
    try:
        assert checked(served, 5) == [200, 200, 200, 429, 429]
        assert tcp.lines == []  # counted, not flushed yet
        own = httpx.get(f"{served.url}/metrics", timeout=5).text
    finally:
        assert served.stop() == 0  # SIGTERM: the last flush
    counts = tcp.wait_for(f"{NAME}.total_hits", 5)
    assert {name: n for name, n in counts.items() if name.startswith(NAME)} == {
        f"{NAME}.total_hits": 5,
        f"{NAME}.within_limit": 3,
        f"{NAME}.near_limit": 1,
        f"{NAME}.over_limit": 2,
    }
    assert counts["ratelimit.service.config_load_success"] == 1
    assert "ratekeeper_decisions_total" in own and "ratelimit_service" not in own
    assert "Traceback" not in served.log()


def test_the_references_variables_send_statsd_from_each_of_two_workers(
    tmp_path: Path, runtime: Path, tcp: TcpLines, redis_server: RedisServer
) -> None:
    variables = reference(
        runtime,
        redis_server,
        STATSD_HOST="127.0.0.1",
        STATSD_PORT=str(tcp.port),
        EXTRA_TAGS="env:test.1",
        STATS_FLUSH_INTERVAL="100ms",
        CACHE_KEY_PREFIX=f"{tmp_path.name}_",
        RATEKEEPER_WORKERS="2",
    )
    served = Served(tmp_path, environ=variables, reference_addresses=True, stderr=subprocess.PIPE)
    try:
        assert checked(served, 6) == [200, 200, 200, 429, 429, 429]
        counts = tcp.wait_for(f"{NAME}.total_hits.__env=test_1", 6)
    finally:
        assert served.stop() == 0
    counts = tcp.counts()  # the workers' last flushes added nothing more
    assert {name: n for name, n in counts.items() if name.startswith(NAME)} == {
        f"{NAME}.total_hits.__env=test_1": 6,
        f"{NAME}.within_limit.__env=test_1": 3,
        f"{NAME}.near_limit.__env=test_1": 1,
        f"{NAME}.over_limit.__env=test_1": 3,
    }
    assert counts["ratelimit.service.config_load_success.__env=test_1"] == 2  # one a worker
    assert "the statistics go to StatsD at 127.0.0.1:" in served.log()


def test_the_references_dogstatsd_over_udp(tmp_path: Path, runtime: Path, udp: UdpLines) -> None:
    variables = reference(
        runtime,
        USE_STATSD="false",
        USE_DOG_STATSD="true",
        STATSD_HOST="127.0.0.1",
        STATSD_PORT=str(udp.port),
        EXTRA_TAGS="env:test",
    )
    served = Served(tmp_path, "--store", "memory://", environ=variables, reference_addresses=True)
    try:
        assert checked(served, 4) == [200, 200, 200, 429]
    finally:
        assert served.stop() == 0
    counts = udp.wait_for(f"{NAME}.total_hits|#env:test", 4)
    assert counts[f"{NAME}.over_limit|#env:test"] == 1
    assert counts[f"{NAME}.within_limit|#env:test"] == 3


def test_the_references_prometheus_names_on_a_listener_of_their_own(
    tmp_path: Path, runtime: Path
) -> None:
    (port,) = free_ports(1)
    variables = reference(
        runtime,
        USE_STATSD="false",
        USE_PROMETHEUS="true",
        PROMETHEUS_ADDR=f"127.0.0.1:{port}",
    )
    served = Served(tmp_path, "--store", "memory://", environ=variables, reference_addresses=True)
    try:
        assert checked(served, 5) == [200, 200, 200, 429, 429]
        samples = scraped(f"http://127.0.0.1:{port}/metrics")
        own = httpx.get(f"{served.url}/metrics", timeout=5).text
    finally:
        assert served.stop() == 0
    assert samples[f"ratelimit_service_rate_limit_total_hits{LABELS}"] == 5
    assert samples[f"ratelimit_service_rate_limit_over_limit{LABELS}"] == 2
    assert samples[f"ratelimit_service_rate_limit_within_limit{LABELS}"] == 3
    assert samples[f"ratelimit_service_rate_limit_near_limit{LABELS}"] == 1
    assert "ratekeeper_decisions_total" in own and "ratelimit_service" not in own


def test_the_references_prometheus_names_add_up_over_two_workers(
    tmp_path: Path, runtime: Path, redis_server: RedisServer
) -> None:
    (port,) = free_ports(1)
    variables = reference(
        runtime,
        redis_server,
        USE_STATSD="false",
        USE_PROMETHEUS="true",
        PROMETHEUS_ADDR=f"127.0.0.1:{port}",
        STATS_FLUSH_INTERVAL="100ms",
        CACHE_KEY_PREFIX=f"{tmp_path.name}_",
        RATEKEEPER_WORKERS="2",
    )
    served = Served(tmp_path, environ=variables, reference_addresses=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert checked(served, 6) == [200, 200, 200, 429, 429, 429]
        total = f"ratelimit_service_rate_limit_total_hits{LABELS}"
        loads = "ratelimit_service_config_load_success"
        wanted = {total: 6, loads: 2}  # both workers started and flushed
        wait_until(
            lambda: {name: scraped(url).get(name) for name in wanted} == wanted,
            15,
            "the workers' totals",
        )
        samples = scraped(url)
    finally:
        assert served.stop() == 0
    assert samples[f"ratelimit_service_rate_limit_over_limit{LABELS}"] == 3
    assert samples[f"ratelimit_service_rate_limit_within_limit{LABELS}"] == 3
    assert samples[f"ratelimit_service_rate_limit_near_limit{LABELS}"] == 1
