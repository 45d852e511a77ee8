"""``ratekeeper serve`` behind the real gateways: nginx's auth_request on its HTTP port and Envoy's
rate-limit filter on its gRPC port, both from the shipped ``deploy/`` files.

One service process, one rule file for the domain ``edge`` (and ``--envoy-headers``, as
``deploy/README.md`` says to start it behind Envoy). Within the limit, the application is
reached and the rate-limit headers come back; over it, nginx answers 429 with Retry-After and
Envoy 429 with ``x-envoy-ratelimited``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.gateways import (
    EnvoyServer,
    NginxServer,
    UpstreamServer,
    envoy_config,
    http_request,
    nginx_config,
)
from tests.service.served import Served

RULES = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra, name: per_address}
  - key: generic_key
    value: default
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: gcra, name: everyone}
"""


@contextmanager
def serving(directory: Path, rules_text: str) -> Iterator[Served]:
    """``ratekeeper serve --envoy-headers`` on ``rules_text`` (the domain ``edge``), stopped
    cleanly after."""
    rules = directory / "edge.yaml"
    rules.write_text(rules_text)
    service = Served(directory, "--rules", str(rules), "--envoy-headers")
    try:
        yield service
    finally:
        assert service.stop() == 0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path, RULES) as service:
        yield service


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


def test_nginx_asks_ratekeeper_before_each_request(
    tmp_path: Path, served: Served, upstream: UpstreamServer
) -> None:
    nginx = NginxServer(
        tmp_path / "nginx", nginx_config(upstream_port=upstream.port, ratekeeper_port=served.http)
    )
    try:
        answers = [http_request(nginx.port, f"/page/{n}") for n in range(4)]
    finally:
        nginx.stop()
    assert [a.status for a in answers] == [200, 200, 200, 429]
    assert [r["path"] for r in upstream.requests()] == ["/page/0", "/page/1", "/page/2"]
    assert [a.headers.get("x-ratelimit-remaining") for a in answers] == ["2", "1", "0", "0"]
    assert [a.headers.get("x-ratelimit-limit") for a in answers] == ["3"] * 4
    assert int(answers[3].headers["retry-after"]) == 1200  # a GCRA slot of 3/hour


def test_envoy_asks_ratekeeper_over_grpc(
    tmp_path: Path, served: Served, upstream: UpstreamServer
) -> None:
    envoy = EnvoyServer(
        tmp_path / "envoy", envoy_config(upstream_port=upstream.port, ratekeeper_port=served.grpc)
    )
    try:
        answers = [http_request(envoy.port, f"/orders/{n}") for n in range(3)]
    finally:
        envoy.stop()
    assert [a.status for a in answers] == [200, 200, 429]
    assert answers[2].headers.get("x-envoy-ratelimited") == "true"
    assert [a.headers.get("x-ratelimit-remaining") for a in answers] == ["1", "0", "0"]
    assert [a.headers.get("x-ratelimit-limit") for a in answers] == ["2"] * 3
    assert answers[2].headers.get("retry-after") == "1800"  # a GCRA slot of 2/hour
    assert [r["path"] for r in upstream.requests()] == ["/orders/0", "/orders/1"]


PATH_RULES = """
domain: edge
descriptors:
  - key: path
    value: /api/login
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: gcra, name: login}
"""


def test_nginx_counts_every_spelling_of_a_path_as_the_path(
    tmp_path: Path, upstream: UpstreamServer
) -> None:
    """nginx routes /%61pi/login, //api//login and /x/../api/login as /api/login: so must the
    rule on /api/login count them, or a client steps around it by spelling the path anew."""
    with serving(tmp_path, PATH_RULES) as service:
        nginx = NginxServer(
            tmp_path / "nginx",
            nginx_config(upstream_port=upstream.port, ratekeeper_port=service.http),
        )
        try:
            spellings = ["/api/login", "/%61pi/login", "//api//login", "/x/../api/login"]
            answers = [http_request(nginx.port, path) for path in spellings]
            other = http_request(nginx.port, "/api/logout")
        finally:
            nginx.stop()
    assert [a.status for a in answers] == [200, 429, 429, 429]
    assert other.status == 200
    assert [r["path"] for r in upstream.requests()] == ["/api/login", "/api/logout"]


ADDRESS_RULES = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: gcra, name: per_address}
"""


@pytest.mark.parametrize("gateway", ["envoy", "nginx"])
def test_a_client_cannot_choose_its_own_address(
    tmp_path: Path, upstream: UpstreamServer, gateway: str
) -> None:
    """The [remote_address] descriptor is the address the connection came from: a client that
    sends X-Forwarded-For or X-Real-IP of its own choosing is still one client."""
    with serving(tmp_path, ADDRESS_RULES) as service:
        server: EnvoyServer | NginxServer
        if gateway == "envoy":
            config = envoy_config(upstream_port=upstream.port, ratekeeper_port=service.grpc)
            server = EnvoyServer(tmp_path / "envoy", config)
        else:
            config = nginx_config(upstream_port=upstream.port, ratekeeper_port=service.http)
            server = NginxServer(tmp_path / "nginx", config)
        try:
            answers = [
                http_request(
                    server.port,
                    f"/page/{n}",
                    headers={"X-Forwarded-For": f"198.51.100.{n}", "X-Real-IP": f"203.0.113.{n}"},
                )
                for n in range(3)
            ]
        finally:
            server.stop()
    assert [a.status for a in answers] == [200, 429, 429]
    assert [r["path"] for r in upstream.requests()] == ["/page/0"]
