"""docs/accuracy.md holds exactly the tables the simulator gives now (the fast ones; the
Cloudflare-like run takes minutes and is refreshed by ``scripts/accuracy.py --all``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratekeeper.simulate import scenarios

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "accuracy.md"


def test_the_accuracy_page_equals_the_regenerated_tables() -> None:
    page = PAGE.read_text()
    assert scenarios.regenerate(page, scenarios.fast_tables()) == page, (
        "docs/accuracy.md is out of date: run .venv/bin/python scripts/accuracy.py"
    )


def test_the_page_shows_every_plot_it_names() -> None:
    page = PAGE.read_text()
    for name in ("edge/admitted", "bursts/admitted", "bursts/errors", "bursts/delays"):
        assert f"](accuracy/{name}.svg)" in page
        assert (ROOT / "docs" / "accuracy" / f"{name}.svg").exists()


def test_markers_must_be_present() -> None:
    with pytest.raises(ValueError, match="no missing:start"):
        scenarios.regenerate("text", {"missing": "table"})
