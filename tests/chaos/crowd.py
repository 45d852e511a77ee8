"""A crowd of keep-alive HTTP/1.1 connections, each sending its next request the moment the
last is answered (a closed loop, as wrk drives one), for a bounded time.

    python -m tests.chaos.crowd HOST PORT PATH BODY_FILE CONNECTIONS SECONDS [RAMP]

It opens ``CONNECTIONS`` to ``HOST:PORT`` at once (or over ``RAMP`` seconds), POSTs the JSON in
``BODY_FILE`` to ``PATH`` on each until ``SECONDS`` have passed, waits ``GRACE`` seconds for
the last answers, and prints JSON: for each status and for all answers but 503, how many and
their latency percentiles (ms, from the request's write to its answer's last byte); per
second of sending, how many were sent, shed (503) and their percentiles; the connections
that got at least one answer, those that failed to open, and the 503s that lacked
``Retry-After``. It reads the answers itself (a status line, headers, a ``Content-Length``
body), so that it costs far less than an HTTP client would, and runs on uvloop when installed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

#: Seconds given to the answers of requests still under way when sending stops.
GRACE = 3.0


class _Connection(asyncio.Protocol):
    def __init__(self, crowd: Crowd) -> None:
        self.crowd = crowd
        self.buffer = b""
        self.sent = 0.0
        self.answered = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream's transport
        self.send()

    def send(self) -> None:
        assert self.transport is not None
        if time.monotonic() >= self.crowd.deadline:
            self.transport.close()
            return
        self.sent = time.monotonic()
        self.transport.write(self.crowd.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            length = _length(head)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            status = int(head[9:12])
            self.answered = True
            self.crowd.record(status, self.sent, time.monotonic(), b"\r\nretry-after:" in head)
            self.send()


def _length(head: bytes) -> int:
    """The ``Content-Length`` of an answer's ``head`` (lowercased, without its blank line)."""
    at = head.find(b"\r\ncontent-length:")
    if at < 0:
        return 0
    end = head.find(b"\r\n", at + 2)
    return int(head[at + 17 : end if end >= 0 else len(head)])


class Crowd:
    """``connections`` closed loops of ``request`` (whole, as bytes) to ``host:port``."""

    def __init__(self, host: str, port: int, request: bytes, connections: int) -> None:
        self.host, self.port, self.request, self.connections = host, port, request, connections
        self.start = self.deadline = 0.0
        self.failed = 0
        self.unretried = 0  # 503s without Retry-After
        self.answers: list[tuple[int, float, float]] = []  # status, sent (s), latency (s)
        self.opened: list[_Connection] = []

    def record(self, status: int, sent: float, now: float, retry_after: bool) -> None:
        self.answers.append((status, sent - self.start, now - sent))
        if status == 503 and not retry_after:
            self.unretried += 1

    async def run(self, seconds: float, ramp: float = 0.0) -> None:
        loop = asyncio.get_running_loop()
        self.start = time.monotonic()
        self.deadline = self.start + seconds

        async def one() -> None:
            try:
                _, connection = await loop.create_connection(
                    lambda: _Connection(self), self.host, self.port
                )
                self.opened.append(connection)
            except OSError:
                self.failed += 1

        tasks = []
        for number in range(self.connections):
            tasks.append(asyncio.ensure_future(one()))
            if ramp and number % 50 == 49:
                await asyncio.sleep(ramp * 50 / self.connections)
        await asyncio.gather(*tasks)
        await asyncio.sleep(max(0.0, self.deadline - time.monotonic()) + GRACE)
        for connection in self.opened:
            if connection.transport is not None:
                connection.transport.close()

    def report(self, seconds: float) -> dict[str, Any]:
        statuses = sorted({status for status, _, _ in self.answers})
        return {
            "connections": self.connections,
            "failed_to_open": self.failed,
            "answered_connections": sum(1 for c in self.opened if c.answered),
            "unretried_503": self.unretried,
            "by_status": {
                str(status): summary([lat for s, _, lat in self.answers if s == status])
                for status in statuses
            },
            "answered": summary([lat for s, _, lat in self.answers if s != 503]),
            "all": summary([lat for _, _, lat in self.answers]),
            "by_second": [
                {
                    "second": second,
                    "shed": sum(
                        1 for s, t, _ in self.answers if second <= t < second + 1 and s == 503
                    ),
                    **summary([lat for _, t, lat in self.answers if second <= t < second + 1]),
                }
                for second in range(int(seconds))
            ],
        }


def summary(latencies: list[float]) -> dict[str, Any]:
    """How many, and the 50th and 99th percentiles and the most, in ms."""
    ordered = sorted(latencies)

    def at(q: float) -> float | None:
        if not ordered:
            return None
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {"count": len(ordered), "p50": at(0.5), "p99": at(0.99), "max": at(1.0)}


def post(host: str, port: int, path: str, body: bytes) -> bytes:
    """One whole POST of ``body`` (JSON) to ``path``, as bytes."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def main(argv: list[str]) -> None:
    host, port, path, body_file = argv[0], int(argv[1]), argv[2], argv[3]
    connections, seconds = int(argv[4]), float(argv[5])
    ramp = float(argv[6]) if len(argv) > 6 else 0.0
    with open(body_file, "rb") as file:
        request = post(host, port, path, file.read())
    try:
        import uvloop
    except ImportError:
        loop = asyncio.new_event_loop()
    else:
        loop = uvloop.new_event_loop()
    crowd = Crowd(host, port, request, connections)
    try:
        loop.run_until_complete(crowd.run(seconds, ramp))
    finally:
        loop.close()
    print(json.dumps(crowd.report(seconds)))


if __name__ == "__main__":
    main(sys.argv[1:])
