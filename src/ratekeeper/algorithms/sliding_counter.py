"""Sliding window counter (approximate).

Time is cut into windows of ``period`` seconds aligned to the epoch, as in the fixed window. The
rolling window ending at ``now`` is estimated from the count of the current window and that of
the previous one, assumed spread evenly::

    estimate = previous * (1 - elapsed / period) + current     elapsed = now - window_start

A hit of cost ``c`` is admitted iff ``estimate + c <= amount``. Approximate: no aligned window
ever admits more than ``amount``, but a rolling window ending at ``now`` can, when the previous
window's hits were not spread evenly: by at most ``previous * elapsed / period``, so always
under twice the amount. A cost above ``amount`` never fits (``retry_after`` is infinite).
State: ``(window_start, previous, current)``. O(1) time and memory.

Debt (``Limit(debt=True)``): a refused hit is counted in the current window all the same, so
the estimate passes ``amount``; every hit, a look included, is refused until the count has
slid out far enough. The count weighs on the next window as its previous one, so a debt is
paid back within two periods at most.
"""

from __future__ import annotations

from math import inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import allow, deny

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "c"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = False

State = tuple[float, int, int]

EPSILON = 1e-9


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    amount = limit.amount
    period = limit.period
    if state is None:
        start = now - now % period
        previous = current = 0
    else:
        start, previous, current = state
        if now - start >= period:
            # A later window. Starts are compared with half a period of slack, so that float
            # error in ``now % period`` never mistakes which one.
            later = now - now % period
            advanced = later - start
            if advanced >= 0.5 * period:
                start = later
                previous = current if advanced < 1.5 * period else 0
                current = 0
    # Seconds until this window ends; at most a period, should the clock go backwards.
    left = start + period - now
    if left > period:
        left = period
    estimate = previous * left / period + current if previous else current
    # The estimate reaches 0 when the next window ends if this one has hits, else when this
    # one ends.
    reset_after = left + period if current else (left if previous else 0.0)
    if estimate + cost <= amount + EPSILON:
        if cost:
            current += cost
            estimate += cost
            reset_after = left + period
        remaining = int(amount - estimate + EPSILON) if estimate < amount else 0
        return (start, previous, current), allow(amount, remaining, reset_after, cost)
    granted = 0
    if cost and limit.debt:  # counted all the same: the current count passes the amount
        current += cost
        estimate += cost
        reset_after = left + period
        state = (start, previous, current)
        granted = cost
    remaining = int(amount - estimate + EPSILON) if estimate < amount else 0
    if cost > amount:
        return state, deny(amount, remaining, reset_after, inf, granted)  # it can never fit
    room = amount - cost - current
    if room >= 0:
        # The weighted previous count decays enough before this window ends.
        retry_after = left - room * period / previous
    else:
        # Only in the next window, as this window's count decays there in its turn.
        retry_after = left + period - (amount - cost) * period / current
    if retry_after < 0.0:
        retry_after = 0.0
    return state, deny(amount, remaining, reset_after, retry_after, granted)


def edge(now: float, limit: Limit) -> float:
    """When a slice of a leased limit taken at ``now`` ends: with the window that counted it
    (the estimate knows a window's count, not when in it each unit was granted)."""
    return now - now % limit.period + limit.period


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back ``cost`` units admitted at ``now`` from the count of the window holding
    ``now``: the current window's count if the state is still in that window, the previous
    window's if the state has moved one window on, else nothing (the hit has left the
    estimate). Counts stop at 0; None when both are 0."""
    if state is None:
        return None
    start, previous, current = state
    period = limit.period
    moved = start - (now - now % period)  # how far the state is past the hit's window
    if -0.5 * period < moved < 0.5 * period:
        current = current - cost if current > cost else 0
    elif 0.5 * period <= moved < 1.5 * period:
        previous = previous - cost if previous > cost else 0
    else:
        return state
    if not previous and not current:
        return None
    return (start, previous, current)
