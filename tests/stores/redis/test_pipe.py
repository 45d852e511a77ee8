"""The asyncio store's pipe: its batches on a connection of its own (``stores/redis/pipe.py``).

First the pipe and its timer on fakes (no server, no sleep), then on real redis-servers: the
batches go on the pipe once one went through redis-py; 64 concurrent callers are decided
exactly; a batch that times out, a server that dies, a flushed library and a restarted server
each fail or recover as the redis-py way does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import NoScriptError, ResponseError

from ratekeeper import Limit, StoreError, open_async_store
from ratekeeper.stores.redis import AsyncRedisStore
from ratekeeper.stores.redis.deadlines import LATE, Deadline, Watch
from ratekeeper.stores.redis.pipe import Pipe, pipeable
from tests.servers import RedisServer

LIMIT = Limit(100, 3600, "gcra")
uvloop = pytest.importorskip("uvloop")


# -- the pipe on a fake transport ---------------------------------------------------------------


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def on_fake(check: Callable[[Pipe, FakeTransport, list[Any]], None]) -> None:
    """Run ``check(pipe, transport, heard)`` on a running loop; ``heard`` collects the
    callbacks' ``(reply, error)``."""

    async def main() -> None:
        transport = FakeTransport()
        pipe = Pipe(transport, None)  # type: ignore[arg-type]
        check(pipe, transport, [])

    asyncio.run(main())


def test_a_reply_goes_to_the_batch_in_flight_even_in_pieces() -> None:
    def check(pipe: Pipe, transport: FakeTransport, heard: list[Any]) -> None:
        pipe.send(b"*1\r\n$4\r\nPING\r\n", lambda reply, error: heard.append((reply, error)))
        assert pipe.busy and transport.written == [b"*1\r\n$4\r\nPING\r\n"]
        pipe.data_received(b"$5\r\nhel")
        assert heard == [] and pipe.busy
        pipe.data_received(b"lo\r\n")
        assert heard == [(b"hello", None)] and not pipe.busy and not pipe.closed
        assert pipe.sent == 1

    on_fake(check)


def test_an_error_reply_is_redis_py_s_exception_and_keeps_the_pipe_open() -> None:
    def check(pipe: Pipe, transport: FakeTransport, heard: list[Any]) -> None:
        pipe.send(b"x", lambda reply, error: heard.append((reply, error)))
        pipe.data_received(b"-NOSCRIPT No matching script. Please use EVAL.\r\n")
        ((reply, error),) = heard
        assert reply is None and isinstance(error, NoScriptError)
        pipe.send(b"y", lambda reply, error: heard.append((reply, error)))
        pipe.data_received(b"-ratekeeper: invalid cost x\r\n")
        assert type(heard[1][1]) is ResponseError
        assert str(heard[1][1]) == "ratekeeper: invalid cost x"
        assert not pipe.closed and not transport.aborted

    on_fake(check)


def test_a_reply_no_batch_asked_for_closes_the_pipe() -> None:
    def check(pipe: Pipe, transport: FakeTransport, heard: list[Any]) -> None:
        pipe.data_received(b"+OK\r\n")
        assert pipe.closed and transport.aborted
        with pytest.raises(RuntimeError, match="one batch at a time"):
            pipe.send(b"x", lambda reply, error: heard.append((reply, error)))

    on_fake(check)


def test_two_replies_for_one_batch_fail_it_and_close_the_pipe() -> None:
    def check(pipe: Pipe, transport: FakeTransport, heard: list[Any]) -> None:
        pipe.send(b"x", lambda reply, error: heard.append((reply, error)))
        pipe.data_received(b"+OK\r\n+OK\r\n")
        ((reply, error),) = heard
        assert reply is None and isinstance(error, redis.ConnectionError)
        assert pipe.closed and transport.aborted

    on_fake(check)


def test_one_batch_at_a_time() -> None:
    def check(pipe: Pipe, transport: FakeTransport, heard: list[Any]) -> None:
        pipe.send(b"x", lambda reply, error: heard.append((reply, error)))
        with pytest.raises(RuntimeError, match="one batch at a time"):
            pipe.send(b"y", lambda reply, error: heard.append((reply, error)))
        assert transport.written == [b"x"]

    on_fake(check)


@pytest.mark.parametrize("how", ["lost", "closed", "garbage"])
def test_a_lost_connection_fails_the_batch_in_flight(how: str) -> None:
    def check(pipe: Pipe, transport: FakeTransport, heard: list[Any]) -> None:
        pipe.send(b"x", lambda reply, error: heard.append((reply, error)))
        if how == "lost":
            pipe.connection_lost(ConnectionResetError("reset"))
        elif how == "closed":
            pipe.close()
        else:
            pipe.data_received(b"!not RESP\r\n")
        ((reply, error),) = heard
        assert reply is None and isinstance(error, redis.ConnectionError)
        assert pipe.closed and not pipe.busy

    on_fake(check)


def test_only_a_plain_client_speaking_resp2_in_utf8_is_pipeable() -> None:
    url = "redis://127.0.0.1:1/0"
    assert pipeable(redis.asyncio.Redis.from_url(url))
    assert not pipeable(redis.asyncio.Redis.from_url(url, protocol=3))
    assert not pipeable(redis.asyncio.Redis.from_url(url, encoding="latin-1"))
    assert not pipeable(redis.Redis.from_url(url))  # not asyncio


# -- the timer, on a fake loop ------------------------------------------------------------------


class Handle:
    def __init__(self, loop: FakeLoop, timer: Any) -> None:
        self.loop, self.timer = loop, timer

    def cancel(self) -> None:
        if self.timer in self.loop.timers:
            self.loop.timers.remove(self.timer)


class FakeLoop:
    """``time`` and ``call_at`` only; ``run(lag)`` runs the next timer ``lag`` seconds late."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[..., None], tuple[Any, ...]]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., None], *args: Any) -> Any:
        timer = (when, callback, args)
        self.timers.append(timer)
        return Handle(self, timer)

    def run(self, lag: float = 0.0) -> None:
        when, callback, args = self.timers.pop(0)
        self.now = when + lag
        callback(*args)


def test_a_watch_expires_after_two_looks_on_time() -> None:
    loop, expired = FakeLoop(), []
    Watch(loop, 1.0, lambda: expired.append(loop.now), 4.0)  # type: ignore[arg-type]
    loop.run()  # on time: one more look
    assert not expired and loop.timers[0][0] == 1.0 + LATE
    loop.run()
    assert expired == [1.0 + LATE] and not loop.timers


def test_a_watch_on_a_loop_that_stays_behind_expires_at_its_cap() -> None:
    loop, expired = FakeLoop(), []
    Watch(loop, 1.0, lambda: expired.append(loop.now), 1.5)  # type: ignore[arg-type]
    while not expired:
        loop.run(lag=2 * LATE)  # every timer late: the loop is behind, the answer may wait
        assert loop.now < 1.5 + 3 * LATE
    assert expired[0] >= 1.5 and not loop.timers


def test_a_deadline_s_watch_has_its_timeout_and_cap() -> None:
    loop = FakeLoop()
    watch = Deadline(0.25, cap=0.75).watch(loop, 10.0, lambda: None)  # type: ignore[arg-type]
    assert loop.timers[0][0] == 10.25 and watch.until == 10.75


# -- on real servers ----------------------------------------------------------------------------


def on_uvloop(main: Coroutine[Any, Any, Any]) -> Any:
    """Run ``main`` on uvloop, the event loop ``ratekeeper serve`` runs."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def open_pipe_of(store: AsyncRedisStore) -> Pipe:
    """The store's pipe, once the one it is opening is open."""
    if store._batcher.opening is not None:
        await store._batcher.opening
    pipe = store._batcher.pipe
    assert pipe is not None and not pipe.closed
    return pipe


def runs_of(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {"calls": 0})["calls"]) for c in ("evalsha", "fcall"))


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A redis-server of the test's own (it is stopped, killed or restarted), on a TCP port
    and on a Unix socket (whose path is at most 107 bytes: under /tmp)."""
    directory = Path(tempfile.mkdtemp(prefix="rk-pipe-"))
    server = RedisServer(directory, unix_socket=directory / "redis.sock")
    yield server
    server.stop()


@pytest.mark.parametrize("socket", ["tcp", "unix"])
def test_batches_go_on_the_pipe_once_one_went_through_redis_py(
    server: RedisServer, socket: str
) -> None:
    sync = redis.Redis.from_url(server.url)

    async def main() -> tuple[list[int], int, int]:
        url = server.url if socket == "tcp" else server.unix_url
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(url), prefix="p")
        assert store._batcher.pipe is None
        await store.apply("warm", LIMIT)  # through redis-py, which loads the library
        pipe = await open_pipe_of(store)
        before, sent = runs_of(sync), pipe.sent
        decisions = await asyncio.gather(*(store.apply("k", LIMIT) for _ in range(64)))
        runs = runs_of(sync) - before
        await store.close()
        assert pipe.closed
        return [d.remaining for d in decisions], runs, pipe.sent - sent

    remaining, runs, sent = on_uvloop(main())
    assert remaining == list(range(99, 35, -1))  # in call order, as 64 calls alone
    assert (runs, sent) == (1, 1)


def test_64_concurrent_callers_are_decided_exactly(server: RedisServer) -> None:
    """64 callers, one call started per loop turn as a gRPC server hands them over, each
    calling again as soon as it is answered: exactly the limit admitted, over the pipe."""
    limit = Limit(1_000, 86_400, "fixed_window")

    async def main() -> tuple[int, int, int]:
        store: Any = open_async_store(server.url, prefix="exact", on_store_error=None)
        redis_store = store.store
        await store.apply("warm", limit)
        pipe = await open_pipe_of(redis_store)

        async def caller() -> int:
            admitted = 0
            for _ in range(25):
                decision = await store.apply("hot", limit)
                assert not decision.degraded
                admitted += decision.allowed
            return admitted

        tasks = []
        for _ in range(64):
            tasks.append(asyncio.ensure_future(caller()))
            await asyncio.sleep(0)
        admitted = sum(await asyncio.gather(*tasks))
        left = (await store.apply("hot", limit, 0)).remaining
        await store.close()
        return admitted, left, pipe.sent

    admitted, left, sent = on_uvloop(main())
    assert (admitted, left) == (1_000, 0)
    assert 1 < sent <= 64 * 25 + 1  # batches of several calls each, all on the pipe


def test_a_batch_that_times_out_on_the_pipe_degrades_every_call_in_it(server: RedisServer) -> None:
    """A hung server: the batch in flight on the pipe and the calls waiting for it all get
    the failure policy's degraded decision, none later than one timeout (and some slack)."""
    timeout, margin = 0.3, 0.3

    async def main() -> list[tuple[bool, bool, float]]:
        store: Any = open_async_store(
            server.url, prefix="hung", on_store_error="allow", timeout=timeout
        )
        await store.apply("warm", LIMIT)
        pipe = await open_pipe_of(store.store.store)  # under the failure policy and leasing
        loop = asyncio.get_running_loop()

        async def timed(key: str) -> tuple[bool, bool, float]:
            started = loop.time()
            decision = await store.apply(key, LIMIT)
            return decision.allowed, decision.degraded, loop.time() - started

        os.kill(server.pid, signal.SIGSTOP)  # alive but silent
        try:
            in_flight = [asyncio.ensure_future(timed(f"a{i}")) for i in range(5)]
            await asyncio.sleep(0.02)  # the batch is on its way on the pipe
            assert pipe.busy
            waiting = [asyncio.ensure_future(timed(f"b{i}")) for i in range(3)]
            results = await asyncio.gather(*in_flight, *waiting)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert pipe.closed and pipe.sent == 1
        await store.close()
        return results

    results = on_uvloop(main())
    assert [(allowed, degraded) for allowed, degraded, _ in results] == [(True, True)] * 8
    assert max(took for *_, took in results) < timeout + margin


def test_after_a_timeout_the_store_recovers_on_a_new_pipe(server: RedisServer) -> None:
    async def main() -> tuple[list[str], list[int]]:
        store = AsyncRedisStore(
            redis.asyncio.Redis.from_url(server.url, socket_timeout=1), prefix="t", timeout=0.2
        )
        await store.apply("warm", LIMIT)
        first = await open_pipe_of(store)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            outcomes = await asyncio.gather(
                *(store.apply("k", LIMIT) for _ in range(3)), return_exceptions=True
            )
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert first.closed
        after = [(await store.apply("k", LIMIT)).remaining]  # through redis-py
        second = await open_pipe_of(store)
        after += [(await store.apply("k", LIMIT)).remaining for _ in range(2)]
        assert second is not first and second.sent == 2
        await store.close()
        return [type(outcome).__name__ for outcome in outcomes], after

    failed, after = on_uvloop(main())
    assert failed == ["StoreError"] * 3
    # The batch that timed out ran once the server woke, or not at all: never twice.
    assert after in ([99, 98, 97], [96, 95, 94])


def test_a_batch_in_flight_when_the_server_dies_fails_at_once(server: RedisServer) -> None:
    """Not at its timeout: the pipe hears its connection close."""
    timeout = 5.0

    async def main() -> tuple[list[str], float]:
        store: Any = open_async_store(server.url, prefix="dead", on_store_error=None, timeout=5)
        await store.apply("warm", LIMIT)
        pipe = await open_pipe_of(store.store)
        os.kill(server.pid, signal.SIGSTOP)
        loop = asyncio.get_running_loop()
        started = loop.time()
        calls = asyncio.gather(*(store.apply("k", LIMIT) for _ in range(4)), return_exceptions=True)
        await asyncio.sleep(0.02)
        assert pipe.busy
        server.kill()  # SIGKILL: the kernel closes its sockets
        outcomes = await calls
        took = loop.time() - started
        await store.close()
        return [str(outcome) for outcome in outcomes], took

    try:
        outcomes, took = on_uvloop(main())
    finally:
        server.start()  # for the fixture to stop
    assert all(outcome.startswith("redis: Connection closed by server") for outcome in outcomes)
    assert len(outcomes) == 4
    assert took < timeout


def test_a_flushed_library_is_loaded_again_and_the_pipe_stays(server: RedisServer) -> None:
    sync = redis.Redis.from_url(server.url)

    async def main() -> list[int]:
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(server.url), prefix="f")
        await store.apply("warm", LIMIT)
        pipe = await open_pipe_of(store)
        remaining = [(await store.apply("k", LIMIT)).remaining]
        sync.function_flush()
        sync.script_flush()
        remaining.append((await store.apply("k", LIMIT)).remaining)  # redis-py loads it again
        remaining.append((await store.apply("k", LIMIT)).remaining)  # the pipe again
        assert store._batcher.pipe is pipe and not pipe.closed and pipe.sent == 3
        await store.close()
        return remaining

    assert on_uvloop(main()) == [99, 98, 97]
    assert sync.function_list()


def test_after_a_restart_the_scripts_are_loaded_again_on_a_new_pipe(server: RedisServer) -> None:
    """A restarted server has lost every key and the library: the first call may fail on a
    connection the restart closed (as on redis-py's way); then the store decides afresh, on a
    new pipe."""

    async def main() -> tuple[int, list[int], bool]:
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(server.url), prefix="r")
        for _ in range(3):
            await store.apply("k", LIMIT)
        first = await open_pipe_of(store)
        server.kill()
        server.start()  # the same port, empty
        failures = 0
        while True:
            try:
                decision = await store.apply("k", LIMIT)
                break
            except StoreError:
                failures += 1
                assert failures < 3
        remaining = [decision.remaining]
        second = await open_pipe_of(store)
        remaining += [(await store.apply("k", LIMIT)).remaining for _ in range(2)]
        assert second.sent == 2
        await store.close()
        return failures, remaining, first.closed

    failures, remaining, closed = on_uvloop(main())
    assert remaining == [99, 98, 97] and closed and failures <= 2
    assert redis.Redis.from_url(server.url).function_list()


def test_a_store_closed_while_its_pipe_opens_leaves_nothing_open(server: RedisServer) -> None:
    async def main() -> None:
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(server.url), prefix="c")
        await store.apply("warm", LIMIT)
        assert store._batcher.opening is not None
        await store.close()  # stops the opening: its connection closed
        assert store._batcher.opening is None and store._batcher.pipe is None
        assert (await store.apply("k", LIMIT)).remaining == 99  # used again: it reconnects
        pipe = await open_pipe_of(store)  # and opens a pipe again
        assert (await store.apply("k", LIMIT)).remaining == 98 and pipe.sent == 1
        await store.close()

    on_uvloop(main())  # a transport left open would be a ResourceWarning, an error here


def test_the_loop_shutting_down_closes_the_pipe(server: RedisServer) -> None:
    pipes: list[Pipe] = []

    async def main() -> None:
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(server.url), prefix="s")
        await store.apply("warm", LIMIT)
        pipes.append(await open_pipe_of(store))
        await store.apply("k", LIMIT)
        # no close(): the loop's shutdown closes the client and the pipe

    on_uvloop(main())
    assert pipes[0].closed and pipes[0].transport.is_closing()


def test_an_error_reply_closes_the_pipe_and_a_new_one_opens_once_redis_answers(
    server: RedisServer,
) -> None:
    """A server that turned replica (as a Sentinel failover leaves the old master) answers
    READONLY: the calls fail, the pipe is closed, and once a batch gets through redis-py
    again the batches go on a new pipe."""
    admin = redis.Redis.from_url(server.url)

    async def main() -> tuple[list[str], list[int]]:
        store = AsyncRedisStore(redis.asyncio.Redis.from_url(server.url), prefix="ro")
        await store.apply("k", LIMIT)
        first = await open_pipe_of(store)
        admin.replicaof("127.0.0.1", "1")  # nothing listens there: a replica, read-only
        try:
            refused = await asyncio.gather(
                *(store.apply("k", LIMIT) for _ in range(2)), return_exceptions=True
            )
            assert first.closed and store._batcher.pipe is None
        finally:
            admin.replicaof("NO", "ONE")
        remaining = [(await store.apply("k", LIMIT)).remaining]  # through redis-py
        second = await open_pipe_of(store)
        remaining.append((await store.apply("k", LIMIT)).remaining)
        assert second is not first and second.sent == 1
        await store.close()
        return [str(error) for error in refused], remaining

    refused, remaining = on_uvloop(main())
    assert all("read only replica" in error for error in refused) and len(refused) == 2
    assert remaining == [98, 97]
