"""Envoy's rate-limit protocol and the health service on grpc.aio over TLS, mutual TLS and a
Unix socket (``serve_grpc(..., tls=GrpcTls(...))``, ``unix:PATH``), with real grpc clients and
certificates made by openssl: a client without a certificate, or with one of another CA, fails
the handshake; one without the required SAN is answered UNAUTHENTICATED on every method, and
nothing is decided for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.grpc import serve_grpc
from ratekeeper.service.grpc.tls import GrpcTls, san_matches
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from tests.certificates import make_certificates

RULES = """
domain: edge
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra}
"""
OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
SAN = "envoy.mesh.internal"
REFUSED = f"the client certificate does not carry the SAN {SAN}"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = make_certificates(
        tmp_path_factory.mktemp("certificates"),
        {"envoy": f"DNS:{SAN},URI:spiffe://mesh/envoy", "other": "DNS:other.mesh.internal"},
    )
    stranger = make_certificates(tmp_path_factory.mktemp("stranger"), {"envoy": f"DNS:{SAN}"})
    return {**made, "stranger.crt": stranger["envoy.crt"], "stranger.key": stranger["envoy.key"]}


def request() -> rls_pb2.RateLimitRequest:
    entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="generic_key", value="default")
    descriptor = ratelimit_pb2.RateLimitDescriptor(entries=[entry])
    return rls_pb2.RateLimitRequest(domain="edge", descriptors=[descriptor], hits_addend=1)


def credentials(files: dict[str, Path], client: str | None) -> grpc.ChannelCredentials:
    """A client trusting the test CA, presenting ``client``'s certificate (None: none)."""
    pair = {}
    if client is not None:
        pair = {
            "private_key": files[f"{client}.key"].read_bytes(),
            "certificate_chain": files[f"{client}.crt"].read_bytes(),
        }
    return grpc.ssl_channel_credentials(files["ca.crt"].read_bytes(), **pair)


@asynccontextmanager
async def serving(address: str, tls: GrpcTls | None) -> AsyncIterator[int]:
    """``serve_grpc`` over a fresh engine on ``address``, stopped at the end; its port."""
    engine = AsyncEngine(rules=parse_rules(RULES, "edge.yaml"))
    server, port = await serve_grpc(engine, address, tls=tls)
    try:
        yield port
    finally:
        await server.stop(None)
        await engine.close()


async def statuses(channel: grpc.aio.Channel, count: int) -> list[int]:
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    return [(await stub.ShouldRateLimit(request(), timeout=5)).overall_code for _ in range(count)]


def mutual(files: dict[str, Path]) -> GrpcTls:
    return GrpcTls(str(files["server.crt"]), str(files["server.key"]), str(files["ca.crt"]), SAN)


def channel(port: int, files: dict[str, Path], client: str | None) -> grpc.aio.Channel:
    # the server's certificate names localhost, as Envoy's SNI and SAN check would ask for
    return grpc.aio.secure_channel(f"localhost:{port}", credentials(files, client))


def test_mtls_decides_for_a_client_with_the_certificate_and_san(files: dict[str, Path]) -> None:
    async def main() -> tuple[list[int], int]:
        async with (
            serving("127.0.0.1:0", mutual(files)) as port,
            channel(port, files, "envoy") as talk,
        ):
            decided = await statuses(talk, 4)
            health = health_pb2_grpc.HealthStub(talk)
            asked = health_pb2.HealthCheckRequest(service="ratelimit")
            return decided, (await health.Check(asked, timeout=5)).status

    assert asyncio.run(main()) == ([OK, OK, OK, OVER], health_pb2.HealthCheckResponse.SERVING)


@pytest.mark.parametrize("client", [None, "stranger"])
def test_a_client_without_a_certificate_of_the_ca_fails_the_handshake(
    files: dict[str, Path], client: str | None
) -> None:
    async def main() -> tuple[grpc.StatusCode, list[int]]:
        async with serving("127.0.0.1:0", mutual(files)) as port:
            async with channel(port, files, client) as talk:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await statuses(talk, 1)
            async with channel(port, files, "envoy") as talk:  # nothing was decided for it
                return caught.value.code(), await statuses(talk, 4)

    assert asyncio.run(main()) == (grpc.StatusCode.UNAVAILABLE, [OK, OK, OK, OVER])


def test_a_certificate_without_the_san_is_refused_on_every_method(files: dict[str, Path]) -> None:
    async def main() -> tuple[list[tuple[grpc.StatusCode, str | None]], list[int]]:
        refusals = []
        async with serving("127.0.0.1:0", mutual(files)) as port:
            async with channel(port, files, "other") as talk:
                health = health_pb2_grpc.HealthStub(talk)
                asked = health_pb2.HealthCheckRequest()
                for call in (
                    lambda: statuses(talk, 1),
                    lambda: health.Check(asked, timeout=5),
                    lambda: health.Watch(asked, timeout=5).read(),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await call()
                    refusals.append((caught.value.code(), caught.value.details()))
            async with channel(port, files, "envoy") as talk:  # nothing was decided for it
                return refusals, await statuses(talk, 4)

    refusals, decided = asyncio.run(main())
    assert refusals == [(grpc.StatusCode.UNAUTHENTICATED, REFUSED)] * 3
    assert decided == [OK, OK, OK, OVER]


def test_tls_without_a_client_ca_serves_clients_without_certificates(
    files: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    tls = GrpcTls(str(files["server.crt"]), str(files["server.key"]))

    async def main() -> tuple[int, list[int], grpc.StatusCode]:
        async with serving("127.0.0.1:0", tls) as port:
            async with channel(port, files, None) as talk:
                decided = await statuses(talk, 4)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as plain:
                with pytest.raises(grpc.aio.AioRpcError) as caught:  # plaintext to TLS
                    await statuses(plain, 1)
            return port, decided, caught.value.code()

    with caplog.at_level("INFO", logger="ratekeeper.service"):
        port, decided, plain = asyncio.run(main())
    assert (decided, plain) == ([OK, OK, OK, OVER], grpc.StatusCode.UNAVAILABLE)
    said = "gRPC (Envoy's rate-limit protocol, health) listening on"
    assert [m for m in caplog.messages if m.startswith(said)] == [f"{said} 127.0.0.1:{port} (TLS)"]


def test_a_unix_socket_serves_and_is_removed_at_stop(
    tmp_path: Path, files: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ratelimit.sock"

    async def main() -> tuple[bool, list[int]]:
        async with serving(f"unix:{path}", mutual(files)) as port:
            assert port == 1
            options = (("grpc.ssl_target_name_override", "localhost"),)
            address, client = f"unix:{path}", credentials(files, "envoy")
            async with grpc.aio.secure_channel(address, client, options) as talk:
                return path.is_socket(), await statuses(talk, 4)

    with caplog.at_level("INFO", logger="ratekeeper.service"):
        assert asyncio.run(main()) == (True, [OK, OK, OK, OVER])
    assert not path.exists()
    said = "gRPC (Envoy's rate-limit protocol, health) listening on"
    assert [m for m in caplog.messages if m.startswith(said)] == [
        f"{said} unix:{path} (mTLS, client SAN {SAN})"
    ]


@pytest.mark.parametrize(
    ("name", "dns", "ips", "matches"),
    [
        (SAN, [SAN], [], True),
        ("Envoy.Mesh.Internal.", [SAN], [], True),  # no regard to case, nor a final dot
        (SAN, ["*.mesh.internal"], [], True),  # a wildcard stands for one label
        ("a.envoy.mesh.internal", ["*.mesh.internal"], [], False),
        ("mesh.internal", ["*.mesh.internal"], [], False),
        (SAN, ["other.mesh.internal"], [SAN], False),  # a name is no IP SAN
        ("10.0.0.7", [], ["10.0.0.7"], True),
        ("10.0.0.7", ["10.0.0.7"], [], False),  # an address is matched against IP SANs only
        ("::1", [], ["0:0:0:0:0:0:0:1"], True),
        ("spiffe://mesh/envoy", [], [], False),  # URI SANs are not read, as the reference
    ],
)
def test_the_san_is_matched_as_the_reference_matches_it(
    name: str, dns: list[str], ips: list[str], matches: bool
) -> None:
    assert san_matches(name, dns, ips) is matches
