"""What the service's app runs from its startup to its shutdown, beside its HTTP routes: the
engine, the gRPC server on the same event loop, and the tasks of every second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from ratekeeper.stores.health import Health

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.service.dashboard import Dashboard
    from ratekeeper.service.grpc.tls import GrpcTls
    from ratekeeper.service.healthcheck import HealthCheck
    from ratekeeper.service.http.copies import ProbeCopies
    from ratekeeper.service.inflight import InFlightBound
    from ratekeeper.service.observe.access import AccessLog
    from ratekeeper.service.observe.metrics import Metrics
    from ratekeeper.service.observe.stats import Publisher
    from ratekeeper.service.observe.tracing import Tracing

log = logging.getLogger("ratekeeper.service")

#: Seconds the gRPC server gives its calls in flight when the service stops.
GRPC_GRACE = 10.0
#: Seconds the store is given to answer the ping at start.
START_PING = 5.0
#: Seconds between two cancellations of a task that has not ended at shutdown.
STOP_AGAIN = 0.1


async def warn_of_the_store(engine: AsyncEngine) -> None:
    """Log, once at start, a request store that does not answer, and what its own settings put
    at risk (its ``Health.warnings``: a cluster that refuses every key while one master fails
    over); both stay in ``/readyz``."""
    try:
        async with asyncio.timeout(START_PING):
            health = await engine.store.ping()
    except TimeoutError:
        health = Health(False, error=f"no answer within {START_PING:g} s")
    except Exception as error:  # a store that cannot even say how it is
        health = Health(False, error=str(error) or type(error).__name__)
    if not health.ok:
        log.warning("request store: unavailable at start (/readyz says 503): %s", health.error)
    for warning in health.warnings:
        log.warning("request store: %s", warning)


async def stop(task: asyncio.Task[Any]) -> None:
    """``task`` cancelled, and waited for until it ends: cancelled again every ``STOP_AGAIN``
    seconds, for code it awaits may take a cancellation for its own and carry on (as
    ``asyncio.wait_for`` does in Python 3.11 when what it waits on ends at that very moment),
    and the task, a loop, would then run on and hold the shutdown for ever. What it raised
    other than its cancellation is logged: the rest of the shutdown still runs."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=STOP_AGAIN)
    if not task.cancelled() and (error := task.exception()) is not None:
        name = getattr(task.get_coro(), "__qualname__", task.get_name())
        log.error("%s failed: %s", name, error, exc_info=error)


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
    probe_copies: ProbeCopies | None = None,
    grpc_tls: GrpcTls | None = None,
    tracing: Tracing | None = None,
    stats: Publisher | None = None,
    dynamic_metadata: bool = False,
    health_check: HealthCheck | None = None,
) -> Callable[[object], AbstractAsyncContextManager[None]]:
    """What the app of ``create_app`` runs from its startup to its shutdown: the engine started;
    the gRPC server on ``grpc_address``, if given (over TLS with ``grpc_tls``); with many
    workers, this one's metrics published every second; the dashboard's recording; the
    in-flight bound's reading of the loop's lag, when it bounds the wait, and the copies of the
    probes' answers kept while it sheds (``probe_copies``); the roll calls that count the
    instances sharing the store (``stores.wrappers.fleet``), when not configured; the checks of
    ``health_check``. At shutdown, the gRPC server stopped (its calls in flight given
    ``GRPC_GRACE`` seconds), the last spans of ``tracing`` sent, the tasks cancelled, this
    process off the fleet's roll, the metrics' last figures published, envoyproxy/ratelimit's
    statistics (``stats``) flushed a last time, and the engine closed if ``close_engine``."""

    @asynccontextmanager
    async def running(app: object) -> AsyncIterator[None]:
        await _start(engine, health_check)
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
                tls=grpc_tls,
                tracing=tracing,
                dynamic_metadata=dynamic_metadata,
                health_check=health_check,
            )
        fleet = getattr(engine.store, "fleet", None)  # instances="auto": counted by the store
        tasks = _start_tasks(
            app,
            metrics=metrics,
            dashboard=dashboard,
            in_flight_bound=in_flight_bound,
            probe_copies=probe_copies,
            fleet=fleet,
            health_check=health_check,
        )
        try:
            yield
        finally:
            if server is not None:
                await server.stop(GRPC_GRACE)
            if tracing is not None:  # every request is answered: its span has ended
                await asyncio.to_thread(tracing.close)
            for task in tasks:
                await stop(task)
            if fleet is not None:
                await fleet.leave()  # the others count one fewer at their next roll call
            if metrics is not None:
                metrics.close()  # with many workers: the last figures, the gauges dropped
            if stats is not None:
                await asyncio.to_thread(stats.close)  # what was counted, sent
            if close_engine:
                await engine.close()

    return running


async def _start(engine: AsyncEngine, health_check: HealthCheck | None) -> None:
    """The engine started, what the store's settings put at risk logged, and the health
    check's first finding made, before the first probe."""
    await asyncio.to_thread(engine.start)
    await warn_of_the_store(engine)
    if health_check is not None:
        await health_check.check()


def _start_tasks(
    app: object,
    *,
    metrics: Metrics | None,
    dashboard: Dashboard | None,
    in_flight_bound: InFlightBound | None,
    probe_copies: ProbeCopies | None,
    fleet: Any,
    health_check: HealthCheck | None = None,
) -> list[asyncio.Task[Any]]:
    """The tasks that run beside the app, started: the metrics published (with many workers),
    the dashboard's recording, the loop's lag read and the probes' answers copied, the fleet's
    roll calls, the health check Envoy's probes are answered with."""
    tasks = []
    if metrics is not None and metrics.multiprocess:
        # with many workers, this one's figures written every second
        tasks.append(asyncio.create_task(metrics.publish_every()))
    if dashboard is not None:
        tasks.append(asyncio.create_task(dashboard.run()))
    if in_flight_bound is not None:
        if in_flight_bound.waiting.max_wait:
            tasks.append(asyncio.create_task(in_flight_bound.watch()))  # the loop's lag
        if probe_copies is not None:
            bound = in_flight_bound
            copying = probe_copies.keep(app, lambda: bound.shedding)  # type: ignore[arg-type]
            tasks.append(asyncio.create_task(copying))
    if fleet is not None:
        tasks.append(asyncio.create_task(fleet.run()))
    if health_check is not None:
        tasks.append(asyncio.create_task(health_check.run()))
    return tasks
