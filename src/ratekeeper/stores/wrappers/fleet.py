"""How many processes share a request store, for the ``local`` failure policy's share of each
limit (``wrappers.policy``): configured (``instances=N``), or counted by the store itself
(``instances="auto"``).

Counted, each process renews its entry on the store's roll every ``INTERVAL`` seconds, for
``TTL`` seconds, and reads how many entries are live (``Fleet.run``; on Redis,
``ratekeeper.stores.redis.fleet``). While the store fails, the policy takes its share from the
last count: a fleet that shrinks meanwhile admits less than its limits (the gone processes'
shares unused), one that grows admits up to the new processes' shares more (1/(N+1) of a limit
for each one added to N), and a process that never reached the store (it started during the
outage) takes each limit whole, as one alone would: it is not ready (``/readyz`` answers 503),
so a gateway that follows readiness sends it nothing. On a Redis Cluster the roll is kept on
every master, so a master that fails leaves the count readable: processes that start or stop
meanwhile are counted as usual.

A process stopped cleanly leaves the roll at once (``Fleet.leave``); one killed stays counted
until its entry expires (``TTL``), which only makes the others' shares smaller meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from ratekeeper.core.errors import StoreConfigError, StoreError
from ratekeeper.core.wording import many
from ratekeeper.stores.wrappers.slices import holder_name

#: The count's own logger: a change of count at info; a roll call that failed at debug only,
#: as the store's breaker already logs the outage (``ratekeeper.store``).
log = logging.getLogger("ratekeeper.fleet")

#: Seconds between two roll calls of one process.
INTERVAL = 1.0
#: Seconds an entry stays on the roll unless renewed: ten roll calls missed in a row (a process
#: killed, or one whose event loop is stalled) before the others stop counting it.
TTL = 10.0


class Counting(Protocol):
    """A store that keeps the fleet's roll (an ``AsyncRedisStore``)."""

    async def count_fleet(self, member: str, ttl: float) -> int: ...

    async def leave_fleet(self, member: str) -> None: ...


class FleetSize:
    """The number of processes the ``local`` policy divides each limit by (``size``).

    ``configured`` (``instances=N``) is used as given; else the last count (``counted``),
    else 1 (``source`` ``"unknown"``: never counted)."""

    def __init__(self, configured: int | None = None) -> None:
        self.configured = configured
        self.counted: int | None = None

    @property
    def size(self) -> int:
        if self.configured is not None:
            return self.configured
        return self.counted or 1

    @property
    def source(self) -> str:
        """``"configured"``, ``"counted"`` or ``"unknown"``."""
        if self.configured is not None:
            return "configured"
        return "unknown" if self.counted is None else "counted"

    def count(self, counted: int) -> None:
        """A roll call answered ``counted`` (this process included: at least 1)."""
        self.counted = max(int(counted), 1)


class Fleet:
    """The roll calls of this process on ``store`` into ``size`` (see the module)."""

    def __init__(
        self,
        store: Counting,
        size: FleetSize | None = None,
        *,
        member: str | None = None,
        interval: float = INTERVAL,
        ttl: float = TTL,
    ) -> None:
        self.store = store
        self.size = size if size is not None else FleetSize()
        self.member = member or holder_name()
        self.interval = interval
        self.ttl = ttl

    async def call(self) -> int | None:
        """One roll call: the count, also kept in ``size``; None when the store failed (the
        last count stays)."""
        try:
            counted = await self.store.count_fleet(self.member, self.ttl)
        except (StoreError, StoreConfigError) as error:  # a misconfigured store: said elsewhere
            log.debug(
                "could not count the instances sharing the store (%s); keeping %s",
                error,
                "none yet" if self.size.counted is None else self.size.counted,
            )
            return None
        before = self.size.counted
        self.size.count(counted)
        if before != self.size.counted:
            log.info(
                "%s sharing the request store%s",
                many(self.size.size, "instance"),
                " (counted through the store)" if before is None else f" (was {before})",
            )
        return counted

    async def run(self) -> None:
        """Roll calls every ``interval`` seconds, until cancelled."""
        while True:
            try:
                await self.call()
            except Exception:  # a background duty must outlive a surprise
                log.exception("the roll call failed")
            await asyncio.sleep(self.interval)

    async def leave(self) -> None:
        """Take this process off the roll (as it stops), as far as the store answers."""
        with contextlib.suppress(StoreError, StoreConfigError):
            await self.store.leave_fleet(self.member)
