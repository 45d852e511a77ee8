"""The command line: the demo runs, stops by itself and rejects bad input clearly."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper import Algorithm
from ratekeeper.cli import demo, main
from tests.cli.commandline import run


def test_demo_run_counts_every_algorithm() -> None:
    out = io.StringIO()
    totals = demo.run("5/second", seconds=2, out=out)
    assert set(totals) == set(demo.SHOWN)
    lines = out.getvalue().splitlines()
    assert lines[1].split()[:2] == ["t", "offered"]
    assert lines[-1].startswith("total")
    offered = sum(int(line.split()[1]) for line in lines[2:-1])
    for algorithm, admitted in totals.items():
        assert 0 < admitted <= offered, algorithm
    # No second of the two-second run can see more than 5 admitted by the sliding log.
    assert totals[Algorithm.SLIDING_LOG] <= 15


def test_bad_rate_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--rate", "5/fortnight"])
    assert exit_.value.code == 2
    assert "unknown unit 'fortnight'" in capsys.readouterr().err


def test_version() -> None:
    status, out, _ = run("--version")
    assert status == 0
    assert out.startswith("ratekeeper ")


def test_the_engine_demo_refuses_what_its_rules_and_override_say(tmp_path: Path) -> None:
    out = io.StringIO()
    verdicts = demo.engine_demo(f"sqlite:///{tmp_path / 'ratekeeper.db'}", out)
    # alice from 6 addresses (5 per hour), then 3 accounts and 6 loadtest tries from one
    # address (8 per minute); loadtest's override (50 per hour) outlasts the address's limit.
    assert verdicts == [True] * 5 + [False] + [True] * 8 + [False]
    assert "per-key overrides in sqlite:///" in out.getvalue()
    assert out.getvalue().count("REFUSED") == 2


def test_a_huge_rate_is_simulated_in_bounded_steps() -> None:
    out = io.StringIO()
    totals = demo.run("100000000/second", seconds=2, out=out)
    lines = out.getvalue().splitlines()
    scale = 100_000_000 // demo.MAX_SIMULATED_RATE
    assert lines[1] == f"(each simulated hit stands for {scale:,} hits)"
    rows = [line.split() for line in lines[3:-1]]
    assert len(rows) == 2
    for row in rows:
        offered = int(row[1])
        assert offered % scale == 0
        assert offered // scale <= 4.2 * demo.MAX_SIMULATED_RATE  # the hits one tick simulates
    # The sliding log admits at most the limit in any second: 100,000,000.
    assert 0 < totals[Algorithm.SLIDING_LOG] <= 2 * 100_000_000


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_the_demo_stops_at_once_on_a_signal(signal_number: int) -> None:
    """A real process, the fastest rate, a real signal: it stops and exits 0, well before the
    60 seconds it was asked to run."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ratekeeper.cli",
            "demo",
            "--rate",
            "100000000/second",
            "--seconds",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        lines = [process.stdout.readline() for _ in range(4)]
        assert lines[3].split()[0] == "1", lines  # the first second was shown
        process.send_signal(signal_number)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, err
    assert out.endswith("stopped\n")
    assert "Traceback" not in err


def test_help_describes_only_what_exists() -> None:
    status, out, _ = run("--help")
    assert status == 0
    text = " ".join(out.split())
    assert "library and decision engine" in text
    assert "serve run the decision service" in text


@pytest.mark.parametrize("seconds", ["nan", "-1", "0", "abc"])
def test_the_demo_refuses_seconds_that_are_not_positive(
    seconds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--seconds", seconds])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"error: argument --seconds: must be positive seconds, not '{seconds}'\n"
    )
