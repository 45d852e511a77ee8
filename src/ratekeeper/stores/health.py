"""What a request store says of itself: ``store.ping()`` returns a ``Health``."""

from __future__ import annotations

from typing import NamedTuple


class Health(NamedTuple):
    """A request store's health, as ``ping()`` found it.

    ``ok``
        The store answered just now (a memory store always does).
    ``breaker``
        ``"closed"`` (calls go to the store), ``"open"`` (the failure policy answers every
        call until the cooldown ends) or ``"half-open"`` (one probe call is let through);
        ``"closed"`` for a store without a failure policy. For a store of several shards (a
        Redis Cluster), the worst shard's: ``"open"``, else ``"half-open"``, else ``"closed"``.
    ``error``
        Why the store did not answer the ping just now; None when it did, whatever failed
        before (a breaker still open says so in ``breaker`` and ``open_shards``).
    ``failures``
        Store failures seen since the store was opened, over every shard.
    ``opened``
        How many times a circuit breaker opened (a re-opening after a failed probe too), over
        every shard.
    ``degraded``
        Decisions the failure policy made instead of the store.
    ``open_shards``
        The names of the shards whose breaker is not closed, sorted; a Redis Cluster names a
        shard by its master's ``host:port``. A store without shards (one Redis) names none:
        ``breaker`` is its breaker's state.
    ``last_error`` and ``last_error_at``
        The latest failure of a call through the failure policy's breakers, and when it
        happened (``time.time()``), else None: past, kept after the store is back.
    ``instances`` and ``instances_source``
        The processes the ``local`` failure policy divides each limit by, and where that
        number comes from: ``"configured"`` (``instances=N``, 1 for a store without a failure
        policy), ``"counted"`` (the fleet's last roll call, ``instances="auto"``) or
        ``"unknown"`` (not counted yet: 1).
    ``warnings``
        What the store's own settings put at risk, one line each: a Redis Cluster whose
        masters require full coverage (``ratekeeper.stores.redis.coverage``).
    """

    ok: bool
    breaker: str = "closed"
    error: str | None = None
    failures: int = 0
    opened: int = 0
    degraded: int = 0
    open_shards: tuple[str, ...] = ()
    last_error: str | None = None
    last_error_at: float | None = None
    instances: int = 1
    instances_source: str = "configured"
    warnings: tuple[str, ...] = ()
