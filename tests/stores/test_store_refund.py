"""Refunds: what a store gives back of a granted hit, over every store (memory, Redis, Redis
Cluster) and every algorithm. Times are given explicitly, so that a store on a server's clock
runs them too; ``admit`` reports the time a store took its hits at."""

from __future__ import annotations

import math

import pytest

from ratekeeper import Algorithm, InvalidInputError, Limit, Store
from tests.conftest import T0

ALL = list(Algorithm)
#: The algorithms that count per window: a refund after the window turned gives nothing.
WINDOWS = [
    Algorithm.FIXED_WINDOW,
    Algorithm.SLIDING_COUNTER,
    Algorithm.SLIDING_LOG,
    Algorithm.BUCKETED_WINDOW,
]


def run(store: Store, limit: Limit, hits: int, now: float = T0) -> list[bool]:
    return [store.apply("k", limit, 1, now).allowed for _ in range(hits)]


@pytest.mark.parametrize("algorithm", ALL)
def test_a_refund_gives_back_exactly_what_it_names(store: Store, algorithm: Algorithm) -> None:
    limit = Limit(5, 60, algorithm)
    assert run(store, limit, 6) == [True] * 5 + [False]
    store.refund("k", limit, 2, T0)
    assert run(store, limit, 3) == [True, True, False]


@pytest.mark.parametrize("algorithm", ALL)
def test_a_refund_never_leaves_more_than_the_limit(store: Store, algorithm: Algorithm) -> None:
    limit = Limit(5, 60, algorithm)
    assert run(store, limit, 1) == [True]
    store.refund("k", limit, 4, T0)  # more than was taken: the state stops at nothing
    store.refund("never-seen", limit, 3, T0)  # a key with no state: nothing to give back
    assert run(store, limit, 6) == [True] * 5 + [False]
    assert store.apply("never-seen", limit, 5, T0).allowed
    assert not store.apply("never-seen", limit, 1, T0).allowed


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_a_refund_after_the_window_turned_changes_nothing(
    store: Store, algorithm: Algorithm
) -> None:
    limit = Limit(5, 60, algorithm)
    assert run(store, limit, 5) == [True] * 5
    later = T0 + 180  # three windows on: the first hits are forgotten
    assert run(store, limit, 6, later) == [True] * 5 + [False]
    store.refund("k", limit, 3, T0)  # units of a window gone: no gift to the current one
    assert run(store, limit, 1, later) == [False]


@pytest.mark.parametrize("cost", [-1, 1.5, True, math.nan, "1", None, 2**53])
def test_a_hostile_cost_is_refused(store: Store, cost: object) -> None:
    limit = Limit(5, 60, "fixed_window")
    run(store, limit, 5)
    with pytest.raises(InvalidInputError):
        store.refund("k", limit, cost, T0)  # type: ignore[arg-type]
    assert run(store, limit, 1) == [False]  # nothing given back


@pytest.mark.parametrize("at", [math.nan, math.inf, -math.inf, "now", None, True])
def test_a_hostile_time_is_refused(store: Store, at: object) -> None:
    limit = Limit(5, 60, "fixed_window")
    run(store, limit, 5)
    with pytest.raises(InvalidInputError):
        store.refund("k", limit, 1, at)  # type: ignore[arg-type]
    assert run(store, limit, 1) == [False]


@pytest.mark.parametrize("key", ["", 7, None, b"k"])
def test_a_hostile_key_is_refused(store: Store, key: object) -> None:
    with pytest.raises(InvalidInputError):
        store.refund(key, Limit(5, 60), 1, T0)  # type: ignore[arg-type]


def test_admit_reports_the_time_a_refund_needs(store: Store) -> None:
    limit = Limit(3, 3600, "sliding_log")  # entries stamped with their time: exact refunds
    admitted = store.admit([("k", limit, 1)] * 3)
    assert [decision.allowed for decision, _ in admitted] == [True] * 3
    ((refused, _),) = store.admit([("k", limit, 1)])
    assert not refused.allowed and refused.granted == 0
    decision, at = admitted[1]
    store.refund("k", limit, decision.granted, at)
    assert [d.allowed for d, _ in store.admit([("k", limit, 1)] * 2)] == [True, False]


def test_admit_all_or_nothing_over_several_keys(store: Store) -> None:
    # Two identities: two slots on a cluster, each part with its own time.
    limit = Limit(2, 3600, "sliding_log")
    assert store.admit([("b", limit, 2)])[0].decision.allowed
    admitted = store.admit([("a", limit, 1), ("b", limit, 1)], all_or_nothing=True)
    assert [(d.allowed, d.granted) for d, _ in admitted] == [(True, 0), (False, 0)]
    admitted = store.admit([("a", limit, 2), ("c", limit, 1)], all_or_nothing=True)
    assert [(d.allowed, d.granted) for d, _ in admitted] == [(True, 2), (True, 1)]
    for key, (decision, at) in zip("ac", admitted, strict=True):
        store.refund(key, limit, decision.granted, at)
    assert [d.allowed for d, _ in store.admit([("a", limit, 2), ("c", limit, 2)])] == [True, True]
