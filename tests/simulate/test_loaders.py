"""Trace files: each format read as events; a bad line reported with its number, never dropped
silently; a log of any size read in constant memory."""

from __future__ import annotations

import io
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratekeeper.core.errors import TraceError
from ratekeeper.simulate import simulate
from ratekeeper.simulate.loaders import read_csv, read_jsonl, read_nginx, read_trace

LOG_LINE = (
    '{address} - frank [10/Oct/2000:13:55:{second:02d} -0700] "GET /apache_pb.gif?x=1 HTTP/1.0" '
    '200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"\n'
)
#: 2000-10-10 13:55:00 -0700, in epoch seconds.
T = 971_211_300.0


def test_csv_with_and_without_a_header(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"
    plain.write_text("1.5,alice,2\n2.5,bob\n\n2000-01-01T00:00:00,carol,1\n")
    assert list(read_trace(plain)) == [
        (1.5, "alice", 2),
        (2.5, "bob", 1),
        (946_684_800.0, "carol", 1),
    ]
    headed = io.StringIO("key,extra,time\nalice,x,1\n")
    assert list(read_csv(headed)) == [(1.0, "alice", 1)]


def test_a_bad_csv_line_is_reported_with_its_number() -> None:
    loaded = read_csv(io.StringIO("1,a\nnot-a-time,b\n3,c,-1\n4\n5,d\n"))
    assert list(loaded) == [(1.0, "a", 1), (5.0, "d", 1)]
    assert loaded.lines == 5
    assert loaded.bad_lines == 3
    assert [(bad.number, bad.reason) for bad in loaded.bad] == [
        (2, "time 'not-a-time' is neither seconds nor ISO 8601"),
        (3, "cost '-1' is negative"),
        (4, "expected time,key[,cost]; got 1 field"),
    ]
    assert str(loaded.bad[0]) == "line 2: time 'not-a-time' is neither seconds nor ISO 8601: " + (
        "'not-a-time,b'"
    )


def test_strict_reading_stops_at_the_first_bad_line() -> None:
    loaded = read_csv(io.BytesIO(b"1,a\n2,b,x\n"), strict=True)
    with pytest.raises(TraceError, match=r"^<stream>:2: invalid literal"):
        list(loaded)


def test_json_lines() -> None:
    text = '{"time": 1, "key": "a", "cost": 3}\n[2, "b"]\n{"time": 3}\n[4, 5]\n"x"\n'
    loaded = read_jsonl(io.StringIO(text))
    assert list(loaded) == [(1.0, "a", 3), (2.0, "b", 1)]
    assert [bad.number for bad in loaded.bad] == [3, 4, 5]
    assert "'key'" in loaded.bad[0].reason


def test_nginx_combined_keyed_by_address_or_a_field() -> None:
    text = LOG_LINE.format(address="127.0.0.1", second=36) + LOG_LINE.format(
        address="10.0.0.2", second=37
    )
    assert list(read_nginx(io.StringIO(text))) == [
        (T + 36, "127.0.0.1", 1),
        (T + 37, "10.0.0.2", 1),
    ]
    assert [key for _, key, _ in read_nginx(io.StringIO(text), key="path")] == [
        "/apache_pb.gif"
    ] * 2
    assert {key for _, key, _ in read_nginx(io.StringIO(text), key="http_user_agent")} == {
        "Mozilla/4.08 [en] (Win98; I ;Nav)"
    }
    with pytest.raises(TraceError, match="unknown nginx field"):
        read_nginx(io.StringIO(text), key="referrer")


def test_a_bad_log_line_is_reported_with_its_number() -> None:
    good = LOG_LINE.format(address="127.0.0.1", second=1)
    text = good + "garbage\n" + good.replace("Oct", "Okt") + good
    loaded = read_nginx(io.StringIO(text))
    assert len(list(loaded)) == 2
    assert [(bad.number, bad.reason) for bad in loaded.bad] == [
        (2, "not nginx's combined log format"),
        (3, "time '10/Okt/2000:13:55:01 -0700' is not dd/Mon/yyyy:hh:mm:ss +zzzz"),
    ]


def test_a_loaded_file_simulates_as_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text("".join(LOG_LINE.format(address="1.2.3.4", second=s % 60) for s in range(30)))
    measures = simulate(read_trace(path), ["sliding_log:10/minute"]).measures[0]
    assert (measures.requests, measures.admitted) == (30, 10)


class GeneratedLog(io.RawIOBase):
    """A read-only file of ``lines`` log lines, made as they are read: nothing on disk."""

    def __init__(self, lines: int) -> None:
        self._lines = self._make(lines)
        self._buffer = b""

    @staticmethod
    def _make(lines: int) -> Iterator[bytes]:
        for number in range(lines):
            address = f"10.{number % 7}.{number % 251}.{number % 13}"
            yield LOG_LINE.format(address=address, second=number % 60).encode()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while len(self._buffer) < len(buffer):
            line = next(self._lines, None)
            if line is None:
                break
            self._buffer += line
        size = min(len(buffer), len(self._buffer))
        buffer[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


def peak_bytes(lines: int) -> int:
    """The most memory Python held while reading ``lines`` generated log lines."""
    tracemalloc.start()
    try:
        loaded = read_nginx(io.BufferedReader(GeneratedLog(lines)))
        count = sum(1 for _ in loaded)
        assert count == lines
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_log_streams_in_constant_memory() -> None:
    # 10,000 lines (1.8 MB) and 40,000 (7 MB): the peak stays small and does not grow.
    small, large = peak_bytes(10_000), peak_bytes(40_000)
    assert large < 512 * 1024
    assert large < 1.5 * small + 64 * 1024


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_gigabyte_log_streams_in_constant_memory() -> None:
    """A gigabyte of generated log read in a child process: its resident memory stays small."""
    script = (
        "import io\n"
        "from ratekeeper.simulate.loaders import read_nginx\n"
        "from tests.simulate.test_loaders import GeneratedLog, LOG_LINE\n"
        "lines = 1_000_000_000 // len(LOG_LINE.format(address='10.0.0.0', second=0))\n"
        "count = sum(1 for _ in read_nginx(io.BufferedReader(GeneratedLog(lines))))\n"
        "assert count == lines, count\n"
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=900
    )
    assert int(done.stdout) < 100 * 1024  # kilobytes: under 100 MB, the interpreter included


def test_a_cost_or_key_no_store_would_take_is_a_bad_line() -> None:
    text = (
        '{"time": 1, "key": "a", "cost": 9007199254740992}\n'
        '{"time": 2, "key": "a", "cost": 1e20}\n'
        '{"time": 3, "key": "\\ud800"}\n'
        '{"time": 4, "key": "a", "cost": 9007199254740991}\n'
    )
    loaded = read_jsonl(io.StringIO(text))
    assert list(loaded) == [(4.0, "a", 9_007_199_254_740_991)]
    costs = "cost must be an integer from 0 to 9007199254740991 (0 only looks), not"
    assert [(bad.number, bad.reason) for bad in loaded.bad] == [
        (1, f"{costs} 9007199254740992"),
        (2, f"{costs} 100000000000000000000"),
        (3, "key must encode as UTF-8, not '\\ud800' (surrogates not allowed at 0)"),
    ]
    huge = read_csv(io.StringIO("1,a,99999999999999999999\n"))
    assert list(huge) == []
    assert huge.bad[0].reason.endswith("not 99999999999999999999")


def test_a_line_too_big_or_too_deep_for_its_parser_is_a_bad_line() -> None:
    deep = read_jsonl(io.StringIO("[" * 100_000 + "]" * 100_000 + '\n[1, "a"]\n'))
    assert list(deep) == [(1.0, "a", 1)]
    assert [bad.number for bad in deep.bad] == [1]
    assert "recursion" in deep.bad[0].reason
    wide = read_csv(io.StringIO("1," + "a" * 200_000 + "\n2,b\n"))
    assert list(wide) == [(2.0, "b", 1)]
    assert [(bad.number, bad.reason) for bad in wide.bad] == [
        (1, "field larger than field limit (131072)")
    ]
