"""Leased quotas, the store's side: a slice of a key's budget taken and given back in one
atomic transition, ``exchange`` (pure, no I/O; ``leases.lua`` is its Lua twin).

A process that leases a limit (``Limit(sync="leased")``) takes a slice of up to ``want`` units
from the key's budget, grants from it without asking the store again, and gives back what it did
not use when it takes its next slice, when the slice ends, or when it shuts down. Both happen in
one exchange: the units ``returned`` of its previous slice (taken at ``taken_at``) are given
back through the algorithm's ``refund``, and a new slice is taken as ordinary hits are, by the
algorithm's ``step``. So every unit a slice grants was counted in the store before it was
granted, and the limit holds across every process together.

How long a unit may wait in a slice before it is granted depends on how the algorithm counts:

- one that counts per window (fixed window, sliding counter, bucketed window) has an ``edge``:
  a slice ends with the window (or bucket) that counted it, so each unit is granted within
  the window it was counted in;
- one that refills over time (token bucket, GCRA, leaky bucket) has a ``hold``: a unit counted
  at ``t`` and granted later must not let the bucket refill meanwhile as if it were spent, so
  the store keeps a record of each process's slice (``Records``: its units and when it
  expires) and the bucket refills only up to its capacity less the units held in slices. The
  tokens in the bucket and in every slice together never pass the capacity; they grow at the
  refill rate at most; so over any span the units granted stay within what the exact limit
  admits. A record expires ``ttl`` after its slice was taken (the holder stops granting from
  it before then): a process that dies holding a slice keeps nothing out of the bucket for
  longer, and what it held counts as spent, for the store cannot know what it granted.

The slice is ``want`` units while the budget holds at least twice that, and half of what is
left (rounded up) below that, so a budget running low is spread among the processes asking;
but never less than ``need``, the cost of the hit that asks, which is refused (nothing taken)
when the budget holds less, as an exact hit of that cost would be.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import spec

#: The slices a key's budget is held in, by holder: ``holder -> (units, expires)``. Kept only
#: for an algorithm with a ``hold``.
Records = dict[str, tuple[int, float]]


class Taken(NamedTuple):
    """What an exchange took: ``granted`` units (0 for none), the store's ``decision`` (for a
    slice, the step that took it, ``granted`` its units; for none, the refusal of ``need``
    units, whose ``retry_after`` says when they fit), and ``now``, the time the store took it
    at."""

    granted: int
    decision: Decision
    now: float


def exchange(
    state: Any,
    records: Records,
    now: float,
    limit: Limit,
    *,
    holder: str,
    want: int,
    ttl: float,
    returned: int = 0,
    taken_at: float | None = None,
    need: int = 1,
) -> tuple[Any, Records, Taken]:
    """Give back ``returned`` units of ``holder``'s slice taken at ``taken_at`` and take a new
    slice of up to ``want`` units at ``now``; return the new state, the records (a new dict
    when they change) and what was taken. ``want`` 0 only gives back.

    With a ``hold``, the bucket first refills to ``now`` capped by every unit recorded as held
    (the expired records too: they were held until now, as far as the store knows), then the
    holder's own record and the expired ones are dropped, the returned units put back, and the
    bucket capped by the units the others hold. The step that takes the slice never sees more
    than the capacity less what the others hold."""
    behaviour = spec(limit.algorithm)
    hold = behaviour.hold
    others = 0
    if hold is not None and records:
        state = hold(state, now, sum(units for units, _ in records.values()), limit)
        records = {
            name: record for name, record in records.items() if name != holder and record[1] > now
        }
        others = sum(units for units, _ in records.values())
    if returned and taken_at is not None:
        if state is not None:
            state = behaviour.refund(state, taken_at, returned, limit)
        if hold is not None:
            state = hold(state, now, others, limit)
    step = limit.step
    decision = step(state, now, 0, limit)[1]
    room = decision.remaining
    granted = 0
    if want > 0:
        if room >= need:
            granted = want if 2 * want <= room else max(min(want, (room + 1) // 2), need)
            after, decision = step(state, now, granted, limit)
            if not decision.allowed and granted > need:  # float rounding at the very top
                granted -= 1
                after, decision = step(state, now, granted, limit)
            if decision.allowed:
                state = after
            else:
                granted = 0
        if not granted:
            decision = step(state, now, need, limit)[1]
        elif hold is not None:
            records = dict(records)
            records[holder] = (granted, now + ttl)
    return state, records, Taken(granted, decision, now)
