"""The automatic batches of an ``AsyncRedisStore`` (``batch=True``): the calls of one
event-loop tick sent together, one batch in flight at a time, at most ``MAX_BATCH`` hits
(``Batcher``; the store's docstring says what a caller sees).

On one server (not a cluster), once a batch went through redis-py the store opens a
connection of its own, a ``pipe.Pipe``, and sends the batches on it: one write of a
command hiredis packed, the reply parsed in the protocol's callback, which settles the
callers' futures at once, timed by one ``loop.call_at`` (``deadlines.Watch``), with no
task, stream or asyncio timeout a batch. It is what a batch of one hit costs when calls
arrive one per loop turn. The guarantees are the same either way: a batch the server
cannot run for a script or library it lost (NOSCRIPT) goes again through redis-py, which
loads it; a pipe whose connection is lost, whose batch timed out or that got another
error reply is closed, its batch failing as redis-py's would, and the batches go through
redis-py until one gets through and a new pipe opens. The pipe is one connection more
than the client's pool holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import suppress
from math import inf
from typing import Any, Protocol

from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import MissingExtraError, StoreError
from ratekeeper.core.limits import Limit
from ratekeeper.stores.contract import Hit
from ratekeeper.stores.redis.batches import Batch
from ratekeeper.stores.redis.deadlines import Deadline
from ratekeeper.stores.redis.errors import ERRORS, TIMEOUTS, ShardError, client_fault, missing_from
from ratekeeper.stores.redis.pipe import Pipe, open_pipe, pack, pipeable, socket_deadline
from ratekeeper.stores.redis.scripts import decisions

try:
    from redis.crc import key_slot
    from redis.exceptions import ResponseError
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("redis", "redis") from error


#: The most hits one automatic batch sends. A script run holds the server for all of its hits
#: (a few microseconds each), so a burst goes as several runs, one after another, and no run
#: keeps the server's other clients waiting for long.
MAX_BATCH = 1000
#: Seconds between two attempts to open a pipe (``pipe.Pipe``) that failed to open.
PIPE_RETRY = 1.0

#: The batch on its way on the pipe: its hits, their callers' futures, and its keys.
Flight = tuple[list[Hit], list["asyncio.Future[Decision]"], list[str]]


class Sender(Protocol):
    """What a ``Batcher`` asks of its store (an ``AsyncRedisStore``): its client and the loop it
    serves, how a batch is split by slot and named, how one slot's run is sent, how its script
    is loaded, and how a failure and a shard are told."""

    client: Any
    clustered: bool
    _call: str
    _batch: str
    _loop: asyncio.AbstractEventLoop | None
    _script: Any

    def shard_of(self, key: str, limit: Limit) -> str: ...

    def _owner(self, slot: int) -> str: ...

    def _batches(
        self, hits: Sequence[Hit], now: float | None, all_or_nothing: bool, timed: bool = False
    ) -> list[Batch]: ...

    def _failure_of(self, keys: list[str], error: BaseException) -> Exception: ...

    async def _load(self, missing: str | None, script: Any) -> bool: ...

    async def _run(self, keys: list[str], argv: list[str]) -> Any: ...


class Batcher:
    """The hits of ``store``'s ``apply`` calls waiting for the next batch, the batch on its way,
    and the pipe the batches go on once one is open (see the module). ``add`` queues a hit for
    the end of the loop's tick; the store calls ``timed`` for each client it opens, ``renew``
    when it serves a new loop, and ``stop_opening`` and ``close_pipe`` when it closes."""

    def __init__(self, store: Sender) -> None:
        self.store = store
        self.hits: list[Hit] = []  # the hits of this tick, and their callers' futures
        self.futures: list[asyncio.Future[Decision]] = []
        self.sending: set[asyncio.Future[None]] = set()  # the batch on its way, if any
        self.flight: Flight | None = None  # or the batch on its way on the pipe
        self.pipe: Pipe | None = None  # the connection batches go on, once open (pipe.py)
        self.opening: asyncio.Future[None] | None = None  # a pipe on its way to open
        self.failed_at = -inf  # when a pipe last failed to open (the loop's time)
        self.pipeable = False  # whether the batches may go on a pipe
        self.deadline: Deadline | None = None  # what times a batch on the pipe
        self.warmed = False  # the script loaded and the pipe opened at the first ping

    def timed(self, batch: bool, deadline: Deadline | None) -> None:
        """Whether the batches may go on a pipe to the store's client (with ``batch``, to one
        server a pipe can take), each timed by ``deadline``, else by the client's socket
        timeout."""
        store = self.store
        self.pipeable = batch and not store.clustered and pipeable(store.client)
        self.deadline = deadline or socket_deadline(store.client)

    def renew(self) -> None:
        """Forget the hits, the batch and the pipe of a loop that closed."""
        self.hits, self.futures, self.sending = [], [], set()
        self.pipe = self.opening = self.flight = None

    def add(self, loop: asyncio.AbstractEventLoop, hit: Hit) -> asyncio.Future[Decision]:
        """Queue ``hit`` for the batch sent at the end of ``loop``'s tick (or after the one
        on its way); its decision comes in the future returned."""
        future: asyncio.Future[Decision] = loop.create_future()
        if not self.hits:
            loop.call_soon(self.flush)
        self.hits.append(hit)
        self.futures.append(future)
        return future

    def flush(self) -> None:
        """Send the waiting hits as one batch of at most ``MAX_BATCH``, unless a batch is on
        its way: then they go when it returns (``_sent``, ``_piped``), as do the hits past
        ``MAX_BATCH``. The batch goes on the pipe when one is open, else through redis-py."""
        if not self.hits or self.sending or self.flight is not None:
            return
        hits, futures = self.hits, self.futures
        if len(hits) > MAX_BATCH:
            self.hits, self.futures = hits[MAX_BATCH:], futures[MAX_BATCH:]
            hits, futures = hits[:MAX_BATCH], futures[:MAX_BATCH]
        else:
            self.hits, self.futures = [], []
        pipe = self.pipe
        if pipe is None:
            self._go(hits, futures)
        elif pipe.closed:
            self.pipe = None
            self._go(hits, futures)
        else:
            self._pipe_send(pipe, hits, futures)

    def _go(self, hits: list[Hit], futures: list[asyncio.Future[Decision]]) -> None:
        """Send a batch through redis-py, in a task (``_send``)."""
        task = asyncio.ensure_future(self._send(hits, futures))
        self.sending.add(task)
        task.add_done_callback(self._sent)

    def _pipe_send(
        self, pipe: Pipe, hits: list[Hit], futures: list[asyncio.Future[Decision]]
    ) -> None:
        """Send a batch on the pipe: ``_piped`` settles it."""
        try:
            store = self.store
            _, keys, argv = store._batches(hits, None, False)[0]
            command = pack((store._call, store._batch, len(keys), *keys, *argv))
        except BaseException as error:  # every waiter must hear of it
            _fail(futures, error)
            if not isinstance(error, Exception):
                raise
            return
        self.flight = (hits, futures, keys)
        pipe.send(command, self._piped)

    def _piped(self, reply: Any, error: BaseException | None) -> None:
        """The pipe's batch is back: settle its callers' futures, as ``_part`` does, and
        send the hits that waited. A batch the server could not run for a script or library
        it is missing (NOSCRIPT: restarted, flushed) goes again through redis-py, which loads
        it; a timeout fails the calls waiting as well (``_time_out_waiting``); any other
        failure closes the pipe, and the batches go through redis-py until one gets through."""
        flight, self.flight = self.flight, None
        if flight is None:  # pragma: no cover - the pipe calls back once per batch
            return
        hits, futures, keys = flight
        if error is None:
            try:
                for future, one in zip(futures, decisions(reply), strict=True):
                    if not future.done():
                        future.set_result(one)
            except Exception as bad:  # not a reply of the batch script: every waiter hears
                _fail(futures, bad)
        elif isinstance(error, ResponseError) and missing_from(error) is not None:
            self._go(hits, futures)  # nothing ran
            return
        else:
            mapped = self.store._failure_of(keys, error)
            _fail(futures, mapped)
            if isinstance(error, TIMEOUTS) and isinstance(mapped, StoreError):
                self._time_out_waiting(keys[0], mapped, error)
            # Any other error reply (a replica's READONLY after a Sentinel failover, LOADING)
            # closes the pipe too: the next one opens as redis-py connects, to the master.
            self.close_pipe()
        if self.hits:
            self.flush()

    async def warm(self) -> None:
        """At the store's first ping that succeeds: load the batches' script and open the
        pipe now, not with the first batches, which may be a burst's (through redis-py, they
        took seconds under one). A script that fails to load is loaded by the first batch."""
        if not self.pipeable or self.warmed:
            return
        self.warmed = True
        store = self.store
        with suppress(*ERRORS):
            await store._load("library" if store._call == "FCALL" else "script", store._script)
        self.open_soon()

    def open_soon(self) -> None:
        """Open a pipe in the background, unless one is open or opening, or the last attempt
        failed less than ``PIPE_RETRY`` seconds ago."""
        if ((pipe := self.pipe) is not None and not pipe.closed) or self.opening is not None:
            return
        if asyncio.get_running_loop().time() < self.failed_at + PIPE_RETRY:
            return
        self.opening = asyncio.ensure_future(self._open_pipe(self.store.client))

    async def _open_pipe(self, client: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            pipe = await open_pipe(client, self.deadline)
        except (*ERRORS, AttributeError, RuntimeError, TypeError):
            # Batches still go through redis-py, which says what is wrong if it is lasting.
            self.failed_at = loop.time()
            return
        finally:
            self.opening = None
        if pipe is None:  # a connection no pipe can take over: batches go through redis-py
            self.pipeable = False
        elif client is not self.store.client or self.store._loop is not loop:  # closed meanwhile
            pipe.close()
        else:
            self.pipe = pipe

    async def stop_opening(self) -> None:
        """Stop opening a pipe, if one is opening on the running loop: its connection closed."""
        opening = self.opening
        if opening is not None and opening.get_loop() is asyncio.get_running_loop():
            opening.cancel()
            await asyncio.wait([opening])  # not raising: this call may be cancelled itself
            if self.opening is opening:  # cancelled before it began, it cleared nothing
                self.opening = None

    def close_pipe(self) -> None:
        """Close the pipe, if one is open on the running loop."""
        pipe = self.pipe
        if pipe is not None and pipe.loop is asyncio.get_running_loop():
            self.pipe = None
            pipe.close()

    def _sent(self, task: asyncio.Future[None]) -> None:
        self.sending.discard(task)
        if self.hits and not task.get_loop().is_closed():
            self.flush()

    async def _send(self, hits: list[Hit], futures: list[asyncio.Future[Decision]]) -> None:
        """Send one batch: a script run per slot, concurrently. Each run settles the futures of
        its own hits as soon as it returns, and one that fails fails only those (``_part``)."""
        try:
            batches = self.store._batches(hits, None, False)
            if len(batches) == 1:
                await self._part(batches[0], futures)
            else:
                await asyncio.gather(*(self._part(batch, futures) for batch in batches))
        except BaseException as error:  # every waiter must hear of it
            _fail(futures, error)
            if not isinstance(error, Exception):
                raise

    async def _part(self, batch: Batch, futures: list[asyncio.Future[Decision]]) -> None:
        """One slot's run of a batch, which settles the futures of its hits."""
        indexes, keys, argv = batch
        try:
            reply = await self.store._run(keys, argv)
        except (*ERRORS, AttributeError, RuntimeError) as error:
            mapped = (
                self.store._failure_of(keys, error)
                if isinstance(error, ERRORS)
                else client_fault(error)
            )
            if mapped is None:  # not redis-py losing a connection: a bug, raised
                raise
            for index in indexes:
                if not futures[index].done():
                    futures[index].set_exception(mapped)
            if isinstance(mapped, StoreError) and isinstance(error, TIMEOUTS):
                self._time_out_waiting(keys[0], mapped, error)
            return
        for index, one in zip(indexes, decisions(reply), strict=True):
            if not futures[index].done():
                futures[index].set_result(one)
        if self.pipeable:
            self.open_soon()

    def _time_out_waiting(self, key: str, error: StoreError, cause: BaseException) -> None:
        """A server that hangs: the calls waiting to go to the same shard as ``key`` (every
        waiting call, on one server) fail with the run that timed out, so that no call waits
        longer than one timeout; the others stay queued."""
        shard = self.store._owner(key_slot(key.encode())) if self.store.clustered else ""
        hits, futures = self.hits, self.futures
        kept: list[Hit] = []
        kept_futures: list[asyncio.Future[Decision]] = []
        for hit, future in zip(hits, futures, strict=True):
            if shard and self.store.shard_of(hit[0], hit[1]) != shard:
                kept.append(hit)
                kept_futures.append(future)
            elif not future.done():
                failed = (
                    ShardError(str(error), error.shard)
                    if isinstance(error, ShardError)
                    else StoreError(str(error))
                )
                failed.__cause__ = cause
                future.set_exception(failed)
        self.hits, self.futures = kept, kept_futures


def _fail(futures: list[asyncio.Future[Decision]], error: BaseException) -> None:
    """Fail every future of ``futures`` not yet settled with ``error``."""
    for future in futures:
        if not future.done():
            future.set_exception(error)
