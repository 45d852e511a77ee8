"""``RateLimitMiddleware``: rate limiting for any ASGI application (Starlette, FastAPI, ...).

A pure ASGI middleware: no framework is imported. It decides each HTTP request with an
``AsyncGate`` and answers a refused one itself (``ratekeeper.web.replies``); it passes through
untouched what it does not handle: websocket and lifespan scopes, and exempt paths. An admitted
request goes on to the application, its response carrying the rate-limit headers; under a
limit charged by outcome, the status its response starts with (or the exception the
application raised before) is the ``HandlerResult`` the gate settles before the response
goes out, and the headers tell what that result left. When a key reads the body
(``keys.field``), the body is read first, up to ``max_body`` bytes (longer is answered 413),
and handed on to the application unchanged.

Example (Starlette or FastAPI)::

    app.add_middleware(
        RateLimitMiddleware,
        decider=AsyncLimiter("redis://127.0.0.1:6379/0"),
        limits=[RateLimit("100/minute", key=keys.client_ip(trusted=["10.0.0.0/8"]))],
        exempt=["/health"],
    )
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ratekeeper.decider import AsyncDecider
from ratekeeper.web.gate import AsyncGate
from ratekeeper.web.options import Middleware
from ratekeeper.web.outcomes import HandlerResult, status_of
from ratekeeper.web.replies import Reply
from ratekeeper.web.request import Request, joined

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def user_of(scope: Scope) -> str | None:
    """The authenticated user's id in ``scope["user"]`` (Starlette's authentication), or None."""
    user = scope.get("user")
    if user is None or getattr(user, "is_authenticated", True) is False:
        return None
    for name in ("identity", "display_name", "username"):
        try:
            value = getattr(user, name, None)
        except NotImplementedError:  # Starlette's BaseUser leaves identity to subclasses
            continue
        if value:
            return str(value)
    return None


def route_of(scope: Scope) -> str | None:
    """The template of the route ``scope`` goes to: the one the router matched, or else the
    first of the application's routes (``scope["app"].routes``) that matches it fully."""
    matched = scope.get("route")
    if matched is not None and getattr(matched, "path", None):
        return str(matched.path)
    app = scope.get("app")
    for route in getattr(getattr(app, "router", app), "routes", None) or ():
        matches = getattr(route, "matches", None)
        if matches is None or not hasattr(route, "endpoint"):
            continue
        match, _ = matches(scope)
        if getattr(match, "name", None) == "FULL":
            return str(route.path)
    return None


def headers_of(scope: Scope) -> dict[str, str]:
    """The headers of an HTTP ``scope``, as ``Request.headers``."""
    return joined((n.decode("latin-1"), v.decode("latin-1")) for n, v in scope.get("headers", ()))


def request_of(scope: Scope, native: Any = None) -> Request:
    """The ``Request`` of an HTTP ``scope``."""
    client = scope.get("client")
    return Request(
        scope.get("method", "GET"),
        scope.get("path", "/"),
        lambda: headers_of(scope),
        client[0] if client else None,
        query_string=scope.get("query_string", b"").decode("latin-1"),
        user=user_of(scope),
        route=lambda: route_of(scope),
        native=scope if native is None else native,
    )


async def read_body(receive: Receive, limit: int) -> tuple[bytes | None, list[Message]]:
    """The whole body, or None past ``limit`` bytes; and the messages read, to replay."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit:
            return None, messages
        if not message.get("more_body", False):
            break
    return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request"), messages


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives ``messages`` first, then what ``receive`` gives."""
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


async def send_reply(send: Send, reply: Reply) -> None:
    """Send ``reply`` as the whole response."""
    headers = encoded(reply.headers)
    if not any(name == b"content-length" for name, _ in headers):
        headers.append((b"content-length", str(len(reply.body)).encode()))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


#: Header names as ASGI sends them (lower case, bytes), by their text: the few that replies use.
_NAMES: dict[str, bytes] = {}


def encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """``headers`` as ASGI sends them: lower-case names, latin-1 bytes."""
    found = []
    for name, value in headers:
        raw = _NAMES.get(name)
        if raw is None:
            raw = name.lower().encode("latin-1")
            if len(_NAMES) < 64:
                _NAMES[name] = raw
        found.append((raw, value.encode("latin-1")))
    return found


def extended(headers: list[tuple[bytes, bytes]], more: list[tuple[bytes, bytes]]) -> None:
    """Add to ``headers`` those of ``more`` whose names it does not hold yet."""
    present = {name.lower() for name, _ in headers}
    headers.extend(pair for pair in more if pair[0] not in present)


def adding(send: Send, extra: list[tuple[str, str]]) -> Send:
    """A ``send`` that adds the headers ``extra`` to the response, unless the app set them."""
    more = encoded(extra)

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            extended(headers, more)
            message = {**message, "headers": headers}
        await send(message)

    return send_with_headers


#: How a request charged by outcome is settled by what it came to: the headers to tell.
Settle = Callable[[HandlerResult], Awaitable[list[tuple[str, str]]]]


async def settled(app: ASGIApp, scope: Scope, receive: Receive, send: Send, settle: Settle) -> None:
    """Run ``app``, and settle its request once with what it came to (``settle(result)``):
    the status its response starts with, before that start is sent, so that the headers
    ``settle`` returns (added unless the app set them) tell what the result left; else the
    exception it raised before starting, or 500 when it never started."""
    started = False

    async def send_settled(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start" and not started:
            started = True
            extra = await settle(HandlerResult(int(message["status"])))
            if extra:
                headers = list(message.get("headers", ()))
                extended(headers, encoded(extra))
                message = {**message, "headers": headers}
        await send(message)

    try:
        await app(scope, receive, send_settled)
    except BaseException as error:
        if not started:
            started = True
            await settle(HandlerResult(status_of(error), error))
        raise
    if not started:
        await settle(HandlerResult(500))


class RateLimitMiddleware(Middleware[ASGIApp, AsyncDecider, AsyncGate]):
    """Rate-limit an ASGI ``app`` (see the module's doc).

    ``decider`` is an ``AsyncDecider`` (``AsyncLimiter``, ``AsyncEngine``,
    ``AsyncRemoteLimiter``); ``limits`` are ``RateLimit``s counted in ``scope`` (default
    ``"app"``). ``domain`` and ``descriptors`` (keys) have an ``AsyncEngine`` decide each
    request by its rules, each descriptor costing ``cost``. ``exempt`` (path patterns or a test
    of the ``Request``) passes requests through uncounted; ``max_body`` bounds a body read for a
    key. ``cost``, ``all_or_nothing``, ``max_delay`` and ``sleep`` go to the ``AsyncGate``;
    ``headers``, ``ietf``, ``degraded_header`` and ``on_refused`` to ``Replies``. A bad option
    raises here.
    """

    _gate = AsyncGate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = request_of(scope)
        if self.exempt is not None and self.exempt(request):
            await self.app(scope, receive, send)
            return
        if self.gate.needs_body(request):
            body, messages = await read_body(receive, self.max_body)
            if body is None:
                await send_reply(send, self.too_large())
                return
            request.body = body
            receive = replaying(messages, receive)
        outcome = await self.gate.decide(request)
        if not outcome.allowed:
            await send_reply(send, self.replies.refusal(request, outcome))
            return
        if outcome.pending:  # a limit charged by outcome: settled, then told, as the app answers
            gate, replies = self.gate, self.replies

            async def settle(result: HandlerResult) -> list[tuple[str, str]]:
                return replies.admitted(await gate.settle(outcome, result))

            await settled(self.app, scope, receive, send, settle)
            return
        extra = self.replies.admitted(outcome)
        await self.app(scope, receive, adding(send, extra) if extra else send)
