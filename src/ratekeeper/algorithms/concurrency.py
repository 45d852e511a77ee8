"""Concurrency limiter: at most ``amount`` slots in flight, each expiring ``period`` seconds
after it was taken (the slot TTL).

A hit of cost ``c > 0`` acquires ``c`` slots, admitted iff ``live + c <= amount``, where
``live`` counts the slots not yet expired; a slot expires ``period`` seconds after it was
taken, so a holder that crashes without releasing gives its slot back. A hit of cost ``c < 0``
releases up to ``|c|`` slots, always allowed, dropping the earliest-expiring slots first (the
conservative choice: a slot that could still be relied on for longer is never the one freed);
``Decision.granted`` is the negative count actually released. Cost 0 looks. State: a sorted
tuple of slot expiry times, one per slot held. O(log n + n) time and up to ``amount`` floats
per key.

Denied: ``retry_after`` is the time until enough slots expire; a cost above ``amount`` can never
be admitted (``retry_after`` is infinite).

No debt: slots are held and given back, not paid back over time, so ``Limit`` refuses
``debt=True`` for this algorithm.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from math import inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import allow, deny

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "n"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = False

#: Why its limits cannot lease (``Limit(sync="leased")``).
NO_LEASE = "its slots are given back one by one as their holders finish, which the store must see"

State = tuple[float, ...]

_EMPTY: State = ()


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    amount = limit.amount
    slots = _EMPTY if state is None else state
    expired = bisect_right(slots, now)
    live = len(slots) - expired
    if cost > 0:
        if live + cost <= amount:
            expiry = now + limit.period
            if expired:
                slots = slots[expired:]
            if not live or slots[-1] <= expiry:
                slots = slots + (expiry,) * cost
            else:
                at = bisect_right(slots, expiry)
                slots = slots[:at] + (expiry,) * cost + slots[at:]
            return slots, allow(amount, amount - live - cost, slots[-1] - now, cost)
        free = amount - live
        last = slots[-1] - now if live else 0.0
        retry = slots[expired + live + cost - amount - 1] - now if cost <= amount else inf
        return state, deny(amount, free if free > 0 else 0, last, retry)
    if cost == 0:
        free = amount - live
        return state, allow(amount, free if free > 0 else 0, slots[-1] - now if live else 0.0, 0)
    released = -cost if -cost < live else live
    slots = slots[expired + released :]
    free = amount - len(slots)
    return slots, allow(
        amount, free if free > 0 else 0, slots[-1] - now if slots else 0.0, -released
    )


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back ``cost`` slots acquired at ``now``: remove up to ``cost`` slots expiring at
    ``now + period`` (fewer when some have expired or been released since). None when no
    slot is left."""
    if not state:
        return None
    expiry = now + limit.period
    end = bisect_right(state, expiry)
    start = bisect_left(state, expiry, 0, end)
    dropped = min(cost, end - start)
    slots = state[: end - dropped] + state[end:]
    return slots if slots else None
