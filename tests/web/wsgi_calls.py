"""A WSGI app called as a WSGI server calls it, in the test's process: ``call(app, path, ...)``
gives its ``Answer``; ``echo`` is an app that answers with the body it was sent."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any
from wsgiref.util import setup_testing_defaults


def echo(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"echo:" + body]


class Answer:
    def __init__(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = int(status.split(maxsplit=1)[0])
        self.headers = {name.lower(): value for name, value in headers}
        self.body = body


def call(
    app: Any,
    path: str = "/",
    method: str = "GET",
    body: bytes = b"",
    length: str | None = None,
    **extra: str,
) -> Answer:
    environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path, **extra}
    setup_testing_defaults(environ)
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body)) if length is None else length
    started: list[Any] = []
    chunks = app(environ, lambda status, headers, *info: started.extend([status, headers]))
    return Answer(started[0], started[1], b"".join(chunks))
