"""Leaky bucket as a meter (policer).

The bucket holds up to ``burst`` units (default ``amount``) and leaks at ``amount / period``
units per second. A hit of cost ``c`` pours in ``c`` units; it is admitted iff
``level + c <= capacity`` after the leak, and denied otherwise (nothing is poured). Nothing is
delayed: this is the meter that polices a flow, the twin of ``leaky_shaper`` that queues it. It
admits exactly what ``gcra`` admits, counted in units instead of seconds. State:
``(level, t)``, the level in units at time ``t``; a ``now`` earlier than ``t`` un-leaks the
difference, so a clock that steps back is never credited twice. O(1) time, two floats per key.

Integer costs add exactly to the level, so a burst at one instant admits exactly ``capacity``.

Debt (``Limit(debt=True)``): a refused hit is poured all the same, so the level rises above the
capacity; every hit, a look included, is refused until the leak has brought it back to
``capacity - c``.
"""

from __future__ import annotations

from math import inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import allow, deny

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "k"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = True

State = tuple[float, float]

#: Slack per unit of capacity, absorbing float rounding in the level.
EPSILON = 1e-9


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    capacity = limit.capacity
    if state is None:
        level = 0.0
    else:
        level = state[0] - (now - state[1]) * limit.rate
        if level < 0.0:
            level = 0.0
    room = capacity + capacity * EPSILON
    after = level + cost
    if after <= room:
        return (after, now), allow(capacity, int(room - after), after * limit.interval, cost)
    if cost and limit.debt:  # counted all the same: the level rises above the capacity
        return (after, now), deny(
            capacity,
            0,
            after * limit.interval,
            (after + cost - capacity) * limit.interval if cost <= capacity else inf,
            cost,
        )
    remaining = int(room - level)
    return state, deny(
        capacity,
        remaining if remaining > 0 else 0,
        level * limit.interval,
        (after - capacity) * limit.interval if cost <= capacity else inf,
    )


def hold(state: State | None, now: float, held: int, limit: Limit) -> State | None:
    """The state at ``now`` with ``held`` units out in slices kept in the bucket: the level
    does not leak below ``held``, so the units in the bucket and in the slices together never
    pass the capacity. The state as it is when nothing is held."""
    if held <= 0:
        return state
    level = 0.0
    if state is not None:
        level = state[0] - (now - state[1]) * limit.rate
    return (level if level > held else float(held), now)


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back ``cost`` units poured at ``now``: the level drops by ``cost``, stopping at 0.
    The state keeps its time."""
    if state is None:
        return None
    level, last = state
    level -= cost
    if level < 0.0:
        level = 0.0
    return (level, last)
