"""The Redis commands one decision sends, door by door, counted by a real redis-server.

A decision of one descriptor on a fixed window is one batch script run (``FCALL``) that reads
the server's clock once (``TIME``) and reads and writes the descriptor's key (``GET``,
``SET``): four commands in ``INFO commandstats``, which counts the script's own calls too.
``TIME`` and ``FCALL`` are the batch's, ``GET`` and ``SET`` each hit's, so a batch of ``b``
hits costs ``2 + 2 / b`` commands a decision. Every door (HTTP ``/v1/check``, Envoy's ``POST
/json``, nginx's ``auth_request``, gRPC on grpc.aio and on pyvoy) must send exactly that, one
call at a time through a real ``ratekeeper serve``: no ping, script check, lease or metrics
write of its own; and the descriptors of one call go as one batch. In process, the calls of
one loop turn share one batch through the HTTP app and the gRPC servicer alike.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.asgi import Scope
from ratekeeper.service.grpc import RateLimitServicer
from ratekeeper.service.grpc.asgi import Context
from ratekeeper.service.proto import rls_pb2
from ratekeeper.service.runtime.app import create_app
from ratekeeper.stores import open_async_store
from tests.gateways import pyvoy_binary
from tests.servers import RedisServer, info
from tests.service.served import Served

RULES = """
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 1000000000}
"""
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#: A check of a key with its own limit, never reached.
KEY = {"key": "k", "limit": "1000000000/day"}
#: The decisions each door makes, one after another.
CALLS = 10


def one_batch(hits: int, batches: int = 1) -> Counter[str]:
    """The commands of ``batches`` script runs holding ``hits`` hits in all."""
    return Counter(fcall=batches, time=batches, get=hits, set=hits)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


def commands(redis: RedisServer) -> Counter[str]:
    """Every command the server has run, by name (a script's own calls included)."""
    stats = info(redis.port, "commandstats")
    found: Counter[str] = Counter()
    for name, fields in stats.items():
        calls = dict(field.split("=") for field in fields.split(","))["calls"]
        found[name.removeprefix("cmdstat_")] = int(calls)
    return found


def sent(redis: RedisServer, decide: Callable[[], object], times: int) -> Counter[str]:
    """The commands ``times`` calls of ``decide`` sent, less the ``INFO`` that counts them."""
    before = commands(redis)
    for _ in range(times):
        decide()
    after = commands(redis)
    after.subtract(before)
    after["info"] -= 1  # this reading's own
    return +after


def grpc_decision(port: int, *values: str) -> Callable[[], object]:
    """A ``ShouldRateLimit`` of one descriptor ``client=value`` per value, over gRPC."""
    request = rls_pb2.RateLimitRequest(domain="bench")
    for value in values:
        request.descriptors.add().entries.add(key="client", value=value)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = channel.unary_unary(
        METHOD,
        request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
        response_deserializer=rls_pb2.RateLimitResponse.FromString,
    )

    def decide() -> object:
        response = call(request, timeout=10)
        assert response.overall_code == rls_pb2.RateLimitResponse.OK
        return response

    return decide


def http_decision(url: str, path: str, **options: Any) -> Callable[[], object]:
    def decide() -> object:
        answer = httpx.request("GET" if path == "/v1/nginx" else "POST", url + path, **options)
        assert answer.status_code == 200, answer.text
        return answer

    return decide


def doors(served: Served) -> dict[str, tuple[Callable[[], object], int]]:
    """Each door's decision of a served process, and the hits it counts."""
    url, entries = served.url, [{"key": "client", "value": "h"}]
    descriptor = {"domain": "bench", "descriptors": [{"entries": entries}]}
    nginx = {"X-RateLimit-Domain": "bench", "X-Real-IP": "10.0.0.1", "X-Original-URI": "/a"}
    return {
        "HTTP descriptor": (http_decision(url, "/v1/check", json=descriptor), 1),
        "HTTP key": (http_decision(url, "/v1/check", json=KEY), 1),
        "Envoy's POST /json": (http_decision(url, "/json", json=descriptor), 1),
        "nginx": (http_decision(url, "/v1/nginx", headers=nginx), 1),
        "gRPC": (grpc_decision(served.grpc_port, "g"), 1),
        "gRPC, two descriptors": (grpc_decision(served.grpc_port, "g1", "g2"), 2),
    }


def served(tmp_path: Path, redis: RedisServer, *flags: str) -> Served:
    (tmp_path / "rules.yaml").write_text(RULES)
    return Served(
        tmp_path,
        *("--store", redis.url, "--rules", "rules.yaml", "--config", "sqlite:///config.db"),
        *("--instances", "1"),  # no roll call of the fleet in the store
        *flags,
    )


@pytest.mark.parametrize("server", ["uvicorn", "pyvoy"])
def test_each_door_sends_one_batch_of_four_commands_a_decision(
    tmp_path: Path, redis: RedisServer, server: str
) -> None:
    if server == "pyvoy" and pyvoy_binary() is None:
        pytest.skip("pyvoy is not installed (the pyvoy extra)")
    process = served(tmp_path, redis, "--server", server)
    try:
        for door, (decide, hits) in doors(process).items():
            decide()  # its plan cached, the script loaded
            assert sent(redis, decide, CALLS) == one_batch(CALLS * hits, CALLS), door
    finally:
        process.stop()


def test_the_calls_of_one_loop_turn_share_a_batch_on_both_doors(redis: RedisServer) -> None:
    """HTTP ``/v1/check`` and gRPC's servicer, each ``CALLS`` calls at once: one batch each."""

    async def scenario() -> None:
        store = open_async_store(redis.url, instances=1)
        engine = AsyncEngine(store, rules=parse_rules(RULES, "rules.yaml"))
        app = create_app(engine, close_engine=True)
        servicer = RateLimitServicer(engine)
        entries = [{"key": "client", "value": "a"}]
        body = json.dumps({"domain": "bench", "descriptors": [{"entries": entries}]}).encode()
        request = rls_pb2.RateLimitRequest(domain="bench")
        request.descriptors.add().entries.add(key="client", value="b")

        async def http() -> None:
            scope: Scope = {
                "type": "http", "method": "POST", "path": "/v1/check", "root_path": "",
                "headers": [(b"content-type", b"application/json")], "query_string": b"",
            }  # fmt: skip
            messages: list[dict[str, Any]] = []

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(message: dict[str, Any]) -> None:
                messages.append(message)

            await app(scope, receive, send)
            assert messages[0]["status"] == 200

        async def grpc_call() -> None:
            response = await servicer.ShouldRateLimit(request, Context())
            assert response.overall_code == rls_pb2.RateLimitResponse.OK

        async with app.router.lifespan_context(app):
            for door in (http, grpc_call):
                await door()  # its plan cached, the script loaded
                opening = store.store._batcher.opening  # type: ignore[attr-defined]
                if opening is not None:  # the store's own connection (HELLO) opens before counting
                    await opening
                before = await asyncio.to_thread(commands, redis)
                await asyncio.gather(*(door() for _ in range(CALLS)))
                after = await asyncio.to_thread(commands, redis)
                after.subtract(before)
                after["info"] -= 1
                assert +after == one_batch(CALLS), door.__name__

    asyncio.run(scenario())
