"""The ``ratekeeper`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ratekeeper import __version__
from ratekeeper.config import DEFAULT_URL
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

    config = commands.add_parser("config", help="work with rule files")
    config_commands = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    validate = config_commands.add_parser(
        "validate", help="check rule files (Envoy rate-limit YAML) as the server loads them"
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="rule files or directories")

    limits = commands.add_parser("limits", help="manage per-key overrides in the config store")
    limits.add_argument(
        "--config",
        metavar="URL",
        help="configuration store, e.g. sqlite:///ratekeeper.db or postgresql://... "
        f"(default: $RATEKEEPER_CONFIG, else {DEFAULT_URL})",
    )
    limits.add_argument("--domain", default="", help="namespace of the keys (default: none)")
    actions = limits.add_subparsers(dest="action", metavar="ACTION", required=True)
    set_ = actions.add_parser("set", help="set a key's limit")
    set_.add_argument("key", help="e.g. user:241531")
    set_.add_argument("--capacity", type=int, required=True, help="hits allowed per window")
    set_.add_argument(
        "--window", required=True, help="window length: seconds or a period such as 5m"
    )
    set_.add_argument("--algorithm", help="default bucketed_window")
    set_.add_argument("--granularity", type=float, help="bucketed_window's sub-window seconds")
    set_.add_argument("--burst", type=int, help="bucket size of token_bucket, gcra, leaky_*")
    get = actions.add_parser("get", help="print a key's override as JSON")
    get.add_argument("key")
    delete = actions.add_parser("delete", help="remove a key's override")
    delete.add_argument("key")
    list_ = actions.add_parser("list", help="list overrides (domain, key, JSON)")
    list_.add_argument("--prefix", default="", help="only keys starting with this")
    list_.add_argument("--json", action="store_true", help="one JSON object per line")
    import_ = actions.add_parser(
        "import", help='load {"key": {"time_window_sec": 1, "capacity": 5}, ...} from a file'
    )
    import_.add_argument("file", help="a JSON file, or - for stdin")
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
    if args.command == "config":
        from ratekeeper import commands

        return commands.validate(args.files)
    if args.command == "limits":
        from ratekeeper import commands

        return commands.limits(args)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
