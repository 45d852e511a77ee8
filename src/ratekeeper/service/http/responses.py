"""The HTTP surface's answers: JSON bodies, problems, and the wrapping every route's handler gets.

A handler answers with ``json_response`` or raises; ``answering`` turns what it raises into a
problem (``ratekeeper.wire.problems.problem_of``: 422 for a caller's error, 503 for a store's,
logged) and lets only a defect through, which the app answers ``FAILED``. The raw forms
(``problem_raw``, ``send``) serve the hot path that answers on the bare ASGI interface.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.service.asgi import Send
from ratekeeper.wire.problems import MEDIA_TYPE, UNAVAILABLE_ERRORS, Problem, problem_of

log = logging.getLogger("ratekeeper.service")
#: A store failing every request is logged once a minute per route, with a count.
_failures = LogThrottle(log)

Handler = Callable[[Request], Awaitable[Response]]
RawHeaders = list[tuple[bytes, bytes]]

#: The answer to a defect: an error that is no caller's and no store's.
FAILED = Problem(500, "unavailable", "the service failed to answer; see its log")

#: ``json.dumps(body, ensure_ascii=False, separators=(",", ":"))``, its encoder built once (an
#: answer is a tree of fresh dicts and lists: no cycle to look for).
encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``body`` as a compact ``application/json`` answer."""
    return Response(
        encode(body).encode(),
        status,
        headers,
        media_type="application/json",
    )


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> Response:
    """The HTTP answer of ``problem``."""
    return Response(problem.encode(), problem.status, headers, media_type=MEDIA_TYPE)


def route_path(request: Request) -> str:
    """The path of the route ``request`` took, as written (``/v1/overrides/{key:path}``): what
    a log names, never the key a path holds; the request's path when no route took it."""
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else request.url.path


def answer_to(error: Exception, method: str, path: str) -> Problem | None:
    """The problem that answers ``error`` (raised answering ``method path``; a store's failure
    is logged, once a minute per route with a count of the others), or None for a defect (see
    ``problem_of``)."""
    problem = problem_of(error)
    if isinstance(error, UNAVAILABLE_ERRORS):
        _failures.log(logging.WARNING, "%s %s: %s", method, path, error, key=(method, path))
    return problem


def answering(handler: Handler) -> Handler:
    """``handler`` with ratekeeper's errors answered as problems; never a traceback."""

    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as error:
            problem = answer_to(error, request.method, route_path(request))
            if problem is None:
                raise
            return problem_response(problem)

    return answer


def timed(handler: Handler, observe: Callable[[float], None]) -> Handler:
    """``handler``, its time (a decision's, as its surface sees it) given to ``observe``."""

    async def timed(request: Request) -> Response:
        started = time.perf_counter()
        try:
            return await handler(request)
        finally:
            observe(time.perf_counter() - started)

    return timed


def problem_raw(problem: Problem) -> tuple[RawHeaders, bytes]:
    """The ASGI headers and body of ``problem``'s answer."""
    payload = problem.encode()
    length = str(len(payload)).encode()
    return [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", length)], payload


async def send_raw(send: Send, status: int, headers: RawHeaders, payload: bytes) -> None:
    """An answer, whole, on the bare ASGI interface."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
