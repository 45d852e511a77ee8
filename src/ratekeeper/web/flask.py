"""Per-route limits for Flask: ``RateLimiter.limit(...)`` decorates a view.

Example::

    limiter = RateLimiter(Limiter(algorithm="sliding_log"))  # no window edge to time

    @app.post("/login")
    @limiter.limit(RateLimit("20/15m"), RateLimit("5/15m", key=keys.field("username")))
    def login(): ...

A view's limits count apart from every other view's unless they share a ``scope``. A refused
request is answered by ``ratekeeper.web.replies`` (429, problem+json, ``Retry-After``); an
admitted one's response gets the rate-limit headers, told once the view's status has settled
the limits charged by outcome. The response is the one Flask sends: an HTTP error the view
raises (``abort(401)``) is answered by the app's error handler, and that answer carries the
headers (``after_this_request``), as does Flask's 500 page. The client is the WSGI peer
(``REMOTE_ADDR``), read before any ``ProxyFix``: name the proxies in ``keys.client_ip``.
An ``async def`` view is limited alike: Flask runs it in an event loop of the request's
thread, and the decision, a blocking one, is made before it starts.

For limits on every view of a blueprint or of the app, ``limit_views(bp, ...)`` decides them
before each request (``before_request``) and adds the headers after (``after_request``); the
views count together, in the scope named by the blueprint (``"app"`` for the app). The app's
limits apply first, then the blueprint's, then the view's own (see ``ratekeeper.web.routes``).
``ratekeeper.web.wsgi.RateLimitMiddleware`` around ``app.wsgi_app`` is the other way.
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
from ratekeeper.web.limits import ExemptLike, RateLimit, exemption
from ratekeeper.web.outcomes import GateDecision, HandlerResult, status_of
from ratekeeper.web.replies import Replies, Reply
from ratekeeper.web.request import Request, joined
from ratekeeper.web.routes import Layers, RouteLimiter

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


#: Where a request's ``Layers`` are kept, in its WSGI environ.
LAYERS = "ratekeeper.layers"


def layers() -> Layers:
    """The ``Layers`` of the current request, made on its first layer."""
    environ = flask.request.environ
    found: Layers | None = environ.get(LAYERS)
    if found is None:
        found = environ[LAYERS] = Layers()
    return found


def with_headers(response: flask.Response, extra: list[tuple[str, str]]) -> flask.Response:
    """``response`` with the headers ``extra`` added, unless it holds them already."""
    if extra:
        headers = response.headers
        present = {name.lower() for name in headers.keys()}  # noqa: SIM118 (items are pairs)
        for name, value in extra:
            if name.lower() not in present:
                headers.add(name, value)
    return response


def finished(response: flask.Response, replies: Replies) -> flask.Response:
    """``response``, once the request's layers' units held for limits charged by outcome are
    settled with its status, with the headers of what its layers then tell."""
    told = layers().settle(HandlerResult(response.status_code))
    return with_headers(response, replies.admitted(told))


def ran(view: Callable[[], flask.Response]) -> flask.Response:
    """The response of ``view``, once the request's layers are settled with its status; the
    exception it raised settles them before it goes on, to the app's error handlers."""
    try:
        response = view()
    except BaseException as error:
        layers().settle(HandlerResult(status_of(error), error))
        raise
    layers().settle(HandlerResult(response.status_code))
    return response


class RateLimiter(RouteLimiter[Decider, Gate]):
    """Makes view decorators deciding with a ``Decider`` (``Limiter``, ``Engine``,
    ``RemoteLimiter``); its options are ``RouteLimiter``'s."""

    _gate = Gate

    def decide(self, gate: Gate, seen: Request | None = None) -> flask.Response | GateDecision:
        """``gate``'s decision on the current request (``seen``, when built already),
        recorded in its ``Layers``: the answer to send when refused (or its body is too
        long), else what to tell."""
        # The request itself, not its context-local proxy: read once per attribute.
        request = flask.request._get_current_object()  # type: ignore[attr-defined]
        if seen is None:
            seen = request_of(request)
        if gate.needs_body(seen):
            body = self.bounded(request.content_length, lambda: request.get_data(cache=True))
            if body is None:
                return response_of(self.too_large())
            seen.body = body
        outcome = gate.decide(seen)
        told = layers().add(outcome, gate)
        if not outcome.allowed:
            return response_of(self.replies.refusal(seen, outcome))
        return told

    def limit(
        self, *limits: RateLimit, scope: str | None = None
    ) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
        """A decorator deciding ``limits`` for each call of a view (``def`` or ``async
        def``); in ``scope`` when given (views naming one scope share their counters), else
        the view's route's own."""
        gate = self.gate(limits, scope)
        # Told on the response the request ends with: the view's, or the error handler's.
        telling = functools.partial(finished, replies=self.replies)

        def decorate(view: Callable[P, Any]) -> Callable[P, Any]:
            if inspect.iscoroutinefunction(view):

                @functools.wraps(view)
                async def limited_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                    told = self.decide(gate)
                    if not isinstance(told, GateDecision):
                        return told
                    flask.after_this_request(telling)
                    try:
                        response = flask.make_response(await view(*args, **kwargs))
                    except BaseException as error:
                        layers().settle(HandlerResult(status_of(error), error))
                        raise
                    layers().settle(HandlerResult(response.status_code))
                    return response

                return limited_async

            @functools.wraps(view)
            def limited(*args: P.args, **kwargs: P.kwargs) -> Any:
                told = self.decide(gate)
                if not isinstance(told, GateDecision):
                    return told
                flask.after_this_request(telling)
                return ran(lambda: flask.make_response(view(*args, **kwargs)))

            return limited

        return decorate

    def limit_views(
        self,
        views: flask.Flask | flask.Blueprint,
        *limits: RateLimit,
        scope: str | None = None,
        exempt: ExemptLike = (),
    ) -> None:
        """Decide ``limits`` before every request to ``views``, a ``Blueprint`` (its views,
        its nested blueprints' too) or the ``Flask`` app (every request, those no view
        matches included), all counting together in ``scope``: by default the blueprint's
        name, or ``"app"``. ``exempt`` (path patterns or a test of the ``Request``) lets
        requests through uncounted. Call it before the blueprint is registered. Example::

            limiter.limit_views(api, RateLimit("100/minute"))
        """
        if isinstance(views, flask.Blueprint):
            default = views.name
        elif isinstance(views, flask.Flask):
            default = "app"
        else:
            raise TypeError(f"limit_views limits a Flask app or Blueprint, not {views!r}")
        gate = self.gate(limits, default if scope is None else scope)
        skip = exemption(exempt)
        replies = self.replies

        def rate_limit() -> flask.Response | None:
            seen = request_of(flask.request._get_current_object())  # type: ignore[attr-defined]
            if skip is not None and skip(seen):
                return None
            told = self.decide(gate, seen)
            return None if isinstance(told, GateDecision) else told

        def add_headers(response: flask.Response) -> flask.Response:
            return finished(response, replies)

        def settle_failed(error: BaseException | None) -> None:
            # A view that raised reaches no after_request: its units are settled here.
            found = flask.request.environ.get(LAYERS)
            if found is not None and found.held:
                found.settle(HandlerResult(500 if error is None else status_of(error), error))

        views.before_request(rate_limit)
        views.after_request(add_headers)
        views.teardown_request(settle_failed)
