"""The ``ratekeeper`` command line.

``main`` parses the arguments, runs the command and is the one place that turns ratekeeper's
errors into a one-line message on stderr and an exit status (see ``ratekeeper.cli.commands``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TypeAlias

from ratekeeper.config import DEFAULT_URL
from ratekeeper.core.errors import ConfigError, InvalidLimitError, RatekeeperError
from ratekeeper.core.moved import renamed_message
from ratekeeper.core.version import VERSION

#: What ``add_subparsers`` returns: ``ratekeeper``'s commands, each added by a function below.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _store_options(parser: argparse.ArgumentParser, default: object) -> None:
    """``--config`` and ``--domain``, taken before the action or after it."""
    parser.add_argument(
        "--config",
        metavar="URL",
        default=default,
        help="configuration store, e.g. sqlite:///ratekeeper.db or postgresql://... "
        f"(default: $RATEKEEPER_CONFIG, else {DEFAULT_URL})",
    )
    parser.add_argument("--domain", default=default, help="namespace of the keys (default: none)")


def _seconds(text: str) -> float:
    """A positive number of seconds (``inf``: until stopped), for argparse."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be positive seconds, not {text!r}")
    return seconds


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratekeeper",
        description="Rate limiting for Python: the operator's commands for ratekeeper's "
        "library and decision engine.",
    )
    parser.add_argument("--version", action="version", version=f"ratekeeper {VERSION}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_demo, _rules, _config, _limits, _serve, _simulate):
        add(commands)
    return parser


def _demo(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo", help="show live decisions of every algorithm on the same bursty traffic"
    )
    demo.add_argument("--rate", default="20/second", help="the limit, e.g. '20/second'")
    demo.add_argument(
        "--seconds",
        type=_seconds,
        default=10.0,
        help="how long to run (default 10; inf: until Ctrl-C)",
    )
    demo.add_argument("--seed", type=int, default=7, help="seed of the synthetic traffic")


def _rules(commands: Commands) -> None:
    rules = commands.add_parser("rules", help="work with rule files")
    actions = rules.add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = actions.add_parser(
        "validate", help="check rule files (Envoy rate-limit YAML) as the engine loads them"
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="rule files or directories")


def _config(commands: Commands) -> None:
    """``config validate``, the old spelling of ``rules validate``: the same, with a note."""
    config = commands.add_parser("config", help="deprecated: use 'ratekeeper rules validate'")
    actions = config.add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = actions.add_parser("validate", help="the same as 'ratekeeper rules validate'")
    validate.add_argument("files", nargs="+", metavar="FILE", help="rule files or directories")


def _limits(commands: Commands) -> None:
    limits = commands.add_parser("limits", help="manage per-key overrides in the config store")
    _store_options(limits, None)
    limits.set_defaults(domain="")
    actions = limits.add_subparsers(dest="action", metavar="ACTION", required=True)
    # Given after the action, the options win; not given there, they leave the earlier ones.
    after = argparse.ArgumentParser(add_help=False)
    _store_options(after, argparse.SUPPRESS)
    set_ = actions.add_parser("set", parents=[after], help="set a key's limit")
    set_.add_argument("key", help="e.g. user:241531")
    set_.add_argument("--capacity", type=int, required=True, help="hits allowed per window")
    set_.add_argument(
        "--window", required=True, help="window length: seconds or a period such as 5m"
    )
    set_.add_argument(
        "--algorithm", help="default fixed_window (bucketed_window with --granularity)"
    )
    set_.add_argument("--granularity", type=float, help="bucketed_window's sub-window seconds")
    set_.add_argument("--burst", type=int, help="bucket size of token_bucket, gcra, leaky_*")
    set_.add_argument(
        "--sync", choices=("exact", "leased"), help="leased: grant from slices (default exact)"
    )
    get = actions.add_parser("get", parents=[after], help="print a key's override as JSON")
    get.add_argument("key")
    delete = actions.add_parser("delete", parents=[after], help="remove a key's override")
    delete.add_argument("key")
    list_ = actions.add_parser("list", parents=[after], help="list overrides (domain, key, JSON)")
    list_.add_argument("--prefix", default="", help="only keys starting with this")
    list_.add_argument("--json", action="store_true", help="one JSON object per line")
    import_ = actions.add_parser(
        "import",
        parents=[after],
        help='load {"key": {"time_window_sec": 1, "capacity": 5}, ...} from a file, all or nothing',
    )
    import_.add_argument("file", help="a JSON file, or - for stdin")


def _serve(commands: Commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the decision service (HTTP JSON API, Envoy's /json); needs ratekeeper[server]",
        description="Run the decision service. Every flag can also be given as a RATEKEEPER_* "
        "variable (e.g. RATEKEEPER_ADMIN_TOKEN); a flag wins.",
    )
    from ratekeeper.service.runtime.settings import add_arguments

    add_arguments(serve)


def _simulate(commands: Commands) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="replay a trace (a file or generated) through limits on a virtual clock and "
        "measure each against the exact sliding log",
        description="Replay a trace through limits on a virtual clock: every hit decided by "
        "the algorithm's own step, judged against an exact sliding log of the same amount and "
        "period. Plots (--out) need ratekeeper[plot].",
    )
    from ratekeeper.cli.simulate import add_arguments

    add_arguments(simulate)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "demo":
        from ratekeeper.cli import demo

        try:
            return demo.main(args.rate, args.seconds, args.seed)
        except InvalidLimitError as error:
            parser.error(str(error))
    if args.command in ("rules", "config"):
        from ratekeeper.cli import commands

        if args.command == "config":
            note = renamed_message("ratekeeper config validate", "ratekeeper rules validate")
            print(f"note: {note}", file=sys.stderr)
        return commands.validate(args.files)
    if args.command == "limits":
        from ratekeeper.cli import commands

        return commands.limits(args)
    if args.command == "simulate":
        from ratekeeper.cli.simulate import run

        return run(args)
    if args.command == "serve":
        from ratekeeper.service.runtime.serve import serve
        from ratekeeper.service.runtime.settings import Settings

        return serve(Settings.read(args))
    parser.print_help()
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ratekeeper`` with ``argv`` (default: the process's arguments); the exit status."""
    from ratekeeper.cli.commands import INTERRUPTED, INVALID, UNAVAILABLE, one_line

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _run(parser, args)
    except RatekeeperError as error:
        messages = error.errors if isinstance(error, ConfigError) else [str(error)]
        for message in messages:
            print(f"error: {one_line(message)}", file=sys.stderr)
        # What the input got wrong is also a ValueError (a rule file, an override, a key, a
        # limit); the rest is the environment's: a store that fails, a package not installed.
        return INVALID if isinstance(error, ValueError) else UNAVAILABLE
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # the reader of stdout went away, e.g. `ratekeeper limits list | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the final flush cannot fail again
        return INVALID


if __name__ == "__main__":
    sys.exit(main())
