"""The ``ratekeeper`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ratekeeper import __version__
from ratekeeper.errors import InvalidLimitError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratekeeper", description="Exact, fast rate limiting: library, service and CLI."
    )
    parser.add_argument("--version", action="version", version=f"ratekeeper {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="show live decisions of every algorithm on the same bursty traffic"
    )
    demo.add_argument("--rate", default="20/second", help="the limit, e.g. '20/second'")
    demo.add_argument("--seconds", type=float, default=10.0, help="how long to run (default 10)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the synthetic traffic")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ratekeeper import demo

        try:
            return demo.main(args.rate, args.seconds, args.seed)
        except InvalidLimitError as error:
            parser.error(str(error))
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
