"""What every request store must do, whatever it keeps its state in."""

from __future__ import annotations

import pytest

from ratekeeper import Algorithm, Limit, Store
from tests.conftest import T0

ALL = list(Algorithm)


@pytest.mark.parametrize("algorithm", ALL)
def test_amount_at_one_instant_then_denied(store: Store, algorithm: Algorithm) -> None:
    limit = Limit(5, 60, algorithm)
    allowed = [store.apply("user:1", limit, 1, T0).allowed for _ in range(7)]
    assert allowed == [True] * 5 + [False, False]


@pytest.mark.parametrize("algorithm", ALL)
def test_denied_hits_consume_nothing(store: Store, algorithm: Algorithm) -> None:
    limit = Limit(3, 60, algorithm)
    assert store.apply("k", limit, 2, T0).allowed
    assert not store.apply("k", limit, 2, T0).allowed  # only 1 left: refused, nothing taken
    assert store.apply("k", limit, 1, T0).remaining == 0


@pytest.mark.parametrize("algorithm", ALL)
def test_cost_zero_peeks(store: Store, algorithm: Algorithm) -> None:
    limit = Limit(4, 60, algorithm)
    store.apply("k", limit, 1, T0)
    first = store.apply("k", limit, 0, T0)
    second = store.apply("k", limit, 0, T0)
    assert first.allowed and second.allowed
    assert first.remaining == second.remaining == 3


@pytest.mark.parametrize("algorithm", ALL)
def test_reset_forgets(store: Store, algorithm: Algorithm) -> None:
    limit = Limit(1, 60, algorithm)
    assert store.apply("k", limit, 1, T0).allowed
    assert not store.apply("k", limit, 1, T0).allowed
    store.reset("k", limit)
    assert store.apply("k", limit, 1, T0).allowed


def test_keys_and_limits_are_independent(store: Store) -> None:
    one = Limit(1, 60, "gcra")
    two = Limit(1, 60, "token_bucket")
    assert store.apply("a", one, 1, T0).allowed
    assert store.apply("b", one, 1, T0).allowed
    assert store.apply("a", two, 1, T0).allowed
    assert not store.apply("a", one, 1, T0).allowed


@pytest.mark.parametrize(
    "keys",
    [
        ("a:b", "a", "a:b:"),
        ("{x}", "x", "{x"),
        ("ключ", "🔑", "k\x00"),
        ("x" * 10_000, "x" * 9_999, "x" * 10_001),
    ],
)
def test_awkward_keys_never_collide(store: Store, keys: tuple[str, ...]) -> None:
    limit = Limit(1, 60)
    assert all(store.apply(key, limit, 1, T0).allowed for key in keys)
    assert not any(store.apply(key, limit, 1, T0).allowed for key in keys)


def test_time_moves_the_window(store: Store) -> None:
    limit = Limit(2, 10, "fixed_window")
    start = T0 - T0 % 10
    assert [store.apply("k", limit, 1, start + 1).allowed for _ in range(3)] == [True, True, False]
    assert store.apply("k", limit, 1, start + 10).allowed


def test_apply_many_in_order(store: Store) -> None:
    minute = Limit(2, 60)
    hour = Limit(3, 3600)
    decisions = store.apply_many([("k", minute, 1), ("k", hour, 1)], now=T0)
    assert [(d.allowed, d.limit, d.remaining) for d in decisions] == [(True, 2, 1), (True, 3, 2)]


def test_apply_many_all_or_nothing_consumes_nothing_on_refusal(store: Store) -> None:
    small = Limit(1, 60, "gcra")
    big = Limit(10, 60, "gcra")
    assert store.apply("k", small, 1, T0).allowed
    decisions = store.apply_many([("k", big, 1), ("k", small, 1)], all_or_nothing=True, now=T0)
    assert [d.allowed for d in decisions] == [True, False]
    assert decisions[0].granted == 0
    assert store.apply("k", big, 0, T0).remaining == 10  # the big limit was not charged


def test_apply_many_without_all_or_nothing_charges_the_allowed(store: Store) -> None:
    small = Limit(1, 60, "gcra")
    big = Limit(10, 60, "gcra")
    store.apply("k", small, 1, T0)
    decisions = store.apply_many([("k", big, 1), ("k", small, 1)], now=T0)
    assert [d.allowed for d in decisions] == [True, False]
    assert store.apply("k", big, 0, T0).remaining == 9


def test_apply_many_sees_its_own_earlier_hits(store: Store) -> None:
    limit = Limit(2, 60)
    decisions = store.apply_many([("k", limit, 1)] * 3, now=T0)
    assert [d.allowed for d in decisions] == [True, True, False]


def test_apply_many_all_or_nothing_across_keys(store: Store) -> None:
    """Login throttling: an IP limit and a username limit pass or fail together."""
    per_ip = Limit(3, 60)
    per_user = Limit(2, 60)
    outcomes = []
    for _ in range(4):
        batch = [("ip:10.0.0.1", per_ip, 1), ("user:alice", per_user, 1)]
        outcomes.append(
            all(d.allowed for d in store.apply_many(batch, all_or_nothing=True, now=T0))
        )
    assert outcomes == [True, True, False, False]
    assert store.apply("ip:10.0.0.1", per_ip, 0, T0).remaining == 1


@pytest.mark.parametrize("algorithm", ALL)
def test_all_or_nothing_rolls_back_every_algorithm(store: Store, algorithm: Algorithm) -> None:
    charged = Limit(5, 60, algorithm)
    full = Limit(1, 60, "fixed_window")
    store.apply("k", charged, 2, T0)
    store.apply("k", full, 1, T0)
    decisions = store.apply_many([("k", charged, 1), ("k", full, 1)], all_or_nothing=True, now=T0)
    assert [d.allowed for d in decisions] == [True, False]
    assert store.apply("k", charged, 0, T0).remaining == 3


@pytest.mark.parametrize("algorithm", ALL)
def test_all_or_nothing_across_keys_rolls_back_every_algorithm(
    store: Store, algorithm: Algorithm
) -> None:
    """Two identities (two slots in a cluster): the one that admitted is not charged."""
    charged = Limit(5, 60, algorithm)
    full = Limit(1, 60, "fixed_window")
    store.apply("address", charged, 2, T0)
    store.apply("username", full, 1, T0)
    batch = [("address", charged, 1), ("username", full, 1)]
    decisions = store.apply_many(batch, all_or_nothing=True, now=T0)
    assert [(d.allowed, d.granted) for d in decisions] == [(True, 0), (False, 0)]
    assert decisions[0].remaining == 2  # the state the hit would have left
    assert store.apply("address", charged, 0, T0).remaining == 3


@pytest.mark.parametrize("algorithm", ALL)
def test_a_look_changes_nothing_even_ahead_of_time(store: Store, algorithm: Algorithm) -> None:
    limit = Limit(1, 10, algorithm)
    start = T0 - T0 % 10
    assert store.apply("k", limit, 1, start).allowed
    store.apply("k", limit, 0, start + 10)  # a look from a clock running ahead
    assert not store.apply("k", limit, 1, start + 5).allowed
