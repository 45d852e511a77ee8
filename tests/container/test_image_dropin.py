"""The image in place of envoyproxy/ratelimit's: the reference's variables unchanged
(``RUNTIME_ROOT=/data`` with its example rules mounted, ``REDIS_URL`` at a real redis-server),
a real Envoy running the reference's example proxy in front; then two containers behind one
Envoy restarted one after the other under load, without a failed call.

The containers share the host's network (``--network host``), so that Envoy and redis-server
run on this machine's loopback as in the rest of the suite; the reference's ``HOST``, ``PORT``,
``GRPC_HOST`` and ``GRPC_PORT`` put each on free ports.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.container.deployed import rate_limit_service
from tests.container.images import Container
from tests.gateways import ENVOY_YAML, EnvoyServer, UpstreamServer, http_request
from tests.processes import free_ports
from tests.servers import RedisServer
from tests.service.reference import EXAMPLES, proxy_config, ratelimit_stats, with_room

pytestmark = pytest.mark.slow


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    started: list[Container] = []
    yield started
    for container in started:
        container.remove()


class Reference:
    """One container started as the reference's deployments start theirs: its variables, its
    rules at ``/data/ratelimit/config``, read-only, and no argument."""

    def __init__(self, image: str, rules: Path, redis: RedisServer) -> None:
        self.image, self.rules, self.redis = image, rules, redis

    def start(self, http: int, grpc: int) -> Container:
        variables = {
            "RUNTIME_ROOT": "/data",
            "RUNTIME_SUBDIRECTORY": "ratelimit",
            "RUNTIME_IGNOREDOTFILES": "true",
            "REDIS_SOCKET_TYPE": "tcp",
            "REDIS_URL": f"127.0.0.1:{self.redis.port}",
            "USE_STATSD": "false",
            "HOST": "127.0.0.1",
            "PORT": str(http),
            "GRPC_HOST": "127.0.0.1",
            "GRPC_PORT": str(grpc),
        }
        options = [
            "--network=host",
            "--read-only",
            f"--volume={self.rules}:/data/ratelimit/config:ro",
            *(f"--env={name}={value}" for name, value in variables.items()),
        ]
        container = Container(self.image, options, url=f"http://127.0.0.1:{http}")
        return container


def rules(tmp_path: Path) -> Path:
    config = tmp_path / "config"
    config.mkdir()
    for example in sorted(EXAMPLES.glob("*.yaml")):
        (config / example.name).write_text(example.read_text())
    return config


def test_the_references_variables_behind_a_real_envoy(
    image: str,
    tmp_path: Path,
    redis: RedisServer,
    upstream: UpstreamServer,
    containers: list[Container],
) -> None:
    http, grpc = free_ports(2)
    containers.append(container := Reference(image, rules(tmp_path), redis).start(http, grpc))
    container.ready()
    envoy = EnvoyServer(tmp_path / "envoy", proxy_config(upstream.port, grpc))
    try:
        with_room()  # the reference's trigger-ratelimit.sh
        headers = {"foo": "pelle", "baz": "not-so-shady"}
        statuses = [http_request(envoy.port, "/twoheader", headers=headers).status for _ in "12345"]
        assert statuses == [200, 200, 200, 429, 429]
        assert ratelimit_stats(envoy) == {"ok": 3, "over_limit": 2}
    finally:
        envoy.stop()
    assert container.stop() == 0
    log = container.logs()
    assert "reading envoyproxy/ratelimit's variables and runtime directory" in log
    assert f"request store: redis://127.0.0.1:{redis.port}" in log
    assert "Traceback" not in log


def two_endpoints(config: str, first: int, second: int) -> str:
    """The proxy's ``ratelimit`` cluster with two endpoints, ``first`` and ``second``, and its
    rate-limit service with the retry policy of ``deploy/envoy/envoy.yaml``: a call that finds
    its endpoint's port closed (the container stopped, not yet started again) is tried again at
    once on the other endpoint; without it, such calls are let through undecided."""
    one = (
        "              - endpoint:\n"
        "                  address:\n"
        "                    socket_address:\n"
        "                      address: 127.0.0.1\n"
        "                      port_value: {}\n"
    )
    assert config.count(one.format(first)) == 1
    config = config.replace(one.format(first), one.format(first) + one.format(second))
    policy = rate_limit_service(ENVOY_YAML)["grpc_service"]["retry_policy"]
    old = "                            cluster_name: ratelimit\n"
    assert config.count(old) == 1
    return config.replace(old, f"{old}{' ' * 26}retry_policy: {json.dumps(policy)}\n")


@pytest.mark.serial
def test_a_rolling_restart_behind_envoy_fails_no_call(
    image: str,
    tmp_path: Path,
    redis: RedisServer,
    upstream: UpstreamServer,
    containers: list[Container],
) -> None:
    reference = Reference(image, rules(tmp_path), redis)
    ports = [free_ports(2), free_ports(2)]
    for http, grpc in ports:
        containers.append(reference.start(http, grpc))
    for container in containers:
        container.ready()
    config = two_endpoints(proxy_config(upstream.port, ports[0][1]), ports[0][1], ports[1][1])
    envoy = EnvoyServer(tmp_path / "envoy", config)
    statuses: list[int] = []
    done = threading.Event()

    def load() -> None:
        count = 0
        while not done.is_set():
            count += 1
            headers = {"foo": "pelle", "baz": f"load-{count}"}
            statuses.append(http_request(envoy.port, "/twoheader", headers=headers).status)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        during: list[int] = []  # requests answered while each container was replaced
        for index, (http, grpc) in enumerate(ports):
            before = len(statuses)
            assert containers[index].stop() == 0
            containers.append(reference.start(http, grpc))
            containers[-1].ready()
            during.append(len(statuses) - before)
        done.set()
        loader.join(timeout=30)
        stats = ratelimit_stats(envoy)
    finally:
        done.set()
        envoy.stop()
    print(
        f"\nrolling restart: {len(statuses)} requests through Envoy ({during} while each of "
        f"the two was replaced); Envoy's calls to ratekeeper: {stats}"
    )
    assert min(during) > 0
    assert set(statuses) == {200}
    stopped = "".join(
        f"\n--- {one.name}, stopped:\n" + "\n".join(one.logs().splitlines()[-30:])
        for one in containers[:2]
    )
    assert stats.get("error", 0) == 0 and stats.get("failure_mode_allowed", 0) == 0, stopped
    assert stats["ok"] == len(statuses)
