"""The gRPC app (``ratekeeper.service.grpc.asgi.GrpcApp``) on pyvoy for the tests, over an
engine each test makes afresh: ``POST /engine`` with ``{"now": SECONDS, "header_names":
[LIMIT, REMAINING, RESET] or null, "dynamic_metadata": BOOLEAN, "debt": BOOLEAN}`` closes the
engine of the test before and makes one over a memory store on a ``FakeClock`` stopped at
``now``, with the gRPC tests' rules (``tests/service/grpc/rules.py``). ``GET /pid`` answers
the pid of the process that started pyvoy (this app's process's parent), for the server's
readiness check. Run by ``tests.gateways.PyvoyApp``."""

from __future__ import annotations

import json
import os
from typing import Any

from ratekeeper import AsyncEngine
from ratekeeper.rules import parse_rules
from ratekeeper.service.asgi import Receive, Scope, Send
from ratekeeper.service.grpc import RateLimitServicer
from ratekeeper.service.grpc.asgi import GrpcApp
from ratekeeper.service.runtime.pyvoy_app import grpc_or_http
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.testing import FakeClock
from tests.service.grpc.rules import RULES


class Engines:
    """The HTTP side: the engine of the test under way, and the gRPC app over it."""

    def __init__(self, rules: str) -> None:
        self.rules = rules
        self.engine: AsyncEngine | None = None
        self.grpc: GrpcApp | None = None

    async def grpc_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.grpc is not None, "POST /engine first"
        await self.grpc(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            if self.engine is not None:
                await self.engine.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        answer = b"no such path"
        status = 404
        if scope["path"] == "/pid":
            answer, status = str(os.getppid()).encode(), 200
        elif scope["path"] == "/engine":
            given: dict[str, Any] = json.loads(body)
            if self.engine is not None:
                await self.engine.close()
            store = AsyncMemoryStore(clock=FakeClock(given["now"]))
            self.engine = AsyncEngine(
                store, rules=parse_rules(self.rules, "rules.yaml"), debt=given.get("debt", False)
            )
            names = given.get("header_names")
            servicer = RateLimitServicer(
                self.engine,
                header_names=names and tuple(names),
                dynamic_metadata=given.get("dynamic_metadata", False),
            )
            self.grpc = GrpcApp(servicer)
            answer, status = b"made", 200
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": answer})


engines = Engines(RULES)
app = grpc_or_http(engines.grpc_app, engines)
