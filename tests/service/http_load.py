"""Many HTTP/1.1 requests at once, each on a connection of its own, and what became of each.

``exchange(port, request)`` opens one connection to 127.0.0.1:``port``, sends one request and
reads the answer with h11 until the answer has ended, so that a complete answer is told apart
from one cut short. It never raises for the network: the ``Exchange`` it returns says what
happened (``status`` when an answer came whole, else ``error``) and when (``time.monotonic``):
when the connection was made, when the request had been written, when it ended.
``hammer(port, requests)`` runs one ``exchange`` per request, all at once; ``burst(port,
requests)`` too, but has every request arrive at the same moment: each connection is made and
its request written but for its last byte, and once every one has been, the last bytes go
together.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import h11

#: What ``Exchange.error`` may say.
REFUSED = "refused"  # the connection was refused: nothing listens any more
RESET = "reset"  # the peer reset the connection before any byte of an answer
CLOSED = "closed"  # the peer closed the connection before any byte of an answer
TRUNCATED = "truncated"  # the answer began, then the connection ended before the answer did
TIMEOUT = "timeout"  # no complete answer within the timeout
INVALID = "invalid"  # bytes that are not an HTTP/1.1 answer


@dataclass(frozen=True)
class Request:
    """One HTTP/1.1 request; ``Connection: close`` is added, ``Content-Length`` for a body."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def events(self) -> tuple[h11.Request, h11.Data, h11.EndOfMessage]:
        headers = [("Host", "127.0.0.1"), ("Connection", "close"), *self.headers]
        if self.body or self.method in ("POST", "PUT"):
            headers.append(("Content-Length", str(len(self.body))))
        return (
            h11.Request(method=self.method, target=self.path, headers=headers),
            h11.Data(data=self.body),
            h11.EndOfMessage(),
        )

    def encode(self) -> bytes:
        """The request's bytes, as ``exchange`` writes them."""
        state = h11.Connection(our_role=h11.CLIENT)
        return b"".join(state.send(event) or b"" for event in self.events())


@dataclass(frozen=True)
class Exchange:
    """One request on its own connection. ``status`` and ``headers`` (names in lower case) of
    an answer that came whole, else ``error``; ``local_port`` is the client's port (0 when no
    connection was made)."""

    status: int | None
    error: str | None
    headers: dict[str, str]
    body: bytes
    local_port: int
    started: float
    connected: float | None
    sent: float | None
    ended: float

    @property
    def answered(self) -> bool:
        return self.status is not None


async def exchange(
    port: int,
    request: Request,
    *,
    timeout: float = 60.0,
    pause: asyncio.Event | None = None,
    split: int | None = None,
    held: Callable[[], None] | None = None,
) -> Exchange:
    """Send ``request`` to 127.0.0.1:``port`` on a new connection and read the answer.

    With ``split``, only the first ``split`` bytes of the request are written at first; the
    rest once ``pause`` is set (the request is then in the server's hands, unfinished), and
    ``held`` is called in between."""
    started = time.monotonic()
    connected = sent = None
    local_port = 0
    state = h11.Connection(our_role=h11.CLIENT)
    received = 0
    writer: asyncio.StreamWriter | None = None

    def ended(
        error: str | None, status: int | None = None, headers: dict[str, str] | None = None
    ) -> Exchange:
        return Exchange(
            status, error, headers or {}, bytes(body), local_port, started, connected, sent,
            time.monotonic(),
        )  # fmt: skip

    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except ConnectionRefusedError:
                return ended(REFUSED)
            connected = time.monotonic()
            local_port = writer.get_extra_info("sockname")[1]
            data = b"".join(state.send(event) or b"" for event in request.events())
            if split is not None and pause is not None:
                writer.write(data[:split])
                await writer.drain()
                if held is not None:
                    held()
                await pause.wait()
                data = data[split:]
            writer.write(data)
            await writer.drain()
            sent = time.monotonic()
            status, headers = None, {}
            while True:
                event = state.next_event()
                if event is h11.NEED_DATA:
                    chunk = await reader.read(65536)
                    if not chunk:
                        if received == 0:
                            return ended(CLOSED)
                        return ended(TRUNCATED)
                    received += len(chunk)
                    state.receive_data(chunk)
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    headers = {n.decode().lower(): v.decode() for n, v in event.headers}
                elif isinstance(event, h11.Data):
                    body.extend(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    return ended(None, status, headers)
                elif isinstance(event, h11.ConnectionClosed):
                    return ended(TRUNCATED if received else CLOSED)
    except TimeoutError:
        return ended(TIMEOUT)
    except (ConnectionResetError, BrokenPipeError):
        return ended(TRUNCATED if received else RESET)
    except h11.RemoteProtocolError:
        return ended(INVALID)
    finally:
        if writer is not None:
            writer.close()


async def hammer(
    port: int, requests: Iterable[Request], *, timeout: float = 60.0
) -> list[Exchange]:
    """Every request at once, each on its own connection; the exchanges in the same order."""
    return list(await asyncio.gather(*(exchange(port, one, timeout=timeout) for one in requests)))


async def burst(
    port: int,
    requests: Sequence[Request],
    *,
    timeout: float = 60.0,
    before: Callable[[], Awaitable[object]] | None = None,
) -> list[Exchange]:
    """Every request on its own connection, all but its last byte written first; then, once
    every connection holds its request so (and ``before()`` has been awaited), the last bytes
    at once: the server reads them all in the same moment. The exchanges in the same order;
    ``timeout`` counts from the start."""
    release = asyncio.Event()
    waiting = len(requests)
    tasks: set[asyncio.Task[object]] = set()

    async def released() -> None:
        if before is not None:
            await before()
        release.set()

    def held() -> None:
        nonlocal waiting
        waiting -= 1
        if waiting == 0:
            tasks.add(asyncio.ensure_future(released()))

    async def one(request: Request) -> Exchange:
        counted = False

        def counted_once() -> None:
            nonlocal counted
            if not counted:
                counted = True
                held()

        split = len(request.encode()) - 1
        try:
            return await exchange(
                port, request, timeout=timeout, pause=release, split=split, held=counted_once
            )
        finally:
            counted_once()  # one that failed before it held its request releases the others

    return list(await asyncio.gather(*(one(request) for request in requests)))


def tally(exchanges: Sequence[Exchange]) -> Counter[int | str]:
    """How many answers of each status, and how many of each error."""
    return Counter(one.status if one.status is not None else str(one.error) for one in exchanges)
