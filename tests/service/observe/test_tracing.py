"""Traces: a real ``ratekeeper serve`` sends one span per decision request, on every surface, to
a collector in the test (OTLP over HTTP and over gRPC), with the domain, the deciding rule and
the result, never a key or a descriptor value; it continues the caller's trace, samples as told,
and sends its last spans when it stops."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from tests.gateways import pyvoy_binary
from tests.servers import RedisServer
from tests.service.observe.otlp import GrpcReceiver, HttpReceiver, Received
from tests.service.served import Served

RULES = """\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100}
"""
GRPC_NAME = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
GRPC = {
    "ratekeeper.surface": "grpc",
    "rpc.system": "grpc",
    "rpc.service": "envoy.service.ratelimit.v3.RateLimitService",
    "rpc.method": "ShouldRateLimit",
}
ALLOWED_BY_USER = {
    "ratekeeper.domain": "api",
    "ratekeeper.rule": "per_user",
    "ratekeeper.rules": ["per_user"],
    "ratekeeper.result": "allowed",
}


def secret() -> str:
    """A descriptor value no span may show."""
    return f"secret-{uuid.uuid4().hex}"


def check(*entries: tuple[str, str]) -> dict[str, Any]:
    return {
        "domain": "api",
        "descriptors": [{"entries": [{"key": k, "value": v} for k, v in entries]}],
    }


def http(method: str, path: str, status: int, surface: str = "http") -> dict[str, Any]:
    """The attributes every span of an HTTP request has."""
    return {
        "ratekeeper.surface": surface,
        "http.request.method": method,
        "http.route": path,
        "http.response.status_code": status,
    }


def should_rate_limit(port: int, user: str, metadata: tuple[tuple[str, str], ...] = ()) -> int:
    """One ``ShouldRateLimit`` of ``user`` in domain ``api``: its overall code."""
    request = rls_pb2.RateLimitRequest(
        domain="api",
        descriptors=[ratelimit_pb2.RateLimitDescriptor(entries=[{"key": "user", "value": user}])],
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        code: int = stub.ShouldRateLimit(request, metadata=metadata, timeout=10).overall_code
        return code


def served(
    directory: Path,
    receiver: HttpReceiver | GrpcReceiver,
    *flags: str,
    stderr: int = subprocess.DEVNULL,
    **environ: str,
) -> Served:
    """``ratekeeper serve`` of ``RULES`` with ``flags``, exporting to ``receiver``; the spans
    are sent every ``OTEL_BSP_SCHEDULE_DELAY`` ms (an hour unless given: at the stop only)."""
    rules = directory / "rules.yaml"
    rules.write_text(RULES)
    return Served(
        directory,
        "--rules",
        str(rules),
        "--config",
        "sqlite://:memory:",
        *flags,
        environ={
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "3600000",
            **environ,
        },
        stderr=stderr,
    )


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    found = HttpReceiver()
    yield found
    found.close()


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcReceiver]:
    found = GrpcReceiver()
    yield found
    found.close()


def instances(spans: list[Received], name: str) -> set[str]:
    """The instances that sent the spans named ``name``."""
    return {one.resource["service.instance.id"] for one in spans if one.span.name == name}


def no_value_in(spans: list[Received], values: list[str]) -> None:
    """No span's name, attributes or resource holds any of ``values``."""
    for one in spans:
        texts = [one.span.name, *map(str, one.attributes.values())]
        texts += map(str, one.resource.values())
        texts += [str(key) for key in one.attributes]
        for value in values:
            assert not any(value in text for text in texts), (value, one)


def test_one_span_per_decision_request_on_every_surface_sent_when_it_stops(
    tmp_path: Path, receiver: HttpReceiver
) -> None:
    service = served(tmp_path, receiver, "--tracing", "otlp-http", stderr=subprocess.PIPE)
    alice, bob, carol, path, address = secret(), secret(), secret(), secret(), "10.9.8.7"
    try:
        with httpx.Client(base_url=service.url, timeout=10) as client:
            statuses = [client.post("/v1/check", json=check(("user", alice))).status_code]
            statuses += [client.post("/v1/check", json=check(("user", alice))).status_code]
            statuses += [client.post("/v1/check", json=check(("user", alice))).status_code]
            statuses += [client.post("/json", json=check(("user", bob))).status_code]
            batch = [check(("path", f"/{path}")), check(("user", bob))]
            statuses += [client.post("/v1/check/batch", json=batch).status_code]
            statuses += [client.post("/v1/peek", json=check(("path", f"/{path}"))).status_code]
            nginx = {
                "X-RateLimit-Domain": "api",
                "X-Real-IP": address,
                "X-User": carol,
                "X-Original-URI": f"/{path}?q={path}",
            }
            statuses += [client.get("/v1/nginx", headers=nginx).status_code]
            statuses += [client.post("/v1/check", json={"key": ""}).status_code]
            statuses += [client.get(probe).status_code for probe in ("/healthz", "/readyz")]
        codes = [should_rate_limit(service.grpc, carol) for _ in range(2)]
        # An hour between batches: nothing is sent before the stop.
        assert receiver.spans() == []
    finally:
        stopped = service.stop()
        log = service.log()
    assert stopped == 0
    assert statuses == [200, 200, 429, 200, 200, 200, 200, 422, 200, 200]
    assert codes == [rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT]
    spans = receiver.spans()
    assert [(one.span.name, one.attributes) for one in spans] == [
        ("POST /v1/check", http("POST", "/v1/check", 200) | ALLOWED_BY_USER),
        ("POST /v1/check", http("POST", "/v1/check", 200) | ALLOWED_BY_USER),
        (
            "POST /v1/check",
            http("POST", "/v1/check", 429) | ALLOWED_BY_USER | {"ratekeeper.result": "limited"},
        ),
        ("POST /json", http("POST", "/json", 200, "json") | ALLOWED_BY_USER),
        (
            "POST /v1/check/batch",
            http("POST", "/v1/check/batch", 200)
            | ALLOWED_BY_USER
            | {"ratekeeper.rules": ["path", "per_user"]},
        ),
        ("POST /v1/peek", http("POST", "/v1/peek", 200)),  # a peek decides nothing
        (
            "GET /v1/nginx",
            http("GET", "/v1/nginx", 200, "nginx")
            | ALLOWED_BY_USER
            | {"ratekeeper.rules": ["none", "per_user", "path"]},
        ),
        ("POST /v1/check", http("POST", "/v1/check", 422)),  # refused before any decision
        (GRPC_NAME, GRPC | {"rpc.grpc.status_code": 0} | ALLOWED_BY_USER),
        (
            GRPC_NAME,
            GRPC | {"rpc.grpc.status_code": 0} | ALLOWED_BY_USER | {"ratekeeper.result": "limited"},
        ),
    ]
    assert {one.span.kind for one in spans} == {2}  # SPAN_KIND_SERVER
    assert len({one.span.trace_id for one in spans}) == len(spans)  # each its own trace
    assert {one.span.parent_span_id for one in spans} == {b""}
    resource = spans[0].resource
    assert {one.resource["service.instance.id"] for one in spans} == {
        resource["service.instance.id"]
    }
    assert uuid.UUID(resource["service.instance.id"]).version == 4
    assert resource["service.name"] == "ratekeeper"
    assert "service.namespace" not in resource
    no_value_in(spans, [alice, bob, carol, path, address])
    assert "tracing: on (otlp-http, one span per decision request, 1 of them sampled" in log


def test_the_callers_trace_is_continued_and_sampling_follows_the_rate(
    tmp_path: Path, receiver: HttpReceiver
) -> None:
    service = served(tmp_path, receiver, "--tracing", "otlp-http", "--trace-sample-rate", "0")
    trace, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    sampled = (("traceparent", f"00-{trace}-{parent}-01"),)
    unsampled = (("traceparent", f"00-{uuid.uuid4().hex}-{parent}-00"),)
    b3_trace = uuid.uuid4().hex
    b3_single = (("b3", f"{b3_trace}-{parent}-1"),)
    b3_multi = (("x-b3-traceid", b3_trace), ("x-b3-spanid", parent), ("x-b3-sampled", "1"))
    try:
        with httpx.Client(base_url=service.url, timeout=10) as client:
            for _ in range(5):  # no caller's trace: the rate (0) decides
                client.post("/v1/check", json=check(("path", "/a")))
                should_rate_limit(service.grpc, secret())
            for headers in (unsampled, sampled):  # the caller's trace decides
                client.post("/v1/check", json=check(("path", "/a")), headers=dict(headers))
                should_rate_limit(service.grpc, secret(), headers)
            # B3, as Envoy sends it with a Zipkin tracer: one header or several
            client.post("/v1/check", json=check(("path", "/a")), headers=dict(b3_multi))
            should_rate_limit(service.grpc, secret(), b3_single)
    finally:
        assert service.stop() == 0
    spans = receiver.spans()
    assert [one.span.name for one in spans] == ["POST /v1/check", GRPC_NAME] * 2
    found = [(one.span.trace_id.hex(), one.span.parent_span_id.hex()) for one in spans]
    assert found == [(trace, parent)] * 2 + [(b3_trace, parent)] * 2


@pytest.mark.skipif(pyvoy_binary() is None, reason="pyvoy is not installed (the pyvoy extra)")
def test_on_pyvoy_both_doors_trace_and_continue_the_callers_trace(
    tmp_path: Path, receiver: HttpReceiver
) -> None:
    service = served(tmp_path, receiver, "--tracing", "otlp-http", "--server", "pyvoy")
    trace, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    context = (("traceparent", f"00-{trace}-{parent}-01"),)
    user = secret()
    try:
        with httpx.Client(base_url=service.url, timeout=10) as client:
            status = client.post("/v1/check", json=check(("user", user))).status_code
        codes = [should_rate_limit(service.grpc_port, user, context) for _ in range(2)]
    finally:
        assert service.stop() == 0
    assert (status, codes) == (200, [1, 2])
    spans = receiver.spans()
    assert [(one.span.name, one.attributes) for one in spans] == [
        ("POST /v1/check", http("POST", "/v1/check", 200) | ALLOWED_BY_USER),
        (GRPC_NAME, GRPC | {"rpc.grpc.status_code": 0} | ALLOWED_BY_USER),
        (
            GRPC_NAME,
            GRPC | {"rpc.grpc.status_code": 0} | ALLOWED_BY_USER | {"ratekeeper.result": "limited"},
        ),
    ]
    assert spans[0].span.parent_span_id == b""
    for one in spans[1:]:
        assert (one.span.trace_id.hex(), one.span.parent_span_id.hex()) == (trace, parent)
    no_value_in(spans, [user])


def test_spans_go_over_grpc_as_they_end_each_worker_its_own(
    tmp_path: Path, grpc_receiver: GrpcReceiver
) -> None:
    redis_server = RedisServer(tmp_path)
    try:
        service = served(
            tmp_path,
            grpc_receiver,
            "--tracing",
            "otlp-grpc",
            "--trace-service-name",
            "edge-limits",
            "--workers",
            "2",
            "--store",
            f"redis://127.0.0.1:{redis_server.port}/0",
            OTEL_BSP_SCHEDULE_DELAY="50",
        )
        try:
            with httpx.Client(base_url=service.url, timeout=10) as client:
                for _ in range(10):
                    assert client.post("/v1/check", json=check(("path", "/b"))).status_code == 200
            # A channel each: the kernel spreads them over the workers' gRPC servers, once
            # both listen; the spans are sent while the service runs.
            calls, deadline = 0, time.monotonic() + 30
            while True:
                for _ in range(10):
                    should_rate_limit(service.grpc, secret())
                calls += 10
                spans = grpc_receiver.wait_for(10 + calls)
                if len(instances(spans, GRPC_NAME)) == 2 or time.monotonic() > deadline:
                    break
        finally:
            assert service.stop() == 0
    finally:
        redis_server.stop()
    assert grpc_receiver.spans() == spans  # none twice
    assert sorted(one.span.name for one in spans) == ["POST /v1/check"] * 10 + [GRPC_NAME] * calls
    assert {one.resource["service.name"] for one in spans} == {"edge-limits"}
    # Each worker is an instance of its own, and sends its own spans.
    assert len(instances(spans, GRPC_NAME)) == 2


def test_the_references_variables_turn_tracing_on(
    tmp_path: Path, grpc_receiver: GrpcReceiver
) -> None:
    runtime = tmp_path / "srv" / "ratelimit" / "config"
    runtime.mkdir(parents=True)
    (runtime / "api.yaml").write_text(RULES)
    service = Served(
        tmp_path,
        "--compat",
        "envoy-ratelimit",
        "--store",
        "memory://",
        environ={
            "RUNTIME_ROOT": str(tmp_path / "srv"),
            "RUNTIME_SUBDIRECTORY": "ratelimit",
            "USE_STATSD": "false",
            "TRACING_ENABLED": "true",
            "TRACING_EXPORTER_PROTOCOL": "grpc",
            "TRACING_SERVICE_NAMESPACE": "team-a",
            "TRACING_SERVICE_INSTANCE_ID": "pod-7",
            "TRACING_SAMPLING_RATE": "1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": grpc_receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "3600000",
        },
    )
    user = secret()
    try:
        codes = [should_rate_limit(service.grpc, user) for _ in range(3)]
    finally:
        assert service.stop() == 0
    assert codes == [1, 1, 2]
    spans = grpc_receiver.spans()
    assert [one.attributes["ratekeeper.result"] for one in spans] == [
        "allowed",
        "allowed",
        "limited",
    ]
    resource = spans[0].resource
    assert (resource["service.name"], resource["service.namespace"]) == ("RateLimit", "team-a")
    assert resource["service.instance.id"] == "pod-7"
    no_value_in(spans, [user])


@pytest.mark.parametrize("rate", ["1.5", "-0.1", "nan", "NaN", "often", "inf", ""])
def test_a_sample_rate_that_is_no_ratio_is_one_line_and_exit_1(rate: str) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")}
    done = subprocess.run(
        [sys.executable, "-m", "ratekeeper.cli", "serve", "--trace-sample-rate", rate],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"error: --trace-sample-rate: expected a number from 0 to 1, such as 0.01, not {rate!r}\n"
    )
