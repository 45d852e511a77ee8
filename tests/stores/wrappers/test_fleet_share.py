"""The ``local`` policy's share when the fleet's count changes during an outage: what each
process admitted stays counted against its new share, in the limit's own units."""

from __future__ import annotations

import pytest

from ratekeeper import Limit
from ratekeeper.stores.wrappers.fleet import FleetSize
from ratekeeper.stores.wrappers.resilience import Resilient
from ratekeeper.testing import FakeClock
from tests.stores.flaky import Flaky


def down(size: FleetSize, clock: FakeClock) -> Resilient:
    flaky = Flaky()
    flaky.down = True
    return Resilient(flaky, instances=size, clock=clock)  # type: ignore[arg-type]


def admitted(store: Resilient, limit: Limit, tries: int, cost: int = 1) -> int:
    return sum(store.apply("k", limit, cost).allowed for _ in range(tries))


@pytest.mark.parametrize("algorithm", ["fixed_window", "sliding_log", "gcra", "token_bucket"])
def test_a_count_that_changes_keeps_what_was_admitted(clock: FakeClock, algorithm: str) -> None:
    limit = Limit(60, 3600, algorithm)
    size = FleetSize()
    size.count(3)
    store = down(size, clock)
    assert admitted(store, limit, 30) == 20  # a third
    size.count(4)  # one more process: a quarter, and 20 are already taken
    assert admitted(store, limit, 30) == 0
    # Two gone: each hit stays counted at the weight it had (a third of the limit each),
    # so this process admits nothing more: a fleet that shrinks admits less, never more.
    size.count(2)
    assert admitted(store, limit, 30) == 0
    assert sum(store.apply("other", limit).allowed for _ in range(40)) == 30  # a half


def test_the_decision_is_told_in_the_callers_units(clock: FakeClock) -> None:
    size = FleetSize(4)
    store = down(size, clock)
    first = store.apply("k", Limit(100, 60))
    assert (first.allowed, first.limit, first.remaining, first.granted) == (True, 25, 24, 1)
    assert first.degraded
    heavy = store.apply("k", Limit(100, 60), 5)
    assert (heavy.allowed, heavy.remaining, heavy.granted) == (True, 19, 5)


def test_a_limit_smaller_than_the_fleet_admits_one_per_process(clock: FakeClock) -> None:
    store = down(FleetSize(5), clock)
    assert admitted(store, Limit(2, 60), 10) == 1
    assert not store.apply("k", Limit(2, 60), 3).allowed  # above the limit itself


def test_concurrency_slots_are_given_back_in_the_same_units(clock: FakeClock) -> None:
    limit = Limit(6, 60, "concurrency")
    store = down(FleetSize(3), clock)
    assert admitted(store, limit, 5) == 2  # a third of the slots
    store.release("k", limit, 1)
    assert admitted(store, limit, 5) == 1
