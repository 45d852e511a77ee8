"""``ratekeeper simulate``: replay a trace file or a generated trace through limits.

Prints the table of measures on stdout; bad lines of the trace on stderr, each with its file
and line number; a progress line on stderr when stderr is a terminal (or with ``--progress``).
With ``--out DIR``, writes ``results.json`` (summaries; the time series and every event's
decisions too with ``--per-event``) and the plots there, all or nothing. With ``--instances
N`` or any ``--lease-*`` option, each limit is also replayed leased through N simulated
instances sharing one store (``ratekeeper.simulate.leases``), and the report compares it with
the limit exact. Exit status 0, or 1 (with a line ``error: ...`` on stderr, and nothing
written) when the trace cannot be read, holds no event, or (with ``--strict``) has a bad
line, when an argument is invalid, or when ``--out`` is not a directory that can be written;
3 (the same) when the plots are asked for and matplotlib is not installed, which is checked
before the trace is replayed.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.errors import TraceError
from ratekeeper.core.limits import Limit
from ratekeeper.core.registry import spec
from ratekeeper.core.wording import many
from ratekeeper.simulate import generators as traces
from ratekeeper.simulate.leases import LeaseOptions
from ratekeeper.simulate.loaders import FORMATS, NGINX_KEYS, Loaded, read_trace
from ratekeeper.simulate.simulation import Simulation, parse_limit, simulate
from ratekeeper.simulate.trace import Trace

#: The generators ``--generate`` names.
GENERATORS: dict[str, Callable[..., Trace]] = {
    "poisson": traces.poisson,
    "bursts": traces.bursts,
    "window-edge": traces.window_edge,
    "diurnal": traces.diurnal,
    "zipf": traces.zipf,
    "retry-storm": traces.retry_storm,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ratekeeper simulate``'s arguments: the trace, the limits, how the trace is read, what
    is written, the leased quotas."""
    _source_arguments(parser)
    _output_arguments(parser)
    _lease_arguments(parser)
    parser.add_argument(
        "--progress",
        action="store_true",
        help="show progress on stderr even when it is not a terminal",
    )


def _source_arguments(parser: argparse.ArgumentParser) -> None:
    """The trace (a file or ``--generate``), the limits and how the file is read."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("trace", nargs="?", help="a trace file: .csv, .jsonl or an nginx .log")
    source.add_argument(
        "--generate",
        metavar="NAME[:ARG=VALUE,...]",
        help="a generated trace instead of a file, e.g. 'zipf:keys=1000,rate=500,seconds=60' or "
        f"just 'window-edge'; one of {', '.join(GENERATORS)} (their arguments, each with a "
        "default, are those of ratekeeper.simulate.generators)",
    )
    parser.add_argument(
        "--limit",
        action="append",
        metavar="ALGORITHM:RATE[:ARG=VALUE,...]",
        help="a limit to simulate, e.g. 'sliding_counter:100/minute' or "
        "'token_bucket:100/minute:burst=20'; repeat for several (default: every algorithm "
        "at --rate)",
    )
    parser.add_argument(
        "--rate", default="100/minute", help="the rate of the default limits (default 100/minute)"
    )
    parser.add_argument("--format", choices=FORMATS, help="the trace's format (default: by suffix)")
    parser.add_argument(
        "--key",
        default="remote_addr",
        choices=NGINX_KEYS,
        help="the nginx log field that keys a request (default remote_addr, the client address)",
    )
    parser.add_argument("--strict", action="store_true", help="stop at the first bad line")


def _output_arguments(parser: argparse.ArgumentParser) -> None:
    """What is written with ``--out``, and the width of the time series' bins."""
    parser.add_argument("--out", metavar="DIR", help="write results.json and the plots here")
    parser.add_argument("--no-plots", action="store_true", help="with --out, only the JSON")
    parser.add_argument(
        "--per-event",
        action="store_true",
        help="with --out, results.json also holds the time series and every event's decision "
        "(large for a long trace; default: summaries only)",
    )
    parser.add_argument(
        "--image", choices=("svg", "png"), default="svg", help="the plots' format (default svg)"
    )
    parser.add_argument(
        "--width",
        type=float,
        help="seconds per bin of the time series (default: a readable width, a few dozen bins)",
    )


def _lease_arguments(parser: argparse.ArgumentParser) -> None:
    """The leased quotas' group: any of its options replays each limit leased too."""
    leases = parser.add_argument_group(
        "leased quotas",
        "replay each limit leased (sync: leased) through N instances sharing one store, events "
        "dealt round robin, and compare with the limit exact on one store; any of these turns "
        "it on (default limits: every leasable algorithm at --rate)",
    )
    leases.add_argument(
        "--instances", type=int, metavar="N", help="simulated instances (default 1)"
    )
    leases.add_argument(
        "--lease-ttl",
        type=float,
        metavar="SECONDS",
        help="seconds a slice may be granted from; the sweep runs as often (default 1)",
    )
    leases.add_argument(
        "--lease-horizon",
        type=float,
        metavar="SECONDS",
        help="seconds of an instance's own demand a slice is sized for (default 0.05)",
    )
    leases.add_argument(
        "--lease-share",
        type=float,
        metavar="SHARE",
        help="the largest slice, as a share of the limit's capacity (default 0.1)",
    )


def generated(spec: str) -> Trace:
    """The trace ``--generate`` names: ``name[:arg=value,...]``."""
    name, _, rest = spec.partition(":")
    generator = GENERATORS.get(name)
    if generator is None:
        raise TraceError(f"unknown generator {name!r}; expected one of {', '.join(GENERATORS)}")
    parameters = inspect.signature(generator).parameters
    arguments: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, equals, value = item.partition("=")
        if not equals or key not in parameters:
            known = ", ".join(parameters)
            raise TraceError(f"{name} takes {known}; not {item!r}")
        text = isinstance(parameters[key].default, str)  # a key or a policy, not a number
        arguments[key] = value if text else _number(value)
    try:
        return generator(**arguments)
    except TypeError as error:
        raise TraceError(f"{name}: {error}") from None


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def unwritable(directory: str) -> str | None:
    """Why ``directory`` cannot take the report (it, or the nearest of its parents that exists,
    is not a directory ratekeeper may write in); None when it can."""
    path = Path(directory).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        return f"{path} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable"
    return None


class Progress:
    """A progress line on ``stream``: events done, their rate, and the share when the total
    is known; redrawn at most ten times a second."""

    def __init__(self, stream: TextIO, total: int | None) -> None:
        self.stream = stream
        self.total = total
        self.started = time.monotonic()
        self.shown = 0.0

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.shown < 0.1 and done != self.total:
            return
        self.shown = now
        rate = done / max(now - self.started, 1e-9)
        if self.total:
            filled = int(30 * done / self.total)
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {done / self.total:4.0%} "
        else:
            bar = ""
        print(f"\r{bar}{many(done, 'event')} ({rate:,.0f}/s)", end="", file=self.stream, flush=True)

    def end(self) -> None:
        print(file=self.stream, flush=True)


def lease_options(args: argparse.Namespace) -> LeaseOptions | None:
    """The lease options the flags give, or None when none is given."""
    given = {
        name: value
        for name, value in (
            ("ttl", args.lease_ttl),
            ("horizon", args.lease_horizon),
            ("share", args.lease_share),
        )
        if value is not None
    }
    if not given and args.instances is None:
        return None
    return LeaseOptions(**given)


def run(args: argparse.Namespace) -> int:
    """Run ``ratekeeper simulate`` with parsed ``args``; the exit status."""
    from ratekeeper.simulate import report

    leases = lease_options(args)
    limits = chosen_limits(args, leases)
    if args.out and (problem := unwritable(args.out)) is not None:
        raise TraceError(f"--out {args.out}: {problem}")
    if args.out and not args.no_plots:
        from ratekeeper.simulate import plots

        plots.require()  # before the replay, which may take minutes
    loaded: Loaded | None = None
    source: Trace | Loaded
    if args.generate:
        source = generated(args.generate)
    else:
        source = loaded = read_trace(args.trace, args.format, key=args.key, strict=args.strict)
    result = _simulate(args, source, limits, leases)
    if loaded is not None and loaded.bad_lines:
        _warn_bad_lines(loaded, sys.stderr)
    if not result.events:
        raise TraceError(f"{args.trace or args.generate}: no events to simulate")
    print(report.summary(result), file=sys.stdout)
    if args.out:
        _write(args, result, loaded)
    return 0


def chosen_limits(args: argparse.Namespace, leases: LeaseOptions | None) -> list[Limit]:
    """The limits of ``--limit``; by default every algorithm at ``--rate`` (every one that can
    lease, with leases), but ``concurrency``, which limits no rate."""
    if args.limit:
        return [parse_limit(text) for text in args.limit]
    base = parse_limit(args.rate)
    return [
        Limit(base.amount, base.period, algorithm)
        for algorithm in Algorithm
        if algorithm is not Algorithm.CONCURRENCY
        and (leases is None or not spec(algorithm).no_lease)
    ]


def _simulate(
    args: argparse.Namespace,
    source: Trace | Loaded,
    limits: list[Limit],
    leases: LeaseOptions | None,
) -> Simulation:
    """Replay ``source`` as ``args`` ask, with a progress line on a terminal."""
    err = sys.stderr
    progress = None
    if args.progress or err.isatty():
        progress = Progress(err, len(source) if isinstance(source, Trace) else None)
    try:
        return simulate(
            source,
            limits,
            width=args.width,
            record=bool(args.out and args.per_event),
            progress=progress,
            instances=1 if args.instances is None else args.instances,
            leases=leases,
        )
    except OSError as error:
        raise TraceError(f"{args.trace}: {error.strerror}") from None
    finally:
        if progress is not None:
            progress.end()


def _warn_bad_lines(loaded: Loaded, err: TextIO) -> None:
    """Each bad line of the trace kept for the report, then how many were skipped."""
    for bad in loaded.bad:
        print(f"{loaded.name}:{bad.number}: {bad.reason}: {bad.text!r}", file=err)
    print(
        f"warning: {loaded.bad_lines:,} of {many(loaded.lines, 'line')} could not be read "
        f"and {'was' if loaded.bad_lines == 1 else 'were'} skipped"
        + (f" (the first {len(loaded.bad)} shown)" if loaded.bad else ""),
        file=err,
    )


def _write(args: argparse.Namespace, result: Simulation, loaded: Loaded | None) -> None:
    """``results.json`` and the plots in ``--out``, with what was read of a trace file."""
    from ratekeeper.simulate import report

    extra: dict[str, Any] = {}
    if loaded is not None:
        extra["input"] = {
            "file": loaded.name,
            "lines": loaded.lines,
            "bad_lines": loaded.bad_lines,
            "bad": [
                {"line": bad.number, "reason": bad.reason, "text": bad.text} for bad in loaded.bad
            ],
        }
    try:
        paths = report.write(
            result,
            args.out,
            plots=not args.no_plots,
            extra=extra,
            image=args.image,
            per_event=args.per_event,
        )
    except OSError as error:
        raise TraceError(f"--out {args.out}: {error.strerror or error}") from None
    print(f"wrote {', '.join(str(path) for path in paths)}", file=sys.stderr)
