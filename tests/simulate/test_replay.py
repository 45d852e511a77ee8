"""Replay mechanics: a stream read in chunks decides as the whole trace at once, generators
are reproducible, and retry storms come back as their policy says."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ratekeeper import Limit
from ratekeeper.core.errors import InvalidLimitError, TraceError
from ratekeeper.simulate import Retry, Trace, parse_limit, simulate
from ratekeeper.simulate import generators as traces
from ratekeeper.simulate.replay import MAX_BINS, replay
from tests.simulate.mixed import LIMITS, mixed_trace


def numbers(trace: Trace | list[tuple[float, str, int]], chunk: int) -> list[tuple[object, ...]]:
    tallies = replay(trace, LIMITS, width=1.0, record=True, chunk=chunk).tallies
    return [
        (
            bytes(tally.decisions or b""),
            tally.requests,
            tally.admitted,
            tally.false_allows,
            tally.false_refusals,
            sorted(tally.series.items()),
            {name: (key.peak, key.admitted, key.requested) for name, key in tally.keys.items()},
        )
        for tally in tallies
    ]


def test_a_stream_read_in_chunks_decides_as_the_whole_trace() -> None:
    trace = mixed_trace()
    whole = numbers(trace, 1_000_000)
    assert numbers(list(trace), 7) == whole  # an iterable of events, in chunks of 7
    assert numbers(trace, 100) == whole  # a trace, in chunks of 100


def test_a_retry_storm_is_the_same_in_chunks_and_whole() -> None:
    storm = traces.retry_storm(50, 20, seed=2)
    limits = [Limit(20, 1.0, "fixed_window"), Limit(20, 1.0, "gcra")]
    whole = replay(storm, limits).tallies
    chunked = replay(storm, limits, chunk=33).tallies
    for one, other in zip(whole, chunked, strict=True):
        assert (one.requests, one.retries, one.admitted) == (
            other.requests,
            other.retries,
            other.admitted,
        )


def test_refused_clients_retry_after_the_retry_after() -> None:
    # 3 hits at once on 1 per 10 s: the 2nd and 3rd are told to come back in 10 s. At 10 s
    # one gets in and the other is refused again, to come back at 20 s, where it gets in.
    times = [traces.START] * 3
    trace = Trace(times, ["k"] * 3, retry=Retry())
    measures = simulate(trace, [Limit(1, 10, "fixed_window")]).measures[0]
    assert (measures.requests, measures.retries, measures.admitted) == (6, 3, 3)


def test_immediate_retries_stop_after_max_retries() -> None:
    trace = Trace([traces.START] * 2, ["k"] * 2, retry=Retry("immediately", 0.01, 5))
    measures = simulate(trace, [Limit(1, 10, "sliding_log")]).measures[0]
    assert (measures.requests, measures.retries, measures.admitted) == (7, 5, 1)


def test_generators_are_reproducible_and_seeded() -> None:
    assert traces.zipf(50, 100, 10, seed=1).keys == traces.zipf(50, 100, 10, seed=1).keys
    assert traces.poisson(100, 10, seed=1).times != traces.poisson(100, 10, seed=2).times
    for trace in (
        traces.poisson(100, 10),
        traces.bursts(100, 1, 2, 10),
        traces.diurnal(100, 60),
        traces.zipf(50, 100, 10),
        traces.window_edge(10, 1),
    ):
        assert list(trace.times) == sorted(trace.times)
        assert trace.times[0] >= traces.START


def test_generator_rates_hold_on_average() -> None:
    assert len(traces.poisson(100, 100)) == pytest.approx(10_000, rel=0.05)
    # On for 1 s of every 3: a third of the time.
    assert len(traces.bursts(300, 1, 2, 300)) == pytest.approx(30_000, rel=0.05)
    # The ramp averages (1 + low) / 2 of its peak.
    assert len(traces.diurnal(100, 600, low=0.0)) == pytest.approx(30_000, rel=0.05)
    zipf = traces.zipf(100, 1_000, 60)
    assert zipf.keys.count("k1") > zipf.keys.count("k2") > zipf.keys.count("k50")


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(TraceError, match="rate must be positive"):
        traces.poisson(0, 10)
    with pytest.raises(TraceError, match="gap > 0"):
        Retry("immediately", 0.0)
    with pytest.raises(TraceError, match="same length"):
        Trace([1.0, 2.0], ["k"])
    with pytest.raises(InvalidLimitError, match="unknown limit parameter"):
        parse_limit("gcra:10/second:size=3")
    with pytest.raises(InvalidLimitError, match="burst must be an integer"):
        parse_limit("gcra:10/second:burst=²")
    with pytest.raises(InvalidLimitError, match="at least one limit"):
        simulate(traces.poisson(1, 1), [])


def test_limits_parse_from_strings() -> None:
    assert parse_limit("10/minute") == Limit(10, 60)
    assert parse_limit("token_bucket:100/minute:burst=20") == Limit(
        100, 60, "token_bucket", burst=20
    )
    assert parse_limit("bucketed_window:10/minute:granularity=5") == Limit(
        10, 60, "bucketed_window", granularity=5.0
    )


def test_the_fast_path_for_hits_of_cost_one_measures_as_the_general_one() -> None:
    # Unit costs, some events out of order (as in a log written at completion time).
    trace = mixed_trace(events=3_000)
    times = list(trace.times)
    for index in range(50, len(times), 97):
        times[index] -= 1.3
    events = [(now, key, 1) for now, key in zip(times, trace.keys, strict=True)]
    limits = [limit for limit in LIMITS if limit.algorithm != "leaky_shaper"]

    def measured(record: bool) -> list[tuple[object, ...]]:
        return [
            (
                tally.admitted,
                tally.false_allows,
                tally.false_refusals,
                sorted(tally.series.items()),
                {name: (key.peak, key.admitted, key.requested) for name, key in tally.keys.items()},
            )
            for tally in replay(events, limits, width=1.0, record=record, chunk=500).tallies
        ]

    assert measured(record=False) == measured(record=True)


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([(1.0, "k", 1), (float("nan"), "k", 1)], "event 2: time nan is not finite seconds"),
        ([(float("inf"), "k", 1)], "event 1: time inf is not finite seconds"),
        ([(10**400, "k", 1)], "event 1: time 1000000000"),
        ([("1", "k", 1)], "event 1: time '1' is not finite seconds"),
        ([(1.0, "k", -1)], "event 1: cost must be an integer from 0 to .*, not -1"),
        ([(1.0, "k", 2**64)], "event 1: cost must be an integer .*, not 18446744073709551616"),
        ([(1.0, "k", 1.5)], r"event 1: cost .*, not 1.5 \(float\)"),
        ([(1.0, "k", 2), (2.0, "k", True)], r"event 2: cost .*, not True \(bool\)"),
        ([(1.0, "k", 1), (2.0, "", 1)], "event 2: key must be a non-empty string, not ''"),
        ([(1.0, 5, 1)], "event 1: key must be a non-empty string, not 5"),
        ([(1.0, "k", 1), (1.0, ["k"], 1)], r"event 2: key .*, not \['k'\] \(list\)"),
        ([(1.0, "\ud800", 1)], "event 1: key must encode as UTF-8"),
        ([(1.0, "k")], r"an event must be \(time, key, cost\), not \(1.0, 'k'\)"),
        (None, "events must be a Trace or an iterable of .*, not None"),
        ("trace.csv", "not a string .*; ratekeeper.simulate.loaders reads trace files"),
    ],
)
def test_bad_events_are_refused_naming_the_event(events: object, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        simulate(events, ["gcra:10/second"])  # type: ignore[arg-type]


def test_a_trace_with_a_bad_event_is_refused_at_its_number() -> None:
    trace = Trace([1.0, 2.0, 3.0], ["a", "b", "c"], [1, 1, -2])
    with pytest.raises(TraceError, match=r"event 3: cost .*, not -2"):
        simulate(trace, ["gcra:10/second"])
    with pytest.raises(TraceError, match="event 70000: time nan"):
        simulate(Trace([1.0] * 69_999 + [float("nan")], ["k"] * 70_000), ["gcra:10/second"])


@pytest.mark.parametrize("width", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_a_bad_width_is_refused(width: object) -> None:
    with pytest.raises(TraceError, match="width must be positive finite seconds"):
        simulate(traces.poisson(1, 10), ["gcra:10/second"], width=width)  # type: ignore[arg-type]


def test_a_width_too_fine_for_the_times_is_refused() -> None:
    with pytest.raises(TraceError, match=r"event 1: time 1e\+300 is too far from 0 for bins"):
        simulate([(1e300, "k", 1)], ["gcra:10/second"], width=1e-10)


def test_a_long_time_series_is_merged_to_at_most_max_bins() -> None:
    # One hit at the start, one a million seconds later: a million one-second bins, merged
    # ten by ten.
    events = [(0.0, "k", 1), (999_999.5, "k", 1)]
    result = simulate(events, ["fixed_window:10/second"], width=1.0)
    assert result.width == 10.0
    assert len(result.offered) == MAX_BINS
    assert result.offered[0] == (0.0, 1) and result.offered[-1] == (999_990.0, 1)
    assert sum(units for _, units in result.measures[0].series) == 2


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ("gcra:10/second", "limits must be a list of limits, not the string 'gcra:10/second'"),
        ([5], "a limit must be a Limit or a string such as 'gcra:100/minute', not 5"),
        (["token_bucket:10/s:partial=ture"], "partial must be true or false in .*, not 'ture'"),
        (["fixed_window:10/day:calendar=maybe"], "calendar must be true or false"),
    ],
)
def test_bad_limits_are_refused(limits: object, message: str) -> None:
    with pytest.raises(InvalidLimitError, match=message):
        simulate(traces.poisson(1, 10), limits)  # type: ignore[arg-type]


def test_flags_of_a_limit_string_parse_both_ways() -> None:
    assert parse_limit("token_bucket:10/s:partial=yes") == Limit(
        10, 1, "token_bucket", partial=True
    )
    assert parse_limit("fixed_window:10/day:calendar=false") == Limit(10, 86_400)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: traces.poisson(float("inf"), 1), "rate must be a finite number, not inf"),
        (lambda: traces.poisson(1, float("inf")), "seconds must be a finite number, not inf"),
        (lambda: traces.poisson(1e9, 1e9), "makes about 1,000,000,000,000,000,000 events"),
        (lambda: traces.poisson(1e8, 1e-6), "1e[+]08/s is finer than times near"),
        (lambda: traces.poisson(1, 1, key=""), "key must be a non-empty string"),
        (lambda: traces.poisson(1, 1, start=float("nan")), "start must be a finite number"),
        (lambda: traces.bursts(1, 1, float("nan"), 10), "off must be a finite number, not nan"),
        (lambda: traces.bursts(1, 1e-12, 0, 1e-3), "makes 1,000,000,000 cycles"),
        (lambda: traces.window_edge(10**12, 60), "amount must be a whole number from 1 to"),
        (lambda: traces.window_edge(2.5, 60), "amount must be a whole number .*, not 2.5"),  # type: ignore[arg-type]
        (lambda: traces.window_edge(10, float("inf")), "period must be a finite number"),
        (lambda: traces.zipf(10**12, 1, 1), "keys must be a whole number from 1 to"),
        (lambda: traces.diurnal(1, 10, day=0), "day must be positive, not 0"),
        (lambda: traces.retry_storm(1, 1, max_retries=10**9), "max_retries must be a whole"),
        (lambda: Retry(max_retries=1.5), "max_retries must be a whole number"),  # type: ignore[arg-type]
        (lambda: Retry(gap="1"), "retry gap must be finite seconds"),  # type: ignore[arg-type]
    ],
)
def test_a_generator_refuses_what_it_cannot_make(make: Callable[[], object], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        make()


def test_bursts_shorter_than_the_resolution_of_their_times_end() -> None:
    # 100,000 cycles of 0.1 microsecond, less than half the spacing of floats near START:
    # added up one by one, the cycles would never get past the start.
    trace = traces.bursts(1, 1e-7, 0, 0.01)
    assert all(traces.START <= now < traces.START + 0.01 for now in trace.times)


def test_a_trace_out_of_order_spans_from_its_earliest_time_to_its_latest() -> None:
    events = [(10.0, "a", 1), (0.0, "a", 1), (5.0, "b", 1), (4.0, "b", 1)]
    result = simulate(events, ["gcra:10/second"], width=1.0)
    assert (result.duration, result.events) == (10.0, 4)
    assert result.offered[0] == (0.0, 1) and result.offered[-1] == (10.0, 1)
    assert sum(units for _, units in result.offered) == 4
