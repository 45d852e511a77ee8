"""Per-route limits for Flask: ``RateLimiter.limit(...)`` decorates a view.

Example::

    limiter = RateLimiter(Limiter())

    @app.post("/login")
    @limiter.limit(RateLimit("20/15m"), RateLimit("5/15m", key=keys.field("username")))
    def login(): ...

A view's limits count apart from every other view's unless they share a ``scope``. A refused
request is answered by ``ratekeeper.web.replies`` (429, problem+json, ``Retry-After``); an
admitted one's response gets the rate-limit headers. The client is the WSGI peer
(``REMOTE_ADDR``), read before any ``ProxyFix``: name the proxies in ``keys.client_ip``. For
limits on every route, wrap ``app.wsgi_app`` in ``ratekeeper.web.wsgi.RateLimitMiddleware``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec

from ratekeeper.errors import MissingExtraError

try:
    import flask
except ImportError:  # pragma: no cover - the extra is installed where this runs
    raise MissingExtraError("flask", "flask") from None

from ratekeeper.web.gate import Gate
from ratekeeper.web.limits import RateLimit
from ratekeeper.web.problems import Problem
from ratekeeper.web.replies import Replies, Reply, problem_reply
from ratekeeper.web.request import MAX_BODY, Request, joined

__all__ = ["RateLimiter", "request_of"]

P = ParamSpec("P")


def request_of(request: flask.Request) -> Request:
    """The ``Request`` of a Flask request."""
    environ = request.environ
    rule = request.url_rule
    return Request(
        request.method,
        request.path,
        joined(request.headers.items()),
        environ.get("REMOTE_ADDR") or None,
        query_string=request.query_string.decode("latin-1"),
        user=environ.get("REMOTE_USER") or None,
        route=rule.rule if rule is not None else None,
        native=request,
    )


def response_of(reply: Reply) -> flask.Response:
    """``reply`` as a Flask response."""
    return flask.Response(reply.body, status=reply.status, headers=reply.headers)


class RateLimiter:
    """Makes view decorators deciding with a ``Decider`` (``Limiter``, ``Engine``,
    ``RemoteLimiter``); the options are ``ratekeeper.web.fastapi.RateLimiter``'s. A bad one
    raises here."""

    def __init__(
        self,
        decider: Any,
        *,
        max_body: int = MAX_BODY,
        headers: bool = True,
        ietf: bool = False,
        degraded_header: str | None = "X-RateLimit-Degraded",
        on_refused: Callable[[Request, Any], Reply] | None = None,
        **options: Any,
    ) -> None:
        Gate(decider, **options)  # checks the options now
        self.decider = decider
        self.options = options
        self.replies = Replies(
            headers=headers, ietf=ietf, degraded_header=degraded_header, on_refused=on_refused
        )
        self.max_body = max_body

    def limit(
        self, *limits: RateLimit, scope: str | None = None
    ) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
        """A decorator deciding ``limits`` for each call of a view; in ``scope`` when given
        (views naming one scope share their counters), else the view's route's own."""
        if not limits:
            raise ValueError("limit() needs at least one RateLimit")
        gate = Gate(self.decider, limits, **{**self.options, "scope": scope})
        replies, max_body = self.replies, self.max_body

        def decorate(view: Callable[P, Any]) -> Callable[P, Any]:
            if inspect.iscoroutinefunction(view):
                raise TypeError("RateLimiter.limit decorates sync Flask views")

            @functools.wraps(view)
            def limited(*args: P.args, **kwargs: P.kwargs) -> Any:
                request = flask.request
                seen = request_of(request)
                if gate.needs_body(seen):
                    if (request.content_length or 0) > max_body:
                        detail = f"a body read for a rate limit is at most {max_body} bytes"
                        return response_of(problem_reply(Problem(413, "too-large", detail)))
                    seen.body = request.get_data(cache=True)
                outcome = gate.decide(seen)
                if not outcome.allowed:
                    return response_of(replies.refusal(seen, outcome))
                response = flask.make_response(view(*args, **kwargs))
                for name, value in replies.admitted(outcome):
                    response.headers.setdefault(name, value)
                return response

            return limited

        return decorate
