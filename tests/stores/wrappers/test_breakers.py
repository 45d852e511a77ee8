"""A circuit breaker's log: one line per state, in the order of the transitions (opened; opened
again after a failed probe, once a minute at most; closed), and an outage's length from its first
failed call to the call that found the store back, with the last failure between them."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from ratekeeper.core.errors import StoreError
from ratekeeper.stores.wrappers.breakers import CircuitBreaker
from ratekeeper.testing import FakeClock

Lines = Callable[[], list[tuple[str, str]]]

OPENED = (
    "ERROR",
    "request store failed 3 times in a row (refused); circuit open, the failure policy "
    "answers for 1.0s",
)
FAILING = "request store still failing (refused); circuit open again for 1.0s"


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Lines:
    """The breaker's lines so far, but the probes (debug): level and message each."""
    caplog.set_level(logging.DEBUG, logger="ratekeeper.store")
    return lambda: [
        (record.levelname, record.getMessage())
        for record in caplog.records
        if record.name == "ratekeeper.store" and record.levelno > logging.DEBUG
    ]


def call(breaker: CircuitBreaker, up: bool) -> bool:
    """One call through ``breaker`` to a store that is ``up`` or not; whether it went through."""
    if not breaker.allows_call():
        return False
    if up:
        breaker.succeeded()
    else:
        breaker.failed(StoreError("refused"))
    return True


def closed(after: str, last: str, hidden: str = "", what: str = "request store") -> tuple[str, str]:
    reopenings = f"; {hidden} not logged" if hidden else ""
    return (
        "WARNING",
        f"{what} reachable again after {after} s (from its first failed call; its last failed "
        f"{last} s ago{reopenings}); circuit closed",
    )


def test_an_outage_under_steady_traffic_is_an_opening_then_a_recovery(
    clock: FakeClock, lines: Lines
) -> None:
    breaker = CircuitBreaker(clock=clock)
    for _ in range(36):  # a call every 250 ms for 9 s while the store is down
        call(breaker, up=False)
        clock.advance(0.25)
    assert lines() == [OPENED]
    assert breaker.opened == 1 + 8  # opened at 0.5 s; a failed probe a second from 1.5 s
    while not call(breaker, up=True):  # the store is back: the next probe closes the circuit
        clock.advance(0.25)
    assert lines() == [OPENED, closed("9.5", "1.0", "8 re-openings")]


def test_the_length_runs_from_the_first_failed_call_and_the_last_failure_bounds_the_end(
    clock: FakeClock, lines: Lines
) -> None:
    """Sparse traffic: the three failures that open the circuit are 2 s apart, two probes fail,
    and the next call comes 6 s after the last failure. The outage ended between that failure
    and that call; the line says how long before the call the store last failed."""
    start = clock()
    breaker = CircuitBreaker(clock=clock)
    for at in (0.0, 2.0, 4.0, 5.0, 6.0):  # the third failure opens it; two probes fail
        clock.set(start + at)
        assert call(breaker, up=False)
    clock.set(start + 12.0)
    assert call(breaker, up=True)
    assert lines() == [OPENED, closed("12.0", "6.0", "2 re-openings")]


def test_a_long_outage_logs_a_reopening_a_minute_and_none_at_the_recovery(
    clock: FakeClock, lines: Lines
) -> None:
    breaker = CircuitBreaker(clock=clock)
    for _ in range(3):
        call(breaker, up=False)
    for _ in range(150):  # a failed probe a second: the circuit opens again each time
        clock.advance(1.0)
        assert call(breaker, up=False)
    clock.advance(0.5)
    assert not call(breaker, up=True)  # still open: no probe yet
    clock.advance(0.5)
    assert call(breaker, up=True)
    assert lines() == [
        OPENED,
        ("WARNING", f"{FAILING} (… 59 more in the last 60 s)"),  # the 60th re-opening
        ("WARNING", f"{FAILING} (… 59 more in the last 60 s)"),  # the 120th
        closed("151.0", "1.0", "30 re-openings"),  # the 121st to the 150th
    ]
    assert breaker.opened == 1 + (1 + 59) + (1 + 59) + 30  # every opening in the log


def test_a_recovery_at_the_first_probe_counts_no_reopening(clock: FakeClock, lines: Lines) -> None:
    breaker = CircuitBreaker(clock=clock, name="a")
    for _ in range(3):
        call(breaker, up=False)
        clock.advance(0.5)
    clock.advance(0.5)
    assert call(breaker, up=True)
    assert lines() == [
        (
            "ERROR",
            "request store shard a failed 3 times in a row (refused); circuit open, the "
            "failure policy answers for 1.0s",
        ),
        closed("2.0", "1.0", what="request store shard a"),
    ]


def test_failures_below_the_threshold_then_a_success_begin_no_outage(
    clock: FakeClock, lines: Lines
) -> None:
    breaker = CircuitBreaker(clock=clock)
    call(breaker, up=False)
    call(breaker, up=False)
    clock.advance(30.0)
    call(breaker, up=True)  # that run of failures is over: no outage began
    clock.advance(30.0)
    for _ in range(3):  # a new run: the outage begins at its first failure
        call(breaker, up=False)
        clock.advance(1.0)
    assert call(breaker, up=True)
    assert lines() == [OPENED, closed("3.0", "1.0")]


def test_a_second_outage_is_logged_as_the_first_was(clock: FakeClock, lines: Lines) -> None:
    breaker = CircuitBreaker(clock=clock)
    for _ in range(2):
        for _ in range(3):
            call(breaker, up=False)
        clock.advance(1.0)
        assert call(breaker, up=False)  # a failed probe: counted, not logged
        clock.advance(1.0)
        assert call(breaker, up=True)
        clock.advance(10.0)
    assert lines() == [OPENED, closed("2.0", "1.0", "1 re-opening")] * 2
