"""The decision service's HTTP surface: a Starlette app over one ``AsyncEngine``.

``http_app(engine, admin_token=...)`` routes (every body JSON, every problem
``application/problem+json``; see ``ratekeeper.service.http.bodies`` for the shapes):

- ``POST /v1/check``: one check; 200 when allowed, 429 when refused, both with the rate-limit
  headers of ``ratekeeper.wire.headers``. ``POST /v1/check/batch``: an array of checks, all
  parsed before any is counted, answered 200 with each result in order. ``POST /v1/peek``:
  a check that counts nothing (cost 0), answered 200. ``POST /v1/reset``: forget a key's
  count (204), an admin endpoint.
- ``GET|PUT|DELETE /v1/overrides/{key}`` and ``GET /v1/overrides`` (``?domain=``,
  ``?prefix=``): the configuration store's per-key overrides. These and ``/v1/reset`` are
  behind ``Authorization: Bearer <admin_token>`` (401 without it); with no token they answer
  404.
- ``GET /healthz`` (the process answers), ``GET /readyz`` (the request store answers; else
  503), Envoy's ``POST /json`` and ``GET /healthcheck`` as Envoy's rate-limit service answers
  them, and ``GET /openapi.json``.

With an ``InFlightBound``, the decision routes (the checks, ``/json`` and ``/v1/nginx``) take
part in the bound on decisions in flight: past it, a request is answered at once with a 503
``overloaded`` problem and ``Retry-After`` (see ``ratekeeper.service.inflight``).

Bad input is a 4xx problem naming what and where (400 malformed JSON, 413 a body over
``MAX_BODY``, 415 a body said to be other than JSON, 422 a value that is not valid), never a
500. A decision made by the store's
failure policy is still a 200 or 429, with ``X-RateLimit-Degraded: true``; a store that fails
without a policy, or a configuration store that fails, is a 503 problem.

This module assembles the app; the handlers are ``checks`` (the decisions, Envoy's and nginx's
included), ``admin`` and ``health``, over ``reading`` (bodies) and ``responses`` (answers).
What runs beside it (gRPC, the dashboard, the engine from startup to shutdown) is the
runtime's to wire: it gives ``http_app`` the routes to add and the lifespan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.core.moved import keywords_renamed
from ratekeeper.service.asgi import App, Receive, Scope, Send
from ratekeeper.service.http.admin import Admin
from ratekeeper.service.http.checks import Checks
from ratekeeper.service.http.health import HealthRoutes
from ratekeeper.service.http.reading import MAX_BODY
from ratekeeper.service.http.responses import (
    FAILED,
    Handler,
    answer_to,
    answering,
    problem_raw,
    problem_response,
    route_path,
    send_raw,
    timed,
)
from ratekeeper.service.http.shed import PREPAID
from ratekeeper.service.inflight import RETRY_AFTER, InFlightBound
from ratekeeper.wire.problems import Problem

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.service.healthcheck import HealthCheck
    from ratekeeper.service.observe.access import AccessLog
    from ratekeeper.service.observe.metrics import Metrics
    from ratekeeper.service.observe.tracing import Tracing

__all__ = ["MAX_BODY", "http_app"]

log = logging.getLogger("ratekeeper.service")
#: A defect met by every request is logged (with its traceback) once a minute per route.
_defects = LogThrottle(log)
#: The hot path's defect: its template, method and path (the throttle's key).
DEFECT = ("%s %s failed", "POST", "/v1/check")

#: What a Starlette app runs from its startup to its shutdown.
Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


@keywords_renamed("http_app", {"admission": "in_flight_bound"})
def http_app(
    engine: AsyncEngine,
    *,
    admin_token: str | None = None,
    ietf_headers: bool = False,
    metrics: Metrics | None = None,
    in_flight_bound: InFlightBound | None = None,
    envoy_headers: tuple[str, str, str] | None = None,
    dynamic_metadata: bool = False,
    health_check: HealthCheck | None = None,
    access_log: AccessLog | None = None,
    routes: Sequence[BaseRoute] = (),
    lifespan: Lifespan | None = None,
    tracing: Tracing | None = None,
) -> Starlette:
    """The HTTP app over ``engine`` (see the module). ``admin_token`` turns the override
    endpoints on; ``ietf_headers`` adds ``RateLimit`` and ``RateLimit-Policy``. ``metrics``
    (tracking ``engine``) times the decisions of each surface and is served at ``/metrics``.
    ``in_flight_bound`` (``admission`` before) bounds the decisions in flight.
    ``envoy_headers`` (the names of the limit,
    remaining and reset headers) puts the rate-limit headers in Envoy's ``POST /json``
    answers (``response_headers_to_add``); ``dynamic_metadata`` puts the dynamic metadata
    there (``dynamicMetadata``). ``health_check`` answers ``/healthcheck``. ``access_log``
    (over ``engine``) logs every decision request, and ``tracing`` (over ``engine``) traces
    each. ``routes`` are served after the app's own (the dashboard's), and ``lifespan`` runs
    from startup to shutdown."""
    checks = Checks(
        engine,
        ietf_headers=ietf_headers,
        envoy_headers=envoy_headers,
        dynamic_metadata=dynamic_metadata,
    )
    admin = Admin(engine, admin_token=admin_token)
    health = HealthRoutes(engine, health_check)

    def route(
        path: str, handler: Handler, methods: list[str], surface: str = "", decides: bool = True
    ) -> Route:
        # A route of a surface is bounded in flight; one that decides is timed as a decision.
        if surface and decides and metrics is not None:
            handler = timed(handler, metrics.latency_observer(surface))
        if surface and in_flight_bound is not None:
            handler = bounded(handler, in_flight_bound, surface)
        return Route(path, answering(handler), methods=methods)

    served: list[BaseRoute] = [
        route("/v1/check", checks.check, ["POST"], "http"),
        route("/v1/check/batch", checks.batch, ["POST"], "http"),
        route("/v1/peek", checks.peek, ["POST"], "http", decides=False),
        route("/v1/reset", admin.reset, ["POST"]),
        route("/v1/overrides", admin.overrides, ["GET"]),
        route("/v1/overrides/{key:path}", admin.override, ["GET", "PUT", "DELETE"]),
        route("/healthz", health.healthz, ["GET"]),
        route("/readyz", health.readyz, ["GET"]),
        route("/json", checks.envoy_json, ["POST"], "http"),
        route("/healthcheck", health.healthcheck, ["GET"]),
        route("/v1/nginx", checks.nginx, ["GET"], "nginx"),
        route("/openapi.json", health.openapi, ["GET"]),
        *routes,
    ]
    if metrics is not None:
        served.append(Route("/metrics", metrics.app))  # an ASGI app at exactly /metrics
    observed = tuple(one for one in (access_log, tracing) if one is not None)
    app = _Observed if observed else _CheckFirst
    return app(
        checks,
        None if metrics is None else metrics.latency_observer("http"),
        in_flight_bound,
        observed,
        routes=served,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _unexpected},
    )


def overloaded(bound: InFlightBound) -> Problem:
    """The answer to a request the in-flight ``bound`` turned away."""
    return Problem.of("overloaded", f"{bound.why()}; try again in {RETRY_AFTER} s")


def bounded(handler: Handler, bound: InFlightBound, surface: str) -> Handler:
    """``handler``, when the in-flight ``bound`` lets its request in; else a 503
    ``overloaded`` at once."""
    retry = {"Retry-After": str(RETRY_AFTER)}

    async def within(request: Request) -> Response:
        if not bound.enter(surface, prepaid=PREPAID in request.scope):
            return problem_response(overloaded(bound), retry)
        try:
            return await handler(request)
        finally:
            bound.leave()

    return within


async def _http_error(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (no such route, a method it does not take) as problems."""
    assert isinstance(error, HTTPException)
    kinds = {404: "not-found", 405: "method"}
    problem = Problem(error.status_code, kinds.get(error.status_code, "invalid"), str(error.detail))
    return problem_response(problem, dict(error.headers or {}))


async def _unexpected(request: Request, error: Exception) -> Response:
    method, path = request.method, route_path(request)
    _defects.log(logging.ERROR, "%s %s failed", method, path, key=(method, path), exc_info=True)
    return problem_response(FAILED)


class _CheckFirst(Starlette):
    """Starlette, but ``POST /v1/check``, the hot path, is answered on the bare ASGI interface
    by ``Checks.check_raw``, past Starlette's middleware, router, request and response,
    unless middleware was added: the same answers, errors included, in about half the time."""

    def __init__(
        self,
        checks: Checks,
        observe: Callable[[float], None] | None,
        in_flight_bound: InFlightBound | None,
        observed: Sequence[AccessLog | Tracing] = (),
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._checks = checks
        self._observe = observe
        self._in_flight_bound = in_flight_bound

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != "/v1/check"
            or scope["method"] != "POST"
            or scope.get("root_path")
            or self.user_middleware
        ):
            await super().__call__(scope, receive, send)
            return
        bound = self._in_flight_bound
        if bound is not None and not bound.enter("http", prepaid=PREPAID in scope):
            headers, payload = problem_raw(overloaded(bound))
            headers.append((b"retry-after", str(RETRY_AFTER).encode()))
            await send_raw(send, 503, headers, payload)
            return
        observe = self._observe
        started = time.perf_counter()
        try:
            try:
                status, headers, payload = await self._checks.check_raw(scope, receive)
            except Exception as error:
                problem = answer_to(error, "POST", "/v1/check")
                if problem is None:
                    _defects.log(logging.ERROR, *DEFECT, key=DEFECT[1:], exc_info=True)
                    await send_raw(send, FAILED.status, *problem_raw(FAILED))
                    raise
                status, (headers, payload) = problem.status, problem_raw(problem)
            finally:
                if observe is not None:
                    observe(time.perf_counter() - started)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
        finally:
            if bound is not None:
                bound.leave()


class _Observed(_CheckFirst):
    """``_CheckFirst`` whose decision requests its access log logs and its traces trace (a
    class of its own, so that without them the hot path does not even ask)."""

    def __init__(
        self,
        checks: Checks,
        observe: Callable[[float], None] | None,
        in_flight_bound: InFlightBound | None,
        observed: Sequence[AccessLog | Tracing] = (),
        **options: Any,
    ) -> None:
        super().__init__(checks, observe, in_flight_bound, observed, **options)
        call: App = super().__call__  # inside the access log, inside the traces
        for wrapper in observed:
            call = partial(wrapper.asgi, call)
        self._observed = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._observed(scope, receive, send)
