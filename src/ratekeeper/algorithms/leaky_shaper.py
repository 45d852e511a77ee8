"""Leaky bucket as a shaper: a FIFO queue drained at a constant outflow.

Admitted hits leave the queue at ``amount / period`` units per second, one unit every
``T = period / amount`` seconds; the queue holds ``burst`` units (default ``amount``). State:
``(backlog, t)``, the seconds of work queued at time ``t`` (``backlog = max(0, backlog' - (now -
t))`` at a later ``now``). A hit of cost ``c`` is admitted iff ``backlog + c * T <= burst * T``;
it waits ``Decision.delay = backlog`` before it proceeds, and the backlog grows by ``c * T``. A
burst at one instant is admitted with delays ``0, T, 2T, ..., (burst - 1) T`` and the next hit
is denied; departures are FIFO and never closer than the outflow allows. A hit of cost 0 reports
the delay a hit would face now. O(1) time, two floats per key.

The backlog is kept relative to ``t``, so epoch-sized timestamps keep full precision, and the
comparison allows a slack of ``EPSILON * burst * T`` for the rounding of repeated ``+ c * T``.

Debt (``Limit(debt=True)``): a refused hit is queued all the same (it is not delayed: it is
refused), so the backlog passes ``burst * T`` and the schedule of every later hit is pushed
later; every hit, a look included, is refused until the queue has drained back to
``burst * T - c * T``, and the hits admitted then wait behind the debt.
"""

from __future__ import annotations

from math import inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import allow, deny

if TYPE_CHECKING:
    from ratekeeper.core.decisions import Decision
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "s"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = True

#: Why its limits cannot lease (``Limit(sync="leased")``).
NO_LEASE = (
    "each admitted hit gets its place in the queue, a delay that depends on the moment "
    "it is granted"
)

State = tuple[float, float]

#: Slack relative to the queue's length in seconds, absorbing float rounding in the backlog.
EPSILON = 1e-9


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    interval = limit.interval
    capacity = limit.capacity
    tolerance = capacity * interval
    if state is None:
        backlog = 0.0
    else:
        backlog = state[0] - (now - state[1])
        if backlog < 0.0:
            backlog = 0.0
    room = tolerance + tolerance * EPSILON
    after = backlog + cost * interval
    if after <= room:
        return (after, now), allow(capacity, int((room - after) / interval), after, cost, backlog)
    if cost and limit.debt:  # counted all the same: the schedule is pushed later
        return (after, now), deny(
            capacity,
            0,
            after,
            after + cost * interval - tolerance if cost <= capacity else inf,
            cost,
        )
    remaining = int((room - backlog) / interval)
    return state, deny(
        capacity,
        remaining if remaining > 0 else 0,
        backlog,
        after - tolerance if cost <= capacity else inf,
    )


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back a hit of ``cost`` queued at ``now``: the backlog drops by ``cost * T``,
    stopping at 0. The state keeps its time."""
    if state is None:
        return None
    backlog, last = state
    backlog -= cost * limit.interval
    if backlog < 0.0:
        backlog = 0.0
    return (backlog, last)
