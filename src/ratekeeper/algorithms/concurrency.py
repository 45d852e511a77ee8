"""Concurrency limiter: at most ``amount`` slots in flight, each a lease of ``period`` seconds.

A hit of cost ``c > 0`` acquires ``c`` slots, admitted iff ``live + c <= amount``, where
``live`` counts the leases not yet expired; each slot is a lease that expires ``period`` seconds
after it was taken, so a holder that crashes without releasing gives its slot back. A hit of
cost ``c < 0`` releases up to ``|c|`` slots, always allowed, dropping the earliest-expiring
leases first (the conservative choice: a lease that could still be relied on for longer is never
the one freed); ``Decision.granted`` is the negative count actually released. Cost 0 looks.
State: a sorted tuple of lease expiry times, one per slot held. O(log n + n) time and up to
``amount`` floats per key.

Denied: ``retry_after`` is the time until enough leases expire; a cost above ``amount`` can never
be admitted (``retry_after`` is infinite).

No debt: slots are leased and given back, not paid back over time, so ``Limit`` refuses
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
    leases = _EMPTY if state is None else state
    expired = bisect_right(leases, now)
    live = len(leases) - expired
    if cost > 0:
        if live + cost <= amount:
            expiry = now + limit.period
            if expired:
                leases = leases[expired:]
            if not live or leases[-1] <= expiry:
                leases = leases + (expiry,) * cost
            else:
                at = bisect_right(leases, expiry)
                leases = leases[:at] + (expiry,) * cost + leases[at:]
            return leases, allow(amount, amount - live - cost, leases[-1] - now, cost)
        free = amount - live
        last = leases[-1] - now if live else 0.0
        retry = leases[expired + live + cost - amount - 1] - now if cost <= amount else inf
        return state, deny(amount, free if free > 0 else 0, last, retry)
    if cost == 0:
        free = amount - live
        return state, allow(amount, free if free > 0 else 0, leases[-1] - now if live else 0.0, 0)
    released = -cost if -cost < live else live
    leases = leases[expired + released :]
    free = amount - len(leases)
    return leases, allow(
        amount, free if free > 0 else 0, leases[-1] - now if leases else 0.0, -released
    )


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back ``cost`` slots acquired at ``now``: remove up to ``cost`` leases expiring at
    ``now + period`` (fewer when some have expired or been released since). None when no
    lease is left."""
    if not state:
        return None
    expiry = now + limit.period
    end = bisect_right(state, expiry)
    start = bisect_left(state, expiry, 0, end)
    dropped = min(cost, end - start)
    leases = state[: end - dropped] + state[end:]
    return leases if leases else None
