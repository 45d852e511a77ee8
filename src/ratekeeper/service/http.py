"""The decision service's HTTP surface: a Starlette app over one ``AsyncEngine``.

``create_app(engine, admin_token=...)`` routes (every body JSON, every problem
``application/problem+json``; see ``ratekeeper.service.bodies`` for the shapes):

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

Bad input is a 4xx problem naming what and where (400 malformed JSON, 413 a body over
``MAX_BODY``, 415 a body said to be other than JSON, 422 a value that is not valid), never a
500. A decision made by the store's
failure policy is still a 200 or 429, with ``X-RateLimit-Degraded: true``; a store that fails
without a policy, or a configuration store that fails, is a 503 problem.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import (
    ConfigError,
    ConfigStoreError,
    InvalidInputError,
    InvalidLimitError,
    StoreConfigError,
    StoreError,
)
from ratekeeper.core.inputs import decimal
from ratekeeper.core.overrides import Override
from ratekeeper.engine.verdict import Status
from ratekeeper.service import bodies, envoy_json, nginx
from ratekeeper.service.openapi import document
from ratekeeper.service.translate import Answer, Call, decide_async
from ratekeeper.wire.headers import rate_limit_headers
from ratekeeper.wire.problems import MEDIA_TYPE, Problem
from ratekeeper.wire.statuses import OVER_LIMIT, WireStatus

if TYPE_CHECKING:
    from ratekeeper.config import ConfigStore
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.service.metrics import Metrics

log = logging.getLogger("ratekeeper.service")

MAX_BODY = bodies.MAX_BODY
#: Set on an answer some decision of which the store's failure policy made.
DEGRADED = "X-RateLimit-Degraded"
#: Seconds the gRPC server gives its calls in flight when the service stops.
GRPC_GRACE = 10.0
#: The most overrides one listing returns.
MAX_LISTING = 1000
#: Seconds ``/readyz`` waits for each store.
READY_TIMEOUT = 2.0

Handler = Callable[[Request], Awaitable[Response]]
RawHeaders = list[tuple[bytes, bytes]]


async def _config_error(config: ConfigStore) -> str | None:
    """None when the configuration store answers within ``READY_TIMEOUT``, else why not."""
    try:
        await asyncio.wait_for(asyncio.to_thread(config.ping), READY_TIMEOUT)
    except TimeoutError:
        return f"no answer within {READY_TIMEOUT:g} s"
    except Exception as error:  # reported, whatever it is
        return str(error) or type(error).__name__
    return None


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> Response:
    """The HTTP answer of ``problem``."""
    return Response(problem.encode(), problem.status, headers, media_type=MEDIA_TYPE)


def problem_of(error: Exception, method: str, path: str) -> Problem | None:
    """The problem that answers ``error`` (raised answering ``method path``), or None for an
    error that is no caller's and no store's: a defect, answered 500 by the app."""
    if isinstance(error, Problem):
        return error
    if isinstance(error, InvalidInputError | InvalidLimitError | ConfigError):
        return Problem(422, "invalid", str(error))
    if isinstance(error, StoreError | StoreConfigError | ConfigStoreError):
        log.warning("%s %s: %s", method, path, error)
        return Problem(503, "unavailable", str(error))
    return None


def _answering(handler: Handler) -> Handler:
    """``handler`` with ratekeeper's errors answered as problems; never a traceback."""

    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as error:
            problem = problem_of(error, request.method, request.url.path)
            if problem is None:
                raise
            return problem_response(problem)

    return answer


def _timed(handler: Handler, observe: Callable[[float], None]) -> Handler:
    """``handler``, its time (a decision's, as its surface sees it) given to ``observe``."""

    async def timed(request: Request) -> Response:
        started = time.perf_counter()
        try:
            return await handler(request)
        finally:
            observe(time.perf_counter() - started)

    return timed


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request's body, at most ``limit`` bytes (a 413 problem beyond)."""
    _check_length(request.headers.get("content-length"), limit)
    return await _receive_body(request.receive, limit)


async def read_json(request: Request) -> Any:
    """The request's body as JSON: a 415 problem when it is said to be something else (no
    ``Content-Type`` is taken as JSON), else as ``read_body`` and ``bodies.loads``."""
    _check_media_type(request.headers.get("content-type"))
    return bodies.loads(await read_body(request))


def _check_media_type(given: str | None) -> None:
    if given is not None and not bodies.is_json(given):
        raise Problem(
            415,
            "media-type",
            f"the body must be application/json, not {given[:100]!r}",
            "/headers/content-type",
        )


def _check_length(given: str | bytes | None, limit: int) -> None:
    """A 413 problem when a ``Content-Length`` says the body is over ``limit`` bytes."""
    text = given.decode("latin-1") if isinstance(given, bytes) else given
    if text is not None and decimal(text) and int(text) > limit:
        raise _too_large(limit)


async def _receive_body(receive: Receive, limit: int) -> bytes:
    """An ASGI request's body from its ``receive``: at most ``limit`` bytes (a 413 problem
    beyond); a 400 problem when the client goes away before it ends."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Problem(400, "malformed", "the client went away before its body ended")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if not message.get("more_body", False):
            return chunk if not chunks else b"".join((*chunks, chunk))
        chunks.append(chunk)


def _too_large(limit: int) -> Problem:
    return Problem(413, "too-large", f"the body is over {limit} bytes")


#: ``json.dumps(body, ensure_ascii=False, separators=(",", ":"))``, its encoder built once (an
#: answer is a tree of fresh dicts and lists: no cycle to look for).
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        _encode(body).encode(),
        status,
        headers,
        media_type="application/json",
    )


class Service:
    """The routes' handlers over one engine; see the module."""

    def __init__(
        self, engine: AsyncEngine, *, admin_token: str | None = None, ietf_headers: bool = False
    ) -> None:
        self.engine = engine
        self.admin_token = admin_token
        self.ietf_headers = ietf_headers

    async def _decide(self, check: bodies.Check) -> Decision | Answer:
        engine = self.engine
        if isinstance(check, Call):
            return await decide_async(engine, check)
        if check.limit is None:
            return await engine.decide(check.key, check.cost)
        return await engine.hit(check.key, check.limit, check.cost)

    async def _look(self, check: bodies.Check) -> Decision | Answer:
        if isinstance(check, Call):
            return await decide_async(self.engine, check)
        return await self.engine.peek(check.key, check.limit)

    def _headers(self, outcome: Decision | Answer, check: bodies.Check) -> dict[str, str]:
        statuses: tuple[WireStatus | Status | Decision, ...]
        if isinstance(outcome, Answer):
            statuses = outcome.statuses
        elif isinstance(check, bodies.KeyCheck) and check.limit is not None:  # its window known
            statuses = (Status(outcome.allowed, outcome, check.limit, None, False, False),)
        else:
            statuses = (outcome,)
        headers = rate_limit_headers(statuses, ietf=self.ietf_headers)
        if outcome.degraded:
            headers[DEGRADED] = "true"
        return headers

    async def check(self, request: Request) -> Response:
        """``POST /v1/check``."""
        check = bodies.check(await read_json(request))
        outcome = await self._decide(check)
        body = bodies.result(outcome)
        return _json(body, 200 if body["allowed"] else 429, self._headers(outcome, check))

    async def check_raw(self, scope: Scope, receive: Receive) -> tuple[int, RawHeaders, bytes]:
        """``POST /v1/check`` on the bare ASGI interface: its status, headers and body, as
        ``check`` answers them, less Starlette's request and response objects."""
        content_type = length = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"content-length":
                length = value
        _check_media_type(content_type)
        _check_length(length, MAX_BODY)
        check = bodies.check(bodies.loads(await _receive_body(receive, MAX_BODY)))
        outcome = await self._decide(check)
        body = bodies.result(outcome)
        payload = _encode(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        headers.extend(
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in self._headers(outcome, check).items()
        )
        return 200 if body["allowed"] else 429, headers, payload

    async def batch(self, request: Request) -> Response:
        """``POST /v1/check/batch``."""
        checks = bodies.batch(await read_json(request))
        outcomes = [await self._decide(one) for one in checks]
        results = [bodies.result(one) for one in outcomes]
        headers = {DEGRADED: "true"} if any(one.degraded for one in outcomes) else {}
        allowed = all(one["allowed"] for one in results)
        return _json({"allowed": allowed, "results": results}, 200, headers)

    async def peek(self, request: Request) -> Response:
        """``POST /v1/peek``."""
        check = bodies.check(await read_json(request), looks=True)
        outcome = await self._look(check)
        return _json(bodies.result(outcome), 200, self._headers(outcome, check))

    async def reset(self, request: Request) -> Response:
        """``POST /v1/reset``: an admin endpoint, as it gives a key its whole limit back."""
        try:
            self._authorize(request)
        except Problem as problem:
            return _unauthorized(problem)
        given = bodies.key_of(await read_json(request))
        await self.engine.reset(given.key, given.limit)
        return Response(status_code=204)

    # Envoy's HTTP side.

    async def envoy_json(self, request: Request) -> Response:
        """``POST /json``: 200, 429 or 400 ``Bad Request``, as Envoy's service answers."""
        try:
            call = envoy_json.request(bodies.loads(await read_body(request)))
            answer = await decide_async(self.engine, call)
        except (Problem, InvalidInputError):  # a store's failure is answered as the API's
            return PlainTextResponse("Bad Request\n", 400)
        status = 429 if answer.code == OVER_LIMIT else 200
        headers = {DEGRADED: "true"} if answer.degraded else None
        return _json(envoy_json.response(answer), status, headers)

    async def nginx(self, request: Request) -> Response:
        """``GET /v1/nginx``: nginx's ``auth_request``. Only 200 (let through) or 403 (refused),
        with the rate-limit headers; a request nginx could not describe is refused too, so that
        nginx never turns the answer into a 500 (see ``service.nginx``). A store that fails
        is a 503, as elsewhere: nginx's failure mode (``@fail_open`` in the shipped file)
        decides."""
        try:
            answer = await decide_async(self.engine, nginx.call_of(request.headers))
        except InvalidInputError as error:  # a store's failure is a 503: nginx's to answer
            log.warning("nginx auth_request refused: %s", error)
            return Response(status_code=nginx.REFUSED, headers={"X-RateLimit-Problem": "invalid"})
        headers = rate_limit_headers(answer.statuses, ietf=self.ietf_headers)
        if answer.degraded:
            headers[DEGRADED] = "true"
        return Response(status_code=nginx.status_of(answer), headers=headers)

    async def healthcheck(self, request: Request) -> Response:
        """``GET /healthcheck``: ``OK``."""
        return PlainTextResponse("OK")

    # Health.

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: the process answers."""
        return _json({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """``GET /readyz``: 200 when the request store answers, else 503. The configuration
        store is reported beside it but does not decide: without it the engine goes on
        deciding by the limits it knew and by the rules (``status`` is then ``degraded``),
        and every instance shares it, so failing the probe would take them all away."""
        try:
            health = await asyncio.wait_for(self.engine.store.ping(), READY_TIMEOUT)
        except Exception as error:  # a store that cannot even say how it is: not ready
            detail = str(error) or type(error).__name__
            return problem_response(
                Problem(503, "unavailable", f"the store did not answer: {detail}")
            )
        store = {"ok": health.ok, "breaker": health.breaker, "error": health.error}
        if not health.ok:
            return _json({"status": "unavailable", "store": store}, 503)
        config = self.engine.config
        if config is None:
            return _json({"status": "ready", "store": store})
        problem = await _config_error(config)
        status = "ready" if problem is None else "degraded"
        return _json(
            {"status": status, "store": store, "config": {"ok": problem is None, "error": problem}}
        )

    async def openapi(self, request: Request) -> Response:
        """``GET /openapi.json``."""
        return _json(document())

    # Admin: the configuration store's overrides.

    def _admin(self, request: Request) -> ConfigStore:
        self._authorize(request)
        config = self.engine.config
        if config is None:
            raise Problem(503, "unavailable", "the service has no configuration store")
        return config

    def _authorize(self, request: Request) -> None:
        """Nothing when ``request`` carries the admin token; else a 404 problem (no token is
        set: the admin endpoints are off) or a 401 (compared in constant time)."""
        if self.admin_token is None:
            raise Problem(404, "not-found", "the admin endpoints are off: no admin token is set")
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.admin_token.encode()
        ):
            raise Problem(
                401, "unauthorized", "a bearer token is required", "/headers/authorization"
            )

    async def override(self, request: Request) -> Response:
        """``GET|PUT|DELETE /v1/overrides/{key}``."""
        try:
            config = self._admin(request)
        except Problem as problem:
            return _unauthorized(problem)
        key = request.path_params["key"]
        domain = request.query_params.get("domain", "")
        if request.method == "GET":
            found = await asyncio.to_thread(config.get, key, domain)
            if found is None:
                raise Problem(404, "not-found", f"no override for {key!r} in domain {domain!r}")
            return _json({"domain": domain, "key": key, "override": found.to_dict()})
        if request.method == "DELETE":
            if not await asyncio.to_thread(config.delete, key, domain):
                raise Problem(404, "not-found", f"no override for {key!r} in domain {domain!r}")
            return Response(status_code=204)
        data = await read_json(request)
        try:
            override = Override.from_dict(data) if isinstance(data, dict) else None
        except ConfigError as error:
            raise bodies.invalid(str(error)) from None
        if override is None:
            raise bodies.invalid("an override is a JSON object of capacity and time_window_sec")
        await asyncio.to_thread(config.set, key, override, domain)
        return _json({"domain": domain, "key": key, "override": override.to_dict()})

    async def overrides(self, request: Request) -> Response:
        """``GET /v1/overrides?domain=&prefix=``: at most ``MAX_LISTING``, by domain then key."""
        try:
            config = self._admin(request)
        except Problem as problem:
            return _unauthorized(problem)
        domain = request.query_params.get("domain")
        prefix = request.query_params.get("prefix", "")

        def listing() -> tuple[list[dict[str, Any]], bool]:
            found: list[dict[str, Any]] = []
            for one_domain, key, override in config.items(domain, prefix):
                if len(found) == MAX_LISTING:
                    return found, True
                found.append({"domain": one_domain, "key": key, "override": override.to_dict()})
            return found, False

        found, truncated = await asyncio.to_thread(listing)
        return _json({"overrides": found, "truncated": truncated})


def _unauthorized(problem: Problem) -> Response:
    headers = {"WWW-Authenticate": 'Bearer realm="ratekeeper"'} if problem.status == 401 else None
    return problem_response(problem, headers)


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    kinds = {404: "not-found", 405: "method"}
    problem = Problem(error.status_code, kinds.get(error.status_code, "invalid"), str(error.detail))
    return problem_response(problem, dict(error.headers or {}))


async def _unexpected(request: Request, error: Exception) -> Response:
    log.exception("%s %s failed", request.method, request.url.path)
    problem = Problem(500, "unavailable", "the service failed to answer; see its log")
    return problem_response(problem)


def create_app(
    engine: AsyncEngine,
    *,
    admin_token: str | None = None,
    ietf_headers: bool = False,
    close_engine: bool = False,
    metrics: Metrics | None = None,
    grpc_address: str | None = None,
) -> Starlette:
    """The HTTP app over ``engine`` (see the module). ``admin_token`` turns the override
    endpoints on; ``ietf_headers`` adds ``RateLimit`` and ``RateLimit-Policy``;
    ``close_engine`` closes the engine when the app shuts down. ``metrics`` (tracking
    ``engine``) is served at ``/metrics``. With ``grpc_address``, Envoy's gRPC rate-limit
    service runs beside it on the same event loop, from startup to shutdown."""
    service = Service(engine, admin_token=admin_token, ietf_headers=ietf_headers)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(engine.start)
        server = None
        if grpc_address is not None:
            from ratekeeper.service.grpc import serve_grpc

            server, _ = await serve_grpc(engine, grpc_address, metrics)
        try:
            yield
        finally:
            if server is not None:
                await server.stop(GRPC_GRACE)
            if close_engine:
                await engine.close()

    def answering(handler: Handler, surface: str = "") -> Handler:
        if surface and metrics is not None:
            handler = _timed(handler, partial(metrics.observe_latency, surface))
        return _answering(handler)

    def route(path: str, handler: Handler, methods: list[str], surface: str = "") -> Route:
        return Route(path, answering(handler, surface), methods=methods)

    routes: list[BaseRoute] = [
        route("/v1/check", service.check, ["POST"], "http"),
        route("/v1/check/batch", service.batch, ["POST"], "http"),
        route("/v1/peek", service.peek, ["POST"], "http"),
        route("/v1/reset", service.reset, ["POST"]),
        route("/v1/overrides", service.overrides, ["GET"]),
        route("/v1/overrides/{key:path}", service.override, ["GET", "PUT", "DELETE"]),
        route("/healthz", service.healthz, ["GET"]),
        route("/readyz", service.readyz, ["GET"]),
        route("/json", service.envoy_json, ["POST"], "http"),
        route("/healthcheck", service.healthcheck, ["GET"]),
        route("/v1/nginx", service.nginx, ["GET"], "nginx"),
        route("/openapi.json", service.openapi, ["GET"]),
    ]
    if metrics is not None:
        routes.append(Route("/metrics", metrics.app))  # an ASGI app at exactly /metrics
    return _CheckFirst(
        service,
        None if metrics is None else partial(metrics.observe_latency, "http"),
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _unexpected},
    )


class _CheckFirst(Starlette):
    """Starlette, but ``POST /v1/check``, the hot path, is answered on the bare ASGI interface
    by ``Service.check_raw``, past Starlette's middleware, router, request and response,
    unless middleware was added: the same answers, errors included, in about half the time."""

    def __init__(
        self, service: Service, observe: Callable[[float], None] | None, **options: Any
    ) -> None:
        super().__init__(**options)
        self._service = service
        self._observe = observe

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
        started = time.perf_counter()
        try:
            status, headers, payload = await self._service.check_raw(scope, receive)
        except Exception as error:
            problem = problem_of(error, "POST", "/v1/check")
            if problem is None:
                log.exception("POST /v1/check failed")
                problem = Problem(500, "unavailable", "the service failed to answer; see its log")
                await _send(send, problem.status, *_problem_raw(problem))
                raise
            status, (headers, payload) = problem.status, _problem_raw(problem)
        finally:
            if self._observe is not None:
                self._observe(time.perf_counter() - started)
        await _send(send, status, headers, payload)


def _problem_raw(problem: Problem) -> tuple[RawHeaders, bytes]:
    payload = problem.encode()
    length = str(len(payload)).encode()
    return [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", length)], payload


async def _send(send: Send, status: int, headers: RawHeaders, payload: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
