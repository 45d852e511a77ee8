"""``ratekeeper serve --server pyvoy`` as a real process: HTTP and Envoy's gRPC on one address,
in one Envoy (pyvoy), over one engine and one store.

A real Envoy (the shipped ``deploy/envoy/envoy.yaml``) runs its rate-limit filter against it:
200 until the limit, then 429; exactly the limit admitted out of many concurrent requests; the
HTTP API on the same address counting the same key. A grpcio client calls it directly:
decisions, the health service, and the messages it refuses (bytes that are no request, a
compressed message, one over 4 MiB, a method it does not serve). SIGTERM: exit 0, ``stopped``
logged, the stores closed. Skipped when pyvoy (the ``pyvoy`` extra) is not installed, except
the tests of what is refused without it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from tests.gateways import (
    EnvoyServer,
    UpstreamServer,
    envoy_config,
    http_request,
    pyvoy_binary,
    render,
)
from tests.servers import free_port
from tests.service.served import Served

#: alice 3 an hour; everyone 50 an hour (GCRA: no window edge for a test to straddle).
RULES = """
domain: edge
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: gcra, name: everyone}
    descriptors:
      - key: user
        value: alice
        rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra, name: alice}
"""
TOKEN = "pyvoy-token-0123456789abcdef"
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
Descriptor = ratelimit_pb2.RateLimitDescriptor
Response = rls_pb2.RateLimitResponse
installed = pytest.mark.skipif(
    pyvoy_binary() is None, reason="pyvoy is not installed (the pyvoy extra)"
)


def alice() -> rls_pb2.RateLimitRequest:
    entries = [Descriptor.Entry(key="generic_key", value="default")]
    entries.append(Descriptor.Entry(key="user", value="alice"))
    return rls_pb2.RateLimitRequest(domain="edge", descriptors=[Descriptor(entries=entries)])


ALICE_JSON = {
    "domain": "edge",
    "descriptors": [
        {"entries": [{"key": "generic_key", "value": "default"}, {"key": "user", "value": "alice"}]}
    ],
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    rules = tmp_path / "edge.yaml"
    rules.write_text(RULES)
    service = Served(
        tmp_path,
        "--server",
        "pyvoy",
        "--rules",
        str(rules),
        environ={"RATEKEEPER_ADMIN_TOKEN": TOKEN},
        stderr=subprocess.PIPE,
    )
    yield service
    service.kill()
    if service.process.stderr is not None:  # unread when the test failed
        service.process.stderr.close()


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tmp_path / "app")
    yield server
    server.stop()


def front(tmp_path: Path, upstream: UpstreamServer, served: Served) -> EnvoyServer:
    """Envoy in front of ``upstream``, asking ``served`` (its HTTP address: gRPC is there too)
    and failing closed, so that a call ratekeeper did not answer shows as a 500. It waits 5 s
    for an answer rather than the file's 0.25 s: the tests count answers, not time them, on a
    machine that may be busy."""
    config = envoy_config(
        upstream_port=upstream.port, ratekeeper_port=served.http, failure_mode_deny=True
    )
    return EnvoyServer(tmp_path / "envoy", render(config, {" timeout: 0.25s": " timeout: 5s"}))


@installed
def test_envoy_limits_by_ratekeeper_on_pyvoy_and_http_counts_the_same_key(
    tmp_path: Path, upstream: UpstreamServer, served: Served
) -> None:
    envoy = front(tmp_path, upstream, served)
    try:
        alice_headers = {"X-User": "alice"}
        through = [http_request(envoy.port, f"/a/{n}", headers=alice_headers) for n in range(2)]
        direct = httpx.post(f"{served.url}/v1/check", json=ALICE_JSON, timeout=10)
        after = http_request(envoy.port, "/a/2", headers=alice_headers)
        again = httpx.post(f"{served.url}/v1/check", json=ALICE_JSON, timeout=10)
    finally:
        envoy.stop()
    assert [a.status for a in through] == [200, 200]
    assert (direct.status_code, direct.json()["statuses"][0]["remaining"]) == (200, 0)
    assert (after.status, after.headers.get("x-envoy-ratelimited")) == (429, "true")
    assert again.status_code == 429
    assert [r["path"] for r in upstream.requests()] == ["/a/0", "/a/1"]
    assert served.stop() == 0


@installed
def test_of_200_concurrent_requests_through_envoy_exactly_the_limit_is_admitted(
    tmp_path: Path, upstream: UpstreamServer, served: Served
) -> None:
    envoy = front(tmp_path, upstream, served)
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            statuses = list(
                pool.map(
                    lambda n: http_request(envoy.port, f"/e/{n}", timeout=30).status, range(200)
                )
            )
    finally:
        envoy.stop()
    assert (statuses.count(200), statuses.count(429)) == (50, 150)
    assert len(upstream.requests()) == 50
    assert served.stop() == 0


@installed
def test_grpcio_calls_decisions_health_and_what_is_refused(served: Served) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{served.http}") as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        answers = [stub.ShouldRateLimit(alice(), timeout=10) for _ in range(4)]
        health = health_pb2_grpc.HealthStub(channel)
        serving = health.Check(health_pb2.HealthCheckRequest(service="ratelimit"), timeout=10)
        raw = channel.unary_unary(METHOD)
        compressible = rls_pb2.RateLimitRequest(domain="edge" * 100).SerializeToString()
        refused = {}
        for name, call in {
            "no request": lambda: raw(b"\xff\xff\xff", timeout=10),
            # grpcio sends a message that gzip would not shrink uncompressed
            "compressed": lambda: raw(compressible, timeout=10, compression=grpc.Compression.Gzip),
            "over 4 MiB": lambda: raw(b"\x0a" + b"\x00" * (4 * 1024 * 1024), timeout=10),
            "no such method": lambda: channel.unary_unary("/no.Such/Method")(b"", timeout=10),
            "unknown service": lambda: health.Check(
                health_pb2.HealthCheckRequest(service="other"), timeout=10
            ),
        }.items():
            with pytest.raises(grpc.RpcError) as raised:
                call()
            refused[name] = (raised.value.code(), raised.value.details())  # type: ignore[attr-defined]
        last = stub.ShouldRateLimit(alice(), timeout=10)  # still answering
    assert [a.overall_code for a in answers] == [Response.OK] * 3 + [Response.OVER_LIMIT]
    assert [a.statuses[0].limit_remaining for a in answers] == [2, 1, 0, 0]
    assert serving.status == health_pb2.HealthCheckResponse.SERVING  # type: ignore[attr-defined]
    assert refused["no request"][0] == grpc.StatusCode.INVALID_ARGUMENT
    assert refused["no request"][1].startswith("not a RateLimitRequest: ")
    assert refused["compressed"] == (
        grpc.StatusCode.UNIMPLEMENTED,
        "compressed messages are not taken (gzip); send them uncompressed",
    )
    assert refused["over 4 MiB"] == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "Received message larger than max (4194305 vs. 4194304)",
    )
    assert refused["no such method"] == (grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    assert refused["unknown service"] == (grpc.StatusCode.NOT_FOUND, "unknown service 'other'")
    assert last.overall_code == Response.OVER_LIMIT
    assert served.stop() == 0


@installed
def test_sigterm_stops_it_cleanly_with_the_stores_closed(tmp_path: Path, served: Served) -> None:
    """An override written makes the SQLite configuration store's write-ahead log; closing
    its last connection folds it into the database and removes it, which only a lifespan
    shut down in full does."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    put = httpx.put(
        f"{served.url}/v1/overrides/user:1",
        json={"capacity": 1, "time_window_sec": 60},
        headers=auth,
        timeout=10,
    )
    assert put.status_code == 200
    wal = tmp_path / "ratekeeper.db-wal"
    assert wal.exists()
    assert served.stop() == 0
    log = served.log()
    assert f"listening on http://127.0.0.1:{served.http} (HTTP and gRPC, on pyvoy)" in log
    assert "loaded 2 rules in 1 domain from" in log
    assert "--grpc is not used with --server pyvoy" in log
    assert log.rstrip().endswith("stopped")
    assert "Traceback" not in log
    assert not wal.exists()


@installed
def test_a_sigterm_during_the_start_stops_it_once_started(tmp_path: Path) -> None:
    """A SIGTERM while Envoy starts (pyvoy's Envoy running, its start not yet returned) stops
    the service once it has started: exit 0 and ``stopped``, where the signal killed it
    (status -15), its lifespan never shut down."""
    (tmp_path / "edge.yaml").write_text(RULES)
    port = free_port()
    command = ["serve", "--server", "pyvoy", "--rules", "edge.yaml", "--http", f"127.0.0.1:{port}"]
    process = subprocess.Popen(
        [sys.executable, "-m", "ratekeeper.cli", *command],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")},
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        deadline = time.monotonic() + 60
        while not children.read_text().split():  # pyvoy's Envoy not started yet
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.002)
        (envoy,) = (int(pid) for pid in children.read_text().split())
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # Envoy too, if it was left behind
        process.wait(timeout=10)
    log = stderr.decode()
    assert process.returncode == 0, log
    assert f"listening on http://127.0.0.1:{port} (HTTP and gRPC, on pyvoy)" in log
    assert log.rstrip().endswith("stopped")
    assert not Path(f"/proc/{envoy}").exists()  # stopped and reaped by the service


def _serve_once(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ratekeeper.cli", "serve", "--server", "pyvoy", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_more_workers_are_refused(tmp_path: Path) -> None:
    result = _serve_once(tmp_path, "--workers", "2", "--store", "redis://127.0.0.1:1")
    assert result.returncode == 1
    assert "error: --workers: --server pyvoy runs one process with one event loop" in (
        result.stderr
    )


@pytest.mark.skipif(pyvoy_binary() is not None, reason="pyvoy is installed")
def test_without_pyvoy_the_extra_is_named(tmp_path: Path) -> None:
    result = _serve_once(tmp_path)
    assert result.returncode == 3
    assert result.stderr.strip() == (
        "error: pyvoy is not installed; install it with: pip install 'ratekeeper[pyvoy]'"
    )
