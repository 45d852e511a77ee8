"""ratekeeper's own CPU a decision, door by door: ``python -m benchmarks.service.door_costs``.

In one process, no server and no socket: the service's parts exactly as ``ratekeeper serve``
builds them (``runtime.app.build_parts``: the metrics tracking the engine, the in-flight bound,
the rules' domain ``bench`` with a rule of 1,000,000,000 a day on ``client``), on the memory
store (``--store`` another). One descriptor, ``client=<value>``, decided through each door,
each call awaited in turn on one event loop:

- **HTTP** ``POST /v1/check`` with ``{"domain": "bench", "descriptors": [{"entries": [...]}]}``:
  the HTTP app called as an ASGI server calls it (its scope, ``receive`` handing the body over,
  ``send`` taking the answer's messages);
- **gRPC, grpc.aio**: what grpc.aio runs in Python for a ``ShouldRateLimit`` (``aio``): the
  request's parser, the servicer's method, the response's serializer. grpc.aio's own part
  (its C core and Cython) is not ratekeeper's, and is not here;
- **gRPC, ASGI (pyvoy)**: the app ``ratekeeper serve --server pyvoy`` runs, gRPC routed from
  HTTP by ``content-type`` (``runtime.pyvoy_app``), called with the framed request and the
  headers Envoy's rate-limit filter sends (``ENVOY_HEADERS``: its ``grpc-timeout`` bounds the
  call, as grpc.aio's C core bounds it on the other door).

Each door's whole call is timed, and so is each part of it alone, on the same objects with
the same arguments: parsing the request (JSON or protobuf), translating it into the engine's
call, the engine's ``check`` without its observer, the metrics' hooks (the engine's observer,
the latency histogram), translating the verdict into the door's answer, and serializing it.
*The rest* is the whole call less those parts: the handler, the in-flight bound, the awaits,
and the ASGI and gRPC framing. Beside each door, its stack's hello world, as the service
benchmark runs it (``baseline``'s raw ASGI app; its grpc.aio ``Hello`` with grpc.aio's parser
and serializer; ``pyvoy_hello``'s app), takes the same request the same way: the whole call
less the hello world is *ratekeeper's own*, as issue 37 reckons it from a server's CPU.

Times are the thread's CPU time (``time.thread_time``) over ``--calls`` calls, the least of
``--rounds`` rounds, in µs a call: CPU, not throughput, so that other work on the machine moves
them little. Run back to back in one hot loop, a call costs two to three times less than in a
server, where the stack's own work between two calls leaves the caches cold: the split and the
ratios are the figures to read. On a remote store (``--store redis://...``) each call is a
batch of one, and the loop's work for its round trip lands in *the rest*. ``--profile DOOR``
prints cProfile's heaviest functions of that door's calls instead.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.service import baseline, pyvoy_hello
from ratekeeper.service.grpc import RateLimitServicer, response_of
from ratekeeper.service.grpc import hot as grpc_hot
from ratekeeper.service.grpc.asgi import SHOULD_RATE_LIMIT, Context, GrpcApp, frame
from ratekeeper.service.grpc.servicer import _parse
from ratekeeper.service.http import hot as http_hot
from ratekeeper.service.proto import rls_pb2
from ratekeeper.service.runtime.app import Parts, build_parts, envoy_header_names
from ratekeeper.service.runtime.pyvoy_app import grpc_or_http
from ratekeeper.service.runtime.settings import Settings
from ratekeeper.wire import translate
from ratekeeper.wire.headers import raw_wire_headers

RULES = """
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 1000000000}
"""
HTTP, AIO, ASGI = "HTTP `/v1/check`", "gRPC, grpc.aio", "gRPC, ASGI (pyvoy)"
DOORS = (HTTP, AIO, ASGI)
PARTS = (
    "parse the request (JSON, protobuf)",
    "translate it into the engine's call",
    "the engine's `check`, no observer",
    "metrics hooks (the engine's observer, the latency histogram)",
    "translate the verdict into the answer",
    "serialize the answer (JSON and headers, protobuf)",
)
#: The headers Envoy's rate-limit filter sends with a call (its timeout, 20 ms by default).
ENVOY_HEADERS = [
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
    (b"grpc-timeout", b"20m"),
    (b"x-envoy-expected-rq-timeout-ms", b"20"),
]
REST = "the rest: handler, in-flight bound, awaits, ASGI and gRPC framing"
TOTAL = "**the whole call**"
HELLO = "the stack's hello world, the same call"
OWN = "**ratekeeper's own: the whole call less the hello world**"
ROWS = (*PARTS, REST, TOTAL, HELLO, OWN)
Timed = Callable[[], Awaitable[object]]


class Doors:
    """The service's parts over one engine, and one descriptor's call through each door."""

    def __init__(self, parts: Parts, settings: Settings) -> None:
        self.parts, self.engine = parts, parts.engine
        self.servicer = RateLimitServicer(
            parts.engine,
            parts.metrics,
            parts.in_flight_bound,
            envoy_header_names(settings),
            dynamic_metadata=settings.dynamic_metadata,
        )
        self.pyvoy = grpc_or_http(
            GrpcApp(self.servicer, parts.access_log, parts.tracing, parts.health_check), parts.http
        )
        value = f"door-costs-{time.time_ns()}"
        self.entries = [(("client", value),)]
        self.body = json.dumps(
            {"domain": "bench", "descriptors": [{"entries": [{"key": "client", "value": value}]}]}
        ).encode()
        request = rls_pb2.RateLimitRequest(domain="bench")
        request.descriptors.add().entries.add(key="client", value=value)
        self.request, self.message = request, request.SerializeToString()
        self.http_scope = _scope(
            "/v1/check",
            [
                (b"host", b"127.0.0.1:8080"),
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(self.body)),
            ],
        )
        self.grpc_scope = _scope(SHOULD_RATE_LIMIT, ENVOY_HEADERS)
        self.sent: list[dict[str, Any]] = []
        self._http_hello = baseline.application("127.0.0.1:0", str)
        self._aio_hello = baseline.Hello()

    # The doors, whole.

    async def http(self) -> list[dict[str, Any]]:
        self.sent = []
        await self.parts.http(self.http_scope, self._receive(self.body), self._send)
        return self.sent

    async def aio(self) -> bytes:
        response = await self.servicer.ShouldRateLimit(_parse(self.message), Context())
        return rls_pb2.RateLimitResponse.SerializeToString(response)

    async def asgi(self) -> list[dict[str, Any]]:
        self.sent = []
        await self.pyvoy(self.grpc_scope, self._receive(frame(self.message)), self._send)
        return self.sent

    def _receive(self, body: bytes) -> Callable[[], Awaitable[dict[str, Any]]]:
        message = {"type": "http.request", "body": body, "more_body": False}

        async def receive() -> dict[str, Any]:
            return message

        return receive

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    # Their parts, each alone.

    async def check(self) -> object:
        return await self.engine.check("bench", self.entries, 1)

    def parts_of(self, door: str) -> list[Timed | None]:
        """``door``'s parts, in the order of ``PARTS`` (None: the door has no such part)."""
        engine, observer = self.engine, self.engine.observer
        latency = self.parts.metrics.latency_observer("http" if door == HTTP else "grpc")
        statuses = None

        async def observed() -> object:
            nonlocal statuses
            if statuses is None:
                statuses = (await self.check()).statuses  # type: ignore[attr-defined]
            if observer is not None:
                observer("bench", statuses)
            latency(0.0001)
            return None

        async def bare() -> object:
            engine.observer = None
            try:
                return await self.check()
            finally:
                engine.observer = observer

        if door == HTTP:

            async def parse() -> object:
                return http_hot.parse(self.body)

            async def fields() -> object:
                return translate.fields(self._verdict.statuses[0])

            async def serialize() -> object:
                code, limited, remaining, reset, retry_after = self._fields
                amount = None if limited is None else limited[0]
                headers = raw_wire_headers(code, amount, remaining, reset, retry_after)
                return http_hot.answer_of(True, False, self._fields), headers

            return [parse, None, bare, observed, fields, serialize]

        async def parse_proto() -> object:
            return _parse(self.message)

        async def translate_in() -> object:
            return grpc_hot.arguments(self.request)

        async def translate_out() -> object:
            return grpc_hot.response(self._verdict)

        async def serialize_proto() -> object:
            return self._response.SerializeToString()

        return [parse_proto, translate_in, bare, observed, translate_out, serialize_proto]

    async def prepare(self) -> None:
        """Decide once through each door (the plan cached, the store warm), and keep a verdict,
        its fields and a response for the parts that start from them."""
        await self.verify()
        self._verdict = await self.check()
        self._fields = translate.fields(self._verdict.statuses[0])
        self._response = response_of(translate.answer(self._verdict))

    async def verify(self) -> None:
        """Each door answers the decision meant: HTTP a 200 that allows, gRPC ``OK``."""
        Response = rls_pb2.RateLimitResponse
        sent = await self.http()
        if sent[0]["status"] != 200 or not json.loads(sent[1]["body"])["allowed"]:
            raise RuntimeError(f"HTTP answered {sent}")
        data = await self.aio()
        if Response.FromString(data).overall_code != Response.OK:
            raise RuntimeError(f"grpc.aio's servicer answered {data!r}")
        sent = await self.asgi()
        body, trailers = sent[1]["body"], sent[2]["headers"]
        if Response.FromString(body[5:]).overall_code != Response.OK or trailers[0] != (
            b"grpc-status",
            b"0",
        ):
            raise RuntimeError(f"the ASGI gRPC door answered {sent}")

    def whole(self, door: str) -> Timed:
        return {HTTP: self.http, AIO: self.aio, ASGI: self.asgi}[door]

    # The hello worlds the service benchmark sets beside each door (``baseline``,
    # ``pyvoy_hello``): the same request read, a fixed answer written.

    def hello(self, door: str) -> Timed:
        return {HTTP: self.http_hello, AIO: self.aio_hello, ASGI: self.asgi_hello}[door]

    async def http_hello(self) -> list[dict[str, Any]]:
        self.sent = []
        await self._http_hello(self.http_scope, self._receive(self.body), self._send)
        return self.sent

    async def aio_hello(self) -> bytes:
        request = rls_pb2.RateLimitRequest.FromString(self.message)
        response = await self._aio_hello.ShouldRateLimit(request, Context())
        return rls_pb2.RateLimitResponse.SerializeToString(response)

    async def asgi_hello(self) -> list[dict[str, Any]]:
        self.sent = []
        await pyvoy_hello.app(self.grpc_scope, self._receive(frame(self.message)), self._send)
        return self.sent


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "2", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "headers": headers, "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }  # fmt: skip


async def per_call(call: Timed, calls: int, rounds: int) -> float:
    """The least thread CPU seconds a call of ``call`` took, over ``rounds`` of ``calls``."""
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        started = time.thread_time()
        for _ in range(calls):
            await call()
        best = min(best, (time.thread_time() - started) / calls)
    return best


async def measure(doors: Doors, calls: int, rounds: int) -> dict[str, list[float | None]]:
    """Each door's parts and whole call, in µs a call: ``PARTS``, then the rest and the total."""
    table: dict[str, list[float | None]] = {}
    for door in DOORS:
        found: list[float | None] = []
        for part in doors.parts_of(door):
            found.append(None if part is None else await per_call(part, calls, rounds) * 1e6)
        total = await per_call(doors.whole(door), calls, rounds) * 1e6
        hello = await per_call(doors.hello(door), calls, rounds) * 1e6
        found += [total - sum(one or 0.0 for one in found), total, hello, total - hello]
        table[door] = found
    await doors.verify()
    return table


async def profile(doors: Doors, door: str, calls: int, top: int) -> None:
    """cProfile's ``top`` heaviest functions (own time) over ``calls`` calls of ``door``."""
    call = doors.whole(door)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        await call()
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(top)


async def run(settings: Settings, args: argparse.Namespace) -> dict[str, list[float | None]]:
    parts = build_parts(settings, grpc_aio=False)
    doors = Doors(parts, settings)
    async with parts.http.router.lifespan_context(parts.http):
        await doors.prepare()
        if args.profile is not None:
            door = {"http": HTTP, "aio": AIO, "asgi": ASGI}[args.profile]
            await profile(doors, door, args.calls, 30)
            return {}
        return await measure(doors, args.calls, args.rounds)


def emit(table: dict[str, list[float | None]]) -> list[str]:
    def cell(value: float | None) -> str:
        return report.MISSING if value is None else f"{value:.1f}"

    rows = [
        [name, *(cell(table[door][index]) for door in DOORS)] for index, name in enumerate(ROWS)
    ]
    return report.table(["µs a call (thread CPU)", *DOORS], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.service.door_costs", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--calls", type=int, default=20_000, help="calls a round (20,000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the least kept (5)")
    parser.add_argument("--store", default="memory://", help="the request store (memory://)")
    parser.add_argument("--profile", choices=("http", "aio", "asgi"), help="cProfile one door")
    args = parser.parse_args(argv)
    command = shlex.join([sys.executable, "-m", "benchmarks.service.door_costs", *sys.argv[1:]])
    with tempfile.TemporaryDirectory(prefix="ratekeeper-door-costs-") as name:
        rules = Path(name) / "rules.yaml"
        rules.write_text(RULES)
        # The calls run back to back, holding the loop: its lag would shed them (--max-wait).
        settings = Settings(
            store=args.store,
            config=f"sqlite:///{name}/config.db",
            rules=(str(rules),),
            instances=1,
            max_wait=0.0,
        )
        started = time.perf_counter()
        table = asyncio.run(run(settings, args))
    if not table:
        return 0
    lines = [
        f"- Command: `{command}`",
        f"- Date: {datetime.now(UTC).isoformat(timespec='seconds')}; store `{args.store}`; "
        f"{args.calls:,} calls a round, the least of {args.rounds} rounds; "
        f"{time.perf_counter() - started:.0f} s; load average {report.load()}",
        "",
        *emit(table),
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
