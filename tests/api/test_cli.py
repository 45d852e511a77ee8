"""The command line: the demo runs, stops by itself and rejects bad input clearly."""

from __future__ import annotations

import io
import subprocess
import sys

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
