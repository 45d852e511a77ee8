"""Per-route limits for Django: ``RateLimiter.limit(...)`` decorates a view.

Example::

    limiter = RateLimiter(Limiter())

    @limiter.limit(RateLimit("3/month", key=keys.user(), scope="premium-stories"))
    def story(request, slug): ...

A view's limits count apart from every other view's unless they share a ``scope``. A refused
request is answered by ``ratekeeper.web.replies`` (429, problem+json, ``Retry-After``); an
admitted one's response gets the rate-limit headers. The user is ``request.user``'s primary key
when authenticated; the client is ``REMOTE_ADDR`` (name the proxies in ``keys.client_ip``).
For limits on every route, wrap ``get_wsgi_application()`` in
``ratekeeper.web.wsgi.RateLimitMiddleware``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec

from ratekeeper.core.errors import MissingExtraError

try:
    from django.http import HttpResponse
except ImportError:  # pragma: no cover - the extra is installed where this runs
    raise MissingExtraError("django", "django") from None

from ratekeeper.decider import Decider
from ratekeeper.web.gate import Gate
from ratekeeper.web.limits import RateLimit
from ratekeeper.web.outcomes import Result, status_of
from ratekeeper.web.replies import Reply
from ratekeeper.web.request import Request, joined
from ratekeeper.web.routes import RouteLimiter

__all__ = ["RateLimiter", "request_of"]

P = ParamSpec("P")


def _user(request: Any) -> str | None:
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return str(user.pk)


def _route(request: Any) -> str | None:
    match = getattr(request, "resolver_match", None)
    route = getattr(match, "route", None)
    return f"/{route}" if route else None


def request_of(request: Any) -> Request:
    """The ``Request`` of a Django ``HttpRequest``."""
    return Request(
        request.method or "GET",
        request.path_info,
        lambda: joined(request.headers.items()),
        request.META.get("REMOTE_ADDR") or None,
        query_string=request.META.get("QUERY_STRING", ""),
        user=_user(request),
        route=lambda: _route(request),
        native=request,
    )


def response_of(reply: Reply) -> Any:
    """``reply`` as a Django response."""
    response = HttpResponse(reply.body, status=reply.status)
    for name, value in reply.headers:
        response[name] = value
    return response


class RateLimiter(RouteLimiter[Decider, Gate]):
    """Makes view decorators deciding with a ``Decider`` (``Limiter``, ``Engine``,
    ``RemoteLimiter``); its options are ``RouteLimiter``'s."""

    _gate = Gate

    def limit(
        self, *limits: RateLimit, scope: str | None = None
    ) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
        """A decorator deciding ``limits`` for each call of a view (its first argument the
        ``HttpRequest``); in ``scope`` when given, else the view's route's own."""
        gate = self.gate(limits, scope)
        replies, bounded, too_large = self.replies, self.bounded, self.too_large

        def decorate(view: Callable[P, Any]) -> Callable[P, Any]:
            if inspect.iscoroutinefunction(view):
                raise TypeError("RateLimiter.limit decorates sync Django views")

            @functools.wraps(view)
            def limited(*args: P.args, **kwargs: P.kwargs) -> Any:
                request: Any = args[0]
                seen = request_of(request)
                if gate.needs_body(seen):
                    body = bounded(request.META.get("CONTENT_LENGTH"), lambda: request.body)
                    if body is None:
                        return response_of(too_large())
                    seen.body = body
                outcome = gate.decide(seen)
                if not outcome.allowed:
                    return response_of(replies.refusal(seen, outcome))
                try:
                    response = view(*args, **kwargs)
                except BaseException as error:
                    if outcome.pending:
                        gate.settle(outcome, Result(status_of(error), error))
                    raise
                if outcome.pending:  # a limit charged by outcome
                    gate.settle(outcome, Result(response.status_code))
                for name, value in replies.admitted(outcome):
                    if name not in response:
                        response[name] = value
                return response

            return limited

        return decorate
