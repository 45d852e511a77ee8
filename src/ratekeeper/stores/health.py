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
        ``"closed"`` for a store without a failure policy.
    ``error``
        Why the store did not answer, else the last failure seen, else None.
    ``failures``
        Store failures seen since the store was opened.
    ``opened``
        How many times the circuit breaker opened.
    ``degraded``
        Decisions the failure policy made instead of the store.
    """

    ok: bool
    breaker: str = "closed"
    error: str | None = None
    failures: int = 0
    opened: int = 0
    degraded: int = 0
