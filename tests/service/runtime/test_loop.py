"""The service's event loop (``runtime.loop``): a uvloop loop whose plain TCP servers accept
every connection waiting on the listener at each readiness, where uvloop's own accepts one per
turn of the loop.

The connections are made before the loop runs (a blocking ``connect`` completes in the
kernel's backlog), so what is counted is exactly what a few turns of the loop accept.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratekeeper.service.runtime.loop import Listener, new_event_loop

uvloop = pytest.importorskip("uvloop")

CONNECTIONS = 300
TURNS = 3


class Counted(asyncio.Protocol):
    """A protocol that keeps its transport in ``made``."""

    def __init__(self, made: list[asyncio.BaseTransport]) -> None:
        self.made = made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(transport)


#: Seconds before a test that would otherwise hang fails instead (a guard, not a measure).
HANG = 10.0


class Echo(asyncio.Protocol):
    """Writes back what it receives, in capitals."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.WriteTransport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.transport.write(data.upper())


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = new_event_loop()
    yield made
    made.close()


def listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def accepted_in_turns(
    loop: asyncio.AbstractEventLoop, connections: int, turns: int
) -> tuple[list[int], asyncio.AbstractServer]:
    """Serve a listener on ``loop``, connect ``connections`` clients before it runs, then run
    ``turns`` turns: the count of connections made after each, and the server."""
    made: list[asyncio.BaseTransport] = []
    sock = listening()
    clients: list[socket.socket] = []
    try:
        server = loop.run_until_complete(
            loop.create_server(lambda: Counted(made), sock=sock, backlog=1024)
        )
        for _ in range(connections):
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            clients.append(client)
            client.connect(sock.getsockname())  # completes in the kernel's backlog
        assert made == []  # the loop has not run since
        counts = []
        for _ in range(turns):
            loop.run_until_complete(asyncio.sleep(0))
            counts.append(len(made))
        server.close()
        for transport in made:
            transport.close()
        loop.run_until_complete(asyncio.sleep(0))
        return counts, server
    finally:
        for client in clients:
            client.close()
        sock.close()
        loop.run_until_complete(asyncio.sleep(0))


def test_every_waiting_connection_is_accepted_in_a_few_turns(
    loop: asyncio.AbstractEventLoop,
) -> None:
    counts, server = accepted_in_turns(loop, CONNECTIONS, TURNS)
    assert isinstance(server, Listener)
    assert counts[-1] == CONNECTIONS
    assert counts == [CONNECTIONS] * TURNS  # all of them at the first readiness


def test_uvloop_s_own_server_accepts_far_fewer_in_as_many_turns() -> None:
    # why the Listener exists: uvloop (libuv 1.45+) accepts one connection per turn
    plain = uvloop.new_event_loop()
    try:
        counts, server = accepted_in_turns(plain, CONNECTIONS, TURNS)
    finally:
        plain.close()
    assert not isinstance(server, Listener)
    assert counts[-1] < CONNECTIONS


class Recorded(Listener):
    """A ``Listener`` that counts the connections it accepts at each readiness."""

    bursts: list[int]

    def _accept(self, sock: socket.socket) -> None:
        before = len(self._connecting)
        super()._accept(sock)
        self.bursts.append(len(self._connecting) - before)


def test_a_listener_accepts_at_most_its_backlog_at_each_readiness(
    loop: asyncio.AbstractEventLoop,
) -> None:
    made: list[asyncio.BaseTransport] = []
    sock = listening()
    sock.listen(64)
    clients = []
    try:
        for _ in range(30):  # queued while the socket listens with 64
            client = socket.socket()
            clients.append(client)
            client.connect(sock.getsockname())
        Recorded.bursts = []
        listener = Recorded(loop, lambda: Counted(made), [sock], 10)  # 10 at a time
        for _ in range(TURNS * 3):
            loop.run_until_complete(asyncio.sleep(0))
        assert Recorded.bursts == [10, 10, 10]
        assert len(made) == 30
        listener.close()
        for transport in made:
            transport.close()
    finally:
        for client in clients:
            client.close()
        sock.close()
        loop.run_until_complete(asyncio.sleep(0))


def test_data_flows_through_an_accepted_connection(loop: asyncio.AbstractEventLoop) -> None:
    async def exchange() -> list[bytes]:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        assert isinstance(server, Listener)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answers = []
        for message in (b"hello\n", b"again\n"):
            writer.write(message)
            await writer.drain()
            answers.append(await asyncio.wait_for(reader.readline(), HANG))
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return answers

    assert loop.run_until_complete(exchange()) == [b"HELLO\n", b"AGAIN\n"]


def test_many_clients_each_get_their_own_answers(loop: asyncio.AbstractEventLoop) -> None:
    async def exchange() -> list[bytes]:
        sock = listening()
        server = await loop.create_server(Echo, sock=sock, backlog=512)
        port = sock.getsockname()[1]
        streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(50)]
        for index, (_, writer) in enumerate(streams):
            writer.write(b"client %d\n" % index)
        answers = [await asyncio.wait_for(reader.readline(), HANG) for reader, _ in streams]
        for _, writer in streams:
            writer.close()
            await writer.wait_closed()
        server.close()
        sock.close()
        return answers

    assert loop.run_until_complete(exchange()) == [b"CLIENT %d\n" % i for i in range(50)]


def test_close_closes_the_sockets_it_bound_from_host_and_port(
    loop: asyncio.AbstractEventLoop,
) -> None:
    server = loop.run_until_complete(loop.create_server(Echo, "127.0.0.1", 0))
    assert isinstance(server, Listener)
    assert server.is_serving() and server.get_loop() is loop
    sockets = server.sockets
    assert len(sockets) == 1 and sockets[0].getsockname()[0] == "127.0.0.1"
    port = sockets[0].getsockname()[1]
    server.close()
    assert not server.is_serving()
    assert [sock.fileno() for sock in sockets] == [-1]
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass
    server.close()  # twice: nothing more
    loop.run_until_complete(server.wait_closed())


def test_close_leaves_a_socket_it_was_given_to_its_giver(
    loop: asyncio.AbstractEventLoop,
) -> None:
    sock = listening()
    try:
        server = loop.run_until_complete(loop.create_server(Echo, sock=sock))
        assert isinstance(server, Listener)
        assert server.sockets == (sock,)
        server.close()
        assert not server.is_serving()
        assert sock.fileno() != -1
        assert sock.getsockname()[0] == "127.0.0.1"  # still open, still bound
        # still listening: the kernel completes a connection, which nothing accepts now
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        sock.close()


def test_a_listener_given_a_socket_serves_it_again_on_a_new_listener(
    loop: asyncio.AbstractEventLoop,
) -> None:
    sock = listening()
    try:
        first = loop.run_until_complete(loop.create_server(Echo, sock=sock))
        first.close()

        async def exchange() -> bytes:
            second = await loop.create_server(Echo, sock=sock)
            reader, writer = await asyncio.open_connection(*sock.getsockname())
            writer.write(b"x\n")
            answer = await asyncio.wait_for(reader.readline(), HANG)
            writer.close()
            await writer.wait_closed()
            second.close()
            return answer

        assert loop.run_until_complete(exchange()) == b"X\n"
    finally:
        sock.close()


@pytest.mark.parametrize(
    "options",
    [{"reuse_port": True}, {"start_serving": True}],
)
def test_a_server_with_other_options_is_uvloop_s_own(
    loop: asyncio.AbstractEventLoop, options: dict[str, Any]
) -> None:
    server = loop.run_until_complete(loop.create_server(Echo, "127.0.0.1", 0, **options))
    try:
        assert not isinstance(server, Listener)
    finally:
        server.close()
        loop.run_until_complete(server.wait_closed())


def test_the_loop_is_uvloop_s() -> None:
    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_the_listener_is_not_the_loop_s_to_serve_forever(loop: asyncio.AbstractEventLoop) -> None:
    sock = listening()
    try:
        server = loop.run_until_complete(loop.create_server(Echo, sock=sock))
        assert loop.run_until_complete(server.start_serving()) is None
        with pytest.raises(NotImplementedError):
            loop.run_until_complete(server.serve_forever())
        server.close()
    finally:
        sock.close()


def unix_listener(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    return sock


def test_a_unix_socket_given_to_create_server_is_served(
    loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    path = str(tmp_path / "s")
    sock = unix_listener(path)
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    made: list[asyncio.BaseTransport] = []
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server = loop.run_until_complete(
            loop.create_server(lambda: Counted(made), sock=sock, backlog=8)
        )
        client.connect(path)
        for _ in range(TURNS):
            loop.run_until_complete(asyncio.sleep(0))
        server.close()
        for transport in made:
            transport.close()
        assert errors == []
        assert len(made) == 1
    finally:
        for context in errors:  # close the connection the Listener accepted and dropped
            trace = getattr(context.get("exception"), "__traceback__", None)
            while trace is not None:
                dropped = trace.tb_frame.f_locals.get("conn")
                if isinstance(dropped, socket.socket):
                    dropped.close()
                trace = trace.tb_next
        errors.clear()
        client.close()
        sock.close()
        loop.run_until_complete(asyncio.sleep(0))
