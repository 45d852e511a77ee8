"""The soak run's reading of wrk and its verdict (``benchmarks.soak``): a run fails on a Redis
key without a TTL or on RSS growth past ``MAX_GROWTH`` after the warm-up, and on nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.service.load import LoadError
from benchmarks.soak.load import Interval, delay_ms, parse
from benchmarks.soak.redis_stats import TtlScan
from benchmarks.soak.report import Sample, Soak, markdown, write

WRK = """Running 1m test @ http://127.0.0.1:40000
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    30.11ms   40.02ms 900.00ms   91.00%
  116474 requests in 1.00m, 30.00MB read
{errors}soak allowed=113048 limited=3426 degraded=0 other=0 p50=27012 p99=297104
Requests/sec:   1941.20
"""


def test_the_counts_and_latencies_of_an_interval() -> None:
    interval = parse(WRK.format(errors=""))
    assert (interval.allowed, interval.limited, interval.degraded, interval.other) == (
        113048,
        3426,
        0,
        0,
    )
    assert (interval.requests, interval.errors) == (116474, 0)
    assert interval.p50 == pytest.approx(0.027012)
    assert interval.p99 == pytest.approx(0.297104)


def test_socket_errors_and_other_answers_are_errors() -> None:
    output = WRK.format(errors="  Socket errors: connect 1, read 2, write 3, timeout 4\n")
    interval = parse(output.replace("other=0", "other=5"))
    assert (interval.socket_errors, interval.errors) == (10, 15)


def test_output_without_the_counts_line_is_an_error() -> None:
    with pytest.raises(LoadError, match="no counts line"):
        parse("Running 1m test @ http://127.0.0.1:40000\n")


def test_the_pause_that_sets_the_rate() -> None:
    assert delay_ms(None, 64) == 0
    assert delay_ms(6400, 64) == 10  # 64 connections, one request each 10 ms
    assert delay_ms(1e9, 64) == 0


def _soak(rss: list[float], without_ttl: int = 0, warmup: int = 1) -> Soak:
    soak = Soak({}, warmup, 60)
    load = Interval(100, 10, 0, 0, 0, 0.02, 0.1)
    for minute, size in enumerate(rss, 1):
        soak.samples.append(Sample(minute, load, {"worker 1": size}, 5.0, 1000))
    soak.scan = TtlScan(1000, without_ttl, ("k",) if without_ttl else ())
    return soak


def test_growth_is_measured_from_the_end_of_the_warm_up() -> None:
    soak = _soak([60, 100, 105, 110], warmup=2)  # 100 MB when it ends: +10% is allowed
    assert soak.growth() == {"worker 1": pytest.approx(0.10)}
    assert soak.problems() == []
    assert _soak([60, 100, 105, 110], warmup=1).problems() == [
        "worker 1's RSS grew 83.3% after the warm-up"
    ]


def test_growth_past_ten_percent_fails_the_run() -> None:
    assert _soak([100, 100, 111], warmup=2).problems() == [
        "worker 1's RSS grew 11.0% after the warm-up"
    ]


def test_growth_compares_medians_so_that_one_high_sample_is_not_a_trend() -> None:
    swinging = [100.0] * 5 + [111.0] + [100.0] * 4 + [111.0]  # the last sample is a peak
    assert _soak(swinging, warmup=1).growth() == {"worker 1": pytest.approx(0.055)}
    assert _soak(swinging, warmup=1).problems() == []
    climbing = [100.0] * 6 + [105.0, 108.0, 110.0, 112.0, 114.0]  # the last fifth: 112, 114
    assert _soak(climbing, warmup=1).problems() == ["worker 1's RSS grew 13.0% after the warm-up"]


def test_a_key_without_a_ttl_fails_the_run() -> None:
    assert _soak([100, 100], without_ttl=2).problems() == ["2 of 1000 Redis keys have no TTL"]


def test_the_report_has_a_row_per_interval_a_verdict_and_a_plot(tmp_path: Path) -> None:
    soak = _soak([100, 100, 111], warmup=2)
    text = markdown(soak, "python -m benchmarks.soak --minutes 3")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "minute" not in line]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2", "| 3"]
    assert "verdict: FAIL: worker 1's RSS grew 11.0% after the warm-up" in text
    written = write(soak, tmp_path, "python -m benchmarks.soak --minutes 3")
    assert written == tmp_path / "report.md"
    assert (tmp_path / "soak.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "samples.json").is_file()
