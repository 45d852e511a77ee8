"""The HTTP surface's probes and self-description: ``GET /healthz`` (the process answers),
``GET /readyz`` (the request store answers; else 503), Envoy's ``GET /healthcheck``
(``ratekeeper.service.healthcheck``) and ``GET /openapi.json``.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ratekeeper.service.http.openapi import document
from ratekeeper.service.http.responses import json_response, problem_response
from ratekeeper.wire.problems import Problem

if TYPE_CHECKING:
    from ratekeeper.config import ConfigStore
    from ratekeeper.engine import AsyncEngine
    from ratekeeper.service.healthcheck import HealthCheck

#: Seconds ``/readyz`` waits for each store.
READY_TIMEOUT = 2.0


async def config_error(config: ConfigStore) -> str | None:
    """None when the configuration store answers within ``READY_TIMEOUT``, else why not."""
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            await asyncio.to_thread(config.ping)
    except TimeoutError:
        return f"no answer within {READY_TIMEOUT:g} s"
    except Exception as error:  # reported, whatever it is
        return str(error) or type(error).__name__
    return None


def past_failure(message: str | None, at: float | None) -> dict[str, str] | None:
    """A past failure as ``/readyz`` reports it: its message and when it happened."""
    if message is None or at is None:
        return None
    return {"message": message, "at": stamp(at)}


def stamp(at: float) -> str:
    """``time.time()`` value ``at`` in UTC, to the millisecond: ``2026-11-27T14:00:00.000Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"


class HealthRoutes:
    """The probes' handlers over one engine (what the request store says of its own health is
    ``ratekeeper.stores.Health``); ``health_check``, if given, answers ``/healthcheck``."""

    def __init__(self, engine: AsyncEngine, health_check: HealthCheck | None = None) -> None:
        self.engine = engine
        self.health_check = health_check

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: the process answers."""
        return json_response({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """``GET /readyz``: 200 when the request store answers, else 503. ``error`` says why it
        does not answer now (null once it does, whatever failed before); ``breaker`` is the
        worst breaker's state, and ``open_shards`` names the shards (a Redis Cluster's masters)
        whose breaker is not closed, none for a store without shards (one Redis); ``last_error``
        is the latest failure a decision met (``message``, and ``at``: when, in UTC), past, kept
        after the store is back (null when none has failed); ``instances`` the processes the
        ``local`` policy divides each limit by (``size``), and whether that is ``configured``,
        ``counted`` through the store, or ``unknown`` (not counted yet: 1); ``warnings`` what the
        store's own settings put at risk (a cluster that refuses every key while one master
        fails over), one line each. The configuration
        store is reported beside it but does not decide: without it the engine goes on
        deciding by the limits it knew and by the rules (``status`` is then ``degraded``),
        and every instance shares it, so failing the probe would take them all away."""
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                health = await self.engine.store.ping()
        except Exception as error:  # a store that cannot even say how it is: not ready
            detail = str(error) or type(error).__name__
            return problem_response(
                Problem.of("unavailable", f"the store did not answer: {detail}")
            )
        store = {
            "ok": health.ok,
            "breaker": health.breaker,
            "error": health.error,
            "open_shards": list(health.open_shards),
            "last_error": past_failure(health.last_error, health.last_error_at),
            "instances": {"size": health.instances, "source": health.instances_source},
            "warnings": list(health.warnings),
        }
        if not health.ok:
            return json_response({"status": "unavailable", "store": store}, 503)
        config = self.engine.config
        if config is None:
            return json_response({"status": "ready", "store": store})
        problem = await config_error(config)
        status = "ready" if problem is None else "degraded"
        return json_response(
            {"status": status, "store": store, "config": {"ok": problem is None, "error": problem}}
        )

    async def healthcheck(self, request: Request) -> Response:
        """``GET /healthcheck``: ``OK``, as Envoy's rate-limit service answers it; 500 with an
        empty body while the health check followed fails, as it answers then."""
        if self.health_check is not None and not self.health_check.healthy:
            return Response(status_code=500)
        return PlainTextResponse("OK")

    async def openapi(self, request: Request) -> Response:
        """``GET /openapi.json``."""
        return json_response(document())
