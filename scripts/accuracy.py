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

from ratekeeper.simulate import plots, simulate
from ratekeeper.simulate import scenarios as standard

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "accuracy.md"
PLOTS = ROOT / "docs" / "accuracy"


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
    print(f"wrote {PAGE} and {PLOTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
