"""Copies of the probes' answers, kept while the service sheds, for the door to answer from.

While a process sheds, a probe that goes the usual way waits its turn behind the crowd: a
turn of the loop for its request, and more for what it asks (the store's ping, for
``/readyz``), each turn as long as the crowd is large. ``ProbeCopies.keep(app, shedding)``
asks the app itself for ``PATHS`` every ``INTERVAL`` seconds while ``shedding()`` holds (and
every ``REFRESH`` seconds while not, so that one is at hand when shedding starts), and keeps
each answer whole; the server's protocol (``runtime.protocol``) answers a probe from its
copy, at once, with an ``Age`` header saying how old it is. A copy serves only while the
process sheds and for ``FRESH`` seconds after it was made; otherwise the probe goes the usual
way, as it always does while the process does not shed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from ratekeeper.service.asgi import Receive, Scope, Send
from ratekeeper.service.http.shed import answer

log = logging.getLogger("ratekeeper.service")

#: The probes copied: liveness, readiness, and the metrics.
PATHS = (b"/healthz", b"/readyz", b"/metrics")
#: Seconds between two copies of each, while the process sheds.
INTERVAL = 1.0
#: Seconds between two copies of each while the process does not shed.
REFRESH = 4.0
#: Seconds between two looks at whether the process sheds.
LOOK = 0.1
#: Seconds a copy is answered from after it was made.
FRESH = 5.0

App = Callable[[Scope, Receive, Send], Any]
#: A copy: when it was made (``clock``), its status, headers and body.
Copy = tuple[float, int, list[tuple[bytes, bytes]], bytes]


class ProbeCopies:
    """The latest answer of each of ``PATHS``, as the app gave it (see the module)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.copies: dict[bytes, Copy] = {}

    async def take(self, app: App) -> None:
        """Ask ``app`` for each of ``PATHS`` once, and keep the answers: a path that fails
        keeps its last copy, the others are taken all the same."""
        for path in PATHS:
            try:
                status, headers, body = await ask(app, path)
            except Exception as error:  # that probe then goes the usual way once its copy ages
                log.debug("could not copy the answer to %s: %s", path.decode(), error)
                continue
            self.copies[path] = (self.clock(), status, headers, body)

    async def keep(self, app: App, shedding: Callable[[], bool]) -> None:
        """Take copies every ``INTERVAL`` seconds while ``shedding()`` (asked every ``LOOK``
        seconds), and every ``REFRESH`` seconds while not, so that a copy is at hand the moment
        shedding starts, when the app's own answers are slowest; until cancelled."""
        taken = -REFRESH
        while True:
            every = INTERVAL if shedding() else REFRESH
            if self.clock() - taken >= every:
                taken = self.clock()
                try:
                    await self.take(app)
                except Exception as error:  # the probes then go the usual way
                    log.debug("could not copy the probes' answers: %s", error)
            await asyncio.sleep(LOOK)

    def answer(
        self, path: bytes, default_headers: Iterable[tuple[bytes, bytes]], *, close: bool = False
    ) -> bytes | None:
        """The whole answer to ``path`` from its copy, or None without a fresh one."""
        copy = self.copies.get(path)
        if copy is None:
            return None
        made, status, headers, body = copy
        age = self.clock() - made
        if not 0 <= age <= FRESH:
            return None
        aged = [*headers, (b"age", b"%d" % age)]
        return answer(default_headers, aged, body, status, close=close)


async def ask(app: App, path: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """``app``'s answer to ``GET path``, in this process: its status, headers and body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path.decode(),
        "raw_path": path,
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"ratekeeper")],
        "server": None,
        "client": None,
        "state": {},
    }
    started: dict[str, Any] = {}
    body: list[bytes] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            body.append(message.get("body", b""))

    await app(scope, receive, send)
    payload = b"".join(body)
    headers = [
        (name, value)
        for name, value in started.get("headers", [])
        if name.lower() not in (b"content-length", b"transfer-encoding")
    ]
    headers.append((b"content-length", b"%d" % len(payload)))
    return started["status"], headers, payload
