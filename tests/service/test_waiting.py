"""The wait bound (``--max-wait``): the share of decisions let in while the event loop runs
behind, exact under a fake clock, and the in-flight bound's door (``turn_away``) on top of it.

Every sequence here is exact: the share halves at each reading past ``max_wait`` (``watch``
counting a lag only when the next reading finds the loop behind too), grows by
``STEP`` at most once per ``max_wait`` seconds once the lag is under half of it, and ``take()``
lets in exactly every ``1 / share``-th request, never by chance.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from ratekeeper.service.inflight import InFlightBound
from ratekeeper.service.waiting import (
    DEFAULT_MAX_WAIT,
    FLOOR,
    LONGEST_WAIT,
    MOST_PREPAID,
    STEP,
    TICK,
    Waiting,
    check_wait,
)
from ratekeeper.testing import FakeClock

# -- check_wait --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(0, 0.0), (0.1, 0.1), ("0.25", 0.25), (60, 60.0), ("60", 60.0), (" 0.5 ", 0.5),
     (LONGEST_WAIT, LONGEST_WAIT), ("0", 0.0), (DEFAULT_MAX_WAIT, DEFAULT_MAX_WAIT)],
)  # fmt: skip
def test_a_wait_from_0_to_the_longest_is_taken(value: Any, seconds: float) -> None:
    taken = check_wait(value)
    assert taken == seconds
    assert type(taken) is float


@pytest.mark.parametrize(
    "value",
    [-1, -0.1, float("nan"), float("inf"), -float("inf"), True, False, "abc", 61, 60.001, "61",
     None, "", " ", "-1", "nan", "inf", "1e-3", "0.1.2", "²", [0.1], b"0.1"],
)  # fmt: skip
def test_a_wait_that_is_not_seconds_from_0_to_60_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match=r"expected seconds from 0 \(no bound\) to 60"):
        check_wait(value)
    with pytest.raises(ValueError):
        Waiting(value)
    with pytest.raises(ValueError):
        InFlightBound(1, max_wait=value)


# -- Waiting: the share ------------------------------------------------------------------------


def test_a_process_that_is_not_behind_lets_every_request_in() -> None:
    waiting = Waiting(0.1, clock=FakeClock(0))
    assert (waiting.admitting, waiting.lag) == (1.0, 0.0)
    waiting.read(0.1)  # exactly max_wait: not past it
    assert waiting.admitting == 1.0
    assert [waiting.take() for _ in range(1000)] == [True] * 1000


def test_the_share_halves_at_every_reading_past_max_wait_down_to_the_floor() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    shares = []
    for _ in range(9):
        waiting.read(0.3)
        shares.append(waiting.admitting)
    assert shares == [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, FLOOR, FLOOR, FLOOR]
    assert waiting.lag == 0.3


def test_the_share_halves_at_every_reading_whatever_the_time_between() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    waiting.read(0.11)
    clock.advance(5)
    waiting.read(0.2)
    assert waiting.admitting == 0.25  # no time is needed to yield


def test_the_share_grows_by_a_step_only_once_per_max_wait_while_the_lag_is_under_half() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    waiting.read(0.3)
    assert waiting.admitting == 0.5
    for _ in range(5):  # readings at the same instant as the halving: too soon
        waiting.read(0.0)
    assert waiting.admitting == 0.5
    clock.set(0.05)
    waiting.read(0.01)
    assert waiting.admitting == 0.5  # half of max_wait since the halving: still too soon
    clock.set(0.1)
    waiting.read(0.01)
    assert waiting.admitting == 0.55
    waiting.read(0.0)
    clock.set(0.19)
    waiting.read(0.0)
    assert waiting.admitting == 0.55  # 0.09 s since it grew
    clock.set(0.2)
    waiting.read(0.0)
    assert waiting.admitting == 0.6
    assert waiting.admitting == 0.5 + 2 * STEP


def test_the_share_grows_back_to_all_and_no_further() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    waiting.read(1.0)
    shares = []
    for second in range(1, 12):
        clock.set(second)  # a second apart: each reading may grow it
        waiting.read(0.0)
        shares.append(waiting.admitting)
    assert shares == [0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0, 1.0]


def test_the_share_grows_back_from_the_floor_by_exact_steps() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    for _ in range(20):
        waiting.read(5.0)
    assert waiting.admitting == FLOOR
    shares = []
    for second in range(1, 5):
        clock.set(second)
        waiting.read(0.0)
        shares.append(waiting.admitting)
    assert shares == [0.06, 0.11, 0.16, 0.21]


@pytest.mark.parametrize("lag", [0.05, 0.07, 0.1])
def test_a_lag_from_half_max_wait_to_max_wait_holds_the_share(lag: float) -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    waiting.read(0.3)
    for second in range(1, 20):
        clock.set(second)
        waiting.read(lag)
    assert waiting.admitting == 0.5
    assert waiting.lag == lag


def test_a_lag_past_max_wait_after_growth_halves_it_again() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    waiting.read(0.3)
    clock.set(1)
    waiting.read(0.0)
    assert waiting.admitting == 0.55
    waiting.read(0.2)
    assert waiting.admitting == 0.275
    clock.set(1.05)
    waiting.read(0.0)
    assert waiting.admitting == 0.275  # the halving restarted the wait for growth
    clock.set(1.1)
    waiting.read(0.0)
    assert waiting.admitting == 0.325


def test_max_wait_0_never_changes_the_share() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0, clock=clock)
    for lag in (0.5, 10.0, 60.0, 1000.0):
        clock.advance(1)
        waiting.read(lag)
        assert waiting.lag == lag
    assert waiting.admitting == 1.0
    assert [waiting.take() for _ in range(100)] == [True] * 100


# -- Waiting: who is let in --------------------------------------------------------------------


def behind(share_halvings: int) -> Waiting:
    """A ``Waiting`` whose share was halved ``share_halvings`` times."""
    waiting = Waiting(0.1, clock=FakeClock(0))
    for _ in range(share_halvings):
        waiting.read(1.0)
    return waiting


def test_a_quarter_share_lets_in_exactly_every_fourth_request() -> None:
    waiting = behind(2)
    assert waiting.admitting == 0.25
    assert [waiting.take() for _ in range(12)] == [False, False, False, True] * 3


def test_a_half_share_lets_in_exactly_every_second_request() -> None:
    waiting = behind(1)
    assert [waiting.take() for _ in range(6)] == [False, True] * 3


def test_the_floor_lets_in_exactly_one_request_in_a_hundred() -> None:
    waiting = behind(10)
    assert waiting.admitting == FLOOR
    taken = [waiting.take() for _ in range(1000)]
    assert [index for index, let_in in enumerate(taken) if let_in] == list(range(99, 1000, 100))


@pytest.mark.parametrize(
    ("halvings", "grown", "share"),
    [(1, 0, 0.5), (2, 0, 0.25), (3, 0, 0.125), (5, 0, 0.03125), (10, 0, 0.01), (1, 1, 0.55),
     (10, 1, 0.06), (10, 2, 0.11)],
)  # fmt: skip
def test_take_lets_in_exactly_round_n_times_the_share(
    halvings: int, grown: int, share: float
) -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    for _ in range(halvings):
        waiting.read(1.0)
    for _ in range(grown):
        clock.advance(1)
        waiting.read(0.0)
    assert waiting.admitting == share
    counted = 0
    for n in range(1, 2001):
        counted += waiting.take()
        assert counted == math.floor(n * share + 1e-9), n
    assert counted == round(2000 * share)


def test_a_share_reached_by_growing_from_a_quarter_is_kept_exactly() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    waiting.read(1.0)
    waiting.read(1.0)
    clock.advance(1)
    waiting.read(0.0)
    assert waiting.admitting == 0.3
    assert sum(waiting.take() for _ in range(10)) == 3


def test_the_credit_carries_over_when_the_share_changes() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    waiting.read(1.0)  # 0.5
    assert waiting.take() is False  # credit 0.5
    waiting.read(1.0)  # 0.25
    assert [waiting.take() for _ in range(3)] == [False, True, False]  # 0.75, 1 -> 0, 0.25


def test_a_share_of_all_takes_no_credit() -> None:
    clock = FakeClock(0)
    waiting = Waiting(0.1, clock=clock)
    assert [waiting.take() for _ in range(3)] == [True] * 3
    waiting.read(1.0)
    assert [waiting.take() for _ in range(4)] == [False, True, False, True]


def test_a_request_prepaid_at_the_door_is_redeemed_once_without_taking_credit() -> None:
    waiting = behind(2)  # 0.25
    assert [waiting.take() for _ in range(4)] == [False, False, False, True]
    waiting.prepay()
    waiting.prepay()
    assert waiting.prepaid == 2
    left = []
    for _ in range(3):
        assert waiting.redeem() is None  # it says one reached the app; it decides nothing
        left.append(waiting.prepaid)
    assert left == [1, 0, 0]
    # nothing prepaid now, and the credit is where take() left it (0)
    assert [waiting.take() for _ in range(8)] == [False, False, False, True] * 2


def test_nothing_is_redeemed_without_a_prepaid_request() -> None:
    waiting = behind(1)
    assert waiting.take() is False  # credit 0.5
    for _ in range(3):
        assert waiting.redeem() is None
        assert waiting.prepaid == 0
    assert [waiting.take() for _ in range(4)] == [True, False, True, False]  # credit untouched


def test_prepaid_requests_are_bounded() -> None:
    waiting = behind(10)  # the share is at its floor, 0.01
    for _ in range(MOST_PREPAID + 5):
        waiting.prepay()
    assert waiting.prepaid == MOST_PREPAID
    redeemed = 0
    while waiting.prepaid:
        assert waiting.redeem() is None
        redeemed += 1
    assert redeemed == MOST_PREPAID
    waiting.redeem()  # one more: nothing left to redeem
    assert waiting.prepaid == 0
    assert [waiting.take() for _ in range(100)] == [False] * 99 + [True]


# -- Waiting.watch: readings on a running loop -------------------------------------------------


class Recording(Waiting):
    """A ``Waiting`` that keeps every lag ``watch`` counts (what it gives ``read``), and says
    when one came."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counted: list[float] = []
        self.reading = asyncio.Event()

    def read(self, lag: float) -> None:
        self.counted.append(lag)
        super().read(lag)
        self.reading.set()

    async def next_reading(self) -> None:
        self.reading.clear()
        await self.reading.wait()


def test_watch_reads_the_lag_of_an_idle_loop_and_lets_everything_in() -> None:
    async def watched() -> Recording:
        waiting = Recording(LONGEST_WAIT)  # the real clock; past 60 s is never reached here
        task = asyncio.create_task(waiting.watch())
        for _ in range(3):
            await waiting.next_reading()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return waiting

    waiting = asyncio.run(watched())
    assert len(waiting.counted) >= 3
    assert all(lag >= 0.0 for lag in waiting.counted)
    assert waiting.lag >= waiting.counted[-1]  # the lesser of two readings is counted
    assert waiting.admitting == 1.0
    assert waiting.take() is True


def watch_late(lags: list[float]) -> Recording:
    """A ``Recording`` of ``max_wait`` 0.1 watched on a fake clock that is moved on before
    each reading, so that the reading is each of ``lags`` in turn."""
    clock = FakeClock(0)

    async def watched() -> Recording:
        waiting = Recording(0.1, clock=clock)
        task = asyncio.create_task(waiting.watch())
        await asyncio.sleep(0)  # the watch set its timer, due at TICK by the fake clock
        for lag in lags:
            clock.set(clock() + TICK + lag)  # the timer fires ``lag`` after it was due
            await waiting.next_reading()
            assert waiting.lag == pytest.approx(lag)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return waiting

    return asyncio.run(watched())


def test_one_late_reading_is_a_stall_the_loop_recovered_from_and_sheds_nothing() -> None:
    # A process the machine did not run for half a second, with nothing queued: the next
    # reading finds the loop on time.
    waiting = watch_late([0.5, 0.0, 0.0])
    assert waiting.counted == [0.0, 0.0, 0.0]
    assert waiting.admitting == 1.0
    assert [waiting.take() for _ in range(5)] == [True] * 5


def test_a_loop_behind_at_two_readings_in_a_row_sheds_from_the_second() -> None:
    waiting = watch_late([0.5, 0.3, 0.4, 0.0])
    assert waiting.counted == [0.0, pytest.approx(0.3), pytest.approx(0.3), 0.0]
    assert waiting.admitting == 0.25  # halved at the second reading and at the third
    assert waiting.lag == 0.0


@pytest.mark.parametrize("between", [0.0, 0.05, 0.1])
def test_a_reading_under_max_wait_between_two_late_ones_sheds_nothing(between: float) -> None:
    waiting = watch_late([0.5, between, 0.5])
    assert waiting.admitting == 1.0


# -- InFlightBound: the door -------------------------------------------------------------------


def waiting_bound(limit: int, halvings: int) -> tuple[InFlightBound, FakeClock]:
    clock = FakeClock(0)
    bound = InFlightBound(limit, max_wait=0.1, clock=clock)
    for _ in range(halvings):
        bound.waiting.read(1.0)
    return bound, clock


def test_a_bound_without_a_wait_sheds_only_past_its_limit() -> None:
    bound = InFlightBound(2)
    assert bound.waiting.max_wait == 0.0
    bound.waiting.read(30.0)
    assert not bound.shedding
    assert bound.enter("http") and bound.enter("http")
    assert bound.shedding


def test_shedding_while_only_a_share_is_let_in() -> None:
    bound, _ = waiting_bound(10, 0)
    shedding = [bound.shedding]
    bound.waiting.read(0.3)
    shedding.append(bound.shedding)
    assert shedding == [False, True]
    assert bound.in_flight == 0


def test_turn_away_counts_the_shed_and_enter_lets_the_rest_in_once() -> None:
    bound, _ = waiting_bound(10, 1)  # half let in
    assert bound.shedding
    assert [bound.turn_away("http"), bound.turn_away("http")] == [True, False]
    assert bound.shed == {"http": 1, "nginx": 0, "grpc": 0}
    assert bound.waiting.prepaid == 1
    assert bound.enter("http", prepaid=True) is True  # the one let through: in, no credit taken
    assert (bound.in_flight, bound.shed["http"], bound.waiting.prepaid) == (1, 1, 0)
    # the credit was spent at the door, not again at enter: the next pair is the same
    assert [bound.turn_away("nginx"), bound.turn_away("nginx")] == [True, False]
    assert bound.enter("nginx", prepaid=True) is True
    assert (bound.in_flight, bound.waiting.prepaid) == (2, 0)
    assert bound.shed == {"http": 1, "nginx": 1, "grpc": 0}
    bound.leave()
    bound.leave()
    assert bound.in_flight == 0


def test_enter_without_the_door_takes_the_share_itself() -> None:
    bound, _ = waiting_bound(10, 2)  # a quarter let in
    assert [bound.enter("grpc") for _ in range(8)] == [False, False, False, True] * 2
    assert (bound.in_flight, bound.shed["grpc"]) == (2, 6)


def test_turn_away_sheds_every_request_while_the_limit_is_reached() -> None:
    bound, _ = waiting_bound(1, 0)
    assert bound.enter("http")
    shedding = [bound.shedding]
    assert [bound.turn_away("http") for _ in range(3)] == [True] * 3
    assert [bound.turn_away("nginx") for _ in range(2)] == [True] * 2
    assert bound.shed == {"http": 3, "nginx": 2, "grpc": 0}
    bound.leave()
    shedding.append(bound.shedding)
    assert shedding == [True, False]
    assert bound.turn_away("http") is False  # nothing behind, nothing in flight
    assert bound.enter("http") is True
    assert bound.shed == {"http": 3, "nginx": 2, "grpc": 0}


def test_a_request_shed_at_enter_after_the_door_leaves_no_credit_behind() -> None:
    bound, _ = waiting_bound(1, 1)  # at most 1 in flight, half let in
    for _ in range(100):
        # the door lets one through on the share, and counts it toward the bound: then full
        assert [bound.turn_away("http") for _ in range(3)] == [True, False, True]
        assert bound.waiting.prepaid == 1
        # calls with no door come first, on a share of their own: every other one is let in,
        # and the one on its way in from the door stays prepaid
        assert [bound.enter("grpc"), bound.enter("grpc")] == [False, True]
        assert (bound.in_flight, bound.waiting.prepaid) == (1, 1)
        # the one let through finds the limit: shed, redeemed, and no share taken for it
        assert bound.enter("http", prepaid=True) is False
        assert (bound.in_flight, bound.waiting.prepaid) == (1, 0)
        bound.leave()
    assert bound.shed == {"http": 300, "nginx": 0, "grpc": 100}
    admitted = 0
    for _ in range(100):  # gRPC calls, which have no door: half of them are let in
        if bound.enter("grpc"):
            admitted += 1
            bound.leave()
    assert admitted == 50


def test_a_request_not_weighed_at_the_door_leaves_the_prepaid_one_its_share() -> None:
    bound, _ = waiting_bound(10, 2)  # a quarter let in
    assert [bound.turn_away("http") for _ in range(4)] == [True, True, True, False]
    assert (bound.waiting.prepaid, bound.shed["http"]) == (1, 3)
    # HTTP requests the door did not weigh (read before the door weighs, or split over reads)
    # take the share themselves, and do not redeem the one on its way in from the door
    unweighed = []
    for _ in range(4):
        unweighed.append(bound.enter("http"))
        assert bound.waiting.prepaid == 1
    assert unweighed == [False, False, False, True]
    assert (bound.in_flight, bound.shed["http"]) == (1, 6)
    # the prepaid one enters on the share the door took for it, taking none
    assert bound.enter("http", prepaid=True) is True
    assert (bound.in_flight, bound.waiting.prepaid, bound.shed["http"]) == (2, 0, 6)
    # the credit is where the last unweighed request left it (0): a quarter again, exactly
    assert [bound.enter("http") for _ in range(4)] == [False, False, False, True]
    assert (bound.in_flight, bound.waiting.prepaid, bound.shed["http"]) == (3, 0, 9)
    assert bound.shed == {"http": 9, "nginx": 0, "grpc": 0}


def test_requests_let_through_the_door_and_never_seen_are_forgotten() -> None:
    bound, clock = waiting_bound(1, 0)  # at most 1 in flight, every one let in
    assert bound.turn_away("http") is False
    assert (bound.full, bound.turn_away("http")) == (True, True)  # the first counts
    clock.advance(1.5)  # its connection closed before the app saw it
    assert (bound.waiting.prepaid, bound.full) == (0, False)
    assert bound.turn_away("http") is False


def test_why_names_the_limit_when_the_bound_is_reached() -> None:
    bound = InFlightBound(2, max_wait=0.1, clock=FakeClock(0))
    assert bound.enter("http") and bound.enter("http")
    assert bound.why() == "the service is deciding 2 requests, the most it takes at once"
    single = InFlightBound(1)
    assert single.enter("http")
    assert single.why() == "the service is deciding 1 request, the most it takes at once"


def test_why_names_the_wait_when_only_a_share_is_let_in() -> None:
    bound, _ = waiting_bound(5, 1)
    assert bound.why() == (
        "requests wait here longer than the 0.1 s they may; only part of them is decided"
    )
    longer = InFlightBound(5, max_wait=2.5, clock=FakeClock(0))
    longer.waiting.read(3)
    assert longer.why() == (
        "requests wait here longer than the 2.5 s they may; only part of them is decided"
    )


def test_why_names_the_limit_first_when_both_hold() -> None:
    bound, _ = waiting_bound(1, 1)
    bound.in_flight = 1
    assert bound.why().startswith("the service is deciding 1 request,")


def test_the_bound_watches_the_loop_through_its_waiting() -> None:
    clock = FakeClock(0)

    async def watched() -> list[float]:
        bound = InFlightBound(3, max_wait=0.1, clock=clock)
        seen: list[float] = []
        reading = asyncio.Event()
        original = bound.waiting.read

        def read(lag: float) -> None:
            seen.append(lag)
            original(lag)
            reading.set()

        bound.waiting.read = read  # type: ignore[method-assign]
        task = asyncio.create_task(bound.watch())
        await asyncio.sleep(0)
        for now in (1.0, 2.0):  # the loop behind at two readings in a row
            reading.clear()
            clock.set(now)
            await reading.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert bound.waiting.admitting == 0.5 and bound.shedding
        assert bound.waiting.lag == pytest.approx(1.0 - TICK)
        return seen

    assert asyncio.run(watched()) == [0.0, pytest.approx(1.0 - TICK)]
