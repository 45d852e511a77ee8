"""nginx's ``auth_request``: the request nginx asks about, as the headers it sets, into a
``translate.Call``; and the status nginx understands back.

The shipped ``deploy/nginx/ratekeeper.conf`` sends ``GET /v1/nginx`` with no body and these
headers (nginx overwrites any a client sent, except ``X-User``, which the site should set from
its own authentication):

``X-RateLimit-Domain``  the rules' domain (``edge`` in the shipped file)
``X-Real-IP``           the client's address
``X-User``              the client's user, when there is one
``X-Original-URI``      the request's URI, query string included
``X-Original-Method``   the request's method

They become the descriptors ``[remote_address]``, ``[user]`` (when sent), ``[path]`` and
``[method, path]`` (the path as nginx routes it: ``request_path``), so that one rule file
decides for nginx as for Envoy and the library. nginx understands only 2xx (let through) and
401/403 (refused): anything else, 429 included, becomes a 500 for its client. So a refusal is
a 403, which the shipped file turns into a 429 with ``Retry-After``; the rate-limit headers go
with both.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from ratekeeper.core.errors import InvalidInputError
from ratekeeper.wire.statuses import OK
from ratekeeper.wire.translate import Answer, Call, WireDescriptor

#: The domain when nginx sends none.
DEFAULT_DOMAIN = "edge"
ALLOWED, REFUSED = 200, 403


def call_of(headers: Mapping[str, str], default_domain: str = DEFAULT_DOMAIN) -> Call:
    """The ``Call`` of one ``auth_request``, from its headers (names in any case)."""
    found = {name.lower(): value for name, value in headers.items()}
    address = found.get("x-real-ip", "")
    if not address:
        raise InvalidInputError("nginx sends the client's address in X-Real-IP")
    path = request_path(found.get("x-original-uri", "/"))
    method = found.get("x-original-method", "GET").upper()
    descriptors = [WireDescriptor((("remote_address", address),))]
    user = found.get("x-user", "")
    if user:
        descriptors.append(WireDescriptor((("user", user),)))
    descriptors.append(WireDescriptor((("path", path),)))
    descriptors.append(WireDescriptor((("method", method), ("path", path))))
    return Call(found.get("x-ratelimit-domain") or default_domain, tuple(descriptors))


def request_path(uri: str) -> str:
    """The path of a request URI as nginx routes it (its ``$uri``): without the query string,
    percent-decoded, runs of ``/`` merged, and ``.`` and ``..`` segments resolved. So that
    ``/%61pi/login``, ``//api//login`` and ``/x/../api/./login`` count as ``/api/login``,
    which nginx and most applications serve them as: a rule on a path cannot be stepped
    around by writing the path another way. An absolute URI (``http://host/path``) gives
    its path."""
    if not uri.startswith("/"):
        uri = urlsplit(uri).path if "://" in uri else "/" + uri
    path = unquote(uri.split("?", 1)[0], errors="replace")
    segments: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in (".", ""):
            segments.append(segment)
    ends = path.endswith(("/", "/.", "/..")) and bool(segments)
    return "/" + "/".join(segments) + ("/" if ends else "")


def status_of(answer: Answer) -> int:
    """200 to let the request through, 403 to refuse it: the only answers nginx takes."""
    return ALLOWED if answer.code == OK else REFUSED
