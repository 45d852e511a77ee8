"""The simulator's default bins, summaries, generator defaults and the all-or-nothing report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from ratekeeper.cli import main
from ratekeeper.simulate import generators as traces
from ratekeeper.simulate import simulate
from ratekeeper.simulate.bins import coarser, readable_width
from ratekeeper.simulate.generators import START
from ratekeeper.simulate.trace import Trace
from tests.simulate.mixed import mixed_trace

ROOT = Path(__file__).resolve().parents[2]
EDGE = ["fixed_window:100/minute", "sliding_log:100/minute", "leaky_shaper:100/minute"]


@pytest.mark.parametrize(
    ("span", "width"),
    [
        (0.0, 1.0),
        (0.001, 0.001),
        (1.2, 0.05),
        (10.0, 0.5),
        (60.0, 2.0),
        (61.2, 2.0),
        (600.0, 15.0),
        (1_200.0, 30.0),
        (3_500.0, 120.0),
        (3_600.0, 120.0),
        (7_197.0, 300.0),
        (86_400.0, 3_600.0),
        (604_800.0, 21_600.0),
    ],
)
def test_bins_are_a_readable_width_that_cuts_the_span_into_a_few_dozen(
    span: float, width: float
) -> None:
    assert readable_width(span) == width


@pytest.mark.parametrize("span", [-1.0, float("nan"), float("inf")])
def test_a_span_that_is_not_finite_seconds_is_refused(span: float) -> None:
    with pytest.raises(ValueError, match="span must be finite seconds >= 0"):
        readable_width(span)


def test_bins_merge_into_a_readable_multiple() -> None:
    assert coarser(2.0, 0, 1_799) == 60  # an hour of 2 s bins: 30 bins of 2 minutes
    assert coarser(2.0, 0, 39) == 1  # 40 bins already
    assert coarser(0.05, 0, 1_223) == 40  # 61.2 s of 0.05 s bins: 2 s bins
    assert coarser(7.0, 0, 999) == 1  # no readable width is a multiple of 7 s


def test_a_simulation_bins_the_window_edge_attack_in_2_second_bins_and_marks_it() -> None:
    # The trace lasts 1.2 s; the shaper's queue lets its last hit proceed a minute later.
    result = simulate(traces.window_edge(100, 60), EDGE)
    assert result.width == 2.0
    assert len(result.offered) == 31
    boundary = START + 120
    first = boundary - 0.6
    assert result.marks == [(pytest.approx(0.0), pytest.approx(1.2))]
    fixed, log, shaper = ([most for _, most in m.fullest] for m in result.measures)
    assert fixed[:2] == [100, 200] and set(fixed[2:]) == {0}
    assert log[:1] == [100] and set(log[1:]) == {0}
    assert max(shaper) == 100 and shaper == sorted(shaper)  # one per 0.6 s, up to 100
    assert [m.peak for m in result.measures] == [200, 100, 100]
    assert result.offered[0][0] == pytest.approx((boundary - 2) - first)


def test_bursts_are_marked_each_and_binned_in_2_minutes() -> None:
    result = simulate(traces.bursts(10, 20, 100, 3_600, seed=2), EDGE)
    assert result.width == 120.0
    assert len(result.marks) == 30
    assert [round(end - begin) for begin, end in result.marks] == [20] * 30
    starts = [begin for begin, _ in result.marks]
    assert [round(b - a) for a, b in pairwise(starts)] == [120] * 29


def test_results_json_holds_summaries_unless_per_event(tmp_path: Path) -> None:
    assert main(["simulate", "--generate", "window-edge", "--out", str(tmp_path / "a")]) == 0
    data = json.loads((tmp_path / "a" / "results.json").read_text())
    assert set(data) == {"trace", "width", "limits"}
    assert data["trace"] == {
        "name": "window edge 100/minute",
        "events": 200,
        "units": 200,
        "keys": 1,
        "duration": pytest.approx(1.194),  # the last hit is one step before the end
        "marks": [[pytest.approx(0.0), pytest.approx(1.2)]],
    }
    assert data["width"] == 2.0
    fixed = next(limit for limit in data["limits"] if limit["algorithm"] == "fixed_window")
    assert {name: fixed[name] for name in ("limit", "admitted", "refused", "peak")} == {
        "limit": "100/minute (fixed_window)",
        "admitted": 200,
        "refused": 0,
        "peak": 200,
    }
    assert not {"series", "fullest", "decisions", "event_delays"} & set(fixed)
    assert (tmp_path / "a" / "results.json").stat().st_size < 10_000
    argv = ["simulate", "--generate", "window-edge", "--no-plots", "--per-event"]
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    full = json.loads((tmp_path / "b" / "results.json").read_text())
    assert set(full) == {"trace", "width", "limits", "offered", "zoom"}
    assert full["zoom"] == {"start": pytest.approx(-0.3), "end": pytest.approx(1.5), "width": 0.05}
    shaper = next(limit for limit in full["limits"] if limit["algorithm"] == "leaky_shaper")
    assert shaper["decisions"] == "1" * 100 + "01" + "0" * 98  # a place freed after the edge
    assert len(shaper["event_delays"]) == 200 and len(shaper["fullest"]) == 31
    assert len(shaper["zoom"]) == 36  # the attack's 1.2 s and 0.3 s each side, in 0.05 s bins
    assert sorted(path.name for path in (tmp_path / "b").iterdir()) == ["results.json"]


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("poisson", lambda: traces.poisson(2.5, 1_200)),
        ("bursts", lambda: traces.bursts(10, 20, 100, 3_600)),
        ("window-edge", lambda: traces.window_edge(100, 60)),
        ("diurnal", lambda: traces.diurnal(4, 7_200)),
        ("zipf", lambda: traces.zipf(1_000, 50, 600)),
        ("retry-storm", lambda: traces.retry_storm(3, 600)),
    ],
)
def test_every_generator_has_defaults(name: str, call: object) -> None:
    from ratekeeper.cli.simulate import GENERATORS, generated

    made = GENERATORS[name]()
    expected = call()  # type: ignore[operator]
    assert list(made) == list(expected) and made.name == expected.name
    assert list(generated(name)) == list(made)


def test_the_command_runs_a_generator_given_no_argument(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--generate", "window-edge"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("window edge 100/minute: 200 events, 1 key, 1.2 s\n")
    assert "| 100/minute (fixed_window)    |      200 |       0 |" in out


BLOCKED = (
    "import sys; sys.modules['matplotlib'] = None; "  # import matplotlib now raises ImportError
    "from ratekeeper.cli import main; sys.exit(main(sys.argv[1:]))"
)


def blocked(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``ratekeeper ARGV`` in a process that cannot import matplotlib."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, "-c", BLOCKED, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_matplotlib_a_run_with_plots_writes_nothing(tmp_path: Path) -> None:
    done = blocked("simulate", "--generate", "window-edge", "--out", "report/inner", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (3, "")  # 3: the environment lacks a package
    assert done.stderr == (
        "error: matplotlib is not installed; install it with: pip install 'ratekeeper[plot]'\n"
    )
    assert list(tmp_path.iterdir()) == []  # neither report/ nor report/inner, nor a staging one


def test_without_matplotlib_an_existing_folder_is_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "results.json").write_text("earlier")
    done = blocked("simulate", "--generate", "window-edge", "--out", "report", cwd=tmp_path)
    assert done.returncode == 3
    assert [path.name for path in tmp_path.iterdir()] == ["report"]
    assert [path.name for path in (tmp_path / "report").iterdir()] == ["results.json"]
    assert (tmp_path / "report" / "results.json").read_text() == "earlier"


def test_without_matplotlib_a_run_without_plots_writes_the_summaries(tmp_path: Path) -> None:
    done = blocked(
        "simulate", "--generate", "window-edge", "--out", "report", "--no-plots", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert [path.name for path in (tmp_path / "report").iterdir()] == ["results.json"]


def test_a_failure_while_drawing_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ratekeeper.simulate import plots, report

    def broken(*args: object, **kwargs: object) -> list[Path]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots, "draw_all", broken)
    with pytest.raises(OSError, match="No space left"):
        report.write(simulate(traces.window_edge(10, 1), EDGE), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def brute_fullest(
    trace: Trace, decisions: bytearray, period: float, width: float
) -> dict[int, int]:
    """Per bin, the most units one key held in one period ending at a unit it admitted there,
    counted from scratch from the decisions (every allowed hit granted its whole cost)."""
    costs = trace.costs or [1] * len(trace)
    admitted: dict[str, list[tuple[float, int]]] = {}
    fullest: dict[int, int] = {}
    for index, (now, key) in enumerate(zip(trace.times, trace.keys, strict=True)):
        if not decisions[index] or not costs[index]:
            continue
        mine = admitted.setdefault(key, [])
        mine.append((now, costs[index]))
        held = sum(cost for when, cost in mine if now - period < when <= now)
        slot = int(now * (1.0 / width))
        fullest[slot] = max(fullest.get(slot, 0), held)
    return fullest


@pytest.mark.parametrize("algorithm", ["fixed_window", "sliding_counter", "gcra", "token_bucket"])
@pytest.mark.parametrize("costs", [False, True])
def test_the_fullest_window_per_bin_is_exact_on_both_paths(algorithm: str, costs: bool) -> None:
    trace = mixed_trace(600)
    if not costs:
        trace = Trace(trace.times, trace.keys, name="mixed, cost 1")
    limit = f"{algorithm}:5/second"
    recorded = simulate(trace, [limit], record=True)  # decided hit by hit
    fast = simulate(trace, [limit])  # the lean loop, when every cost is 1
    decisions = recorded.replay.tallies[0].decisions
    assert decisions is not None
    expected = brute_fullest(trace, decisions, 1.0, recorded.width)
    for result in (recorded, fast):
        start = result.replay.first
        got = {
            round((t + start) / result.width): most
            for t, most in result.measures[0].fullest
            if most
        }
        assert got == expected
        assert max(got.values()) == result.measures[0].peak


def test_a_stream_is_binned_by_its_shortest_period_then_merged_into_a_readable_width() -> None:
    hour = traces.poisson(2, 3_600, seed=3)
    result = simulate(iter(list(hour)), ["fixed_window:100/minute", "gcra:10/5 minutes"])
    assert result.width == 120.0  # minutes merged into 2 minutes: 30 bins, as for the trace
    assert len(result.offered) == 30
    assert simulate(hour, ["fixed_window:100/minute"]).width == 120.0
    assert simulate(iter(list(hour)), ["fixed_window:100/minute"], width=7).width == 7


def test_the_output_folder_gets_the_mode_of_any_new_folder(tmp_path: Path) -> None:
    """The folder a run makes is made as ``mkdir`` makes one (the umask's mode), not private."""
    from ratekeeper import Limit
    from ratekeeper.simulate.report import write

    simulation = simulate(traces.window_edge(), [Limit(100, 60, "fixed_window")])
    mask = os.umask(0o022)
    try:
        write(simulation, tmp_path / "out", plots=False)
    finally:
        os.umask(mask)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
