"""The failure policy and circuit breaker, over a store that fails on command."""

from __future__ import annotations

import logging

import pytest

from ratekeeper import (
    Health,
    InvalidInputError,
    Limit,
    MemoryStore,
    StoreConfigError,
    StoreError,
)
from ratekeeper.stores.wrappers.breakers import CircuitBreaker
from ratekeeper.stores.wrappers.resilience import Resilient
from ratekeeper.testing import FakeClock
from tests.stores.flaky import Flaky

LIMIT = Limit(2, 60, "gcra")


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


@pytest.mark.parametrize("policy", ["allow", "deny", "local"])
def test_a_callers_mistakes_never_open_the_breaker(clock: FakeClock, policy: str) -> None:
    store, _ = resilient(policy, clock)
    full = Limit(1, 3600)
    assert store.apply("over", full).allowed
    for _ in range(10):
        with pytest.raises(InvalidInputError):
            store.apply("k", LIMIT, -1000)
        with pytest.raises(InvalidInputError):
            store.apply_many([("k", LIMIT, 1), ("", LIMIT, 1)])
    assert store.breaker.state == "closed" and store.breaker.failures_total == 0
    decision = store.apply("over", full)  # a key over its limit stays refused, not degraded
    assert not decision.allowed and not decision.degraded


def test_a_bad_hit_is_refused_by_the_policy_too_while_the_store_is_down(clock: FakeClock) -> None:
    store, flaky = resilient("allow", clock)
    flaky.down = True
    for _ in range(3):
        store.apply("k", LIMIT)
    assert store.breaker.state == "open"
    with pytest.raises(InvalidInputError):
        store.apply("k", LIMIT, -5)  # answered by the policy, never admitted
    with pytest.raises(InvalidInputError):
        store.apply_many([("k", LIMIT, float("nan"))])  # type: ignore[list-item]


@pytest.mark.parametrize("policy", ["allow", "deny", "local"])
def test_a_misconfigured_store_raises_under_every_policy(clock: FakeClock, policy: str) -> None:
    store, flaky = resilient(policy, clock)
    flaky.down = True
    flaky.failure = StoreConfigError("redis is misconfigured: WRONGPASS")
    for _ in range(5):
        with pytest.raises(StoreConfigError, match="WRONGPASS"):
            store.apply("k", LIMIT)
    assert store.breaker.state == "closed" and store.policy.errors == 0


def test_a_caller_error_during_the_probe_does_not_wedge_the_breaker(clock: FakeClock) -> None:
    store, flaky = resilient("allow", clock)
    flaky.down = True
    for _ in range(3):
        store.apply("k", LIMIT)
    clock.advance(1.0)
    flaky.down = False
    flaky.failure = StoreConfigError("bad")
    flaky.down = True
    with pytest.raises(StoreConfigError):
        store.apply("k", LIMIT)  # took the probe, raised a configuration error
    flaky.down = False
    assert not store.apply("k", LIMIT).degraded  # the next call may probe, and closes it


def test_every_transition_is_counted_and_seen_by_ping_and_an_outage_logged_in_two_lines(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store, flaky = resilient("allow", clock)
    assert store.ping() == Health(True, "closed", None, 0, 0, 0)
    caplog.set_level(logging.INFO, logger="ratekeeper.store")
    flaky.down = True
    for _ in range(4):
        store.apply("k", LIMIT)
    health = store.ping()
    assert (health.ok, health.breaker, health.failures, health.opened) == (False, "open", 3, 1)
    assert health.degraded == 4 and health.error == "down" and health.last_error == "down"
    clock.advance(1.0)
    assert store.ping().breaker == "half-open"
    store.apply("k", LIMIT)  # the probe fails
    flaky.down = False
    clock.advance(1.0)
    store.apply("k", LIMIT)  # the probe succeeds
    health = store.ping()
    assert (health.ok, health.breaker, health.failures, health.opened) == (True, "closed", 4, 2)
    assert health.error is None and health.last_error == "down"
    assert [record.getMessage() for record in caplog.records] == [
        "request store failed 3 times in a row (down); circuit open, the failure policy "
        "answers for 1.0s",
        "request store reachable again after 2.0 s (from its first failed call; its last "
        "failed 1.0 s ago; 1 re-opening not logged); circuit closed",
    ]


def test_a_long_outage_is_one_line_a_minute_with_the_count_of_the_reopenings(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store, flaky = resilient("allow", clock)
    caplog.set_level(logging.DEBUG, logger="ratekeeper.store")
    flaky.down = True
    for _ in range(3):
        store.apply("k", LIMIT)
    for _ in range(150):  # a probe a second, each failing: the circuit opens again
        clock.advance(1.0)
        store.apply("k", LIMIT)
    flaky.down = False
    clock.advance(1.0)
    store.apply("k", LIMIT)
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelname != "DEBUG"]
    failing = "request store still failing (down); circuit open again for 1.0s"
    assert logged == [
        (
            "ERROR",
            "request store failed 3 times in a row (down); circuit open, the failure policy "
            "answers for 1.0s",
        ),
        ("WARNING", f"{failing} (… 59 more in the last 60 s)"),  # the 60th re-opening
        ("WARNING", f"{failing} (… 59 more in the last 60 s)"),  # the 120th
        (
            "WARNING",
            "request store reachable again after 151.0 s (from its first failed call; its "
            "last failed 1.0 s ago; 30 re-openings not logged); circuit closed",
        ),
    ]
    opened = store.ping().opened
    assert opened == 151 == 1 + 1 + 59 + 1 + 59 + 30  # every opening in the log
    probes = [r for r in caplog.records if r.levelname == "DEBUG"]
    assert len(probes) == 151 and "probing the store" in probes[0].getMessage()


def test_a_release_goes_to_the_store_else_to_the_local_policy(clock: FakeClock) -> None:
    slots = Limit(1, 60, "concurrency")
    store, flaky = resilient("local", clock)
    assert store.apply("jobs", slots).allowed
    assert store.release("jobs", slots).granted == 1
    flaky.down = True
    for _ in range(3):
        store.apply("x", LIMIT)
    assert store.apply("jobs", slots).degraded  # the local store holds this slot now
    assert not store.apply("jobs", slots).allowed
    released = store.release("jobs", slots)
    assert released.degraded and released.granted == 1
    assert store.apply("jobs", slots).allowed
