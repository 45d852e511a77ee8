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

from ratekeeper.core.errors import MissingExtraError

try:
    import flask
except ImportError:  # pragma: no cover - the extra is installed where this runs
    raise MissingExtraError("flask", "flask") from None

from ratekeeper.decider import Decider
from ratekeeper.web.gate import Gate
from ratekeeper.web.limits import RateLimit
from ratekeeper.web.outcomes import Result, status_of
from ratekeeper.web.replies import Reply
from ratekeeper.web.request import Request, joined
from ratekeeper.web.routes import RouteLimiter

__all__ = ["RateLimiter", "request_of"]

P = ParamSpec("P")


def request_of(request: flask.Request) -> Request:
    """The ``Request`` of a Flask request."""
    environ = request.environ
    rule = request.url_rule
    return Request(
        request.method,
        request.path,
        lambda: joined(request.headers.items()),
        environ.get("REMOTE_ADDR") or None,
        query_string=request.query_string.decode("latin-1"),
        user=environ.get("REMOTE_USER") or None,
        route=rule.rule if rule is not None else None,
        native=request,
    )


def response_of(reply: Reply) -> flask.Response:
    """``reply`` as a Flask response."""
    return flask.Response(reply.body, status=reply.status, headers=reply.headers)


class RateLimiter(RouteLimiter[Decider, Gate]):
    """Makes view decorators deciding with a ``Decider`` (``Limiter``, ``Engine``,
    ``RemoteLimiter``); its options are ``RouteLimiter``'s."""

    _gate = Gate

    def limit(
        self, *limits: RateLimit, scope: str | None = None
    ) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
        """A decorator deciding ``limits`` for each call of a view; in ``scope`` when given
        (views naming one scope share their counters), else the view's route's own."""
        gate = self.gate(limits, scope)
        replies, bounded, too_large = self.replies, self.bounded, self.too_large

        def decorate(view: Callable[P, Any]) -> Callable[P, Any]:
            if inspect.iscoroutinefunction(view):
                raise TypeError("RateLimiter.limit decorates sync Flask views")

            @functools.wraps(view)
            def limited(*args: P.args, **kwargs: P.kwargs) -> Any:
                # The request itself, not its context-local proxy: read once per attribute.
                request = flask.request._get_current_object()  # type: ignore[attr-defined]
                seen = request_of(request)
                if gate.needs_body(seen):
                    body = bounded(request.content_length, lambda: request.get_data(cache=True))
                    if body is None:
                        return response_of(too_large())
                    seen.body = body
                outcome = gate.decide(seen)
                if not outcome.allowed:
                    return response_of(replies.refusal(seen, outcome))
                try:
                    response = flask.make_response(view(*args, **kwargs))
                except BaseException as error:
                    if outcome.pending:
                        gate.settle(outcome, Result(status_of(error), error))
                    raise
                if outcome.pending:  # a limit charged by outcome
                    gate.settle(outcome, Result(response.status_code))
                extra = replies.admitted(outcome)
                if extra:
                    headers = response.headers
                    present = {name.lower() for name in headers.keys()}  # noqa: SIM118 (items are pairs)
                    for name, value in extra:
                        if name.lower() not in present:
                            headers.add(name, value)
                return response

            return limited

        return decorate
