"""Fixed window counter.

Time is cut into windows of ``period`` seconds aligned to the epoch (or, with ``calendar=True``,
to the UTC calendar day, ISO week, month or year) and each window admits ``amount``. Exact per
window; a client can pass up to twice the amount across one window edge. A cost above
``amount`` never fits (``retry_after`` is infinite). State:
``(window_start, count)``. O(1) time and memory.

Debt (``Limit(debt=True)``): a refused hit is counted all the same, so the count passes
``amount``; the window then refuses every hit, a look included, until it ends, and the next
window starts from 0.
"""

from __future__ import annotations

from datetime import UTC, datetime
from math import inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import Decision

if TYPE_CHECKING:
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "f"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = False

State = tuple[float, int]

_DAY = 86_400.0
_WEEK = 7 * _DAY
_MONDAY = 4 * _DAY  # 1970-01-05, the first Monday after the epoch

_new = tuple.__new__


def window(now: float, limit: Limit) -> tuple[float, float]:
    """Return ``(start, end)`` of the window holding ``now``."""
    unit = limit.unit
    if not unit:
        start = now - now % limit.period
        return start, start + limit.period
    if unit == "day":
        start = now - now % _DAY
        return start, start + _DAY
    if unit == "week":
        start = now - (now - _MONDAY) % _WEEK
        return start, start + _WEEK
    moment = datetime.fromtimestamp(now, UTC)
    if unit == "month":
        first = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        following = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
    else:
        first = moment.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
        following = first.replace(year=first.year + 1)
    return first.timestamp(), following.timestamp()


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    if limit.unit:
        start, end = window(now, limit)
    else:  # inlined window(): the common case, on the hot path
        period = limit.period
        start = now - now % period
        end = start + period
    amount = limit.amount
    count = state[1] if state is not None and state[0] == start else 0
    if count + cost <= amount:
        count += cost
        return (start, count), _new(
            Decision,
            (True, amount, amount - count, end - now if count else 0.0, 0.0, 0.0, cost, False),
        )
    # Inlined deny(): a key over its limit is refused on every hit until its window ends.
    left = end - now
    if cost and limit.debt:  # counted all the same: the count passes the amount
        return (start, count + cost), _new(
            Decision, (False, amount, 0, left, left if cost <= amount else inf, 0.0, cost, False)
        )
    return state, _new(
        Decision,
        (
            False,
            amount,
            amount - count if count < amount else 0,
            left if count else 0.0,
            left if cost <= amount else inf,
            0.0,
            0,
            False,
        ),
    )


#: A leased slice's budget stays as it is until the slice's edge: a window gives back nothing
#: before it ends.
FROZEN = True


def edge(now: float, limit: Limit) -> float:
    """When a slice of a leased limit taken at ``now`` ends: with its window, which counted it."""
    return window(now, limit)[1]


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back ``cost`` units admitted at ``now``: from the window they were counted in, if
    the state still holds that window (a later window has forgotten them). None when nothing
    is left counted."""
    if state is None:
        return None
    start = window(now, limit)[0]
    if state[0] != start:
        return state
    count = state[1] - cost
    return (start, count) if count > 0 else None
