"""Envoy's health checks following the rules and the request store, as the reference's follow
them with ``HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`` and ``REDIS_HEALTH_CHECK_ACTIVE_CONNECTION``.

``ratekeeper serve`` runs with the reference's variables only, its runtime directory empty, and
a real redis-server: ``GET /healthcheck`` answers 500 (empty) and the gRPC health service
``NOT_SERVING`` for ``ratelimit`` until a rule file is written, then 200 ``OK`` and
``SERVING``; again 500 and ``NOT_SERVING`` while Redis is stopped, and healthy once it is back.
The overall server's name, ``""``, stays ``SERVING`` throughout, as in the reference. On both
servers: uvicorn with grpc.aio, and pyvoy (gRPC on the HTTP port).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.gateways import pyvoy_binary
from tests.servers import RedisServer, wait_until
from tests.service.served import Served

pytestmark = [pytest.mark.slow]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
RULES = """
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
"""


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


def grpc_health(port: int) -> tuple[int, int, int]:
    """The gRPC health service's statuses for ``""``, the rate-limit service's name and
    ``ratelimit``."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        names = ("", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit")
        return tuple(  # type: ignore[return-value]
            stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status
            for name in names
        )


def answers(served: Served) -> tuple[tuple[int, str], tuple[int, int, int]]:
    """``/healthcheck``'s status and body, and the gRPC health statuses."""
    http = httpx.get(f"{served.url}/healthcheck", timeout=5)
    return (http.status_code, http.text), grpc_health(served.grpc_port)


HEALTHY = ((200, "OK"), (SERVING, SERVING, SERVING))
UNHEALTHY = ((500, ""), (SERVING, NOT_SERVING, NOT_SERVING))


def becomes(served: Served, expected: object, what: str) -> None:
    wait_until(lambda: answers(served) == expected, 10.0, what)


@pytest.mark.parametrize("server", ["uvicorn", "pyvoy"])
def test_the_health_checks_follow_the_rules_and_the_store(
    tmp_path: Path, redis: RedisServer, server: str
) -> None:
    if server == "pyvoy" and pyvoy_binary() is None:
        pytest.skip("pyvoy is not installed (the pyvoy extra)")
    config = tmp_path / "runtime" / "ratelimit" / "config"
    config.mkdir(parents=True)
    environ = {
        "RUNTIME_ROOT": str(tmp_path / "runtime"),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"127.0.0.1:{redis.port}",
        "USE_STATSD": "false",
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true",
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true",
    }
    served = Served(
        tmp_path,
        "--server",
        server,
        environ=environ,
        stderr=subprocess.PIPE,
        reference_addresses=True,
    )
    try:
        assert answers(served) == UNHEALTHY  # no rule loaded yet
        (config / "rl.yaml").write_text(RULES)
        becomes(served, HEALTHY, "healthy once a rule file is loaded")
        port = redis.port
        redis.stop()
        becomes(served, UNHEALTHY, "unhealthy while Redis is down")
        restarted = RedisServer(tmp_path / "redis", port)
        try:
            becomes(served, HEALTHY, "healthy once Redis is back")
        finally:
            restarted.stop()
    finally:
        assert served.stop() == 0
    log = served.log()
    assert "health check: unhealthy: no rule loaded" in log
    assert "health check: unhealthy: the request store" in log
    assert log.count("health check: healthy again") == 2


def test_without_the_variables_the_health_checks_say_the_process_runs(
    tmp_path: Path, redis: RedisServer
) -> None:
    config = tmp_path / "runtime" / "ratelimit" / "config"
    config.mkdir(parents=True)
    environ = {
        "RUNTIME_ROOT": str(tmp_path / "runtime"),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": f"127.0.0.1:{redis.port}",
        "USE_STATSD": "false",
    }
    served = Served(tmp_path, environ=environ, stderr=subprocess.PIPE, reference_addresses=True)
    try:
        assert answers(served) == HEALTHY  # no rule, and still healthy
        redis.stop()
        wait_until(
            lambda: httpx.get(f"{served.url}/readyz", timeout=5).status_code == 503,
            10.0,
            "/readyz to see Redis down",
        )
        assert answers(served) == HEALTHY
    finally:
        assert served.stop() == 0
    assert "health check:" not in served.log()
