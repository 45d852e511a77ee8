"""Address blocks through the real gateways: ``deploy/nginx/ratekeeper.conf`` sends each
client's ``$remote_addr`` to ``ratekeeper serve``, and ``deploy/envoy/envoy.yaml`` its
``remote_address`` descriptor; the rule counts ``remote_address`` by its /24 (IPv4) and /64
(IPv6). Clients connect from several loopback addresses (all of 127/8 is the loopback), from
``::1``, and through a dual-stack nginx listener where nginx sees an IPv4 client as
``::ffff:127.0.0.x``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateways import (
    EnvoyServer,
    NginxServer,
    UpstreamServer,
    envoy_config,
    http_request,
    nginx_config,
    render,
)
from tests.servers import free_port
from tests.service.served import Served

RULES = """
domain: edge
descriptors:
  - key: remote_address
    ipv4_prefix: 24
    ipv6_prefix: 64
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra, name: per_block}
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    rules = tmp_path / "edge.yaml"
    rules.write_text(RULES)
    service = Served(tmp_path, "--rules", str(rules))
    try:
        yield service
    finally:
        assert service.stop() == 0


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


def test_nginx_clients_count_by_their_block(
    tmp_path: Path, served: Served, upstream: UpstreamServer
) -> None:
    mapped = free_port()
    config = nginx_config(upstream_port=upstream.port, ratekeeper_port=served.http)
    config = render(
        config,
        {
            "listen 127.0.0.1:{{port}};": "listen 127.0.0.1:{{port}};\n"
            "    listen [::1]:{{port}};\n"
            f"    listen [::ffff:127.0.0.1]:{mapped} ipv6only=off;"
        },
    )
    nginx = NginxServer(tmp_path / "nginx", config)
    try:
        answers = [
            http_request(nginx.port, "/a", source="127.0.0.1"),
            http_request(nginx.port, "/b", source="127.0.0.2"),
            http_request(mapped, "/c", source="127.0.0.3"),  # nginx sees ::ffff:127.0.0.3
            http_request(nginx.port, "/d", source="127.0.0.4"),
            http_request(nginx.port, "/e", source="127.0.1.1"),  # another /24
            http_request(nginx.port, "/f", host="::1", source="::1"),  # an IPv6 /64
        ]
    finally:
        nginx.stop()
    assert [a.status for a in answers] == [200, 200, 200, 429, 200, 200]
    assert [a.headers.get("x-ratelimit-remaining") for a in answers] == [
        "2",
        "1",
        "0",
        "0",
        "2",
        "2",
    ]
    assert [r["path"] for r in upstream.requests()] == ["/a", "/b", "/c", "/e", "/f"]
    remote = [r["headers"].get("x-real-ip") for r in upstream.requests()]
    assert remote == ["127.0.0.1", "127.0.0.2", "::ffff:127.0.0.3", "127.0.1.1", "::1"]


def test_envoy_clients_count_by_their_block(
    tmp_path: Path, served: Served, upstream: UpstreamServer
) -> None:
    config = envoy_config(upstream_port=upstream.port, ratekeeper_port=served.grpc)
    envoy = EnvoyServer(tmp_path / "envoy", config)
    try:
        sources = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.1.1"]
        answers = [http_request(envoy.port, f"/{n}", source=s) for n, s in enumerate(sources)]
    finally:
        envoy.stop()
    assert [a.status for a in answers] == [200, 200, 200, 429, 200]
    assert answers[3].headers.get("x-envoy-ratelimited") == "true"
    assert [r["path"] for r in upstream.requests()] == ["/0", "/1", "/2", "/4"]
