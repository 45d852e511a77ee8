"""Sliding window log.

A hit of cost ``c`` at ``now`` is admitted iff the units admitted in ``(now - period, now]``
plus ``c`` are at most ``amount``. Exact: no window of ``period`` seconds, wherever it starts,
ever holds more than ``amount`` units. State: the timestamps of the admitted units, oldest
first, one entry per unit of cost; at most ``amount`` entries, so O(amount) memory per key, and
O(1) amortised time per hit (appends on the right, prunes on the left). A log is a list while it
is short (``SHORT`` entries; a one-entry list is 64 bytes), and becomes a deque once longer
(760 bytes at least, but its pops on the left cost O(1) however long it is).

The log is the one state ratekeeper updates in place: copying it on every hit would cost
O(amount). Only an admitted hit changes it (it drops the entries that left the window and
appends its own); a look or a refusal leaves it as it was. A store that must be able to roll
back (``apply_many(all_or_nothing=True)``) steps on ``copy_state(state)``.

No debt: a log of one entry per unit, at most ``amount`` of them, cannot hold one without
growing without bound, so ``Limit`` refuses ``debt=True`` for this algorithm.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from itertools import repeat
from math import inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import Decision, allow

if TYPE_CHECKING:
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "l"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = False

#: Why its limits cannot lease (``Limit(sync="leased")``).
NO_LEASE = (
    "it logs each unit with the time it was counted, so a unit granted later than "
    "that would leave the log early and a slice could pass the limit"
)

State = list[float] | deque[float]

_new = tuple.__new__

#: The most entries a log holds as a list; a log that grows longer becomes a deque.
SHORT = 64


def copy_state(state: State) -> State:
    """A copy to step on when the step may have to be rolled back."""
    return state.copy()


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    amount = limit.amount
    period = limit.period
    log: State = [] if state is None else state
    # Entries that left the window: dropped only by a hit that is admitted, so that a look or
    # a refusal changes nothing, even from a clock running ahead.
    edge = now - period
    gone = _gone(log, edge) if log and log[0] <= edge else 0
    count = len(log) - gone
    if count + cost <= amount:
        if cost:
            if gone:
                if isinstance(log, list):
                    del log[:gone]
                else:
                    for _ in range(gone):
                        log.popleft()
            if log and now < log[-1]:
                # The clock went backwards: keep the log sorted.
                index = bisect_right(log, now)
                for _ in range(cost):
                    log.insert(index, now)
            elif cost == 1:
                log.append(now)
            else:
                log.extend(repeat(now, cost))
            count += cost
            if count > SHORT and isinstance(log, list):
                log = deque(log)
        return log, allow(amount, amount - count, log[-1] + period - now if count else 0.0, cost)
    # A refusal, its ``Decision`` built inline (as ``deny`` would, one call less). The hit
    # fits once the oldest ``count + cost - amount`` entries have left the window; a cost
    # above the amount never fits.
    return state, _new(
        Decision,
        (
            False,
            amount,
            amount - count if count < amount else 0,
            log[-1] + period - now if count else 0.0,
            log[gone + count + cost - amount - 1] + period - now if cost <= amount else inf,
            0.0,
            0,
            False,
        ),
    )


#: Entries counted one by one from the left before ``_gone`` gallops instead.
_WALK = 16


def _gone(log: State, start: float) -> int:
    """How many entries of ``log`` are at or before ``start``: ``bisect_right(log, start)``.

    Counted from the left, in time that grows with the count rather than with the log: a
    deque (a long log) is a list of 64-entry blocks, and indexing it walks them from the
    nearer end, so a bisection of the whole log costs O(n), not O(log n). A busy log loses
    a few entries between two hits, which are counted one by one; a longer run of
    departures is bracketed by doubling steps from the left, then bisected within."""
    length = len(log)
    gone = 1  # log[0] is gone: the caller checked
    while gone < length and log[gone] <= start:
        gone += 1
        if gone == _WALK:  # every entry before ``low`` is gone; ``high`` is the next to try
            low, high = gone, 2 * gone
            while high < length and log[high] <= start:
                low, high = high + 1, 2 * high
            return bisect_right(log, start, low, high if high < length else length)
    return gone


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back ``cost`` units admitted at ``now``: remove up to ``cost`` entries stamped
    ``now`` (fewer when some have left the log since). Updates the log in place, as ``step``
    does; None when the log is left empty."""
    if not state:
        return None
    end = bisect_right(state, now)
    start = bisect_left(state, now, 0, end)
    for _ in range(min(cost, end - start)):
        end -= 1
        del state[end]
    return state if state else None
