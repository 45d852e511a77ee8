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
        Why the store did not answer, else the last failure seen, else None.
    ``failures``
        Store failures seen since the store was opened, over every shard.
    ``opened``
        How many times a circuit breaker opened (a re-opening after a failed probe too), over
        every shard.
    ``degraded``
        Decisions the failure policy made instead of the store.
    ``open_shards``
        The names of the shards whose breaker is not closed (``""`` names a store without
        shards), sorted; a Redis Cluster names a shard by its master's ``host:port``.
    """

    ok: bool
    breaker: str = "closed"
    error: str | None = None
    failures: int = 0
    opened: int = 0
    degraded: int = 0
    open_shards: tuple[str, ...] = ()
