"""Requests answered from the bytes they came in, before they are parsed: a decision shed with
``503 overloaded``, and a probe answered from its copy (``http.copies``).

While a process sheds, every request it turns away must cost it far less than a decision, or
the excess it answers keeps its loop as far behind as the decisions would; and a probe must
not wait its turn behind the crowd. The server's protocol asks ``read(data)`` what the bytes
it just received are: one whole request, alone, its method, path and whether the connection
closes after it; if it is a decision the in-flight bound turns away, or a probe with a fresh
copy, it writes ``answer(...)`` and parses nothing. Anything else (a request split over
several reads, two at once, a body sent in chunks, any other route) goes the usual way, and
is shed there if it must be: the answers are the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPStatus
from typing import NamedTuple

#: The decision routes, by method and path, and the surface each one is counted under.
ROUTES: dict[tuple[bytes, bytes], str] = {
    (b"POST", b"/v1/check"): "http",
    (b"POST", b"/v1/check/batch"): "http",
    (b"POST", b"/v1/peek"): "http",
    (b"POST", b"/json"): "http",
    (b"GET", b"/v1/nginx"): "nginx",
}
#: The ASGI scope's key saying that the door let the request through, its share taken
#: (``InFlightBound.turn_away``): the app enters it with ``prepaid=True``.
PREPAID = "ratekeeper.prepaid"
_LENGTH = b"\r\ncontent-length:"
_REFUSED = (b"\r\ntransfer-encoding:", b"\r\nexpect:", b"\r\nupgrade:")
_CONNECTION = b"\r\nconnection:"


class Request(NamedTuple):
    """One whole HTTP/1.1 request, as ``read`` found it."""

    method: bytes
    path: bytes  # without its query
    close: bool  # Connection: close


def read(data: bytes) -> Request | None:
    """The request ``data`` holds whole and alone (HTTP/1.1, its body exactly
    ``Content-Length`` long, ``Connection`` absent, ``keep-alive`` or ``close``); None for
    anything else.

    >>> read(b"POST /v1/check?x=1 HTTP/1.1\\r\\nContent-Length: 2\\r\\n\\r\\n{}")
    Request(method=b'POST', path=b'/v1/check', close=False)
    >>> read(b"POST /v1/check HTTP/1.1\\r\\nContent-Length: 3\\r\\n\\r\\n{}") is None
    True
    """
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    line_end = data.find(b"\r\n")
    parts = data[:line_end].split(b" ")
    if len(parts) != 3 or parts[2] != b"HTTP/1.1":
        return None
    head = data[line_end : end + 2].lower()  # each header line starts with \r\n
    if any(name in head for name in _REFUSED):
        return None
    close = False
    at = head.find(_CONNECTION)
    if at >= 0:
        value = head[at + len(_CONNECTION) : head.find(b"\r\n", at + 2)].strip()
        if value not in (b"keep-alive", b"close") or head.find(_CONNECTION, at + 2) >= 0:
            return None
        close = value == b"close"
    if _length(head) != len(data) - end - 4:
        return None
    return Request(parts[0], parts[1].partition(b"?")[0], close)


def surface_of(request: Request) -> str | None:
    """The surface of the decision ``request`` asks for; None if it asks for none."""
    return ROUTES.get((request.method, request.path))


def _length(head: bytes) -> int | None:
    """The ``Content-Length`` the header lines ``head`` give (0 without one), or None if
    it is not one whole number or given twice."""
    at = head.find(_LENGTH)
    if at < 0:
        return 0
    if head.find(_LENGTH, at + 1) >= 0:
        return None
    value = head[at + len(_LENGTH) : head.find(b"\r\n", at + 2)].strip()
    return int(value) if value.isdigit() else None


def answer(
    default_headers: Iterable[tuple[bytes, bytes]],
    headers: Iterable[tuple[bytes, bytes]],
    payload: bytes,
    status: int = 503,
    *,
    close: bool = False,
) -> bytes:
    """The whole HTTP/1.1 answer ``status`` with the server's ``default_headers`` (its
    ``date``), then ``headers`` and ``payload``; ``close`` adds ``Connection: close``."""
    lines = [b"HTTP/1.1 %d %s" % (status, HTTPStatus(status).phrase.encode())]
    lines += [name + b": " + value for name, value in (*default_headers, *headers)]
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload
