"""The service's event loop: uvloop where it is installed, accepting every connection waiting
on a listener each time the listener is ready, as asyncio's own loop does.

uvloop's libuv accepts one connection per turn of the loop (libuv 1.45 and later). A turn of a
busy service takes tens of milliseconds, so under load a listener drains some fifty
connections a second: a burst of thousands fills the kernel's accept queue, the rest are
dropped and retried by the clients' kernels for seconds, and a probe or a scrape that opens a
connection then goes unanswered. ``new_event_loop()`` returns a uvloop loop whose
``create_server`` on plain TCP accepts in a loop instead, up to its ``backlog`` at a time,
and hands each connection to uvloop's own transports (``connect_accepted_socket``): the
requests on them are served by uvloop as before. Without uvloop it is asyncio's loop.

uvicorn takes ``new_event_loop`` as its loop factory (``loop="...:new_event_loop"``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("ratekeeper.service")

#: Seconds a listener rests after the process ran out of file descriptors.
REST = 1.0
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Listener(asyncio.AbstractServer):
    """Listening ``sockets`` whose waiting connections ``loop`` accepts, up to ``backlog`` at
    each readiness, each served by a protocol from ``factory``. ``close()`` stops accepting,
    and closes the sockets if ``own`` (those it was given are their giver's to close)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.BaseProtocol],
        sockets: Sequence[socket.socket],
        backlog: int,
        *,
        own: bool = False,
    ) -> None:
        self._loop, self._factory, self._sockets = loop, factory, tuple(sockets)
        self._most = max(1, backlog)
        self._own = own
        self._serving = False
        self._closed = False
        self._connecting: set[asyncio.Task[Any]] = set()
        for sock in self._sockets:
            sock.setblocking(False)
            sock.listen(backlog)
        self._listen()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return self._sockets

    def _listen(self) -> None:
        if self._closed or self._serving:
            return
        self._serving = True
        for sock in self._sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(self._most):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:
                if error.errno not in _OUT_OF_FILES:
                    raise
                log.error("could not accept a connection (%s); resting %g s", error, REST)
                self._pause()
                self._loop.call_later(REST, self._listen)
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self._loop.create_task(self._loop.connect_accepted_socket(self._factory, conn))
            self._connecting.add(task)
            task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[Any]) -> None:
        self._connecting.discard(task)
        if not task.cancelled() and task.exception() is not None:  # closed before served
            log.debug("a connection closed as it was accepted: %s", task.exception())

    def _pause(self) -> None:
        if self._serving:
            self._serving = False
            for sock in self._sockets:
                self._loop.remove_reader(sock.fileno())

    def close(self) -> None:
        self._pause()
        if not self._closed:
            self._closed = True
            if self._own:
                for sock in self._sockets:
                    sock.close()

    def is_serving(self) -> bool:
        return self._serving

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def start_serving(self) -> None:
        return None

    async def serve_forever(self) -> None:
        raise NotImplementedError("the service's server runs the loop")

    async def wait_closed(self) -> None:
        return None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop that accepts every waiting connection, or asyncio's loop without
    uvloop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = _loop_class(uvloop.Loop)()
    return loop


def _loop_class(base: type) -> type:
    class EagerAccept(base):  # type: ignore[misc]
        """``base``, whose plain TCP servers accept every waiting connection."""

        async def create_server(
            self,
            protocol_factory: Callable[[], asyncio.BaseProtocol],
            host: str | None = None,
            port: int | None = None,
            *,
            sock: socket.socket | None = None,
            backlog: int = 100,
            ssl: Any = None,
            **options: Any,
        ) -> asyncio.AbstractServer:
            if ssl is None and not options:
                if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                    return Listener(self, protocol_factory, [sock], backlog)
                if sock is None and host is not None and port is not None:
                    sockets = [_bound(info, backlog) for info in _addresses(host, port)]
                    return Listener(self, protocol_factory, sockets, backlog, own=True)
            server: asyncio.AbstractServer = await super().create_server(
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl, **options
            )
            return server  # TLS, a Unix socket, or what only uvloop's own server takes

    return EagerAccept


def _addresses(host: str, port: int) -> list[tuple[Any, ...]]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    unique = {(family, address): (family, address) for family, _, _, _, address in infos}
    return list(unique.values())


def _bound(info: tuple[Any, ...], backlog: int) -> socket.socket:
    """A socket listening on ``info`` (a family and an address), as asyncio binds one:
    ``SO_REUSEADDR``, and IPv6 only on an IPv6 address."""
    family, address = info
    return socket.create_server(address, family=family, backlog=backlog)
