"""The connection an asyncio store sends its batches on: ``Pipe``, a bare asyncio protocol.

A round trip through redis-py (a connection taken from the pool and given back, a task, an
asyncio timeout, a stream read, the reply parsed through its parser's layers) costs the client
several times what the batch it carries does; under a server that hands the store about one
call per event-loop turn, as ``grpc.aio`` does, every batch holds about one hit and pays it all.
A ``Pipe`` is one connection of the store's own: redis-py opens it (``open_pipe``: the
connection class of the client's pool, so TLS, a Unix socket, AUTH, HELLO, SELECT and a
Sentinel's master are redis-py's), and the pipe then takes its transport over. A batch is one
write of a command that hiredis packed; hiredis parses the reply in ``data_received``, where
the pipe hands it to the batch's callback at once: no task, no stream, no future of its own. Its
round trip is timed by a ``deadlines.Watch`` (one ``loop.call_at``), as fairly as ``Deadline``
times redis-py's.

One batch is in flight at a time. A pipe whose connection is lost, whose batch timed out or
whose reply cannot be parsed is closed for good (``closed``), and its batch's callback hears why
(a ``redis.ConnectionError`` or ``redis.TimeoutError``; a script's error reply comes as the
``ResponseError`` redis-py would have raised, and leaves the pipe open).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.stores.redis.deadlines import Deadline, Watch

try:
    import hiredis
    import redis
    import redis.asyncio
    from redis._parsers import BaseParser
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("redis", "redis") from error

#: What a batch's callback is given: the reply, or the error that stands for it.
Done = Callable[[Any, BaseException | None], None]


def _error(reply: hiredis.ReplyError) -> Exception:
    """The exception redis-py raises for an error reply (``NoScriptError`` for NOSCRIPT...)."""
    error: Exception = BaseParser.parse_error(str(reply))  # type: ignore[no-untyped-call]
    return error


class Pipe(asyncio.Protocol):
    """One connection of the store's own, and the batch in flight on it, if any (see the
    module). ``send(command, done)`` writes ``command`` (packed) and calls ``done(reply,
    None)`` when its reply is read, or ``done(None, error)``; ``close()`` closes it, and calls
    the callback of the batch in flight with a ``redis.ConnectionError``."""

    def __init__(
        self, transport: asyncio.Transport, deadline: Deadline | None, owner: object = None
    ) -> None:
        self.transport = transport
        #: What opened the transport, kept as long as the pipe: an asyncio ``StreamWriter``
        #: closes its transport when it is collected.
        self.owner = owner
        self.deadline = deadline
        self.loop = asyncio.get_running_loop()
        self.reader = hiredis.Reader()
        self.closed = False
        #: The batches sent so far.
        self.sent = 0
        self._done: Done | None = None  # the callback of the batch in flight
        self._started = 0.0  # when it was sent (the loop's time)
        self._watch: Watch | None = None

    @property
    def busy(self) -> bool:
        """Whether a batch is in flight."""
        return self._done is not None

    def send(self, command: bytes, done: Done) -> None:
        """Write ``command``; ``done`` hears of its reply. One batch at a time: raises
        ``RuntimeError`` when one is in flight or the pipe is closed."""
        if self._done is not None or self.closed:
            raise RuntimeError("a pipe carries one batch at a time, and only while it is open")
        self._done = done
        self.sent += 1
        deadline = self.deadline
        if deadline is not None:
            self._started = started = self.loop.time()
            self._watch = deadline.watch(self.loop, started, self._timed_out)
        self.transport.write(command)

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        try:
            reply = reader.gets()
        except hiredis.ProtocolError as error:
            self._fail(redis.ConnectionError(f"redis: unreadable reply ({error})"))
            return
        if reply is False:  # not all of it yet
            return
        if self._done is None or reader.has_data():  # a reply no batch asked for
            self._fail(redis.ConnectionError("redis: a reply no batch asked for"))
            return
        done, self._done = self._done, None
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.handle.cancel()
        if isinstance(reply, hiredis.ReplyError):
            done(None, _error(reply))
        else:
            done(reply, None)

    def connection_lost(self, exc: Exception | None) -> None:
        cause = f" ({exc})" if exc is not None else ""
        self._fail(redis.ConnectionError(f"Connection closed by server{cause}"))

    def close(self) -> None:
        self._fail(redis.ConnectionError("the store closed its connection"))

    def _timed_out(self) -> None:
        deadline = self.deadline
        assert deadline is not None  # only a deadline's watch calls it
        took = self.loop.time() - self._started
        self._fail(
            redis.TimeoutError(f"no answer in {took:.3f} s (timeout {deadline.timeout:g} s)")
        )

    def _fail(self, error: BaseException) -> None:
        """Close the pipe for good; the batch in flight, if any, fails with ``error``."""
        self.closed = True
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.handle.cancel()
        if not self.transport.is_closing():
            self.transport.abort()  # a reply still on its way must never be read as another's
        done, self._done = self._done, None
        if done is not None:
            done(None, error)


def pack(args: tuple[Any, ...]) -> bytes:
    """A command, packed by hiredis (its ``str`` arguments in UTF-8)."""
    packed: bytes = hiredis.pack_command(args)
    return packed


def pipeable(client: Any) -> bool:
    """Whether batches to ``client`` can go through a ``Pipe``: a ``redis.asyncio.Redis`` (not a
    cluster) speaking RESP2 and encoding in UTF-8."""
    if not isinstance(client, redis.asyncio.Redis):
        return False
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    return (
        isinstance(kwargs, dict)
        and kwargs.get("protocol") in (None, 2, "2")
        and str(kwargs.get("encoding", "utf-8")).lower().replace("_", "-") in ("utf-8", "utf8")
    )


def socket_deadline(client: Any) -> Deadline | None:
    """The deadline of a store that times no round trip itself: its client's socket timeout,
    as a plain timer (a cap as long as the timeout); None when it has none."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    timeout = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
    try:
        return None if timeout is None else Deadline(timeout, cap=timeout)
    except ValueError:  # not positive seconds: redis-py's own checks say so when it connects
        return None


async def open_pipe(client: Any, deadline: Deadline | None) -> Pipe | None:
    """A ``Pipe`` on a new connection to ``client``'s server, opened as ``client``'s own are;
    None if that connection turns out not to be one a pipe can take over. Raises what
    redis-py raises when it cannot connect."""
    pool = client.connection_pool
    connection = pool.connection_class(**pool.connection_kwargs)
    try:
        await connection.connect()
    except BaseException:
        with suppress(Exception):
            await connection.disconnect(nowait=True)
        raise
    writer = getattr(connection, "_writer", None)
    transport = getattr(writer, "transport", None)
    if transport is None or not hasattr(transport, "set_protocol"):
        await connection.disconnect()
        return None
    pipe = Pipe(transport, deadline, writer)
    # The connection hands its transport over: it no longer reads from it, nor closes it.
    connection._reader = connection._writer = None
    transport.set_protocol(pipe)
    return pipe
