"""Debt (``Limit(debt=True)``), driven through ``Limit.step`` with a chosen clock: every refused
charge counted, the look refused while the debt lasts, and the debt paid back at the exact time
each algorithm says."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest

from ratekeeper.core.errors import InvalidLimitError
from ratekeeper.core.limits import Limit, share_of, with_debt
from ratekeeper.core.store_keys import state_key

T0 = 1_700_000_000.0  # a whole multiple of every period below

#: (seconds after T0, cost, allowed, remaining, reset_after, retry_after, delay, granted)
Row = tuple[float, int, bool, int, float, float, float, int]

INF = math.inf

# 2 per 10 s in every table. A refused hit of a non-zero cost is counted (granted is its cost);
# a look (cost 0) is refused while the count is past the limit.
TABLES: dict[str, tuple[Limit, list[Row]]] = {
    "fixed_window": (
        Limit(2, 10, debt=True),
        [
            (0, 2, True, 0, 10, 0, 0, 2),
            (1, 3, False, 0, 9, INF, 0, 3),  # more than the amount: counted, never fits
            (2, 0, False, 0, 8, 8, 0, 0),  # the look is refused until the window ends
            (9.5, 1, False, 0, 0.5, 0.5, 0, 1),
            (10, 0, True, 2, 0, 0, 0, 0),  # a new window starts from 0
            (10, 1, True, 1, 10, 0, 0, 1),
        ],
    ),
    "bucketed_window": (
        Limit(2, 10, "bucketed_window", granularity=5, debt=True),
        [
            (0, 2, True, 0, 10, 0, 0, 2),
            (6, 1, False, 0, 9, 4, 0, 1),  # counted in the bucket at 5: a total of 3
            (7, 0, False, 0, 8, 3, 0, 0),  # until the bucket at 0 slides out, at 10
            (9.75, 0, False, 0, 5.25, 0.25, 0, 0),
            (10, 0, True, 1, 5, 0, 0, 0),
            (10, 1, True, 0, 10, 0, 0, 1),
        ],
    ),
    "sliding_counter": (
        Limit(2, 10, "sliding_counter", debt=True),
        [
            (0, 2, True, 0, 20, 0, 0, 2),
            # Counted: 3 in this window. A hit of 1 fits once 3 * (1 - elapsed / 10) is 1,
            # 6 2/3 s into the next window.
            (5, 1, False, 0, 15, 10 + 5 - 10 / 3, 0, 1),
            (6, 0, False, 0, 14, 4 + 10 - 20 / 3, 0, 0),  # a look: once it weighs 2
            (13.25, 0, False, 0, 6.75, 6.75 - 20 / 3, 0, 0),
            (13.5, 0, True, 0, 6.5, 0, 0, 0),
        ],
    ),
    "token_bucket": (
        Limit(2, 10, "token_bucket", debt=True),
        [
            (0, 2, True, 0, 10, 0, 0, 2),
            (0, 3, False, 0, 25, INF, 0, 3),  # -3 tokens, refilled at 0.2 a second
            (5, 0, False, 0, 20, 10, 0, 0),  # -2: the look waits for 0
            (5, 1, False, 0, 25, 20, 0, 1),  # -3 again
            (19.75, 0, False, 0, 10.25, 0.25, 0, 0),
            (20, 0, True, 0, 10, 0, 0, 0),  # back at 0
            (25, 1, True, 0, 10, 0, 0, 1),
        ],
    ),
    "gcra": (
        Limit(2, 10, "gcra", debt=True),
        [
            (0, 2, True, 0, 10, 0, 0, 2),
            (0, 1, False, 0, 15, 10, 0, 1),  # the TAT at 15, past now + 10
            (3, 0, False, 0, 12, 2, 0, 0),
            (5, 0, True, 0, 10, 0, 0, 0),  # the TAT back within 10 s of now
            (5, 1, False, 0, 15, 10, 0, 1),
            (15, 1, True, 0, 10, 0, 0, 1),
        ],
    ),
    "leaky_bucket": (
        Limit(2, 10, "leaky_bucket", debt=True),
        [
            (0, 2, True, 0, 10, 0, 0, 2),
            (0, 1, False, 0, 15, 10, 0, 1),  # a level of 3, leaking 0.2 a second
            (3, 0, False, 0, 12, 2, 0, 0),
            (5, 0, True, 0, 10, 0, 0, 0),  # back at the capacity
            (15, 1, True, 1, 5, 0, 0, 1),
        ],
    ),
    "leaky_shaper": (
        Limit(2, 10, "leaky_shaper", debt=True),
        [
            (0, 1, True, 1, 5, 0, 0, 1),
            (0, 1, True, 0, 10, 0, 5, 1),
            (0, 1, False, 0, 15, 10, 0, 1),  # refused, not delayed: the queue holds 15 s
            (3, 0, False, 0, 12, 2, 0, 0),
            (5, 0, True, 0, 10, 0, 10, 0),  # a hit now would wait behind the debt
            (10, 1, True, 0, 10, 0, 5, 1),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_decisions(name: str) -> None:
    limit, table = TABLES[name]
    state: Any = None
    for index, (offset, cost, *expected) in enumerate(table):
        after, decision = limit.step(state, T0 + offset, cost, limit)
        got = (
            decision.allowed,
            decision.remaining,
            decision.reset_after,
            decision.retry_after,
            decision.delay,
            decision.granted,
        )
        assert got == pytest.approx(tuple(expected), rel=1e-9, abs=1e-9), f"row {index}"
        if decision.granted:  # kept, as a store keeps it
            assert after != state, f"row {index}"
            state = after
        elif not decision.allowed:  # a refused look counts nothing
            assert after is state, f"row {index}"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_retry_after_is_when_the_debt_is_paid_back(name: str) -> None:
    """A look (or a hit of 1) just after a refusal's ``retry_after`` passes, and just before
    it does not, on the state the refusal left."""
    limit, table = TABLES[name]
    state: Any = None
    for offset, cost, *_ in table:
        after, decision = limit.step(state, T0 + offset, cost, limit)
        if decision.granted:
            state = after
        if decision.allowed or decision.retry_after == INF:
            continue
        # The same cost again (a charge refused is in the state already: it waits for that).
        now = T0 + offset
        _, later = limit.step(state, now + decision.retry_after + 1e-6, cost, limit)
        _, sooner = limit.step(state, now + decision.retry_after - 1e-6, cost, limit)
        assert later.allowed, (offset, cost)
        assert not sooner.allowed, (offset, cost)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_same_limit_without_debt_sees_the_debt(name: str) -> None:
    """Both count on one state: the limit without debt is refused by the debt, reports no
    negative remaining, and counts nothing when it refuses."""
    owing, _ = TABLES[name]
    plain = Limit(owing.amount, owing.period, owing.algorithm, **_without_debt(owing))
    assert plain.id == owing.id
    assert state_key(plain, "k") == state_key(owing, "k")
    state, _ = owing.step(None, T0, 2, owing)
    state, charged = owing.step(state, T0, 2, owing)
    assert (charged.allowed, charged.granted) == (False, 2)
    for cost in (0, 1, 2):
        after, decision = plain.step(state, T0, cost, plain)
        assert not decision.allowed
        assert (decision.remaining, decision.granted) == (0, 0)
        assert after is state


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_limit_without_debt_counts_nothing_refused(name: str) -> None:
    owing, _ = TABLES[name]
    plain = Limit(owing.amount, owing.period, owing.algorithm, **_without_debt(owing))
    state, _ = plain.step(None, T0, 2, plain)
    after, decision = plain.step(state, T0, 1, plain)
    assert (decision.allowed, decision.granted) == (False, 0)
    assert after is state


def _without_debt(limit: Limit) -> dict[str, Any]:
    return {name: value for name, value in limit._params().items() if name != "debt"}


# --- The limit ---------------------------------------------------------------------------------


def test_debt_is_not_in_the_id_but_is_in_equality_and_repr() -> None:
    plain, owing = Limit(5, 60, "gcra", burst=2), Limit(5, 60, "gcra", burst=2, debt=True)
    assert plain.id == owing.id
    assert plain != owing
    assert owing == Limit(5, 60, "gcra", burst=2, debt=True)
    assert len({plain, owing}) == 2
    assert repr(owing) == "Limit(5, 60, 'gcra', burst=2, debt=True)"
    assert pickle.loads(pickle.dumps(owing)) == owing
    assert share_of(owing, 2) == Limit(2, 60, "gcra", burst=1, debt=True)


def test_with_debt() -> None:
    assert with_debt(Limit(5, 60)) == Limit(5, 60, debt=True)
    owing = Limit(5, 60, "bucketed_window", granularity=6, debt=True)
    assert with_debt(owing) is owing
    for cannot in (
        Limit(5, 60, "sliding_log"),
        Limit(5, 60, "concurrency"),
        Limit(5, 60, "token_bucket", partial=True),
    ):
        assert with_debt(cannot) is cannot


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"algorithm": "sliding_log"}, "debt does not apply to sliding_log: its log keeps"),
        ({"algorithm": "concurrency"}, "debt does not apply to concurrency: it holds slots"),
        ({"algorithm": "token_bucket", "partial": True}, "debt does not combine with partial"),
    ],
)
def test_algorithms_that_cannot_hold_a_debt(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidLimitError, match=message):
        Limit(5, 60, debt=True, **kwargs)


@pytest.mark.parametrize("value", [1, "yes", None, 1.0, math.nan])
def test_debt_is_a_bool(value: Any) -> None:
    with pytest.raises(InvalidLimitError, match="debt is True or False"):
        Limit(5, 60, debt=value)
