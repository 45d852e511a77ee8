"""Envoy's ShouldRateLimit over a real gRPC connection on loopback, decided by the engine.

The server is each of the service's gRPC stacks over an ``AsyncEngine`` with rules: grpc.aio
(``serve_grpc``), and the raw ASGI app (``grpc_asgi.GrpcApp``) on pyvoy, Envoy's HTTP/2
(``tests/service/grpc/pyvoy_grpc_app.py``; skipped when pyvoy is not installed). The client sends
requests as Envoy does (domain, descriptors, hits_addend, a limit sent with a descriptor).
Statuses come back in request order with Envoy's fields, equal to what the engine decides in
process, and the same on both stacks.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol, TypeVar

import grpc
import httpx
import pytest
from google.protobuf import json_format, wrappers_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.grpc import HEALTH_NAMES, SERVICE, call_of, response_of, serve_grpc
from ratekeeper.service.proto import ratelimit_pb2, ratelimit_unit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.wire.translate import decide_async
from tests.gateways import PyvoyApp, pyvoy_binary
from tests.service.grpc.rules import RULES

Response = rls_pb2.RateLimitResponse
Descriptor = ratelimit_pb2.RateLimitDescriptor
T = TypeVar("T")


def request(
    *descriptors: Descriptor, hits_addend: int = 0, domain: str = "test"
) -> rls_pb2.RateLimitRequest:
    return rls_pb2.RateLimitRequest(domain=domain, descriptors=descriptors, hits_addend=hits_addend)


def descriptor(*entries: tuple[str, str], **fields: object) -> Descriptor:
    return Descriptor(
        entries=[Descriptor.Entry(key=key, value=value) for key, value in entries],
        **fields,  # type: ignore[arg-type]
    )


DEFAULT = ("generic_key", "default")


Talk = Callable[[rls_pb2_grpc.RateLimitServiceStub, grpc.aio.Channel], Awaitable[T]]


class WithServer(Protocol):
    """``with_server(clock, talk, header_names, dynamic_metadata, debt)``: a fresh engine on
    ``clock`` (counting every hit with ``debt``) behind the stack under test, ``talk``'s result
    over a channel to it."""

    def __call__(
        self,
        clock: FakeClock,
        talk: Talk[T],
        header_names: tuple[str, str, str] | None = None,
        dynamic_metadata: bool = False,
        debt: bool = False,
    ) -> T: ...


def on_grpc_aio(
    clock: FakeClock,
    talk: Talk[T],
    header_names: tuple[str, str, str] | None = None,
    dynamic_metadata: bool = False,
    debt: bool = False,
) -> T:
    async def main() -> T:
        engine = AsyncEngine(
            AsyncMemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"), debt=debt
        )
        server, port = await serve_grpc(
            engine, "127.0.0.1:0", header_names=header_names, dynamic_metadata=dynamic_metadata
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await talk(rls_pb2_grpc.RateLimitServiceStub(channel), channel)
        finally:
            await server.stop(None)
            await engine.close()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def pyvoy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PyvoyApp]:
    if pyvoy_binary() is None:
        pytest.skip("pyvoy is not installed (the pyvoy extra)")
    server = PyvoyApp(tmp_path_factory.mktemp("pyvoy"), "tests.service.grpc.pyvoy_grpc_app:app")
    yield server
    server.stop()


@pytest.fixture(params=["grpc.aio", "pyvoy"])
def with_server(request: pytest.FixtureRequest) -> WithServer:
    if request.param == "grpc.aio":
        return on_grpc_aio
    server: PyvoyApp = request.getfixturevalue("pyvoy")

    def on_pyvoy(
        clock: FakeClock,
        talk: Talk[T],
        header_names: tuple[str, str, str] | None = None,
        dynamic_metadata: bool = False,
        debt: bool = False,
    ) -> T:
        given = {
            "now": clock(),
            "header_names": header_names,
            "dynamic_metadata": dynamic_metadata,
            "debt": debt,
        }
        made = httpx.post(f"{server.url}/engine", json=given, timeout=10)
        assert made.status_code == 200, made.text

        async def main() -> T:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                return await talk(rls_pb2_grpc.RateLimitServiceStub(channel), channel)

        return asyncio.run(main())

    return on_pyvoy


def test_envoys_request_is_decided_with_envoys_statuses(
    with_server: WithServer, clock: FakeClock
) -> None:
    clock.set(1_699_999_990.0)  # 10 s into a minute

    async def talk(stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel) -> list[Response]:
        sent = request(descriptor(DEFAULT), descriptor(DEFAULT, ("user", "alice")))
        return [await stub.ShouldRateLimit(sent, timeout=10) for _ in range(3)]

    first, second, third = with_server(clock, talk)
    assert first.overall_code == Response.OK
    everyone, alice = first.statuses
    assert (everyone.code, everyone.limit_remaining) == (Response.OK, 2)
    assert everyone.current_limit == Response.RateLimit(
        requests_per_unit=3, unit=Response.RateLimit.MINUTE, name="everyone"
    )
    assert everyone.duration_until_reset.ToTimedelta().total_seconds() == 50.0
    assert (alice.limit_remaining, alice.current_limit.unit) == (1, Response.RateLimit.HOUR)
    assert second.overall_code == Response.OK
    assert third.overall_code == Response.OVER_LIMIT
    assert [s.code for s in third.statuses] == [Response.OK, Response.OVER_LIMIT]
    assert [s.limit_remaining for s in third.statuses] == [0, 0]


def test_hits_addend_and_a_limit_sent_with_a_descriptor(
    with_server: WithServer, clock: FakeClock
) -> None:
    async def talk(stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel) -> list[Response]:
        sent = descriptor(
            ("anything", "x"),
            limit=Descriptor.RateLimitOverride(
                requests_per_unit=5, unit=ratelimit_unit_pb2.RateLimitUnit.SECOND
            ),
        )
        looking = descriptor(DEFAULT, hits_addend=wrappers_pb2.UInt64Value(value=0))
        return [
            await stub.ShouldRateLimit(request(sent, looking, hits_addend=2), timeout=10)
            for _ in range(3)
        ]

    answers = with_server(clock, talk)
    assert [[s.limit_remaining for s in a.statuses] for a in answers] == [[3, 3], [1, 3], [1, 3]]
    assert [a.overall_code for a in answers] == [Response.OK, Response.OK, Response.OVER_LIMIT]
    assert answers[0].statuses[0].current_limit.unit == Response.RateLimit.SECOND


def test_a_limit_of_zero_sent_with_a_descriptor_is_always_over(
    with_server: WithServer, clock: FakeClock
) -> None:
    async def talk(stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel) -> Response:
        zero = Descriptor.RateLimitOverride(
            requests_per_unit=0, unit=ratelimit_unit_pb2.RateLimitUnit.MINUTE
        )
        return await stub.ShouldRateLimit(
            request(descriptor(DEFAULT), descriptor(("anything", "z"), limit=zero)), timeout=10
        )

    answer = with_server(clock, talk)
    counted, zero = answer.statuses
    assert answer.overall_code == Response.OVER_LIMIT
    assert (counted.code, zero.code) == (Response.OK, Response.OVER_LIMIT)
    assert (zero.current_limit.requests_per_unit, zero.current_limit.unit) == (
        0,
        Response.RateLimit.MINUTE,
    )
    assert zero.limit_remaining == 0


def test_unlimited_and_no_rule_answer_as_envoy(with_server: WithServer, clock: FakeClock) -> None:
    async def talk(stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel) -> Response:
        return await stub.ShouldRateLimit(
            request(descriptor(("path", "/health")), descriptor(("other", "x"))), timeout=10
        )

    answer = with_server(clock, talk)
    unlimited, nothing = answer.statuses
    assert (unlimited.limit_remaining, unlimited.HasField("current_limit")) == (4294967295, False)
    assert (nothing.limit_remaining, nothing.HasField("current_limit")) == (0, False)
    assert answer.overall_code == Response.OK


@pytest.mark.parametrize(
    "bad",
    [
        request(descriptor(DEFAULT), domain=""),
        request(),
        request(descriptor(("", "x"))),
        request(descriptor(DEFAULT, limit=Descriptor.RateLimitOverride(requests_per_unit=5))),
        request(
            descriptor(DEFAULT, limit=Descriptor.RateLimitOverride(requests_per_unit=5, unit=7))
        ),
    ],
    ids=["empty domain", "no descriptors", "empty key", "unknown unit", "no such unit"],
)
def test_an_invalid_request_is_invalid_argument(
    with_server: WithServer, clock: FakeClock, bad: rls_pb2.RateLimitRequest
) -> None:
    async def talk(stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel) -> grpc.StatusCode:
        try:
            await stub.ShouldRateLimit(bad, timeout=10)
        except grpc.aio.AioRpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    assert with_server(clock, talk) == grpc.StatusCode.INVALID_ARGUMENT


def test_the_health_service_reports_serving(with_server: WithServer, clock: FakeClock) -> None:
    """SERVING for the whole server, the service's full name, and ``ratelimit``, the name
    Envoy's own rate-limit service registers; any other name is NOT_FOUND."""

    async def talk(
        _: rls_pb2_grpc.RateLimitServiceStub, channel: grpc.aio.Channel
    ) -> tuple[list[int], grpc.StatusCode]:
        stub = health_pb2_grpc.HealthStub(channel)
        check = health_pb2.HealthCheckRequest
        statuses = [
            (await stub.Check(check(service=name), timeout=10)).status  # type: ignore[attr-defined]
            for name in ("", SERVICE, "ratelimit")
        ]
        try:
            await stub.Check(check(service="ratelimit.v2"), timeout=10)
        except grpc.aio.AioRpcError as error:
            return statuses, error.code()
        raise AssertionError("an unknown service name was answered")

    assert HEALTH_NAMES == ("", SERVICE, "ratelimit")
    serving, unknown = with_server(clock, talk)
    assert serving == [health_pb2.HealthCheckResponse.SERVING] * 3
    assert unknown == grpc.StatusCode.NOT_FOUND


def test_the_health_watch_sends_serving_and_stays_open(
    with_server: WithServer, clock: FakeClock
) -> None:
    """``Watch`` answers the status at once and keeps the stream open while the status holds
    (still open after a ``Check`` made after it was answered), until the client cancels it."""

    async def talk(
        _: rls_pb2_grpc.RateLimitServiceStub, channel: grpc.aio.Channel
    ) -> tuple[int, int, bool]:
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="ratelimit"), timeout=10)
        first = await watch.read()
        checked = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        still_open = not watch.done()
        watch.cancel()
        return first.status, checked.status, still_open  # type: ignore[attr-defined]

    assert with_server(clock, talk) == (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.SERVING,
        True,
    )


def test_the_rate_limit_headers_come_with_each_answer_when_named(
    with_server: WithServer, clock: FakeClock
) -> None:
    """``response_headers_to_add``: the limit, remaining and reset headers, under the names
    given, of the status closest to its limit, and retry-after on OVER_LIMIT; reset and
    retry-after rounded up to whole seconds."""
    clock.set(1_699_999_990.5)  # 10.5 s into a minute
    names = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")

    async def talk(
        stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel
    ) -> list[list[tuple[str, str]]]:
        sent = request(descriptor(DEFAULT), descriptor(("path", "/health")))
        answers = [await stub.ShouldRateLimit(sent, timeout=10) for _ in range(4)]
        return [[(h.key, h.value) for h in a.response_headers_to_add] for a in answers]

    added = with_server(clock, talk, header_names=names)
    assert added == [
        [("RateLimit-Limit", "3"), ("RateLimit-Remaining", "2"), ("RateLimit-Reset", "50")],
        [("RateLimit-Limit", "3"), ("RateLimit-Remaining", "1"), ("RateLimit-Reset", "50")],
        [("RateLimit-Limit", "3"), ("RateLimit-Remaining", "0"), ("RateLimit-Reset", "50")],
        [
            ("RateLimit-Limit", "3"),
            ("RateLimit-Remaining", "0"),
            ("RateLimit-Reset", "50"),
            ("Retry-After", "50"),
        ],
    ]


def test_no_headers_unless_named(with_server: WithServer, clock: FakeClock) -> None:
    async def talk(stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel) -> int:
        answer = await stub.ShouldRateLimit(request(descriptor(DEFAULT)), timeout=10)
        return len(answer.response_headers_to_add)

    assert with_server(clock, talk) == 0


SERVICE_1, SERVICE_2 = ("service", "service_1"), ("service", "service_2")
ON_REQUEST = [
    {"entries": ["service=service_1"], "hitsAddend": 0},
    {"entries": ["service=service_2"], "hitsAddend": 0},
]
#: The rules' metadata merged: service_1's first (it wins), then service_2's.
BOTH = {"service_with_quota": {"name": "service_1", "weight": 2}, "zone": "east"}
ONLY_2 = {"service_with_quota": {"name": "service_2", "weight": 2}, "zone": "east"}


def test_dynamic_metadata_routes_each_request_to_a_service_with_quota_left(
    with_server: WithServer, clock: FakeClock
) -> None:
    """The reference's multiservice-tokenquota example, as Envoy calls the service: on the
    request path both services' descriptors with ``hits_addend`` 0 (only looking), the
    answer's metadata naming the service to route to; when the request is done, the service
    that served it with 1, counted past the limit as the reference counts it (``debt``).
    service_1 serves 2 requests a minute, service_2 3."""

    async def talk(
        stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel
    ) -> list[tuple[int, dict[str, object]]]:
        looking = wrappers_pb2.UInt64Value(value=0)
        sent = request(
            descriptor(SERVICE_1, hits_addend=looking), descriptor(SERVICE_2, hits_addend=looking)
        )
        found = []
        for _ in range(6):
            answer = await stub.ShouldRateLimit(sent, timeout=10)
            metadata = json_format.MessageToDict(answer.dynamic_metadata)
            found.append((answer.overall_code, metadata))
            served = metadata.get("metadata", {}).get("service_with_quota", {}).get("name")
            if served is not None:  # the request is done: its service is debited
                one = wrappers_pb2.UInt64Value(value=1)
                await stub.ShouldRateLimit(
                    request(descriptor(("service", served), hits_addend=one)), timeout=10
                )
        return found

    routed = with_server(clock, talk, dynamic_metadata=True, debt=True)
    common = {"domain": "test", "descriptors": ON_REQUEST}
    assert routed == [
        (Response.OK, {**common, "metadata": BOTH}),
        (Response.OK, {**common, "metadata": BOTH}),
        (Response.OK, {**common, "metadata": ONLY_2}),
        (Response.OK, {**common, "metadata": ONLY_2}),
        (Response.OK, {**common, "metadata": ONLY_2}),
        (Response.OVER_LIMIT, common),
    ]


def test_no_dynamic_metadata_unless_asked(with_server: WithServer, clock: FakeClock) -> None:
    async def talk(stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel) -> bool:
        answer = await stub.ShouldRateLimit(request(descriptor(SERVICE_1)), timeout=10)
        return answer.HasField("dynamic_metadata")

    assert with_server(clock, talk) is False


def test_the_wire_decides_as_the_engine_does_in_process(
    with_server: WithServer, clock: FakeClock
) -> None:
    sequence = [
        request(descriptor(DEFAULT), descriptor(DEFAULT, ("user", "bob"))),
        request(descriptor(DEFAULT, ("user", "bob")), hits_addend=2),
        request(descriptor(DEFAULT)),
        request(descriptor(DEFAULT), descriptor(("path", "/health"))),
    ]

    async def over_the_wire(
        stub: rls_pb2_grpc.RateLimitServiceStub, _: grpc.aio.Channel
    ) -> list[bytes]:
        return [
            (await stub.ShouldRateLimit(one, timeout=10)).SerializeToString() for one in sequence
        ]

    wire = with_server(FakeClock(clock()), over_the_wire)

    async def in_process() -> list[bytes]:
        engine = AsyncEngine(
            AsyncMemoryStore(clock=FakeClock(clock())), rules=parse_rules(RULES, "rules.yaml")
        )
        answers = [response_of(await decide_async(engine, call_of(one))) for one in sequence]
        return [one.SerializeToString() for one in answers]

    assert wire == asyncio.run(in_process())


def test_an_address_in_use_is_an_os_error_naming_it(clock: FakeClock) -> None:
    async def main() -> None:
        engine = AsyncEngine(AsyncMemoryStore(clock=clock), rules=parse_rules(RULES, "rules.yaml"))
        try:
            with pytest.raises(OSError, match=f"gRPC cannot listen on 127.0.0.1:{port}"):
                await serve_grpc(engine, f"127.0.0.1:{port}")
        finally:
            await engine.close()

    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        asyncio.run(main())


@pytest.mark.parametrize(
    "data",
    [b"\x0a\x01\xff", b"\xff\xff\xff", b"\x0a\x04test\x12\x04\x0a\x02\x0a\x80"],
    ids=["bad UTF-8 in the domain", "no message at all", "a truncated descriptor"],
)
def test_bytes_that_are_no_request_are_invalid_argument_and_the_server_goes_on(
    with_server: WithServer, clock: FakeClock, data: bytes
) -> None:
    async def talk(
        stub: rls_pb2_grpc.RateLimitServiceStub, channel: grpc.aio.Channel
    ) -> tuple[grpc.StatusCode, str, int]:
        raw = channel.unary_unary(
            f"/{SERVICE}/ShouldRateLimit",
            request_serializer=lambda given: given,
            response_deserializer=lambda given: given,
        )
        try:
            await raw(data, timeout=10)
        except grpc.aio.AioRpcError as error:
            code, details = error.code(), error.details() or ""
        else:
            code, details = grpc.StatusCode.OK, ""
        after = await stub.ShouldRateLimit(request(descriptor(DEFAULT)), timeout=10)
        return code, details, after.overall_code

    code, details, after = with_server(clock, talk)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("not a RateLimitRequest: ")
    assert after == Response.OK
