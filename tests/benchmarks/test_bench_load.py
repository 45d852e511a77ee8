"""The service benchmark reads its load generators' reports: what it counts as a failure is what
makes it fail loudly instead of timing errors (``benchmarks.service.load``)."""

from __future__ import annotations

import pytest
from benchmarks.service.load import LoadError, grpc_frame, parse_h2load, parse_wrk, percentile

WRK = """Running 1s test @ http://127.0.0.1:18080/v1/check
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   168.95us   94.04us   2.25ms   89.98%
    Req/Sec    47.96k   802.73    49.53k    72.73%
  Latency Distribution
     50%  137.00us
     75%  175.00us
     90%  262.00us
     99%    1.32ms
  52423 requests in 1.10s, 6.35MB read
{extra}Requests/sec:  47659.70
Transfer/sec:      5.77MB
"""

H2LOAD = """finished in 8.77ms, 2281.02 req/s, 182.88KB/s
requests: 20 total, 20 started, 20 done, {ok} succeeded, {failed} failed, 0 errored, 0 timeout
status codes: {ok} 2xx, 0 3xx, 0 4xx, {failed} 5xx
traffic: 1.60KB (1642) total, 210B (210) headers (space savings 87.04%), 140B (140) data
"""


def test_wrk_rates_latencies_and_successes() -> None:
    load = parse_wrk(WRK.format(extra=""))
    assert (load.requests, load.rate, load.failures) == (52423, 47659.70, 0)
    assert load.p50 == pytest.approx(137e-6)
    assert load.p99 == pytest.approx(1.32e-3)


def test_wrk_answers_not_meant_and_socket_errors_are_failures() -> None:
    refused = WRK.format(extra="  Non-2xx or 3xx responses: 12\n")
    assert parse_wrk(refused).failures == 12
    assert parse_wrk(refused, expect_ok=False).failures == 52423 - 12  # meant to be refused
    errors = WRK.format(extra="  Socket errors: connect 0, read 3, write 0, timeout 2\n")
    load = parse_wrk(errors)
    assert load.failures == 5
    assert "read 3" in load.detail


def test_a_report_that_is_not_wrks_is_an_error() -> None:
    with pytest.raises(LoadError, match="requests in"):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused")


def test_h2load_rates_percentiles_and_failures() -> None:
    load = parse_h2load(H2LOAD.format(ok=20, failed=0), [300, 100, 200, 400] * 5)
    assert (load.requests, load.rate, load.failures) == (20, 2281.02, 0)
    assert (load.p50, load.p99) == (200e-6, 400e-6)
    assert parse_h2load(H2LOAD.format(ok=17, failed=3), [100] * 17).failures == 6
    with pytest.raises(LoadError, match="no request"):
        parse_h2load(H2LOAD.format(ok=0, failed=0), [])


def test_h2load_counting_the_2xx_of_a_stream_the_end_cut_is_no_failure() -> None:
    # A server that sends its headers before its message and trailers: at the end of the run,
    # a stream's 200 was read but not its end, so there is one more 2xx than requests done.
    report = H2LOAD.replace("20 done", "19 done")
    load = parse_h2load(report.format(ok=20, failed=0), [100] * 19)
    assert (load.requests, load.failures) == (19, 0)


def test_percentile_is_nearest_rank_and_grpc_frames_are_length_prefixed() -> None:
    assert percentile(list(range(1, 101)), 50) == 50
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([7], 99) == 7
    assert grpc_frame(b"abc") == b"\x00\x00\x00\x00\x03abc"
