"""Reading a request's body for the HTTP surface: bounded in size, JSON only.

Every failure is a ``Problem`` the service answers: 413 a body over its limit (told by its
``Content-Length`` before any of it is read, else counted as it arrives), 415 a body said to be
other than JSON, 400 one that is not JSON or that ends before its client's end. Both Starlette's
``Request`` and the bare ASGI ``receive`` of the hot path (``Checks.check_raw``) are read here.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from ratekeeper.core.inputs import decimal
from ratekeeper.service.asgi import Receive
from ratekeeper.service.http import bodies
from ratekeeper.wire.problems import Problem

MAX_BODY = bodies.MAX_BODY


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request's body, at most ``limit`` bytes (a 413 problem beyond)."""
    check_length(request.headers.get("content-length"), limit)
    return await receive_body(request.receive, limit)


async def read_json(request: Request) -> Any:
    """The request's body as JSON: a 415 problem when it is said to be something else (no
    ``Content-Type`` is taken as JSON), else as ``read_body`` and ``bodies.loads``."""
    check_media_type(request.headers.get("content-type"))
    return bodies.loads(await read_body(request))


def check_media_type(given: str | None) -> None:
    """A 415 problem when a ``Content-Type`` is given and does not name JSON."""
    if given is not None and not bodies.is_json(given):
        raise Problem.of(
            "media-type",
            f"the body must be application/json, not {given[:100]!r}",
            "/headers/content-type",
        )


def check_length(given: str | bytes | None, limit: int) -> None:
    """A 413 problem when a ``Content-Length`` says the body is over ``limit`` bytes."""
    text = given.decode("latin-1") if isinstance(given, bytes) else given
    if text is not None and decimal(text) and int(text) > limit:
        raise _too_large(limit)


async def receive_body(receive: Receive, limit: int) -> bytes:
    """An ASGI request's body from its ``receive``: at most ``limit`` bytes (a 413 problem
    beyond); a 400 problem when the client goes away before it ends."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Problem.of("malformed", "the client went away before its body ended")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if not message.get("more_body", False):
            return chunk if not chunks else b"".join((*chunks, chunk))
        chunks.append(chunk)


def _too_large(limit: int) -> Problem:
    return Problem.of("too-large", f"the body is over {limit} bytes")
