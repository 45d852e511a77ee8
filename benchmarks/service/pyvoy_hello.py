"""The gRPC hello world on pyvoy, for the service benchmark's ``--server pyvoy`` rows.

``python -m benchmarks.service.pyvoy_hello --http HOST:PORT`` becomes pyvoy (it executes the
``pyvoy`` beside this Python) serving ``app`` on ``HOST:PORT`` with one worker thread and
uvloop, as ``ratekeeper serve --server pyvoy`` serves the service, until SIGTERM. ``app``
answers gRPC requests with ``grpc_hellos.grpc_asgi`` (the raw ASGI hello world the gRPC stacks
benchmark runs) and everything else, ``GET /readyz`` for the benchmark's readiness check
among them, 200 ``ok``, routed as the service routes them (``pyvoy_app.grpc_or_http``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchmarks.service.grpc_hellos import Receive, Scope, Send, grpc_asgi
from ratekeeper.service.runtime.pyvoy_app import grpc_or_http


async def ready(scope: Scope, receive: Receive, send: Send) -> None:
    """200 ``ok`` to any request; the lifespan has nothing to start."""
    if scope["type"] == "lifespan":
        await grpc_asgi(scope, receive, send)
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


app = grpc_or_http(grpc_asgi, ready)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service.pyvoy_hello")
    parser.add_argument("--http", metavar="HOST:PORT", required=True)
    args = parser.parse_args(argv)
    host, _, port = args.http.rpartition(":")
    pyvoy = str(Path(sys.executable).with_name("pyvoy"))
    os.execv(pyvoy, [
        pyvoy, "benchmarks.service.pyvoy_hello:app", "--address", host, "--port", port,
        "--worker-threads", "1", "--lifespan", "--loop", "uvloop", "--log-level", "error",
    ])  # fmt: skip


if __name__ == "__main__":
    main()
