"""The report: the terminal table, results.json, the plots and the ``simulate`` command."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ratekeeper.cli import main
from ratekeeper.simulate import generators as traces
from ratekeeper.simulate import simulate
from ratekeeper.simulate.plots import draw_all, series_id
from ratekeeper.simulate.report import share, summary, write

LIMITS = ["fixed_window:100/minute", "sliding_log:100/minute", "leaky_shaper:100/minute"]
PNG = b"\x89PNG\r\n\x1a\n"


def ids(path: Path) -> set[str]:
    """The ids in an SVG file (it must parse as XML)."""
    return {node.attrib["id"] for node in ET.parse(path).iter() if "id" in node.attrib}


def test_shares_are_shown_with_enough_decimals() -> None:
    assert [share(v) for v in (0.0, 0.5, 0.00003, 0.0000001)] == [
        "0%",
        "50.0%",
        "0.003%",
        "1.0e-05%",
    ]


def test_the_table_has_a_row_per_limit() -> None:
    text = summary(simulate(traces.window_edge(100, 60), LIMITS))
    lines = text.splitlines()
    assert lines[0] == "window edge 100/minute: 200 events, 1 key, 1.2 s"
    assert lines[2].startswith("| limit ")
    assert lines[4].startswith("| 100/minute (fixed_window) |      200 |       0 |          100 |")
    assert "200 (2.00x)" in lines[4] and "100 (1.00x)" in lines[5]


def test_results_json_and_plots_hold_every_series(tmp_path: Path) -> None:
    result = simulate(traces.bursts(5, 20, 40, 600), LIMITS, record=True)
    paths = write(result, tmp_path / "report", per_event=True)
    assert [path.name for path in paths] == [
        "results.json",
        "admitted.svg",
        "errors.svg",
        "delays.svg",
    ]
    report = tmp_path / "report"
    data = json.loads((report / "results.json").read_text())
    assert [limit["algorithm"] for limit in data["limits"]] == [
        "fixed_window",
        "sliding_log",
        "leaky_shaper",
    ]
    assert data["trace"]["events"] == result.events
    assert sum(units for _, units in data["offered"]) == result.units
    for limit, measures in zip(data["limits"], result.measures, strict=True):
        assert sum(units for _, units in limit["series"]) == limit["admitted_units"]
        assert max(most for _, most in limit["fullest"]) == limit["peak"]
        assert len(limit["decisions"]) == result.events
        assert limit["decisions"].count("1") == measures.admitted
    assert "event_delays" not in data["limits"][0]
    assert len(data["limits"][2]["event_delays"]) == result.events
    assert [path.name for path in tmp_path.iterdir()] == ["report"]  # no staging folder left
    labels = [measures.limit for measures in result.measures]
    assert {
        series_id(kind, label) for kind in ("admitted", "over", "limit") for label in labels
    } <= ids(report / "admitted.svg")
    assert {
        series_id(kind, label) for kind in ("false-allows", "false-refusals") for label in labels
    } <= ids(report / "errors.svg")
    # Only the shaper's hits waited.
    delays = ids(report / "delays.svg")
    assert series_id("delays", labels[2]) in delays
    assert series_id("delays", labels[0]) not in delays


def test_plots_as_png(tmp_path: Path) -> None:
    paths = draw_all(simulate(traces.window_edge(10, 1), LIMITS), tmp_path, image="png")
    for path in paths:
        assert path.read_bytes().startswith(PNG)


def test_the_command_prints_the_table_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        ["simulate", "--generate", "window-edge:amount=100,period=60", "--out", str(tmp_path)]
        + [argument for limit in LIMITS for argument in ("--limit", limit)]
    )
    out, err = capsys.readouterr()
    assert status == 0
    assert "| 100/minute (fixed_window) |      200 |" in out
    assert "results.json" in err
    assert (tmp_path / "admitted.svg").exists()


def test_the_command_reports_bad_lines_with_their_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("time,key\n1,a\n2\nx,b\n3,a\n")
    status = main(["simulate", str(trace), "--limit", "2/second", "--progress"])
    out, err = capsys.readouterr()
    assert status == 0
    assert f"{trace}:3: expected time,key[,cost]; got 1 field: '2'" in err
    assert f"{trace}:4: time 'x' is neither seconds nor ISO 8601: 'x,b'" in err
    assert "warning: 2 of 5 lines could not be read and were skipped" in err
    assert "2 events" in err  # the progress line
    assert "| 2/second (fixed_window) |        2 |" in out
    assert main(["simulate", str(trace), "--limit", "2/second", "--strict"]) == 1
    assert f"error: {trace}:3: expected time,key[,cost]" in capsys.readouterr().err


def test_the_command_refuses_a_bad_generator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--generate", "zipf:colour=3"]) == 1
    assert "zipf takes keys, rate, seconds" in capsys.readouterr().err


def refused(capsys: pytest.CaptureFixture[str]) -> str:
    """The last line a refused ``simulate`` printed on stderr, with nothing on stdout."""
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n")
    return err.splitlines()[-1]


@pytest.mark.parametrize("out", ["report.svg", "report.svg/inside"])
def test_the_command_refuses_an_out_that_is_not_a_directory_before_simulating(
    tmp_path: Path, out: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "report.svg").write_text("kept")
    target = tmp_path / out
    assert main(["simulate", "--generate", "poisson:rate=5,seconds=10", "--out", str(target)]) == 1
    assert refused(capsys) == f"error: --out {target}: {tmp_path / 'report.svg'} is not a directory"
    assert [path.name for path in tmp_path.iterdir()] == ["report.svg"]
    assert (tmp_path / "report.svg").read_text() == "kept"


@pytest.mark.parametrize("text", ["", "# nothing\n", "time,key\n", "x,y\nfoo\n"])
def test_the_command_refuses_a_trace_without_events(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(text)
    out = tmp_path / "report"
    assert main(["simulate", str(trace), "--out", str(out)]) == 1
    assert refused(capsys) == f"error: {trace}: no events to simulate"
    assert not out.exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--width", "0"], "error: width must be positive finite seconds, not 0.0"),
        (["--width", "nan"], "error: width must be positive finite seconds, not nan"),
        (["--limit", "token_bucket:5/s:partial=ture"], "error: partial must be true or false"),
        (["--generate", "poisson:rate=inf,seconds=1"], "error: rate must be a finite number"),
        (["--generate", "window-edge:amount=1e12,period=60"], "error: amount must be a whole"),
    ],
)
def test_the_command_refuses_bad_arguments_in_one_line(
    tmp_path: Path, arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("1,a\n2,a\n")
    source = [] if "--generate" in arguments else [str(trace)]
    assert main(["simulate", *source, *arguments]) == 1
    assert refused(capsys).startswith(message)


def test_a_generated_key_is_text_even_when_it_looks_like_a_number(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--generate", "poisson:rate=5,seconds=10,key=404"]) == 0
    assert "42 events, 1 key, " in capsys.readouterr().out
