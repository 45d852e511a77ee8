"""A tiny real HTTP server for the gateway tests, run as its own process by ``UpstreamServer``.

    python tests/http_upstream.py --port PORT --role app|auth --log FILE

It serves HTTP/1.1 (keep-alive) on 127.0.0.1:PORT, appends one JSON line per request to FILE
(``method``, ``path``, ``headers`` with lower-case names, ``body``), and answers
``GET /.upstream/pid`` with its pid (not logged), so that its starter knows it answers itself.

- ``app``: the application behind a gateway. Every request gets 200 with a JSON body holding
  ``role``, ``method``, ``path``, ``headers`` and ``body`` as received.
- ``auth``: a decision endpoint of nginx's ``auth_request`` form. The path it decides on is the
  request's ``X-Original-URI`` header, or its own path without one: a path under ``/deny``
  gets 403 with ``X-RateLimit-Limit: 10``, ``X-RateLimit-Remaining: 0``, ``X-RateLimit-Reset:
  60`` and ``Retry-After: 60``; ``/status/NNN`` gets status NNN with the same headers as 403;
  any other path gets 200 with ``X-RateLimit-Limit: 10``, ``X-RateLimit-Remaining: 9`` and
  ``X-RateLimit-Reset: 60``. It stands in for whatever answers there; it keeps no counts.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

PID_PATH = "/.upstream/pid"

ALLOWED = {"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "60"}
DENIED = {
    "X-RateLimit-Limit": "10",
    "X-RateLimit-Remaining": "0",
    "X-RateLimit-Reset": "60",
    "Retry-After": "60",
}


def decide(path: str) -> tuple[int, dict[str, str]]:
    """The ``auth`` role's answer for ``path``: a status and the headers to send with it."""
    path = urlsplit(path).path
    if path == "/deny" or path.startswith("/deny/"):
        return 403, DENIED
    if path.startswith("/status/"):
        return int(path.split("/")[2]), DENIED
    return 200, ALLOWED


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def answer(self) -> None:
        if self.path == PID_PATH:
            self.send(200, {}, str(os.getpid()).encode())
            return
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size).decode(errors="replace") if size else ""
        seen = {
            "method": self.command,
            "path": self.path,
            "headers": {name.lower(): value for name, value in self.headers.items()},
            "body": body,
        }
        self.server.record(seen)
        if self.server.role == "auth":
            status, headers = decide(self.headers.get("X-Original-URI") or self.path)
            self.send(status, headers, b"")
        else:
            self.send(200, {"Content-Type": "application/json"}, json.dumps(seen).encode())

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = answer

    def send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the JSON lines are the log


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a gateway may open hundreds of connections at once

    def __init__(self, port: int, role: str, log: Path) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.role = role
        self.log = log
        self.lock = threading.Lock()

    def record(self, seen: Mapping[str, object]) -> None:
        with self.lock, self.log.open("a") as out:
            out.write(json.dumps(seen) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--role", choices=["app", "auth"], required=True)
    parser.add_argument("--log", type=Path, required=True)
    options = parser.parse_args()
    with Server(options.port, options.role, options.log) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
