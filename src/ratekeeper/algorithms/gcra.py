"""Generic cell rate algorithm (GCRA).

Every hit of cost ``c`` pushes the theoretical arrival time (TAT) ``c * T`` further, where
``T = period / amount`` is the emission interval. A hit is allowed while the TAT stays within
``burst * T`` of now; a cost above ``burst`` never fits (``retry_after`` is infinite). State:
``(backlog, t)``, the TAT kept as its distance ``backlog = TAT - t``
from the time ``t`` it was last written, so that it keeps full float precision however large the
epoch timestamps are. O(1) time and memory.

Debt (``Limit(debt=True)``): a refused hit pushes the TAT all the same, past ``now + burst * T``;
every hit, a look included, is refused until time has brought the TAT back within
``burst * T`` of now (less the hit's own ``c * T``).
"""

from __future__ import annotations

from math import floor, inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import Decision, deny

if TYPE_CHECKING:
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "g"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = True

State = tuple[float, float]

#: Slack per unit of capacity, absorbing float rounding in the backlog.
EPSILON = 1e-9

_new = tuple.__new__


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    interval = limit.interval
    capacity = limit.capacity
    if state is None:
        backlog = 0.0
    else:
        backlog, last = state
        backlog -= now - last  # a clock that steps back only adds backlog
        if backlog < 0.0:
            backlog = 0.0
    after = backlog + cost * interval
    # Room left in hits of cost 1, with a slack relative to the whole bucket for float rounding.
    room = capacity + capacity * EPSILON - after / interval
    if room >= 0.0:
        # Inlined allow(): this is the hottest line in ratekeeper.
        return (after, now), _new(
            Decision, (True, capacity, floor(room), after, 0.0, 0.0, cost, False)
        )
    if cost and limit.debt:  # counted all the same: the TAT passes now + tau
        return (after, now), deny(
            capacity,
            0,
            after,
            after + cost * interval - capacity * interval if cost <= capacity else inf,
            cost,
        )
    free = room + cost
    return state, deny(
        capacity,
        int(free) if free > 0.0 else 0,
        backlog,
        after - capacity * interval if cost <= capacity else inf,
    )


def hold(state: State | None, now: float, held: int, limit: Limit) -> State | None:
    """The state at ``now`` with ``held`` units out in slices kept out of the bucket: the
    backlog does not drain below ``held * T``, so the units in the bucket and in the slices
    together never pass the burst. The state as it is when nothing is held."""
    if held <= 0:
        return state
    backlog = 0.0
    if state is not None:
        backlog = state[0] - (now - state[1])
    floor_ = held * limit.interval
    return (backlog if backlog > floor_ else floor_, now)


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back a hit of ``cost`` admitted at ``now``: the backlog (the TAT) moves back by
    ``cost * T``, stopping at 0. The state keeps its time."""
    if state is None:
        return None
    backlog, last = state
    backlog -= cost * limit.interval
    if backlog < 0.0:
        backlog = 0.0
    return (backlog, last)
