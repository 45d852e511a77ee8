"""A real Redis killed, hung and restarted under load: each policy answers, nothing hangs."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ratekeeper import Limit, Limiter, open_store
from tests.servers import RedisServer

TIMEOUT = 0.2
MARGIN = 0.3  # scheduling slack on a shared 2-core machine
LIMIT = Limit(5, 3600, "gcra")


def load(limiter: Limiter, seconds: float, key: str) -> list[tuple[float, float, bool, bool]]:
    """Hit for ``seconds``; return (start, duration, allowed, degraded) per call."""
    calls = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        decision = limiter.hit(key, LIMIT)
        calls.append((start, time.monotonic() - start, decision.allowed, decision.degraded))
        time.sleep(0.005)
    return calls


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("policy", ["allow", "deny", "local"])
def test_killed_and_restarted(tmp_path: Path, policy: str) -> None:
    server = RedisServer(tmp_path)
    try:
        limiter = Limiter(open_store(server.url, on_store_error=policy, timeout=TIMEOUT))
        before = load(limiter, 0.3, "k")
        assert [allowed for _, _, allowed, _ in before[:6]] == [True] * 5 + [False]
        assert not any(degraded for *_, degraded in before)

        server.kill()
        down = load(limiter, 1.0, "k")
        assert all(degraded for *_, degraded in down)
        allowed = [ok for _, _, ok, _ in down]
        if policy == "allow":
            assert all(allowed)
        elif policy == "deny":
            assert not any(allowed)
        else:  # a fresh in-process limiter: 5 allowed, then refused
            assert allowed[:6] == [True] * 5 + [False] and not any(allowed[5:])

        server.start()  # same port, empty: the store comes back by itself
        back = load(limiter, 2.0, "k2")
        recovered = [i for i, (*_, degraded) in enumerate(back) if not degraded]
        assert recovered, "the limiter never returned to the store"
        exact = [ok for _, _, ok, degraded in back[recovered[0] :] if not degraded]
        assert exact[:6] == [True] * 5 + [False]
        worst = max(duration for _, duration, _, _ in before + down + back)
        assert worst < TIMEOUT + MARGIN
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.serial
def test_a_hung_server_costs_one_timeout_per_call_then_none(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    try:
        limiter = Limiter(open_store(server.url, on_store_error="allow", timeout=TIMEOUT))
        assert not limiter.hit("k", LIMIT).degraded
        os.kill(server.pid, signal.SIGSTOP)  # alive but silent
        try:
            calls = load(limiter, 1.5, "k")
        finally:
            os.kill(server.pid, signal.SIGCONT)
        durations = [duration for _, duration, _, _ in calls]
        assert all(degraded for *_, degraded in calls)
        assert max(durations) < TIMEOUT + MARGIN
        slow = [d for d in durations if d >= TIMEOUT * 0.9]
        # The breaker opens after three timeouts; then at most one probe per cooldown waits.
        assert 3 <= len(slow) <= 5
        time.sleep(1.1)
        assert not limiter.hit("k", LIMIT).degraded
    finally:
        server.stop()


def test_a_restarted_server_is_reported_up_at_once(tmp_path: Path) -> None:
    """The connections of the server that was killed wait idle in the pool: the first ping
    after the restart drops them and answers on a fresh one, instead of reporting the store
    down for a dead connection ('Connection closed by server')."""
    import asyncio

    from ratekeeper.stores import open_async_store

    server = RedisServer(tmp_path)
    try:

        async def run() -> list[bool]:
            store = open_async_store(server.url, timeout=1.0)
            try:
                await asyncio.gather(*(store.ping() for _ in range(8)))  # 8 connections pooled
                server.kill()
                server.start()  # same port: every pooled connection is dead
                return [(await store.ping()).ok for _ in range(8)]
            finally:
                await store.close()

        assert asyncio.run(run()) == [True] * 8
    finally:
        server.stop()
