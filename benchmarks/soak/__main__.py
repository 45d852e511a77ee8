"""``python -m benchmarks.soak``: run the soak and write its report (see the package)."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.redis_store.server import RedisServer
from benchmarks.soak import load, report
from benchmarks.soak.processes import Service
from benchmarks.soak.redis_stats import memory, scan_ttls
from benchmarks.trials import positive


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="Mixed traffic over many keys through ratekeeper serve on Redis, "
        "measured every minute; exits 1 if a Redis key has no TTL or RSS grows after warm-up.",
    )
    parse.add_argument("--minutes", type=positive(int), default=30, help="length (default 30)")
    parse.add_argument(
        "--keys", type=positive(int), default=1_000_000, help="distinct users (default 1000000)"
    )
    parse.add_argument(
        "--rate",
        type=positive(float),
        help="target requests a second (default: as fast as served)",
    )
    parse.add_argument("--workers", type=positive(int), default=2, help="serve workers (default 2)")
    parse.add_argument(
        "--connections", type=positive(int), default=64, help="wrk connections (default 64)"
    )
    parse.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="intervals of warm-up (default: a fifth, at least 1)",
    )
    parse.add_argument(
        "--interval", type=positive(int), default=60, help="seconds per sample (default 60)"
    )
    parse.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument for ratekeeper serve, repeatable "
        "(e.g. --serve-arg=--on-store-error=local)",
    )
    parse.add_argument(
        "--output",
        type=Path,
        default=Path("soak-report"),
        help="report directory (default soak-report)",
    )
    return parse


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed: run scripts/soak.sh, or apt-get install wrk", file=sys.stderr)
        return 2
    warmup = max(1, args.minutes // 5) if args.warmup is None else args.warmup
    if not 0 <= warmup < args.minutes:
        print(f"--warmup must be from 0 to {args.minutes - 1}, not {warmup}", file=sys.stderr)
        return 2
    command = "python -m benchmarks.soak " + shlex.join(sys.argv[1:] if argv is None else argv)
    settings: dict[str, object] = {key: str(value) for key, value in vars(args).items()}
    soak = report.Soak(settings, warmup, args.interval)
    offset = 0
    with tempfile.TemporaryDirectory(prefix="ratekeeper-soak-") as temporary:
        directory = Path(temporary)
        with RedisServer() as redis_server:
            service = Service(
                redis_server.url, directory, workers=args.workers, extra=args.serve_arg
            )
            with service:
                print(
                    f"soak: {args.minutes} x {args.interval} s, {args.keys:,} keys, "
                    f"{args.workers} worker(s) on {service.url}, Redis {redis_server.url}",
                    flush=True,
                )
                print("idle RSS MB: " + ", ".join(f"{n} {s:.0f}" for n, s in service.rss().items()))
                try:
                    for minute in range(1, args.minutes + 1):
                        interval = load.run(
                            service.url,
                            seconds=args.interval,
                            connections=args.connections,
                            keys=args.keys,
                            offset=offset,
                            rate=args.rate,
                        )
                        offset += interval.requests
                        used, keys = memory(redis_server.admin)
                        sample = report.Sample(minute, interval, service.rss(), used, keys)
                        soak.samples.append(sample)
                        print(report.progress(sample, args.interval), flush=True)
                except KeyboardInterrupt:
                    print("interrupted: reporting what was measured", file=sys.stderr)
                # At once, the service still up: the keys of the last minute are all there.
                soak.scan = scan_ttls(redis_server.admin)
        written = report.write(soak, args.output, command)
    print("\n".join(report.summary(soak)))
    print(f"report: {written}")
    return 1 if soak.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
