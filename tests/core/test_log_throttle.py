"""``LogThrottle``: a repeated message logged once a window, with the count of the others."""

from __future__ import annotations

import logging
import re
import threading

import pytest

from ratekeeper.core.log_throttle import LogThrottle
from ratekeeper.testing import FakeClock

LOGGER = logging.getLogger("ratekeeper.tests.throttle")
DOWN = "store down: %s"


@pytest.fixture
def throttle(clock: FakeClock) -> LogThrottle:
    return LogThrottle(LOGGER, window=60.0, clock=clock)


@pytest.fixture
def caplog(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger=LOGGER.name)
    return caplog


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_the_first_is_logged_the_repeats_counted_and_the_first_after_the_window_carries_the_count(
    throttle: LogThrottle, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    assert throttle.log(logging.ERROR, DOWN, "refused")
    logged = []
    for second in range(1, 130):
        clock.advance(1.0)
        logged.append(throttle.log(logging.ERROR, DOWN, f"refused {second}"))
    assert [second + 1 for second, was in enumerate(logged) if was] == [60, 120]
    assert lines(caplog) == [
        "store down: refused",
        "store down: refused 60 (… 59 more in the last 60 s)",
        "store down: refused 120 (… 59 more in the last 60 s)",
    ]


def test_clear_logs_the_latest_still_counted_with_the_count_of_the_others(
    throttle: LogThrottle, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    throttle.log(logging.WARNING, DOWN, "a")
    for value in "bcd":
        clock.advance(2.5)
        throttle.log(logging.WARNING, DOWN, value)
    assert throttle.holds(DOWN)
    assert throttle.clear(DOWN)
    assert not throttle.holds(DOWN) and not throttle.clear(DOWN)
    throttle.log(logging.WARNING, DOWN, "e")  # a new condition: logged at once
    assert lines(caplog) == [
        "store down: a",
        "store down: d (… 2 more in the last 8 s)",
        "store down: e",
    ]
    assert [record.levelname for record in caplog.records] == ["WARNING"] * 3


def test_clear_after_one_repeat_logs_it_alone_and_after_none_logs_nothing(
    throttle: LogThrottle, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    throttle.log(logging.ERROR, DOWN, "a")
    throttle.clear(DOWN)
    throttle.log(logging.ERROR, DOWN, "b")
    throttle.log(logging.ERROR, DOWN, "c")
    throttle.clear(DOWN)
    assert lines(caplog) == ["store down: a", "store down: b", "store down: c"]


def test_forget_logs_nothing_and_returns_the_count_for_the_callers_own_line(
    throttle: LogThrottle, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    throttle.log(logging.WARNING, DOWN, "a")
    for value in "bcd":
        clock.advance(2.5)
        throttle.log(logging.WARNING, DOWN, value)
    assert throttle.forget(DOWN) == 3
    assert not throttle.holds(DOWN) and throttle.forget(DOWN) == 0
    throttle.log(logging.WARNING, DOWN, "e")  # a new condition: logged at once
    assert throttle.forget(DOWN) == 0
    assert lines(caplog) == ["store down: a", "store down: e"]


def test_after_a_quiet_window_the_next_is_logged_at_once_without_a_count(
    throttle: LogThrottle, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    throttle.log(logging.ERROR, DOWN, "a")
    clock.advance(600.0)
    assert throttle.log(logging.ERROR, DOWN, "b")
    assert lines(caplog) == ["store down: a", "store down: b"]


def test_keys_are_templates_not_values_and_a_key_can_join_several_messages(
    throttle: LogThrottle, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    for user in range(100):  # a value in each message: still one condition
        throttle.log(logging.WARNING, "refused %s", f"user-{user}")
    throttle.log(logging.ERROR, "opened (%s)", "x", key="outage")
    throttle.log(logging.WARNING, "still failing (%s)", "y", key="outage")
    throttle.log(logging.WARNING, "still failing (%s)", "z", key="outage")
    throttle.clear("outage")
    assert lines(caplog) == [
        "refused user-0",
        "opened (x)",
        "still failing (z) (… 1 more in the last 0 s)",
    ]


def test_at_most_most_keys_are_held_the_oldest_cleared_to_make_room(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    throttle = LogThrottle(LOGGER, most=2, clock=clock)
    for key in ("a", "b"):
        throttle.log(logging.WARNING, "%s", key, key=key)
        throttle.log(logging.WARNING, "%s again", key, key=key)
    throttle.log(logging.WARNING, "c", key="c")
    assert [throttle.holds(key) for key in "abc"] == [False, True, True]
    assert lines(caplog) == ["a", "b", "a again", "c"]


def test_a_level_the_logger_ignores_is_neither_logged_nor_counted(
    throttle: LogThrottle, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER.name)
    assert not throttle.log(logging.INFO, "noise")
    assert not throttle.holds("noise")
    assert throttle.log(logging.WARNING, "noise")


def test_extra_fields_and_a_traceback_go_with_the_line(
    throttle: LogThrottle, caplog: pytest.LogCaptureFixture
) -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        throttle.log(logging.ERROR, DOWN, "a", extra={"domain": "api"}, exc_info=True)
    (record,) = caplog.records
    assert record.__dict__["domain"] == "api" and record.exc_info is not None
    assert record.funcName == "test_extra_fields_and_a_traceback_go_with_the_line"


@pytest.mark.parametrize("window", [0, -1, float("nan"), float("inf"), True, "60"])
def test_a_window_that_is_no_duration_is_refused(window: object) -> None:
    with pytest.raises(ValueError, match="window must be a number of seconds above 0"):
        LogThrottle(LOGGER, window=window)  # type: ignore[arg-type]


@pytest.mark.parametrize("most", [0, -1, 1.5, True])
def test_a_bound_that_is_no_count_is_refused(most: object) -> None:
    with pytest.raises(ValueError, match="most must be an integer of at least 1"):
        LogThrottle(LOGGER, most=most)  # type: ignore[arg-type]


def test_every_occurrence_is_accounted_for_under_threads(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    throttle = LogThrottle(LOGGER, window=0.5, clock=clock)

    def occur() -> None:
        for _ in range(2000):
            clock.advance(0.001)
            throttle.log(logging.WARNING, DOWN, "x")

    threads = [threading.Thread(target=occur) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    throttle.clear(DOWN)
    counts = [re.search(r"… (\d+) more", line) for line in lines(caplog)]
    assert len(counts) + sum(int(found[1]) for found in counts if found) == 8 * 2000
    assert len(counts) < 40  # 16 s of fake time, a window of 0.5 s: about one line a window
