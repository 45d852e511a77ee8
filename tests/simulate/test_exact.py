"""Exact results on constructed traces: the window-edge attack, a trace under every limit, and
the sliding counter's weighted formula by hand."""

from __future__ import annotations

from typing import Any

import pytest

from ratekeeper import Algorithm, Limit
from ratekeeper.simulate import Trace, simulate
from ratekeeper.simulate import generators as traces

AMOUNT, PERIOD = 100, 60.0
#: Every algorithm, at 100 per minute.
LIMITS = [Limit(AMOUNT, PERIOD, algorithm) for algorithm in Algorithm]


def most_in_a_window(times: list[float], period: float) -> int:
    """The most of ``times`` in any window ``(t - period, t]``, counted the slow way."""
    return max(sum(1 for other in times if t - period < other <= t) for t in times)


def admitted_times(trace: Trace, limit: Limit) -> list[float]:
    result = simulate(trace, [limit], record=True)
    decisions = result.replay.tallies[0].decisions
    assert decisions is not None
    return [t for t, allowed in zip(trace.times, decisions, strict=True) if allowed]


def test_the_window_edge_attack_passes_twice_the_amount_through_a_fixed_window() -> None:
    trace = traces.window_edge(AMOUNT, PERIOD)
    boundary = traces.START + 2 * PERIOD
    assert trace.times[AMOUNT - 1] < boundary <= trace.times[AMOUNT]
    fixed = simulate(trace, [Limit(AMOUNT, PERIOD, "fixed_window")]).measures[0]
    assert (fixed.admitted, fixed.refused, fixed.peak) == (2 * AMOUNT, 0, 2 * AMOUNT)
    # All of it within one window of the period's length straddling the boundary.
    admitted = admitted_times(trace, Limit(AMOUNT, PERIOD, "fixed_window"))
    assert admitted[-1] - admitted[0] < PERIOD
    assert most_in_a_window(admitted, PERIOD) == 2 * AMOUNT
    # Each hit after the boundary is admitted where the exact rule would refuse it.
    assert (fixed.false_allows, fixed.false_refusals) == (AMOUNT, 0)


def test_the_sliding_log_never_admits_more_than_the_amount_in_any_window() -> None:
    trace = traces.window_edge(AMOUNT, PERIOD)
    log = Limit(AMOUNT, PERIOD, "sliding_log")
    measures = simulate(trace, [log]).measures[0]
    assert (measures.admitted, measures.refused, measures.peak) == (AMOUNT, AMOUNT, AMOUNT)
    assert (measures.false_allows, measures.false_refusals) == (0, 0)
    assert most_in_a_window(admitted_times(trace, log), PERIOD) == AMOUNT


def test_the_sliding_log_is_exact_on_random_traffic() -> None:
    trace = traces.bursts(10.0, 5.0, 3.0, 120.0, seed=3)
    log = Limit(20, 4.0, "sliding_log")
    measures = simulate(trace, [log]).measures[0]
    assert measures.refused > 0
    assert (measures.false_allows, measures.false_refusals) == (0, 0)
    assert measures.peak == 20 == most_in_a_window(admitted_times(trace, log), 4.0)


@pytest.mark.parametrize("limit", LIMITS, ids=str)
def test_a_trace_under_the_limit_everywhere_is_never_refused(limit: Limit) -> None:
    # One hit every 1.5 emission intervals: under the limit in every window, however aligned.
    interval = 1.5 * PERIOD / AMOUNT
    times = [traces.START + 0.3 + i * interval for i in range(1_000)]
    measures = simulate(Trace(times, ["k"] * len(times)), [limit]).measures[0]
    assert (measures.admitted, measures.refused) == (1_000, 0)
    assert (measures.false_allows, measures.false_refusals) == (0, 0)
    assert measures.peak <= AMOUNT
    assert measures.delays.max == 0.0


def test_the_sliding_counter_decides_by_the_catalogues_weighted_formula() -> None:
    """Rate = previous x (period - overlap) / period + current, admitted iff rate + 1 <= 10."""
    start = traces.START  # on a window boundary
    # Window 1: 8 hits. Window 2, 15 s in (overlap 15 s): 8 x 45/60 = 6, so 4 hits fit (6 + 4 =
    # 10) and the 5th does not. 30 s in: 8 x 30/60 = 4, plus the 4 current = 8: 2 more fit,
    # the 3rd does not. 54 s in: 8 x 6/60 = 0.8, plus 6 = 6.8: 3 fit (9.8), the 4th does not.
    # Window 3, 30 s in: the 9 of window 2 weigh 9 x 30/60 = 4.5: 5 fit (9.5), the 6th not.
    times = (
        [start + 1 + i for i in range(8)]
        + [start + 75.0] * 5
        + [start + 90.0] * 3
        + [start + 114.0] * 4
        + [start + 150.0] * 6
    )
    expected = [1] * 8 + [1, 1, 1, 1, 0] + [1, 1, 0] + [1, 1, 1, 0] + [1, 1, 1, 1, 1, 0]
    result = simulate(
        Trace(times, ["k"] * len(times)), [Limit(10, 60, "sliding_counter")], record=True
    )
    decisions = result.replay.tallies[0].decisions
    assert decisions is not None
    assert list(decisions) == expected


def test_the_shaper_reports_its_delays() -> None:
    # 10 hits at once through a queue of 10 draining 1 per second: delays 0, 1, ..., 9.
    times = [traces.START] * 10
    result = simulate(Trace(times, ["k"] * 10), [Limit(10, 10, "leaky_shaper")], record=True)
    measures = result.measures[0]
    assert measures.admitted == 10
    assert measures.delays.max == pytest.approx(9.0)
    assert measures.delays.p50 == pytest.approx(4.0)
    assert measures.delays.waited == 9
    delay_of = result.replay.tallies[0].delay_of
    assert delay_of is not None
    assert list(delay_of) == pytest.approx([float(i) for i in range(10)])
    # They leave one a second: never more than the amount in a window.
    assert measures.peak == 10


def test_the_shaper_refusing_what_its_full_queue_cannot_hold_is_no_false_refusal() -> None:
    # 15 hits at once through a queue of 10 draining 1 a second: 10 queued (delays 0 to 9), 5
    # refused because the queue is full. A sliding log with no queue would have let each of
    # those 5 proceed 10 s later; the shaper refuses them by design, so none is false.
    times = [traces.START] * 15
    measures = simulate(Trace(times, ["k"] * 15), [Limit(10, 10, "leaky_shaper")]).measures[0]
    assert (measures.admitted, measures.refused) == (10, 5)
    assert (measures.false_allows, measures.false_refusals, measures.full_queue) == (0, 0, 5)


def test_the_window_edge_shaper_refuses_99_hits_for_its_full_queue_and_none_falsely() -> None:
    shaper = Limit(AMOUNT, PERIOD, "leaky_shaper")
    measures = simulate(traces.window_edge(AMOUNT, PERIOD), [shaper]).measures[0]
    assert (measures.admitted, measures.refused, measures.full_queue) == (101, 99, 99)
    assert (measures.false_allows, measures.false_refusals) == (0, 0)
    assert measures.peak == AMOUNT


def test_a_shaper_refusing_with_room_in_its_queue_is_charged_a_false_refusal() -> None:
    # One hit every 2 s through a queue of 10 draining 1 a second: the queue is empty at each
    # hit. A shaper that refuses the third anyway refuses falsely, and not for a full queue.
    shaper = Limit(10, 10, "leaky_shaper")
    honest = shaper.step

    def refuses_the_third(state: Any, now: float, cost: int, limit: Limit) -> Any:
        new, decision = honest(state, now, cost, limit)
        if now == traces.START + 4:
            return state, decision._replace(allowed=False, granted=0, delay=0.0)
        return new, decision

    object.__setattr__(shaper, "step", refuses_the_third)
    times = [traces.START + 2 * i for i in range(5)]
    measures = simulate(Trace(times, ["k"] * 5), [shaper]).measures[0]
    assert (measures.admitted, measures.refused) == (4, 1)
    assert (measures.false_refusals, measures.full_queue) == (1, 0)
