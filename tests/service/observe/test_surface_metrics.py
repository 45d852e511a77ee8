"""Each surface of the service records its decisions' time: HTTP, nginx and gRPC, and the app
serves the figures at /metrics, beside the decisions counted by the engine's observer."""

from __future__ import annotations

import asyncio

import grpc
from prometheus_client.parser import text_string_to_metric_families

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.grpc import serve_grpc
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.app import create_app
from tests.service.asgi import AppClient

RULES = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 10, name: per_address}
"""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_http_and_nginx_decisions_are_timed_and_served_at_metrics() -> None:
    engine = AsyncEngine(rules=parse_rules(RULES, "edge.yaml"))
    metrics = Metrics()
    metrics.track(engine)
    with AppClient(create_app(engine, metrics=metrics)) as client:
        check = {
            "domain": "edge",
            "descriptors": [{"entries": [{"key": "remote_address", "value": "a"}]}],
        }
        assert client.post("/v1/check", json=check).status_code == 200
        assert client.post("/v1/peek", json=check).status_code == 200
        assert (
            client.get(
                "/v1/nginx", headers={"X-Real-IP": "b", "X-RateLimit-Domain": "edge"}
            ).status_code
            == 200
        )
        assert client.get("/healthz").status_code == 200  # not a decision: not timed
        scraped = client.get("/metrics")
        assert scraped.status_code == 200  # at /metrics itself, as Prometheus scrapes it
        text = scraped.text
    found = samples(text)
    assert found["ratekeeper_decision_seconds_count", (("surface", "http"),)] == 1  # no peek
    assert found["ratekeeper_decision_seconds_count", (("surface", "nginx"),)] == 1
    key = (("domain", "edge"), ("result", "allowed"), ("rule", "per_address"))
    assert found["ratekeeper_decisions_total", key] == 2  # check and nginx's address: no peek


def test_grpc_calls_are_timed() -> None:
    async def main() -> str:
        engine = AsyncEngine(rules=parse_rules(RULES, "edge.yaml"))
        metrics = Metrics()
        metrics.track(engine)
        server, port = await serve_grpc(engine, "127.0.0.1:0", metrics)
        entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="remote_address", value="c")
        sent = rls_pb2.RateLimitRequest(
            domain="edge", descriptors=[ratelimit_pb2.RateLimitDescriptor(entries=[entry])]
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = rls_pb2_grpc.RateLimitServiceStub(channel)
                for _ in range(3):
                    await stub.ShouldRateLimit(sent, timeout=10)
        finally:
            await server.stop(None)
            await engine.close()
        return metrics.text().decode()

    found = samples(asyncio.run(main()))
    assert found["ratekeeper_decision_seconds_count", (("surface", "grpc"),)] == 3
