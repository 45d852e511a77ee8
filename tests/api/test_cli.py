"""The command line: the demo runs, stops by itself and rejects bad input clearly."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper import Algorithm, demo
from ratekeeper.cli import main


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
    result = subprocess.run(
        [sys.executable, "-m", "ratekeeper.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("ratekeeper ")


def test_the_engine_demo_refuses_what_its_rules_and_override_say(tmp_path: Path) -> None:
    out = io.StringIO()
    verdicts = demo.engine_demo(f"sqlite:///{tmp_path / 'ratekeeper.db'}", out)
    # alice from 6 addresses (5 per hour), then 3 accounts and 6 loadtest tries from one
    # address (8 per minute); loadtest's override (50 per hour) outlasts the address's limit.
    assert verdicts == [True] * 5 + [False] + [True] * 8 + [False]
    assert "per-key overrides in sqlite:///" in out.getvalue()
    assert out.getvalue().count("REFUSED") == 2
