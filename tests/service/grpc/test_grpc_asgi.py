"""The gRPC ASGI app (``ratekeeper.service.grpc.asgi``) driven in-process on the bare ASGI
interface: the exact messages it sends, for what a gRPC client cannot easily send or see (a
body that is not one message, a length announced past the bound, the percent-encoding of
``grpc-message``, ``grpc-timeout``). Over a real connection, on grpc.aio and on pyvoy, the
same app is tested by ``test_grpc.py`` and ``test_serve_pyvoy.py``."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import MutableMapping
from typing import Any

import grpc
import pytest

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.grpc import RateLimitServicer
from ratekeeper.service.grpc.asgi import (
    MAX_MESSAGE,
    SHOULD_RATE_LIMIT,
    WATCH,
    GrpcApp,
    frame,
    timeout_of,
    trailers,
)
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2
from ratekeeper.stores import open_async_store
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from tests.servers import RedisServer, command

RULES = """
domain: test
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
"""
Message = MutableMapping[str, Any]


def alice() -> bytes:
    entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value="alice")
    descriptor = ratelimit_pb2.RateLimitDescriptor(entries=[entry])
    return rls_pb2.RateLimitRequest(domain="test", descriptors=[descriptor]).SerializeToString()


async def call(
    app: GrpcApp,
    chunks: list[bytes],
    *,
    path: str = SHOULD_RATE_LIMIT,
    headers: list[tuple[bytes, bytes]] | None = None,
    after: list[Message] | None = None,
) -> tuple[list[Message], int]:
    """What ``app`` sends for a request whose body comes in ``chunks`` (then ``after``, such as
    a disconnect), and how many messages it received."""
    received = [
        {"type": "http.request", "body": chunk, "more_body": n < len(chunks) - 1}
        for n, chunk in enumerate(chunks)
    ] + (after or [])
    taken = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal taken
        taken += 1
        return received[taken - 1]

    async def send(message: Message) -> None:
        sent.append(message)

    base = [(b"content-type", b"application/grpc"), (b"te", b"trailers")]
    scope = {"type": "http", "path": path, "headers": base + (headers or [])}
    await app(scope, receive, send)
    return sent, taken


def status_of(sent: list[Message]) -> tuple[int, bytes, bytes]:
    """The answer's HTTP status, body and grpc-status (checking the start and trailers)."""
    start, body, ending = sent
    assert start["type"] == "http.response.start" and start["trailers"] is True
    assert (b"content-type", b"application/grpc") in start["headers"]
    assert ending["type"] == "http.response.trailers" and ending["more_trailers"] is False
    return start["status"], body["body"], dict(ending["headers"])[b"grpc-status"]


def memory_app(servicer_options: dict[str, Any] | None = None) -> tuple[GrpcApp, AsyncEngine]:
    engine = AsyncEngine(AsyncMemoryStore(clock=FakeClock()), rules=parse_rules(RULES, "r.yaml"))
    return GrpcApp(RateLimitServicer(engine, **(servicer_options or {}))), engine


def test_a_call_is_answered_with_the_framed_response_and_status_0() -> None:
    async def main() -> list[tuple[int, bytes, bytes]]:
        app, engine = memory_app()
        body = frame(alice())
        answers = [status_of((await call(app, [body[:3], body[3:]]))[0]) for _ in range(3)]
        await engine.close()
        return answers

    answers = asyncio.run(main())
    assert [(status, grpc_status) for status, _, grpc_status in answers] == [(200, b"0")] * 3
    responses = [rls_pb2.RateLimitResponse.FromString(body[5:]) for _, body, _ in answers]
    assert [struct.unpack(">BI", body[:5]) for _, body, _ in answers] == [
        (0, len(body) - 5) for _, body, _ in answers
    ]
    assert [r.statuses[0].limit_remaining for r in responses] == [1, 0, 0]
    assert responses[2].overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT


@pytest.mark.parametrize(
    ("body", "details"),
    [
        (b"", "the request's body is not one whole gRPC message"),
        (b"\x00\x00\x00", "the request's body is not one whole gRPC message"),
        (frame(alice())[:-1], "the request's body is not one whole gRPC message"),
        (frame(alice()) * 2, "the request's body is not one whole gRPC message"),
    ],
    ids=["empty", "a cut prefix", "a cut message", "two messages"],
)
def test_a_body_that_is_not_one_message_is_internal_and_counts_nothing(
    body: bytes, details: str
) -> None:
    async def main() -> tuple[list[Message], int]:
        app, engine = memory_app()
        sent, _ = await call(app, [body])
        answered, _ = await call(app, [frame(alice())])
        after = rls_pb2.RateLimitResponse.FromString(answered[1]["body"][5:])
        await engine.close()
        return sent, after.statuses[0].limit_remaining

    sent, remaining = asyncio.run(main())
    assert status_of(sent) == (200, b"", b"13")
    assert dict(sent[2]["headers"])[b"grpc-message"] == details.encode()
    assert remaining == 1  # the next call is the first counted


def test_a_message_announced_past_the_bound_is_refused_before_the_rest_is_read() -> None:
    async def main() -> tuple[list[Message], int]:
        app, engine = memory_app()
        head = struct.pack(">BI", 0, MAX_MESSAGE + 1) + b"\x0a"
        result = await call(app, [head, b"\x00" * 65536, b"\x00" * 65536])
        await engine.close()
        return result

    sent, taken = asyncio.run(main())
    assert status_of(sent) == (200, b"", b"8")
    assert dict(sent[2]["headers"])[b"grpc-message"] == (
        b"Received message larger than max (4194305 vs. 4194304)"
    )
    assert taken == 1


def test_a_compressed_message_is_unimplemented_naming_the_encoding() -> None:
    async def main() -> list[Message]:
        app, engine = memory_app()
        compressed = b"\x01" + frame(alice())[1:]
        sent, _ = await call(app, [compressed], headers=[(b"grpc-encoding", b"gzip")])
        await engine.close()
        return sent

    sent = asyncio.run(main())
    assert status_of(sent) == (200, b"", b"12")
    assert (b"grpc-accept-encoding", b"identity") in sent[0]["headers"]
    assert dict(sent[2]["headers"])[b"grpc-message"] == (
        b"compressed messages are not taken (gzip); send them uncompressed"
    )


def test_an_unknown_method_is_unimplemented() -> None:
    app, _ = memory_app()
    sent, _ = asyncio.run(call(app, [frame(b"")], path="/no.Such/Method"))
    assert status_of(sent) == (200, b"", b"12")
    assert dict(sent[2]["headers"])[b"grpc-message"] == b"Method not found!"


def test_grpc_message_is_percent_encoded_and_metadata_follows() -> None:
    ending = trailers(grpc.StatusCode.UNAVAILABLE, "busy: 100% é\nnext", (("retry-after", "1"),))
    assert ending == {
        "type": "http.response.trailers",
        "headers": [
            (b"grpc-status", b"14"),
            (b"grpc-message", b"busy: 100%25 %C3%A9%0Anext"),
            (b"retry-after", b"1"),
        ],
        "more_trailers": False,
    }
    assert trailers(grpc.StatusCode.OK)["headers"] == [(b"grpc-status", b"0")]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"100m", 0.1),
        (b"2S", 2.0),
        (b"1H", 3600.0),
        (b"3M", 180.0),
        (b"250u", 250e-6),
        (b"99999999n", 99999999e-9),
        (b"0m", 0.0),
        (b"123456789S", None),
        (b"", None),
        (b"m", None),
        (b"10x", None),
        (b"-1S", None),
        (b"1.5S", None),
        (b"\xff", None),
    ],
)
def test_grpc_timeout_values(value: bytes, seconds: float | None) -> None:
    assert timeout_of(value) == seconds


def test_past_its_grpc_timeout_a_call_is_deadline_exceeded(redis_server: RedisServer) -> None:
    """A store that does not answer (a Redis paused) outlasts a 50 ms ``grpc-timeout``."""

    async def main() -> list[Message]:
        store = open_async_store(f"{redis_server.url}?timeout=5", on_store_error="deny")
        engine = AsyncEngine(store, rules=parse_rules(RULES, "r.yaml"))
        app = GrpcApp(RateLimitServicer(engine))
        command(redis_server.port, "CLIENT", "PAUSE", "1000", "ALL")
        try:
            sent, _ = await call(app, [frame(alice())], headers=[(b"grpc-timeout", b"50m")])
        finally:
            command(redis_server.port, "CLIENT", "UNPAUSE")
            await engine.close()
        return sent

    sent = asyncio.run(main())
    assert status_of(sent) == (200, b"", b"4")
    assert dict(sent[2]["headers"])[b"grpc-message"] == b"Deadline Exceeded"


def test_watch_sends_the_status_and_holds_the_stream_until_the_client_leaves() -> None:
    from grpc_health.v1 import health_pb2

    async def main() -> tuple[list[Message], int]:
        app, engine = memory_app()
        request = health_pb2.HealthCheckRequest(service="ratelimit").SerializeToString()
        disconnect: list[Message] = [{"type": "http.request", "body": b"", "more_body": False}]
        disconnect.append({"type": "http.disconnect"})
        result = await call(app, [frame(request)], path=WATCH, after=disconnect)
        await engine.close()
        return result

    sent, taken = asyncio.run(main())
    start, body = sent  # no trailers: the client has gone
    assert start["type"] == "http.response.start"
    assert body["more_body"] is True
    answer = health_pb2.HealthCheckResponse.FromString(body["body"][5:])
    assert answer.status == health_pb2.HealthCheckResponse.SERVING  # type: ignore[attr-defined]
    assert taken == 3
