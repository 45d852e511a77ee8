"""What the plots tell a reader, read from the figures' data: each panel graded by how far over
its limit it went, a short attack shown close up in fine bins with the window boundaries
marked, and the shaper's refusals for a full queue kept apart from false ones."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle, StepPatch
from matplotlib.text import Text

from ratekeeper.cli import main
from ratekeeper.simulate import Simulation, simulate
from ratekeeper.simulate import generators as traces
from ratekeeper.simulate.admitted import figure as admitted_figure
from ratekeeper.simulate.admitted import grade
from ratekeeper.simulate.plots import errors_figure, series_id
from ratekeeper.simulate.scenarios import LIMITS

NAMES = [str(limit) for limit in LIMITS]
FIXED, SHAPER, TOKEN, LOG = (
    f"100/minute ({name})"
    for name in ("fixed_window", "leaky_shaper", "token_bucket", "sliding_log")
)


@pytest.fixture(scope="module")
def edge() -> Simulation:
    """The window-edge attack (100 hits in the 0.6 s before a minute boundary, 100 in the 0.6 s
    after it) through every algorithm of docs/accuracy.md at 100 per minute."""
    return simulate(traces.window_edge(100, 60), LIMITS)


def artists(figure: Figure, kind: type, prefix: str) -> Iterator[tuple[str, object]]:
    """``(gid, artist)`` for each artist of ``kind`` in ``figure`` whose gid starts ``prefix``."""
    for artist in figure.findobj(lambda a: isinstance(a, kind)):
        gid = artist.get_gid() or ""
        if gid.startswith(prefix):
            yield gid, artist


def widths(figure: Figure, gid: str) -> set[float]:
    """The widths of the bins of the bars ``gid`` (one filled step patch) in ``figure``."""
    (bars,) = (bars for _, bars in artists(figure, StepPatch, gid))
    edges = bars.get_data().edges
    return {round(float(b - a), 6) for a, b in pairwise(edges)}  # from epoch-sized times


def ids(path: Path) -> set[str]:
    return {node.attrib["id"] for node in ET.parse(path).iter() if "id" in node.attrib}


@pytest.mark.parametrize(
    ("peak", "expected"),
    [(0, "kept"), (100, "kept"), (101, "slight"), (110, "slight"), (111, "over"), (200, "over")],
)
def test_a_panel_is_graded_by_how_far_its_fullest_window_went_over(
    peak: int, expected: str
) -> None:
    assert grade(peak, 100) == expected


def test_the_edge_panels_read_kept_slightly_over_or_over(edge: Simulation) -> None:
    figure = admitted_figure(edge)
    titles = dict(artists(figure, Text, "grade-"))
    graded = {gid.split("-")[1]: set() for gid in titles}
    for gid in titles:
        graded[gid.split("-")[1]].add(gid.split("-", 2)[2])
    slight = {
        series_id("x", f"100/minute ({name})")[2:]
        for name in ("token_bucket", "leaky_bucket", "gcra")
    }
    over = {series_id("x", FIXED)[2:]}
    assert graded["slight"] == slight  # 101 of 100: a full bucket and one unit of refill
    assert graded["over"] == over  # 200 of 100
    assert len(graded["kept"]) == 4
    colours = {
        kind: {str(titles[f"grade-{kind}-{name}"].get_color()) for name in names}
        for kind, names in graded.items()
    }
    assert all(len(found) == 1 for found in colours.values())  # one colour per grade
    assert len(set.union(*colours.values())) == 3  # and three grades, three colours


def test_a_short_attack_is_shown_close_up_in_fine_bins(edge: Simulation) -> None:
    assert edge.width == 2.0  # the whole run: 60 s and the shaper's queue, in 2 s bins
    assert edge.zoom is not None
    assert edge.zoom.width == 0.05
    assert edge.zoom.start == pytest.approx(-0.3) and edge.zoom.end == pytest.approx(1.5)
    fixed = edge.measures[NAMES.index(FIXED)]
    # Seconds from the first event, an epoch-sized float: the boundary is 0.6 s to a few 1e-7.
    before = [most for t, most in fixed.zoom if t < 0.6 - 1e-6]
    after = [most for t, most in fixed.zoom if t >= 0.6 - 1e-6]
    assert max(before) == 100 and max(after) == 200  # 100 up to the boundary, 200 past it
    assert sum(1 for t, most in fixed.zoom if most) == 24  # 1.2 s of hits in 0.05 s bins
    figure = admitted_figure(edge)
    assert widths(figure, series_id("zoom-within", FIXED)) == {0.05}
    assert widths(figure, series_id("admitted", FIXED)) == {2.0}
    (over,) = (bars for _, bars in artists(figure, StepPatch, series_id("zoom-over", FIXED)))
    values, _, baseline = over.get_data()
    red = [top for top, bottom in zip(values, baseline, strict=True) if top > bottom]
    assert min(red) > 110 and max(red) == 200  # red only where a window held more than 110


def test_the_window_boundaries_are_marked_close_up_and_on_the_whole_run(edge: Simulation) -> None:
    figure = admitted_figure(edge)
    found = [line for _, line in artists(figure, Line2D, series_id("boundary", FIXED))]
    places = sorted(round(float(line.get_xdata()[0]), 6) for line in found)
    assert places == [0.6, 0.6, 60.6]  # the close-up's one, the whole run's two


def test_a_trace_without_an_attack_gets_no_close_up() -> None:
    result = simulate(traces.poisson(2, 120, seed=1), ["fixed_window:100/minute"])
    assert result.zoom is None and result.measures[0].zoom == []
    figure = admitted_figure(result)
    assert not list(artists(figure, StepPatch, "zoom-"))
    (bars,) = (bars for _, bars in artists(figure, StepPatch, "admitted-"))
    assert len(bars.get_data().values) == len(result.measures[0].fullest)


def test_each_burst_is_shown_close_up_too() -> None:
    result = simulate(traces.bursts(10, 20, 100, 3_600, seed=2), ["token_bucket:100/minute"])
    assert result.width == 120.0
    assert result.zoom is not None and result.zoom.width == 1.0  # the first burst, 20 s
    token = result.measures[0]
    # A full bucket and most of 20 s of refill, as the first bin of the whole run holds it.
    assert max(most for _, most in token.zoom) == token.fullest[0][1] == 132


def test_the_errors_plot_shows_the_shapers_full_queue_apart_from_false_refusals(
    edge: Simulation,
) -> None:
    figure = errors_figure(edge)
    heights = {gid: bar.get_height() for gid, bar in artists(figure, Rectangle, "")}
    assert heights[series_id("false-refusals", SHAPER)] == 0
    assert heights[series_id("full-queue", SHAPER)] == pytest.approx(49.5)  # 99 of 200
    assert heights[series_id("false-allows", FIXED)] == pytest.approx(50.0)
    assert series_id("full-queue", FIXED) not in heights  # only a shaper queues
    notes = " ".join(text.get_text() for _, text in artists(figure, Text, "note"))
    assert "queue" in notes and "by design" in notes


def test_the_command_writes_the_graded_close_up_and_the_full_queue(tmp_path: Path) -> None:
    assert main(["simulate", "--generate", "window-edge", "--out", str(tmp_path)]) == 0
    admitted = ids(tmp_path / "admitted.svg")
    assert {
        series_id("grade-over", FIXED),
        series_id("grade-slight", TOKEN),
        series_id("grade-kept", LOG),
        series_id("grade-kept", SHAPER),
        series_id("boundary", FIXED),
        series_id("zoom-within", FIXED),
        series_id("zoom-over", FIXED),
    } <= admitted
    assert series_id("full-queue", SHAPER) in ids(tmp_path / "errors.svg")
    data = json.loads((tmp_path / "results.json").read_text())
    shaper = next(limit for limit in data["limits"] if limit["limit"] == SHAPER)
    assert (shaper["refused"], shaper["full_queue"], shaper["false_refusals"]) == (99, 99, 0)
