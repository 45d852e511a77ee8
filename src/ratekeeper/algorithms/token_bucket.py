"""Token bucket.

The bucket holds up to ``burst`` tokens (default ``amount``) and refills continuously at
``amount / period`` tokens per second. A hit of cost ``c`` takes ``c`` tokens. With
``partial=True`` a hit costing more than the tokens left takes the whole tokens there are
(``Decision.granted``) instead of being denied; without it, a cost above ``burst`` never fits
(``retry_after`` is infinite). State: ``(tokens, t)``. O(1) time and memory.

Debt (``Limit(debt=True)``, not with ``partial``): a refused hit takes its tokens all the same,
so the bucket goes below empty (``tokens`` negative); it refills at the same rate, and every
hit, a look included, is refused until it holds the hit's cost again (0 for a look).
"""

from __future__ import annotations

from math import floor, inf
from typing import TYPE_CHECKING

from ratekeeper.core.decisions import Decision, allow, deny

if TYPE_CHECKING:
    from ratekeeper.core.limits import Limit

#: The letter naming this algorithm in keys (``ratekeeper.core.store_keys.limit_tag``).
LETTER = "t"
#: Whether ``burst`` (the bucket size) applies to this algorithm's limits.
TAKES_BURST = True

State = tuple[float, float]

EPSILON = 1e-9

_new = tuple.__new__


def step(state: State | None, now: float, cost: int, limit: Limit) -> tuple[State | None, Decision]:
    capacity = limit.capacity
    if state is None:
        tokens = float(capacity)
    else:
        tokens, last = state
        if now < last:
            return _behind(state, now, cost, limit)
        tokens += (now - last) * limit.rate
        if tokens > capacity:
            tokens = float(capacity)
    left = tokens - cost
    if left > -EPSILON:
        if left < 0.0:
            left = 0.0
        # Inlined allow(): this is on the hot path.
        return (left, now), _new(
            Decision,
            (
                True,
                capacity,
                floor(left + EPSILON),
                (capacity - left) / limit.rate,
                0.0,
                0.0,
                cost,
                False,
            ),
        )
    rate = limit.rate
    whole = int(tokens + EPSILON)
    if limit.partial:
        if whole >= 1:
            left = tokens - whole
            left = max(left, 0.0)
            return (left, now), allow(
                capacity, int(left + EPSILON), (capacity - left) / rate, whole
            )
        wait = (1.0 - tokens) / rate
    elif cost and limit.debt:  # counted all the same: the bucket goes below empty
        return (left, now), deny(
            capacity,
            0,
            (capacity - left) / rate,
            (cost - left) / rate if cost <= capacity else inf,
            cost,
        )
    else:
        wait = -left / rate if cost <= capacity else inf
    return state, deny(capacity, whole if whole > 0 else 0, (capacity - tokens) / rate, wait)


def _behind(state: State, now: float, cost: int, limit: Limit) -> tuple[State, Decision]:
    """A clock that stepped back: decide as of the state's own time, so that the same span is
    never refilled twice, and report the waits from the caller's ``now``."""
    skew = state[1] - now
    new_state, decision = step(state, state[1], cost, limit)
    assert new_state is not None
    return new_state, decision._replace(
        reset_after=decision.reset_after + skew,
        retry_after=decision.retry_after + skew if not decision.allowed else 0.0,
    )


def hold(state: State | None, now: float, held: int, limit: Limit) -> State | None:
    """The bucket at ``now`` with ``held`` tokens out in slices kept out of it: it refills up to
    ``capacity - held`` only, so the tokens in the bucket and in the slices together never pass
    the capacity. The state as it is when nothing is held."""
    if held <= 0:
        return state
    capacity = limit.capacity
    if state is None:
        tokens, last = float(capacity), now
    else:
        tokens, last = state
        if now > last:
            tokens += (now - last) * limit.rate
            last = now
    top = float(capacity - held)
    return (tokens if tokens < top else top, last)


def refund(state: State | None, now: float, cost: int, limit: Limit) -> State | None:
    """Take back ``cost`` tokens taken at ``now``: put them back, up to the capacity. The
    state keeps its time (a bucket that was never written is full already)."""
    if state is None:
        return None
    tokens, last = state
    tokens += cost
    if tokens > limit.capacity:
        tokens = float(limit.capacity)
    return (tokens, last)
