"""The decision service under load: ``python -m benchmarks --service``.

In one run, the real ``ratekeeper serve`` process (on the memory store, and on a Redis store
whose redis-server the benchmark starts on a free loopback port) against a hello world on the
same server stack (``benchmarks.service_baseline``: a raw ASGI app on uvicorn with the options
of ``ratekeeper serve``, and a ``grpc.aio`` ``ShouldRateLimit`` that decides nothing, on the
same event loop):

- HTTP ``POST /v1/check`` under wrk: a key with its limit, and a domain with one descriptor
  matched by a rule, on each store; and a key already over its limit (every answer a 429);
- gRPC ``envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`` under h2load, one
  descriptor matched by a rule, on each store; and one already over its limit.

A Starlette app of one route answering the same hello is measured too, for reference. Every
row runs ``connections`` connections for ``seconds`` after a warm-up, the rows taking turns
round by round (in reverse order every other round), each keeping its best round. The ratio is
a row's requests per second over its surface's hello world's; the CPU ratio is the hello
world's server CPU time per request over the row's, which other work on the machine disturbs
less (it cannot starve the load generator into flattering the rows).

No row can time the wrong path. Each measurement counts a fresh key. Before it, one request
through a real client (httpx, grpcio) must get the answer meant (allowed, not degraded; or
refused), and nghttp must read ``grpc-status: 0`` in the trailers of the very request h2load
sends. During it, every answer must be 2xx (a 429 on the refusing rows) with no socket
error. After it, the key's count (read with ``POST /v1/peek``) must hold at least every
request the load generator completed: an error answered instead of a decision counts nothing.
Anything else stops the run with an error.

With two or more CPUs and ``taskset``, the servers run on CPU 0, the load generator and
redis-server on CPU 1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import httpx

from benchmarks import load, report
from benchmarks.load import Load, LoadError
from benchmarks.redis_server import RedisServer, free_port
from benchmarks.report import Output
from benchmarks.scenarios import BenchmarkError
from ratekeeper.service.proto import rls_pb2

#: The target: a row's requests per second over its surface's hello world's.
TARGET = 0.6
#: The allow path's limit (a day, fixed window): no run can exhaust it.
AMOUNT = 1_000_000_000
RULES = f"""
domain: bench
descriptors:
  - key: client
    rate_limit: {{unit: day, requests_per_unit: {AMOUNT}}}
  - key: blocked
    rate_limit: {{unit: day, requests_per_unit: 1}}
"""
ROOT = Path(__file__).resolve().parent.parent
GRPC_METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
BASELINE, MEMORY, REDIS = "hello world", "memory", "redis"
STARLETTE, STARLETTE_PATH = "hello (Starlette)", "/starlette"
HEADERS = [
    "surface", "request", "store", "requests/s", "p50 ms", "p99 ms", "/ hello world",
    f"≥ {TARGET:g}x", "CPU µs / request", "CPU ratio", "each round (requests/s)",
]  # fmt: skip


@dataclass(frozen=True)
class ServiceSizes:
    """How long a service run takes: ``--quick`` shrinks it."""

    seconds: float = 5.0  # one timed measurement
    warmup: float = 2.0  # before each measurement, on the same key
    rounds: int = 3
    connections: int = 64


SERVICE_QUICK = ServiceSizes(seconds=2.0, warmup=1.0, rounds=1)


@dataclass(frozen=True)
class Row:
    """One line of the table: a request shape on one surface and one server."""

    surface: str  # "HTTP" or "gRPC"
    shape: str  # "hello", "hello (Starlette)", "key", "descriptor", "refused key", ...
    server: str  # BASELINE, MEMORY or REDIS

    @property
    def refused(self) -> bool:
        return self.shape.startswith("refused")

    @property
    def path(self) -> str:
        """The HTTP path it posts to."""
        return STARLETTE_PATH if self.shape == STARLETTE else "/v1/check"

    @property
    def label(self) -> str:
        return f"{self.surface} {self.shape} ({self.server})"


ROWS = (
    Row("HTTP", "hello", BASELINE),
    Row("HTTP", STARLETTE, BASELINE),
    Row("HTTP", "key", MEMORY),
    Row("HTTP", "descriptor", MEMORY),
    Row("HTTP", "key", REDIS),
    Row("HTTP", "descriptor", REDIS),
    Row("HTTP", "refused key", MEMORY),
    Row("gRPC", "hello", BASELINE),
    Row("gRPC", "descriptor", MEMORY),
    Row("gRPC", "descriptor", REDIS),
    Row("gRPC", "refused descriptor", MEMORY),
)

#: What each request shape sends, as the table says it.
SHAPES = {
    ("HTTP", "hello"): 'any body; the answer `{"message":"hello"}`',
    ("HTTP", STARLETTE): "the same, through a Starlette app of one route (`Request.body()`, "
    "`Response`), for reference: the share of the framework alone",
    ("HTTP", "key"): f'`{{"key": K, "limit": "{AMOUNT}/day"}}`',
    ("HTTP", "descriptor"): '`{"domain": "bench", "descriptors": [{"entries": [{"key": '
    '"client", "value": V}]}]}`, matched by a rule of 1,000,000,000 a day',
    ("HTTP", "refused key"): '`{"key": K, "limit": "1/day"}`, K already counted once',
    ("gRPC", "hello"): "the same `RateLimitRequest`; the answer a new `RateLimitResponse(OK)`",
    ("gRPC", "descriptor"): "`RateLimitRequest(domain='bench', descriptors=[[('client', V)]])`",
    ("gRPC", "refused descriptor"): "`[('blocked', V)]`, a rule of 1 a day, V counted once",
}


def cpus() -> tuple[str | None, str | None]:
    """The CPUs of the servers and of the load generator, or None (not pinned)."""
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return None, None
    return "0", "1"


class Server:
    """A server process of the benchmark's (``ratekeeper serve`` or the hello world) on free
    loopback ports, for the length of a ``with`` block; stopped by its pid."""

    def __init__(self, name: str, command: list[str], directory: Path, cpu: str | None) -> None:
        self.name = name
        self.http_port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.grpc_address = f"127.0.0.1:{self.grpc_port}"
        self.grpc_url = f"http://{self.grpc_address}"
        addresses = ["--http", f"127.0.0.1:{self.http_port}", "--grpc", self.grpc_address]
        self.log = directory / f"{name}.log"
        pinned = ["taskset", "-c", cpu] if cpu else []
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RATEKEEPER_")}
        clean["PYTHONPATH"] = str(ROOT)  # for benchmarks.service_baseline, run elsewhere
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [*pinned, *command, *addresses],
                cwd=directory,
                env=clean,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.channel = grpc.insecure_channel(self.grpc_address)
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def __enter__(self) -> Server:
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchmarkError(f"{self.name} exited:\n{self.log.read_text()[-2000:]}")
            try:
                if self.client.get("/readyz", timeout=1).status_code == 200:
                    grpc.channel_ready_future(self.channel).result(timeout=10)
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise BenchmarkError(f"{self.name} was not ready in 60 s:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM by pid (SIGKILL if it lingers), and reap it."""
        self.client.close()
        self.channel.close()
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        answer = self.client.post(path, json=body)
        return answer.status_code, answer.json()

    def should_rate_limit(self, request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        call = self.channel.unary_unary(
            GRPC_METHOD,
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString,
        )
        response: rls_pb2.RateLimitResponse = call(request, timeout=10)
        return response


@dataclass(frozen=True)
class Result:
    """One measurement: the load generator's view, and the server's CPU seconds a request."""

    load: Load
    cpu: float


@dataclass
class Measured:
    """A row's measurements, one a round."""

    results: list[Result] = field(default_factory=list)

    @property
    def best(self) -> Result:
        return max(self.results, key=lambda one: one.load.rate)

    @property
    def cpu(self) -> float:
        """The least CPU time a request took, over the rounds."""
        return min(one.cpu for one in self.results)


class Measurement:
    """One row's run on a fresh key: checked before, loaded, checked after (see the module)."""

    def __init__(self, row: Row, server: Server, sizes: ServiceSizes, tag: str) -> None:
        self.row, self.server, self.sizes = row, server, sizes
        self.value = f"{tag}-{time.time_ns()}"
        self.key = f"bench:{self.value}"

    # What is sent.

    def http_body(self) -> dict[str, Any]:
        shape = self.row.shape
        if shape in ("key", "hello", STARLETTE):
            return {"key": self.key, "limit": f"{AMOUNT}/day"}
        if shape == "refused key":
            return {"key": self.key, "limit": "1/day"}
        return {"domain": "bench", "descriptors": [{"entries": self._entries()}]}

    def _entries(self) -> list[dict[str, str]]:
        name = "blocked" if self.row.refused else "client"
        return [{"key": name, "value": self.value}]

    def grpc_request(self) -> rls_pb2.RateLimitRequest:
        request = rls_pb2.RateLimitRequest(domain="bench")
        descriptor = request.descriptors.add()
        for entry in self._entries():
            descriptor.entries.add(key=entry["key"], value=entry["value"])
        return request

    # The checks.

    def _check_http(self) -> None:
        server, body = self.server, self.http_body()
        if self.row.server == BASELINE:
            status, answer = server.post(self.row.path, body)
            if status != 200 or answer != {"message": "hello"}:
                raise BenchmarkError(f"{self.row.label}: the hello world answered {answer}")
            return
        if self.row.refused:
            server.post("/v1/check", body)  # the one hit the limit allows
        status, answer = server.post("/v1/check", body)
        meant = (429, False) if self.row.refused else (200, True)
        if (status, answer.get("allowed")) != meant or answer.get("degraded"):
            raise BenchmarkError(f"{self.row.label}: a check answered {status} {answer}")

    def _check_grpc(self) -> bytes:
        server, request = self.server, self.grpc_request()
        if self.row.refused:
            server.should_rate_limit(request)  # the one hit the limit allows
        response = server.should_rate_limit(request)
        Code = rls_pb2.RateLimitResponse
        meant = Code.OVER_LIMIT if self.row.refused else Code.OK
        if response.overall_code != meant:
            raise BenchmarkError(f"{self.row.label}: ShouldRateLimit answered {response}")
        data = load.grpc_frame(request.SerializeToString())
        status = load.grpc_status(server.grpc_url + GRPC_METHOD, data)
        if status != "0":
            raise BenchmarkError(
                f"{self.row.label}: h2load's request is answered grpc-status {status}, not 0"
            )
        return data

    def _counted(self) -> int:
        """How many hits the key's limit has counted, read with a peek."""
        body = self.http_body()
        status, answer = self.server.post("/v1/peek", body)
        if status != 200:
            raise BenchmarkError(f"{self.row.label}: a peek answered {status} {answer}")
        return AMOUNT - int(answer["statuses"][0]["remaining"])

    # The run.

    def run(self, load_cpu: str | None) -> Result:
        """Check, warm up, time, check again: the timed run's load and the server's CPU time
        per request during it."""
        sizes, row = self.sizes, self.row
        started = datetime.now(UTC).date()
        generate: Callable[[float], Load]
        if row.surface == "HTTP":
            self._check_http()
            url, raw = self.server.url + row.path, json.dumps(self.http_body()).encode()
            expect_ok = not row.refused

            def generate(seconds: float) -> Load:
                return load.wrk(
                    url, raw, connections=sizes.connections, seconds=seconds, cpus=load_cpu,
                    expect_ok=expect_ok,
                )  # fmt: skip
        else:
            url, data = self.server.grpc_url + GRPC_METHOD, self._check_grpc()

            def generate(seconds: float) -> Load:
                return load.h2load(
                    url, data, connections=sizes.connections, seconds=seconds, cpus=load_cpu
                )

        warm = generate(sizes.warmup)
        before = cpu_seconds(self.server.process.pid)
        timed = generate(sizes.seconds)
        cpu = cpu_seconds(self.server.process.pid) - before
        for one in (warm, timed):
            if one.failures:
                raise BenchmarkError(
                    f"{row.label}: {one.failures} of {one.requests} answers were not "
                    f"{'refusals' if row.refused else 'successes'} {one.detail}".rstrip()
                )
        if row.server != BASELINE and not row.refused:
            counted, meant = self._counted(), warm.requests + timed.requests
            if counted < meant and datetime.now(UTC).date() == started:
                raise BenchmarkError(
                    f"{row.label}: the key counted {counted:,} hits for {meant:,} answers: "
                    "some answers were not decisions"
                )
        return Result(timed, cpu / timed.requests)


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, all threads) process ``pid`` has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stack(baseline_log: Path) -> str:
    for line in baseline_log.read_text().splitlines():
        if line.startswith("ready "):
            _, loop, protocol = line.split()
            return f"event loop {loop}, HTTP protocol {protocol}"
    return "unknown"


def _versions() -> str:
    names = ("uvicorn", "uvloop", "httptools", "starlette", "grpcio", "protobuf", "redis")
    found = []
    for name in names:
        try:
            found.append(f"{name} {version(name)}")
        except Exception:
            found.append(f"{name} not installed")
    return ", ".join(found)


def _tool_versions() -> str:
    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    h2 = subprocess.run(["h2load", "--version"], capture_output=True, text=True, check=False)
    first = (wrk.stdout or wrk.stderr).split(" Copyright")[0].strip()
    return f"{first}; {h2.stdout.strip()}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def run(out: Output, sizes: ServiceSizes) -> None:
    """Run every row, round by round, and print the table."""
    absent = load.missing()
    if absent:
        raise BenchmarkError(
            f"missing load generators: apt-get install {' '.join(absent)} "
            "(bash scripts/bench.sh --service installs them)"
        )
    server_cpu, load_cpu = cpus()
    out.emit("# ratekeeper benchmarks: the decision service", "", *report.machine())
    out.emit("", "## The decision service under load", "")
    with tempfile.TemporaryDirectory(prefix="ratekeeper-bench-service-") as name:
        directory = Path(name)
        (directory / "rules.yaml").write_text(RULES)
        measured = _measure(out, sizes, directory, server_cpu, load_cpu)
        stack = _stack(directory / "baseline.log")
    _emit(out, sizes, measured, stack, (server_cpu, load_cpu))


def _serve(store: str) -> list[str]:
    return [
        sys.executable, "-m", "ratekeeper.cli", "serve", "--store", store,
        "--rules", "rules.yaml", "--config", "sqlite:///config.db",
    ]  # fmt: skip


def _measure(
    out: Output,
    sizes: ServiceSizes,
    directory: Path,
    server_cpu: str | None,
    load_cpu: str | None,
) -> dict[Row, Measured]:
    measured = {row: Measured() for row in ROWS}
    with RedisServer() as redis_server:
        process = redis_server.process
        if load_cpu is not None and process is not None:
            command = ["taskset", "-pc", load_cpu, str(process.pid)]
            subprocess.run(command, capture_output=True, check=True)
        baseline = [sys.executable, "-m", "benchmarks.service_baseline"]
        with (
            Server("baseline", baseline, directory, server_cpu) as hello,
            Server("memory", _serve("memory://"), directory, server_cpu) as memory,
            Server("redis", _serve(redis_server.url), directory, server_cpu) as redis,
        ):
            servers = {BASELINE: hello, MEMORY: memory, REDIS: redis}
            for round_number in range(sizes.rounds):
                order = ROWS if round_number % 2 == 0 else ROWS[::-1]
                for index, row in enumerate(order):
                    out.progress(f"round {round_number + 1}/{sizes.rounds}: {row.label}")
                    tag = f"r{round_number}-{index}"
                    measurement = Measurement(row, servers[row.server], sizes, tag)
                    try:
                        measured[row].results.append(measurement.run(load_cpu))
                    except LoadError as error:
                        raise BenchmarkError(f"{row.label}: {error}") from None
    return measured


def _emit(
    out: Output,
    sizes: ServiceSizes,
    measured: dict[Row, Measured],
    stack: str,
    pinned: tuple[str | None, str | None],
) -> None:
    server_cpu, load_cpu = pinned
    pinning = (
        f"the three server processes on CPU {server_cpu} (`taskset`), the load generator and "
        f"redis-server on CPU {load_cpu}"
        if server_cpu is not None
        else "nothing pinned (fewer than 2 CPUs, or no taskset)"
    )
    out.emit(
        f"- Server stack (both): uvicorn with `ratekeeper serve`'s options, {stack}; gRPC "
        "`grpc.aio` on the same event loop. One process each.",
        f"- Libraries: {_versions()}",
        f"- Load generators: {_tool_versions()}",
        f"- Pinning: {pinning}.",
        f"- {sizes.connections} connections (h2load: one stream each), one generator thread; "
        f"{sizes.seconds:g} s per measurement after {sizes.warmup:g} s of warm-up; "
        f"{sizes.rounds} round(s), each row's best kept.",
        "",
    )
    baselines = {row.surface: measured[row] for row in ROWS if row.shape == "hello"}
    rows = []
    for row in ROWS:
        result, baseline = measured[row], baselines[row.surface]
        best = result.best.load
        ratio = best.rate / baseline.best.load.rate
        target = report.MISSING
        if row.server != BASELINE and not row.refused:
            target = "✓" if ratio >= TARGET else "✗"
        rounds = ", ".join(f"{one.load.rate:,.0f}" for one in result.results)
        rows.append([
            row.surface, row.shape, row.server, f"{best.rate:,.0f}", _ms(best.p50), _ms(best.p99),
            f"{ratio:.2f}x", target, f"{result.cpu * 1e6:,.0f}",
            f"{baseline.cpu / result.cpu:.2f}x", rounds,
        ])  # fmt: skip
    out.emit(*report.table(HEADERS, rows))
    out.emit(
        "",
        "*/ hello world* is the row's requests per second over its surface's hello world's (best "
        "round each), against the target. *CPU µs / request* is the server process's CPU time "
        "(user and system, all threads, from `/proc`) over the timed run, per request, the "
        "least over the rounds; *CPU ratio* is the hello world's over the row's: it is what the "
        "throughput ratio would be on an otherwise idle CPU, and is less disturbed by other "
        "work on the machine. *Each round* shows how far the rounds spread.",
    )
    out.emit("", "Requests:", "")
    for (surface, shape), text in SHAPES.items():
        out.emit(f"- {surface} {shape}: {text}")
