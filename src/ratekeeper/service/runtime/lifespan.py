"""What the service's app runs from its startup to its shutdown, beside its HTTP routes: the
engine, the gRPC server on the same event loop, and the tasks of every second.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.service.dashboard import Dashboard
    from ratekeeper.service.inflight import InFlightBound
    from ratekeeper.service.observe.access import AccessLog
    from ratekeeper.service.observe.metrics import Metrics

#: Seconds the gRPC server gives its calls in flight when the service stops.
GRPC_GRACE = 10.0


def lifespan(
    engine: AsyncEngine,
    *,
    close_engine: bool,
    metrics: Metrics | None,
    grpc_address: str | None,
    in_flight_bound: InFlightBound | None,
    envoy_headers: tuple[str, str, str] | None,
    access_log: AccessLog | None,
    dashboard: Dashboard | None,
) -> Callable[[object], AbstractAsyncContextManager[None]]:
    """What the app of ``create_app`` runs from its startup to its shutdown: the engine
    started; the gRPC server on ``grpc_address``, if given; with many workers, this one's
    metrics published every second; the dashboard's recording. At shutdown, the gRPC server
    stopped (its calls in flight given ``GRPC_GRACE`` seconds), the tasks cancelled, the
    metrics' last figures published, and the engine closed if ``close_engine``."""

    @asynccontextmanager
    async def running(app: object) -> AsyncIterator[None]:
        await asyncio.to_thread(engine.start)
        server = None
        if grpc_address is not None:
            from ratekeeper.service.grpc.aio import serve_grpc

            server, _ = await serve_grpc(
                engine,
                grpc_address,
                metrics,
                in_flight_bound,
                header_names=envoy_headers,
                access_log=access_log,
            )
        tasks = []
        if metrics is not None and metrics.multiprocess:
            # with many workers, this one's figures written every second
            tasks.append(asyncio.create_task(metrics.publish_every()))
        if dashboard is not None:
            tasks.append(asyncio.create_task(dashboard.run()))
        try:
            yield
        finally:
            if server is not None:
                await server.stop(GRPC_GRACE)
            for task in tasks:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
            if metrics is not None:
                metrics.close()  # with many workers: the last figures, the gauges dropped
            if close_engine:
                await engine.close()

    return running
