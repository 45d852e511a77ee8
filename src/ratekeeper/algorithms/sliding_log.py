"""Sliding window log.

A hit of cost ``c`` at ``now`` is admitted iff the units admitted in ``(now - period, now]``
plus ``c`` are at most ``amount``. Exact: no window of ``period`` seconds, wherever it starts,
ever holds more than ``amount`` units. State: the sorted tuple of the timestamps of the admitted
units, one entry per unit of cost, pruned of those that left the window; at most ``amount``
entries, so O(amount) memory per key and O(amount) time per admitted hit (the tuple is copied).
A cost above ``amount`` never fits (``retry_after`` is infinite).
"""

from __future__ import annotations

from bisect import bisect_right
from math import inf
from typing import TYPE_CHECKING

from ratekeeper.decision import allow, deny

if TYPE_CHECKING:
    from ratekeeper.decision import Decision
    from ratekeeper.limit import Limit

State = tuple[float, ...]


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    amount = limit.amount
    period = limit.period
    log: State = () if state is None else state
    if log and log[0] <= now - period:
        log = log[bisect_right(log, now - period) :]
    count = len(log)
    if count + cost <= amount:
        if cost:
            if log and now < log[-1]:
                # The clock went backwards: keep the log sorted.
                log = tuple(sorted(log + (now,) * cost))
            else:
                log += (now,) * cost
            count += cost
        return log, allow(amount, amount - count, log[-1] + period - now if log else 0.0, cost)
    remaining = amount - count if count < amount else 0
    reset_after = log[-1] + period - now if log else 0.0
    if cost > amount:
        return state, deny(amount, remaining, reset_after, inf)  # it can never fit
    # The hit fits once the oldest ``count + cost - amount`` entries have left the window.
    leaving = log[count + cost - amount - 1]
    return state, deny(amount, remaining, reset_after, leaving + period - now)
