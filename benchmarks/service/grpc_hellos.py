"""Hello-world ``ShouldRateLimit`` servers, one per gRPC server stack Python offers.

``python -m benchmarks.service.grpc_hellos STACK HOST:PORT`` serves
``envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`` on ``HOST:PORT`` with the stack
``STACK`` (one of ``STACKS``) until SIGTERM. Every stack does the same work: it parses the
``RateLimitRequest`` and answers a new ``RateLimitResponse`` (``answer``), deciding nothing.
The answer is ``OK``, or ``OVER_LIMIT`` when a descriptor holds the entry ``hello=over``, so
that a gateway in front can be shown both answers.

The stacks:

- ``grpc.aio`` (ratekeeper's today), on asyncio's own event loop and on uvloop (the loop
  ``ratekeeper serve`` runs it on), its handlers added as ``ratekeeper.service.grpc`` adds its
  own;
- grpcio's synchronous server, ``grpc.server(ThreadPoolExecutor(max_workers=N))``;
- grpclib (pure-Python gRPC over ``h2`` on asyncio), its handler mapped by hand to the
  generated messages, on asyncio and on uvloop;
- a raw ASGI app speaking gRPC itself (``grpc_asgi``: the length-prefixed message in the body,
  ``grpc-status`` in the HTTP/2 trailers, through the ASGI trailers extension), on uvicorn's
  HTTP/2 (``http="zttp"``, ``http2=True``; prior-knowledge h2c) and on hypercorn, on uvloop.

Only the stack named is imported: grpclib, hypercorn and uvicorn's HTTP/2 parser (zttp) are
installed for the benchmark alone (``pip install grpclib hypercorn zttp``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import struct
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import grpc
from google.protobuf.message import DecodeError

from ratekeeper.service.proto import rls_pb2

SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
METHOD = f"/{SERVICE}/ShouldRateLimit"
Response = rls_pb2.RateLimitResponse

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def answer(request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
    """``OVER_LIMIT`` if a descriptor holds ``hello=over``, else ``OK``."""
    for descriptor in request.descriptors:
        for entry in descriptor.entries:
            if entry.key == "hello" and entry.value == "over":
                return Response(overall_code=Response.OVER_LIMIT)
    return Response(overall_code=Response.OK)


# -- grpcio: grpc.aio and the thread-pool server ---------------------------------------------


def _grpcio_handlers(
    method: Callable[[rls_pb2.RateLimitRequest, Any], Any],
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    return {
        "ShouldRateLimit": grpc.unary_unary_rpc_method_handler(
            method,
            request_deserializer=rls_pb2.RateLimitRequest.FromString,
            response_serializer=Response.SerializeToString,
        )
    }


async def serve_aio(address: str, stop: asyncio.Event) -> None:
    async def should_rate_limit(
        request: rls_pb2.RateLimitRequest, context: Any
    ) -> rls_pb2.RateLimitResponse:
        return answer(request)

    server = grpc.aio.server()
    methods = _grpcio_handlers(should_rate_limit)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    server.add_registered_method_handlers(SERVICE, methods)
    server.add_insecure_port(address)
    await server.start()
    await stop.wait()
    await server.stop(1)


def serve_threads(address: str, workers: int) -> None:
    def should_rate_limit(
        request: rls_pb2.RateLimitRequest, context: Any
    ) -> rls_pb2.RateLimitResponse:
        return answer(request)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda number, frame: stop.set())
    server = grpc.server(ThreadPoolExecutor(max_workers=workers))
    methods = _grpcio_handlers(should_rate_limit)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    server.add_registered_method_handlers(SERVICE, methods)
    server.add_insecure_port(address)
    server.start()
    stop.wait()
    server.stop(1).wait()


# -- grpclib ---------------------------------------------------------------------------------


async def serve_grpclib(address: str, stop: asyncio.Event) -> None:
    from grpclib.const import Cardinality, Handler
    from grpclib.server import Server, Stream

    class Hello:
        """The servicer grpclib's protoc plugin would generate, written by hand."""

        async def should_rate_limit(
            self, stream: Stream[rls_pb2.RateLimitRequest, rls_pb2.RateLimitResponse]
        ) -> None:
            request = await stream.recv_message()
            assert request is not None  # a unary call brings its message
            await stream.send_message(answer(request))

        def __mapping__(self) -> Mapping[str, Handler]:
            return {
                METHOD: Handler(
                    self.should_rate_limit,
                    Cardinality.UNARY_UNARY,
                    rls_pb2.RateLimitRequest,
                    rls_pb2.RateLimitResponse,
                )
            }

    host, _, port = address.rpartition(":")
    server = Server([Hello()])
    await server.start(host, int(port))
    await stop.wait()
    server.close()
    await server.wait_closed()


# -- gRPC on ASGI: uvicorn's HTTP/2 and hypercorn --------------------------------------------

_GRPC = [(b"content-type", b"application/grpc")]


async def grpc_asgi(scope: Scope, receive: Receive, send: Send) -> None:
    """``ShouldRateLimit`` as an ASGI app over HTTP/2 with the trailers extension.

    The request's body is one gRPC message (a 1-byte compressed flag, a 4-byte big-endian
    length, the serialized ``RateLimitRequest``); the answer is 200 ``application/grpc`` with
    one such message, then ``grpc-status`` in the trailers: 0, or 3 (``INVALID_ARGUMENT``) for
    bytes that are no request, or 12 (``UNIMPLEMENTED``) for another method or a compressed
    message."""
    if scope["type"] == "lifespan":  # nothing to start or stop
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        await send({"type": "lifespan.shutdown.complete"})
        return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    data, status = b"", b"0"
    if scope["path"] != METHOD or len(body) < 5 or body[0]:
        status = b"12"
    else:
        try:
            request = rls_pb2.RateLimitRequest.FromString(body[5 : 5 + int.from_bytes(body[1:5])])
        except DecodeError:
            status = b"3"
        else:
            reply = answer(request).SerializeToString()
            data = struct.pack(">?I", False, len(reply)) + reply
    await send({"type": "http.response.start", "status": 200, "headers": _GRPC, "trailers": True})
    await send({"type": "http.response.body", "body": data})
    trailers = [(b"grpc-status", status)]
    await send({"type": "http.response.trailers", "headers": trailers, "more_trailers": False})


async def serve_uvicorn(address: str, stop: asyncio.Event) -> None:
    import uvicorn

    host, _, port = address.rpartition(":")
    config = uvicorn.Config(
        grpc_asgi, host=host, port=int(port), http="zttp", http2=True, loop="none",
        lifespan="off", log_level="warning", access_log=False,
    )  # fmt: skip
    # uvicorn takes SIGTERM itself while it serves, and stops.
    await uvicorn.Server(config).serve()


async def serve_hypercorn(address: str, stop: asyncio.Event) -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [address]
    config.accesslog = None
    config.loglevel = "WARNING"
    # Its default closes a connection after 1,000 requests, HTTP/2 ones too, which fails the
    # calls a gateway has in flight on it.
    config.keep_alive_max_requests = 2**62
    await serve(grpc_asgi, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]


# -- the stacks ------------------------------------------------------------------------------


class Stack(NamedTuple):
    """A stack: what it is, its event loop ("asyncio", "uvloop"; "threads" for the thread pool),
    what serves it (a coroutine, or the thread pool's size) and the modules it needs."""

    label: str
    loop: str
    serve: Callable[[str, asyncio.Event], Coroutine[Any, Any, None]] | int
    needs: tuple[str, ...] = ()


#: The stacks by name; ``aio-uvloop`` is the one ``ratekeeper serve`` runs.
STACKS = {
    "aio": Stack("grpc.aio", "asyncio", serve_aio),
    "aio-uvloop": Stack("grpc.aio", "uvloop", serve_aio, ("uvloop",)),
    "threads-4": Stack("grpc.server, 4 threads", "threads", 4),
    "threads-16": Stack("grpc.server, 16 threads", "threads", 16),
    "grpclib": Stack("grpclib", "asyncio", serve_grpclib, ("grpclib",)),
    "grpclib-uvloop": Stack("grpclib", "uvloop", serve_grpclib, ("grpclib", "uvloop")),
    "uvicorn-h2": Stack("ASGI on uvicorn HTTP/2", "uvloop", serve_uvicorn, ("zttp", "uvloop")),
    "hypercorn": Stack("ASGI on hypercorn", "uvloop", serve_hypercorn, ("hypercorn", "uvloop")),
}


def run(name: str, address: str) -> None:
    """Serve the stack ``name`` on ``address`` until SIGTERM."""
    stack = STACKS[name]
    if isinstance(stack.serve, int):
        serve_threads(address, stack.serve)
        return
    serve = stack.serve

    async def until_stopped() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await serve(address, stop)

    factory = None
    if stack.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(until_stopped())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service.grpc_hellos")
    parser.add_argument("stack", choices=sorted(STACKS))
    parser.add_argument("address", metavar="HOST:PORT")
    args = parser.parse_args(argv)
    run(args.stack, args.address)
    return 0


if __name__ == "__main__":
    sys.exit(main())
