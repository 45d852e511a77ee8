"""``AsyncRedisStore``: the asyncio twin of ``RedisStore``, which also sends the hits of one
event-loop tick as one batch (see the package)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from functools import partial
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
from ratekeeper.stores.redis import coverage, fleet
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
from ratekeeper.stores.redis.batching import Batcher
from ratekeeper.stores.redis.deadlines import Deadline
from ratekeeper.stores.redis.errors import (
    ERRORS,
    failure,
    missing_from,
)
from ratekeeper.stores.redis.scripts import (
    LIBRARY,
    decision,
    decisions_at,
    released,
    taken,
)

try:
    import redis.asyncio
    from redis.exceptions import NoPermissionError, NoScriptError, ResponseError
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("redis", "redis") from error


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
    connection of its own and sends the batches on it, with the same guarantees
    (``batching.Batcher``, ``pipe.Pipe``).

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
        self._batcher = Batcher(self)  # the calls of one tick, and the pipe they go on
        self._timed()
        self._served: asyncio.AbstractEventLoop | None = None  # the loop the client belongs to
        self._loop: asyncio.AbstractEventLoop | None = None  # the same, until close()
        self._guard: AsyncGenerator[None, None] | None = None  # closes the client with it
        self._coverage = coverage.Watch()  # a cluster's cluster-require-full-coverage

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
            return await self._batcher.add(loop, (key, limit, cost))
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
        return await self._load(missing_from(error), script)

    async def _load(self, missing: str | None, script: Any) -> bool:
        """Load what the server is ``missing`` (``missing_from``: the library, or a script);
        False for anything else."""
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
        await self._batcher.stop_opening()
        self._batcher.close_pipe()
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
        await self._batcher.warm()
        said = await self._coverage.check(self.client) if self.clustered else None
        return Health(True, warnings=() if said is None else (said,))

    async def count_fleet(self, member: str, ttl: float) -> int:
        """Renew ``member`` on the fleet's roll for ``ttl`` seconds and return how many
        members it holds (``fleet``): on a cluster, the most any master's copy holds."""
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        where = fleet.roll_keys(self.client, self.prefix, self._owner if self.clustered else None)
        return await fleet.count(self.client, where, member, ttl)

    async def leave_fleet(self, member: str) -> None:
        """Take ``member`` off the fleet's roll, as far as the store answers."""
        if asyncio.get_running_loop() is not self._loop:
            await self._serve(asyncio.get_running_loop())
        where = fleet.roll_keys(self.client, self.prefix, self._owner if self.clustered else None)
        await fleet.leave(self.client, where, member)

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
            self._batcher.renew()  # the closed loop's
        self._served = self._loop = loop
        self._guard = self._closing(self.client)
        await self._guard.asend(None)

    def _timed(self) -> None:
        """The client's round trips (``_execute``) under the store's deadline, if it has one;
        and whether the batches may go on a pipe, timed by that deadline or else by the
        client's socket timeout."""
        if self._deadline is not None:
            self._execute = partial(self._deadline.run, self.client.execute_command)
        self._batcher.timed(self.batch, self._deadline)

    async def _closing(self, client: Any) -> AsyncGenerator[None, None]:
        """Wait, suspended, for the loop to shut down, then close ``client`` and the pipe on it.

        A loop shutting down (``asyncio.run`` returning) closes the async generators it runs,
        which is the one moment its connections can still be closed cleanly.
        """
        try:
            yield
        finally:
            await self._batcher.stop_opening()
            self._batcher.close_pipe()
            await client.aclose()
