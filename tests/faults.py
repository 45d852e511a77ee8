"""A TCP proxy on loopback that breaks the network between ratekeeper and its servers on command.

``FaultProxy(port)`` listens on a free loopback port (``.port``) and forwards every connection
to 127.0.0.1:``port`` (a redis-server, a PostgreSQL server), byte for byte, until told
otherwise. It runs its own event loop in a thread of its own, so a test drives it from plain
code while the processes under test talk through it. The faults:

``latency(seconds)``
    every chunk the server sends back is held ``seconds`` before it is passed on: each round
    trip takes that much longer (chunks stay in order and are not serialised behind each
    other);
``loss(fraction, retransmit=0.2, seed=0)``
    TCP never loses bytes, it resends them after a retransmission timeout: so each chunk, in
    either direction, is held ``retransmit`` seconds with probability ``fraction`` (drawn from
    a generator seeded with ``seed``), and the chunks behind it wait for it, as on a real
    connection;
``stall()`` / ``resume()``
    nothing is forwarded any more, in either direction, and every connection (open or new)
    stays open, silent; ``resume`` passes on what was held, in order;
``reset()``
    every open connection is reset (RST, on both sides), as by a middlebox that lost its
    state;
``refuse()`` / ``drop()`` / ``accept()``
    new connections are refused (nothing listens on the port: ``ECONNREFUSED``), or accepted
    and reset at once; ``accept`` restores the listener. Open connections are left alone.
``clear()`` ends latency, loss and a stall.

``stats()`` counts what happened: connections accepted and reset, chunks forwarded and chunks
held as lost. ``close()`` stops the proxy and its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

T = TypeVar("T")

#: How much a proxy reads at once.
CHUNK = 65536


@dataclass
class Stats:
    """What a proxy did since it started."""

    accepted: int = 0
    reset: int = 0
    forwarded: int = 0
    lost: int = 0


@dataclass(eq=False)
class _Pipe:
    """One proxied connection: the client's side and the server's."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (RST) instead of a FIN: linger on, for zero seconds."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """A loopback TCP proxy to 127.0.0.1:``target``; see the module for its faults."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._latency = 0.0
        self._loss = 0.0
        self._retransmit = 0.2
        self._random = random.Random(0)
        self._mode = "accept"
        self._stats = Stats()
        self._pipes: set[_Pipe] = set()
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.port: int = self._run(self._listen(0))

    # -- commands ---------------------------------------------------------------------------

    def latency(self, seconds: float) -> None:
        if not 0.0 <= seconds < math.inf:
            raise ValueError(f"a latency is seconds from 0, not {seconds!r}")
        self._call(lambda: setattr(self, "_latency", float(seconds)))

    def loss(self, fraction: float, retransmit: float = 0.2, seed: int = 0) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"a loss is a fraction from 0 to 1, not {fraction!r}")
        if not 0.0 <= retransmit < math.inf:
            raise ValueError(f"a retransmission takes seconds from 0, not {retransmit!r}")

        def set_loss() -> None:
            self._loss, self._retransmit = float(fraction), float(retransmit)
            self._random = random.Random(seed)

        self._call(set_loss)

    def stall(self) -> None:
        self._call(self._flowing.clear)

    def resume(self) -> None:
        self._call(self._flowing.set)

    def clear(self) -> None:
        """No latency, no loss, no stall."""

        def clear() -> None:
            self._latency = self._loss = 0.0
            self._flowing.set()

        self._call(clear)

    def reset(self) -> int:
        """Reset every open connection; how many there were."""
        return self._run(self._reset())

    def refuse(self) -> None:
        self._run(self._set_mode("refuse"))

    def drop(self) -> None:
        self._run(self._set_mode("drop"))

    def accept(self) -> None:
        self._run(self._set_mode("accept"))

    def stats(self) -> Stats:
        return self._run(self._copy_stats())

    def close(self) -> None:
        if not self._loop.is_running():
            return
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the loop's side ---------------------------------------------------------------------

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    def _call(self, action: Callable[[], object]) -> None:
        async def call() -> None:
            action()

        self._run(call())

    async def _copy_stats(self) -> Stats:
        return replace(self._stats)

    async def _listen(self, port: int) -> int:
        self._server = await asyncio.start_server(
            self._connected, "127.0.0.1", port, reuse_address=True, backlog=1024
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def _set_mode(self, mode: str) -> None:
        if mode == "refuse" and self._server is not None:
            self._server.close()  # closes the listening socket now; open connections stay
            self._server = None
        elif mode != "refuse" and self._server is None:
            await self._listen(self.port)
        self._mode = mode

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._stats.accepted += 1
        if self._mode != "accept":
            _abort(writer)
            return
        try:
            upstream, server = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            _abort(writer)
            return
        pipe = _Pipe(writer, server)
        self._pipes.add(pipe)
        pipe.tasks = [
            asyncio.create_task(self._pump(reader, server, pipe, answers=False)),
            asyncio.create_task(self._pump(upstream, writer, pipe, answers=True)),
        ]

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        pipe: _Pipe,
        answers: bool,
    ) -> None:
        """Read chunks from ``source``; a second task writes each to ``sink`` once due."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        writing = asyncio.create_task(self._write(queue, sink))
        try:
            while chunk := await source.read(CHUNK):
                delay = self._latency if answers else 0.0
                if self._loss and self._random.random() < self._loss:
                    self._stats.lost += 1
                    delay += self._retransmit
                queue.put_nowait((time.monotonic() + delay, chunk))
            queue.put_nowait((0.0, b""))  # the end: pass the FIN on once the rest is written
            await writing
        except (ConnectionError, OSError):  # one side reset: so is the other
            _abort(pipe.client)
            _abort(pipe.server)
        finally:
            writing.cancel()
            self._end(pipe)

    async def _write(
        self, queue: asyncio.Queue[tuple[float, bytes]], sink: asyncio.StreamWriter
    ) -> None:
        while True:
            due, chunk = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await self._flowing.wait()
            if not chunk:
                if sink.can_write_eof():
                    sink.write_eof()
                return
            sink.write(chunk)
            self._stats.forwarded += 1
            await sink.drain()

    def _end(self, pipe: _Pipe) -> None:
        """Close both sides once both directions have ended."""
        others = [task for task in pipe.tasks if task is not asyncio.current_task()]
        if pipe in self._pipes and all(task.done() for task in others):
            self._pipes.discard(pipe)
            pipe.client.close()
            pipe.server.close()

    async def _reset(self) -> int:
        pipes = list(self._pipes)
        for pipe in pipes:
            _abort(pipe.client)
            _abort(pipe.server)
            for task in pipe.tasks:
                task.cancel()
            self._pipes.discard(pipe)
        self._stats.reset += len(pipes)
        return len(pipes)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._reset()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
