"""What Envoy's health checks are answered: ``GET /healthcheck`` and, over gRPC, the standard
health service for ``ratelimit`` and the rate-limit service's own name.

By default they say the process runs (``OK``, ``SERVING``). Told to follow the request store
(``--healthcheck-store``, the reference's ``REDIS_HEALTH_CHECK_ACTIVE_CONNECTION``), they fail
while the store does not answer its ping (``/readyz``'s test); told to follow the rules
(``--healthcheck-rules``, its ``HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED``), while no domain is
loaded. ``HealthCheck.run`` checks every ``INTERVAL`` seconds and tells its listeners each
change; ``/healthcheck`` then answers 500 with an empty body, as the reference's does, and the
gRPC names ``NOT_SERVING``. The overall server's name, ``""``, stays ``SERVING``, as in the
reference, whose health server only ever sets ``ratelimit``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratekeeper.engine import AsyncEngine

log = logging.getLogger("ratekeeper.service")

#: Seconds between two checks.
INTERVAL = 1.0
#: Seconds the store has to answer its ping.
PING_TIMEOUT = 2.0

#: Told of each change: ``listener(healthy)``.
Listener = Callable[[bool], Awaitable[None]]


class HealthCheck:
    """The health Envoy's checks are answered over ``engine``: following the request store
    (``store``), the rules (``rules``), or both. ``healthy`` is the last check's finding
    (True until the first); ``why`` says what failed it."""

    def __init__(self, engine: AsyncEngine, *, store: bool = False, rules: bool = False) -> None:
        self.engine = engine
        self.store = store
        self.rules = rules
        self.healthy = True
        self.why = ""
        self.listeners: list[Listener] = []

    async def check(self) -> bool:
        """Check now; tell the listeners if the finding changed. Returns it."""
        why = ""
        if self.rules and not self.engine.rules.domains:
            why = "no rule loaded"
        elif self.store:
            why = await self._store_problem()
        healthy = not why
        if healthy != self.healthy:
            if healthy:
                log.info("health check: healthy again")
            else:
                log.warning("health check: unhealthy: %s", why)
            self.healthy, self.why = healthy, why
            for listener in self.listeners:
                await listener(healthy)
        return healthy

    async def _store_problem(self) -> str:
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                health = await self.engine.store.ping()
        except Exception as error:  # a store that cannot even say how it is: down
            return f"the request store did not answer: {str(error) or type(error).__name__}"
        if not health.ok:
            return f"the request store does not answer: {health.error}"
        return ""

    async def run(self) -> None:
        """Check every ``INTERVAL`` seconds, until cancelled."""
        while True:
            await self.check()
            await asyncio.sleep(INTERVAL)


def following(engine: AsyncEngine, store: bool, rules: bool) -> HealthCheck | None:
    """The health check over ``engine`` following the store, the rules, or both; None when it
    follows neither (the checks then say the process runs)."""
    return HealthCheck(engine, store=store, rules=rules) if store or rules else None
