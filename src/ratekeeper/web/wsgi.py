"""``RateLimitMiddleware``: rate limiting for any WSGI application (Flask, Django, ...).

The WSGI twin of ``ratekeeper.web.asgi``: it decides each request with a ``Gate`` (a
``Limiter``, ``Engine`` or ``RemoteLimiter`` decides), answers a refused one itself, passes
exempt paths through untouched, and adds the rate-limit headers to an admitted request's
response; under a limit charged by outcome, the status the application starts its response
with (or the exception it raised before) is the ``HandlerResult`` the gate settles as the
response starts, and the headers tell what that result left. A body read for a key
(``keys.field``) is handed on to the application unchanged.

Example (Flask; for Django, wrap ``get_wsgi_application()`` in wsgi.py)::

    app.wsgi_app = RateLimitMiddleware(
        app.wsgi_app, Limiter("redis://127.0.0.1:6379/0"), [RateLimit("100/minute")]
    )
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import Any

from ratekeeper.decider import Decider
from ratekeeper.web.gate import Gate
from ratekeeper.web.options import Middleware
from ratekeeper.web.outcomes import HandlerResult, status_of
from ratekeeper.web.replies import Reply, merged
from ratekeeper.web.request import Request, declared_length, joined

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

#: The headers a WSGI server puts in the environ without the ``HTTP_`` prefix.
_UNPREFIXED = {"CONTENT_TYPE": "content-type", "CONTENT_LENGTH": "content-length"}


def _text(value: str) -> str:
    """A WSGI string (bytes as latin-1) as the UTF-8 text it holds."""
    return value.encode("latin-1").decode("utf-8", "replace")


def headers_of(environ: Environ) -> dict[str, str]:
    """The headers of a WSGI ``environ``, as ``Request.headers``."""
    pairs = (
        (name[5:].replace("_", "-"), value)
        if name.startswith("HTTP_")
        else (_UNPREFIXED[name], value)
        for name, value in environ.items()
        if (name.startswith("HTTP_") or name in _UNPREFIXED) and isinstance(value, str)
    )
    return joined(pairs)


def request_of(environ: Environ, native: Any = None) -> Request:
    """The ``Request`` of a WSGI ``environ``."""
    return Request(
        environ.get("REQUEST_METHOD", "GET"),
        _text(environ.get("PATH_INFO", "/")),
        lambda: headers_of(environ),
        environ.get("REMOTE_ADDR") or None,
        query_string=environ.get("QUERY_STRING", ""),
        user=environ.get("REMOTE_USER") or None,
        native=environ if native is None else native,
    )


def read_body(environ: Environ, limit: int) -> bytes | None:
    """The whole body of ``environ``'s request, or None past ``limit`` bytes. The environ's
    input is replaced by the same bytes, for the application to read."""
    length = declared_length(environ.get("CONTENT_LENGTH"))
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    if length > limit:
        return None
    if length:
        body = stream.read(length)
    elif environ.get("wsgi.input_terminated"):  # a chunked body: read to its end
        body = stream.read(limit + 1)
        if len(body) > limit:
            return None
    else:
        body = b""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return bytes(body)


def answer(start_response: StartResponse, reply: Reply) -> list[bytes]:
    """Start ``reply`` as the whole response; its body to return."""
    status = f"{reply.status} {HTTPStatus(reply.status).phrase}"
    length = [("Content-Length", str(len(reply.body)))]
    start_response(status, merged(reply.headers, length))
    return [reply.body]


def adding(start_response: StartResponse, extra: list[tuple[str, str]]) -> StartResponse:
    """A ``start_response`` that adds the headers ``extra``, unless the app set them."""

    def start_with_headers(status: str, headers: list[tuple[str, str]], *info: Any) -> Any:
        present = {name.lower() for name, _ in headers}
        more = [(name, value) for name, value in extra if name.lower() not in present]
        return start_response(status, [*headers, *more], *info)

    return start_with_headers


#: How a request charged by outcome is settled by what it came to: the headers to tell.
Settle = Callable[[HandlerResult], list[tuple[str, str]]]


def settled(
    app: WSGIApp, environ: Environ, start_response: StartResponse, settle: Settle
) -> Iterable[bytes]:
    """Run ``app``, and settle its request once with what it came to (``settle(result)``):
    the status it starts its response with, as it starts it, so that the headers ``settle``
    returns (added unless the app set them) tell what the result left; else the exception it
    raised before starting, or 500 when it never started. An app that starts its response only
    as its body is read is settled then."""
    told: list[list[tuple[str, str]]] = []

    def start(status: str, headers: list[tuple[str, str]], *info: Any) -> Any:
        if not told:
            told.append(settle(HandlerResult(int(status[:3]))))
        return adding(start_response, told[0])(status, headers, *info)

    try:
        body = app(environ, start)
    except BaseException as error:
        if not told:
            settle(HandlerResult(status_of(error), error))
        raise
    return body if told else _settling(body, told, settle)


def _settling(
    body: Iterable[bytes], told: list[list[tuple[str, str]]], settle: Settle
) -> Iterator[bytes]:
    try:
        yield from body
    except BaseException as error:
        if not told:
            told.append(settle(HandlerResult(status_of(error), error)))
        raise
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    if not told:
        settle(HandlerResult(500))


class RateLimitMiddleware(Middleware[WSGIApp, Decider, Gate]):
    """Rate-limit a WSGI ``app`` with a ``Decider`` (``Limiter``, ``Engine``,
    ``RemoteLimiter``); the options are ``ratekeeper.web.asgi.RateLimitMiddleware``'s, the
    decider's twin blocking. A bad option raises here."""

    _gate = Gate

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        request = request_of(environ)
        if self.exempt is not None and self.exempt(request):
            return self.app(environ, start_response)
        if self.gate.needs_body(request):
            body = read_body(environ, self.max_body)
            if body is None:
                return answer(start_response, self.too_large())
            request.body = body
        outcome = self.gate.decide(request)
        if not outcome.allowed:
            return answer(start_response, self.replies.refusal(request, outcome))
        if outcome.pending:  # a limit charged by outcome: settled, then told, as the app answers
            gate, replies = self.gate, self.replies

            def settle(result: HandlerResult) -> list[tuple[str, str]]:
                return replies.admitted(gate.settle(outcome, result))

            return settled(self.app, environ, start_response, settle)
        extra = self.replies.admitted(outcome)
        return self.app(environ, adding(start_response, extra) if extra else start_response)
