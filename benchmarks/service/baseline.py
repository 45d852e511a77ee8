"""The service benchmark's baseline: hello-world HTTP and gRPC on ``ratekeeper serve``'s stack.

``python -m benchmarks.service.baseline --http HOST:PORT --grpc HOST:PORT`` serves until SIGTERM:

- over HTTP, a raw ASGI app that reads the request's body and answers 200 with a fixed JSON
  body, on uvicorn with the options ``ratekeeper serve`` gives it
  (``ratekeeper.service.runtime.serve.uvicorn_options``: the same event loop, HTTP parser, log
  level, one worker); and at ``/starlette`` the same answer from a Starlette app of one route,
  for reference;
- over gRPC, on the same event loop and started from the app's lifespan as ``ratekeeper
  serve`` starts its own, a ``grpc.aio`` server whose ``ShouldRateLimit`` parses the request
  and answers a new ``RateLimitResponse`` of ``OK``, deciding nothing.

So the two differ from ratekeeper only by ratekeeper's own work: routing, parsing, deciding
and answering. The process writes one line on stdout once it serves: ``ready <loop> <http>``,
the event loop's class and uvicorn's HTTP protocol class, for the benchmark to report.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import grpc
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ratekeeper.service.proto import rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.serve import uvicorn_options
from ratekeeper.service.runtime.settings import Settings
from ratekeeper.service.runtime.values import address

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

BODY = b'{"message":"hello"}'
START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))],
}
END = {"type": "http.response.body", "body": BODY}


async def hello(request: Request) -> Response:
    await request.body()
    return Response(BODY, media_type="application/json")


starlette = Starlette(routes=[Route("/starlette", hello, methods=["POST"])])


class Hello(rls_pb2_grpc.RateLimitServiceServicer):
    """``ShouldRateLimit`` answering OK to everything."""

    async def ShouldRateLimit(
        self, request: rls_pb2.RateLimitRequest, context: Any
    ) -> rls_pb2.RateLimitResponse:
        return rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)


def application(
    grpc_address: str, protocol: Callable[[], str]
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The hello-world ASGI app; its lifespan runs the gRPC server on ``grpc_address`` and prints
    the ready line (``protocol()`` names uvicorn's HTTP protocol)."""

    @asynccontextmanager
    async def grpc_server() -> AsyncIterator[None]:
        server = grpc.aio.server()
        rls_pb2_grpc.add_RateLimitServiceServicer_to_server(Hello(), server)
        if server.add_insecure_port(grpc_address) == 0:
            raise OSError(f"gRPC cannot listen on {grpc_address}")
        await server.start()
        try:
            yield
        finally:
            await server.stop(1)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            async with grpc_server():
                while True:
                    message = await receive()
                    if message["type"] == "lifespan.startup":
                        await send({"type": "lifespan.startup.complete"})
                        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
                        print("ready", loop, protocol(), flush=True)
                    elif message["type"] == "lifespan.shutdown":
                        break
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/starlette":
            await starlette(scope, receive, send)
            return
        more = True
        while more:  # the body, read and dropped
            message = await receive()
            more = message.get("more_body", False)
        await send(START)
        await send(END)

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service.baseline")
    parser.add_argument("--http", required=True, metavar="HOST:PORT")
    parser.add_argument("--grpc", required=True, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    settings = Settings(http=address(args.http), grpc=address(args.grpc))
    config = uvicorn.Config(
        application(str(settings.grpc), lambda: config.http_protocol_class.__name__),
        **uvicorn_options(settings),
    )
    server = uvicorn.Server(config)
    # As in ``ratekeeper serve``: SIGTERM stops uvicorn, which then raises it again.
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    server.run()
    return 0 if server.started else 3


if __name__ == "__main__":
    sys.exit(main())
