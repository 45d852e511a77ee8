"""Run the benchmarks and print the results as markdown: ``python -m benchmarks``.

Without options, the in-memory benchmarks; ``--redis`` runs only the Redis benchmarks (on a
redis-server they start on a free port and stop), ``--engine`` only the decision engine's,
``--simulate`` only the simulator's, ``--all`` runs those four. ``--service`` runs only the
decision service under load (``ratekeeper serve`` against a hello world on the same server
stack, driven by wrk and h2load; see ``benchmarks.service.suite``), ``--web`` only the web
integrations' overhead per request, ``--leases`` only the leased quotas (4 processes on one
hot key, exact against leased, and 3 ``ratekeeper serve`` behind nginx; see
``benchmarks.leases``; ``--all`` runs it too). ``--quick`` for a short smoke run, ``--output
FILE`` to also write the markdown; with ``--service``, ``--grpc`` runs only its gRPC rows
without options (the hello world, the descriptor on memory and on Redis, the refused one).

``--help`` needs nothing beyond ratekeeper; a run that needs a peer or an extra that is not
installed ends with one line naming the command that installs it (``scripts/bench.sh``
installs them all).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks import report
from benchmarks.report import Output
from ratekeeper import MissingExtraError

#: The modules the benchmarks import from an extra, by that extra: the peers measured against
#: and the frameworks and servers they run on (``bench``), Redis's client (``redis``), the
#: decision service's stack (``server``).
EXTRAS = {
    **dict.fromkeys(
        [
            "limits",
            "pyrate_limiter",
            "throttled",
            "matplotlib",
            "fastapi",
            "flask",
            "django",
            "slowapi",
            "flask_limiter",
            "django_ratelimit",
            "grpclib",
            "zttp",
            "hypercorn",
        ],
        "bench",
    ),
    "redis": "redis",
    **dict.fromkeys(
        ["starlette", "uvicorn", "httpx", "grpc", "grpc_health", "google", "prometheus_client"],
        "server",
    ),
}
PROG = "python -m benchmarks"


def missing(error: ModuleNotFoundError) -> str | None:
    """The line that says which extra brings the module ``error`` did not find, or None when
    no extra does (then it is a mistake, to be shown whole)."""
    module = (error.name or "").partition(".")[0]
    if module not in EXTRAS:
        return None
    extra = EXTRAS[module]
    return (
        f"{PROG}: {module} is not installed; install it with: pip install -e '.[{extra}]' "
        "(or run: bash scripts/bench.sh)"
    )


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except ModuleNotFoundError as error:
        line = missing(error)
        if line is None:
            raise
    except MissingExtraError as error:
        line = f"{PROG}: {error} (or run: bash scripts/bench.sh)"
    print(line, file=sys.stderr)
    return 2


def run(argv: list[str] | None = None) -> int:
    """Parse the options, run the benchmarks they name and print their markdown."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", type=Path, help="also write the markdown results here")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--redis",
        action="store_true",
        help="run only the Redis benchmarks (on a redis-server they start and stop)",
    )
    which.add_argument(
        "--engine", action="store_true", help="run only the decision engine's benchmarks"
    )
    which.add_argument(
        "--simulate", action="store_true", help="run only the simulator's benchmarks"
    )
    which.add_argument(
        "--service",
        action="store_true",
        help="run only the decision service under load (wrk, h2load; a redis-server)",
    )
    which.add_argument(
        "--all",
        action="store_true",
        help="run the in-memory, Redis, engine, simulator and leased-quota ones",
    )
    which.add_argument("--web", action="store_true", help="run only the web integrations' ones")
    which.add_argument(
        "--leases",
        action="store_true",
        help="run only the leased quotas' (4 processes, 3 servers behind nginx; a redis-server)",
    )
    parser.add_argument(
        "--grpc",
        action="store_true",
        help="with --service: only the gRPC rows without options (hello world, descriptor on "
        "memory and on Redis, refused descriptor)",
    )
    args = parser.parse_args(argv)
    if args.grpc and not args.service:
        parser.error("--grpc goes with --service")

    out = Output()
    try:
        if args.service:
            from benchmarks.service import suite as service_suite

            service_suite.run(
                out,
                service_suite.SERVICE_QUICK if args.quick else service_suite.ServiceSizes(),
                service_suite.GRPC_ROWS if args.grpc else service_suite.ROWS,
            )
        elif args.redis:
            out.emit("# ratekeeper benchmarks: Redis", "", *report.machine())
        elif args.engine:
            out.emit("# ratekeeper benchmarks: decision engine", "", *report.machine())
        elif args.simulate:
            out.emit("# ratekeeper benchmarks: simulator", "", *report.machine())
        elif args.leases:
            out.emit("# ratekeeper benchmarks: leased quotas", "", *report.machine())
        elif args.web:
            from benchmarks.web import suite as web_suite

            out.emit("# ratekeeper benchmarks: web integrations", "", *report.machine())
            web_suite.run(out, web_suite.WEB_QUICK if args.quick else web_suite.WebSizes())
        else:
            from benchmarks.memory.suite import QUICK, Sizes, in_memory

            in_memory(out, QUICK if args.quick else Sizes())
        if args.redis or args.all:
            from benchmarks.redis_store import suite as redis_suite

            redis_suite.run(
                out, redis_suite.REDIS_QUICK if args.quick else redis_suite.RedisSizes(), args.redis
            )
        if args.engine or args.all:
            from benchmarks.engine import suite as engine_suite

            engine_suite.run(
                out, engine_suite.ENGINE_QUICK if args.quick else engine_suite.EngineSizes()
            )
        if args.simulate or args.all:
            from benchmarks.simulate import suite as simulate_suite

            simulate_suite.run(
                out,
                simulate_suite.SIMULATE_QUICK if args.quick else simulate_suite.SimulateSizes(),
            )
        if args.leases or args.all:
            from benchmarks.leases import suite as leases_suite

            leases_suite.run(
                out,
                leases_suite.LEASES_QUICK if args.quick else leases_suite.LeaseSizes(),
                args.leases,
            )
        elapsed = time.perf_counter() - out.started
        out.emit("", f"Total runtime: {elapsed:.0f} s. Load average at end: {report.load()}.")
    finally:
        if args.output is not None:
            args.output.write_text("\n".join(out.lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
