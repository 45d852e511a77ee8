"""Bucketed sliding window.

Time is cut into buckets of ``granularity`` seconds aligned to the epoch, each counting the units
admitted in it. The window at ``now`` is the last ``ceil(period / granularity)`` buckets, the
current one included; a hit of cost ``c`` is admitted iff the units counted in them plus ``c``
are at most ``amount``. Exact to one bucket: any run of that many consecutive buckets holds at
most ``amount`` units, and the rolling window is cut short by less than one bucket, so a window
of ``period`` seconds can exceed the amount only by hits in its first, partial bucket. State:
``(buckets, total)``, the non-empty buckets in the window as ``(start, count)`` pairs, oldest
first, and their sum. At most ``ceil(period / granularity)`` pairs per key, one per non-empty
bucket; O(1) counting, plus a copy of the pairs per admitted hit. A cost above ``amount`` never
fits (``retry_after`` is infinite).

Debt (``Limit(debt=True)``): a refused hit is counted in the current bucket all the same, so
the total passes ``amount``; every hit, a look included, is refused until enough of the buckets
holding it have slid out of the window.
"""

from __future__ import annotations

from math import inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import allow, deny

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "b"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = False

Buckets = tuple[tuple[float, int], ...]
State = tuple[Buckets, int]


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    amount = limit.amount
    width = limit.bucket
    # The window's length in whole buckets (a partial last bucket counts as a whole one).
    span = int(limit.period / width + 0.999999999) * width
    current = now - now % width
    # Bucket starts lie on a grid of ``width``; half a bucket of slack absorbs float error.
    half = 0.5 * width
    cutoff = current - span + half  # a bucket is in the window while its start is above this
    if state is None:
        buckets: Buckets = ()
        total = 0
    else:
        buckets, total = state
        if buckets and buckets[0][0] <= cutoff:
            if buckets[-1][0] <= cutoff:
                buckets = ()
                total = 0
            else:
                i = 0
                while buckets[i][0] <= cutoff:
                    total -= buckets[i][1]
                    i += 1
                buckets = buckets[i:]
    if total + cost <= amount:
        if cost:
            last = buckets[-1] if buckets else None
            if last is not None and last[0] > current - half:
                # The current bucket, or a later one if the clock went backwards. (Concatenation
                # copies the pairs faster than unpacking them.)
                buckets = buckets[:-1] + ((last[0], last[1] + cost),)  # noqa: RUF005
            else:
                buckets += ((current, cost),)
            total += cost
        reset_after = buckets[-1][0] + span - now if buckets else 0.0
        return (buckets, total), allow(amount, amount - total, reset_after, cost)
    granted = 0
    if cost and limit.debt:  # counted all the same, in the current bucket, as if admitted
        last = buckets[-1] if buckets else None
        if last is not None and last[0] > current - half:
            buckets = buckets[:-1] + ((last[0], last[1] + cost),)  # noqa: RUF005
        else:
            buckets += ((current, cost),)
        total += cost
        state = (buckets, total)
        granted = cost
    remaining = amount - total if total < amount else 0
    reset_after = buckets[-1][0] + span - now if buckets else 0.0
    if cost > amount:
        return state, deny(amount, remaining, reset_after, inf, granted)  # it can never fit
    # The hit fits once enough of the oldest buckets have left the window.
    need = total + cost - amount
    i = 0
    while need > buckets[i][1]:
        need -= buckets[i][1]
        i += 1
    return state, deny(amount, remaining, reset_after, buckets[i][0] + span - now, granted)


#: A leased slice's budget stays as it is until the slice's edge: the window frees units only
#: as a bucket leaves it, which is where a slice ends.
FROZEN = True


def edge(now: float, limit: Limit) -> float:
    """When a slice of a leased limit taken at ``now`` ends: with the bucket that counted it, so
    that every unit it grants leaves the window with the bucket it was counted in."""
    width = limit.bucket
    return now - now % width + width


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back ``cost`` units admitted at ``now`` from the bucket holding ``now``, up to its
    count; nothing once it has left the state. (A hit taken while the clock stood behind the
    state went into a later bucket: taking it back from this earlier one keeps the total
    until this bucket leaves the window, and errs on the side of refusing after that.) None
    when no bucket is left."""
    if state is None:
        return None
    buckets, total = state
    width = limit.bucket
    current = now - now % width
    half = 0.5 * width
    for i, (start, count) in enumerate(buckets):
        if current - half < start < current + half:
            taken = cost if cost < count else count
            kept = ((start, count - taken),) if count > taken else ()
            buckets = buckets[:i] + kept + buckets[i + 1 :]
            total -= taken
            break
    else:
        return state
    return (buckets, total) if buckets else None
