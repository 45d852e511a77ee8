"""Objects built before ``os.fork()`` work in the children, as a pre-forking server uses them.

Each test builds a limiter or an engine in this process, uses it or not, forks real children
that decide and report through a pipe, and checks what each child saw.
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import time
import traceback
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import Limit, Limiter, MemoryStore
from ratekeeper.engine import Engine
from ratekeeper.stores import open_store
from ratekeeper.testing import FakeClock
from tests.servers import RedisServer

RULES = """\
domain: api
descriptors:
  - key: user
    rate_limit: {{unit: minute, requests_per_unit: {amount}}}
"""

#: How long a child may take before it is killed and the test fails.
CHILD_TIMEOUT = 30.0


def forked(children: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(number)`` in ``children`` forked children at once; their results, in order.

    A child reports its result (JSON) or its traceback through a pipe and leaves with
    ``os._exit``, running nothing of this process's cleanup.
    """
    running: list[tuple[int, int]] = []
    for number in range(children):
        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # forking a threaded process
            pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                message = {"result": work(number)}
            except BaseException:
                message = {"error": traceback.format_exc()}
            os.write(write, json.dumps(message).encode())
            os._exit(0)
        os.close(write)
        running.append((pid, read))
    results = []
    deadline = time.monotonic() + CHILD_TIMEOUT
    for pid, read in running:
        chunks = []
        while True:
            if not select.select([read], [], [], max(deadline - time.monotonic(), 0.0))[0]:
                for other, _ in running:
                    os.kill(other, signal.SIGKILL)
                    os.waitpid(other, 0)
                raise AssertionError(f"child {pid} did not answer within {CHILD_TIMEOUT}s")
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(read)
        os.waitpid(pid, 0)
        message = json.loads(b"".join(chunks))
        if "error" in message:
            raise AssertionError(f"child {pid} failed:\n{message['error']}")
        results.append(message["result"])
    return results


def running_threads() -> list[str]:
    return sorted(thread.name for thread in threading.enumerate() if thread.is_alive())


def test_a_memory_limiter_forks_with_its_state_and_a_free_lock(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    limiter = Limiter(store)
    limiter.hit("k", "5/minute")
    limiter.hit("k", "5/minute")
    # Another thread deciding at the moment of the fork holds the store's lock.
    store._lock.acquire()
    try:
        results = forked(3, lambda _: [limiter.hit("k", "5/minute").allowed for _ in range(4)])
    finally:
        store._lock.release()
    assert results == [[True, True, True, False]] * 3  # each child goes on from the copy
    assert limiter.peek("k", "5/minute").remaining == 3  # and this process from its own


def write_rules(path: Path, amount: int) -> None:
    """Replace ``path`` the way editors do: a new file, renamed over the old one."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(RULES.format(amount=amount))
    os.replace(temporary, path)


def limit_of(engine: Engine) -> Limit | None:
    return engine.check("api", [[("user", "alice")]], 0).statuses[0].limit


def test_an_engine_decides_in_forked_children(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "rules.yaml"
    write_rules(path, 5)
    engine = Engine(MemoryStore(clock=clock), rules=path, reload_interval=0.05)
    try:
        assert engine.check("api", [[("user", "alice")]]).allowed
        assert engine.check("api", [[("user", "alice")]]).allowed

        def work(_: int) -> tuple[list[bool], list[str]]:
            allowed = [engine.check("api", [[("user", "alice")]]).allowed for _ in range(4)]
            return allowed, running_threads()

        for allowed, threads in forked(3, work):
            assert allowed == [True, True, True, False]
            assert "ratekeeper-rules" in threads  # started again in the child
    finally:
        engine.close()


@pytest.mark.parametrize("used", [True, False], ids=["used before the fork", "only built"])
def test_an_engine_reloads_its_rules_in_forked_children(tmp_path: Path, used: bool) -> None:
    path = tmp_path / "rules.yaml"
    write_rules(path, 5)
    engine = Engine(rules=path, reload_interval=0.05)
    try:
        if used:
            assert limit_of(engine) == Limit(5, 60)
        ready = [os.pipe() for _ in range(2)]

        def work(number: int) -> list[int | None]:
            seen = [None if (limit := limit_of(engine)) is None else limit.amount]
            os.write(ready[number][1], b"x")  # it decided: the parent may change the file
            deadline = time.monotonic() + 10.0
            while seen[-1] != 7 and time.monotonic() < deadline:
                time.sleep(0.02)
                limit = limit_of(engine)
                seen.append(None if limit is None else limit.amount)
            return [seen[0], seen[-1]]

        def change_once_both_decided() -> None:
            for read, _ in ready:
                select.select([read], [], [], CHILD_TIMEOUT)
            write_rules(path, 7)

        changer = threading.Thread(target=change_once_both_decided)
        changer.start()
        try:
            results = forked(2, work)
        finally:
            changer.join()
            for read, write in ready:
                os.close(read)
                os.close(write)
        assert results == [[5, 7], [5, 7]]
    finally:
        engine.close()


def test_a_redis_limiter_built_before_the_fork_works_in_children(
    redis_server: RedisServer,
) -> None:
    limiter = Limiter(
        open_store(redis_server.url, on_store_error=None, prefix=f"fork-{uuid.uuid4().hex[:8]}")
    )
    try:
        assert limiter.hit("shared", "10/minute").allowed  # a pooled connection, now copied

        def work(_: int) -> list[bool]:
            return [limiter.hit("shared", "10/minute").allowed for _ in range(5)]

        results = forked(4, work)
        assert sum(map(sum, results)) == 9  # 20 attempts, exactly the 9 slots left
        assert not limiter.hit("shared", "10/minute").allowed
    finally:
        limiter.close()
