"""The access log (``--access-log``, off by default): one line a decision request, any surface.

Each request to a decision route is one INFO record of the ``ratekeeper.access`` logger, its
message the request (``POST /v1/check``, or the gRPC method ``ShouldRateLimit``), its fields:

``surface``
    ``http`` (``/v1/check``, ``/v1/check/batch``, ``/v1/peek``), ``json`` (Envoy's
    ``POST /json``), ``nginx`` (``GET /v1/nginx``) or ``grpc`` (``ShouldRateLimit``);
``status`` or ``code``
    the HTTP status; for gRPC the status code's name (``OK``, ``UNAVAILABLE``, ...);
``duration_ms``
    the time from the request's arrival to its answer, in milliseconds;
``domain``, ``rule``, ``result``
    for a request that was decided: the domain, the rule that decided (its name, else its
    path; with no rule, ``override``, ``default``, ``given`` or ``none``, as the metrics name
    them) and the result: ``degraded`` when the store failed and its failure policy decided,
    else ``limited``, ``shadowed`` or ``allowed``. The deciding descriptor is the first that
    refused, else the first shadow-mode rule that would have, else the one with the fewest
    hits remaining.

No key and no descriptor value is ever logged: they are the clients' data (user names,
addresses), as in the metrics' labels. The probes, ``/metrics`` and the admin routes are not
logged.

Off, it costs nothing: the service then makes no ``AccessLog`` and no surface calls one. On, it
is the engine's observer in front of the one it had (the metrics), and notes each decision in
the request's context (a ``ContextVar``: the surfaces decide in the request's own task).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from ratekeeper.service.asgi import App, Message, Receive, Scope, Send
from ratekeeper.service.observe.labels import Noted, decided
from ratekeeper.service.observe.logs import ACCESS

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine, Status
    from ratekeeper.engine.verdict import Observer

log = logging.getLogger(ACCESS)

#: The decision routes by path, and the surface each request's line names (Envoy's ``POST /json``
#: its own, ``json``, where the metrics count it as ``http``).
ROUTES = {
    "/v1/check": "http",
    "/v1/check/batch": "http",
    "/v1/peek": "http",
    "/json": "json",
    "/v1/nginx": "nginx",
}

#: The decisions of the request under way.
_noted: ContextVar[Noted | None] = ContextVar("ratekeeper_access_noted", default=None)

T = TypeVar("T")


class AccessLog:
    """The access log of the service over ``engine``: made, it becomes ``engine``'s observer,
    passing every decision on to the observer it had."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._next: Observer | None = engine.observer
        self._default = engine.planner.default
        engine.observer = self._observe

    def _observe(self, domain: str, statuses: tuple[Status, ...]) -> None:
        noted = _noted.get()
        if noted is not None:
            noted.append((domain, statuses))
        observer = self._next
        if observer is not None:
            observer(domain, statuses)

    async def asgi(self, app: App, scope: Scope, receive: Receive, send: Send) -> None:
        """``app(scope, receive, send)``, a request to a decision route logged."""
        surface = ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if surface is None:
            await app(scope, receive, send)
            return
        status = 500  # unless an answer starts

        async def answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        noted: Noted = []
        token = _noted.set(noted)
        started = time.perf_counter()
        try:
            await app(scope, receive, answer)
        finally:
            _noted.reset(token)
            request = f"{scope['method']} {scope['path']}"
            self._log(request, {"surface": surface, "status": status}, started, noted)

    def grpc(
        self, method: Callable[[Any, Any], Awaitable[T]]
    ) -> Callable[[Any, Any], Awaitable[T]]:
        """The gRPC handler ``method`` (``ShouldRateLimit``), each call logged."""
        name = method.__name__

        async def logged(request: Any, context: Any) -> T:
            noted: Noted = []
            token = _noted.set(noted)
            started = time.perf_counter()
            code = "OK"
            try:
                return await method(request, context)
            except asyncio.CancelledError:  # the client went away
                code = "CANCELLED"
                raise
            except BaseException:
                code = getattr(context.code(), "name", None) or "UNKNOWN"
                raise
            finally:
                _noted.reset(token)
                self._log(name, {"surface": "grpc", "code": code}, started, noted)

        return logged

    def _log(self, request: str, fields: dict[str, Any], started: float, noted: Noted) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        fields["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
        if noted:
            fields.update(decided(noted, self._default))
        log.info("%s", request, extra=fields)
