"""The fault proxy does what each fault says, between a plain client and a real redis-server."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator

import pytest

from tests.faults import FaultProxy
from tests.servers import RedisServer

PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as proxy:
        yield proxy


def connect(proxy: FaultProxy, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)


def ping(sock: socket.socket) -> float:
    """One PING on ``sock``; the seconds its PONG took."""
    start = time.monotonic()
    sock.sendall(PING)
    assert sock.recv(64) == PONG
    return time.monotonic() - start


def test_bytes_pass_through_unchanged(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"*3\r\n$3\r\nSET\r\n$9\r\nfaults:pt\r\n$5\r\nvalue\r\n")
        assert sock.recv(64) == b"+OK\r\n"
        sock.sendall(b"*2\r\n$3\r\nGET\r\n$9\r\nfaults:pt\r\n")
        assert sock.recv(64) == b"$5\r\nvalue\r\n"
    stats = proxy.stats()
    assert (stats.accepted, stats.lost, stats.reset) == (1, 0, 0)


def test_latency_delays_every_answer(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        assert ping(sock) < 0.2
        proxy.latency(0.2)
        assert all(ping(sock) >= 0.2 for _ in range(3))
        proxy.clear()
        assert ping(sock) < 0.2


def test_loss_holds_a_seeded_fraction_of_chunks_for_a_retransmission(proxy: FaultProxy) -> None:
    proxy.loss(0.3, retransmit=0.2, seed=7)
    with connect(proxy) as sock:
        times = [ping(sock) for _ in range(40)]
    lost = proxy.stats().lost
    slow = sum(took >= 0.2 for took in times)
    # Each round trip is two chunks, PING up and PONG down, each drawn in turn from the seeded
    # generator; a round trip with a lost chunk is slow, by one or two retransmissions.
    draws = random.Random(7)
    assert lost == sum(draws.random() < 0.3 for _ in range(80))
    assert 0 < slow <= lost <= 2 * slow


def test_stall_holds_the_connection_open_and_resume_delivers(proxy: FaultProxy) -> None:
    with connect(proxy, timeout=0.5) as sock:
        ping(sock)
        proxy.stall()
        sock.sendall(PING)
        with pytest.raises(TimeoutError):
            sock.recv(64)
        with connect(proxy, timeout=0.5) as other:  # new connections are held too
            other.sendall(PING)
            with pytest.raises(TimeoutError):
                other.recv(64)
            proxy.resume()
            assert other.recv(64) == PONG
        assert sock.recv(64) == PONG  # held, not lost: the connection was open all along


def test_reset_resets_every_open_connection(proxy: FaultProxy) -> None:
    with connect(proxy) as first, connect(proxy) as second:
        ping(first)
        ping(second)
        assert proxy.reset() == 2
        for sock in (first, second):
            with pytest.raises(ConnectionResetError):
                sock.sendall(PING)
                sock.recv(64)
    with connect(proxy) as sock:  # new connections pass again
        ping(sock)


def test_refuse_then_accept(proxy: FaultProxy) -> None:
    with connect(proxy) as open_before:
        ping(open_before)  # accepted: not in the listener's queue when it closes
        proxy.refuse()
        with pytest.raises(ConnectionRefusedError):
            connect(proxy)
        ping(open_before)  # open connections are left alone
        proxy.accept()
        with connect(proxy) as sock:
            ping(sock)


def test_drop_resets_new_connections(proxy: FaultProxy) -> None:
    proxy.drop()
    with pytest.raises(ConnectionResetError), connect(proxy) as sock:  # the reset may come
        sock.sendall(PING)  # before connect() has even returned
        sock.recv(64)
    proxy.accept()
    with connect(proxy) as sock:
        ping(sock)
