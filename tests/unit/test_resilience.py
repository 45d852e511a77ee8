"""The failure policy and circuit breaker, over a store that fails on command."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ratekeeper import Decision, Limit, MemoryStore, StoreError
from ratekeeper.stores.memory import Hit
from ratekeeper.stores.resilience import CircuitBreaker, Resilient
from ratekeeper.testing import FakeClock

LIMIT = Limit(2, 60, "gcra")


class Flaky:
    """A real MemoryStore that raises StoreError while ``down``; counts the calls it gets."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.down = False
        self.calls = 0

    def apply(self, key: str, limit: Limit, cost: int = 1, now: float | None = None) -> Decision:
        self.calls += 1
        if self.down:
            raise StoreError("down")
        return self.inner.apply(key, limit, cost, now)

    def apply_many(
        self, hits: Sequence[Hit], *, all_or_nothing: bool = False, now: float | None = None
    ) -> list[Decision]:
        self.calls += 1
        if self.down:
            raise StoreError("down")
        return self.inner.apply_many(hits, all_or_nothing=all_or_nothing, now=now)

    def reset(self, key: str, limit: Limit) -> None:
        self.inner.reset(key, limit)


def resilient(policy: str, clock: FakeClock) -> tuple[Resilient, Flaky]:
    flaky = Flaky()
    store = Resilient(flaky, on_store_error=policy)
    store.breaker.clock = clock
    return store, flaky


def test_healthy_store_decides(clock: FakeClock) -> None:
    store, _ = resilient("deny", clock)
    assert [store.apply("k", LIMIT).degraded for _ in range(3)] == [False] * 3


def test_allow_fails_open(clock: FakeClock) -> None:
    store, flaky = resilient("allow", clock)
    flaky.down = True
    decisions = [store.apply("k", LIMIT) for _ in range(5)]
    assert all(d.allowed and d.degraded for d in decisions)


def test_deny_fails_closed_with_the_breaker_wait(clock: FakeClock) -> None:
    store, flaky = resilient("deny", clock)
    flaky.down = True
    decisions = [store.apply("k", LIMIT) for _ in range(4)]
    assert not any(d.allowed for d in decisions)
    assert all(d.degraded for d in decisions)
    assert decisions[-1].retry_after == pytest.approx(1.0)


def test_local_keeps_limits_per_process(clock: FakeClock) -> None:
    store, flaky = resilient("local", clock)
    flaky.down = True
    assert [store.apply("k", LIMIT).allowed for _ in range(3)] == [True, True, False]


def test_breaker_stops_calling_a_dead_store_and_probes_after_cooldown(clock: FakeClock) -> None:
    store, flaky = resilient("allow", clock)
    flaky.down = True
    for _ in range(10):
        store.apply("k", LIMIT)
    assert flaky.calls == 3  # opened after three failures in a row
    clock.advance(1.0)
    store.apply("k", LIMIT)  # one probe, which fails: open again
    store.apply("k", LIMIT)
    assert flaky.calls == 4
    flaky.down = False
    clock.advance(1.0)
    recovered = store.apply("k", LIMIT)
    assert not recovered.degraded and flaky.calls == 5
    assert not store.apply("k", LIMIT).degraded


def test_batches_fall_back_too(clock: FakeClock) -> None:
    store, flaky = resilient("local", clock)
    flaky.down = True
    decisions = store.apply_many([("a", LIMIT, 1), ("b", LIMIT, 5)], all_or_nothing=True)
    assert [d.allowed for d in decisions] == [True, False]
    assert all(d.degraded for d in decisions)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="on_store_error must be one of allow, deny, local"):
        Resilient(MemoryStore(), on_store_error="ignore")


def test_breaker_alone(clock: FakeClock) -> None:
    breaker = CircuitBreaker(failures=2, cooldown=5, clock=clock)
    breaker.failed(StoreError("x"))
    assert breaker.allows_call()
    breaker.failed(StoreError("x"))
    assert not breaker.allows_call()
    clock.advance(5)
    assert breaker.allows_call()  # the probe
    assert not breaker.allows_call()  # only one at a time
    breaker.succeeded()
    assert breaker.allows_call()
