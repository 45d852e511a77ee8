"""``AsyncRedisStore``: the asyncio twin of ``RedisStore``, which also sends the hits of one
event-loop tick as one batch (see the package)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from functools import partial
from math import inf
from typing import Any, Unpack

from ratekeeper.algorithms.leases import Taken
from ratekeeper.core.decisions import Decision
from ratekeeper.core.errors import (
    MissingExtraError,
    StoreConfigError,
    StoreError,
)
from ratekeeper.core.inputs import MAX_COST, check_hit, check_hits, check_key
from ratekeeper.core.limits import Limit
from ratekeeper.core.store_keys import state_key
from ratekeeper.stores.contract import Admitted, Health, Hit, LeaseTerms
from ratekeeper.stores.redis.base import SLICES, Base
from ratekeeper.stores.redis.batches import (
    Batch,
    Ran,
    Refund,
    admitted,
    gather,
    refunds_of,
    settle,
    unrefunded,
)
from ratekeeper.stores.redis.deadlines import Deadline
from ratekeeper.stores.redis.errors import (
    ERRORS,
    TIMEOUTS,
    ShardError,
    client_fault,
    failure,
    missing_from,
)
from ratekeeper.stores.redis.pipe import Pipe, open_pipe, pack, pipeable, socket_deadline
from ratekeeper.stores.redis.scripts import (
    LIBRARY,
    decision,
    decisions,
    decisions_at,
    released,
    taken,
)

try:
    import redis.asyncio
    from redis.crc import key_slot
    from redis.exceptions import NoPermissionError, NoScriptError, ResponseError
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


class AsyncRedisStore(Base):
    """The asyncio twin of ``RedisStore``, on ``redis.asyncio`` clients.

    With ``batch=True`` (the default), ``apply`` calls go to Redis together, as one script run
    per slot in one round trip: an idle store sends the calls of one event-loop tick at the end
    of that tick; while a batch is on its way, the calls made meanwhile wait for it to return
    and then go as the next batch (under a server that hands over one call per tick, as
    ``grpc.aio`` does, they would otherwise each be a round trip of their own). So one batch at
    a time is in flight, at most ``MAX_BATCH`` hits, and each call gets exactly the decision
    it would have had alone, in the order the calls were made. On a cluster, each slot's run
    settles its own calls as soon as it returns, and a run that fails fails only its own calls.
    When a run times out (a server that hangs), the calls waiting to go to the same shard fail
    with it (``StoreError``), so that no call waits longer than one timeout; the calls for
    other shards go with the next batch.

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

    A client's connections belong to the event loop that opened them, so the store serves one
    loop at a time, and closes the client's connections when that loop shuts down (as
    ``asyncio.run`` returns) if ``close()`` has not. Used from a new loop (a second
    ``asyncio.run``), it starts afresh on a new client made by ``connect()``, as the stores
    ``open_async_store`` opens do; without ``connect`` it raises ``StoreError``.

    With ``timeout`` (seconds; ``open_async_store`` gives the store's), each round trip and
    ``ping`` is timed by a ``deadlines.Deadline``: a call fails about ``timeout`` after it
    began when the event loop keeps up, but an answer the loop reads late because it was
    behind is taken, up to the deadline's cap (the client's socket timeout, when opened
    ``capped``). Without it, the client's own socket timeout times each call.
    """

    _cluster = redis.asyncio.RedisCluster

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "rk",
        tag: str = "limit",
        batch: bool = True,
        connect: Callable[[], Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(client, prefix=prefix, tag=tag)
        self.batch = batch
        self._connect = connect
        self._deadline = None if timeout is None else Deadline(timeout)
        self._pipe: Pipe | None = None  # the connection batches go on, once open (pipe.py)
        self._opening: asyncio.Future[None] | None = None  # a pipe on its way to open
        self._failed_at = -inf  # when a pipe last failed to open (the loop's time)
        self._timed()
        self._served: asyncio.AbstractEventLoop | None = None  # the loop the client belongs to
        self._loop: asyncio.AbstractEventLoop | None = None  # the same, until close()
        self._guard: AsyncGenerator[None, None] | None = None  # closes the client with it
        self._hits: list[Hit] = []  # the hits of this tick, and their callers' futures
        self._futures: list[asyncio.Future[Decision]] = []
        self._sending: set[asyncio.Future[None]] = set()  # the batch on its way, if any
        self._flight: Flight | None = None  # or the batch on its way on the pipe

    async def apply(
        self, key: str, limit: Limit, cost: int = 1, now: float | None = None
    ) -> Decision:
        if self.batch and now is None:
            if key.__class__ is not str or cost.__class__ is not int or not 0 <= cost <= MAX_COST:
                key, cost = check_hit(key, cost)  # a bad hit must not fail its whole batch
            elif not key.isascii() or not key:
                key = check_key(key)
            loop = asyncio.get_running_loop()
            if loop is not self._loop:
                await self._serve(loop)
            future: asyncio.Future[Decision] = loop.create_future()
            if not self._hits:
                loop.call_soon(self._flush)
            self._hits.append((key, limit, cost))
            self._futures.append(future)
            return await future
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        name, args = self._single(key, limit, cost, now)
        try:
            try:
                reply = await self._execute(self._call, name, 1, *args, **self._raw)
            except ResponseError as error:
                if not await self._reload(error, self._scripts[limit.algorithm]):
                    raise
                name = self._singles[limit.algorithm]
                reply = await self._execute(self._call, name, 1, *args, **self._raw)
        except ERRORS as error:
            raise failure(error) from error
        return decision(reply)

    async def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        return await self._apply_checked(check_hits(hits), all_or_nothing, now)

    async def _apply_checked(
        self, hits: Sequence[Hit], all_or_nothing: bool, now: float | None
    ) -> list[Decision]:
        """``apply_many`` of hits already checked: the batcher's, checked by ``apply``."""
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        batches = self._batches(hits, now, all_or_nothing)
        if all_or_nothing and len(batches) > 1:
            return (await self._apply_across(hits, batches))[0]
        try:
            if len(batches) == 1:
                replies = [await self._run(batches[0][1], batches[0][2])]
            else:  # only a cluster splits a batch: the slots concurrently
                replies = await asyncio.gather(
                    *(self._run(keys, argv) for _, keys, argv in batches)
                )
        except ERRORS as error:
            raise failure(error) from error
        return gather(len(hits), batches, replies)

    async def admit(self, hits: Sequence[Hit], *, all_or_nothing: bool = False) -> list[Admitted]:
        hits = check_hits(hits)
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        batches = self._batches(hits, None, all_or_nothing, timed=True)
        if all_or_nothing and len(batches) > 1:
            results, ran = await self._apply_across(hits, batches)
            return admitted(len(hits), ran, results)
        try:  # on a cluster, the slots concurrently
            replies = await asyncio.gather(*(self._run(keys, argv) for _, keys, argv in batches))
        except ERRORS as error:
            raise failure(error) from error
        done: list[Ran] = [
            (batch, *decisions_at(reply)) for batch, reply in zip(batches, replies, strict=True)
        ]
        return admitted(len(hits), done)

    async def refund(self, key: str, limit: Limit, cost: int, at: float) -> None:
        found = self._refund_args(key, limit, cost, at)
        if found is None:
            return
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        keys, argv = found
        try:
            await self._refund_script(keys, argv)
        except ERRORS as error:
            raise self._failure_of(keys, error) from error

    async def release(
        self, key: str, limit: Limit, slots: int = 1, now: float | None = None
    ) -> Decision:
        args = self._release_args(key, limit, slots, now)
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        script = self._release_script
        try:
            try:
                reply = await self._execute("EVALSHA", script.sha, 1, *args)
            except NoScriptError:
                await self.client.script_load(script.script)
                reply = await self._execute("EVALSHA", script.sha, 1, *args)
        except ERRORS as error:
            raise failure(error) from error
        return released(reply)

    async def lease(self, key: str, limit: Limit, want: int, **terms: Unpack[LeaseTerms]) -> Taken:
        script, keys, argv = self._lease_args(key, limit, want, terms)
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        try:
            try:
                reply = await self._execute("EVALSHA", script.sha, 2, *keys, *argv, **self._raw)
            except NoScriptError:
                await self.client.script_load(script.script)
                reply = await self._execute("EVALSHA", script.sha, 2, *keys, *argv, **self._raw)
        except ERRORS as error:
            raise self._failure_of(keys, error) from error
        one, at = taken(reply)
        return Taken(one.granted, one, at)

    async def _run(self, keys: list[str], argv: list[str]) -> Any:
        try:
            return await self._execute(
                self._call, self._batch, len(keys), *keys, *argv, **self._raw
            )
        except ResponseError as error:
            if not await self._reload(error, self._script):
                raise
            return await self._execute(
                self._call, self._batch, len(keys), *keys, *argv, **self._raw
            )

    async def _reload(self, error: ResponseError, script: Any) -> bool:
        missing = missing_from(error)
        if missing == "library":
            try:
                await self.client.function_load(LIBRARY, replace=True)
                return True
            except NoPermissionError:
                missing = "functions"
        if missing == "functions":
            self._use_functions(False)
        elif missing != "script":
            return False
        await self.client.script_load(script.script)
        return True

    async def _apply_across(
        self, hits: Sequence[Hit], batches: list[Batch]
    ) -> tuple[list[Decision], list[Ran]]:
        """all_or_nothing over several slots: the slots' parts concurrently, then the refunds
        if one refused (or raised); the decisions, and each part as it ran."""
        outcomes = await asyncio.gather(
            *(self._run(keys, argv) for _, keys, argv in batches), return_exceptions=True
        )
        ran: list[Ran] = [
            (batch, *decisions_at(outcome))
            for batch, outcome in zip(batches, outcomes, strict=True)
            if not isinstance(outcome, BaseException)
        ]
        failed = [
            (batch, one)
            for batch, one in zip(batches, outcomes, strict=True)
            if isinstance(one, BaseException)
        ]
        if failed:
            await self._refund(refunds_of(hits, ran))
            (_, keys, _), raised = failed[0]
            if isinstance(raised, ERRORS):
                raise self._failure_of(keys, raised) from raised
            raise raised
        results, refunds = settle(hits, ran)
        await self._refund(refunds)
        return results, ran

    async def _refund(self, refunds: list[Refund]) -> None:
        outcomes = await asyncio.gather(
            *(self._refund_script(keys, argv) for keys, argv in refunds), return_exceptions=True
        )
        for (keys, _), outcome in zip(refunds, outcomes, strict=True):
            if isinstance(outcome, ERRORS):
                unrefunded(keys, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome

    async def close(self) -> None:
        await self._stop_opening()
        self._close_pipe()
        guard, self._guard, self._loop = self._guard, None, None
        if guard is None:
            await self.client.aclose()
        elif self._served is asyncio.get_running_loop():
            await guard.aclose()  # which closes the client
        # else the client belongs to another loop, which closes it as it shuts down

    async def reset(self, key: str, limit: Limit) -> None:
        key = check_key(key)
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        try:
            state = state_key(limit, key, self.prefix, self.tag)
            await self.client.delete(state, state + SLICES)
        except ERRORS as error:
            raise failure(error) from error

    async def ping(self) -> Health:
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        try:
            try:
                await self._ping()
            except redis.exceptions.ConnectionError:
                # Connections the server closed (it restarted) wait idle in the pool: drop
                # them, and ask again on a fresh one, so that a store back up says so at once.
                pool = getattr(self.client, "connection_pool", None)
                if pool is None:
                    raise
                await pool.disconnect(inuse_connections=False)
                await self._ping()
        except ERRORS as error:
            mapped = failure(error)
            if isinstance(mapped, StoreConfigError):
                raise mapped from error
            return Health(False, error=str(mapped))
        return Health(True)

    async def _ping(self) -> None:
        if self._deadline is None:
            await self.client.ping()
        else:
            await self._deadline.run(self.client.ping)

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve ``loop`` from now on: on a new client if the client served another loop."""
        served = self._served
        if served is not None and served is not loop:
            if not served.is_closed():
                raise StoreError(
                    "an AsyncRedisStore serves one event loop at a time, and the loop it "
                    "serves is still open; close that loop first, or use a store per loop"
                )
            if self._connect is None:
                raise StoreError(
                    "this AsyncRedisStore's client belongs to an event loop that has closed; "
                    "open the store with open_async_store(url) to have it reconnect"
                )
            Base.__init__(self, self._connect(), prefix=self.prefix, tag=self.tag)
            self._timed()
            self._hits, self._futures, self._sending = [], [], set()
            self._pipe = self._opening = self._flight = None  # the closed loop's
        self._served = self._loop = loop
        self._guard = self._closing(self.client)
        await self._guard.asend(None)

    def _timed(self) -> None:
        """The client's round trips (``_execute``) under the store's deadline, if it has one;
        and whether the batches may go on a pipe, timed by that deadline or else by the
        client's socket timeout."""
        if self._deadline is not None:
            self._execute = partial(self._deadline.run, self.client.execute_command)
        self._pipeable = self.batch and not self.clustered and pipeable(self.client)
        self._pipe_deadline = self._deadline or socket_deadline(self.client)

    async def _closing(self, client: Any) -> AsyncGenerator[None, None]:
        """Wait, suspended, for the loop to shut down, then close ``client`` and the pipe on it.

        A loop shutting down (``asyncio.run`` returning) closes the async generators it runs,
        which is the one moment its connections can still be closed cleanly.
        """
        try:
            yield
        finally:
            await self._stop_opening()
            self._close_pipe()
            await client.aclose()

    def _flush(self) -> None:
        """Send the waiting hits as one batch of at most ``MAX_BATCH``, unless a batch is on
        its way: then they go when it returns (``_sent``, ``_piped``), as do the hits past
        ``MAX_BATCH``. The batch goes on the pipe when one is open, else through redis-py."""
        if not self._hits or self._sending or self._flight is not None:
            return
        hits, futures = self._hits, self._futures
        if len(hits) > MAX_BATCH:
            self._hits, self._futures = hits[MAX_BATCH:], futures[MAX_BATCH:]
            hits, futures = hits[:MAX_BATCH], futures[:MAX_BATCH]
        else:
            self._hits, self._futures = [], []
        pipe = self._pipe
        if pipe is None:
            self._go(hits, futures)
        elif pipe.closed:
            self._pipe = None
            self._go(hits, futures)
        else:
            self._pipe_send(pipe, hits, futures)

    def _go(self, hits: list[Hit], futures: list[asyncio.Future[Decision]]) -> None:
        """Send a batch through redis-py, in a task (``_send``)."""
        task = asyncio.ensure_future(self._send(hits, futures))
        self._sending.add(task)
        task.add_done_callback(self._sent)

    def _pipe_send(
        self, pipe: Pipe, hits: list[Hit], futures: list[asyncio.Future[Decision]]
    ) -> None:
        """Send a batch on the pipe: ``_piped`` settles it."""
        try:
            _, keys, argv = self._batches(hits, None, False)[0]
            command = pack((self._call, self._batch, len(keys), *keys, *argv))
        except BaseException as error:  # every waiter must hear of it
            _fail(futures, error)
            if not isinstance(error, Exception):
                raise
            return
        self._flight = (hits, futures, keys)
        pipe.send(command, self._piped)

    def _piped(self, reply: Any, error: BaseException | None) -> None:
        """The pipe's batch is back: settle its callers' futures, as ``_part`` does, and
        send the hits that waited. A batch the server could not run for a script or library
        it is missing (NOSCRIPT: restarted, flushed) goes again through redis-py, which loads
        it; a timeout fails the calls waiting as well (``_time_out_waiting``); any other
        failure closes the pipe, and the batches go through redis-py until one gets through."""
        flight, self._flight = self._flight, None
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
            mapped = self._failure_of(keys, error)
            _fail(futures, mapped)
            if isinstance(error, TIMEOUTS) and isinstance(mapped, StoreError):
                self._time_out_waiting(keys[0], mapped, error)
            # Any other error reply (a replica's READONLY after a Sentinel failover, LOADING)
            # closes the pipe too: the next one opens as redis-py connects, to the master.
            self._close_pipe()
        if self._hits:
            self._flush()

    def _open_pipe_soon(self) -> None:
        """Open a pipe in the background, unless one is open or opening, or the last attempt
        failed less than ``PIPE_RETRY`` seconds ago."""
        if ((pipe := self._pipe) is not None and not pipe.closed) or self._opening is not None:
            return
        if asyncio.get_running_loop().time() < self._failed_at + PIPE_RETRY:
            return
        self._opening = asyncio.ensure_future(self._open_pipe(self.client))

    async def _open_pipe(self, client: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            pipe = await open_pipe(client, self._pipe_deadline)
        except (*ERRORS, AttributeError, RuntimeError, TypeError):
            # Batches still go through redis-py, which says what is wrong if it is lasting.
            self._failed_at = loop.time()
            return
        finally:
            self._opening = None
        if pipe is None:  # a connection no pipe can take over: batches go through redis-py
            self._pipeable = False
        elif client is not self.client or self._loop is not loop:  # closed meanwhile
            pipe.close()
        else:
            self._pipe = pipe

    async def _stop_opening(self) -> None:
        """Stop opening a pipe, if one is opening on the running loop: its connection closed."""
        opening = self._opening
        if opening is not None and opening.get_loop() is asyncio.get_running_loop():
            opening.cancel()
            await asyncio.wait([opening])  # not raising: this call may be cancelled itself
            if self._opening is opening:  # cancelled before it began, it cleared nothing
                self._opening = None

    def _close_pipe(self) -> None:
        """Close the pipe, if one is open on the running loop."""
        pipe = self._pipe
        if pipe is not None and pipe.loop is asyncio.get_running_loop():
            self._pipe = None
            pipe.close()

    def _sent(self, task: asyncio.Future[None]) -> None:
        self._sending.discard(task)
        if self._hits and not task.get_loop().is_closed():
            self._flush()

    async def _send(self, hits: list[Hit], futures: list[asyncio.Future[Decision]]) -> None:
        """Send one batch: a script run per slot, concurrently. Each run settles the futures of
        its own hits as soon as it returns, and one that fails fails only those (``_part``)."""
        try:
            batches = self._batches(hits, None, False)
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
            reply = await self._run(keys, argv)
        except (*ERRORS, AttributeError, RuntimeError) as error:
            mapped = (
                self._failure_of(keys, error) if isinstance(error, ERRORS) else client_fault(error)
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
        if self._pipeable:
            self._open_pipe_soon()

    def _time_out_waiting(self, key: str, error: StoreError, cause: BaseException) -> None:
        """A server that hangs: the calls waiting to go to the same shard as ``key`` (every
        waiting call, on one server) fail with the run that timed out, so that no call waits
        longer than one timeout; the others stay queued."""
        shard = self._owner(key_slot(key.encode())) if self.clustered else ""
        hits, futures = self._hits, self._futures
        kept: list[Hit] = []
        kept_futures: list[asyncio.Future[Decision]] = []
        for hit, future in zip(hits, futures, strict=True):
            if shard and self.shard_of(hit[0], hit[1]) != shard:
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
        self._hits, self._futures = kept, kept_futures


def _fail(futures: list[asyncio.Future[Decision]], error: BaseException) -> None:
    """Fail every future of ``futures`` not yet settled with ``error``."""
    for future in futures:
        if not future.done():
            future.set_exception(error)
