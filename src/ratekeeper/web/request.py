"""``Request``: what key and cost functions see of an HTTP request, whatever the framework.

Each adapter (ASGI, WSGI, FastAPI, Flask, Django) builds one from its own request and passes
the framework's object along as ``native``. Header names are lower case; a header sent on
several lines is one value, its lines joined by ``", "`` in order (RFC 9110's list form).

The body is there only when a key needs it (``keys.field``): the adapter then reads it whole,
up to ``MAX_BODY`` bytes, and hands the very same bytes on to the application.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qs

#: The largest body an adapter reads for a key (``keys.field``); a longer one is answered 413.
MAX_BODY = 1 << 20


def declared_length(value: str | int | None) -> int:
    """The body's length a ``Content-Length`` declares; 0 when there is none, or it is no
    whole number of bytes (a negative one included)."""
    try:
        length = int(value or 0)
    except ValueError:
        return 0
    return max(length, 0)


def joined(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Header ``(name, value)`` pairs as one lower-case mapping, repeated names joined."""
    headers: dict[str, str] = {}
    for name, value in pairs:
        lower = name.lower()
        headers[lower] = f"{headers[lower]}, {value}" if lower in headers else value
    return headers


class Request:
    """One HTTP request: ``method`` (upper case), ``path``, ``headers`` (lower-case names),
    ``client`` (the peer's address, None when unknown), ``query_string``, ``user`` (the
    authenticated user's id as the framework knows it, or None), ``route`` (the route's
    template such as ``/items/{id}`` when the framework has matched one, else None), ``body``
    (bytes when read for a key, else None) and ``native`` (the framework's own request:
    a Starlette ``Request``, a Flask or Django request, an ASGI scope, a WSGI environ).
    ``headers`` and ``route`` may be given as functions, called on first use: an adapter then
    translates a framework's headers only for a key that reads them.
    """

    __slots__ = (
        "_fields",
        "_headers",
        "_route",
        "body",
        "client",
        "method",
        "native",
        "path",
        "query_string",
        "user",
    )

    def __init__(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str] | Callable[[], Mapping[str, str]],
        client: str | None,
        *,
        query_string: str = "",
        user: str | None = None,
        route: str | Callable[[], str | None] | None = None,
        body: bytes | None = None,
        native: Any = None,
    ) -> None:
        self.method = method.upper()
        self.path = path or "/"
        self._headers = headers
        self.client = client
        self.query_string = query_string
        self.user = user
        self._route = route
        self.body = body
        self.native = native
        self._fields: dict[str, str] | None = None

    def __repr__(self) -> str:
        return f"Request({self.method} {self.path}, client={self.client!r})"

    @property
    def headers(self) -> Mapping[str, str]:
        """The headers, lower-case names to values, translated on first use."""
        if callable(self._headers):
            self._headers = self._headers()
        return self._headers

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None when it was not sent."""
        return self.headers.get(name.lower())

    @property
    def route(self) -> str | None:
        """The matched route's template, found on first use; None when none is known."""
        if callable(self._route):
            self._route = self._route()
        return self._route

    def query(self, name: str) -> str | None:
        """The first value of query parameter ``name``, or None."""
        values = parse_qs(self.query_string, keep_blank_values=True).get(name)
        return values[0] if values else None

    def field(self, name: str) -> str | None:
        """Field ``name`` of a form (``application/x-www-form-urlencoded``, or a text field of
        ``multipart/form-data``) or of a JSON object body: its first value, a string or a
        number as text; None when the body was not read, is of another type, or has no such
        field."""
        if self._fields is None:
            self._fields = _fields(self.header("content-type") or "", self.body)
        return self._fields.get(name)


def _fields(content_type: str, body: bytes | None) -> dict[str, str]:
    if not body:
        return {}
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/x-www-form-urlencoded":
        text = body.decode("utf-8", "replace")
        return {name: values[0] for name, values in parse_qs(text).items()}
    if media == "multipart/form-data":
        return _multipart(content_type, body)
    if media == "application/json" or media.endswith("+json"):
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, or nested past Python's stack
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            str(name): _unicode(str(value))
            for name, value in data.items()
            if isinstance(value, str | int | float) and not isinstance(value, bool)
        }
    return {}


def _unicode(text: str) -> str:
    """``text`` with any lone surrogate (which JSON's ``\\ud800`` escapes can give, and no key
    can hold) replaced by U+FFFD, as a body's undecodable bytes are."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _multipart(content_type: str, body: bytes) -> dict[str, str]:
    """The text fields of a ``multipart/form-data`` body (files left out)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        return {}
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str) or part.get_filename() is not None or name in fields:
            continue
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            try:
                fields[name] = payload.decode(part.get_content_charset() or "utf-8", "replace")
            except LookupError:  # a charset Python does not know
                fields[name] = payload.decode("utf-8", "replace")
    return fields
