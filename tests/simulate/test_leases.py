"""Leased quotas in the simulator: N instances with real ``Leasing`` wrappers over one memory
store, on the trace's time, against the same limit exact on one store."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ratekeeper import Limit
from ratekeeper.cli import main
from ratekeeper.core.errors import InvalidLimitError, TraceError
from ratekeeper.simulate import LeaseOptions, Trace, simulate
from ratekeeper.simulate import generators as traces
from ratekeeper.simulate.leases import LeaseRun
from ratekeeper.simulate.report import summary

START = 1_700_000_000.0
LEASABLE = [
    "fixed_window",
    "sliding_counter",
    "bucketed_window",
    "token_bucket",
    "gcra",
    "leaky_bucket",
]


def steady(rate: float, seconds: float, start: float = START, key: str = "hot") -> Trace:
    """``rate`` hits a second on one key, evenly spaced, from ``start``."""
    count = round(rate * seconds)
    return Trace([start + i / rate for i in range(count)], [key] * count, name="steady")


def test_four_instances_at_twice_a_fixed_window_admit_its_bound_and_no_more() -> None:
    result = simulate(
        steady(200, 10),
        ["fixed_window:100/second"],
        instances=4,
        leases=LeaseOptions(horizon=0.05, ttl=1.0, share=0.1),
    )
    assert result.leases is not None
    measures = result.leases.measures[0]
    assert measures.exact == 1_000  # 100 in each of the 10 windows
    assert 0.97 * measures.exact <= measures.admitted <= measures.exact
    assert measures.difference == measures.admitted - measures.exact
    assert measures.ratio == measures.admitted / measures.exact
    assert len(measures.windows) == 10
    assert all(leased <= 100 and exact == 100 for _, exact, leased in measures.windows)
    assert measures.decisions == 2_000  # one round trip per hit, exact
    assert 0 < measures.exchanges <= measures.decisions / 5  # slices of up to 10 units
    assert measures.exact_peak == 100 and measures.peak <= 2 * 100


def test_a_leased_run_is_deterministic() -> None:
    trace = traces.poisson(300, 5, seed=7)
    runs = [
        simulate(trace, ["token_bucket:100/second"], instances=3, leases=LeaseOptions())
        for _ in range(2)
    ]
    assert runs[0].to_dict() == runs[1].to_dict()


@pytest.mark.parametrize("algorithm", LEASABLE)
def test_no_leasable_algorithm_admits_more_leased_than_exact(algorithm: str) -> None:
    result = simulate(
        traces.poisson(400, 6, seed=3),
        [f"{algorithm}:100/second"],
        instances=4,
        leases=LeaseOptions(),
    )
    assert result.leases is not None
    measures = result.leases.measures[0]
    assert measures.admitted <= measures.exact
    assert measures.admitted >= 0.8 * measures.exact
    assert measures.exchanges < measures.decisions


def test_one_instance_with_leases_is_a_single_process_with_slices() -> None:
    result = simulate(steady(200, 5), ["fixed_window:100/second"], leases=LeaseOptions())
    assert result.leases is not None and result.leases.instances == 1
    assert result.leases.measures[0].admitted == result.leases.measures[0].exact == 500


def test_idle_instances_give_their_slices_back_at_the_sweep() -> None:
    limit = Limit(1000, 1.0, "token_bucket")
    run = LeaseRun(limit, 4, LeaseOptions(ttl=1.0, horizon=0.2, share=0.1))
    run.feed(steady(400, 2))  # under the limit: every instance holds part of a slice
    held = sum(piece.left for one in run.instances for piece in one.slices.values())
    assert held > 0
    assert run.shared.returns == 0
    run.feed(steady(1, 1, start=START + 6, key="other"))  # the sweeps run at its first hit
    assert run.shared.returns > 0  # the sweep gave them back
    assert all(
        piece.left == 0 for one in run.instances if (piece := one.slices.get((limit.id, "hot")))
    )
    assert all(one.slices.get((limit.id, "hot")) for one in run.instances)


def test_a_trace_with_an_idle_spell_admits_alike_after_it() -> None:
    events = [*steady(300, 3), *steady(300, 3, start=START + 10)]
    result = simulate(
        Trace.from_events(events), ["token_bucket:100/second"], instances=4, leases=LeaseOptions()
    )
    assert result.leases is not None
    measures = result.leases.measures[0]
    after = [(t, exact, leased) for t, exact, leased in measures.windows if t >= 10]
    _, exact, leased = after[0]
    assert exact == 199  # the full bucket and a second's refill
    assert leased >= 0.95 * exact  # nothing held back by the slices of before
    assert 0.95 * measures.exact <= measures.admitted <= measures.exact


def test_the_summary_and_results_hold_the_leased_runs(tmp_path: Path) -> None:
    from ratekeeper.simulate.report import write

    result = simulate(
        steady(200, 4),
        ["fixed_window:100/second", "gcra:100/second"],
        instances=4,
        leases=LeaseOptions(horizon=0.01),
    )
    text = summary(result)
    assert "Leased: 4 instances (round robin) sharing one store, ttl 1 s, horizon 0.01 s" in text
    assert "| 100/second (fixed_window) |            400 |" in text
    paths = write(result, tmp_path)
    assert [path.name for path in paths][-1] == "leases.svg"
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["leases"]["instances"] == 4
    assert data["leases"]["route"] == "round robin"
    assert data["leases"]["horizon"] == 0.01
    assert [limit["algorithm"] for limit in data["leases"]["limits"]] == ["fixed_window", "gcra"]
    assert data["leases"]["limits"][0]["exact"] == 400
    ids = {
        node.attrib["id"]
        for node in ET.parse(tmp_path / "leases.svg").iter()
        if "id" in node.attrib
    }
    assert {"exact-100_second__fixed_window_", "leased-0.01-100_second__fixed_window_"} <= ids
    assert "limit-100_second__gcra_" in ids


def test_a_simulation_without_leases_says_nothing_of_them() -> None:
    result = simulate(steady(200, 2), ["fixed_window:100/second"])
    assert result.leases is None
    assert "leases" not in result.to_dict()
    assert "Leased" not in summary(result)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"instances": 0, "leases": LeaseOptions()}, "instances must be a whole number"),
        ({"instances": -2, "leases": LeaseOptions()}, "instances must be a whole number"),
        ({"instances": 2.5, "leases": LeaseOptions()}, "instances must be a whole number"),
        ({"instances": True, "leases": LeaseOptions()}, "instances must be a whole number"),
        ({"instances": 4}, "instances are simulated with leases"),
        ({"leases": {"ttl": 1}}, "leases must be LeaseOptions"),
    ],
)
def test_bad_instances_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        simulate(steady(10, 1), ["fixed_window:5/second"], **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl": -1.0}, "lease_ttl must be seconds above 0"),
        ({"ttl": math.nan}, "lease_ttl must be seconds above 0"),
        ({"horizon": 0}, "lease_horizon must be seconds above 0"),
        ({"horizon": math.inf}, "lease_horizon must be seconds above 0"),
        ({"share": 1.5}, "lease_share must be above 0 and at most 1"),
        ({"share": math.nan}, "lease_share must be above 0 and at most 1"),
        ({"horizon": 2.0, "ttl": 1.0}, r"lease_horizon \(2s\) must be at most lease_ttl"),
    ],
)
def test_bad_lease_options_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        LeaseOptions(**options)


@pytest.mark.parametrize("limit", ["sliding_log:5/second", "leaky_shaper:5/second"])
def test_a_limit_that_cannot_lease_is_refused(limit: str) -> None:
    with pytest.raises(InvalidLimitError, match="cannot be leased"):
        simulate(steady(10, 1), [limit], instances=2, leases=LeaseOptions())


def test_a_trace_with_retries_is_refused() -> None:
    with pytest.raises(TraceError, match="does not replay retries"):
        simulate(traces.retry_storm(3, 10), ["fixed_window:5/second"], leases=LeaseOptions())


def test_the_command_replays_leases_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    status = main(
        [
            "simulate",
            "--generate",
            "poisson:rate=200,seconds=5",
            "--limit",
            "fixed_window:100/second",
            "--instances",
            "4",
            "--lease-horizon",
            "0.05",
            "--lease-ttl",
            "1",
            "--lease-share",
            "0.1",
            "--out",
            str(out),
        ]
    )
    stdout, stderr = capsys.readouterr()
    assert status == 0
    assert "Leased: 4 instances (round robin) sharing one store, ttl 1 s, horizon 0.05 s" in stdout
    assert sorted(path.name for path in out.iterdir()) == [
        "admitted.svg",
        "delays.svg",
        "errors.svg",
        "leases.svg",
        "results.json",
    ]
    data = json.loads((out / "results.json").read_text())
    leased = data["leases"]["limits"][0]
    assert data["leases"]["share"] == 0.1
    assert leased["admitted"] <= leased["exact"] and leased["exchanges"] < leased["decisions"]
    assert "leases.svg" in stderr


def test_the_command_defaults_to_the_leasable_algorithms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--generate", "poisson:rate=5,seconds=10", "--instances", "2"]) == 0
    table = capsys.readouterr().out.split("Leased:")[1]
    assert [name for name in LEASABLE if f"({name})" in table] == LEASABLE
    assert "sliding_log" not in table and "leaky_shaper" not in table


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--instances", "0"], "error: instances must be a whole number from 1 to 1,000, not 0"),
        (["--instances", "-3"], "error: instances must be a whole number from 1 to 1,000"),
        (["--lease-ttl", "nan"], "error: lease_ttl must be seconds above 0"),
        (["--lease-ttl", "-1"], "error: lease_ttl must be seconds above 0"),
        (["--lease-horizon", "0"], "error: lease_horizon must be seconds above 0"),
        (["--lease-share", "inf"], "error: lease_share must be above 0 and at most 1"),
        (
            ["--limit", "sliding_log:5/s", "--instances", "2"],
            "error: 5/second (sliding_log) cannot",
        ),
    ],
)
def test_the_command_refuses_bad_lease_options_and_writes_nothing(
    tmp_path: Path, arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    command = ["simulate", "--generate", "poisson:rate=5,seconds=10", "--out", str(out)]
    assert main([*command, *arguments]) == 1
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and "Traceback" not in stderr
    assert stderr.splitlines()[-1].startswith(message)
    assert not out.exists()
