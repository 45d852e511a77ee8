"""The same requests through the library, HTTP, gRPC and nginx's endpoint decide alike.

Each surface gets a fresh engine over the same rules; the requests are nginx's (its headers,
turned into descriptors by ``service.nginx``) and go to every surface as those descriptors. The
overall decision and every limited descriptor's remaining count must be identical everywhere.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.grpc import serve_grpc
from ratekeeper.service.http.nginx import call_of
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.app import create_app
from ratekeeper.wire.translate import Call
from tests.service.asgi import AppClient

RULES = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4, algorithm: gcra}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_log}
  - key: method
    value: POST
    descriptors:
      - key: path
        value: /login
        rate_limit: {unit: hour, requests_per_unit: 2}
"""

LOGIN = {"X-Real-IP": "10.0.0.1", "X-Original-URI": "/login", "X-Original-Method": "POST"}
REQUESTS = [
    {**LOGIN, "X-User": "alice"},
    {**LOGIN, "X-User": "alice"},
    {**LOGIN, "X-User": "bob"},
    {"X-Real-IP": "10.0.0.1", "X-Original-URI": "/home", "X-User": "alice"},
    {"X-Real-IP": "10.0.0.2", "X-Original-URI": "/home", "X-User": "alice"},
    {"X-Real-IP": "10.0.0.1", "X-Original-URI": "/home"},
    {"X-Real-IP": "10.0.0.2", "X-Original-URI": "/login", "X-Original-Method": "POST"},
]
CALLS = [call_of({**headers, "X-RateLimit-Domain": "edge"}) for headers in REQUESTS]

#: One request's outcome: allowed, and the remaining count of each limited descriptor.
Outcome = tuple[bool, tuple[int, ...]]


def engine() -> AsyncEngine:
    return AsyncEngine(rules=parse_rules(RULES, "edge.yaml"))


def through_the_library() -> list[Outcome]:
    async def main() -> list[Outcome]:
        deciding = engine()
        found = []
        for call in CALLS:
            verdict = await deciding.check(call.domain, [d.entries for d in call.descriptors])
            left = tuple(s.decision.remaining for s in verdict.statuses if s.limit is not None)
            found.append((verdict.allowed, left))  # type: ignore[union-attr]
        await deciding.close()
        return found

    return asyncio.run(main())


def body(call: Call) -> dict[str, Any]:
    return {
        "domain": call.domain,
        "descriptors": [
            {"entries": [{"key": k, "value": v} for k, v in d.entries]} for d in call.descriptors
        ],
    }


def through_http() -> list[Outcome]:
    with AppClient(create_app(engine(), close_engine=True)) as client:
        answers = [client.post("/v1/check", json=body(call)).json() for call in CALLS]
    return [
        (a["allowed"], tuple(s["remaining"] for s in a["statuses"] if s["limit"] is not None))
        for a in answers
    ]


def through_grpc() -> list[Outcome]:
    async def main() -> list[Outcome]:
        deciding = engine()
        server, port = await serve_grpc(deciding, "127.0.0.1:0")
        found = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = rls_pb2_grpc.RateLimitServiceStub(channel)
                for call in CALLS:
                    entry = ratelimit_pb2.RateLimitDescriptor.Entry
                    request = rls_pb2.RateLimitRequest(
                        domain=call.domain,
                        descriptors=[
                            ratelimit_pb2.RateLimitDescriptor(
                                entries=[entry(key=k, value=v) for k, v in d.entries]
                            )
                            for d in call.descriptors
                        ],
                    )
                    answer = await stub.ShouldRateLimit(request, timeout=10)
                    left = tuple(
                        s.limit_remaining for s in answer.statuses if s.HasField("current_limit")
                    )
                    found.append((answer.overall_code == answer.OK, left))
        finally:
            await server.stop(None)
            await deciding.close()
        return found

    return asyncio.run(main())


def through_nginx() -> list[tuple[bool, int]]:
    with AppClient(create_app(engine(), close_engine=True)) as client:
        answers = [
            client.get("/v1/nginx", headers={**h, "X-RateLimit-Domain": "edge"}) for h in REQUESTS
        ]
    return [(a.status_code == 200, int(a.headers["x-ratelimit-remaining"])) for a in answers]


def test_every_surface_decides_alike() -> None:
    library = through_the_library()
    assert [allowed for allowed, _ in library] == [True, True, False, True, False, False, False]
    assert through_http() == library
    assert through_grpc() == library
    # nginx's answer carries the allowed flag and the remaining count of the limit closest to
    # refusing (the least remaining), which the headers report.
    assert through_nginx() == [(allowed, min(left)) for allowed, left in library]
