"""Per-route limits for Django: ``RateLimiter.limit(...)`` decorates a view.

Example::

    limiter = RateLimiter(Limiter())

    @limiter.limit(RateLimit("3/month", key=keys.user(), scope="premium-stories"))
    def story(request, slug): ...

A view's limits count apart from every other view's unless they share a ``scope``. A refused
request is answered by ``ratekeeper.web.replies`` (429, problem+json, ``Retry-After``); an
admitted one's response gets the rate-limit headers, told once the view's status has settled
the limits charged by outcome. An HTTP error the view raises (``PermissionDenied``,
``Http404``, ``BadRequest``, ``SuspiciousOperation``) is answered by Django's own
``response_for_exception`` (the URLconf's ``handler403`` and the like), whose status settles
the limits and which gets the headers; a middleware's ``process_exception`` never sees it. Any
other exception goes on to Django: its 500 page gets headers only from ``RateLimitMiddleware``.
The user is ``request.user``'s primary key when authenticated; the client is ``REMOTE_ADDR``
(name the proxies in ``keys.client_ip``).
An ``async def`` view is limited alike: the decision, a blocking one that may read
``request.user`` from the database, is made in Django's thread for sync code
(``sync_to_async``), so the event loop never waits on the store.

For limits on every route, or on the URLs of a namespace, a name or a path pattern, add
``RateLimitMiddleware`` to ``MIDDLEWARE``; it reads ``settings.RATEKEEPER`` (see its doc).
The app's limits apply first, then those of the URLs a request resolves to, then the view's
own (see ``ratekeeper.web.routes``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any, ParamSpec

from ratekeeper.core.errors import MissingExtraError

try:
    from asgiref.sync import iscoroutinefunction, sync_to_async
    from django.conf import settings
    from django.core.exceptions import (
        BadRequest,
        ImproperlyConfigured,
        PermissionDenied,
        SuspiciousOperation,
    )
    from django.core.handlers.exception import response_for_exception
    from django.http import Http404, HttpResponse
    from django.http.multipartparser import MultiPartParserError
    from django.utils.module_loading import import_string
except ImportError:  # pragma: no cover - the extra is installed where this runs
    raise MissingExtraError("django", "django") from None

from ratekeeper.decider import Decider
from ratekeeper.web.gate import Gate
from ratekeeper.web.limits import RateLimit, exemption
from ratekeeper.web.outcomes import GateDecision, HandlerResult, status_of
from ratekeeper.web.replies import Reply
from ratekeeper.web.request import Request, joined
from ratekeeper.web.routes import Layers, RouteLimiter

__all__ = ["RateLimitMiddleware", "RateLimiter", "request_of"]

P = ParamSpec("P")

#: The exceptions Django answers with a 4xx error page (``response_for_exception``).
HTTP_ERRORS = (Http404, PermissionDenied, BadRequest, SuspiciousOperation, MultiPartParserError)


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


def layers_of(request: Any) -> Layers:
    """The ``Layers`` of ``request``, made on its first layer."""
    found: Layers | None = getattr(request, "_ratekeeper_layers", None)
    if found is None:
        found = request._ratekeeper_layers = Layers()
    return found


def settled(request: Any, result: HandlerResult) -> GateDecision | None:
    """Settle ``request``'s layers' units held for limits charged by outcome with ``result``;
    what its response then tells (``Layers.told``)."""
    return layers_of(request).settle(result)


def with_headers(response: Any, extra: list[tuple[str, str]]) -> Any:
    """``response`` with the headers ``extra`` added, unless it holds them already."""
    for name, value in extra:
        if name not in response:
            response[name] = value
    return response


class RateLimiter(RouteLimiter[Decider, Gate]):
    """Makes view decorators deciding with a ``Decider`` (``Limiter``, ``Engine``,
    ``RemoteLimiter``); its options are ``RouteLimiter``'s."""

    _gate = Gate

    def decide(self, gate: Gate, request: Any, seen: Request | None = None) -> Any:
        """``gate``'s decision on ``request`` (``seen``, when built already), recorded in
        its ``Layers``: the response to send when refused (or its body is too long), else
        the ``GateDecision`` to tell."""
        if seen is None:
            seen = request_of(request)
        if gate.needs_body(seen):
            body = self.bounded(request.META.get("CONTENT_LENGTH"), lambda: request.body)
            if body is None:
                return response_of(self.too_large())
            seen.body = body
        outcome = gate.decide(seen)
        told = layers_of(request).add(outcome, gate)
        if not outcome.allowed:
            return response_of(self.replies.refusal(seen, outcome))
        return told

    def limit(
        self, *limits: RateLimit, scope: str | None = None
    ) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
        """A decorator deciding ``limits`` for each call of a view, ``def`` or ``async def``
        (its first argument the ``HttpRequest``); in ``scope`` when given, else the view's
        route's own."""
        gate = self.gate(limits, scope)
        replies = self.replies

        def decorate(view: Callable[P, Any]) -> Callable[P, Any]:
            if iscoroutinefunction(view):
                decide = sync_to_async(self.decide)
                settle = sync_to_async(settled)
                # As Django's handler answers an exception under ASGI.
                answer = sync_to_async(response_for_exception, thread_sensitive=False)

                @functools.wraps(view)
                async def limited_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                    told = await decide(gate, args[0])
                    if not isinstance(told, GateDecision):
                        return told
                    try:
                        response = await view(*args, **kwargs)
                    except HTTP_ERRORS as error:
                        response = await answer(args[0], error)
                        told = await settle(args[0], HandlerResult(response.status_code, error))
                    except BaseException as error:
                        await settle(args[0], HandlerResult(status_of(error), error))
                        raise
                    else:
                        told = await settle(args[0], HandlerResult(response.status_code))
                    return with_headers(response, replies.admitted(told))

                return limited_async

            @functools.wraps(view)
            def limited(*args: P.args, **kwargs: P.kwargs) -> Any:
                told = self.decide(gate, args[0])
                if not isinstance(told, GateDecision):
                    return told
                try:
                    response = view(*args, **kwargs)
                except HTTP_ERRORS as error:
                    response = response_for_exception(args[0], error)
                    told = settled(args[0], HandlerResult(response.status_code, error))
                except BaseException as error:
                    settled(args[0], HandlerResult(status_of(error), error))
                    raise
                else:
                    told = settled(args[0], HandlerResult(response.status_code))
                return with_headers(response, replies.admitted(told))

            return limited

        return decorate


#: The keys ``settings.RATEKEEPER`` may hold.
SETTINGS = ("DECIDER", "LIMITS", "ROUTES", "EXEMPT", "OPTIONS")


def _improper(where: str, error: Exception) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"settings.RATEKEEPER{where}: {error}")


def _matcher(pattern: str) -> Callable[[Any], bool]:
    """Whether a resolved request's URL is ``pattern``'s: a path pattern (``"/search/*"``),
    else a URL name pattern matched against its ``view_name`` (``"login"``,
    ``"api:*"`` for the namespace ``api``)."""
    if pattern.startswith("/"):
        return lambda request: fnmatchcase(request.path_info, pattern)
    return lambda request: fnmatchcase(request.resolver_match.view_name, pattern)


class RateLimitMiddleware:
    """Django middleware deciding the limits of ``settings.RATEKEEPER``, a dict of:

    - ``DECIDER``: a ``Limiter``, ``Engine`` or ``RemoteLimiter``, or the dotted path of one;
    - ``LIMITS``: ``RateLimit``s on every request (URLs that resolve to no view included),
      counting in the scope ``"app"``;
    - ``ROUTES``: a dict of URL patterns to ``RateLimit``s, for the requests whose URL
      resolves to a view: a path pattern (``"/search/*"``, ``*`` any run of characters), or
      a URL name (``"login"``, ``"api:items"``) or name pattern (``"api:*"``, every URL of the
      namespace ``api``). Every entry a request's URL matches applies, in order; the URLs an
      entry matches count together, in a scope named by its pattern;
    - ``EXEMPT``: path patterns (or a test of the ``Request``) let through uncounted;
    - ``OPTIONS``: ``RouteLimiter``'s options (``headers``, ``ietf``, ``max_body``, ...).

    A limit naming a ``scope`` of its own counts there. Put it after the middleware that
    sets ``request.user`` when a key reads the user. A bad setting raises
    ``ImproperlyConfigured`` when Django loads the middleware. Example::

        MIDDLEWARE = [..., "ratekeeper.web.django.RateLimitMiddleware"]
        RATEKEEPER = {
            "DECIDER": "mysite.limits.limiter",  # Limiter(algorithm="sliding_log"): no edges
            "LIMITS": [RateLimit("1000/hour")],
            "ROUTES": {"api:*": [RateLimit("100/minute")], "login": [RateLimit("5/15m")]},
            "EXEMPT": ["/health"],
        }
    """

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        config = getattr(settings, "RATEKEEPER", None)
        if not isinstance(config, Mapping):
            raise ImproperlyConfigured(f"settings.RATEKEEPER is a dict, not {config!r}")
        unknown = sorted(str(name) for name in config if name not in SETTINGS)
        if unknown:
            raise ImproperlyConfigured(
                f"settings.RATEKEEPER: unknown key {unknown[0]!r} (known: {', '.join(SETTINGS)})"
            )
        if "DECIDER" not in config:
            raise ImproperlyConfigured("settings.RATEKEEPER needs a DECIDER")
        decider = config["DECIDER"]
        try:
            if isinstance(decider, str):
                decider = import_string(decider)
            options = config.get("OPTIONS", {})
            if not isinstance(options, Mapping):
                raise TypeError(f"OPTIONS is a dict, not {options!r}")
            self.limiter = RateLimiter(decider, **options)
        except (ImportError, TypeError, ValueError) as error:
            raise _improper("", error) from error
        try:
            limits = config.get("LIMITS", ())
            self.limits = self.limiter.gate(tuple(limits), "app") if limits else None
        except (TypeError, ValueError) as error:
            raise _improper("['LIMITS']", error) from error
        routes = config.get("ROUTES", {})
        if not isinstance(routes, Mapping):
            raise ImproperlyConfigured(f"settings.RATEKEEPER['ROUTES'] is a dict, not {routes!r}")
        self.routes: list[tuple[Callable[[Any], bool], Gate]] = []
        for pattern, limits in routes.items():
            try:
                if not isinstance(pattern, str) or not pattern:
                    raise ValueError(f"a URL pattern is a name or a path, not {pattern!r}")
                if isinstance(limits, RateLimit) or not isinstance(limits, list | tuple):
                    raise TypeError(f"limits is a list of RateLimit objects, not {limits!r}")
                self.routes.append((_matcher(pattern), self.limiter.gate(tuple(limits), pattern)))
            except (TypeError, ValueError) as error:
                raise _improper(f"['ROUTES'][{pattern!r}]", error) from error
        try:
            self.exempt = exemption(config.get("EXEMPT", ()))
        except (TypeError, ValueError) as error:
            raise _improper("['EXEMPT']", error) from error

    def _exempt(self, request: Any) -> tuple[bool, Request]:
        seen = request_of(request)
        return self.exempt is not None and self.exempt(seen), seen

    def __call__(self, request: Any) -> Any:
        if self.limits is not None:
            skip, seen = self._exempt(request)
            if not skip:
                told = self.limiter.decide(self.limits, request, seen)
                if not isinstance(told, GateDecision):
                    return told
        response = self.get_response(request)
        found: Layers | None = getattr(request, "_ratekeeper_layers", None)
        if found is not None:
            told = found.settle(HandlerResult(response.status_code))
            with_headers(response, self.limiter.replies.admitted(told))
        return response

    def process_view(self, request: Any, view: Any, args: Any, kwargs: Any) -> Any:
        """Decide the ``ROUTES`` entries the resolved URL matches: a refusal's response, or
        None for the view to run."""
        matched = [gate for matches, gate in self.routes if matches(request)]
        if not matched:
            return None
        skip, seen = self._exempt(request)
        if skip:
            return None
        for gate in matched:
            told = self.limiter.decide(gate, request, seen)
            if not isinstance(told, GateDecision):
                return told
        return None
