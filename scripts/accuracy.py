"""Regenerate docs/accuracy.md's tables (and its plots) from the simulator.

    .venv/bin/python scripts/accuracy.py          # the fast tables and the plots, in seconds
    .venv/bin/python scripts/accuracy.py --all    # also the Cloudflare-like run, a few minutes

The tables go between the page's ``<!-- name:start -->`` / ``<!-- name:end -->`` markers; a
test checks that the fast ones equal what the simulator gives now.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ratekeeper.simulate import LeaseOptions, plots, simulate
from ratekeeper.simulate import generators as traces
from ratekeeper.simulate import scenarios as standard

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "accuracy.md"
PLOTS = ROOT / "docs" / "accuracy"
IMAGES = ROOT / "docs" / "images"

#: The leased-quotas plot: one hot key at twice the limit over 4 instances, three horizons.
LEASE_LIMITS = [
    "fixed_window:1000/second",
    "sliding_counter:1000/second",
    "token_bucket:1000/second",
]
LEASE_HORIZONS = (0.01, 0.05, 0.2)


def leases_plot() -> Path:
    """docs/images/leases.png: exact and leased per window, for each horizon."""
    trace = traces.poisson(2_000, 20, seed=1)
    runs = [
        simulate(trace, LEASE_LIMITS, instances=4, leases=LeaseOptions(horizon=horizon))
        for horizon in LEASE_HORIZONS
    ]
    for run in runs:
        print(run.leases, file=sys.stderr)
    return plots.leases(runs, IMAGES, image="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--all", action="store_true", help="also the Cloudflare-like run")
    args = parser.parse_args(argv)
    tables = standard.fast_tables()
    if args.all:
        tables["cloudflare"] = standard.cloudflare()
    PAGE.write_text(standard.regenerate(PAGE.read_text(), tables))
    for scenario in standard.SCENARIOS:
        if scenario.name in ("edge", "bursts"):
            result = simulate(scenario.trace(), standard.LIMITS)
            folder = PLOTS / scenario.name
            folder.mkdir(parents=True, exist_ok=True)
            if scenario.name == "edge":  # the page shows only the edge's admitted plot
                plots.admitted(result, folder)
            else:
                plots.draw_all(result, folder)
    leases_plot()
    print(f"wrote {PAGE}, {PLOTS} and {IMAGES / 'leases.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
