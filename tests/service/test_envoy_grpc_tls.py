"""A real Envoy calling ``ratekeeper serve`` over mutual TLS and over a Unix socket.

Envoy runs the shipped ``deploy/envoy/envoy.yaml`` (free loopback ports), its ``ratekeeper``
cluster given an ``UpstreamTlsContext``: its own client certificate, the server's checked
against the test CA and its SAN (``localhost``); or an endpoint that is a Unix socket
(``pipe``). Certificates are made by openssl. Decisions come back as the rule says (three an
hour: 200, 200, 200, 429); an Envoy whose certificate lacks the SAN ratekeeper requires gets no
decision (``failure_mode_deny``: 500) and takes none of the limit; SIGTERM still stops the
service cleanly, exit 0, and a Unix socket is removed.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.certificates import make_certificates
from tests.gateways import EnvoyServer, UpstreamServer, envoy_config, http_request
from tests.servers import RedisServer, free_port
from tests.service.served import Served

RULES = """
domain: edge
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra, name: everyone}
"""
SAN = "envoy.mesh.internal"
SAID = "gRPC (Envoy's rate-limit protocol, health) listening on"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    clients = {"envoy": f"DNS:{SAN}", "other": "DNS:other.mesh.internal"}
    return make_certificates(tmp_path_factory.mktemp("certificates"), clients)


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


def mtls_flags(files: dict[str, Path]) -> list[str]:
    return [
        *("--grpc-tls-cert", str(files["server.crt"]), "--grpc-tls-key", str(files["server.key"])),
        *("--grpc-tls-client-ca", str(files["ca.crt"]), "--grpc-tls-client-san", SAN),
    ]


def with_tls(config: str, files: dict[str, Path], client: str) -> str:
    """Envoy's ``config`` with its ratekeeper cluster over TLS: ``client``'s certificate, and
    ratekeeper's checked against the CA, for localhost."""
    tls = f"""    connect_timeout: 0.25s
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          alpn_protocols: [h2]
          tls_certificates:
          - certificate_chain: {{filename: {files[f"{client}.crt"]}}}
            private_key: {{filename: {files[f"{client}.key"]}}}
          validation_context:
            trusted_ca: {{filename: {files["ca.crt"]}}}
            match_typed_subject_alt_names:
            - san_type: DNS
              matcher: {{exact: localhost}}
"""
    assert config.count("    connect_timeout: 0.25s\n") == 1
    return config.replace("    connect_timeout: 0.25s\n", tls)


def statuses(envoy: EnvoyServer, count: int) -> list[int]:
    return [http_request(envoy.port, f"/orders/{n}").status for n in range(count)]


def test_envoy_decides_through_ratekeeper_over_mtls(
    tmp_path: Path, upstream: UpstreamServer, files: dict[str, Path]
) -> None:
    (tmp_path / "edge.yaml").write_text(RULES)
    flags = ["--rules", str(tmp_path / "edge.yaml"), *mtls_flags(files)]
    service = Served(tmp_path, *flags, stderr=subprocess.PIPE)
    try:
        config = envoy_config(
            upstream_port=upstream.port, ratekeeper_port=service.grpc, failure_mode_deny=True
        )
        stranger = EnvoyServer(tmp_path / "other", with_tls(config, files, "other"))
        try:
            refused = statuses(stranger, 2)  # no decision for it: failure_mode_deny answers
        finally:
            stranger.stop()
        envoy = EnvoyServer(tmp_path / "envoy", with_tls(config, files, "envoy"))
        try:
            decided = statuses(envoy, 4)
        finally:
            envoy.stop()
    finally:
        code = service.stop()
    log = service.log()
    assert (refused, decided, code) == ([500, 500], [200, 200, 200, 429], 0)
    assert [r["path"] for r in upstream.requests()] == ["/orders/0", "/orders/1", "/orders/2"]
    assert f"{SAID} 127.0.0.1:{service.grpc} (mTLS, client SAN {SAN})" in log
    assert log.rstrip().endswith("stopped")


def test_envoy_decides_through_ratekeeper_on_a_unix_socket(
    tmp_path: Path, upstream: UpstreamServer
) -> None:
    (tmp_path / "edge.yaml").write_text(RULES)
    path = tmp_path / "rk.sock"
    service = Served(
        tmp_path, "--rules", str(tmp_path / "edge.yaml"), grpc=f"unix:{path}",
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        config = envoy_config(upstream_port=upstream.port, ratekeeper_port=1)
        tcp = "type: STRICT_DNS\n    connect_timeout: 0.25s"
        assert config.count(tcp) == 1
        config = config.replace(tcp, "type: STATIC\n    connect_timeout: 0.25s")
        config = config.replace(
            "socket_address: {address: 127.0.0.1, port_value: 1}", f"pipe: {{path: {path}}}"
        )
        envoy = EnvoyServer(tmp_path / "envoy", config)
        try:
            decided = statuses(envoy, 4)
        finally:
            envoy.stop()
        assert path.is_socket()
    finally:
        code = service.stop()
    assert (decided, code) == ([200, 200, 200, 429], 0)
    assert f"{SAID} unix:{path}" in service.log()
    assert not path.exists()


def test_every_worker_serves_mtls(
    tmp_path: Path, files: dict[str, Path], redis_server: RedisServer
) -> None:
    flags = ["--workers", "2", "--store", redis_server.url, *mtls_flags(files)]
    service = Served(tmp_path, *flags, stderr=subprocess.PIPE)

    async def check(client: str) -> int:
        key, chain = files[f"{client}.key"].read_bytes(), files[f"{client}.crt"].read_bytes()
        credentials = grpc.ssl_channel_credentials(files["ca.crt"].read_bytes(), key, chain)
        # a connection of its own each: SO_REUSEPORT hands each to one worker or the other
        async with grpc.aio.secure_channel(f"localhost:{service.grpc}", credentials) as talk:
            asked = health_pb2.HealthCheckRequest(service="ratelimit")
            return (await health_pb2_grpc.HealthStub(talk).Check(asked, timeout=5)).status

    async def checks() -> list[int]:
        return [await check("envoy") for _ in range(12)]

    try:
        answers = asyncio.run(checks())
    finally:
        code = service.stop()
    log = service.log()
    assert answers == [health_pb2.HealthCheckResponse.SERVING] * 12
    assert code == 0
    listening = [line for line in log.splitlines() if SAID in line]
    assert len(listening) == 2, log
    assert all(
        line.endswith(f"127.0.0.1:{service.grpc} (mTLS, client SAN {SAN})") for line in listening
    )


def test_a_unix_socket_another_service_answers_on_is_refused_and_a_stale_one_replaced(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rk.sock"
    first = Served(tmp_path, grpc=f"unix:{path}")
    try:
        second = subprocess.run(
            [sys.executable, "-m", "ratekeeper.cli", "serve", "--grpc", f"unix:{path}",
             "--http", f"127.0.0.1:{free_port()}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        assert first.stop() == 0
    assert second.returncode == 3
    assert second.stderr.splitlines()[-1].endswith(
        f"could not listen on gRPC unix:{path} (--grpc): another process listens on this socket"
    )
    with socket.socket(socket.AF_UNIX) as stale:  # bound, never listening: left behind
        stale.bind(str(path))
    third = Served(tmp_path, grpc=f"unix:{path}")
    try:
        assert path.is_socket()
    finally:
        assert third.stop() == 0
    assert not path.exists()
