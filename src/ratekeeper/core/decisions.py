"""The verdict every algorithm, store and surface returns."""

from __future__ import annotations

from typing import NamedTuple


class Decision(NamedTuple):
    """The outcome of one hit against one limit.

    ``allowed``
        Whether the hit may go through.
    ``limit``
        The limit's size: requests per window, bucket capacity, burst, or slots in flight.
    ``remaining``
        Hits of cost 1 that would still be allowed right now, after this decision.
    ``reset_after``
        Seconds until the limit is fully available again (0 when it already is).
    ``retry_after``
        Seconds until a hit of the same cost could succeed; 0 when allowed.
    ``delay``
        Seconds an admitted hit must wait before it proceeds (the leaky-bucket shaper); else 0.
    ``granted``
        The cost actually counted: the full cost, a partial grant, or 0 when denied; a denied
        hit under a limit with ``debt`` is counted all the same, and its ``granted`` is its
        cost.
    ``degraded``
        True when the request store failed and a fallback policy produced this decision.

    A denied hit consumes nothing, unless its limit has ``debt``. A hit of cost 0 only looks:
    it reports the current state and consumes nothing (under a limit in debt, a look is
    refused until the debt is paid back).
    """

    allowed: bool
    limit: int
    remaining: int
    reset_after: float
    retry_after: float
    delay: float = 0.0
    granted: int = 0
    degraded: bool = False


_new = tuple.__new__


def allow(
    limit: int, remaining: int, reset_after: float, granted: int, delay: float = 0.0
) -> Decision:
    """Build an allowing decision without the keyword-argument overhead of ``Decision(...)``."""
    return _new(Decision, (True, limit, remaining, reset_after, 0.0, delay, granted, False))


def deny(
    limit: int, remaining: int, reset_after: float, retry_after: float, granted: int = 0
) -> Decision:
    """Build a denying decision; a denied hit consumes nothing (``granted`` 0), unless its limit
    has debt: then ``granted`` is the cost it counted."""
    return _new(Decision, (False, limit, remaining, reset_after, retry_after, 0.0, granted, False))
