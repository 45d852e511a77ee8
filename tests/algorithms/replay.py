"""Tables of hits replayed through ``Limit.step`` under a chosen clock, for the algorithm tests.

Two shapes of table. The window algorithms (fixed window, sliding log, sliding counter,
bucketed window) list hits as ``(now, cost)``: ``run`` threads the state through them and
``rows`` reads back what each decision said. The bucket algorithms (token bucket, leaky bucket
as meter and as shaper, GCRA, concurrency) list each hit beside the decision it must get, in
seconds after a base time: ``replay`` asserts every row, from each of ``BASES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ratekeeper.core.decisions import Decision
from ratekeeper.core.limits import Limit

#: The base times a bucket table is replayed from: the epoch, and an instant of today's size.
BASES = (0.0, 1_700_000_000.0)

#: A hit: (now, cost).
Hit = tuple[float, int]

#: What a window table expects of a decision: (allowed, remaining, reset_after, retry_after).
Outcome = tuple[bool, int, float, float]

#: Rows: (seconds after base, cost, allowed, remaining, reset_after, retry_after, granted).
Row = tuple[float, int, bool, int, float, float, int]

#: The shaper's rows: (seconds after base, cost, allowed, remaining, reset_after, retry_after,
#: delay, granted).
ShapedRow = tuple[float, int, bool, int, float, float, float, int]


def run(limit: Limit, hits: list[Hit], state: Any = None) -> tuple[Any, list[Decision]]:
    decisions = []
    for now, cost in hits:
        state, decision = limit.step(state, now, cost, limit)
        decisions.append(decision)
    return state, decisions


def rows(decisions: list[Decision]) -> list[Outcome]:
    return [(d.allowed, d.remaining, d.reset_after, d.retry_after) for d in decisions]


def replay(
    limit: Limit,
    base: float,
    table: Sequence[Row] | Sequence[ShapedRow],
    *,
    delays: bool = False,
    reported: int | None = None,
) -> None:
    """Thread the state through ``table``, asserting each decision; denials keep the state.

    ``delays``: the rows are ``ShapedRow`` and give each decision's delay; without it, every
    delay must be 0. ``reported``: the ``limit`` each decision reports, the limit's capacity
    unless given (a concurrency limit reports its amount of slots).
    """
    expected_limit = limit.capacity if reported is None else reported
    state: Any = None
    for index, (offset, cost, *expected) in enumerate(table):
        before = state
        state, decision = limit.step(state, base + offset, cost, limit)
        got = (
            decision.allowed,
            decision.remaining,
            decision.reset_after,
            decision.retry_after,
            *((decision.delay,) if delays else ()),
            decision.granted,
        )
        assert got == pytest.approx(tuple(expected), rel=1e-9, abs=1e-9), f"row {index}"
        assert decision.limit == expected_limit
        if not delays:
            assert decision.delay == 0.0
        if not decision.allowed:
            assert state is before, f"row {index}: a denied hit changed the state"
