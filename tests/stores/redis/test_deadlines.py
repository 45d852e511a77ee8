"""The asyncio store's round trips are timed fairly: the event loop's own lag is not the store's.

An answer that arrives in time but waits unread while the loop is busy is taken (a plain
timeout, as redis-py's socket timeout, fails it); a store that does not answer while the loop
keeps up fails about ``timeout`` after the call began; a loop that stays behind is cut off at
the hard cap. First on bare futures, then on a real Redis made to sleep (``DEBUG SLEEP``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ratekeeper import Limit, open_async_store
from ratekeeper.core.errors import StoreConfigError, StoreError
from ratekeeper.stores.redis.clients import DEFAULT_TIMEOUT, open_client, timeout_of
from ratekeeper.stores.redis.deadlines import CAP, LATE, Deadline
from tests.servers import RedisServer, command

LIMIT = Limit(10, 60)


def answer_while_blocked(loop: asyncio.AbstractEventLoop, answer: asyncio.Future[str]) -> None:
    """Block ``loop`` for 0.4 s, the answer arriving 0.1 s into it (from another thread)."""
    timer = threading.Timer(0.1, loop.call_soon_threadsafe, (answer.set_result, "answer"))
    timer.start()
    time.sleep(0.4)
    timer.join()


async def wait_through_lag(timed: bool) -> str:
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()
    loop.call_later(0.01, answer_while_blocked, loop, answer)
    if timed:
        return await Deadline(0.25).run(asyncio.shield, answer)
    async with asyncio.timeout(0.25):  # as a socket timeout times a read
        return await asyncio.shield(answer)


def test_an_answer_that_waited_on_a_busy_loop_is_taken() -> None:
    assert asyncio.run(wait_through_lag(timed=True)) == "answer"
    with pytest.raises(TimeoutError):  # what a plain timer does with it
        asyncio.run(wait_through_lag(timed=False))


async def never_answered(deadline: Deadline, busy: bool) -> float:
    loop = asyncio.get_running_loop()

    def hog() -> None:  # the loop stays behind: 3 LATEs of work, again and again
        time.sleep(3 * LATE)
        loop.call_soon(hog)

    if busy:
        loop.call_soon(hog)
    started = loop.time()
    with pytest.raises(TimeoutError, match=r"no answer in [0-9.]+ s \(timeout 0\.1 s\)"):
        await deadline.run(asyncio.sleep, 3600)
    return loop.time() - started


def test_no_answer_on_an_idle_loop_fails_at_about_the_timeout() -> None:
    took = asyncio.run(never_answered(Deadline(0.1), busy=False))
    assert 0.1 <= took < 0.1 + 0.2, took


def test_a_loop_that_stays_behind_is_cut_off_at_the_cap() -> None:
    took = asyncio.run(never_answered(Deadline(0.1, cap=0.5), busy=True))
    assert 0.5 <= took < 0.5 + 0.3, took


@pytest.mark.parametrize(
    ("timeout", "cap"),
    [(0, None), (-1, None), (float("nan"), None), (float("inf"), None), (True, None),
     ("1", None), (None, None), (1, 0.5), (1, float("inf")), (1, -1), (1, False)],
)  # fmt: skip
def test_a_deadline_of_anything_but_positive_seconds_is_refused(timeout: Any, cap: Any) -> None:
    with pytest.raises(ValueError, match="expected positive seconds"):
        Deadline(timeout, cap)


def test_the_cap_is_a_few_timeouts_by_default() -> None:
    assert (Deadline(0.25).timeout, Deadline(0.25).cap) == (0.25, CAP * 0.25)


def test_a_capped_client_has_the_cap_as_its_socket_timeout() -> None:
    url = "redis://127.0.0.1:1/0?timeout=0.5"
    assert timeout_of(url) == 0.5
    assert timeout_of(url, 2) == 2
    assert timeout_of("redis://127.0.0.1:1/0") == DEFAULT_TIMEOUT
    plain = open_client(url, True).connection_pool.connection_kwargs
    capped = open_client(url, True, capped=True).connection_pool.connection_kwargs
    assert (plain["socket_timeout"], plain["socket_connect_timeout"]) == (0.5, 0.5)
    assert (capped["socket_timeout"], capped["socket_connect_timeout"]) == (CAP * 0.5,) * 2
    for bad in (0, -1, float("nan"), float("inf"), True, "1"):
        with pytest.raises(StoreConfigError, match="timeout must be positive seconds"):
            timeout_of(url, bad)


# -- on a real Redis ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sleepy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis that can be told to sleep (``DEBUG SLEEP``)."""
    server = RedisServer(tmp_path_factory.mktemp("sleepy"), None, "--enable-debug-command", "local")
    yield server
    server.stop()


def sleep_redis(server: RedisServer, seconds: float) -> threading.Thread:
    thread = threading.Thread(target=command, args=(server.port, "DEBUG", "SLEEP", str(seconds)))
    thread.start()
    time.sleep(0.02)  # until it sleeps
    return thread


async def decide_while(server: RedisServer, sleep: float, block: float, piped: bool) -> Any:
    """One decision sent while Redis sleeps ``sleep`` s and the loop, ``block`` s into it, is
    blocked for longer than the timeout; the store's timeout is the default, 0.25 s. With
    ``piped``, the decision goes on the store's pipe (``pipe.py``), else through redis-py."""
    store: Any = open_async_store(server.url, on_store_error=None)
    try:
        await store.apply("warm", LIMIT)  # connected, the library loaded
        redis_store = store.store  # under the leasing wrapper
        if piped:
            await redis_store._batcher.opening
        else:
            redis_store._batcher.pipeable = False
            if redis_store._batcher.opening is not None:
                await redis_store._batcher.opening
            redis_store._batcher.close_pipe()
        assert (redis_store._batcher.pipe is not None) is piped
        sleeper = sleep_redis(server, sleep)
        loop = asyncio.get_running_loop()
        if block:
            loop.call_later(0.01, time.sleep, block)
        started = loop.time()
        try:
            return await store.apply("key", LIMIT), loop.time() - started
        except StoreError as error:
            return error, loop.time() - started
        finally:
            sleeper.join()
    finally:
        await store.close()


@pytest.mark.parametrize("piped", [False, True])
def test_an_answer_read_late_on_a_busy_loop_is_a_decision(sleepy: RedisServer, piped: bool) -> None:
    decision, _ = asyncio.run(decide_while(sleepy, 0.1, 0.4, piped))
    assert decision.allowed and not decision.degraded, decision


@pytest.mark.parametrize("piped", [False, True])
def test_a_sleeping_redis_fails_a_call_at_about_the_timeout_on_an_idle_loop(
    sleepy: RedisServer, piped: bool
) -> None:
    failed, took = asyncio.run(decide_while(sleepy, 1.0, 0, piped))
    assert isinstance(failed, StoreError), failed
    assert "no answer in" in str(failed)
    assert DEFAULT_TIMEOUT <= took < DEFAULT_TIMEOUT + 0.45, took  # the cap is 4 times it


def test_the_store_url_s_timeout_is_the_deadline_s(sleepy: RedisServer) -> None:
    async def check() -> None:
        store: Any = open_async_store(sleepy.url + "?timeout=0.5", on_store_error=None)
        try:
            assert store._deadline.timeout == 0.5
            kwargs = store.client.connection_pool.connection_kwargs
            assert kwargs["socket_timeout"] == CAP * 0.5
        finally:
            await store.close()

    asyncio.run(check())
