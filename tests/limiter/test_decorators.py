"""The decorators: an async function keeps its type under AsyncLimiter, and Limiter refuses one.

The typing test runs mypy (strict) on a small program that uses the decorated function as its
author would, and reads mypy's verdict.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mypy import api

from ratekeeper import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore, RateLimitExceeded
from ratekeeper.testing import FakeClock

PROGRAM = """
import asyncio

from ratekeeper import AsyncLimiter

limiter = AsyncLimiter()


@limiter.limit("10/second", key=lambda user: f"user:{user}")
async def profile(user: int) -> int:
    return user


number: int = asyncio.run(profile(7))
reveal_type(profile)
asyncio.run(profile("seven"))
"""


def test_an_async_function_keeps_its_type(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    report, errors, _ = api.run(["--strict", "--no-error-summary", str(program)])
    assert errors == ""
    lines = report.splitlines()
    revealed = [line for line in lines if "Revealed type" in line]
    assert len(revealed) == 1
    assert "def (user: " in revealed[0]
    assert "-> typing.Coroutine[Any, Any, " in revealed[0]
    # The one error is the wrong argument: asyncio.run accepts the call, and the
    # parameters are kept.
    wrong = PROGRAM.splitlines().index('asyncio.run(profile("seven"))') + 1
    failures = [line for line in lines if ": error: " in line]
    assert len(failures) == 1
    assert (
        f'{program.name}:{wrong}: error: Argument 1 to "profile" has incompatible type'
        in (failures[0])
    )


def test_the_sync_decorator_refuses_an_async_function() -> None:
    limiter = Limiter()
    with pytest.raises(TypeError, match=r"use AsyncLimiter\.limit"):

        @limiter.limit("1/minute")
        async def work() -> str:
            return "done"


def test_an_async_limiter_shares_the_sync_limiters_memory(clock: FakeClock) -> None:
    limiter = Limiter(MemoryStore(clock=clock))
    shared = AsyncLimiter(AsyncMemoryStore(limiter.store))
    assert isinstance(limiter.store, MemoryStore)

    @shared.limit("2/minute", key="work")
    async def work() -> str:
        return "done"

    assert limiter.hit("work", "2/minute").allowed
    assert asyncio.run(work()) == "done"
    with pytest.raises(RateLimitExceeded):
        asyncio.run(work())
