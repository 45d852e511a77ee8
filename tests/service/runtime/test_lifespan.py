"""The lifespan's shutdown ends: each task beside the app is stopped even when code it awaits
takes a cancellation for its own, and no wait on the store's ping loses one.

``asyncio.wait_for`` in Python 3.11 returns what it waited on when the cancellation arrives
as that ends: the task cancelled runs on. The probes' copies (``ProbeCopies.keep``) asking
``/readyz`` at the moment the service stopped did just that, and held the shutdown for ever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from ratekeeper import AsyncEngine
from ratekeeper.service.healthcheck import HealthCheck
from ratekeeper.service.http.health import HealthRoutes
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.runtime.lifespan import stop, warn_of_the_store
from ratekeeper.stores import Health
from ratekeeper.stores.memory import AsyncMemoryStore
from ratekeeper.stores.redis.fleet import on_master


def test_a_task_that_takes_its_cancellation_for_its_own_is_stopped_all_the_same() -> None:
    cancellations: list[int] = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                cancellations.append(1)
                if len(cancellations) == 1:
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]
                    continue  # as wait_for did: the first one is lost
                raise

    async def main() -> bool:
        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        await asyncio.wait_for(stop(task), 5)
        return task.cancelled()

    assert asyncio.run(main())
    assert cancellations == [1, 1]


def test_what_a_task_raised_is_logged_and_the_stop_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing() -> None:
        raise ValueError("the figures are gone")

    async def main() -> asyncio.Task[None]:
        task = asyncio.create_task(failing())
        await asyncio.sleep(0)
        await stop(task)
        return task

    with caplog.at_level(logging.ERROR, logger="ratekeeper.service"):
        task = asyncio.run(main())
    assert task.done() and not task.cancelled()
    [record] = caplog.records
    assert record.getMessage() == (
        "test_what_a_task_raised_is_logged_and_the_stop_returns.<locals>.failing failed: "
        "the figures are gone"
    )
    assert record.exc_info is not None and record.exc_info[0] is ValueError


class Answering(AsyncMemoryStore):
    """A memory store whose ping, as it answers, cancels ``self.asking``: the cancellation
    arrives at the very moment the wait on the ping ends."""

    asking: asyncio.Task[Any] | None = None

    async def ping(self) -> Health:
        assert self.asking is not None
        self.asking.cancel()
        return Health(True)


def engine_answering() -> tuple[AsyncEngine, Answering]:
    store = Answering()
    return AsyncEngine(store), store


async def asked_through_readyz(engine: AsyncEngine) -> object:
    return await HealthRoutes(engine).readyz(None)  # type: ignore[arg-type]


async def asked_by_the_metrics(engine: AsyncEngine) -> object:
    metrics = Metrics()
    metrics.track(engine)
    await metrics.refresh()
    return metrics


async def asked_by_the_health_check(engine: AsyncEngine) -> object:
    return await HealthCheck(engine, store=True).check()


async def asked_at_start(engine: AsyncEngine) -> object:
    await warn_of_the_store(engine)
    return engine


@pytest.mark.parametrize(
    "ask",
    [asked_through_readyz, asked_by_the_metrics, asked_by_the_health_check, asked_at_start],
    ids=lambda ask: ask.__name__,
)
def test_a_cancellation_as_the_store_answers_its_ping_is_not_lost(
    ask: Callable[[AsyncEngine], Coroutine[Any, Any, object]],
) -> None:
    engine, store = engine_answering()

    async def main() -> bool:
        task = asyncio.create_task(ask(engine))
        store.asking = task
        await asyncio.wait([task], timeout=5)
        return task.cancelled()

    assert asyncio.run(main())


def test_a_cancellation_as_a_fleet_command_is_answered_is_not_lost() -> None:
    class Server:
        asking: asyncio.Task[Any] | None = None

        async def execute_command(self, *command: Any) -> Any:
            assert self.asking is not None
            self.asking.cancel()
            return 3

    async def main() -> bool:
        server = Server()
        task = asyncio.create_task(on_master(server, None, 1.0, "ZCARD", "roll"))
        server.asking = task
        await asyncio.wait([task], timeout=5)
        return task.cancelled()

    assert asyncio.run(main())
