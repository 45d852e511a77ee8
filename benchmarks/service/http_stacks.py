"""HTTP stacks side by side, per core: uvicorn, which ``ratekeeper serve`` runs, against granian.

``python -m benchmarks.service.http_stacks [--seconds 8] [--rounds 3] [--output FILE]`` runs
four servers pinned to CPU 0, each loaded alone in turn by wrk on CPU 1 (one thread, 64
keep-alive connections, ``POST /v1/check``), round by round, in reverse order every other
round; each keeps its best round:

- the uvicorn hello world (``benchmarks.service.baseline``: a raw ASGI app with uvicorn's
  options from ``ratekeeper serve``, its lifespan running a gRPC server);
- the granian hello world: the same app, on granian's ASGI interface with uvloop and one
  worker (``--serve hello``, which this module execs as granian);
- ``ratekeeper serve`` on uvicorn, a key and its limit on the memory store;
- ratekeeper's app on granian (``--serve ratekeeper``): the factory ``ratekeeper serve
  --workers N`` gives uvicorn (``app.from_environment``), from the same settings.

The servers' CPU is their process tree's (granian runs its worker in a process of its own).
Every answer must be a 200, and each key's count after its round (``/v1/peek``) the requests
wrk completed; else the run stops. granian is the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from benchmarks import report
from benchmarks.report import Output, table
from benchmarks.service import load
from benchmarks.service.baseline import application
from benchmarks.service.servers import Server, cpus, tree_cpu_seconds
from benchmarks.trials import positive

#: The servers, in the order of the first round.
STACKS = ("uvicorn hello", "granian hello", "ratekeeper on uvicorn", "ratekeeper on granian")
#: The limit of the keys checked: never reached.
AMOUNT = 1_000_000_000


@dataclass(frozen=True)
class Timed:
    """One stack's best round: requests a second, and its server's CPU a request (µs)."""

    rate: float
    cpu_us: float


def hello() -> object:
    """The hello world for granian (its factory): ``baseline``'s app, its gRPC server on
    ``$BENCH_GRPC``."""
    return application(os.environ["BENCH_GRPC"], lambda: "granian")


def serve(kind: str, http: str, grpc: str) -> None:
    """Become granian serving ``kind`` (``hello`` or ``ratekeeper``) on ``http``; the gRPC
    server of its lifespan on ``grpc``."""
    host, _, port = http.rpartition(":")
    if kind == "hello":
        target = "benchmarks.service.http_stacks:hello"
        os.environ["BENCH_GRPC"] = grpc
    else:
        target = "ratekeeper.service.runtime.app:from_environment"
        os.environ.update(RATEKEEPER_HTTP=http, RATEKEEPER_GRPC=grpc, RATEKEEPER_SERVER="uvicorn")
    granian = str(Path(sys.executable).with_name("granian"))
    os.execv(granian, [
        granian, "--interface", "asgi", "--loop", "uvloop", "--workers", "1",
        "--host", host, "--port", port, "--log-level", "warning", "--no-ws",
        "--factory", target,
    ])  # fmt: skip


def command(stack: str) -> list[str]:
    """The command of ``stack``'s server (``Server`` adds ``--http`` and ``--grpc``)."""
    python = [sys.executable, "-m"]
    return {
        "uvicorn hello": [*python, "benchmarks.service.baseline"],
        "granian hello": [*python, "benchmarks.service.http_stacks", "--serve", "hello"],
        "ratekeeper on uvicorn": [*python, "ratekeeper.cli", "serve", "--store", "memory://"],
        "ratekeeper on granian": [
            *python, "benchmarks.service.http_stacks", "--serve", "ratekeeper",
        ],
    }[stack]  # fmt: skip


def rows(best: dict[str, Timed]) -> list[list[str]]:
    """The table's rows: each stack's requests/s and CPU, and its ratios to each hello world
    (by throughput, and by CPU: what the throughput ratio would be on an idle core)."""
    out = []
    for stack, timed in best.items():
        ratios = []
        for hello_world in ("uvicorn hello", "granian hello"):
            base = best[hello_world]
            ratios += [
                report.ratio(timed.rate / base.rate),
                report.ratio(base.cpu_us / timed.cpu_us),
            ]
        out.append([stack, report.rate(timed.rate), f"{timed.cpu_us:.1f}", *ratios])
    return out


def run(args: argparse.Namespace, out: Output) -> dict[str, Timed]:
    """Each stack's best of ``args.rounds`` rounds."""
    server_cpu, load_cpu = cpus()
    best: dict[str, Timed] = {}
    with (
        tempfile.TemporaryDirectory(prefix="ratekeeper-bench-http-") as name,
        ExitStack() as running,
    ):
        servers = {
            stack: running.enter_context(
                Server(stack.replace(" ", "-"), command(stack), Path(name), server_cpu)
            )
            for stack in STACKS
        }
        for round_number in range(args.rounds):
            order = STACKS if round_number % 2 == 0 else STACKS[::-1]
            for stack in order:
                timed = measure(servers[stack], f"{round_number}-{stack}", args, load_cpu)
                out.progress(f"{stack}, round {round_number + 1}: {timed.rate:,.0f}/s")
                if stack not in best or timed.rate > best[stack].rate:
                    best[stack] = timed
    return {stack: best[stack] for stack in STACKS}


def measure(server: Server, key: str, args: argparse.Namespace, load_cpu: str | None) -> Timed:
    """One round of wrk against ``server`` on a fresh ``key``, checked: every answer a 200,
    and with ratekeeper the key counted once for each."""
    check = {"key": f"bench-{key}-{time.time_ns()}", "limit": f"{AMOUNT}/day"}
    url = f"{server.url}/v1/check"
    body = json.dumps(check).encode()
    load.wrk(url, body, connections=args.connections, seconds=1, cpus=load_cpu)  # warm-up
    counted_before = _counted(server, check) if server.name.startswith("ratekeeper") else None
    started = tree_cpu_seconds(server.pid)
    timed = load.wrk(url, body, connections=args.connections, seconds=args.seconds, cpus=load_cpu)
    used = tree_cpu_seconds(server.pid) - started
    if timed.failures:
        raise load.LoadError(f"{server.name}: {timed.failures} failures ({timed.detail})")
    if counted_before is not None:
        counted = _counted(server, check) - counted_before
        # the requests under way when wrk stopped may be decided: at most one a connection
        if not 0 <= counted - timed.requests <= args.connections:
            raise load.LoadError(f"{server.name}: {counted} counted, {timed.requests} sent")
    return Timed(timed.rate, used / timed.requests * 1e6)


def _counted(server: Server, check: dict[str, str]) -> int:
    status, answer = server.post("/v1/peek", check)
    if status != 200:
        raise load.LoadError(f"{server.name}: /v1/peek answered {status}: {answer}")
    return AMOUNT - int(answer["statuses"][0]["remaining"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.service.http_stacks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=positive(float), default=8.0, help="timed, each round")
    parser.add_argument("--rounds", type=positive(int), default=3)
    parser.add_argument("--connections", type=positive(int), default=64)
    parser.add_argument("--output", type=Path, help="also write the markdown here")
    parser.add_argument("--serve", choices=("hello", "ratekeeper"), help=argparse.SUPPRESS)
    parser.add_argument("--http", help=argparse.SUPPRESS)
    parser.add_argument("--grpc", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.http, args.grpc)
    if not Path(sys.executable).with_name("granian").exists():
        print("granian is not installed: pip install granian (the bench extra)", file=sys.stderr)
        return 2
    tools = load.missing()
    if tools:
        print(f"missing: {', '.join(tools)} (apt-get install {' '.join(tools)})", file=sys.stderr)
        return 2
    out = Output()
    out.emit("# ratekeeper benchmarks: HTTP stacks per core", "", *report.machine(), "")
    try:
        best = run(args, out)
    except load.LoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    headers = [
        "server", "requests/s", "CPU µs / request", "÷ uvicorn hello", "by CPU",
        "÷ granian hello", "by CPU",
    ]  # fmt: skip
    out.emit(*table(headers, rows(best)), "")
    out.finish(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
