"""Per-route limits for FastAPI: each ``RateLimiter.limit(...)`` is a dependency.

Example::

    limiter = RateLimiter(AsyncLimiter())
    limiter.install(app)  # refusals answered as application/problem+json

    @app.post("/orders", dependencies=[Depends(limiter.limit(RateLimit("5/second")))])
    async def order() -> dict[str, str]: ...

A route's limits count apart from every other route's unless they share a ``scope``. A refused
request raises ``RateLimited``, an ``HTTPException`` of status 429 carrying ``Retry-After`` and
the rate-limit headers; ``install(app)`` answers it with the problem+json body of
``ratekeeper.web.replies`` (without it, FastAPI answers ``{"detail": ...}``). An admitted
request's response gets the headers too. With ``install(app)``, the middleware it adds tells
them on whatever answers the request: the route's value, a ``Response`` of its own, and the
answer to an ``HTTPException`` it raises, made by the app's exception handlers; without it, only
a route's value turned into a response gets them.

For limits on every route of a router, or of the whole app, ``router_limit`` is a dependency
of the router (``APIRouter(dependencies=[Depends(limiter.router_limit(..., scope="api"))])``)
or of the app (``FastAPI(dependencies=[...])``): its routes count together in that scope.
Router dependencies run before a route's own, so both apply, the router's first (see
``ratekeeper.web.routes``). ``ratekeeper.web.asgi.RateLimitMiddleware`` also counts requests
no route matches.
A limit charged by outcome (``charge_statuses``, ``charge_when``) needs ``install(app)``: the
middleware it adds reads the status the response starts with (or the exception), settles the
request's pending units, and adds the headers of what that left. An exception that is no
``HTTPException`` goes on to Starlette's 500 page, outside the middleware: it carries no headers.
"""

import json
from collections.abc import Awaitable, Callable

from ratekeeper.core.errors import MissingExtraError

try:
    from fastapi import FastAPI, HTTPException
    from starlette.requests import Request as StarletteRequest
    from starlette.responses import Response
except ImportError:  # pragma: no cover - the extra is installed where this runs
    raise MissingExtraError("fastapi", "fastapi") from None

from ratekeeper.decider import AsyncDecider
from ratekeeper.web.asgi import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    encoded,
    extended,
    request_of,
    settled,
)
from ratekeeper.web.gate import AsyncGate
from ratekeeper.web.limits import ExemptLike, RateLimit, exemption
from ratekeeper.web.outcomes import HandlerResult
from ratekeeper.web.replies import Replies, Reply
from ratekeeper.web.request import declared_length
from ratekeeper.web.routes import Layers, RouteLimiter

__all__ = ["RateLimited", "RateLimiter", "problem_handler"]

#: Where ``Settling`` keeps, in a request's ASGI scope, the ``Replies`` of the layers that
#: admitted it: the last one's tell the response's headers.
SETTLING = "ratekeeper.settling"


class RateLimited(HTTPException):
    """A request refused by a limit (or whose store failed): ``reply`` is its answer."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        detail = problem_detail(reply)
        headers = {n: v for n, v in reply.headers if n.lower() != "content-type"}
        super().__init__(reply.status, detail, headers)


def problem_detail(reply: Reply) -> str:
    """The ``detail`` of ``reply``'s problem body, or its status's phrase."""
    try:
        return str(json.loads(reply.body)["detail"])
    except (ValueError, KeyError, TypeError):
        return "Too Many Requests"


async def problem_handler(request: StarletteRequest, error: Exception) -> Response:
    """Answer ``RateLimited`` with its reply: the exception handler ``install`` adds."""
    reply = error.reply if isinstance(error, RateLimited) else None
    if reply is None:  # pragma: no cover - only registered for RateLimited
        raise error
    return Response(reply.body, status_code=reply.status, headers=dict(reply.headers))


#: Where a request's ``Layers`` are kept, in its ASGI scope.
LAYERS = "ratekeeper.layers"


def layers_of(request: StarletteRequest) -> Layers:
    """The ``Layers`` of ``request``, made on its first layer."""
    layers = request.scope.get(LAYERS)
    if layers is None:
        layers = request.scope[LAYERS] = Layers()
    return layers


def replaced(headers: list[tuple[bytes, bytes]], more: list[tuple[bytes, bytes]]) -> None:
    """Put ``more`` in ``headers`` in place of those of the same names (an outer layer's)."""
    names = {name for name, _ in more}
    headers[:] = [pair for pair in headers if pair[0] not in names] + more


class Settling:
    """The ASGI middleware ``install`` adds: it settles the units a request's layers hold
    (``Layers``, in its scope) with the status its response starts with, or the exception
    raised, and adds to that response, whatever made it, the headers of what its layers
    then tell, as the replies in ``SETTLING`` tell them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        layers = scope[LAYERS] = Layers()
        telling: list[Replies] = []
        scope[SETTLING] = telling

        async def settle(result: HandlerResult) -> list[tuple[str, str]]:
            if not telling:  # no layer decided the request: nothing to tell
                return []
            told = await layers.settle_async(result)
            return [] if told is None else telling[-1].admitted(told)

        await settled(self.app, scope, receive, send, settle)


class RateLimiter(RouteLimiter[AsyncDecider, AsyncGate]):
    """Makes per-route dependencies deciding with an ``AsyncDecider`` (``AsyncLimiter``,
    ``AsyncEngine``, ``AsyncRemoteLimiter``); its options are ``RouteLimiter``'s."""

    _gate = AsyncGate

    def install(self, app: FastAPI) -> None:
        """Have ``app`` answer ``RateLimited`` with its problem+json reply, and settle the
        limits charged by outcome (``Settling``)."""
        app.add_exception_handler(RateLimited, problem_handler)
        app.add_middleware(Settling)

    def limit(
        self, *limits: RateLimit, scope: str | None = None, exempt: ExemptLike = ()
    ) -> Callable[[StarletteRequest, Response], Awaitable[None]]:
        """A dependency deciding ``limits`` for each request of its route; in ``scope`` when
        given (routes naming one scope share their counters), else the route's own.
        ``exempt`` (path patterns or a test of the ``Request``) lets requests through
        uncounted."""
        gate = self.gate(limits, scope)
        skip = exemption(exempt)
        replies, max_body, too_large = self.replies, self.max_body, self.too_large

        async def rate_limit(request: StarletteRequest, response: Response) -> None:
            seen = request_of(request.scope, native=request)
            if skip is not None and skip(seen):
                return
            if gate.needs_body(seen):
                if declared_length(request.headers.get("content-length")) > max_body:
                    raise RateLimited(too_large())  # not read at all
                body = await request.body()
                if len(body) > max_body:
                    raise RateLimited(too_large())
                seen.body = body
            outcome = await gate.decide(seen)
            layers = layers_of(request)
            told = layers.add(outcome, gate)
            if not outcome.allowed:
                raise RateLimited(replies.refusal(seen, outcome))
            telling = request.scope.get(SETTLING)
            if telling is not None:  # installed: Settling tells whatever answers the request
                telling.append(replies)
                return
            if layers.held:  # charged by outcome: told once the response's status settles it
                await layers.settle_async(HandlerResult(500))
                raise RuntimeError("a limit charged by outcome needs limiter.install(app)")
            extra = encoded(replies.admitted(told))
            if extra:  # an outer layer's headers give way to those of every layer passed
                (extended if told is outcome else replaced)(response.raw_headers, extra)

        return rate_limit

    def router_limit(
        self, *limits: RateLimit, scope: str, exempt: ExemptLike = ()
    ) -> Callable[[StarletteRequest, Response], Awaitable[None]]:
        """A dependency for a router or the app, deciding ``limits`` for each request of
        every route it is given to, all counting together in ``scope`` (a limit naming a
        scope of its own counts there); ``exempt`` as ``limit``'s. Example::

            api = APIRouter(dependencies=[Depends(limiter.router_limit(per_client, scope="api"))])
        """
        if not isinstance(scope, str):
            raise TypeError(f"a router's limits count in a scope: a string, not {scope!r}")
        return self.limit(*limits, scope=scope, exempt=exempt)
