"""``service.grpc.deadlines``: a call past its deadline is cancelled and marked expired, one
that ends in time never is, the heap keeps no ended call for long, and through the gRPC ASGI
app a call past its ``grpc-timeout`` is answered ``DEADLINE_EXCEEDED`` while one cancelled
from elsewhere (the server stopping) stays cancelled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ratekeeper.service.grpc.asgi import SHOULD_RATE_LIMIT, GrpcApp, frame
from ratekeeper.service.grpc.deadlines import SLACK, Deadline, Deadlines


async def outlast(deadlines: Deadlines, seconds: float) -> Deadline:
    """A call of ``seconds`` that waits for ever: its deadline, once it was cancelled."""
    deadline = deadlines.start(seconds)
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        assert deadline.task.uncancel() == deadline.cancelling
    finally:
        deadlines.end(deadline)
    return deadline


def test_a_call_past_its_deadline_is_cancelled_and_one_in_time_is_not() -> None:
    async def main() -> tuple[Deadline, Deadline, Deadline]:
        deadlines = Deadlines()

        async def in_time() -> Deadline:
            deadline = deadlines.start(60)
            await asyncio.sleep(0)
            deadlines.end(deadline)
            return deadline

        late, early, kept = await asyncio.gather(
            outlast(deadlines, 0.05), outlast(deadlines, 0.01), in_time()
        )
        return late, early, kept

    late, early, kept = asyncio.run(main())
    assert late.expired and early.expired  # the later-armed, earlier deadline re-armed the timer
    assert not kept.expired and kept.ended


def test_ended_calls_leave_the_heap_when_they_outnumber_the_running() -> None:
    async def main() -> int:
        deadlines = Deadlines()
        running = deadlines.start(3600)
        for _ in range(10 * SLACK):
            deadlines.end(deadlines.start(3600))
        size = len(deadlines._heap)
        deadlines.end(running)
        return size

    assert asyncio.run(main()) <= 2 + SLACK + 1


def test_deadlines_follow_the_running_loop() -> None:
    deadlines = Deadlines()
    assert asyncio.run(outlast(deadlines, 0.01)).expired
    assert asyncio.run(outlast(deadlines, 0.01)).expired  # a second loop, its own timer


class Waits:
    """A servicer whose ``ShouldRateLimit`` says it ``started`` and waits until cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def ShouldRateLimit(self, request: Any, context: Any) -> Any:
        self.started.set()
        await asyncio.Event().wait()


async def call(app: GrpcApp, timeout: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": frame(b""), "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/grpc"), (b"grpc-timeout", timeout)]
    await app({"type": "http", "path": SHOULD_RATE_LIMIT, "headers": headers}, receive, send)
    return sent


def test_past_its_grpc_timeout_a_call_is_deadline_exceeded_and_its_task_goes_on() -> None:
    async def main() -> tuple[list[list[dict[str, Any]]], int]:
        app = GrpcApp(Waits())  # type: ignore[arg-type]
        answers = [await call(app, b"10m") for _ in range(2)]  # the value read, then kept
        task = asyncio.current_task()
        assert task is not None
        return answers, task.cancelling()

    answers, cancelling = asyncio.run(main())
    assert [dict(sent[-1]["headers"])[b"grpc-status"] for sent in answers] == [b"4", b"4"]
    assert cancelling == 0  # the deadline's cancellation is over


def test_a_call_cancelled_from_elsewhere_stays_cancelled() -> None:
    async def main() -> None:
        servicer = Waits()
        app = GrpcApp(servicer)  # type: ignore[arg-type]
        task = asyncio.ensure_future(call(app, b"1H"))
        await servicer.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
